// tools/bench/profiling_backend.hpp — a kernels::backend that forwards every op to another
// backend and adds up the wall time of each (dd-bench-train --profile). Host backends run their
// ops synchronously, so an op's wall time is its cost. Matmuls are keyed by shape as well, so the
// LM head and each block matmul show apart. Only for benchmarks: one map lookup per op.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <utility>

#include "kernels/backend.hpp"

namespace dd::bench {

class profiling_backend final : public kernels::backend {
 public:
  struct entry {
    double seconds = 0.0;
    long calls = 0;
    double flops = 0.0;  ///< matmuls only: 2·N·IC·OC forward, 4·N·IC·OC backward
  };

  explicit profiling_backend(kernels::backend& inner) : in_(&inner) {}

  /// Op name (matmuls: "matmul_forward IC->OC") → accumulated time, calls and FLOPs.
  const std::map<std::string, entry>& entries() const { return entries_; }
  void reset() { entries_.clear(); }

  std::string name() const override { return in_->name(); }
  void* allocate_bytes(size_t n) override { return in_->allocate_bytes(n); }
  void free_bytes(void* p) noexcept override { in_->free_bytes(p); }
  void upload_bytes(void* d, const void* s, size_t n) override {
    timed("upload", [&] { in_->upload_bytes(d, s, n); });
  }
  void download_bytes(void* d, const void* s, size_t n) override {
    timed("download", [&] { in_->download_bytes(d, s, n); });
  }
  void copy_bytes(void* d, const void* s, size_t n) override {
    timed("copy", [&] { in_->copy_bytes(d, s, n); });
  }
  void zero_bytes(void* d, size_t n) override {
    timed("zero", [&] { in_->zero_bytes(d, n); });
  }
  void synchronize() override { in_->synchronize(); }

  void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                       int T, int C) override {
    timed("encoder_forward", [&] { in_->encoder_forward(out, tokens, wte, wpe, B, T, C); });
  }
  void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                        int T, int C) override {
    timed("encoder_backward", [&] { in_->encoder_backward(dwte, dwpe, dout, tokens, B, T, C); });
  }
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                         const float* weight, const float* bias, int N, int C) override {
    timed("layernorm_forward",
          [&] { in_->layernorm_forward(out, mean, rstd, inp, weight, bias, N, C); });
  }
  void residual_layernorm_forward(float* res, float* out, float* mean, float* rstd, const float* a,
                                  const float* b, const float* weight, const float* bias, int N,
                                  int C) override {
    timed("residual_layernorm_forward",
          [&] { in_->residual_layernorm_forward(res, out, mean, rstd, a, b, weight, bias, N, C); });
  }
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const float* weight, const float* mean,
                          const float* rstd, int N, int C) override {
    timed("layernorm_backward", [&] {
      in_->layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
    });
  }
  void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                      int IC, int OC) override {
    timed(
        shape_key("matmul_forward", IC, OC),
        [&] { in_->matmul_forward(out, inp, weight, bias, N, IC, OC); }, 2.0 * N * IC * OC);
  }
  void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                       const float* inp, const float* weight, int N, int IC, int OC) override {
    timed(
        shape_key("matmul_backward", IC, OC),
        [&] { in_->matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, IC, OC); },
        4.0 * N * IC * OC);
  }
  // The writing variant is timed under the same name: it is the same product.
  void matmul_backward_writes_dinp(float* dinp, float* dweight, float* dbias, const float* dout,
                                   const float* inp, const float* weight, int N, int IC,
                                   int OC) override {
    timed(
        shape_key("matmul_backward", IC, OC),
        [&] {
          in_->matmul_backward_writes_dinp(dinp, dweight, dbias, dout, inp, weight, N, IC, OC);
        },
        4.0 * N * IC * OC);
  }
  void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C,
                         int NH) override {
    timed("attention_forward", [&] { in_->attention_forward(out, att, qkv, B, T, C, NH); });
  }
  void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                          const float* att, int B, int T, int C, int NH) override {
    timed("attention_backward",
          [&] { in_->attention_backward(dqkv, scratch, dout, qkv, att, B, T, C, NH); });
  }
  void attention_forward_bidirectional(float* out, float* att, const float* qkv, int B, int T,
                                       int C, int NH) override {
    timed("attention_forward_bidirectional",
          [&] { in_->attention_forward_bidirectional(out, att, qkv, B, T, C, NH); });
  }
  void attention_backward_bidirectional(float* dqkv, float* scratch, const float* dout,
                                        const float* qkv, const float* att, int B, int T, int C,
                                        int NH) override {
    timed("attention_backward_bidirectional", [&] {
      in_->attention_backward_bidirectional(dqkv, scratch, dout, qkv, att, B, T, C, NH);
    });
  }
  void vit_embed_forward(float* out, const float* patches, const float* cls, const float* pos,
                         int B, int P, int C, int ncls) override {
    timed("vit_embed_forward",
          [&] { in_->vit_embed_forward(out, patches, cls, pos, B, P, C, ncls); });
  }
  void vit_embed_backward(float* dpatches, float* dcls, float* dpos, const float* dout, int B,
                          int P, int C, int ncls) override {
    timed("vit_embed_backward",
          [&] { in_->vit_embed_backward(dpatches, dcls, dpos, dout, B, P, C, ncls); });
  }
  void token_mean_forward(float* out, const float* inp, int B, int T, int C, int t0,
                          int t1) override {
    timed("token_mean_forward", [&] { in_->token_mean_forward(out, inp, B, T, C, t0, t1); });
  }
  void token_mean_backward(float* dinp, const float* dout, int B, int T, int C, int t0,
                           int t1) override {
    timed("token_mean_backward", [&] { in_->token_mean_backward(dinp, dout, B, T, C, t0, t1); });
  }
  void gelu_forward(float* out, const float* inp, size_t N) override {
    timed("gelu_forward", [&] { in_->gelu_forward(out, inp, N); });
  }
  void gelu_backward(float* dinp, const float* inp, const float* dout, size_t N) override {
    timed("gelu_backward", [&] { in_->gelu_backward(dinp, inp, dout, N); });
  }
  void gelu_backward_writes(float* dinp, const float* inp, const float* dout, size_t N) override {
    timed("gelu_backward", [&] { in_->gelu_backward_writes(dinp, inp, dout, N); });
  }
  void residual_forward(float* out, const float* a, const float* b, size_t N) override {
    timed("residual_forward", [&] { in_->residual_forward(out, a, b, N); });
  }
  void softmax_crossentropy_forward(float* losses, float* probs, const float* logits,
                                    const int32_t* targets, int N, int V) override {
    timed("softmax_crossentropy_forward",
          [&] { in_->softmax_crossentropy_forward(losses, probs, logits, targets, N, V); });
  }
  void softmax_crossentropy_backward(float* dlogits, const float* probs, const int32_t* targets,
                                     float dloss, int N, int V) override {
    timed("softmax_crossentropy_backward",
          [&] { in_->softmax_crossentropy_backward(dlogits, probs, targets, dloss, N, V); });
  }
  void router_forward(float* probs, int32_t* idx, float* gates, const float* logits, int N, int E,
                      int k) override {
    timed("router_forward", [&] { in_->router_forward(probs, idx, gates, logits, N, E, k); });
  }
  void router_backward(float* dlogits, const float* dgates, const float* dprobs, const float* probs,
                       const int32_t* idx, int N, int E, int k) override {
    timed("router_backward",
          [&] { in_->router_backward(dlogits, dgates, dprobs, probs, idx, N, E, k); });
  }
  void moe_assign(int32_t* slot_token, int32_t* assign, int32_t* routed, const int32_t* idx, int N,
                  int E, int k, int capacity) override {
    timed("moe_assign",
          [&] { in_->moe_assign(slot_token, assign, routed, idx, N, E, k, capacity); });
  }
  void moe_gather(float* out, const float* inp, const int32_t* slot_token, int rows,
                  int C) override {
    timed("moe_gather", [&] { in_->moe_gather(out, inp, slot_token, rows, C); });
  }
  void moe_gather_backward(float* dinp, const float* dout, const int32_t* assign, int N, int k,
                           int C) override {
    timed("moe_gather_backward", [&] { in_->moe_gather_backward(dinp, dout, assign, N, k, C); });
  }
  void moe_scatter(float* out, const float* expert_out, const int32_t* assign, const float* gates,
                   int N, int k, int C) override {
    timed("moe_scatter", [&] { in_->moe_scatter(out, expert_out, assign, gates, N, k, C); });
  }
  void moe_scatter_backward(float* dexpert_out, float* dgates, const float* dout,
                            const float* expert_out, const int32_t* assign, const float* gates,
                            int N, int k, int C) override {
    timed("moe_scatter_backward", [&] {
      in_->moe_scatter_backward(dexpert_out, dgates, dout, expert_out, assign, gates, N, k, C);
    });
  }
  void adamw_update(float* params, const float* grads, float* m, float* v, size_t n,
                    const kernels::adamw_params& p) override {
    timed("adamw_update", [&] { in_->adamw_update(params, grads, m, v, n, p); });
  }
  void adamw_update_segments(float* params, float* grads, float* m, float* v,
                             const kernels::adamw_segment* segments, size_t count, float grad_scale,
                             const kernels::adamw_params& p) override {
    timed("adamw_update",
          [&] { in_->adamw_update_segments(params, grads, m, v, segments, count, grad_scale, p); });
  }
  double sum_squares(const float* x, size_t n) override {
    double r = 0.0;
    timed("sum_squares", [&] { r = in_->sum_squares(x, n); });
    return r;
  }
  void scale(float* x, float s, size_t n) override {
    timed("scale", [&] { in_->scale(x, s, n); });
  }
  bool all_finite(const float* x, size_t n) override {
    bool r = false;
    timed("all_finite", [&] { r = in_->all_finite(x, n); });
    return r;
  }
  void weighted_sum(float* out, const float* const* inputs, const float* weights, int k,
                    size_t n) override {
    timed("weighted_sum", [&] { in_->weighted_sum(out, inputs, weights, k, n); });
  }
  void axpy(float* y, float a, const float* x, size_t n) override {
    timed("axpy", [&] { in_->axpy(y, a, x, n); });
  }
  void nesterov_update(float* theta, float* momentum, const float* delta, float lr, float mu,
                       size_t n) override {
    timed("nesterov_update", [&] { in_->nesterov_update(theta, momentum, delta, lr, mu, n); });
  }

 private:
  static std::string shape_key(const char* op, int IC, int OC) {
    return std::string(op) + " " + std::to_string(IC) + "->" + std::to_string(OC);
  }
  template <class F>
  void timed(const std::string& key, F&& f, double flops = 0.0) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    entry& e = entries_[key];
    e.seconds += s;
    e.calls += 1;
    e.flops += flops;
  }

  kernels::backend* in_;
  std::map<std::string, entry> entries_;
};

}  // namespace dd::bench
