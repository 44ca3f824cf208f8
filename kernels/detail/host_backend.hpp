// kernels/detail/host_backend.hpp — memory management shared by the host backends (reference
// and cpu), and their ViT glue ops: 64-byte aligned, zero-filled host allocations and plain
// memcpy/memset transfers. Internal to kernels/; callers use backend.hpp.
#pragma once

#include <cstddef>

#include "kernels/backend.hpp"

namespace dd::kernels::detail {

/// Alignment of every host allocation, in bytes (one cache line; enough for AVX-512 loads).
inline constexpr size_t host_alignment = 64;

/// The router's top-k on one token's logits z (E of them; backend.hpp router_forward): the
/// largest, and of the others the largest (k = 2). Strictly greater wins, so ties go to the lower
/// expert index. (On the logits: softmax is monotone.)
inline int router_first(const float* z, int E) {
  int first = 0;
  for (int e = 1; e < E; ++e)
    if (z[e] > z[first]) first = e;
  return first;
}
inline int router_second(const float* z, int E, int first) {
  int second = first == 0 ? 1 : 0;
  for (int e = 0; e < E; ++e)
    if (e != first && z[e] > z[second]) second = e;
  return second;
}

/// A backend whose memory space is ordinary host memory. Ops are left to subclasses.
class host_backend : public backend {
 public:
  /// Allocates `n` bytes (rounded up to host_alignment), zero-filled. Throws backend_error
  /// naming the size when the allocation fails.
  void* allocate_bytes(size_t n) override;
  void free_bytes(void* p) noexcept override;
  void upload_bytes(void* dst, const void* src_host, size_t n) override;
  void download_bytes(void* dst_host, const void* src, size_t n) override;
  void copy_bytes(void* dst, const void* src, size_t n) override;
  void zero_bytes(void* dst, size_t n) override;

  // ViT token assembly and pooling (backend.hpp): plain loops shared by reference and cpu
  // (memory-bound, O(B·T·C)); sums over the batch are accumulated in double.
  void vit_embed_forward(float* out, const float* patches, const float* cls, const float* pos,
                         int B, int P, int C, int ncls) override;
  void vit_embed_backward(float* dpatches, float* dcls, float* dpos, const float* dout, int B,
                          int P, int C, int ncls) override;
  void token_mean_forward(float* out, const float* inp, int B, int T, int C, int t0,
                          int t1) override;
  void token_mean_backward(float* dinp, const float* dout, int B, int T, int C, int t0,
                           int t1) override;

  // The four attention ops of backend.hpp, each one of the two below with its mask.
  void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C,
                         int NH) override {
    attention_fwd(out, att, qkv, B, T, C, NH, true);
  }
  void attention_forward_bidirectional(float* out, float* att, const float* qkv, int B, int T,
                                       int C, int NH) override {
    attention_fwd(out, att, qkv, B, T, C, NH, false);
  }
  void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                          const float* att, int B, int T, int C, int NH) override {
    attention_bwd(dqkv, scratch, dout, qkv, att, B, T, C, NH, true);
  }
  void attention_backward_bidirectional(float* dqkv, float* scratch, const float* dout,
                                        const float* qkv, const float* att, int B, int T, int C,
                                        int NH) override {
    attention_bwd(dqkv, scratch, dout, qkv, att, B, T, C, NH, false);
  }

 protected:
  /// Attention forward / backward as backend.hpp's attention ops; causal: row t sees keys
  /// [0, t + 1); otherwise all T keys.
  virtual void attention_fwd(float* out, float* att, const float* qkv, int B, int T, int C, int NH,
                             bool causal) = 0;
  virtual void attention_bwd(float* dqkv, float* scratch, const float* dout, const float* qkv,
                             const float* att, int B, int T, int C, int NH, bool causal) = 0;
};

}  // namespace dd::kernels::detail
