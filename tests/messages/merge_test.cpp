// The owner's merge (RDA / weighted average), outer Nesterov, anchors, on every host backend.
// Inputs are a few elements with hand-computed results; float32 ops over ≤ 5 elements are exact
// to a few ulps, so 1e-5 absolute (values are O(1)) is tight yet safe.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "runtime/merge.hpp"

namespace dd {
namespace {

constexpr float tol = 1e-5f;

// Fragment: "emb" (embedding, 2 elements) then "w" (3 elements).
fragment_layout layout() {
  fragment_layout l;
  l.fragment_id = 0;
  l.tensors.push_back({0, "emb", 0, 0, 2, true});
  l.tensors.push_back({1, "w", 2, 2, 3, false});
  l.numel = 5;
  return l;
}

class Merge : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { be_ = kernels::make_backend(GetParam()); }
  const float* dev(std::vector<float> host) {
    bufs_.push_back(be_->alloc<float>(host.size()));
    be_->upload(bufs_.back().data(), host.data(), host.size());
    return bufs_.back().data();
  }
  float* dev_mut(std::vector<float> host) { return const_cast<float*>(dev(std::move(host))); }
  std::vector<float> host(const float* p, size_t n) {
    std::vector<float> out(n);
    be_->download(out.data(), p, n);
    return out;
  }
  void expect_near(const std::vector<float>& got, const std::vector<float>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
  }
  std::vector<float> delta_of(const std::vector<contribution>& c, const merge_options& o,
                              merge_report* rep = nullptr) {
    float* d = dev_mut(std::vector<float>(5, -99.0f));
    auto r = compute_delta(*be_, layout(), c, o, d);
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
    if (rep && r.ok()) *rep = *r;
    return host(d, 5);
  }
  std::unique_ptr<kernels::backend> be_;
  std::vector<kernels::buffer<float>> bufs_;
};

TEST_P(Merge, RdaAndEmbeddingAverageByHand) {
  // w: v1 = (3,0,0) (norm 3), v2 = (0,4,0) (norm 4); weights 1 and 3 -> c = 0.25, 0.75.
  // norm = 0.25·3 + 0.75·4 = 3.75; direction ∝ (0.25, 0.75, 0) / sqrt(0.625).
  // emb: weighted average 0.25·(1,2) + 0.75·(5,-2) = (4, -1).
  std::vector<contribution> c = {{dev({1, 2, 3, 0, 0}), 1.0, 0, 10},
                                 {dev({5, -2, 0, 4, 0}), 3.0, 0, 11}};
  merge_report rep;
  auto d = delta_of(c, merge_options{}, &rep);
  const float k = 3.75f / std::sqrt(0.625f);
  expect_near(d, {4, -1, 0.25f * k, 0.75f * k, 0});
  ASSERT_EQ(rep.tensors.size(), 2u);
  EXPECT_EQ(rep.tensors[0].rule_used, merge_rule::weighted_average);
  EXPECT_EQ(rep.tensors[1].rule_used, merge_rule::rda);
  EXPECT_FALSE(rep.tensors[1].fallback);
  EXPECT_NEAR(rep.tensors[1].delta_norm, 3.75, 1e-5);
  EXPECT_NEAR(rep.weights[0], 0.25, 1e-12);
  EXPECT_NEAR(rep.weights[1], 0.75, 1e-12);
  EXPECT_EQ(rep.weight_sum, 4.0);
  EXPECT_EQ(rep.learner_ids, (std::vector<int32_t>{10, 11}));
}

TEST_P(Merge, WeightedAverageRule) {
  std::vector<contribution> c = {{dev({1, 2, 3, 0, 0}), 1.0, 0, 0},
                                 {dev({5, -2, 0, 4, 0}), 3.0, 0, 1}};
  merge_options o;
  o.rule = merge_rule::weighted_average;
  merge_report rep;
  expect_near(delta_of(c, o, &rep), {4, -1, 0.75f, 3.0f, 0});
  EXPECT_EQ(rep.tensors[1].rule_used, merge_rule::weighted_average);
  EXPECT_FALSE(rep.tensors[1].fallback);
}

TEST_P(Merge, OneContributorIsItsOwnDelta) {
  std::vector<contribution> c = {{dev({0.5f, -1, 2, -3, 6}), 7.0, 0, 0}};
  expect_near(delta_of(c, merge_options{}), {0.5f, -1, 2, -3, 6});
}

TEST_P(Merge, ZeroVectorGivesNoDirectionButCountsInTheNorm) {
  // w: v1 = 0, v2 = (0,4,0), equal weights: norm = 0.5·0 + 0.5·4 = 2, direction (0,1,0).
  std::vector<contribution> c = {{dev({0, 0, 0, 0, 0}), 1.0, 0, 0},
                                 {dev({0, 0, 0, 4, 0}), 1.0, 0, 1}};
  merge_report rep;
  expect_near(delta_of(c, merge_options{}, &rep), {0, 0, 0, 2, 0});
  EXPECT_FALSE(rep.tensors[1].fallback);
}

TEST_P(Merge, AllZeroFallsBackToZero) {
  std::vector<contribution> c = {{dev({0, 0, 0, 0, 0}), 1.0, 0, 0},
                                 {dev({0, 0, 0, 0, 0}), 2.0, 0, 1}};
  merge_report rep;
  expect_near(delta_of(c, merge_options{}, &rep), {0, 0, 0, 0, 0});
  EXPECT_TRUE(rep.tensors[1].fallback);
}

TEST_P(Merge, CancellingDirectionsFallBackToWeightedAverage) {
  // w: v1 = (1,2,3), v2 = (-2,-4,-6): unit directions cancel exactly with equal weights.
  std::vector<contribution> c = {{dev({0, 0, 1, 2, 3}), 1.0, 0, 0},
                                 {dev({0, 0, -2, -4, -6}), 1.0, 0, 1}};
  merge_report rep;
  expect_near(delta_of(c, merge_options{}, &rep), {0, 0, -0.5f, -1, -1.5f});
  EXPECT_TRUE(rep.tensors[1].fallback);
  EXPECT_EQ(rep.tensors[1].rule_used, merge_rule::weighted_average);
}

TEST_P(Merge, NesterovOuterStep) {
  // Δ (weighted average) = (4,-1,0.75,3,0); b0 = 1; μ = 0.9, lr = 0.7:
  // b = 0.9 + Δ; θ = θ0 − 0.7 (Δ + 0.9 b).
  std::vector<contribution> c = {{dev({1, 2, 3, 0, 0}), 1.0, 0, 0},
                                 {dev({5, -2, 0, 4, 0}), 3.0, 0, 1}};
  merge_options o;
  o.rule = merge_rule::weighted_average;
  float* theta = dev_mut({10, 10, 10, 10, 10});
  float* mom = dev_mut({1, 1, 1, 1, 1});
  auto r = outer_step(*be_, layout(), c, o, theta, mom);
  ASSERT_TRUE(r.ok()) << r.error().message;
  const std::vector<float> delta = {4, -1, 0.75f, 3, 0};
  std::vector<float> b(5), th(5);
  for (int i = 0; i < 5; ++i) {
    b[i] = 0.9f + delta[i];
    th[i] = 10.0f - 0.7f * (delta[i] + 0.9f * b[i]);
  }
  expect_near(host(mom, 5), b);
  expect_near(host(theta, 5), th);
  EXPECT_NEAR(th[0], 10.0f - 0.7f * (4 + 0.9f * 4.9f), 1e-6);  // = 4.113
}

TEST_P(Merge, DeltaScaleShrinksThePseudoGradientBeforeMomentum) {
  // s = 0.25 (one of four learners): b = μ b0 + sΔ; θ = θ0 − lr (sΔ + μ b).
  std::vector<contribution> c = {{dev({4, -8, 0, 2, 1}), 1.0, 0, 0}};
  merge_options o;
  o.rule = merge_rule::weighted_average;
  float* theta = dev_mut({10, 10, 10, 10, 10});
  float* mom = dev_mut({1, 1, 1, 1, 1});
  ASSERT_TRUE(outer_step(*be_, layout(), c, o, theta, mom, nullptr, 0.25f).ok());
  const std::vector<float> d = {1, -2, 0, 0.5f, 0.25f};  // sΔ
  std::vector<float> b(5), th(5);
  for (int i = 0; i < 5; ++i) {
    b[i] = 0.9f + d[i];
    th[i] = 10.0f - 0.7f * (d[i] + 0.9f * b[i]);
  }
  expect_near(host(mom, 5), b);
  expect_near(host(theta, 5), th);
  // Outside (0, 1]: an error, θ and b untouched.
  for (float bad : {0.0f, -0.5f, 1.5f, std::numeric_limits<float>::quiet_NaN()}) {
    auto r = outer_step(*be_, layout(), c, o, theta, mom, nullptr, bad);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.code(), errc::invalid_argument);
  }
  expect_near(host(theta, 5), th);
}

TEST_P(Merge, CurrentAnchorRecoversTheLearnersParameters) {
  // θ@0 = 1s, θ now (version 1) = 2s. Learner took delta = base − θ_learner = (0.5,...) at
  // version 0, so θ_learner = 0.5s. With lr 1, μ 0 and one contributor, θ becomes θ_learner.
  anchor_ring ring(*be_, 5, 3);
  ring.record_host(0, std::vector<float>(5, 1.0f).data());
  float* theta = dev_mut(std::vector<float>(5, 2.0f));
  ring.record(1, theta);
  float* mom = dev_mut(std::vector<float>(5, 0.0f));
  std::vector<contribution> c = {{dev(std::vector<float>(5, 0.5f)), 2.0, 0, 3}};
  merge_options o;
  o.anchor = merge_anchor::current;
  o.outer_lr = 1.0f;
  o.outer_momentum = 0.0f;
  auto r = outer_step(*be_, layout(), c, o, theta, mom, &ring);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->anchor, merge_anchor::current);
  expect_near(host(theta, 5), std::vector<float>(5, 0.5f));
  // anchor = base with the same push moves θ by delta only: 2 − 0.5 = 1.5.
  float* theta2 = dev_mut(std::vector<float>(5, 2.0f));
  o.anchor = merge_anchor::base;
  ASSERT_TRUE(outer_step(*be_, layout(), c, o, theta2, mom).ok());
  expect_near(host(theta2, 5), std::vector<float>(5, 1.5f));
}

TEST_P(Merge, AnchorRingEvictsAndReportsGoneVersions) {
  anchor_ring ring(*be_, 5, 2);
  for (uint64_t v = 0; v < 3; ++v) ring.record_host(v, std::vector<float>(5, float(v)).data());
  EXPECT_EQ(ring.versions(), (std::vector<uint64_t>{1, 2}));
  auto gone = ring.find(0);
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.code(), errc::version_gone);
  EXPECT_NE(gone.error().message.find("1..2"), std::string::npos);
  auto all = ring.download_all();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[1].second, std::vector<float>(5, 2.0f));

  float* theta = dev_mut(std::vector<float>(5, 2.0f));
  float* d = dev_mut(std::vector<float>(5, 0.0f));
  merge_options o;
  o.anchor = merge_anchor::current;
  std::vector<contribution> c = {{dev(std::vector<float>(5, 0.5f)), 1.0, 0, 4}};
  auto r = compute_delta(*be_, layout(), c, o, d, theta, &ring);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.code(), errc::version_gone);
  EXPECT_NE(r.error().message.find("learner 4"), std::string::npos);
}

TEST_P(Merge, InvalidInputsAreErrors) {
  float* d = dev_mut(std::vector<float>(5, 0.0f));
  EXPECT_EQ(compute_delta(*be_, layout(), {}, merge_options{}, d).code(), errc::invalid_argument);
  std::vector<contribution> neg = {{dev(std::vector<float>(5, 1.0f)), -1.0, 0, 0}};
  EXPECT_EQ(compute_delta(*be_, layout(), neg, merge_options{}, d).code(), errc::invalid_argument);
  std::vector<contribution> zero = {{dev(std::vector<float>(5, 1.0f)), 0.0, 0, 0}};
  EXPECT_EQ(compute_delta(*be_, layout(), zero, merge_options{}, d).code(), errc::invalid_argument);
  merge_options cur;
  cur.anchor = merge_anchor::current;
  std::vector<contribution> one = {{dev(std::vector<float>(5, 1.0f)), 1.0, 0, 0}};
  EXPECT_EQ(compute_delta(*be_, layout(), one, cur, d).code(), errc::invalid_argument);
}

// The merge weight the fragment owner gives each pending push (owner_core::merge):
// w = tokens² / steps, 0 for a push that reports no tokens or no steps.
TEST(TokenWeight, Table) {
  struct row {
    uint64_t tokens, steps;
    double w;
  };
  const std::vector<row> rows = {
      {1000, 10, 100000.0},                        // 1000² / 10
      {512, 1, 262144.0},                          // one step of 512 tokens
      {2048, 4, 1048576.0},                        // 4 steps × 512 tokens: 2048 · 512
      {100, 0, 0.0},                               // no steps
      {0, 5, 0.0},                                 // no tokens
      {uint64_t{1} << 26, 1, 4503599627370496.0},  // 2^52: still exact in double
  };
  for (const auto& r : rows)
    EXPECT_DOUBLE_EQ(token_weight(r.tokens, r.steps), r.w)
        << r.tokens << " tokens, " << r.steps << " steps";
}

// The merge normalizes token weights to c_m = w_m / Σ w: weights 20000 : 10000 : 0 (a push of
// no tokens) give 2/3, 1/3 and 0; non-finite weights and an all-zero set are refused.
TEST_P(Merge, TokenWeightsAreNormalizedByTheMerge) {
  const std::vector<float> v(5, 1.0f);
  std::vector<contribution> c = {{dev(v), token_weight(200, 2), 0, 0},
                                 {dev(v), token_weight(200, 4), 0, 1},
                                 {dev(v), token_weight(0, 5), 0, 2}};
  merge_options o;
  o.rule = merge_rule::weighted_average;
  merge_report rep;
  expect_near(delta_of(c, o, &rep), v);
  ASSERT_EQ(rep.weights.size(), 3u);
  EXPECT_NEAR(rep.weights[0], 2.0 / 3.0, 1e-12);
  EXPECT_NEAR(rep.weights[1], 1.0 / 3.0, 1e-12);
  EXPECT_EQ(rep.weights[2], 0.0);
  EXPECT_EQ(rep.weight_sum, 30000.0);
  float* d = dev_mut(std::vector<float>(5, 0.0f));
  std::vector<contribution> nan = {{dev(v), std::nan(""), 0, 0}};
  EXPECT_EQ(compute_delta(*be_, layout(), nan, o, d).code(), errc::invalid_argument);
  std::vector<contribution> zero = {{dev(v), token_weight(0, 4), 0, 0},
                                    {dev(v), token_weight(100, 0), 0, 1}};
  EXPECT_EQ(compute_delta(*be_, layout(), zero, o, d).code(), errc::invalid_argument);
}

TEST(MergeMath, TokenWeightAndParsing) {
  EXPECT_EQ(token_weight(100, 4), 2500.0);
  EXPECT_EQ(token_weight(0, 4), 0.0);
  EXPECT_EQ(token_weight(100, 0), 0.0);
  EXPECT_EQ(*parse_merge_rule("rda"), merge_rule::rda);
  EXPECT_EQ(*parse_merge_anchor("current"), merge_anchor::current);
  EXPECT_EQ(parse_merge_rule("median").code(), errc::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(Backends, Merge, ::testing::Values("reference", "cpu"));

}  // namespace
}  // namespace dd
