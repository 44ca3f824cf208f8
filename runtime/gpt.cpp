// runtime/gpt.cpp — see gpt.hpp. Forward/backward follow llm.c's train_gpt2.c, with one residual
// gradient buffer carried down the blocks instead of per-layer copies.
#include "runtime/gpt.hpp"

#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "runtime/rng.hpp"

namespace dd {

namespace {

// Per-block tensor order inside gpt_tensors(); index = 2 + 12·layer + k.
enum block_tensor : size_t {
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
  k_fcprojb,
  k_per_block
};
constexpr size_t k_wte = 0, k_wpe = 1;
size_t bt(int layer, block_tensor k) { return 2 + k_per_block * static_cast<size_t>(layer) + k; }

}  // namespace

void gpt_config::validate() const {
  auto need = [](int v, const char* field) {
    if (v < 1)
      throw std::invalid_argument(fmt::format("gpt config: {} must be >= 1, got {}", field, v));
  };
  need(vocab, "vocab");
  need(context, "context");
  need(layers, "layers");
  need(heads, "heads");
  need(width, "width");
  if (width % heads != 0)
    throw std::invalid_argument(
        fmt::format("gpt config: width ({}) must be divisible by heads ({})", width, heads));
}

nlohmann::json gpt_config::to_json() const {
  return {{"vocab", vocab},
          {"context", context},
          {"layers", layers},
          {"heads", heads},
          {"width", width}};
}

gpt_config gpt_config::from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw std::invalid_argument("gpt config: expected a JSON object");
  gpt_config c;
  auto get = [&](const char* field, int& out) {
    auto it = j.find(field);
    if (it == j.end())
      throw std::invalid_argument(fmt::format("gpt config: missing field '{}'", field));
    if (!it->is_number_integer())
      throw std::invalid_argument(fmt::format("gpt config: field '{}' must be an integer", field));
    out = it->get<int>();
  };
  get("vocab", c.vocab);
  get("context", c.context);
  get("layers", c.layers);
  get("heads", c.heads);
  get("width", c.width);
  c.validate();
  return c;
}

std::vector<tensor_info> gpt_tensors(const gpt_config& cfg) {
  cfg.validate();
  const int64_t V = cfg.vocab, T = cfg.context, C = cfg.width;
  std::vector<tensor_info> out;
  size_t offset = 0;
  auto add = [&](std::string name, std::vector<int64_t> shape, int layer, bool emb) {
    tensor_info t;
    t.name = std::move(name);
    t.offset = offset;
    t.numel = 1;
    for (auto d : shape) t.numel *= static_cast<size_t>(d);
    t.shape = std::move(shape);
    t.layer = layer;
    t.is_embedding = emb;
    t.decay = t.shape.size() == 2;
    offset += t.numel;
    out.push_back(std::move(t));
  };
  add("wte", {V, C}, -1, true);
  add("wpe", {T, C}, -1, true);
  for (int l = 0; l < cfg.layers; ++l) {
    const std::string h = fmt::format("h.{}.", l);
    add(h + "ln_1.weight", {C}, l, false);
    add(h + "ln_1.bias", {C}, l, false);
    add(h + "attn.qkv.weight", {3 * C, C}, l, false);
    add(h + "attn.qkv.bias", {3 * C}, l, false);
    add(h + "attn.proj.weight", {C, C}, l, false);
    add(h + "attn.proj.bias", {C}, l, false);
    add(h + "ln_2.weight", {C}, l, false);
    add(h + "ln_2.bias", {C}, l, false);
    add(h + "mlp.fc.weight", {4 * C, C}, l, false);
    add(h + "mlp.fc.bias", {4 * C}, l, false);
    add(h + "mlp.proj.weight", {C, 4 * C}, l, false);
    add(h + "mlp.proj.bias", {C}, l, false);
  }
  add("ln_f.weight", {C}, -1, false);
  add("ln_f.bias", {C}, -1, false);
  return out;
}

size_t gpt_num_params(const gpt_config& cfg) {
  size_t n = 0;
  for (const auto& t : gpt_tensors(cfg)) n += t.numel;
  return n;
}

double gpt_flops_per_token(const gpt_config& cfg, int T) {
  const double L = cfg.layers, C = cfg.width, V = cfg.vocab;
  const double n_matmul = L * 12.0 * C * C + V * C;
  return 6.0 * n_matmul + 6.0 * L * T * C;
}

gpt::gpt(kernels::backend& be, const gpt_config& cfg) : model(be, gpt_tensors(cfg)), cfg_(cfg) {}

double gpt::flops_per_sample(int T) const { return gpt_flops_per_token(cfg_, T) * T; }

double gpt::forward(const model_batch& batch) {
  return forward(batch.inputs, batch.targets, batch.B, batch.T);
}

void gpt::init(uint64_t seed) {
  rng r(seed);
  std::vector<float> host(num_params(), 0.0f);
  const double std_base = 0.02;
  const double std_resid = 0.02 / std::sqrt(2.0 * cfg_.layers);
  for (const auto& t : tensors_) {
    float* dst = host.data() + t.offset;
    const bool is_norm_weight = t.name.find("ln_") != std::string::npos && t.name.size() > 7 &&
                                t.name.compare(t.name.size() - 7, 7, ".weight") == 0;
    if (t.shape.size() == 2) {
      const bool resid = t.name.find("attn.proj.weight") != std::string::npos ||
                         t.name.find("mlp.proj.weight") != std::string::npos;
      const double s = resid ? std_resid : std_base;
      for (size_t i = 0; i < t.numel; ++i) dst[i] = static_cast<float>(r.normal() * s);
    } else if (is_norm_weight) {
      for (size_t i = 0; i < t.numel; ++i) dst[i] = 1.0f;
    }  // biases stay 0
  }
  set_parameters(host);
}

void gpt::ensure_activations(int B, int T) {
  if (B == act_B_ && T == act_T_) return;
  const size_t BT = static_cast<size_t>(B) * T, C = cfg_.width, V = cfg_.vocab, NH = cfg_.heads;
  auto& be = *be_;
  tokens_ = be.alloc<int32_t>(BT);
  targets_ = be.alloc<int32_t>(BT);
  encoded_ = be.alloc<float>(BT * C);
  acts_.clear();
  acts_.resize(cfg_.layers);
  for (auto& a : acts_) {
    a.ln1 = be.alloc<float>(BT * C);
    a.ln1_mean = be.alloc<float>(BT);
    a.ln1_rstd = be.alloc<float>(BT);
    a.qkv = be.alloc<float>(BT * 3 * C);
    a.atty = be.alloc<float>(BT * C);
    a.att = be.alloc<float>(static_cast<size_t>(B) * NH * T * T);
    a.res2 = be.alloc<float>(BT * C);
    a.ln2 = be.alloc<float>(BT * C);
    a.ln2_mean = be.alloc<float>(BT);
    a.ln2_rstd = be.alloc<float>(BT);
    a.fch = be.alloc<float>(BT * 4 * C);
    a.fch_gelu = be.alloc<float>(BT * 4 * C);
    a.res3 = be.alloc<float>(BT * C);
  }
  tmp_ = be.alloc<float>(BT * C);
  lnf_ = be.alloc<float>(BT * C);
  lnf_mean_ = be.alloc<float>(BT);
  lnf_rstd_ = be.alloc<float>(BT);
  logits_ = be.alloc<float>(BT * V);
  probs_ = be.alloc<float>(BT * V);
  losses_ = be.alloc<float>(BT);
  dres_ = be.alloc<float>(BT * C);
  dln_ = be.alloc<float>(BT * C);
  datty_ = be.alloc<float>(BT * C);
  dqkv_ = be.alloc<float>(BT * 3 * C);
  dfch_ = be.alloc<float>(BT * 4 * C);
  dfch_gelu_ = be.alloc<float>(BT * 4 * C);
  datt_scratch_ = be.alloc<float>(static_cast<size_t>(B) * NH * T * T);
  dlogits_ = be.alloc<float>(BT * V);
  act_B_ = B;
  act_T_ = T;
}

double gpt::forward(const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets, int B,
                    int T) {
  have_forward_ = false;
  have_logits_ = false;
  if (B < 1 || T < 1)
    throw std::invalid_argument(
        fmt::format("gpt::forward: batch {} and sequence length {} must be >= 1", B, T));
  if (T > cfg_.context)
    throw std::invalid_argument(fmt::format(
        "gpt::forward: sequence length {} exceeds the model's context {}", T, cfg_.context));
  const size_t BT = static_cast<size_t>(B) * T;
  if (tokens.size() != BT || targets.size() != BT)
    throw std::invalid_argument(
        fmt::format("gpt::forward: tokens has {} and targets {} values, expected B*T = {}*{} = {}",
                    tokens.size(), targets.size(), B, T, BT));
  for (size_t i = 0; i < BT; ++i) {
    if (tokens[i] < 0 || tokens[i] >= cfg_.vocab)
      throw std::invalid_argument(fmt::format(
          "gpt::forward: token {} at position {} is outside [0, {})", tokens[i], i, cfg_.vocab));
    if (targets[i] < 0 || targets[i] >= cfg_.vocab)
      throw std::invalid_argument(fmt::format(
          "gpt::forward: target {} at position {} is outside [0, {})", targets[i], i, cfg_.vocab));
  }
  ensure_activations(B, T);
  auto& be = *be_;
  const int C = cfg_.width, NH = cfg_.heads, V = cfg_.vocab;
  const int N = static_cast<int>(BT);
  be.upload(tokens_.data(), tokens.data(), BT);
  be.upload(targets_.data(), targets.data(), BT);

  be.encoder_forward(encoded_.data(), tokens_.data(), p(k_wte), p(k_wpe), B, T, C);
  const float* residual = encoded_.data();
  for (int l = 0; l < cfg_.layers; ++l) {
    auto& a = acts_[l];
    be.layernorm_forward(a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), residual,
                         p(bt(l, k_ln1w)), p(bt(l, k_ln1b)), N, C);
    be.matmul_forward(a.qkv.data(), a.ln1.data(), p(bt(l, k_qkvw)), p(bt(l, k_qkvb)), N, C, 3 * C);
    be.attention_forward(a.atty.data(), a.att.data(), a.qkv.data(), B, T, C, NH);
    be.matmul_forward(tmp_.data(), a.atty.data(), p(bt(l, k_attprojw)), p(bt(l, k_attprojb)), N, C,
                      C);
    be.residual_forward(a.res2.data(), residual, tmp_.data(), BT * C);
    be.layernorm_forward(a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.res2.data(),
                         p(bt(l, k_ln2w)), p(bt(l, k_ln2b)), N, C);
    be.matmul_forward(a.fch.data(), a.ln2.data(), p(bt(l, k_fcw)), p(bt(l, k_fcb)), N, C, 4 * C);
    be.gelu_forward(a.fch_gelu.data(), a.fch.data(), BT * 4 * C);
    be.matmul_forward(tmp_.data(), a.fch_gelu.data(), p(bt(l, k_fcprojw)), p(bt(l, k_fcprojb)), N,
                      4 * C, C);
    be.residual_forward(a.res3.data(), a.res2.data(), tmp_.data(), BT * C);
    residual = a.res3.data();
  }
  const size_t lnf = tensors_.size() - 2;
  be.layernorm_forward(lnf_.data(), lnf_mean_.data(), lnf_rstd_.data(), residual, p(lnf),
                       p(lnf + 1), N, C);
  be.matmul_forward(logits_.data(), lnf_.data(), p(k_wte), nullptr, N, C, V);  // tied LM head
  be.softmax_crossentropy_forward(losses_.data(), probs_.data(), logits_.data(), targets_.data(), N,
                                  V);
  std::vector<float> losses(BT);
  be.download(losses.data(), losses_.data(), BT);
  double sum = 0.0;
  for (float x : losses) sum += x;
  have_forward_ = true;
  have_logits_ = true;
  return sum / static_cast<double>(BT);
}

std::vector<float> gpt::logits(size_t row) const {
  if (!have_logits_) throw std::logic_error("gpt::logits: no completed forward()");
  const size_t rows = static_cast<size_t>(act_B_) * act_T_;
  if (row >= rows)
    throw std::out_of_range(
        fmt::format("gpt::logits: row {} is outside the last forward's {} rows", row, rows));
  std::vector<float> out(static_cast<size_t>(cfg_.vocab));
  be_->download(out.data(), logits_.data() + row * out.size(), out.size());
  return out;
}

void gpt::backward() {
  if (!have_forward_)
    throw std::logic_error("gpt::backward: no forward() with targets to differentiate");
  auto& be = *be_;
  const int B = act_B_, T = act_T_, C = cfg_.width, NH = cfg_.heads, V = cfg_.vocab;
  const size_t BT = static_cast<size_t>(B) * T;
  const int N = static_cast<int>(BT);
  const size_t lnf = tensors_.size() - 2;

  be.softmax_crossentropy_backward(dlogits_.data(), probs_.data(), targets_.data(),
                                   1.0f / static_cast<float>(BT), N, V);
  be.zero(dln_.data(), BT * C);
  be.matmul_backward(dln_.data(), g(k_wte), nullptr, dlogits_.data(), lnf_.data(), p(k_wte), N, C,
                     V);
  const float* top = acts_.empty() ? encoded_.data() : acts_.back().res3.data();
  be.zero(dres_.data(), BT * C);
  be.layernorm_backward(dres_.data(), g(lnf), g(lnf + 1), dln_.data(), top, p(lnf),
                        lnf_mean_.data(), lnf_rstd_.data(), N, C);
  // dres_ now holds d loss / d (output of block l); it is updated in place down the blocks.
  for (int l = cfg_.layers - 1; l >= 0; --l) {
    auto& a = acts_[l];
    const float* residual = l == 0 ? encoded_.data() : acts_[l - 1].res3.data();
    // MLP half: res3 = res2 + fcproj(gelu(fc(ln2(res2)))).
    be.zero(dfch_gelu_.data(), BT * 4 * C);
    be.matmul_backward(dfch_gelu_.data(), g(bt(l, k_fcprojw)), g(bt(l, k_fcprojb)), dres_.data(),
                       a.fch_gelu.data(), p(bt(l, k_fcprojw)), N, 4 * C, C);
    be.zero(dfch_.data(), BT * 4 * C);
    be.gelu_backward(dfch_.data(), a.fch.data(), dfch_gelu_.data(), BT * 4 * C);
    be.zero(dln_.data(), BT * C);
    be.matmul_backward(dln_.data(), g(bt(l, k_fcw)), g(bt(l, k_fcb)), dfch_.data(), a.ln2.data(),
                       p(bt(l, k_fcw)), N, C, 4 * C);
    be.layernorm_backward(dres_.data(), g(bt(l, k_ln2w)), g(bt(l, k_ln2b)), dln_.data(),
                          a.res2.data(), p(bt(l, k_ln2w)), a.ln2_mean.data(), a.ln2_rstd.data(), N,
                          C);
    // Attention half: res2 = residual + attproj(attn(qkv(ln1(residual)))).
    be.zero(datty_.data(), BT * C);
    be.matmul_backward(datty_.data(), g(bt(l, k_attprojw)), g(bt(l, k_attprojb)), dres_.data(),
                       a.atty.data(), p(bt(l, k_attprojw)), N, C, C);
    be.zero(dqkv_.data(), BT * 3 * C);
    be.attention_backward(dqkv_.data(), datt_scratch_.data(), datty_.data(), a.qkv.data(),
                          a.att.data(), B, T, C, NH);
    be.zero(dln_.data(), BT * C);
    be.matmul_backward(dln_.data(), g(bt(l, k_qkvw)), g(bt(l, k_qkvb)), dqkv_.data(), a.ln1.data(),
                       p(bt(l, k_qkvw)), N, C, 3 * C);
    be.layernorm_backward(dres_.data(), g(bt(l, k_ln1w)), g(bt(l, k_ln1b)), dln_.data(), residual,
                          p(bt(l, k_ln1w)), a.ln1_mean.data(), a.ln1_rstd.data(), N, C);
  }
  be.encoder_backward(g(k_wte), g(k_wpe), dres_.data(), tokens_.data(), B, T, C);
  have_forward_ = false;
}

}  // namespace dd
