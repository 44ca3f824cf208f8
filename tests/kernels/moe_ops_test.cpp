// tests/kernels/moe_ops_test.cpp — the mixture-of-experts ops (kernels/backend.hpp: router
// softmax + top-k, capacity assignment, gather/scatter of tokens to experts and back): their
// semantics on the reference backend with hand-computed values, and the cpu backend against the
// reference over odd shapes (N, E, C not multiples of anything; k = 1 and 2; capacities that
// drop tokens and ones that do not). Backward ops start from random non-zero gradients, so the
// comparisons also check that they accumulate. The CUDA backend has no MoE ops yet: its default
// implementation must throw a backend_error naming the op (checked on a host backend's base).
//
// Tolerances: the reference accumulates in double, the cpu backend in float32 (test_util.hpp).
// The router's softmax uses the cpu backend's vectorized exp (relative error ~1e-7 per
// element), so probabilities and gates are compared to 4e-7 absolute / 1e-6 relative.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/reference/reference_backend.hpp"
#include "tests/kernels/test_util.hpp"
#include "tests/support/backend_pair.hpp"

namespace dd::kernels::test {
namespace {

TEST(moe_ops, router_top1_and_top2_ties_to_lower_index) {
  auto ref = make_reference_backend();
  // Row 0: experts 1 and 3 tie for the maximum -> 1 first, then 3.
  // Row 1: all equal -> 0, then 1. Row 2: strict order 2 > 0 > 1 > 3.
  const std::vector<float> logits = {0.0f, 2.0f, -1.0f, 2.0f,  //
                                     0.5f, 0.5f, 0.5f,  0.5f,  //
                                     1.0f, 0.0f, 3.0f,  -2.0f};
  dvec<float> z(*ref, logits), probs(*ref, 12), gates(*ref, 6);
  dvec<int32_t> idx(*ref, 6);
  ref->router_forward(probs.data(), idx.data(), gates.data(), z.data(), 3, 4, 2);
  EXPECT_EQ(idx.host(), (std::vector<int32_t>{1, 3, 0, 1, 2, 0}));
  const auto p = probs.host();
  const double s0 = 2 * std::exp(2.0) + 1 + std::exp(-1.0);
  EXPECT_NEAR(p[1], std::exp(2.0) / s0, 1e-7);
  EXPECT_NEAR(p[4], 0.25, 1e-7);
  const auto g = gates.host();
  EXPECT_NEAR(g[0], 0.5, 1e-7);  // two equal probabilities renormalised
  EXPECT_NEAR(g[1], 0.5, 1e-7);
  EXPECT_NEAR(g[4], std::exp(3.0) / (std::exp(3.0) + std::exp(1.0)), 1e-7);
  EXPECT_NEAR(g[4] + g[5], 1.0, 1e-7);
  // k = 1: the gate is the probability itself (not renormalised).
  dvec<float> g1(*ref, 3);
  dvec<int32_t> i1(*ref, 3);
  ref->router_forward(probs.data(), i1.data(), g1.data(), z.data(), 3, 4, 1);
  EXPECT_EQ(i1.host(), (std::vector<int32_t>{1, 0, 2}));
  EXPECT_NEAR(g1.host()[1], 0.25, 1e-7);
}

TEST(moe_ops, assign_fills_capacity_in_batch_order_and_counts_drops) {
  auto ref = make_reference_backend();
  // N = 4 tokens, k = 2, E = 3, capacity 2. Choices in order: (0: 1,0) (1: 1,2) (2: 1,0)
  // (3: 0,1). Expert 1 takes tokens 0 and 1; token 2's and token 3's choices of 1 are dropped.
  // Expert 0 takes tokens 0 and 2; token 3's choice of 0 is dropped. Expert 2 takes token 1.
  const std::vector<int32_t> idx = {1, 0, 1, 2, 1, 0, 0, 1};
  dvec<int32_t> d_idx(*ref, idx), slot(*ref, 6), assign(*ref, 8), routed(*ref, 3);
  ref->moe_assign(slot.data(), assign.data(), routed.data(), d_idx.data(), 4, 3, 2, 2);
  EXPECT_EQ(slot.host(), (std::vector<int32_t>{0, 2, 0, 1, 1, -1}));
  EXPECT_EQ(assign.host(), (std::vector<int32_t>{2, 0, 3, 4, -1, 1, -1, -1}));
  EXPECT_EQ(routed.host(), (std::vector<int32_t>{3, 4, 1}));
}

TEST(moe_ops, gather_scatter_move_rows_with_gates) {
  auto ref = make_reference_backend();
  const int N = 2, k = 2, C = 3;
  const std::vector<float> x = {1, 2, 3, 4, 5, 6};
  const std::vector<int32_t> slot = {1, -1, 0, 1};    // 2 experts × capacity 2
  const std::vector<int32_t> assign = {2, -1, 0, 3};  // token 0 → row 2; token 1 → rows 0, 3
  dvec<float> dx(*ref, x), rows(*ref, 12);
  dvec<int32_t> ds(*ref, slot), da(*ref, assign);
  ref->moe_gather(rows.data(), dx.data(), ds.data(), 4, C);
  EXPECT_EQ(rows.host(), (std::vector<float>{4, 5, 6, 0, 0, 0, 1, 2, 3, 4, 5, 6}));
  const std::vector<float> gates = {0.5f, 0.25f, 2.0f, -1.0f};
  dvec<float> dg(*ref, gates), out(*ref, 6);
  ref->moe_scatter(out.data(), rows.data(), da.data(), dg.data(), N, k, C);
  // token 0: 0.5·row2 = (0.5,1,1.5); token 1: 2·row0 − row3 = (8−4, 10−5, 12−6).
  EXPECT_EQ(out.host(), (std::vector<float>{0.5f, 1, 1.5f, 4, 5, 6}));
}

TEST(moe_ops, cuda_default_throws_naming_the_op) {
  // The MoE ops are the base-class defaults the CUDA backend inherits.
  bare_backend b;
  try {
    b.router_forward(nullptr, nullptr, nullptr, nullptr, 1, 2, 1);
    FAIL() << "no throw";
  } catch (const backend_error& e) {
    EXPECT_NE(std::string(e.what()).find("router_forward: not implemented on the bare backend"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(b.moe_scatter(nullptr, nullptr, nullptr, nullptr, 1, 1, 1), backend_error);
}

// ---- cpu against the reference over odd shapes -------------------------------------------
struct moe_shape {
  int N, E, k, C, capacity;
};

class moe_compare : public backend_pair_test<moe_shape> {};

TEST_P(moe_compare, cpu_matches_reference) {
  const auto s = GetParam();
  const int N = s.N, E = s.E, k = s.k, C = s.C, cap = s.capacity;
  const size_t R = size_t(E) * cap;
  const auto logits = random_floats(size_t(N) * E, 21, -3.0f, 3.0f);
  const auto x = random_floats(size_t(N) * C, 22);
  const auto dgates = random_floats(size_t(N) * k, 23);
  const auto dprobs = random_floats(size_t(N) * E, 24);
  const auto dlog0 = random_floats(size_t(N) * E, 25);
  const auto yexp = random_floats(R * C, 26);
  const auto dout = random_floats(size_t(N) * C, 27);
  const auto dy0 = random_floats(R * C, 28);
  const auto dg0 = random_floats(size_t(N) * k, 29);
  const auto dx0 = random_floats(size_t(N) * C, 30);
  const auto drows = random_floats(R * C, 31);

  struct result {
    std::vector<float> probs, gates, dlogits, rows, dx, out, dy, dg;
    std::vector<int32_t> idx, slot, assign, routed;
  };
  auto run = [&](backend& b) {
    result r;
    dvec<float> z(b, logits), probs(b, size_t(N) * E), gates(b, size_t(N) * k);
    dvec<int32_t> idx(b, size_t(N) * k), slot(b, R), assign(b, size_t(N) * k), routed(b, E);
    b.router_forward(probs.data(), idx.data(), gates.data(), z.data(), N, E, k);
    dvec<float> dl(b, dlog0), dg_in(b, dgates), dp(b, dprobs);
    b.router_backward(dl.data(), dg_in.data(), dp.data(), probs.data(), idx.data(), N, E, k);
    b.moe_assign(slot.data(), assign.data(), routed.data(), idx.data(), N, E, k, cap);
    dvec<float> dx(b, x), rows(b, R * C);
    b.moe_gather(rows.data(), dx.data(), slot.data(), int(R), C);
    dvec<float> ddx(b, dx0), dr(b, drows);
    b.moe_gather_backward(ddx.data(), dr.data(), assign.data(), N, k, C);
    dvec<float> y(b, yexp), out(b, size_t(N) * C), dout_d(b, dout), dy(b, dy0), dg(b, dg0);
    b.moe_scatter(out.data(), y.data(), assign.data(), gates.data(), N, k, C);
    b.moe_scatter_backward(dy.data(), dg.data(), dout_d.data(), y.data(), assign.data(),
                           gates.data(), N, k, C);
    r.probs = probs.host();
    r.gates = gates.host();
    r.dlogits = dl.host();
    r.rows = rows.host();
    r.dx = ddx.host();
    r.out = out.host();
    r.dy = dy.host();
    r.dg = dg.host();
    r.idx = idx.host();
    r.slot = slot.host();
    r.assign = assign.host();
    r.routed = routed.host();
    return r;
  };
  const auto a = run(*cpu_);
  const auto w = run(*ref_);
  // Integer decisions are made on the same logits: identical.
  EXPECT_EQ(a.idx, w.idx);
  EXPECT_EQ(a.slot, w.slot);
  EXPECT_EQ(a.assign, w.assign);
  EXPECT_EQ(a.routed, w.routed);
  int kept = 0;
  for (int32_t r : w.assign) kept += r >= 0 ? 1 : 0;
  int total = 0;
  for (int32_t r : w.routed) total += r;
  EXPECT_EQ(total, N * k);
  EXPECT_LE(kept, N * k);
  expect_close(a.probs, w.probs, 4e-7, 1e-6, "router_forward probs");
  expect_close(a.gates, w.gates, 4e-7, 1e-6, "router_forward gates");
  // dlogits: E-term dot products of O(1) values plus the 1/s² factor of k = 2 (s >= 2/E).
  expect_close(a.dlogits, w.dlogits, 2e-6 * E * E, 1e-5, "router_backward dlogits");
  EXPECT_EQ(a.rows, w.rows) << "moe_gather copies exactly";
  expect_close(a.dx, w.dx, 4 * eps32 * (k + 1), 0, "moe_gather_backward dinp (k + 1 terms)");
  expect_close(a.out, w.out, 4 * eps32 * 2 * k, 0, "moe_scatter out (k terms)");
  expect_close(a.dy, w.dy, 4 * eps32 * 2, 0, "moe_scatter_backward dexpert_out");
  expect_within(a.dg, w.dg, dot_tolerance(std::vector<float>(w.dg.size(), float(C) + 1.0f), C),
                "moe_scatter_backward dgates (K = C)");
  // Rows no token uses hold no gradient from scatter_backward (only the initial values).
  for (size_t r = 0; r < R; ++r) {
    if (w.slot[r] < 0) {
      for (int c = 0; c < C; ++c) EXPECT_EQ(a.dy[r * C + c], dy0[r * C + c]) << "row " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(shapes, moe_compare,
                         ::testing::Values(moe_shape{1, 2, 1, 1, 1},
                                           moe_shape{7, 3, 2, 5, 3},   // drops
                                           moe_shape{13, 5, 1, 9, 2},  // heavy drops
                                           moe_shape{33, 7, 2, 17, 12}, moe_shape{64, 4, 1, 31, 20},
                                           moe_shape{100, 3, 2, 65, 100},  // no drops
                                           moe_shape{257, 9, 2, 33, 72}),
                         [](const auto& param_info) {
                           const auto& s = param_info.param;
                           return "N" + std::to_string(s.N) + "_E" + std::to_string(s.E) + "_k" +
                                  std::to_string(s.k) + "_C" + std::to_string(s.C) + "_cap" +
                                  std::to_string(s.capacity);
                         });

}  // namespace
}  // namespace dd::kernels::test
