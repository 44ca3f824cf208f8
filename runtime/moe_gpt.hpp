// runtime/moe_gpt.hpp — a mixture-of-experts GPT (model.kind = "moe_gpt"): the dense GPT of
// runtime/gpt.hpp with every block's MLP replaced by E expert MLPs and a learned router.
//
// Block l (pre-LN, as GPT):  x = x + proj(attn(qkv(ln_1(x))));  x = x + moe(ln_2(x))  with
//   router logits z = ln_2(x) · W_rᵀ (W_r (E,C), no bias); p = softmax(z) per token;
//   top-k experts (k = 1 or 2) by p, ties to the lower expert index; gates g = p of the chosen
//   experts (k = 1, Switch Transformer, Fedus et al. 2021) or renormalised to sum 1 (k = 2,
//   GShard, Lepikhin et al. 2020);
//   capacity = ceil(capacity_factor · k · N / E) tokens per expert (N = B·T tokens of the batch),
//   filled in batch order (token by token, each token's choices in rank order); a choice beyond
//   its expert's capacity is dropped (that token gets no contribution from that expert; a token
//   with all choices dropped passes through on the residual) and counted;
//   moe(y)_n = Σ_j g_nj · expert_{e_nj}(y_n), expert_e(y) = proj_e(gelu(fc_e(y))) (C → 4C → C).
// Loss = mean next-token cross-entropy + aux_loss · Σ_l aux_l, with the load-balancing loss
//   aux_l = E · Σ_e f_e · P_e (Switch eq. 4): f_e = (choices routed to e, kept or dropped)/(k·N),
//   P_e = mean_n p_ne. f is piecewise constant (no gradient); P carries the gradient.
//
// Parameters: as gpt_tensors() with each block's mlp.* replaced by h.l.mlp.router.weight (E,C)
// and, for e = 0..E-1, h.l.mlp.experts.e.{fc.weight (4C,C), fc.bias (4C), proj.weight (C,4C),
// proj.bias (C)} — every expert's weights are their own named tensors, so the balanced fragment
// strategy spreads experts over fragments. Same flags as GPT (decay on 2-D tensors, layer = l).
//
// Backends: needs the mixture-of-experts ops (kernels/backend.hpp), which the reference and cpu
// backends implement; the config refuses learners.backend = "cuda" with moe_gpt.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/backend.hpp"
#include "runtime/model.hpp"
#include "runtime/transformer_block.hpp"

namespace dd {

/// Parameter layout of a moe_gpt config (see the file comment), without allocating.
/// Throws std::invalid_argument for a bad config.
std::vector<tensor_info> moe_gpt_tensors(const model_config& cfg);

/// Tokens per expert: ceil(capacity_factor · k · N / E), at least 1.
int moe_capacity(const moe_config& moe, int N);

/// Model FLOPs per trained token (forward + backward) of the ACTIVE parameters:
/// 6·(L·(4C² + k·8C² + E·C) + V·C) + 6·L·T·C — gpt_flops_per_token's accounting with the dense
/// MLP's 8C² replaced by k experts' and the router's E·C (capacity padding not counted).
double moe_gpt_flops_per_token(const model_config& cfg, int T);

/// The model. Move-only; bound to one backend that must outlive it.
class moe_gpt : public model {
 public:
  /// Allocates parameters and gradients (zero). Throws std::invalid_argument for a bad config
  /// (kind must be "moe_gpt").
  moe_gpt(kernels::backend& be, const model_config& cfg);
  moe_gpt(moe_gpt&&) noexcept = default;

  /// GPT-2 initialization as gpt::init, from one dd::rng stream in tensors() order: every 2-D
  /// weight (router included) ~ N(0, 0.02²), the residual projections (attn.proj.weight and each
  /// expert's proj.weight) ~ N(0, (0.02/sqrt(2·layers))²), biases 0, layer-norm weights 1.
  void init(uint64_t seed) override;
  model_config config() const override { return cfg_; }
  /// moe_gpt_flops_per_token(config(), T) · T.
  double flops_per_sample(int T) const override;

  /// Forward on batch.inputs/targets (B,T); returns cross-entropy + aux_loss · Σ_l aux_l (the
  /// objective backward() differentiates). Same argument checks as gpt::forward.
  double forward(const model_batch& batch) override;
  void backward() override;
  /// Loss = the cross-entropy alone (comparable with the dense GPT); accuracy NaN.
  batch_metric evaluate(const model_batch& batch) override;

  /// Of the last forward(): the mean cross-entropy (nats/token) and Σ_l aux_l (unscaled).
  double last_cross_entropy() const noexcept { return last_ce_; }
  double last_aux() const noexcept { return last_aux_; }

  /// Router statistics accumulated over forward() calls since the last reset_load():
  /// routed[l][e] = choices that picked expert e in block l; dropped[l] = choices dropped for
  /// capacity in block l; tokens = N summed over the forwards.
  struct load_stats {
    std::vector<std::vector<int64_t>> routed;  ///< (L, E)
    std::vector<int64_t> dropped;              ///< (L)
    int64_t tokens = 0;
  };
  const load_stats& load() const noexcept { return load_; }
  void reset_load();
  /// The load as JSON: {"tokens", "k", "share": [[routed/(k·tokens) per expert] per layer],
  /// "dropped": [per layer], "mean_share", "max_share"} (max over layers and experts; an expert
  /// at 1/E share is perfectly balanced).
  nlohmann::json load_json() const;
  /// {"event": "expert_load", load_json() fields}, then reset_load().
  nlohmann::json take_stats() override;

 private:
  struct layer_acts {
    kernels::buffer<float> ln1, ln1_mean, ln1_rstd, qkv, atty, att, res2, ln2, ln2_mean, ln2_rstd,
        rlogits, probs, gates, xin, fch, fch_gelu, yexp, res3;
    kernels::buffer<int32_t> idx, slot_token, assign, routed;
    std::vector<float> f;  ///< f_e of the last forward (host)
  };
  void ensure_activations(int B, int T);
  double run_forward(const model_batch& batch);
  size_t blk(int layer, size_t k) const { return 2 + per_block_ * static_cast<size_t>(layer) + k; }
  size_t expert_t(int layer, int e, size_t k) const { return blk(layer, 9 + 4 * size_t(e) + k); }

  model_config cfg_;
  size_t per_block_;
  int act_B_ = 0, act_T_ = 0, cap_ = 0;
  bool have_forward_ = false;
  double last_ce_ = 0.0, last_aux_ = 0.0;
  load_stats load_;
  kernels::buffer<float> encoded_;
  std::vector<layer_acts> acts_;
  kernels::buffer<float> tmp_;
  tied_lm_head head_;
  kernels::buffer<float> dres_, dln_, datty_, dqkv_, datt_scratch_;
  kernels::buffer<float> dy_, dfch_gelu_, dfch_, dxin_, dgates_, drouter_, dprobs_;
};

}  // namespace dd
