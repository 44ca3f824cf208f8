// tests/kernels/test_util.hpp — helpers for the kernel tests: seeded random host data (from
// tests/support/random_data.hpp), device vectors that round-trip through a backend's memory, and
// tolerance checks.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "tests/support/random_data.hpp"

namespace dd::kernels::test {

/// float32 machine epsilon (2^-23).
inline constexpr double eps32 = std::numeric_limits<float>::epsilon();

using dd::test::random_floats;
using dd::test::random_ints;

/// A buffer in `be`'s memory initialised from host data.
template <class T>
class dvec {
 public:
  dvec(backend& be, const std::vector<T>& host) : be_(&be), buf_(be.alloc<T>(host.size())) {
    if (!host.empty()) be.upload(buf_.data(), host.data(), host.size());
  }
  dvec(backend& be, size_t n) : be_(&be), buf_(be.alloc<T>(n)) {}
  T* data() { return buf_.data(); }
  const T* data() const { return buf_.data(); }
  size_t size() const { return buf_.size(); }
  std::vector<T> host() const {
    std::vector<T> h(buf_.size());
    be_->synchronize();
    if (!h.empty()) be_->download(h.data(), buf_.data(), h.size());
    return h;
  }

 private:
  backend* be_;
  buffer<T> buf_;
};

/// Expects |got[i] - want[i]| <= atol + rtol * |want[i]| for every i; reports the worst element.
inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, double atol,
                         double rtol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t worst = 0, bad = 0;
  double worst_excess = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double(got[i]) - double(want[i]));
    const double tol = atol + rtol * std::fabs(double(want[i]));
    const double excess = std::isnan(err) ? INFINITY : err - tol;
    if (excess > 0) ++bad;
    if (excess > worst_excess || i == 0) {
      worst_excess = excess;
      worst = i;
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size()
                     << " elements out of tolerance; worst at " << worst << ": got " << got[worst]
                     << " want " << want[worst] << " (atol " << atol << ", rtol " << rtol << ")";
}

/// Per-element bound for a float32 dot product of length K against its double-accumulated
/// value: each of the K roundings is at most eps32 · mag (mag = Σ|a_k b_k| bounds every partial
/// sum) and they are independent with random signs, so the total is ~sqrt(K) · eps32 · mag; the
/// factor 4 covers the tail and blocked/FMA orderings, +1 the final rounding. Worst case
/// (K · eps32 · mag) is far looser and would not catch small indexing bugs.
inline std::vector<double> dot_tolerance(const std::vector<float>& mag, int K) {
  std::vector<double> tol(mag.size());
  for (size_t i = 0; i < mag.size(); ++i) {
    tol[i] = (4.0 * std::sqrt(double(K)) + 1.0) * eps32 * mag[i] + 1e-30;
  }
  return tol;
}

/// Expects |got[i] - want[i]| <= tol[i] (+ eps32 · |want[i]| for the final rounding).
inline void expect_within(const std::vector<float>& got, const std::vector<float>& want,
                          const std::vector<double>& tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  ASSERT_EQ(tol.size(), want.size()) << what;
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double(got[i]) - double(want[i]));
    if (!(err <= tol[i] + eps32 * std::fabs(double(want[i])))) {
      if (bad++ == 0) first = i;
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size()
                     << " elements out of tolerance; first at " << first << ": got " << got[first]
                     << " want " << want[first] << " tol " << tol[first];
}

/// Element-wise absolute values.
inline std::vector<float> abs_of(std::vector<float> v) {
  for (auto& x : v) x = std::fabs(x);
  return v;
}

/// max |v[i]|, at least `floor`.
inline float max_abs(const std::vector<float>& v, float floor = 0.0f) {
  float m = floor;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

/// An attention case: batch B, sequence length T, width C, NH heads.
struct attn_shape {
  int B, T, C, NH;
};

/// The test name of an attention case ("B2_T17_C24_NH3").
inline std::string attn_shape_name(const ::testing::TestParamInfo<attn_shape>& info) {
  const auto& s = info.param;
  return "B" + std::to_string(s.B) + "_T" + std::to_string(s.T) + "_C" + std::to_string(s.C) +
         "_NH" + std::to_string(s.NH);
}

/// What one attention forward and backward leaves: the output, the probabilities and dqkv.
struct attention_result {
  std::vector<float> out, att, dqkv;
};

/// Attention (causal, or bidirectional) forward then backward on `b`, over qkv uniform in [-2, 2)
/// from `seed`, an upstream gradient from seed + 1 and a dqkv buffer holding values from seed + 2.
inline attention_result run_attention(backend& b, const attn_shape& s, uint32_t seed,
                                      bool bidirectional) {
  const size_t n_qkv = size_t(s.B) * s.T * 3 * s.C, n_out = size_t(s.B) * s.T * s.C;
  const size_t n_att = size_t(s.B) * s.NH * s.T * s.T;
  dvec<float> dq(b, random_floats(n_qkv, seed, -2.0f, 2.0f)),
      ddy(b, random_floats(n_out, seed + 1)), dg(b, random_floats(n_qkv, seed + 2));
  dvec<float> out(b, n_out), att(b, n_att), scratch(b, n_att);
  if (bidirectional) {
    b.attention_forward_bidirectional(out.data(), att.data(), dq.data(), s.B, s.T, s.C, s.NH);
    b.attention_backward_bidirectional(dg.data(), scratch.data(), ddy.data(), dq.data(), att.data(),
                                       s.B, s.T, s.C, s.NH);
  } else {
    b.attention_forward(out.data(), att.data(), dq.data(), s.B, s.T, s.C, s.NH);
    b.attention_backward(dg.data(), scratch.data(), ddy.data(), dq.data(), att.data(), s.B, s.T,
                         s.C, s.NH);
  }
  return {out.host(), att.host(), dg.host()};
}

/// A backend's attention (`got`) against the reference's (`ref`), head size hs = C / NH:
/// - logits q·k/sqrt(hs) are dot products of length hs with |q_i k_i| <= 4: absolute error
///   <= (4 sqrt(hs) + 1) eps32 · 4 hs / sqrt(hs); that becomes a relative error of each
///   probability (plus ~4 ulp from exp and the normalization). Probabilities are <= 1.
/// - out = Σ_t2 att·v over T terms with |v| <= 2 and Σ att = 1: error <= p_tol · 2 · (number of
///   terms, as every probability may be off by p_tol) — bounded statistically by sqrt(T).
/// - dqkv: sums over up to T positions of products of an O(1) gradient with O(2) values, scaled
///   by up to sqrt(hs) (dq, dk carry 1/sqrt(hs) · hs-length dot products of datt). Normwise
///   bound: c·sqrt(T·hs)·eps32·max|dqkv| with c = 16 for the chained products.
inline void expect_attention_close(const attention_result& got, const attention_result& ref,
                                   const attn_shape& s, const std::string& what) {
  const int hs = s.C / s.NH, T = s.T;
  const double logit_err = (4.0 * std::sqrt(hs) + 1.0) * eps32 * 4.0 * std::sqrt(double(hs));
  const double p_tol = logit_err + 8 * eps32;
  expect_close(got.att, ref.att, p_tol, 0.0, what + " att (probabilities)");
  expect_close(got.out, ref.out, 2.0 * p_tol * (4.0 * std::sqrt(double(T)) + 1.0), 0.0,
               what + " out");
  const double g_tol = 16.0 * std::sqrt(double(T) * hs) * eps32 * max_abs(ref.dqkv, 1.0f);
  expect_close(got.dqkv, ref.dqkv, g_tol, 0.0, what + " dqkv");
}

}  // namespace dd::kernels::test
