// tests/runtime/gpt_test.cpp — GPT layout, init, shape validation and a finite-difference
// gradient check of the whole model on the reference backend; RNG and LR schedule values.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/backend.hpp"
#include "runtime/gpt.hpp"
#include "runtime/lr_schedule.hpp"
#include "runtime/rng.hpp"
#include "tests/runtime/grad_check.hpp"

namespace {

using ::testing::HasSubstr;

TEST(Rng, Splitmix64KnownValues) {
  // Reference outputs of splitmix64 seeded with 0 (Vigna's splitmix64.c).
  dd::rng r(0);
  EXPECT_EQ(r.next_u64(), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(r.next_u64(), 0x6e789e6aa1b965f4ULL);
  EXPECT_EQ(r.next_u64(), 0x06c45d188009454fULL);
}

TEST(Rng, NormalMoments) {
  dd::rng r(7);
  double s = 0, s2 = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double z = r.normal();
    s += z;
    s2 += z * z;
  }
  // Standard errors: mean 1/sqrt(n) = 0.0022, variance sqrt(2/n) = 0.0032; 5 sigma bounds.
  EXPECT_NEAR(s / n, 0.0, 0.012);
  EXPECT_NEAR(s2 / n, 1.0, 0.016);
}

TEST(LrSchedule, WarmupCosineFloor) {
  dd::lr_schedule s{1e-3, 10, 110, 0.1};
  EXPECT_DOUBLE_EQ(s.at(0), 1e-4);
  EXPECT_DOUBLE_EQ(s.at(9), 1e-3);
  EXPECT_DOUBLE_EQ(s.at(10), 1e-3);
  EXPECT_NEAR(s.at(60), 0.55e-3, 1e-15);  // half way down the cosine: (1e-3 + 1e-4) / 2
  EXPECT_DOUBLE_EQ(s.at(110), 1e-4);
  EXPECT_DOUBLE_EQ(s.at(1000), 1e-4);
  dd::lr_schedule bad{1e-3, -1, 10, 0.1};
  EXPECT_THROW(bad.validate(), std::invalid_argument);
}

TEST(Gpt, LayoutOfDefaultModel) {
  dd::gpt_config cfg;
  const auto ts = dd::gpt_tensors(cfg);
  ASSERT_EQ(ts.size(), 2u + 12u * 4u + 2u);
  EXPECT_EQ(dd::gpt_num_params(cfg), 842496u);  // 0.84M, ALGORITHM.md's reference model
  EXPECT_EQ(ts[0].name, "wte");
  EXPECT_TRUE(ts[0].is_embedding);
  EXPECT_TRUE(ts[1].is_embedding);
  EXPECT_EQ(ts[4].name, "h.0.attn.qkv.weight");
  EXPECT_EQ(ts[4].shape, (std::vector<int64_t>{384, 128}));
  EXPECT_TRUE(ts[4].decay);
  EXPECT_FALSE(ts[5].decay);  // bias
  EXPECT_EQ(ts[4].layer, 0);
  EXPECT_EQ(ts.back().name, "ln_f.bias");
  EXPECT_EQ(ts.back().layer, -1);
  size_t off = 0;
  for (const auto& t : ts) {
    EXPECT_EQ(t.offset, off) << t.name;
    off += t.numel;
  }
}

TEST(Gpt, InitStatistics) {
  auto be = dd::kernels::make_backend("reference");
  dd::gpt_config cfg;
  dd::gpt m(*be, cfg);
  m.init(1);
  const auto p = m.get_parameters();
  auto stats = [&](const std::string& name) {
    const auto& t = m.tensor(name);
    double s = 0, s2 = 0;
    for (size_t i = 0; i < t.numel; ++i) {
      s += p[t.offset + i];
      s2 += static_cast<double>(p[t.offset + i]) * p[t.offset + i];
    }
    return std::make_pair(s / t.numel, std::sqrt(s2 / t.numel));
  };
  // Sample std of 32768 normals: relative standard error 1/sqrt(2n) = 0.4%; allow 3%.
  EXPECT_NEAR(stats("wte").second, 0.02, 0.0006);
  EXPECT_NEAR(stats("h.0.mlp.fc.weight").second, 0.02, 0.0006);
  EXPECT_NEAR(stats("h.0.attn.proj.weight").second, 0.02 / std::sqrt(8.0), 0.0003);
  EXPECT_EQ(stats("h.1.ln_1.weight").first, 1.0);
  EXPECT_EQ(stats("h.1.attn.qkv.bias").second, 0.0);
  m.init(1);
  EXPECT_EQ(m.get_parameters(), p);  // same seed, same weights
  m.init(2);
  EXPECT_NE(m.get_parameters(), p);
}

TEST(Gpt, RejectsBadShapes) {
  auto be = dd::kernels::make_backend("reference");
  dd::gpt_config cfg{256, 8, 1, 2, 8};
  dd::gpt m(*be, cfg);
  m.init(3);
  std::vector<int32_t> tok(2 * 8, 1);
  try {
    m.forward(tok, tok, 2, 9);
    FAIL() << "T > context accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("exceeds the model's context 8"));
  }
  try {
    m.forward(tok, tok, 3, 8);
    FAIL() << "size mismatch accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("expected B*T"));
  }
  tok[5] = 256;
  try {
    m.forward(tok, tok, 2, 8);
    FAIL() << "out-of-range token accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("token 256 at position 5"));
  }
  EXPECT_THROW(m.backward(), std::logic_error);
  dd::gpt_config odd{256, 8, 1, 3, 8};
  try {
    dd::gpt bad(*be, odd);
    FAIL() << "width % heads != 0 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("divisible by heads"));
  }
  std::vector<float> wrong(10);
  EXPECT_THROW(m.set_parameters(wrong), std::invalid_argument);
  EXPECT_THROW(m.read_parameters(m.num_params() - 2, 3, wrong.data()), std::out_of_range);
}

TEST(Gpt, ParameterRangesRoundTrip) {
  auto be = dd::kernels::make_backend("cpu");
  dd::gpt m(*be, dd::gpt_config{256, 8, 1, 2, 8});
  m.init(4);
  const auto& t = m.tensor("h.0.mlp.fc.bias");
  std::vector<float> vals(t.numel);
  for (size_t i = 0; i < vals.size(); ++i) vals[i] = 0.5f + static_cast<float>(i);
  m.write_parameters(t.offset, t.numel, vals.data());
  std::vector<float> back(t.numel);
  m.read_parameters(t.offset, t.numel, back.data());
  EXPECT_EQ(back, vals);
  EXPECT_EQ(m.get_parameters()[t.offset + 3], 3.5f);
}

// Central finite differences of the mean loss against backward(), for EVERY parameter of a tiny
// model on the reference backend. The loss is computed in float32 (summed in double), so with
// h = 1e-2 the rounding error of (L(θ+h) − L(θ−h)) / 2h is about 1e-7·|L|/h ≈ 3e-5 and the
// truncation error O(h²·L''') is of the same order; we accept |fd − g| <= 2e-4 + 2e-2·|g| per
// element and require the two gradient vectors to agree to cosine > 0.9999 overall.
TEST(Gpt, FiniteDifferenceGradientCheck) {
  auto be = dd::kernels::make_backend("reference");
  dd::gpt_config cfg{13, 6, 2, 2, 8};
  dd::gpt m(*be, cfg);
  m.init(11);
  dd::rng r(5);
  const auto p = dd::test::perturb_parameters(m, r);
  const int B = 2, T = 5;
  std::vector<int32_t> tok(B * T), tgt(B * T);
  for (int i = 0; i < B * T; ++i) {
    tok[i] = static_cast<int32_t>(r.below(13));
    tgt[i] = static_cast<int32_t>(r.below(13));
  }
  m.zero_grad();
  m.forward(tok, tgt, B, T);
  m.backward();
  const auto g = m.get_gradients();
  dd::test::fd_tally tally;
  for (size_t i = 0; i < p.size(); ++i) {
    const double fd = dd::test::central_difference(
        p[i], 1e-2f, [&](float v) { m.write_parameters(i, 1, &v); },
        [&] { return m.forward(tok, tgt, B, T); });
    tally.add(fd, g[i], [&] { return "param " + std::to_string(i); });
  }
  tally.expect_agreement();
}

TEST(Gpt, CpuMatchesReference) {
  auto ref = dd::kernels::make_backend("reference");
  auto cpu = dd::kernels::make_backend("cpu");
  dd::gpt_config cfg{256, 16, 2, 2, 32};
  dd::gpt a(*ref, cfg), b(*cpu, cfg);
  a.init(9);
  b.init(9);
  std::vector<int32_t> tok(3 * 16), tgt(3 * 16);
  dd::rng r(1);
  for (size_t i = 0; i < tok.size(); ++i) {
    tok[i] = static_cast<int32_t>(r.below(256));
    tgt[i] = static_cast<int32_t>(r.below(256));
  }
  a.zero_grad();
  b.zero_grad();
  const double la = a.forward(tok, tgt, 3, 16), lb = b.forward(tok, tgt, 3, 16);
  // float32 with different summation orders (BLAS vs naive loops): ~1e-6 relative.
  EXPECT_NEAR(la, lb, 1e-5);
  a.backward();
  b.backward();
  dd::test::expect_gradients_close(a.get_gradients(), b.get_gradients());
}

}  // namespace
