// runtime/hf_export.hpp — our GPT as a Hugging Face transformers GPT-2 directory, both ways.
//
// Our "gpt" (runtime/gpt.hpp) is GPT-2's architecture: learned positions, pre-LayerNorm blocks
// (eps 1e-5, biased variance), tanh-approximated GELU ("gelu_new" in transformers), causal
// attention scaled by 1/sqrt(head size), 4C MLP, final ln_f, LM head tied to wte, no dropout at
// inference. Every config.json field that could differ is written explicitly; on import every
// field that would change the function is checked and refused with its name when it does not
// match (activation, epsilon, n_inner, attention scaling flags, tying, cross-attention).
//
// Tensor names and layouts (transformers' GPT2LMHeadModel; its Conv1D stores weights as
// (in, out), the transpose of our nn.Linear-style (out, in)):
//   wte (V,C)                    -> transformer.wte.weight (V,C)
//   wpe (T,C)                    -> transformer.wpe.weight (T,C)
//   h.i.ln_1.{weight,bias}       -> transformer.h.i.ln_1.{weight,bias}
//   h.i.attn.qkv.weight (3C,C)   -> transformer.h.i.attn.c_attn.weight (C,3C)   transposed
//   h.i.attn.qkv.bias            -> transformer.h.i.attn.c_attn.bias
//   h.i.attn.proj.weight (C,C)   -> transformer.h.i.attn.c_proj.weight (C,C)    transposed
//   h.i.mlp.fc.weight (4C,C)     -> transformer.h.i.mlp.c_fc.weight (C,4C)      transposed
//   h.i.mlp.proj.weight (C,4C)   -> transformer.h.i.mlp.c_proj.weight (4C,C)    transposed
//   ln_f.{weight,bias}           -> transformer.ln_f.{weight,bias}
// (q, k, v keep their order inside c_attn.) lm_head.weight is not stored (tied, as transformers
// saves GPT-2); an import accepts it when it equals wte, names with or without the
// "transformer." prefix (the original openai-community/gpt2 files have none), and ignores the
// attention-mask buffers (attn.bias, attn.masked_bias) older files carry.
// Any thread; no shared state.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/checkpoint.hpp"
#include "runtime/model.hpp"

namespace dd {

/// transformers' config.json for a GPT of shape `cfg` (GPT2LMHeadModel). Throws
/// std::invalid_argument naming what does not map when cfg.kind is not "gpt" (moe_gpt: no
/// transformers GPT-2 has experts; vit: not a causal language model).
nlohmann::json hf_gpt2_config(const model_config& cfg);

/// Our flat tensors (gpt_tensors order, as in a model file) to transformers' names and layouts.
std::vector<st_tensor> to_hf_tensors(const model_config& cfg, const st_file& ours);

/// Reads a transformers GPT-2 directory's config.json into our shape (kind "gpt"). Throws
/// std::invalid_argument "DIR/config.json: field 'X' ..." for a field that does not map.
model_config read_hf_gpt2_config(const std::string& dir);

/// Loads DIR/model.safetensors (transformers names, F32) into our flat parameter order for
/// `cfg` (gpt_tensors). Throws std::runtime_error naming the file and the tensor for a missing
/// tensor or a shape that differs from `cfg`.
std::vector<float> read_hf_gpt2_weights(const std::string& dir, const model_config& cfg);

/// Checks that the directory's model fits the experiment's shape `want`: throws
/// std::invalid_argument naming the first differing field (model.vocab, model.context,
/// model.layers, model.heads, model.width) with both values.
void check_hf_fits(const std::string& dir, const model_config& have, const model_config& want);

}  // namespace dd
