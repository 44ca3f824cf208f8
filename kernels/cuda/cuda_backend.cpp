// kernels/cuda/cuda_backend.cpp — the CUDA backend: cuBLAS for every matrix product, this
// folder's kernels (cuda_kernels.cu) for everything else. See cuda_backend.hpp for who may
// call it and docs/gpu.md for how it is checked against the reference backend.
//
// All work is queued on the backend's own stream. Ops that hand a value to the host
// (sum_squares, all_finite, download_bytes) and upload_bytes wait for that stream;
// encoder_backward also waits, because it buckets the token ids on the host to make the
// embedding-gradient accumulation deterministic (no atomics; the same summation order as the
// reference backend).
#include "kernels/cuda/cuda_backend.hpp"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <vector>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/cuda_kernels.hpp"
#include "kernels/cuda/device_context.hpp"

namespace dd::kernels {
namespace {

using cuda_detail::device_context;
using cuda_detail::device_workspace;

/// One strided-batched sgemm per head or per batch row, covering every (b, h) pair.
/// Operand X of pair (b, h) starts at X + b*x_sb + h*x_sh. Loops over the smaller of B and NH
/// and batches over the other, so the call count is min(B, NH).
struct bh_gemm {
  cublasOperation_t transa, transb;
  int m, n, k;
  float alpha;
  const float* a;
  int lda;
  long long a_sb, a_sh;
  const float* b;
  int ldb;
  long long b_sb, b_sh;
  float beta;
  float* c;
  int ldc;
  long long c_sb, c_sh;
};

/// The geometry of causal attention over packed QKV (B, T, 3C) with NH heads of hs = C / NH
/// columns: the row width C3 = 3C, the element strides per batch row of qkv, of out (B, T, C)
/// and of att (B, NH, T, T), att's per head, and the logits' scale 1/sqrt(hs).
struct attention_geometry {
  attention_geometry(int T, int C, int NH)
      : hs(C / NH),
        C3(3 * C),
        qkv_sb(static_cast<long long>(T) * C3),
        out_sb(static_cast<long long>(T) * C),
        att_sb(static_cast<long long>(NH) * T * T),
        att_sh(static_cast<long long>(T) * T),
        scale(1.0f / std::sqrt(static_cast<float>(hs))) {}
  int hs, C3;
  long long qkv_sb, out_sb, att_sb, att_sh;
  float scale;
};

class cuda_backend final : public backend {
 public:
  explicit cuda_backend(int device) : ctx_(device) {}

  std::string name() const override { return "cuda"; }

  // ---- memory -------------------------------------------------------------------------------
  void* allocate_bytes(size_t n) override {
    const char* op = "allocate_bytes";
    ctx_.make_current(op);
    if (n == 0) return nullptr;
    void* p = nullptr;
    DD_CUDA_CHECK(op, cudaMalloc(&p, n));
    const cudaError_t err = cudaMemsetAsync(p, 0, n, ctx_.stream());
    if (err != cudaSuccess) {
      (void)cudaFree(p);
      DD_CUDA_CHECK(op, err);
    }
    return p;
  }

  void free_bytes(void* p) noexcept override {
    if (p == nullptr) return;
    int current = -1;
    if (cudaGetDevice(&current) == cudaSuccess && current != ctx_.device()) {
      (void)cudaSetDevice(ctx_.device());
    }
    (void)cudaFree(p);  // waits for the device; queued ops that use p complete first
  }

  void upload_bytes(void* dst, const void* src_host, size_t n) override {
    const char* op = "upload_bytes";
    if (n == 0) return;
    ctx_.make_current(op);
    DD_CUDA_CHECK(op, cudaMemcpyAsync(dst, src_host, n, cudaMemcpyHostToDevice, ctx_.stream()));
    ctx_.synchronize(op);  // the caller may reuse src_host as soon as we return
  }

  void download_bytes(void* dst_host, const void* src, size_t n) override {
    const char* op = "download_bytes";
    if (n == 0) return;
    ctx_.make_current(op);
    DD_CUDA_CHECK(op, cudaMemcpyAsync(dst_host, src, n, cudaMemcpyDeviceToHost, ctx_.stream()));
    ctx_.synchronize(op);
  }

  void copy_bytes(void* dst, const void* src, size_t n) override {
    const char* op = "copy_bytes";
    if (n == 0 || dst == src) return;
    ctx_.make_current(op);
    DD_CUDA_CHECK(op, cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, ctx_.stream()));
  }

  void zero_bytes(void* dst, size_t n) override {
    const char* op = "zero_bytes";
    if (n == 0) return;
    ctx_.make_current(op);
    DD_CUDA_CHECK(op, cudaMemsetAsync(dst, 0, n, ctx_.stream()));
  }

  void synchronize() override {
    const char* op = "synchronize";
    ctx_.make_current(op);
    ctx_.synchronize(op);
  }

  // ---- transformer forward / backward --------------------------------------------------------
  void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                       int T, int C) override {
    const char* op = "encoder_forward";
    ctx_.make_current(op);
    cuda_detail::launch_encoder_forward(ctx_.stream(), op, out, tokens, wte, wpe, B, T, C);
  }

  void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                        int T, int C) override {
    const char* op = "encoder_backward";
    ctx_.make_current(op);
    const int bt = B * T;
    if (bt == 0 || C == 0) return;
    cuda_detail::launch_encoder_backward_wpe(ctx_.stream(), op, dwpe, dout, B, T, C);

    // Bucket positions by token on the host: positions of one token are summed in ascending
    // order by one thread per channel, the order the reference backend uses.
    token_host_.resize(static_cast<size_t>(bt));
    DD_CUDA_CHECK(op, cudaMemcpyAsync(token_host_.data(), tokens, sizeof(int32_t) * bt,
                                      cudaMemcpyDeviceToHost, ctx_.stream()));
    ctx_.synchronize(op);
    order_.resize(static_cast<size_t>(bt));
    std::iota(order_.begin(), order_.end(), 0);
    std::stable_sort(order_.begin(), order_.end(),
                     [&](int32_t x, int32_t y) { return token_host_[x] < token_host_[y]; });
    // Layout of bucket_host_: bucket tokens (nb) | bucket starts (nb + 1) | positions (bt).
    std::vector<int32_t>& toks = bucket_tokens_;
    std::vector<int32_t>& starts = bucket_starts_;
    toks.clear();
    starts.clear();
    for (int i = 0; i < bt; ++i) {
      const int32_t tok = token_host_[order_[i]];
      if (toks.empty() || toks.back() != tok) {
        toks.push_back(tok);
        starts.push_back(i);
      }
    }
    starts.push_back(bt);
    const int nb = static_cast<int>(toks.size());
    bucket_host_.clear();
    bucket_host_.insert(bucket_host_.end(), toks.begin(), toks.end());
    bucket_host_.insert(bucket_host_.end(), starts.begin(), starts.end());
    bucket_host_.insert(bucket_host_.end(), order_.begin(), order_.end());
    auto* dev =
        static_cast<int32_t*>(encoder_ws_.reserve(bucket_host_.size() * sizeof(int32_t), op));
    // bucket_host_ stays untouched until the next encoder_backward, which synchronizes the
    // stream (token download above) before rewriting it, so the async copy is safe.
    DD_CUDA_CHECK(op,
                  cudaMemcpyAsync(dev, bucket_host_.data(), bucket_host_.size() * sizeof(int32_t),
                                  cudaMemcpyHostToDevice, ctx_.stream()));
    cuda_detail::launch_encoder_backward_wte(ctx_.stream(), op, dwte, dout, dev, dev + nb,
                                             dev + 2 * nb + 1, nb, C);
  }

  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                         const float* weight, const float* bias, int N, int C) override {
    const char* op = "layernorm_forward";
    ctx_.make_current(op);
    cuda_detail::launch_layernorm_forward(ctx_.stream(), op, out, mean, rstd, inp, weight, bias, N,
                                          C);
  }

  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const float* weight, const float* mean,
                          const float* rstd, int N, int C) override {
    const char* op = "layernorm_backward";
    ctx_.make_current(op);
    cuda_detail::launch_layernorm_backward_dinp(ctx_.stream(), op, dinp, dout, inp, weight, mean,
                                                rstd, N, C);
    cuda_detail::launch_layernorm_backward_params(ctx_.stream(), op, dweight, dbias, dout, inp,
                                                  mean, rstd, N, C);
  }

  void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                      int IC, int OC) override {
    const char* op = "matmul_forward";
    ctx_.make_current(op);
    if (N == 0 || OC == 0) return;
    if (IC == 0) {
      DD_CUDA_CHECK(op, cudaMemsetAsync(out, 0, sizeof(float) * N * OC, ctx_.stream()));
    } else {
      // Column-major view: out_cm (OC x N) = W_cm(IC x OC)ᵀ · inp_cm (IC x N).
      const float one = 1.0f;
      const float zero = 0.0f;
      DD_CUBLAS_CHECK(op, cublasSgemm(ctx_.cublas(), CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, &one,
                                      weight, IC, inp, IC, &zero, out, OC));
    }
    if (bias != nullptr) cuda_detail::launch_add_bias(ctx_.stream(), op, out, bias, N, OC);
  }

  void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                       const float* inp, const float* weight, int N, int IC, int OC) override {
    const char* op = "matmul_backward";
    ctx_.make_current(op);
    if (N == 0 || OC == 0) return;
    const float one = 1.0f;
    if (IC > 0) {
      if (dinp != nullptr) {
        // dinp_cm (IC x N) += W_cm (IC x OC) · dout_cm (OC x N).
        DD_CUBLAS_CHECK(op, cublasSgemm(ctx_.cublas(), CUBLAS_OP_N, CUBLAS_OP_N, IC, N, OC, &one,
                                        weight, IC, dout, OC, &one, dinp, IC));
      }
      if (dweight != nullptr) {
        // dW_cm (IC x OC) += inp_cm (IC x N) · dout_cm (OC x N)ᵀ.
        DD_CUBLAS_CHECK(op, cublasSgemm(ctx_.cublas(), CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, N, &one,
                                        inp, IC, dout, OC, &one, dweight, IC));
      }
    }
    if (dbias != nullptr) cuda_detail::launch_bias_backward(ctx_.stream(), op, dbias, dout, N, OC);
  }

  void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C,
                         int NH) override {
    const char* op = "attention_forward";
    ctx_.make_current(op);
    if (B == 0 || T == 0 || C == 0 || NH == 0) return;
    const auto [hs, C3, qkv_sb, out_sb, att_sb, att_sh, scale] = attention_geometry(T, C, NH);
    // preatt (T x T, row-major) = scale · Q Kᵀ; column-major: att_cm = Kᵀ_cm-op · Q_cm.
    run_bh(op, B, NH,
           {CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, scale, qkv + C, C3, qkv_sb, hs, qkv, C3, qkv_sb, hs,
            0.0f, att, T, att_sb, att_sh});
    cuda_detail::launch_causal_softmax(ctx_.stream(), op, att, B * NH * T, T);
    // out_h (T x hs, ld C) = att · V_h; column-major: out_cm = V_cm · att_cm.
    run_bh(op, B, NH,
           {CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, 1.0f, qkv + 2 * C, C3, qkv_sb, hs, att, T, att_sb,
            att_sh, 0.0f, out, C, out_sb, hs});
  }

  void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                          const float* att, int B, int T, int C, int NH) override {
    const char* op = "attention_backward";
    ctx_.make_current(op);
    if (B == 0 || T == 0 || C == 0 || NH == 0) return;
    const auto [hs, C3, qkv_sb, out_sb, att_sb, att_sh, scale] = attention_geometry(T, C, NH);
    const float* q = qkv;
    const float* k = qkv + C;
    const float* v = qkv + 2 * C;
    float* dq = dqkv;
    float* dk = dqkv + C;
    float* dv = dqkv + 2 * C;
    // datt (T x T) = dout_h · V_hᵀ  (written into scratch).
    run_bh(op, B, NH,
           {CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, 1.0f, v, C3, qkv_sb, hs, dout, C, out_sb, hs, 0.0f,
            scratch, T, att_sb, att_sh});
    // dV_h += attᵀ · dout_h.
    run_bh(op, B, NH,
           {CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, 1.0f, dout, C, out_sb, hs, att, T, att_sb, att_sh,
            1.0f, dv, C3, qkv_sb, hs});
    // dpreatt = scale · softmax'(datt), in place.
    cuda_detail::launch_causal_softmax_backward(ctx_.stream(), op, scratch, att, B * NH * T, T,
                                                scale);
    // dQ_h += dpreatt · K_h.
    run_bh(op, B, NH,
           {CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, 1.0f, k, C3, qkv_sb, hs, scratch, T, att_sb, att_sh,
            1.0f, dq, C3, qkv_sb, hs});
    // dK_h += dpreattᵀ · Q_h.
    run_bh(op, B, NH,
           {CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, 1.0f, q, C3, qkv_sb, hs, scratch, T, att_sb, att_sh,
            1.0f, dk, C3, qkv_sb, hs});
  }

  void gelu_forward(float* out, const float* inp, size_t N) override {
    const char* op = "gelu_forward";
    ctx_.make_current(op);
    cuda_detail::launch_gelu_forward(ctx_.stream(), op, out, inp, N);
  }

  void gelu_backward(float* dinp, const float* inp, const float* dout, size_t N) override {
    const char* op = "gelu_backward";
    ctx_.make_current(op);
    cuda_detail::launch_gelu_backward(ctx_.stream(), op, dinp, inp, dout, N);
  }

  void residual_forward(float* out, const float* a, const float* b, size_t N) override {
    const char* op = "residual_forward";
    ctx_.make_current(op);
    cuda_detail::launch_residual_forward(ctx_.stream(), op, out, a, b, N);
  }

  void softmax_crossentropy_forward(float* losses, float* probs, const float* logits,
                                    const int32_t* targets, int N, int V) override {
    const char* op = "softmax_crossentropy_forward";
    ctx_.make_current(op);
    cuda_detail::launch_softmax_crossentropy_forward(ctx_.stream(), op, losses, probs, logits,
                                                     targets, N, V);
  }

  void softmax_crossentropy_backward(float* dlogits, const float* probs, const int32_t* targets,
                                     float dloss, int N, int V) override {
    const char* op = "softmax_crossentropy_backward";
    ctx_.make_current(op);
    cuda_detail::launch_softmax_crossentropy_backward(ctx_.stream(), op, dlogits, probs, targets,
                                                      dloss, N, V);
  }

  // ---- optimizer ----------------------------------------------------------------------------
  void adamw_update(float* params, const float* grads, float* m, float* v, size_t n,
                    const adamw_params& p) override {
    const char* op = "adamw_update";
    ctx_.make_current(op);
    const auto t = static_cast<double>(p.step);
    const double bc1 = 1.0 - std::pow(static_cast<double>(p.beta1), t);
    const double bc2 = 1.0 - std::pow(static_cast<double>(p.beta2), t);
    cuda_detail::launch_adamw(ctx_.stream(), op, params, grads, m, v, n, p.lr, p.beta1, p.beta2,
                              p.eps, p.weight_decay, bc1, bc2);
  }

  double sum_squares(const float* x, size_t n) override {
    const char* op = "sum_squares";
    ctx_.make_current(op);
    if (n == 0) return 0.0;
    auto* scratch = static_cast<double*>(
        reduce_ws_.reserve(cuda_detail::sum_squares_scratch_doubles() * sizeof(double), op));
    cuda_detail::launch_sum_squares(ctx_.stream(), op, scratch, x, n);
    double result = 0.0;
    DD_CUDA_CHECK(op, cudaMemcpyAsync(&result, scratch, sizeof(double), cudaMemcpyDeviceToHost,
                                      ctx_.stream()));
    ctx_.synchronize(op);
    return result;
  }

  void scale(float* x, float s, size_t n) override {
    const char* op = "scale";
    ctx_.make_current(op);
    cuda_detail::launch_scale(ctx_.stream(), op, x, s, n);
  }

  bool all_finite(const float* x, size_t n) override {
    const char* op = "all_finite";
    ctx_.make_current(op);
    if (n == 0) return true;
    auto* flag = static_cast<int*>(flag_ws_.reserve(sizeof(int), op));
    // Every byte 1: a nonzero int meaning "all finite" until the kernel stores 0.
    DD_CUDA_CHECK(op, cudaMemsetAsync(flag, 1, sizeof(int), ctx_.stream()));
    cuda_detail::launch_all_finite(ctx_.stream(), op, flag, x, n);
    int result = 0;
    DD_CUDA_CHECK(
        op, cudaMemcpyAsync(&result, flag, sizeof(int), cudaMemcpyDeviceToHost, ctx_.stream()));
    ctx_.synchronize(op);
    return result != 0;
  }

  // ---- syncer math --------------------------------------------------------------------------
  void weighted_sum(float* out, const float* const* inputs, const float* weights, int k,
                    size_t n) override {
    const char* op = "weighted_sum";
    ctx_.make_current(op);
    if (n == 0) return;
    if (k <= 0) {
      DD_CUDA_CHECK(op, cudaMemsetAsync(out, 0, n * sizeof(float), ctx_.stream()));
      return;
    }
    // The pointers travel as kernel arguments, up to weighted_sum_max_inputs per launch; later
    // launches accumulate into out, keeping the ascending-k summation order.
    for (int first = 0; first < k; first += cuda_detail::weighted_sum_max_inputs) {
      const int count = std::min(cuda_detail::weighted_sum_max_inputs, k - first);
      cuda_detail::launch_weighted_sum(ctx_.stream(), op, out, inputs + first, weights + first,
                                       count, n, first > 0);
    }
  }

  void axpy(float* y, float a, const float* x, size_t n) override {
    const char* op = "axpy";
    ctx_.make_current(op);
    cuda_detail::launch_axpy(ctx_.stream(), op, y, a, x, n);
  }

  void nesterov_update(float* theta, float* momentum, const float* delta, float lr, float mu,
                       size_t n) override {
    const char* op = "nesterov_update";
    ctx_.make_current(op);
    cuda_detail::launch_nesterov(ctx_.stream(), op, theta, momentum, delta, lr, mu, n);
  }

 private:
  /// Runs `g` for every (b, h) pair: min(B, NH) strided-batched sgemm calls.
  void run_bh(const char* op, int B, int NH, const bh_gemm& g) {
    const bool loop_heads = NH <= B;
    const int loops = loop_heads ? NH : B;
    const int batch = loop_heads ? B : NH;
    const long long a_step = loop_heads ? g.a_sh : g.a_sb;
    const long long b_step = loop_heads ? g.b_sh : g.b_sb;
    const long long c_step = loop_heads ? g.c_sh : g.c_sb;
    const long long a_stride = loop_heads ? g.a_sb : g.a_sh;
    const long long b_stride = loop_heads ? g.b_sb : g.b_sh;
    const long long c_stride = loop_heads ? g.c_sb : g.c_sh;
    for (int i = 0; i < loops; ++i) {
      DD_CUBLAS_CHECK(op, cublasSgemmStridedBatched(
                              ctx_.cublas(), g.transa, g.transb, g.m, g.n, g.k, &g.alpha,
                              g.a + i * a_step, g.lda, a_stride, g.b + i * b_step, g.ldb, b_stride,
                              &g.beta, g.c + i * c_step, g.ldc, c_stride, batch));
    }
  }

  device_context ctx_;
  device_workspace encoder_ws_;
  device_workspace reduce_ws_;
  device_workspace flag_ws_;
  std::vector<int32_t> token_host_;
  std::vector<int32_t> order_;
  std::vector<int32_t> bucket_tokens_;
  std::vector<int32_t> bucket_starts_;
  std::vector<int32_t> bucket_host_;
};

}  // namespace

std::unique_ptr<backend> make_cuda_backend(const backend_options& opts) {
  return std::make_unique<cuda_backend>(opts.device);
}

int cuda_device_count() noexcept {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // clear the error so later calls do not report it
    return 0;
  }
  return count;
}

bool cuda_device_present() noexcept { return cuda_device_count() > 0; }

std::string cuda_device_description(int device) noexcept {
  try {
    cudaDeviceProp prop{};
    const cudaError_t err = cudaGetDeviceProperties(&prop, device);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      return std::string("device ") + std::to_string(device) + ": " + cudaGetErrorString(err);
    }
    char line[512];
    std::snprintf(line, sizeof(line), "%s, sm_%d%d, %.1f GiB, %d SMs", prop.name, prop.major,
                  prop.minor, static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0),
                  prop.multiProcessorCount);
    return line;
  } catch (...) {
    return "device " + std::to_string(device) + ": (description unavailable)";
  }
}

}  // namespace dd::kernels
