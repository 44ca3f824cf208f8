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
#include "runtime/tensor_info.hpp"
#include "runtime/transformer_block.hpp"

namespace dd {

/// Shape of a GPT. Defaults are the project's Tiny-Shakespeare model (0.84M parameters).
struct gpt_config {
  int vocab = 256;    ///< V: vocabulary size (byte-level tokenizer).
  int context = 128;  ///< maxT: longest sequence, rows of wpe.
  int layers = 4;     ///< L: transformer blocks.
  int heads = 4;      ///< NH: attention heads; width must be divisible by heads.
  int width = 128;    ///< C: residual stream width.

  /// Throws std::invalid_argument naming the field when a value is out of range
  /// (every field >= 1, width % heads == 0).
  void validate() const;
  /// {"vocab":..,"context":..,"layers":..,"heads":..,"width":..}
  nlohmann::json to_json() const;
  /// Reads the five fields (all required); throws std::invalid_argument naming a missing or
  /// non-integer field, then validate()s.
  static gpt_config from_json(const nlohmann::json& j);
  bool operator==(const gpt_config& o) const {
    return vocab == o.vocab && context == o.context && layers == o.layers && heads == o.heads &&
           width == o.width;
  }
  bool operator!=(const gpt_config& o) const { return !(*this == o); }
};

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

/// The model. Move-only; bound to one backend that must outlive it.
class gpt {
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
  void init(uint64_t seed);

  const gpt_config& config() const noexcept { return cfg_; }
  /// Named views into the flat parameter (and gradient) buffer; see gpt_tensors().
  const std::vector<tensor_info>& tensors() const noexcept { return tensors_; }
  /// Looks a tensor up by name; throws std::out_of_range naming it when absent.
  const tensor_info& tensor(const std::string& name) const;
  /// Number of parameters (floats).
  size_t num_params() const noexcept { return params_.size(); }
  kernels::backend& backend() const noexcept { return *be_; }

  /// Flat parameter / gradient buffers in the backend's memory space, (num_params()).
  float* params() noexcept { return params_.data(); }
  const float* params() const noexcept { return params_.data(); }
  float* grads() noexcept { return grads_.data(); }
  const float* grads() const noexcept { return grads_.data(); }

  /// Copies the whole parameter vector to / from host memory, (num_params()). set_ throws
  /// std::invalid_argument when the size differs.
  std::vector<float> get_parameters() const;
  void set_parameters(const std::vector<float>& host);
  /// Copies the elements [offset, offset + n) of the flat parameter vector to / from host.
  /// Throws std::out_of_range when the range exceeds num_params().
  void read_parameters(size_t offset, size_t n, float* host) const;
  void write_parameters(size_t offset, size_t n, const float* host);
  /// Whole gradient vector to host, (num_params()).
  std::vector<float> get_gradients() const;

  /// Forward pass on a (B, T) batch of token ids (host, row-major, B·T values in [0, vocab)),
  /// with next-token targets of the same shape. Returns the mean cross-entropy in nats/token.
  /// Keeps the activations for backward(). Throws std::invalid_argument when B < 1, T < 1,
  /// T > context, a vector's size is not B·T, or an id is out of range (naming the position).
  double forward(const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets, int B,
                 int T);

  /// Backward pass of the last forward(). ACCUMULATES into grads() (call zero_grad() first for a
  /// fresh gradient). Throws std::logic_error when no forward() with targets preceded it.
  void backward();

  /// Sets every gradient to zero.
  void zero_grad();

 private:
  void ensure_activations(int B, int T);
  float* p(size_t tensor_index) { return params_.data() + tensors_[tensor_index].offset; }
  float* g(size_t tensor_index) { return grads_.data() + tensors_[tensor_index].offset; }

  kernels::backend* be_;
  gpt_config cfg_;
  std::vector<tensor_info> tensors_;
  kernels::buffer<float> params_;
  kernels::buffer<float> grads_;

  // Activations for the current (B, T); allocated by ensure_activations().
  int act_B_ = 0, act_T_ = 0;
  bool have_forward_ = false;
  kernels::buffer<int32_t> tokens_, targets_;
  kernels::buffer<float> encoded_;
  std::vector<block_activations> acts_;
  block_scratch scratch_;  // forward tmp and backward scratch, reused by every block
  kernels::buffer<float> lnf_, lnf_mean_, lnf_rstd_, logits_, probs_, losses_;
  kernels::buffer<float> dres_, dlogits_;
};

}  // namespace dd
