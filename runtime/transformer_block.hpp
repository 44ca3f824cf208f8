// runtime/transformer_block.hpp — the pre-LN transformer block shared by the GPT (causal
// attention) and the vision transformer (bidirectional attention):
//   x = x + proj(attn(qkv(ln_1(x))));   x = x + proj(gelu(fc(ln_2(x))))   (fc: C -> 4C)
// (Radford et al. 2019; Dosovitskiy et al. 2021, eqs. 2-3: the ViT encoder block is the same
// block without the causal mask). Layout after karpathy/llm.c.
//
// The block's 12 tensors are named "<prefix>ln_1.weight", …, "<prefix>mlp.proj.bias" (see
// tensor_layout::add_block()); a model keeps them in its flat parameter buffer and passes pointers.
// Who may call: the thread that owns the backend (the model's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kernels/backend.hpp"
#include "runtime/tensor_info.hpp"

namespace dd {

/// Builds a model's tensor list in its flat parameter buffer (gpt_tensors, moe_gpt_tensors,
/// vit_tensors): each add appends one tensor at the running offset, in elements, so tensor i
/// starts where tensor i-1 ends.
class tensor_layout {
 public:
  /// Appends `name` with `shape` (outermost first; numel = the product of its dims) at the
  /// running offset, with the given block index (-1 outside the blocks), embedding flag and
  /// weight-decay flag.
  void add(std::string name, std::vector<int64_t> shape, int layer, bool embedding, bool decay);
  /// As add() above with decay = true exactly for the 2-D weights (the GPT rule).
  void add(std::string name, std::vector<int64_t> shape, int layer, bool embedding) {
    const bool decay = shape.size() == 2;
    add(std::move(name), std::move(shape), layer, embedding, decay);
  }
  /// The attention half of a block, 8 tensors in this order: ln_1.{weight,bias} (C),
  /// attn.qkv.weight (3C,C), .bias (3C), attn.proj.weight (C,C), .bias (C), ln_2.{weight,bias}
  /// (C); names prefixed with `prefix` (e.g. "h.3."), layer = `layer`, not embeddings, decay =
  /// true exactly for the 2-D weights.
  void add_attention_half(const std::string& prefix, int layer, int64_t C);
  /// An MLP, 4 tensors: fc.weight (4C,C), fc.bias (4C), proj.weight (C,4C), proj.bias (C),
  /// names prefixed with `prefix` (e.g. "h.3.mlp." or "h.3.mlp.experts.0."); layer and decay as
  /// add_attention_half().
  void add_mlp(const std::string& prefix, int layer, int64_t C);
  /// The k_block_tensors = 12 tensors of one block: add_attention_half(prefix) then
  /// add_mlp(prefix + "mlp.").
  void add_block(const std::string& prefix, int layer, int64_t C) {
    add_attention_half(prefix, layer, C);
    add_mlp(prefix + "mlp.", layer, C);
  }
  /// The tensors added so far (moved out; the layout is empty afterwards).
  std::vector<tensor_info> take() {
    offset_ = 0;
    return std::move(out_);
  }

 private:
  std::vector<tensor_info> out_;
  size_t offset_ = 0;
};

/// Number of tensors tensor_layout::add_block() adds.
inline constexpr size_t k_block_tensors = 12;

/// Pointers to one block's 12 parameter (or gradient) tensors, in tensor_layout::add_block() order.
struct block_weights {
  float* t[k_block_tensors] = {};
  /// Pointers into `flat` for the block whose first tensor is tensors[first].
  static block_weights at(float* flat, const std::vector<tensor_info>& tensors, size_t first);
};

/// Activations of one block for a (B, T) batch, kept for backward.
struct block_activations {
  kernels::buffer<float> ln1, ln1_mean, ln1_rstd, qkv, atty, att, res2, ln2, ln2_mean, ln2_rstd,
      fch, fch_gelu, res3;
  /// Allocates every buffer for B·T rows of width C with NH heads.
  void allocate(kernels::backend& be, int B, int T, int C, int NH);
};

/// Scratch shared by every block of a model (forward tmp and the backward buffers).
struct block_scratch {
  kernels::buffer<float> tmp, dln, datty, dqkv, dfch, dfch_gelu, datt;
  void allocate(kernels::backend& be, int B, int T, int C, int NH);
};

/// Allocates `layers` blocks' activations into `acts` (replacing what it held) and the shared
/// scratch, for a (B, T) batch of width C with NH heads.
void allocate_blocks(kernels::backend& be, int layers, int B, int T, int C, int NH,
                     std::vector<block_activations>& acts, block_scratch& scratch);

/// Whether position t attends to positions > t.
enum class attention_mask { causal, bidirectional };

/// Forward through one block: reads `residual` (B,T,C), writes a.res3 (B,T,C), the block output,
/// and keeps the activations in `a`.
void block_forward(kernels::backend& be, const block_weights& w, block_activations& a,
                   block_scratch& s, const float* residual, int B, int T, int C, int NH,
                   attention_mask mask);

/// Backward through one block: `dres` (B,T,C) holds d loss / d (block output) on entry and
/// d loss / d (block input `residual`) on exit (updated in place); accumulates into `g`.
void block_backward(kernels::backend& be, const block_weights& w, const block_weights& g,
                    block_activations& a, block_scratch& s, const float* residual, float* dres,
                    int B, int T, int C, int NH, attention_mask mask);

/// The ends of the GPT family (gpt, moe_gpt) around the blocks: the token batch on the device
/// and the tied LM head, ln_f then logits = ln_f · wteᵀ (the token embedding) and the softmax
/// cross-entropy against the next-token targets.
struct tied_lm_head {
  kernels::buffer<int32_t> tokens, targets;
  kernels::buffer<float> lnf, lnf_mean, lnf_rstd, logits, probs, losses, dlogits;

  /// Allocates every buffer for BT rows of width C over a vocabulary of V.
  void allocate(kernels::backend& be, size_t BT, size_t C, size_t V);
  /// Checks a (B, T) batch of token ids and targets (host, B·T values each) against the model's
  /// context and vocabulary: std::invalid_argument "WHO: ..." when B < 1, T < 1, T > context, a
  /// size is not B·T, or an id is outside [0, vocab) (naming its position).
  static void check_batch(const char* who, const std::vector<int32_t>& tokens,
                          const std::vector<int32_t>& targets, int B, int T, int context,
                          int vocab);
  /// Uploads a checked batch into tokens and targets.
  void upload(kernels::backend& be, const std::vector<int32_t>& host_tokens,
              const std::vector<int32_t>& host_targets);
  /// From `top` (N rows of C: the last block's output) to the loss: returns the mean
  /// cross-entropy over the N rows, nats/token.
  double forward(kernels::backend& be, const float* top, const float* wte, const float* lnf_w,
                 const float* lnf_b, int N, int C, int V);
  /// Backward of forward(): accumulates into g_wte, g_lnf_w, g_lnf_b; WRITES dtop (N, C) =
  /// d loss / d top; dln is scratch (N, C).
  void backward(kernels::backend& be, float* dtop, float* dln, float* g_wte, float* g_lnf_w,
                float* g_lnf_b, const float* top, const float* wte, const float* lnf_w, int N,
                int C, int V);
};

}  // namespace dd
