// runtime/transformer_block.cpp — see transformer_block.hpp. The op sequence is the one GPT
// always ran (llm.c's train_gpt2.c, one residual gradient carried down the blocks).
#include "runtime/transformer_block.hpp"

#include <stdexcept>

#include <fmt/format.h>

namespace dd {

namespace {
enum : size_t {
  k_ln1w,
  k_ln1b,
  k_qkvw,
  k_qkvb,
  k_attprojw,
  k_attprojb,
  k_ln2w,
  k_ln2b,
  k_fcw,
  k_fcb,
  k_fcprojw,
  k_fcprojb
};
}  // namespace

void tensor_layout::add(std::string name, std::vector<int64_t> shape, int layer, bool embedding,
                        bool decay) {
  tensor_info t;
  t.name = std::move(name);
  t.offset = offset_;
  t.numel = 1;
  for (auto d : shape) t.numel *= static_cast<size_t>(d);
  t.shape = std::move(shape);
  t.layer = layer;
  t.is_embedding = embedding;
  t.decay = decay;
  offset_ += t.numel;
  out_.push_back(std::move(t));
}

void tensor_layout::add_attention_half(const std::string& prefix, int layer, int64_t C) {
  add(prefix + "ln_1.weight", {C}, layer, false);
  add(prefix + "ln_1.bias", {C}, layer, false);
  add(prefix + "attn.qkv.weight", {3 * C, C}, layer, false);
  add(prefix + "attn.qkv.bias", {3 * C}, layer, false);
  add(prefix + "attn.proj.weight", {C, C}, layer, false);
  add(prefix + "attn.proj.bias", {C}, layer, false);
  add(prefix + "ln_2.weight", {C}, layer, false);
  add(prefix + "ln_2.bias", {C}, layer, false);
}

void tensor_layout::add_mlp(const std::string& prefix, int layer, int64_t C) {
  add(prefix + "fc.weight", {4 * C, C}, layer, false);
  add(prefix + "fc.bias", {4 * C}, layer, false);
  add(prefix + "proj.weight", {C, 4 * C}, layer, false);
  add(prefix + "proj.bias", {C}, layer, false);
}

block_weights block_weights::at(float* flat, const std::vector<tensor_info>& tensors,
                                size_t first) {
  block_weights w;
  for (size_t k = 0; k < k_block_tensors; ++k) w.t[k] = flat + tensors[first + k].offset;
  return w;
}

void block_activations::allocate(kernels::backend& be, int B, int T, int C, int NH) {
  const size_t BT = static_cast<size_t>(B) * T, c = static_cast<size_t>(C);
  ln1 = be.alloc<float>(BT * c);
  ln1_mean = be.alloc<float>(BT);
  ln1_rstd = be.alloc<float>(BT);
  qkv = be.alloc<float>(BT * 3 * c);
  atty = be.alloc<float>(BT * c);
  att = be.alloc<float>(static_cast<size_t>(B) * NH * T * T);
  res2 = be.alloc<float>(BT * c);
  ln2 = be.alloc<float>(BT * c);
  ln2_mean = be.alloc<float>(BT);
  ln2_rstd = be.alloc<float>(BT);
  fch = be.alloc<float>(BT * 4 * c);
  fch_gelu = be.alloc<float>(BT * 4 * c);
  res3 = be.alloc<float>(BT * c);
}

void block_scratch::allocate(kernels::backend& be, int B, int T, int C, int NH) {
  const size_t BT = static_cast<size_t>(B) * T, c = static_cast<size_t>(C);
  tmp = be.alloc<float>(BT * c);
  dln = be.alloc<float>(BT * c);
  datty = be.alloc<float>(BT * c);
  dqkv = be.alloc<float>(BT * 3 * c);
  dfch = be.alloc<float>(BT * 4 * c);
  dfch_gelu = be.alloc<float>(BT * 4 * c);
  datt = be.alloc<float>(static_cast<size_t>(B) * NH * T * T);
}

void block_forward(kernels::backend& be, const block_weights& w, block_activations& a,
                   block_scratch& s, const float* residual, int B, int T, int C, int NH,
                   attention_mask mask) {
  const size_t BT = static_cast<size_t>(B) * T;
  const int N = static_cast<int>(BT);
  const auto* p = w.t;
  be.layernorm_forward(a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), residual, p[k_ln1w],
                       p[k_ln1b], N, C);
  be.matmul_forward(a.qkv.data(), a.ln1.data(), p[k_qkvw], p[k_qkvb], N, C, 3 * C);
  if (mask == attention_mask::causal)
    be.attention_forward(a.atty.data(), a.att.data(), a.qkv.data(), B, T, C, NH);
  else
    be.attention_forward_bidirectional(a.atty.data(), a.att.data(), a.qkv.data(), B, T, C, NH);
  be.matmul_forward(s.tmp.data(), a.atty.data(), p[k_attprojw], p[k_attprojb], N, C, C);
  be.residual_layernorm_forward(a.res2.data(), a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(),
                                residual, s.tmp.data(), p[k_ln2w], p[k_ln2b], N, C);
  be.matmul_forward(a.fch.data(), a.ln2.data(), p[k_fcw], p[k_fcb], N, C, 4 * C);
  be.gelu_forward(a.fch_gelu.data(), a.fch.data(), BT * 4 * C);
  be.matmul_forward(s.tmp.data(), a.fch_gelu.data(), p[k_fcprojw], p[k_fcprojb], N, 4 * C, C);
  be.residual_forward(a.res3.data(), a.res2.data(), s.tmp.data(), BT * C);
}

void block_backward(kernels::backend& be, const block_weights& w, const block_weights& g,
                    block_activations& a, block_scratch& s, const float* residual, float* dres,
                    int B, int T, int C, int NH, attention_mask mask) {
  const size_t BT = static_cast<size_t>(B) * T;
  const int N = static_cast<int>(BT);
  const auto* p = w.t;
  auto* d = g.t;
  // MLP half: res3 = res2 + fcproj(gelu(fc(ln2(res2)))).
  // The *_writes ops write the scratch gradients (no zeroing pass); the weight gradients
  // accumulate.
  be.matmul_backward_writes_dinp(s.dfch_gelu.data(), d[k_fcprojw], d[k_fcprojb], dres,
                                 a.fch_gelu.data(), p[k_fcprojw], N, 4 * C, C);
  be.gelu_backward_writes(s.dfch.data(), a.fch.data(), s.dfch_gelu.data(), BT * 4 * C);
  be.matmul_backward_writes_dinp(s.dln.data(), d[k_fcw], d[k_fcb], s.dfch.data(), a.ln2.data(),
                                 p[k_fcw], N, C, 4 * C);
  be.layernorm_backward(dres, d[k_ln2w], d[k_ln2b], s.dln.data(), a.res2.data(), p[k_ln2w],
                        a.ln2_mean.data(), a.ln2_rstd.data(), N, C);
  // Attention half: res2 = residual + attproj(attn(qkv(ln1(residual)))).
  be.matmul_backward_writes_dinp(s.datty.data(), d[k_attprojw], d[k_attprojb], dres, a.atty.data(),
                                 p[k_attprojw], N, C, C);
  be.zero(s.dqkv.data(), BT * 3 * C);
  if (mask == attention_mask::causal)
    be.attention_backward(s.dqkv.data(), s.datt.data(), s.datty.data(), a.qkv.data(), a.att.data(),
                          B, T, C, NH);
  else
    be.attention_backward_bidirectional(s.dqkv.data(), s.datt.data(), s.datty.data(), a.qkv.data(),
                                        a.att.data(), B, T, C, NH);
  be.matmul_backward_writes_dinp(s.dln.data(), d[k_qkvw], d[k_qkvb], s.dqkv.data(), a.ln1.data(),
                                 p[k_qkvw], N, C, 3 * C);
  be.layernorm_backward(dres, d[k_ln1w], d[k_ln1b], s.dln.data(), residual, p[k_ln1w],
                        a.ln1_mean.data(), a.ln1_rstd.data(), N, C);
}

void allocate_blocks(kernels::backend& be, int layers, int B, int T, int C, int NH,
                     std::vector<block_activations>& acts, block_scratch& scratch) {
  acts.clear();
  acts.resize(static_cast<size_t>(layers));
  for (auto& a : acts) a.allocate(be, B, T, C, NH);
  scratch.allocate(be, B, T, C, NH);
}

void tied_lm_head::allocate(kernels::backend& be, size_t BT, size_t C, size_t V) {
  tokens = be.alloc<int32_t>(BT);
  targets = be.alloc<int32_t>(BT);
  lnf = be.alloc<float>(BT * C);
  lnf_mean = be.alloc<float>(BT);
  lnf_rstd = be.alloc<float>(BT);
  logits = be.alloc<float>(BT * V);
  probs = be.alloc<float>(BT * V);
  losses = be.alloc<float>(BT);
  dlogits = be.alloc<float>(BT * V);
}

void tied_lm_head::check_batch(const char* who, const std::vector<int32_t>& tokens,
                               const std::vector<int32_t>& targets, int B, int T, int context,
                               int vocab) {
  if (B < 1 || T < 1)
    throw std::invalid_argument(
        fmt::format("{}: batch {} and sequence length {} must be >= 1", who, B, T));
  if (T > context)
    throw std::invalid_argument(
        fmt::format("{}: sequence length {} exceeds the model's context {}", who, T, context));
  const size_t BT = static_cast<size_t>(B) * T;
  if (tokens.size() != BT || targets.size() != BT)
    throw std::invalid_argument(
        fmt::format("{}: tokens has {} and targets {} values, expected B*T = {}*{} = {}", who,
                    tokens.size(), targets.size(), B, T, BT));
  for (size_t i = 0; i < BT; ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab)
      throw std::invalid_argument(
          fmt::format("{}: token {} at position {} is outside [0, {})", who, tokens[i], i, vocab));
    if (targets[i] < 0 || targets[i] >= vocab)
      throw std::invalid_argument(fmt::format("{}: target {} at position {} is outside [0, {})",
                                              who, targets[i], i, vocab));
  }
}

void tied_lm_head::upload(kernels::backend& be, const std::vector<int32_t>& host_tokens,
                          const std::vector<int32_t>& host_targets) {
  be.upload(tokens.data(), host_tokens.data(), host_tokens.size());
  be.upload(targets.data(), host_targets.data(), host_targets.size());
}

double tied_lm_head::forward(kernels::backend& be, const float* top, const float* wte,
                             const float* lnf_w, const float* lnf_b, int N, int C, int V) {
  const size_t rows = static_cast<size_t>(N);
  be.layernorm_forward(lnf.data(), lnf_mean.data(), lnf_rstd.data(), top, lnf_w, lnf_b, N, C);
  be.matmul_forward(logits.data(), lnf.data(), wte, nullptr, N, C, V);
  be.softmax_crossentropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), N, V);
  std::vector<float> host(rows);
  be.download(host.data(), losses.data(), rows);
  double sum = 0.0;
  for (float x : host) sum += x;
  return sum / static_cast<double>(rows);
}

void tied_lm_head::backward(kernels::backend& be, float* dtop, float* dln, float* g_wte,
                            float* g_lnf_w, float* g_lnf_b, const float* top, const float* wte,
                            const float* lnf_w, int N, int C, int V) {
  const size_t rows = static_cast<size_t>(N);
  be.softmax_crossentropy_backward(dlogits.data(), probs.data(), targets.data(),
                                   1.0f / static_cast<float>(rows), N, V);
  be.matmul_backward_writes_dinp(dln, g_wte, nullptr, dlogits.data(), lnf.data(), wte, N, C, V);
  be.zero(dtop, rows * C);
  be.layernorm_backward(dtop, g_lnf_w, g_lnf_b, dln, top, lnf_w, lnf_mean.data(), lnf_rstd.data(),
                        N, C);
}

}  // namespace dd
