// runtime/vit.hpp — a vision transformer (Dosovitskiy et al. 2021, "An Image is Worth 16x16
// Words") for small grayscale images (MNIST), built on a kernels::backend and on the same
// transformer blocks as the GPT (runtime/transformer_block.hpp), with bidirectional attention.
//
// Architecture: pixels x ∈ [0,255] are scaled to x/255; the image (rows, cols) is cut into
// P = (rows/p)·(cols/p) non-overlapping p×p patches, in row-major patch order, each flattened
// row-major (p² values) and projected to C by a linear layer (patch_embed); with
// pooling = "cls" a learned cls_token is prepended (T = P + 1 tokens), else T = P; a learned
// position embedding pos_embed (T, C) is added; `layers` pre-LN blocks; a final layer norm ln_f
// over every token; pooling: "cls" takes token 0, "mean" averages all T tokens; a linear
// classification head (K classes). Loss: mean softmax cross-entropy over the batch, in nats.
//
// Parameters live in ONE flat float32 buffer (tensors()); gradients in a second of the same
// layout. Who may call: the single thread that owns the backend. Move-only.
// Backends: "reference" and "cpu" (the ViT ops of kernels/backend.hpp; "cuda" throws
// kernels::backend_error naming the op).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/backend.hpp"
#include "runtime/model.hpp"
#include "runtime/tensor_info.hpp"
#include "runtime/transformer_block.hpp"
#include "runtime/vit_config.hpp"

namespace dd {

class image_dataset;

/// Parameter layout, without allocating. Order: patch_embed.weight (C, p²), patch_embed.bias
/// (C), cls_token (1, C) (cls pooling only), pos_embed (T, C), per block i the 12 tensors
/// "h.i.*" of tensor_layout::add_block(), ln_f.{weight,bias} (C), head.weight (K, C), head.bias
/// (K). cls_token and pos_embed are is_embedding (averaged by the merge, as GPT's wte/wpe); decay
/// is true for the 2-D weight matrices only (patch_embed, blocks, head) — not for cls_token and
/// pos_embed (as timm's ViT: no_weight_decay = {pos_embed, cls_token}); layer = block or -1.
std::vector<tensor_info> vit_tensors(const vit_config& cfg);

/// Total parameter count.
size_t vit_num_params(const vit_config& cfg);

/// Model FLOPs per trained image (forward + backward):
/// 6·(T·12·L·C² + P·p²·C + C·K) + 12·L·T²·C — the linear layers as 6·N_matmul per token
/// (Kaplan et al. 2020, Table 1) and bidirectional attention (QKᵀ and A·V over all T² pairs:
/// 4·L·T²·C forward, ×3 for forward + backward).
double vit_flops_per_sample(const vit_config& cfg);

/// Validation result of a classifier.
struct classification_eval {
  double loss = 0.0;      ///< mean cross-entropy, nats per sample
  double accuracy = 0.0;  ///< fraction of samples whose arg-max class is the label, in [0, 1]
  size_t samples = 0;     ///< samples evaluated
};

/// The model (kind "vit" of runtime/model.hpp). Move-only; bound to one backend that must
/// outlive it.
class vit : public model {
 public:
  /// Allocates parameters and gradients (zero). Throws std::invalid_argument for a bad config,
  /// kernels::backend_error on allocation failure.
  vit(kernels::backend& be, const vit_config& cfg);
  /// From a model_config of kind "vit" (model_config::vit_shape()); config() returns `cfg`.
  vit(kernels::backend& be, const model_config& cfg);
  vit(vit&&) noexcept = default;
  vit& operator=(vit&&) = delete;
  vit(const vit&) = delete;
  vit& operator=(const vit&) = delete;

  /// Initialization from `seed`: every 2-D tensor (weights, cls_token, pos_embed, head) ~
  /// N(0, 0.02²), the residual projections (attn.proj.weight, mlp.proj.weight) ~
  /// N(0, (0.02/sqrt(2·layers))²) (as gpt::init), biases 0, layer-norm weights 1. One dd::rng
  /// stream seeded with `seed`, consumed tensor by tensor in tensors() order, row-major.
  void init(uint64_t seed) override;

  /// Kind "vit", the shared layers/heads/width and the vit fields.
  model_config config() const override { return model_cfg_; }
  /// The shape.
  const vit_config& shape() const noexcept { return cfg_; }

  /// vit_flops_per_sample(shape()); T is ignored (a sample is one image).
  double flops_per_sample(int T) const override;

  using model::forward;
  /// forward() of the batch's features (B, rows·cols) = pixel values in [0, 255] (integers) and
  /// targets (B) = labels; batch.T must be 1. Throws std::invalid_argument naming what is wrong.
  double forward(const model_batch& batch) override;
  /// Loss and accuracy of one batch (forward only).
  batch_metric evaluate(const model_batch& batch) override;

  /// Forward pass on B images: `pixels` (B·rows·cols values in [0, 255], row-major per image),
  /// `labels` (B values in [0, classes)). Returns the mean cross-entropy in nats per image and
  /// keeps the activations for backward(). Throws std::invalid_argument when B < 1, a size is
  /// wrong, or a pixel or label is out of range (naming the position).
  double forward(const std::vector<int32_t>& pixels, const std::vector<int32_t>& labels, int B);

  /// Images of the last forward() whose arg-max logit (ties: the lower class) is the label.
  int last_correct() const;
  /// Logits of the last forward(), (B, classes), host copy.
  std::vector<float> last_logits() const;

  /// Backward pass of the last forward(); ACCUMULATES into grads(). Throws std::logic_error when
  /// no forward() preceded it.
  void backward() override;

  /// Loss and accuracy over the whole validation split of `data`, in batches of `batch`
  /// images (the last batch may be smaller). Throws std::invalid_argument when the dataset's
  /// image size or class count differs from the config, or batch < 1.
  classification_eval evaluate(const image_dataset& data, int batch);

 private:
  void ensure_activations(int B);
  double forward_pixels(const float* pixels, const std::vector<int32_t>& labels, int B);

  vit_config cfg_;
  model_config model_cfg_;
  size_t i_cls_ = 0, i_pos_ = 0, i_blocks_ = 0, i_lnf_ = 0, i_head_ = 0;  // tensor indices

  int act_B_ = 0;
  bool have_forward_ = false;
  kernels::buffer<int32_t> labels_;
  kernels::buffer<float> patches_in_, patch_emb_, encoded_;
  std::vector<block_activations> acts_;
  block_scratch scratch_;
  kernels::buffer<float> lnf_, lnf_mean_, lnf_rstd_, pooled_, logits_, probs_, losses_;
  kernels::buffer<float> dres_, dpooled_, dlogits_, dpatch_emb_, dpatches_in_;
  std::vector<int32_t> host_labels_;
};

}  // namespace dd
