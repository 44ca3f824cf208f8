// tests/runtime/adamw_test.cpp — the trainer's gradient clipping folded into the AdamW step:
// grad_norm + clip_factor handed to adamw::step give the bits of clip_grad_norm (which scales the
// gradients in a pass of its own) followed by adamw::step, on every host backend.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "runtime/adamw.hpp"
#include "runtime/transformer_block.hpp"

namespace {

std::vector<float> uniform(size_t n, unsigned seed, float lo, float hi) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

// Runs of decaying and non-decaying tensors of odd sizes; one large enough that the cpu backend
// splits the pass over its threads and across tensor boundaries.
std::vector<dd::tensor_info> layout() {
  dd::tensor_layout t;
  t.add("a", {7}, -1, false, true);
  t.add("b", {301, 333}, 0, false, false);
  t.add("c", {33}, 0, false, true);
  t.add("d", {64, 64}, 0, false, true);
  t.add("e", {5}, 1, false, false);
  return t.take();
}

class AdamwClip : public ::testing::TestWithParam<std::string> {};

TEST_P(AdamwClip, FactorFoldedIntoTheStepGivesTheBitsOfClippingFirst) {
  dd::kernels::backend_options opts;
  opts.threads = 2;
  auto be = dd::kernels::make_backend(GetParam(), opts);
  const auto tensors = layout();
  const size_t n = tensors.back().offset + tensors.back().numel;
  const auto p0 = uniform(n, 1, -1.0f, 1.0f);
  auto pa = be->alloc<float>(n), pb = be->alloc<float>(n);
  auto ga = be->alloc<float>(n), gb = be->alloc<float>(n);
  be->upload(pa.data(), p0.data(), n);
  be->upload(pb.data(), p0.data(), n);
  dd::adamw a(*be, tensors, n), b(*be, tensors, n);
  // Step 1 clips (|g| up to 1 over ~100k values: norm ~180 > 1); step 2 does not (max_norm 0).
  for (const double max_norm : {1.0, 0.0}) {
    const auto g = uniform(n, 2 + static_cast<unsigned>(max_norm), -1.0f, 1.0f);
    be->upload(ga.data(), g.data(), n);
    be->upload(gb.data(), g.data(), n);
    const double na = dd::clip_grad_norm(*be, ga.data(), n, max_norm);
    a.step(pa.data(), ga.data(), 1e-3f);
    const double nb = dd::grad_norm(*be, gb.data(), n);
    b.step(pb.data(), gb.data(), 1e-3f, dd::clip_factor(nb, max_norm));
    EXPECT_EQ(na, nb);
    if (max_norm > 0.0) {
      EXPECT_GT(nb, max_norm);
    }
    std::vector<float> ha(n), hb(n);
    be->download(ha.data(), pa.data(), n);
    be->download(hb.data(), pb.data(), n);
    EXPECT_EQ(ha, hb) << "params, max_norm " << max_norm;
    be->download(ha.data(), a.m(), n);
    be->download(hb.data(), b.m(), n);
    EXPECT_EQ(ha, hb) << "m, max_norm " << max_norm;
    be->download(ha.data(), a.v(), n);
    be->download(hb.data(), b.v(), n);
    EXPECT_EQ(ha, hb) << "v, max_norm " << max_norm;
    EXPECT_NE(hb, std::vector<float>(n, 0.0f));
  }
}

INSTANTIATE_TEST_SUITE_P(backends, AdamwClip, ::testing::Values("reference", "cpu"));

TEST(ClipFactor, ClipsOnlyAboveAPositiveMaximum) {
  EXPECT_EQ(dd::clip_factor(0.5, 1.0), 1.0f);
  EXPECT_EQ(dd::clip_factor(1.0, 1.0), 1.0f);
  EXPECT_EQ(dd::clip_factor(4.0, 1.0), static_cast<float>(1.0 / (4.0 + 1e-6)));
  EXPECT_EQ(dd::clip_factor(4.0, 0.0), 1.0f);   // max_norm 0: clipping off
  EXPECT_EQ(dd::clip_factor(4.0, -1.0), 1.0f);  // negative: off too
  EXPECT_EQ(dd::clip_factor(std::nan(""), 1.0), 1.0f);
  EXPECT_EQ(dd::clip_factor(std::numeric_limits<double>::infinity(), 1.0), 0.0f);
}

}  // namespace
