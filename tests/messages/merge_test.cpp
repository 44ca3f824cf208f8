// The owner's merge (RDA / weighted average), outer Nesterov, anchors, on every host backend.
// Inputs are a few elements with hand-computed results; float32 ops over ≤ 5 elements are exact
// to a few ulps, so 1e-5 absolute (values are O(1)) is tight yet safe.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>

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
  /// Expects the outer Nesterov step (μ = 0.9, lr = 0.7) with pseudo-gradient `delta` from
  /// θ0 = 10 and b0 = 1 in every element: b = 0.9 + Δ, θ = 10 − 0.7 (Δ + 0.9 b); the θ expected.
  std::vector<float> expect_nesterov_step(const float* theta, const float* mom,
                                          const std::vector<float>& delta) {
    std::vector<float> b(5), th(5);
    for (int i = 0; i < 5; ++i) {
      b[i] = 0.9f + delta[i];
      th[i] = 10.0f - 0.7f * (delta[i] + 0.9f * b[i]);
    }
    expect_near(host(mom, 5), b);
    expect_near(host(theta, 5), th);
    return th;
  }
  /// The default merge of learner 0's `a` (weight `wa`) and learner 1's `b` (weight `wb`),
  /// expected to be `want`; its report.
  merge_report merge_two(std::vector<float> a, double wa, std::vector<float> b, double wb,
                         const std::vector<float>& want) {
    const std::vector<contribution> c = {{dev(std::move(a)), wa, 0, 0},
                                         {dev(std::move(b)), wb, 0, 1}};
    merge_report rep;
    expect_near(delta_of(c, merge_options{}, &rep), want);
    return rep;
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
  EXPECT_FALSE(
      merge_two({0, 0, 0, 0, 0}, 1.0, {0, 0, 0, 4, 0}, 1.0, {0, 0, 0, 2, 0}).tensors[1].fallback);
}

TEST_P(Merge, AllZeroFallsBackToZero) {
  EXPECT_TRUE(
      merge_two({0, 0, 0, 0, 0}, 1.0, {0, 0, 0, 0, 0}, 2.0, {0, 0, 0, 0, 0}).tensors[1].fallback);
}

TEST_P(Merge, CancellingDirectionsFallBackToWeightedAverage) {
  // w: v1 = (1,2,3), v2 = (-2,-4,-6): unit directions cancel exactly with equal weights.
  const auto rep =
      merge_two({0, 0, 1, 2, 3}, 1.0, {0, 0, -2, -4, -6}, 1.0, {0, 0, -0.5f, -1, -1.5f});
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
  const auto th = expect_nesterov_step(theta, mom, {4, -1, 0.75f, 3, 0});
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
  const auto th = expect_nesterov_step(theta, mom, {1, -2, 0, 0.5f, 0.25f});  // sΔ
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

// ---- the fused outer step against the old math ----------------------------------------------
//
// Until the fused loops, outer_step was compute_delta into a fresh Δ through the backend's
// single ops (a norm pass per contribution and tensor, weighted_sum, the direction's norm, scale,
// Δ's norm), then scale by delta_scale and nesterov_update over the whole fragment. That code,
// verbatim over the same ops, is old_outer_step below. The fused loops keep every float
// expression and order; only the double sums (the norms) are added in another order (fixed
// blocks instead of the backend's thread chunks, the contributions' norms from the arrival
// check), so a norm may differ in its last bits and, rarely, RDA's float scale by one ulp.
// Tolerance: θ and b within 1 ulp of the old math element by element, norms within 1e-12
// relative, the same rule and fallback per tensor.

result<merge_report> old_outer_step(kernels::backend& be, const fragment_layout& layout,
                                    const std::vector<contribution>& contributions,
                                    const merge_options& opts, float* theta, float* momentum,
                                    float delta_scale) {
  auto norm_of = [&](const float* x, size_t n) {
    return n == 0 ? 0.0 : std::sqrt(be.sum_squares(x, n));
  };
  kernels::buffer<float> dbuf = be.alloc<float>(layout.numel);
  float* delta = dbuf.data();
  double wsum = 0.0;
  for (const auto& c : contributions) wsum += c.weight;
  std::vector<const float*> v;
  std::vector<double> c;
  merge_report report;
  for (const auto& ct : contributions) {
    v.push_back(ct.delta);
    c.push_back(ct.weight / wsum);
  }
  auto weighted_average = [&](size_t off, size_t n) {
    std::vector<const float*> ptrs;
    std::vector<float> w;
    for (size_t m = 0; m < v.size(); ++m) {
      ptrs.push_back(v[m] + off);
      w.push_back(static_cast<float>(c[m]));
    }
    be.weighted_sum(delta + off, ptrs.data(), w.data(), static_cast<int>(ptrs.size()), n);
  };
  double total_sq = 0.0;
  for (const auto& t : layout.tensors) {
    tensor_merge_report tr;
    const size_t off = t.fragment_offset, n = t.numel;
    if (t.is_embedding || opts.rule == merge_rule::weighted_average) {
      tr.rule_used = merge_rule::weighted_average;
      weighted_average(off, n);
    } else {
      std::vector<const float*> ptrs;
      std::vector<float> coef;
      double target_norm = 0.0, coef_sum = 0.0;
      for (size_t m = 0; m < v.size(); ++m) {
        const double nm = norm_of(v[m] + off, n);
        target_norm += c[m] * nm;
        if (nm > opts.zero_norm && c[m] > 0.0) {
          ptrs.push_back(v[m] + off);
          coef.push_back(static_cast<float>(c[m] / nm));
          coef_sum += c[m];
        }
      }
      bool fallback = ptrs.empty();
      if (!fallback) {
        be.weighted_sum(delta + off, ptrs.data(), coef.data(), static_cast<int>(ptrs.size()), n);
        const double s = norm_of(delta + off, n);
        if (s <= opts.cancel_epsilon * coef_sum)
          fallback = true;
        else
          be.scale(delta + off, static_cast<float>(target_norm / s), n);
      }
      if (fallback) {
        weighted_average(off, n);
        tr.rule_used = merge_rule::weighted_average;
        tr.fallback = true;
      } else {
        tr.rule_used = merge_rule::rda;
      }
    }
    tr.delta_norm = norm_of(delta + off, n);
    total_sq += tr.delta_norm * tr.delta_norm;
    report.tensors.push_back(tr);
  }
  report.delta_norm = std::sqrt(total_sq);
  if (delta_scale != 1.0f) be.scale(delta, delta_scale, layout.numel);
  be.nesterov_update(theta, momentum, delta, opts.outer_lr, opts.outer_momentum, layout.numel);
  return report;
}

/// |a − b| in units in the last place of float (ordered bit patterns).
int64_t ulp_distance(float a, float b) {
  auto ordered = [](float x) {
    int32_t i;
    std::memcpy(&i, &x, sizeof i);
    return i < 0 ? int64_t{INT32_MIN} - int64_t{i} : int64_t{i};
  };
  return std::llabs(ordered(a) - ordered(b));
}

/// An embedding and RDA tensors around the cpu backend's 4096-float merge block, one empty.
fragment_layout mixed_layout() {
  fragment_layout l;
  l.fragment_id = 0;
  size_t off = 0;
  const size_t sizes[] = {1000, 4096, 10007, 0, 333, 9000};
  for (size_t i = 0; i < std::size(sizes); ++i) {
    l.tensors.push_back({i, "t" + std::to_string(i), off, off, sizes[i], i == 0});
    off += sizes[i];
  }
  l.numel = off;
  return l;
}

struct fused_case {
  const char* backend;
  int threads;
};

class FusedMerge : public ::testing::TestWithParam<fused_case> {};

TEST_P(FusedMerge, FusedOuterStepMatchesTheOldMath) {
  const uint32_t seed = 20261206;
  std::printf("seed %u\n", seed);
  std::mt19937 rng(seed);
  std::normal_distribution<float> gauss(0.0f, 1e-3f);
  auto be = kernels::make_backend(GetParam().backend, {GetParam().threads, 0});
  const auto lay = mixed_layout();
  const size_t n = lay.numel;
  size_t elements = 0, differing = 0;
  for (int trial = 0; trial < 24; ++trial) {
    const int M = 1 + trial % 5;
    merge_options o;
    o.rule = trial % 4 == 3 ? merge_rule::weighted_average : merge_rule::rda;
    const float scale = trial % 3 == 2 ? 0.5f : 1.0f;
    std::vector<std::vector<float>> host(M, std::vector<float>(n));
    for (auto& h : host)
      for (auto& x : h) x = gauss(rng);
    if (trial == 6) {  // contributor 1 cancels contributor 0 in every tensor: RDA falls back
      for (size_t i = 0; i < n; ++i) host[1][i] = -2.0f * host[0][i];
    }
    if (trial == 7) std::fill(host[0].begin(), host[0].end(), 0.0f);  // a zero push
    std::vector<kernels::buffer<float>> dev;
    std::vector<std::vector<double>> sq(M);
    std::vector<contribution> with_sq, without_sq;
    for (int m = 0; m < M; ++m) {
      dev.push_back(be->alloc<float>(n));
      be->upload(dev.back().data(), host[m].data(), n);
      sq[m] = tensor_sum_squares(lay, host[m].data());
      contribution c{dev.back().data(), trial == 6 ? 1.0 : 1.0 + m * 0.37, 0, m};
      without_sq.push_back(c);
      c.tensor_sq = &sq[m];
      with_sq.push_back(c);
    }
    std::vector<float> theta0(n), mom0(n);
    for (auto& x : theta0) x = gauss(rng) * 100.0f;
    for (auto& x : mom0) x = gauss(rng);
    auto state = [&](const std::vector<float>& h) {
      auto b = be->alloc<float>(n);
      be->upload(b.data(), h.data(), n);
      return b;
    };
    auto th_old = state(theta0), mo_old = state(mom0);
    auto old = old_outer_step(*be, lay, without_sq, o, th_old.data(), mo_old.data(), scale);
    ASSERT_TRUE(old.ok());
    std::vector<float> want_th(n), want_mo(n);
    be->download(want_th.data(), th_old.data(), n);
    be->download(want_mo.data(), mo_old.data(), n);
    for (const auto* in : {&with_sq, &without_sq}) {
      auto th = state(theta0), mo = state(mom0);
      auto got = outer_step(*be, lay, *in, o, th.data(), mo.data(), nullptr, scale);
      ASSERT_TRUE(got.ok()) << got.error().message;
      std::vector<float> got_th(n), got_mo(n);
      be->download(got_th.data(), th.data(), n);
      be->download(got_mo.data(), mo.data(), n);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_LE(ulp_distance(got_th[i], want_th[i]), 1) << "trial " << trial << " θ[" << i << "]";
        ASSERT_LE(ulp_distance(got_mo[i], want_mo[i]), 1) << "trial " << trial << " b[" << i << "]";
        differing += (got_th[i] != want_th[i]) + (got_mo[i] != want_mo[i]);
      }
      elements += 2 * n;
      ASSERT_EQ(got->tensors.size(), old->tensors.size());
      for (size_t t = 0; t < lay.tensors.size(); ++t) {
        EXPECT_EQ(got->tensors[t].rule_used, old->tensors[t].rule_used) << "trial " << trial;
        EXPECT_EQ(got->tensors[t].fallback, old->tensors[t].fallback) << "trial " << trial;
        EXPECT_NEAR(got->tensors[t].delta_norm, old->tensors[t].delta_norm,
                    1e-12 * old->tensors[t].delta_norm + 1e-300)
            << "trial " << trial << " tensor " << t;
      }
      if (trial == 6) {
        EXPECT_TRUE(got->tensors[1].fallback);
      }
      // compute_delta stores the same Δ the fused step applied: its norms agree.
      auto d = be->alloc<float>(n);
      auto cd = compute_delta(*be, lay, *in, o, d.data());
      ASSERT_TRUE(cd.ok());
      EXPECT_NEAR(cd->delta_norm, old->delta_norm, 1e-12 * old->delta_norm);
    }
  }
  std::printf("%zu of %zu values differ from the old math by one ulp\n", differing, elements);
}

TEST(FusedMergeThreads, CpuResultDoesNotDependOnTheThreadCount) {
  const auto lay = mixed_layout();
  const size_t n = lay.numel;
  std::vector<float> a(n), b(n), th0(n, 0.5f), mo0(n, 0.1f);
  for (size_t i = 0; i < n; ++i) {
    a[i] = std::sin(0.001f * static_cast<float>(i)) * 1e-3f;
    b[i] = std::cos(0.0007f * static_cast<float>(i)) * 2e-3f;
  }
  std::vector<std::vector<float>> results;
  std::vector<double> norms;
  for (int threads : {1, 2, 3}) {
    auto be = kernels::make_backend("cpu", {threads, 0});
    auto da = be->alloc<float>(n), db = be->alloc<float>(n), th = be->alloc<float>(n),
         mo = be->alloc<float>(n);
    be->upload(da.data(), a.data(), n);
    be->upload(db.data(), b.data(), n);
    be->upload(th.data(), th0.data(), n);
    be->upload(mo.data(), mo0.data(), n);
    std::vector<contribution> c = {{da.data(), 2.0, 0, 0}, {db.data(), 3.0, 0, 1}};
    auto r = outer_step(*be, lay, c, merge_options{}, th.data(), mo.data());
    ASSERT_TRUE(r.ok());
    std::vector<float> out(2 * n);
    be->download(out.data(), th.data(), n);
    be->download(out.data() + n, mo.data(), n);
    results.push_back(out);
    norms.push_back(r->delta_norm);
  }
  EXPECT_EQ(results[0], results[1]);
  EXPECT_EQ(results[0], results[2]);
  EXPECT_EQ(norms[0], norms[1]);
  EXPECT_EQ(norms[0], norms[2]);
}

TEST(MergeMath, TensorSumSquaresChecksFinitenessAndGivesTheNorms) {
  fragment_layout l;
  l.tensors.push_back({0, "a", 0, 0, 2, false});
  l.tensors.push_back({1, "b", 2, 2, 3, false});
  l.numel = 5;
  std::vector<float> v = {3, 4, 1, 2, 2};
  EXPECT_EQ(tensor_sum_squares(l, v.data()), (std::vector<double>{25.0, 9.0}));
  // The largest float squared stays finite in double: only Inf and NaN make a sum non-finite.
  v[0] = std::numeric_limits<float>::max();
  EXPECT_TRUE(std::isfinite(tensor_sum_squares(l, v.data())[0]));
  v[3] = std::numeric_limits<float>::infinity();
  auto s = tensor_sum_squares(l, v.data());
  EXPECT_TRUE(std::isfinite(s[0]));
  EXPECT_FALSE(std::isfinite(s[1]));
  v[3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(std::isfinite(tensor_sum_squares(l, v.data())[1]));
}

TEST_P(Merge, WrongNumberOfArrivalNormsIsAnError) {
  std::vector<double> sq = {1.0};  // the layout has two tensors
  std::vector<contribution> c = {{dev({1, 2, 3, 0, 0}), 1.0, 0, 5}};
  c[0].tensor_sq = &sq;
  float* d = dev_mut(std::vector<float>(5, 0.0f));
  auto r = compute_delta(*be_, layout(), c, merge_options{}, d);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.code(), errc::invalid_argument);
  EXPECT_NE(r.error().message.find("learner 5"), std::string::npos);
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
INSTANTIATE_TEST_SUITE_P(Backends, FusedMerge,
                         ::testing::Values(fused_case{"reference", 1}, fused_case{"cpu", 1},
                                           fused_case{"cpu", 2}),
                         [](const auto& param_info) {
                           return std::string(param_info.param.backend) + "_" +
                                  std::to_string(param_info.param.threads);
                         });

}  // namespace
}  // namespace dd
