// runtime/moe_gpt.cpp — see moe_gpt.hpp. The attention half of each block is gpt.cpp's; the MoE
// half routes, gathers the tokens of each expert into its capacity rows, runs the expert MLPs
// as ordinary matmuls on those rows and scatters the gated outputs back.
#include "runtime/moe_gpt.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "runtime/rng.hpp"
#include "runtime/transformer_block.hpp"

namespace dd {

namespace {
enum : size_t { k_ln1w, k_ln1b, k_qkvw, k_qkvb, k_attprojw, k_attprojb, k_ln2w, k_ln2b, k_router };
enum : size_t { k_fcw, k_fcb, k_projw, k_projb };
constexpr size_t k_wte = 0, k_wpe = 1;
}  // namespace

std::vector<tensor_info> moe_gpt_tensors(const model_config& cfg) {
  if (cfg.kind != "moe_gpt")
    throw std::invalid_argument(
        fmt::format("moe_gpt: config kind is '{}', expected 'moe_gpt'", cfg.kind));
  cfg.validate();
  const int64_t V = cfg.vocab, T = cfg.context, C = cfg.width, E = cfg.moe.experts;
  tensor_layout out;
  out.add("wte", {V, C}, -1, true);
  out.add("wpe", {T, C}, -1, true);
  for (int l = 0; l < cfg.layers; ++l) {
    const std::string h = fmt::format("h.{}.", l);
    out.add_attention_half(h, l, C);
    out.add(h + "mlp.router.weight", {E, C}, l, false);
    for (int64_t e = 0; e < E; ++e) out.add_mlp(fmt::format("{}mlp.experts.{}.", h, e), l, C);
  }
  out.add("ln_f.weight", {C}, -1, false);
  out.add("ln_f.bias", {C}, -1, false);
  return out.take();
}

int moe_capacity(const moe_config& moe, int N) {
  const double c = std::ceil(moe.capacity_factor * moe.top_k * static_cast<double>(N) /
                             static_cast<double>(moe.experts));
  return std::max(1, static_cast<int>(c));
}

double moe_gpt_flops_per_token(const model_config& cfg, int T) {
  const double L = cfg.layers, C = cfg.width, V = cfg.vocab, E = cfg.moe.experts, k = cfg.moe.top_k;
  const double n_active = L * (4.0 * C * C + k * 8.0 * C * C + E * C) + V * C;
  return 6.0 * n_active + 6.0 * L * T * C;
}

moe_gpt::moe_gpt(kernels::backend& be, const model_config& cfg)
    : model(be, moe_gpt_tensors(cfg)),
      cfg_(cfg),
      per_block_(9 + 4 * static_cast<size_t>(cfg.moe.experts)) {
  reset_load();
}

double moe_gpt::flops_per_sample(int T) const { return moe_gpt_flops_per_token(cfg_, T) * T; }

void moe_gpt::init(uint64_t seed) {
  rng r(seed);
  std::vector<float> host(num_params(), 0.0f);
  const double std_resid = 0.02 / std::sqrt(2.0 * cfg_.layers);
  auto ends_with = [](const std::string& s, const char* suf) {
    const size_t n = std::char_traits<char>::length(suf);
    return s.size() >= n && s.compare(s.size() - n, n, suf) == 0;
  };
  for (const auto& t : tensors_) {
    float* dst = host.data() + t.offset;
    if (t.shape.size() == 2) {
      const bool resid =
          ends_with(t.name, "attn.proj.weight") ||
          (t.name.find(".experts.") != std::string::npos && ends_with(t.name, ".proj.weight"));
      const double s = resid ? std_resid : 0.02;
      for (size_t i = 0; i < t.numel; ++i) dst[i] = static_cast<float>(r.normal() * s);
    } else if (t.name.find("ln_") != std::string::npos && ends_with(t.name, ".weight")) {
      for (size_t i = 0; i < t.numel; ++i) dst[i] = 1.0f;
    }
  }
  set_parameters(host);
}

void moe_gpt::reset_load() {
  load_.routed.assign(static_cast<size_t>(cfg_.layers),
                      std::vector<int64_t>(static_cast<size_t>(cfg_.moe.experts), 0));
  load_.dropped.assign(static_cast<size_t>(cfg_.layers), 0);
  load_.tokens = 0;
}

nlohmann::json moe_gpt::load_json() const {
  nlohmann::json share = nlohmann::json::array();
  double sum = 0.0, mx = 0.0;
  int cells = 0;
  const double denom = static_cast<double>(cfg_.moe.top_k) * static_cast<double>(load_.tokens);
  for (const auto& layer : load_.routed) {
    nlohmann::json row = nlohmann::json::array();
    for (int64_t c : layer) {
      const double s = denom > 0 ? static_cast<double>(c) / denom : 0.0;
      row.push_back(s);
      sum += s;
      mx = std::max(mx, s);
      ++cells;
    }
    share.push_back(std::move(row));
  }
  return {{"tokens", load_.tokens},
          {"k", cfg_.moe.top_k},
          {"share", share},
          {"dropped", load_.dropped},
          {"mean_share", cells > 0 ? sum / cells : 0.0},
          {"max_share", mx}};
}

nlohmann::json moe_gpt::take_stats() {
  nlohmann::json j = load_json();
  j["event"] = "expert_load";
  reset_load();
  return j;
}

void moe_gpt::ensure_activations(int B, int T) {
  if (B == act_B_ && T == act_T_) return;
  const size_t BT = static_cast<size_t>(B) * T, C = cfg_.width, V = cfg_.vocab, NH = cfg_.heads,
               E = cfg_.moe.experts, K = cfg_.moe.top_k;
  cap_ = moe_capacity(cfg_.moe, static_cast<int>(BT));
  const size_t R = E * static_cast<size_t>(cap_);
  auto& be = *be_;
  head_.allocate(be, BT, C, V);
  encoded_ = be.alloc<float>(BT * C);
  acts_.clear();
  acts_.resize(static_cast<size_t>(cfg_.layers));
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
    a.rlogits = be.alloc<float>(BT * E);
    a.probs = be.alloc<float>(BT * E);
    a.gates = be.alloc<float>(BT * K);
    a.xin = be.alloc<float>(R * C);
    a.fch = be.alloc<float>(R * 4 * C);
    a.fch_gelu = be.alloc<float>(R * 4 * C);
    a.yexp = be.alloc<float>(R * C);
    a.res3 = be.alloc<float>(BT * C);
    a.idx = be.alloc<int32_t>(BT * K);
    a.slot_token = be.alloc<int32_t>(R);
    a.assign = be.alloc<int32_t>(BT * K);
    a.routed = be.alloc<int32_t>(E);
    a.f.assign(E, 0.0f);
  }
  tmp_ = be.alloc<float>(BT * C);
  dres_ = be.alloc<float>(BT * C);
  dln_ = be.alloc<float>(BT * C);
  datty_ = be.alloc<float>(BT * C);
  dqkv_ = be.alloc<float>(BT * 3 * C);
  datt_scratch_ = be.alloc<float>(static_cast<size_t>(B) * NH * T * T);
  dy_ = be.alloc<float>(R * C);
  dfch_gelu_ = be.alloc<float>(R * 4 * C);
  dfch_ = be.alloc<float>(R * 4 * C);
  dxin_ = be.alloc<float>(R * C);
  dgates_ = be.alloc<float>(BT * K);
  drouter_ = be.alloc<float>(BT * E);
  dprobs_ = be.alloc<float>(BT * E);
  act_B_ = B;
  act_T_ = T;
}

double moe_gpt::run_forward(const model_batch& batch) {
  have_forward_ = false;
  const int B = batch.B, T = batch.T;
  const auto& tokens = batch.inputs;
  const auto& targets = batch.targets;
  tied_lm_head::check_batch("moe_gpt::forward", tokens, targets, B, T, cfg_.context, cfg_.vocab);
  const size_t BT = static_cast<size_t>(B) * T;
  ensure_activations(B, T);
  auto& be = *be_;
  const int C = cfg_.width, NH = cfg_.heads, V = cfg_.vocab, E = cfg_.moe.experts,
            K = cfg_.moe.top_k;
  const int N = static_cast<int>(BT);
  head_.upload(be, tokens, targets);

  be.encoder_forward(encoded_.data(), head_.tokens.data(), p(k_wte), p(k_wpe), B, T, C);
  const float* residual = encoded_.data();
  double aux_sum = 0.0;
  std::vector<int32_t> routed(static_cast<size_t>(E));
  std::vector<int32_t> assign(BT * K);
  std::vector<float> probs(BT * E);
  for (int l = 0; l < cfg_.layers; ++l) {
    auto& a = acts_[static_cast<size_t>(l)];
    be.layernorm_forward(a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), residual,
                         p(blk(l, k_ln1w)), p(blk(l, k_ln1b)), N, C);
    be.matmul_forward(a.qkv.data(), a.ln1.data(), p(blk(l, k_qkvw)), p(blk(l, k_qkvb)), N, C,
                      3 * C);
    be.attention_forward(a.atty.data(), a.att.data(), a.qkv.data(), B, T, C, NH);
    be.matmul_forward(tmp_.data(), a.atty.data(), p(blk(l, k_attprojw)), p(blk(l, k_attprojb)), N,
                      C, C);
    be.residual_forward(a.res2.data(), residual, tmp_.data(), BT * C);
    be.layernorm_forward(a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.res2.data(),
                         p(blk(l, k_ln2w)), p(blk(l, k_ln2b)), N, C);
    // Router, capacity assignment, experts on their rows, gated scatter back.
    be.matmul_forward(a.rlogits.data(), a.ln2.data(), p(blk(l, k_router)), nullptr, N, C, E);
    be.router_forward(a.probs.data(), a.idx.data(), a.gates.data(), a.rlogits.data(), N, E, K);
    be.moe_assign(a.slot_token.data(), a.assign.data(), a.routed.data(), a.idx.data(), N, E, K,
                  cap_);
    be.moe_gather(a.xin.data(), a.ln2.data(), a.slot_token.data(), E * cap_, C);
    for (int e = 0; e < E; ++e) {
      const size_t r0 = static_cast<size_t>(e) * cap_;
      be.matmul_forward(a.fch.data() + r0 * 4 * C, a.xin.data() + r0 * C, p(expert_t(l, e, k_fcw)),
                        p(expert_t(l, e, k_fcb)), cap_, C, 4 * C);
      be.gelu_forward(a.fch_gelu.data() + r0 * 4 * C, a.fch.data() + r0 * 4 * C,
                      static_cast<size_t>(cap_) * 4 * C);
      be.matmul_forward(a.yexp.data() + r0 * C, a.fch_gelu.data() + r0 * 4 * C,
                        p(expert_t(l, e, k_projw)), p(expert_t(l, e, k_projb)), cap_, 4 * C, C);
    }
    be.moe_scatter(tmp_.data(), a.yexp.data(), a.assign.data(), a.gates.data(), N, K, C);
    be.residual_forward(a.res3.data(), a.res2.data(), tmp_.data(), BT * C);
    residual = a.res3.data();
    // Load statistics and the auxiliary loss (host; N·E and N·k values).
    be.download(routed.data(), a.routed.data(), routed.size());
    be.download(assign.data(), a.assign.data(), assign.size());
    be.download(probs.data(), a.probs.data(), probs.size());
    int64_t dropped = 0;
    for (int32_t r : assign) dropped += r < 0 ? 1 : 0;
    double aux = 0.0;
    for (int e = 0; e < E; ++e) {
      double pe = 0.0;
      for (size_t n = 0; n < BT; ++n) pe += probs[n * E + e];
      pe /= static_cast<double>(BT);
      const double fe = routed[e] / (static_cast<double>(K) * static_cast<double>(BT));
      a.f[e] = static_cast<float>(fe);
      aux += fe * pe;
      load_.routed[l][e] += routed[e];
    }
    load_.dropped[l] += dropped;
    aux_sum += E * aux;
  }
  load_.tokens += static_cast<int64_t>(BT);
  const size_t lnf = tensors_.size() - 2;
  last_ce_ = head_.forward(be, residual, p(k_wte), p(lnf), p(lnf + 1), N, C, V);
  last_aux_ = aux_sum;
  have_forward_ = true;
  return last_ce_ + cfg_.moe.aux_loss * last_aux_;
}

double moe_gpt::forward(const model_batch& batch) { return run_forward(batch); }

batch_metric moe_gpt::evaluate(const model_batch& batch) {
  run_forward(batch);
  return {last_ce_, std::nan("")};
}

void moe_gpt::backward() {
  if (!have_forward_)
    throw std::logic_error("moe_gpt::backward: no forward() with targets to differentiate");
  auto& be = *be_;
  const int B = act_B_, T = act_T_, C = cfg_.width, NH = cfg_.heads, V = cfg_.vocab,
            E = cfg_.moe.experts, K = cfg_.moe.top_k;
  const size_t BT = static_cast<size_t>(B) * T;
  const int N = static_cast<int>(BT);
  const size_t R = static_cast<size_t>(E) * cap_;
  const size_t lnf = tensors_.size() - 2;

  const float* top = acts_.empty() ? encoded_.data() : acts_.back().res3.data();
  head_.backward(be, dres_.data(), dln_.data(), g(k_wte), g(lnf), g(lnf + 1), top, p(k_wte), p(lnf),
                 N, C, V);
  std::vector<float> dprobs(BT * E);
  for (int l = cfg_.layers - 1; l >= 0; --l) {
    auto& a = acts_[static_cast<size_t>(l)];
    const float* residual =
        l == 0 ? encoded_.data() : acts_[static_cast<size_t>(l) - 1].res3.data();
    // MoE half: res3 = res2 + scatter(gates, experts(gather(ln2(res2)))).
    be.zero(dy_.data(), R * C);
    be.zero(dgates_.data(), BT * K);
    be.moe_scatter_backward(dy_.data(), dgates_.data(), dres_.data(), a.yexp.data(),
                            a.assign.data(), a.gates.data(), N, K, C);
    be.zero(dfch_gelu_.data(), R * 4 * C);
    be.zero(dfch_.data(), R * 4 * C);
    be.zero(dxin_.data(), R * C);
    for (int e = 0; e < E; ++e) {
      const size_t r0 = static_cast<size_t>(e) * cap_;
      be.matmul_backward(dfch_gelu_.data() + r0 * 4 * C, g(expert_t(l, e, k_projw)),
                         g(expert_t(l, e, k_projb)), dy_.data() + r0 * C,
                         a.fch_gelu.data() + r0 * 4 * C, p(expert_t(l, e, k_projw)), cap_, 4 * C,
                         C);
      be.gelu_backward(dfch_.data() + r0 * 4 * C, a.fch.data() + r0 * 4 * C,
                       dfch_gelu_.data() + r0 * 4 * C, static_cast<size_t>(cap_) * 4 * C);
      be.matmul_backward(dxin_.data() + r0 * C, g(expert_t(l, e, k_fcw)), g(expert_t(l, e, k_fcb)),
                         dfch_.data() + r0 * 4 * C, a.xin.data() + r0 * C, p(expert_t(l, e, k_fcw)),
                         cap_, C, 4 * C);
    }
    be.zero(dln_.data(), BT * C);
    be.moe_gather_backward(dln_.data(), dxin_.data(), a.assign.data(), N, K, C);
    // Router: gates' gradient plus the aux loss's, d(α·E·Σ_e f_e·P_e)/dp_ne = α·E·f_e/N.
    const double scale = cfg_.moe.aux_loss * E / static_cast<double>(BT);
    for (size_t n = 0; n < BT; ++n)
      for (int e = 0; e < E; ++e) dprobs[n * E + e] = static_cast<float>(scale * a.f[e]);
    be.upload(dprobs_.data(), dprobs.data(), dprobs.size());
    be.zero(drouter_.data(), BT * E);
    be.router_backward(drouter_.data(), dgates_.data(), dprobs_.data(), a.probs.data(),
                       a.idx.data(), N, E, K);
    be.matmul_backward(dln_.data(), g(blk(l, k_router)), nullptr, drouter_.data(), a.ln2.data(),
                       p(blk(l, k_router)), N, C, E);
    be.layernorm_backward(dres_.data(), g(blk(l, k_ln2w)), g(blk(l, k_ln2b)), dln_.data(),
                          a.res2.data(), p(blk(l, k_ln2w)), a.ln2_mean.data(), a.ln2_rstd.data(), N,
                          C);
    // Attention half, as gpt::backward.
    be.zero(datty_.data(), BT * C);
    be.matmul_backward(datty_.data(), g(blk(l, k_attprojw)), g(blk(l, k_attprojb)), dres_.data(),
                       a.atty.data(), p(blk(l, k_attprojw)), N, C, C);
    be.zero(dqkv_.data(), BT * 3 * C);
    be.attention_backward(dqkv_.data(), datt_scratch_.data(), datty_.data(), a.qkv.data(),
                          a.att.data(), B, T, C, NH);
    be.zero(dln_.data(), BT * C);
    be.matmul_backward(dln_.data(), g(blk(l, k_qkvw)), g(blk(l, k_qkvb)), dqkv_.data(),
                       a.ln1.data(), p(blk(l, k_qkvw)), N, C, 3 * C);
    be.layernorm_backward(dres_.data(), g(blk(l, k_ln1w)), g(blk(l, k_ln1b)), dln_.data(), residual,
                          p(blk(l, k_ln1w)), a.ln1_mean.data(), a.ln1_rstd.data(), N, C);
  }
  be.encoder_backward(g(k_wte), g(k_wpe), dres_.data(), head_.tokens.data(), B, T, C);
  have_forward_ = false;
}

}  // namespace dd
