// tests/runtime/moe_test.cpp — the mixture-of-experts GPT (runtime/moe_gpt.hpp): layout and
// flags, capacity, a finite-difference gradient check of the whole model (aux loss included,
// with dropped tokens), cpu against reference, the load statistics, and golden values from an
// independent PyTorch implementation (tests/fixtures/moe_golden.json, written by
// tools/torch_reference/make_moe_golden.py: autograd, its own routing and capacity loop).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "kernels/backend.hpp"
#include "runtime/adamw.hpp"
#include "runtime/fragments.hpp"
#include "runtime/gpt.hpp"
#include "runtime/lr_schedule.hpp"
#include "runtime/model.hpp"
#include "runtime/moe_gpt.hpp"
#include "runtime/rng.hpp"
#include "tests/runtime/golden_support.hpp"
#include "tests/runtime/grad_check.hpp"

namespace {

dd::model_config moe_cfg(int V, int T, int L, int NH, int C, int E, int k, double cf, double aux) {
  dd::model_config c(dd::gpt_config{V, T, L, NH, C});
  c.kind = "moe_gpt";
  c.moe.experts = E;
  c.moe.top_k = k;
  c.moe.capacity_factor = cf;
  c.moe.aux_loss = aux;
  return c;
}

TEST(MoeGpt, LayoutGivesEveryExpertItsOwnTensors) {
  const auto c = moe_cfg(256, 16, 2, 2, 16, 4, 1, 1.25, 0.01);
  const auto ts = dd::moe_gpt_tensors(c);
  ASSERT_EQ(ts.size(), 2u + 2u * (9u + 4u * 4u) + 2u);
  EXPECT_EQ(ts[10].name, "h.0.mlp.router.weight");
  EXPECT_EQ(ts[10].shape, (std::vector<int64_t>{4, 16}));
  EXPECT_TRUE(ts[10].decay);
  EXPECT_EQ(ts[11].name, "h.0.mlp.experts.0.fc.weight");
  EXPECT_EQ(ts[11].shape, (std::vector<int64_t>{64, 16}));
  EXPECT_EQ(ts[14].name, "h.0.mlp.experts.0.proj.bias");
  EXPECT_FALSE(ts[14].decay);
  EXPECT_EQ(ts[26].name, "h.0.mlp.experts.3.proj.bias");
  EXPECT_EQ(ts[27].name, "h.1.ln_1.weight");
  EXPECT_EQ(ts[27].layer, 1);
  EXPECT_TRUE(ts[0].is_embedding);
  EXPECT_FALSE(ts[11].is_embedding);
  // Parameters: dense GPT's minus 2 blocks' MLP (8C² + 5C) plus router EC and E experts.
  size_t n = 0;
  for (const auto& t : ts) n += t.numel;
  const size_t C = 16, L = 2, E = 4;
  const size_t dense = dd::gpt_num_params(c);
  EXPECT_EQ(n, dense + L * (E * C + (E - 1) * (8 * C * C + 5 * C)));
  // Balanced fragmentation over 4 fragments spreads each block's experts: every fragment gets
  // expert tensors, and the load is close to even.
  auto plan = dd::make_fragment_plan(ts, 4, dd::fragment_strategy::balanced);
  ASSERT_TRUE(plan);
  for (const auto& f : plan->fragments) {
    bool has_expert = false;
    for (const auto& t : f.tensors) has_expert |= t.name.find(".experts.") != std::string::npos;
    EXPECT_TRUE(has_expert) << "fragment " << f.fragment_id;
  }
  EXPECT_LT(plan->imbalance(), 1.1);
}

TEST(MoeGpt, CapacityAndFlops) {
  dd::moe_config m;
  m.experts = 4;
  m.top_k = 1;
  m.capacity_factor = 1.25;
  EXPECT_EQ(dd::moe_capacity(m, 64), 20);  // ceil(1.25·64/4)
  m.experts = 3;
  m.top_k = 2;
  EXPECT_EQ(dd::moe_capacity(m, 64), 54);  // ceil(1.25·2·64/3) = ceil(53.33)
  m.capacity_factor = 0.01;
  EXPECT_EQ(dd::moe_capacity(m, 4), 1);  // at least one slot
  // k = 1, E experts of the dense MLP's size: the active FLOPs are the dense GPT's plus the
  // router's 6·L·E·C per token.
  const auto c = moe_cfg(256, 128, 4, 4, 128, 8, 1, 1.25, 0.01);
  EXPECT_DOUBLE_EQ(dd::moe_gpt_flops_per_token(c, 128),
                   dd::gpt_flops_per_token(c, 128) + 6.0 * 4 * 8 * 128);
  auto be = dd::kernels::make_backend("reference");
  auto m2 = dd::make_model(*be, moe_cfg(256, 8, 1, 2, 8, 3, 2, 1.0, 0.01));
  EXPECT_DOUBLE_EQ(m2->flops_per_sample(8),
                   8 * dd::moe_gpt_flops_per_token(moe_cfg(256, 8, 1, 2, 8, 3, 2, 1.0, 0.01), 8));
}

TEST(MoeGpt, ConfigRoundTripAndValidation) {
  const auto c = moe_cfg(256, 16, 2, 2, 16, 5, 2, 1.5, 0.02);
  const auto j = c.to_json();
  EXPECT_EQ(j.at("kind"), "moe_gpt");
  EXPECT_EQ(j.at("experts"), 5);
  EXPECT_EQ(dd::model_config::from_json(j), c);
  auto bad = c;
  bad.moe.top_k = 3;
  EXPECT_THROW(bad.validate(), std::invalid_argument);
  bad = c;
  bad.moe.experts = 1;
  try {
    bad.validate();
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("model.experts"));
  }
  auto missing = j;
  missing.erase("aux_loss");
  EXPECT_THROW((void)dd::model_config::from_json(missing), std::invalid_argument);
}

// Central finite differences of the objective (cross-entropy + aux_loss·Σ aux) against
// backward() for EVERY parameter, on the reference backend, with a capacity that drops tokens.
// Routing is piecewise constant: a perturbation that flips a top-k choice or a capacity slot
// makes the difference meaningless, so such parameters are detected (the routing decisions are
// compared before and after) and skipped; the test requires that at most 10% are skipped
// (measured: printed by the test) and that every tensor keeps checked elements.
// Tolerances as the GPT check (tests/runtime/gpt_test.cpp): |fd − g| <= 2e-4 + 2e-2·|g|, cosine
// > 0.9999; h = 5e-3 (half the GPT check's, fewer routing flips; rounding error ~6e-5).
void finite_difference_check(int k) {
  auto be = dd::kernels::make_backend("reference");
  const auto cfg = moe_cfg(13, 6, 2, 2, 8, 3, k, 0.7, 0.5);  // large aux: its gradient shows
  dd::moe_gpt m(*be, cfg);
  m.init(11);
  // Seed of the parameter noise and the batch: 8, or FD_SEED from the environment (printed).
  // Seed 5 puts one token's top-1 within h of a tie, so every h.0.attn.proj.bias perturbation
  // flips its route; seeds 6-11 checked: at most 1.1% skipped, every tensor covered.
  const char* env = std::getenv("FD_SEED");
  const uint64_t seed = env != nullptr ? std::strtoull(env, nullptr, 10) : 8;
  dd::rng r(seed);
  const auto p = dd::test::perturb_parameters(m, r);
  dd::model_batch b;
  b.B = 2;
  b.T = 5;
  for (int i = 0; i < 10; ++i) {
    b.inputs.push_back(static_cast<int32_t>(r.below(13)));
    b.targets.push_back(static_cast<int32_t>(r.below(13)));
  }
  m.zero_grad();
  m.reset_load();
  (void)m.forward(b);
  const auto load0 = m.load();
  ASSERT_GT(load0.dropped[0] + load0.dropped[1], 0) << "the check must cover dropped tokens";
  EXPECT_GT(m.last_aux(), 0.0);
  m.backward();
  const auto g = m.get_gradients();
  dd::test::fd_tally tally;
  int skipped = 0;
  std::vector<int> checked(m.tensors().size(), 0);
  for (size_t i = 0; i < p.size(); ++i) {
    bool same_routing = true;  // both forwards route and drop as the unperturbed one did
    const double fd = dd::test::central_difference(
        p[i], 5e-3f, [&](float v) { m.write_parameters(i, 1, &v); },
        [&] {
          m.reset_load();
          const double loss = m.forward(b);
          same_routing =
              same_routing && m.load().routed == load0.routed && m.load().dropped == load0.dropped;
          return loss;
        });
    if (!same_routing) {
      ++skipped;
      continue;
    }
    for (size_t t = 0; t < m.tensors().size(); ++t)
      if (i >= m.tensors()[t].offset && i < m.tensors()[t].offset + m.tensors()[t].numel)
        ++checked[t];
    tally.add(fd, g[i], [&] {
      for (const auto& t : m.tensors())
        if (i >= t.offset && i < t.offset + t.numel)
          return "k " + std::to_string(k) + " param " + std::to_string(i) + " (" + t.name + ")";
      return "k " + std::to_string(k) + " param " + std::to_string(i) + " (?)";
    });
  }
  tally.expect_agreement();
  EXPECT_LE(skipped, static_cast<int>(p.size() / 10)) << skipped << " of " << p.size();
  std::printf(
      "finite differences, k = %d, seed %llu: %d of %zu parameters skipped (routing "
      "flipped)\n",
      k, static_cast<unsigned long long>(seed), skipped, p.size());
  for (size_t t = 0; t < checked.size(); ++t)
    EXPECT_GT(checked[t], 0) << m.tensors()[t].name << " has no checked element";
  // The router's gradient is not vacuous (gates and aux both reach it).
  const auto& rt = m.tensor("h.0.mlp.router.weight");
  double rn = 0;
  for (size_t i = rt.offset; i < rt.offset + rt.numel; ++i) rn += double(g[i]) * g[i];
  EXPECT_GT(rn, 1e-8);
}

TEST(MoeGpt, FiniteDifferenceGradientCheckTop1) { finite_difference_check(1); }
TEST(MoeGpt, FiniteDifferenceGradientCheckTop2) { finite_difference_check(2); }

TEST(MoeGpt, CpuMatchesReferenceAndCountsLoad) {
  auto ref = dd::kernels::make_backend("reference");
  auto cpu = dd::kernels::make_backend("cpu", {2, 0});
  const auto cfg = moe_cfg(256, 16, 2, 2, 32, 4, 2, 1.0, 0.01);
  dd::moe_gpt a(*ref, cfg), c(*cpu, cfg);
  a.init(3);
  c.init(3);
  EXPECT_EQ(a.get_parameters(), c.get_parameters());
  dd::model_batch b;
  b.B = 4;
  b.T = 16;
  dd::rng r(9);
  for (int i = 0; i < 64; ++i) {
    b.inputs.push_back(static_cast<int32_t>(r.below(256)));
    b.targets.push_back(static_cast<int32_t>(r.below(256)));
  }
  a.zero_grad();
  c.zero_grad();
  const double la = a.forward(b), lc = c.forward(b);
  EXPECT_NEAR(la, lc, 1e-5);
  EXPECT_EQ(a.load().routed, c.load().routed);
  EXPECT_EQ(a.load().dropped, c.load().dropped);
  a.backward();
  c.backward();
  const auto ga = a.get_gradients(), gc = c.get_gradients();
  double num = 0, den = 0;
  for (size_t i = 0; i < ga.size(); ++i) {
    num += (double(ga[i]) - gc[i]) * (double(ga[i]) - gc[i]);
    den += double(ga[i]) * ga[i];
  }
  EXPECT_LT(std::sqrt(num / den), 1e-4);
  // Load: 2 layers × 64 tokens × k = 2 choices routed; the JSON shares sum to 1 per layer.
  const auto& L = a.load();
  EXPECT_EQ(L.tokens, 64);
  for (const auto& layer : L.routed) {
    int64_t s = 0;
    for (auto x : layer) s += x;
    EXPECT_EQ(s, 128);
  }
  const auto j = a.load_json();
  double s0 = 0;
  for (const auto& x : j["share"][0]) s0 += x.get<double>();
  EXPECT_NEAR(s0, 1.0, 1e-12);
  EXPECT_NEAR(j["mean_share"].get<double>(), 0.25, 1e-12);
  EXPECT_GE(j["max_share"].get<double>(), 0.25);
  // capacity = ceil(1.0·2·64/4) = 32 rows per expert: dropped = Σ_e max(0, routed_e − 32).
  for (size_t l = 0; l < 2; ++l) {
    int64_t want = 0;
    for (auto x : L.routed[l]) want += std::max<int64_t>(0, x - 32);
    EXPECT_EQ(L.dropped[l], want) << "layer " << l;
  }
  // evaluate(): the cross-entropy alone; forward(): plus 0.01 · Σ aux.
  const auto metric = a.evaluate(b);
  EXPECT_NEAR(metric.loss + 0.01 * a.last_aux(), la, 1e-9);
  // Near-uniform router at init: each layer's aux = E·Σ f_e·P_e is close to 1 (uniform f, P).
  EXPECT_NEAR(a.last_aux(), 2.0, 0.5);
}

// ---- golden values from PyTorch -----------------------------------------------------------
class MoeGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(MoeGolden, AdamWStepsMatchPyTorch) {
  const auto all = dd::test::load_golden("moe_golden.json");
  ASSERT_EQ(all["cases"].size(), 2u);
  for (const auto& g : all["cases"]) {
    auto be = dd::kernels::make_backend(GetParam(), {1, 0});
    const auto cfg = dd::model_config::from_json(g["config"]);
    SCOPED_TRACE("top_k " + std::to_string(cfg.moe.top_k));
    dd::moe_gpt m(*be, cfg);
    dd::test::init_as_golden(m, g);
    dd::test::golden_optimizer opt(*be, m, g["hyper"]);
    const int B = g["B"], T = g["T"];
    for (size_t st = 0; st < g["steps"].size(); ++st) {
      const auto& want = g["steps"][st];
      dd::model_batch b;
      b.B = B;
      b.T = T;
      b.inputs = dd::test::flat_rows(g["batches"][st]["tokens"]);
      b.targets = dd::test::flat_rows(g["batches"][st]["targets"]);
      m.zero_grad();
      m.reset_load();
      const double loss = m.forward(b);
      // Routing decisions are discrete: they must be exactly PyTorch's.
      for (size_t l = 0; l < 2; ++l) {
        std::vector<int64_t> routed;
        for (const auto& x : want["stats"][l]["routed"]) routed.push_back(x.get<int64_t>());
        EXPECT_EQ(m.load().routed[l], routed) << "step " << st << " layer " << l;
        EXPECT_EQ(m.load().dropped[l], want["stats"][l]["dropped"].get<int64_t>())
            << "step " << st << " layer " << l;
      }
      m.backward();
      const double gn =
          dd::clip_grad_norm(*be, m.grads(), m.num_params(), g["hyper"]["grad_clip"].get<double>());
      opt.step(m, st);
      // Float32 on both sides, different summation orders: tolerances as the GPT golden test.
      EXPECT_NEAR(loss, want["loss"].get<double>(), 2e-5) << "step " << st;
      EXPECT_NEAR(m.last_cross_entropy(), want["ce"].get<double>(), 2e-5) << "step " << st;
      EXPECT_NEAR(m.last_aux(), want["aux"].get<double>(), 2e-5) << "step " << st;
      EXPECT_NEAR(gn, want["grad_norm"].get<double>(), 1e-5 * want["grad_norm"].get<double>())
          << "step " << st;
      dd::test::expect_sums_match(m.get_parameters(), want, 1e-5, 1e-5, st);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, MoeGolden, ::testing::Values("reference", "cpu"));

}  // namespace
