// runtime/transformer_block.hpp — the pre-LN transformer block shared by the GPT (causal
// attention) and the vision transformer (bidirectional attention):
//   x = x + proj(attn(qkv(ln_1(x))));   x = x + proj(gelu(fc(ln_2(x))))   (fc: C -> 4C)
// (Radford et al. 2019; Dosovitskiy et al. 2021, eqs. 2-3: the ViT encoder block is the same
// block without the causal mask). Layout after karpathy/llm.c.
//
// The block's 12 tensors are named "<prefix>ln_1.weight", …, "<prefix>mlp.proj.bias" (see
// append_block_tensors()); a model keeps them in its flat parameter buffer and passes pointers.
// Who may call: the thread that owns the backend (the model's).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "runtime/tensor_info.hpp"

namespace dd {

/// Appends the 12 tensors of one block, in this order: ln_1.{weight,bias} (C),
/// attn.qkv.weight (3C,C), .bias (3C), attn.proj.weight (C,C), .bias (C), ln_2.{weight,bias} (C),
/// mlp.fc.weight (4C,C), .bias (4C), mlp.proj.weight (C,4C), .bias (C); names prefixed with
/// `prefix` (e.g. "h.3."), offsets from `offset` (advanced), layer = `layer`, not embeddings,
/// decay = true exactly for the 2-D weights.
void append_block_tensors(std::vector<tensor_info>& out, size_t& offset, const std::string& prefix,
                          int layer, int64_t C);

/// Number of tensors append_block_tensors() adds.
inline constexpr size_t k_block_tensors = 12;

/// Pointers to one block's 12 parameter (or gradient) tensors, in append_block_tensors() order.
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

}  // namespace dd
