// kernels/detail/host_backend.cpp — host memory and the ViT glue ops for the reference and cpu
// backends.
#include "kernels/detail/host_backend.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace dd::kernels::detail {

void* host_backend::allocate_bytes(size_t n) {
  const size_t rounded = (n + host_alignment - 1) / host_alignment * host_alignment;
  void* p = std::aligned_alloc(host_alignment, rounded == 0 ? host_alignment : rounded);
  if (p == nullptr) {
    throw backend_error(name() + ": allocate_bytes: out of host memory allocating " +
                        std::to_string(n) + " bytes");
  }
  std::memset(p, 0, rounded == 0 ? host_alignment : rounded);
  return p;
}

void host_backend::free_bytes(void* p) noexcept { std::free(p); }

void host_backend::upload_bytes(void* dst, const void* src_host, size_t n) {
  if (n != 0) std::memcpy(dst, src_host, n);
}

void host_backend::download_bytes(void* dst_host, const void* src, size_t n) {
  if (n != 0) std::memcpy(dst_host, src, n);
}

void host_backend::copy_bytes(void* dst, const void* src, size_t n) {
  if (n != 0 && dst != src) std::memmove(dst, src, n);
}

void host_backend::zero_bytes(void* dst, size_t n) {
  if (n != 0) std::memset(dst, 0, n);
}

void host_backend::vit_embed_forward(float* out, const float* patches, const float* cls,
                                     const float* pos, int B, int P, int C, int ncls) {
  const int T = ncls + P;
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      const float* src = t < ncls ? cls + static_cast<size_t>(t) * C
                                  : patches + (static_cast<size_t>(b) * P + (t - ncls)) * C;
      const float* pe = pos + static_cast<size_t>(t) * C;
      float* o = out + (static_cast<size_t>(b) * T + t) * C;
      for (int c = 0; c < C; ++c) o[c] = src[c] + pe[c];
    }
  }
}

void host_backend::vit_embed_backward(float* dpatches, float* dcls, float* dpos, const float* dout,
                                      int B, int P, int C, int ncls) {
  const int T = ncls + P;
  std::vector<double> acc(static_cast<size_t>(C));
  for (int t = 0; t < T; ++t) {
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int b = 0; b < B; ++b) {
      const float* d = dout + (static_cast<size_t>(b) * T + t) * C;
      for (int c = 0; c < C; ++c) acc[c] += d[c];
      if (t >= ncls) {
        float* dp = dpatches + (static_cast<size_t>(b) * P + (t - ncls)) * C;
        for (int c = 0; c < C; ++c) dp[c] += d[c];
      }
    }
    float* dp = dpos + static_cast<size_t>(t) * C;
    for (int c = 0; c < C; ++c) dp[c] = static_cast<float>(dp[c] + acc[c]);
    if (t < ncls) {
      float* dc = dcls + static_cast<size_t>(t) * C;
      for (int c = 0; c < C; ++c) dc[c] = static_cast<float>(dc[c] + acc[c]);
    }
  }
}

void host_backend::token_mean_forward(float* out, const float* inp, int B, int T, int C, int t0,
                                      int t1) {
  std::vector<double> acc(static_cast<size_t>(C));
  const double inv = 1.0 / (t1 - t0);
  for (int b = 0; b < B; ++b) {
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int t = t0; t < t1; ++t) {
      const float* x = inp + (static_cast<size_t>(b) * T + t) * C;
      for (int c = 0; c < C; ++c) acc[c] += x[c];
    }
    float* o = out + static_cast<size_t>(b) * C;
    for (int c = 0; c < C; ++c) o[c] = static_cast<float>(acc[c] * inv);
  }
}

void host_backend::token_mean_backward(float* dinp, const float* dout, int B, int T, int C, int t0,
                                       int t1) {
  const float inv = 1.0f / static_cast<float>(t1 - t0);
  for (int b = 0; b < B; ++b) {
    const float* d = dout + static_cast<size_t>(b) * C;
    for (int t = t0; t < t1; ++t) {
      float* x = dinp + (static_cast<size_t>(b) * T + t) * C;
      for (int c = 0; c < C; ++c) x[c] += d[c] * inv;
    }
  }
}

}  // namespace dd::kernels::detail
