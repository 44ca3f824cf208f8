// runtime/model.hpp — the interface every trainable model implements, and the factory that makes
// one from its config (`model.kind`). The learner, the evaluator, the trainer, checkpoints and the
// fragment plan see models only through this interface; runtime/gpt.hpp (kind "gpt") and
// runtime/moe_gpt.hpp (kind "moe_gpt") implement it. docs/models.md explains how to add another.
//
// A model owns ONE flat float32 parameter buffer on its backend, described by named tensors
// (tensor_info: offset, shape and the flags the merge and the optimizer need: embedding or not,
// decay or not, block index), and a gradient buffer with the same layout. forward() runs a batch
// and returns its mean loss; backward() accumulates the gradient of that loss. Who may call: the
// single thread that owns the backend; models are move-only (they own device buffers).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/backend.hpp"
#include "runtime/gpt_config.hpp"
#include "runtime/tensor_info.hpp"
#include "runtime/vit_config.hpp"

namespace dd {

/// Settings of a mixture-of-experts model (kind "moe_gpt", runtime/moe_gpt.hpp).
struct moe_config {
  int experts = 4;                ///< E: experts per block (>= 2)
  int top_k = 1;                  ///< k: experts per token, 1 or 2 (<= E)
  double capacity_factor = 1.25;  ///< capacity = ceil(capacity_factor · k · N / E) tokens, > 0
  double aux_loss = 0.01;         ///< coefficient of the load-balancing loss, >= 0
  /// Throws std::invalid_argument naming the field ("model.experts", ...) when out of range.
  void validate() const;
  bool operator==(const moe_config& o) const {
    return experts == o.experts && top_k == o.top_k && capacity_factor == o.capacity_factor &&
           aux_loss == o.aux_loss;
  }
};

/// A model's kind and shape: what `model.*` in the DSL resolves to and what a checkpoint stores
/// as its "config" metadata. The transformer shape (gpt_config: vocab, context, layers, heads,
/// width) is shared by every current kind; per-kind settings live in their own members.
struct model_config : gpt_config {
  /// "gpt" (runtime/gpt.hpp), "moe_gpt" (runtime/moe_gpt.hpp) or "vit" (runtime/vit.hpp).
  /// make_model() lists the kinds.
  std::string kind = "gpt";
  /// kind "moe_gpt" only (serialized only for it).
  moe_config moe;
  /// kind "vit" only (serialized only for it): rows, cols, patch, classes, pooling. Its layers,
  /// heads and width are NOT read: the shared fields above are; see vit_shape().
  vit_config vit;

  model_config() = default;
  /// A dense GPT of shape `g` (implicit: code written for gpt_config keeps working).
  model_config(const gpt_config& g) : gpt_config(g) {}  // NOLINT(google-explicit-constructor)

  /// Throws std::invalid_argument naming the field when the kind is unknown or a value is out of
  /// range.
  void validate() const;
  /// {"kind": .., "vocab": .., "context": .., "layers": .., "heads": .., "width": .., <kind's
  /// own fields>}; moe_gpt adds "experts", "top_k", "capacity_factor", "aux_loss"; vit adds
  /// "rows", "cols", "patch", "classes", "pooling".
  nlohmann::json to_json() const;
  /// Inverse of to_json(). A missing "kind" means "gpt" (checkpoints written before kinds
  /// existed). Throws std::invalid_argument naming a missing or ill-typed field, then validate()s.
  static model_config from_json(const nlohmann::json& j);
  /// `vit` with layers, heads and width taken from the shared fields (kind "vit").
  vit_config vit_shape() const;
  bool operator==(const model_config& o) const;
  bool operator!=(const model_config& o) const { return !(*this == o); }
};

/// One training or evaluation batch. Token models (gpt): `inputs` and `targets` are (B, T)
/// row-major token ids, targets the inputs shifted by one. Models of whole samples (e.g. an image
/// classifier) use T = 1, `features` (B, F) and `targets` (B) class labels.
struct model_batch {
  int B = 0;                     ///< samples in the batch
  int T = 0;                     ///< positions per sample (tokens); 1 for whole-sample models
  std::vector<int32_t> inputs;   ///< (B, T) token ids; empty when the model reads features
  std::vector<float> features;   ///< (B, F) per-sample features; empty for token models
  std::vector<int32_t> targets;  ///< (B, T) next-token ids or (B) labels
};

/// The evaluation metric of one batch.
struct batch_metric {
  double loss = 0.0;  ///< mean loss of the batch (nats per target)
  /// Fraction of targets predicted correctly (argmax), in [0, 1]; NaN where accuracy does not
  /// apply (token models report loss only).
  double accuracy = std::nan("");
};

/// The model interface. See the file comment.
class model {
 public:
  virtual ~model() = default;
  model(const model&) = delete;
  model& operator=(const model&) = delete;
  model& operator=(model&&) = delete;

  /// The config this model was made from (kind included); round-trips through
  /// model_config::to_json / from_json and make_model.
  virtual model_config config() const = 0;

  /// Initializes every parameter from `seed` (deterministic: same seed, same values).
  virtual void init(uint64_t seed) = 0;

  /// Forward pass on a batch (see model_batch for each kind's fields). Returns the mean loss in
  /// nats per target and keeps what backward() needs. Throws std::invalid_argument naming the
  /// field or position when a shape or an id is out of range.
  virtual double forward(const model_batch& batch) = 0;

  /// Backward pass of the last forward(); ACCUMULATES into grads() (zero_grad() first for a
  /// fresh gradient). Throws std::logic_error when no forward() preceded it.
  virtual void backward() = 0;

  /// Loss and, where it applies, accuracy of one batch (forward only; gradients untouched).
  /// The default returns {forward(batch), NaN}.
  virtual batch_metric evaluate(const model_batch& batch) { return {forward(batch), std::nan("")}; }

  /// Model-specific statistics accumulated since the previous call, then reset; null when the
  /// model keeps none. An object names the run-log event under "event" (the learner emits it
  /// once per sync interval with learner, incarnation and step added); moe_gpt returns
  /// {"event": "expert_load", ...moe_gpt::load_json()}.
  virtual nlohmann::json take_stats() { return nullptr; }

  /// Model FLOPs to train on one sample (forward + backward) of T positions; for token models
  /// T tokens (the per-token accounting of the implementation times T).
  virtual double flops_per_sample(int T) const = 0;

  /// Named views into the flat parameter (and gradient) buffer, in offset order.
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
  /// Sets every gradient to zero.
  void zero_grad();

 protected:
  /// Allocates parameters and gradients (zero) for `tensors` (contiguous, in offset order) on
  /// `be`, which must outlive the model. Throws kernels::backend_error on allocation failure.
  model(kernels::backend& be, std::vector<tensor_info> tensors);
  model(model&&) noexcept = default;

  float* p(size_t tensor_index) { return params_.data() + tensors_[tensor_index].offset; }
  float* g(size_t tensor_index) { return grads_.data() + tensors_[tensor_index].offset; }

  kernels::backend* be_;
  std::vector<tensor_info> tensors_;
  kernels::buffer<float> params_;
  kernels::buffer<float> grads_;
};

/// The parameter layout of a config without allocating anything (what make_model(cfg) would
/// have as tensors()). Throws std::invalid_argument for an unknown kind or a bad config.
std::vector<tensor_info> model_tensors(const model_config& cfg);

/// Makes the model of `cfg.kind` on `be` (parameters zero: call init() or set_parameters()).
/// Kinds: "gpt", "moe_gpt". Throws std::invalid_argument naming an unknown kind or a bad field.
std::unique_ptr<model> make_model(kernels::backend& be, const model_config& cfg);

}  // namespace dd
