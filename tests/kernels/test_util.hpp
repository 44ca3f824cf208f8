// tests/kernels/test_util.hpp — helpers for the kernel tests: seeded random host data, device
// vectors that round-trip through a backend's memory, and tolerance checks.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.hpp"

namespace dd::kernels::test {

/// float32 machine epsilon (2^-23).
inline constexpr double eps32 = std::numeric_limits<float>::epsilon();

/// Uniform floats in [lo, hi) from a fixed seed.
inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

/// Uniform ints in [0, hi) from a fixed seed.
inline std::vector<int32_t> random_ints(size_t n, int32_t hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, hi - 1);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

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

}  // namespace dd::kernels::test
