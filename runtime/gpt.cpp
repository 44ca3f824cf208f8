// runtime/gpt.cpp — see gpt.hpp. Forward/backward follow llm.c's train_gpt2.c, with one residual
// gradient buffer carried down the blocks instead of per-layer copies.
#include "runtime/gpt.hpp"

#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "runtime/json_fields.hpp"
#include "runtime/rng.hpp"

namespace dd {

namespace {

// Block l's tensors start at index 2 + k_block_tensors·l (transformer_block.hpp order).
constexpr size_t k_wte = 0, k_wpe = 1;
size_t block_first(int layer) { return 2 + k_block_tensors * static_cast<size_t>(layer); }

}  // namespace

// The integer fields of gpt_config, in the order they are read and checked.
constexpr int_field<gpt_config> gpt_fields[] = {{"vocab", &gpt_config::vocab, 1},
                                                {"context", &gpt_config::context, 1},
                                                {"layers", &gpt_config::layers, 1},
                                                {"heads", &gpt_config::heads, 1},
                                                {"width", &gpt_config::width, 1}};

void gpt_config::validate() const {
  check_int_fields(*this, gpt_fields, "gpt config");
  if (width % heads != 0)
    throw std::invalid_argument(
        fmt::format("gpt config: width ({}) must be divisible by heads ({})", width, heads));
}

nlohmann::json gpt_config::to_json() const { return int_fields_json(*this, gpt_fields); }

gpt_config gpt_config::from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw std::invalid_argument("gpt config: expected a JSON object");
  gpt_config c;
  read_int_fields(j, gpt_fields, "gpt config", c);
  c.validate();
  return c;
}

std::vector<tensor_info> gpt_tensors(const gpt_config& cfg) {
  cfg.validate();
  const int64_t V = cfg.vocab, T = cfg.context, C = cfg.width;
  tensor_layout out;
  out.add("wte", {V, C}, -1, true);
  out.add("wpe", {T, C}, -1, true);
  for (int l = 0; l < cfg.layers; ++l) out.add_block(fmt::format("h.{}.", l), l, C);
  out.add("ln_f.weight", {C}, -1, false);
  out.add("ln_f.bias", {C}, -1, false);
  return out.take();
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
  head_.allocate(be, BT, C, V);
  encoded_ = be.alloc<float>(BT * C);
  allocate_blocks(be, cfg_.layers, B, T, C, NH, acts_, scratch_);
  dres_ = be.alloc<float>(BT * C);
  act_B_ = B;
  act_T_ = T;
}

double gpt::forward(const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets, int B,
                    int T) {
  have_forward_ = false;
  have_logits_ = false;
  tied_lm_head::check_batch("gpt::forward", tokens, targets, B, T, cfg_.context, cfg_.vocab);
  const size_t BT = static_cast<size_t>(B) * T;
  ensure_activations(B, T);
  auto& be = *be_;
  const int C = cfg_.width, NH = cfg_.heads, V = cfg_.vocab;
  const int N = static_cast<int>(BT);
  head_.upload(be, tokens, targets);

  be.encoder_forward(encoded_.data(), head_.tokens.data(), p(k_wte), p(k_wpe), B, T, C);
  const float* residual = encoded_.data();
  for (int l = 0; l < cfg_.layers; ++l) {
    block_forward(be, block_weights::at(params_.data(), tensors_, block_first(l)), acts_[l],
                  scratch_, residual, B, T, C, NH, attention_mask::causal);
    residual = acts_[l].res3.data();
  }
  const size_t lnf = tensors_.size() - 2;
  const double loss = head_.forward(be, residual, p(k_wte), p(lnf), p(lnf + 1), N, C, V);
  have_forward_ = true;
  have_logits_ = true;
  return loss;
}

std::vector<float> gpt::logits(size_t row) const {
  if (!have_logits_) throw std::logic_error("gpt::logits: no completed forward()");
  const size_t rows = static_cast<size_t>(act_B_) * act_T_;
  if (row >= rows)
    throw std::out_of_range(
        fmt::format("gpt::logits: row {} is outside the last forward's {} rows", row, rows));
  std::vector<float> out(static_cast<size_t>(cfg_.vocab));
  be_->download(out.data(), head_.logits.data() + row * out.size(), out.size());
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

  const float* top = acts_.empty() ? encoded_.data() : acts_.back().res3.data();
  head_.backward(be, dres_.data(), scratch_.dln.data(), g(k_wte), g(lnf), g(lnf + 1), top, p(k_wte),
                 p(lnf), N, C, V);
  // dres_ now holds d loss / d (output of block l); it is updated in place down the blocks.
  for (int l = cfg_.layers - 1; l >= 0; --l) {
    const float* residual = l == 0 ? encoded_.data() : acts_[l - 1].res3.data();
    block_backward(be, block_weights::at(params_.data(), tensors_, block_first(l)),
                   block_weights::at(grads_.data(), tensors_, block_first(l)), acts_[l], scratch_,
                   residual, dres_.data(), B, T, C, NH, attention_mask::causal);
  }
  be.encoder_backward(g(k_wte), g(k_wpe), dres_.data(), head_.tokens.data(), B, T, C);
  have_forward_ = false;
}

}  // namespace dd
