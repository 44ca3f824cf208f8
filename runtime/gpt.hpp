// runtime/gpt.hpp — a GPT-2-style decoder-only transformer built on a kernels::backend.
//
// Architecture (Radford et al. 2019, "Language Models are Unsupervised Multitask Learners";
// layout after karpathy/llm.c): token + position embedding; `layers` pre-LN blocks
//   x = x + proj(attn(qkv(ln_1(x))));   x = x + proj(gelu(fc(ln_2(x))))   (fc: C -> 4C)
// a final layer norm ln_f, and an LM head TIED to the token embedding wte (logits = ln_f(x)·wteᵀ,
// as in GPT-2: no separate head matrix). Loss: mean softmax cross-entropy in nats.
//
// All parameters live in ONE flat float32 buffer on the backend, described by tensors(); the
// gradients live in a second flat buffer with the same layout. Activations are allocated once per
// (B, T) and reused. Who may call: the single thread that owns the backend (a learner, the train
// command, an evaluator); the object is move-only (it owns device buffers).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/backend.hpp"
#include "runtime/gpt_config.hpp"
#include "runtime/model.hpp"
#include "runtime/tensor_info.hpp"
#include "runtime/transformer_block.hpp"

namespace dd {

/// Parameter layout of a config, without allocating anything. Order: wte (V,C), wpe (maxT,C),
/// then per block i: h.i.ln_1.{weight,bias} (C), h.i.attn.qkv.weight (3C,C), .bias (3C),
/// h.i.attn.proj.weight (C,C), .bias (C), h.i.ln_2.{weight,bias} (C), h.i.mlp.fc.weight (4C,C),
/// .bias (4C), h.i.mlp.proj.weight (C,4C), .bias (C); then ln_f.{weight,bias} (C).
/// wte/wpe are is_embedding; decay = true exactly for 2-D tensors (embeddings included, as in
/// GPT-2/nanoGPT); layer = block index or -1.
std::vector<tensor_info> gpt_tensors(const gpt_config& cfg);

/// Total parameter count of a config (sum of numel over gpt_tensors).
size_t gpt_num_params(const gpt_config& cfg);

/// Model FLOPs per trained token (forward + backward), the accounting used by the bench:
/// 6·N_matmul + 6·L·T·C with N_matmul = L·12·C² + V·C (block matmul weights plus the tied LM
/// head; the embedding lookup and biases/norms are not matmuls) — Kaplan et al. 2020, Table 1,
/// with the attention term counted CAUSALLY (QKᵀ and A·V only over the lower triangle, on
/// average T/2 keys per query: 2·2·L·(T/2)·C forward, ×3 for forward+backward).
double gpt_flops_per_token(const gpt_config& cfg, int T);

/// The model (kind "gpt"). Move-only; bound to one backend that must outlive it.
class gpt : public model {
 public:
  /// Allocates parameters and gradients (zero) on `be`. Call init() or set_parameters() next.
  /// Throws std::invalid_argument for a bad config, kernels::backend_error on allocation failure.
  gpt(kernels::backend& be, const gpt_config& cfg);
  gpt(gpt&&) noexcept = default;
  gpt& operator=(gpt&&) = delete;
  gpt(const gpt&) = delete;
  gpt& operator=(const gpt&) = delete;

  /// GPT-2 initialization from `seed` (Radford et al. 2019, §2.3; nanoGPT's _init_weights):
  /// every 2-D weight ~ N(0, 0.02²), the residual projections (attn.proj.weight, mlp.proj.weight)
  /// ~ N(0, (0.02/sqrt(2·layers))²), biases 0, layer-norm weights 1. Normals come from one
  /// dd::rng stream seeded with `seed`, consumed tensor by tensor in tensors() order, row-major,
  /// one rng::normal() per element of each normally-initialized tensor (none for the others).
  void init(uint64_t seed) override;

  /// {kind "gpt", the shape}.
  model_config config() const override { return model_config(cfg_); }
  /// The transformer shape.
  const gpt_config& shape() const noexcept { return cfg_; }

  /// gpt_flops_per_token(shape(), T) · T.
  double flops_per_sample(int T) const override;

  using model::forward;
  /// Forward pass on a (B, T) batch of token ids (host, row-major, B·T values in [0, vocab)),
  /// with next-token targets of the same shape. Returns the mean cross-entropy in nats/token.
  /// Keeps the activations for backward(). Throws std::invalid_argument when B < 1, T < 1,
  /// T > context, a vector's size is not B·T, or an id is out of range (naming the position).
  double forward(const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets, int B,
                 int T);
  /// forward(batch.inputs, batch.targets, batch.B, batch.T).
  double forward(const model_batch& batch) override;

  /// Logits (vocab) of row `row` = b·T + t of the last completed forward(): the unnormalized
  /// next-token scores after position t of sequence b (the sampler reads them). Throws
  /// std::logic_error when no forward() has completed, std::out_of_range when row >= B·T.
  std::vector<float> logits(size_t row) const;

  /// Backward pass of the last forward(). ACCUMULATES into grads() (call zero_grad() first for a
  /// fresh gradient). Throws std::logic_error when no forward() with targets preceded it.
  void backward() override;

 private:
  void ensure_activations(int B, int T);

  gpt_config cfg_;

  // Activations for the current (B, T); allocated by ensure_activations().
  int act_B_ = 0, act_T_ = 0;
  bool have_forward_ = false;
  bool have_logits_ = false;  // head_.logits holds the last completed forward's scores
  kernels::buffer<float> encoded_;
  std::vector<block_activations> acts_;
  block_scratch scratch_;  // forward tmp and backward scratch, reused by every block
  tied_lm_head head_;
  kernels::buffer<float> dres_;
};

}  // namespace dd
