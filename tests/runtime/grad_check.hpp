// tests/runtime/grad_check.hpp — what the finite-difference gradient checks of the models (GPT,
// ViT, MoE GPT) share: the move away from the init, the central difference of one parameter,
// and the tally of finite differences against backward() with its tolerances; and the
// comparison of one model's gradients on two backends.
//
// Tolerances (argued in gpt_test.cpp): per element |fd − g| <= 2e-4 + 2e-2·|g|; overall the two
// gradient vectors agree to cosine > 0.9999, and the gradient is not vacuous (|g|² > 1e-4).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/rng.hpp"

namespace dd::test {

/// Moves a model away from its init (larger weights, non-zero biases, so every path carries
/// gradient): adds 0.15·N(0, 1) from `r` to every parameter; the parameters it set.
template <class Model>
std::vector<float> perturb_parameters(Model& m, rng& r) {
  auto p = m.get_parameters();
  for (auto& x : p) x += static_cast<float>(0.15 * r.normal());
  m.set_parameters(p);
  return p;
}

/// (L(θ_i + h) − L(θ_i − h)) / 2h: `set(v)` gives parameter i the value v and `loss()` evaluates;
/// parameter i gets `orig` back.
inline double central_difference(float orig, float h, const std::function<void(float)>& set,
                                 const std::function<double()>& loss) {
  set(orig + h);
  const double lp = loss();
  set(orig - h);
  const double lm = loss();
  set(orig);
  return (lp - lm) / (2.0 * h);
}

/// Finite differences against backward(), one parameter at a time.
struct fd_tally {
  double dot = 0, nf = 0, ng = 0;
  int bad = 0;

  /// One parameter's finite difference `fd` against backward's `g`; the first 10 misses are
  /// reported, each named by `where()`.
  void add(double fd, float g, const std::function<std::string()>& where) {
    dot += fd * g;
    nf += fd * fd;
    ng += static_cast<double>(g) * g;
    if (std::fabs(fd - g) > 2e-4 + 2e-2 * std::fabs(g)) {
      if (++bad <= 10)
        ADD_FAILURE() << where() << ": finite difference " << fd << " vs backward " << g;
    }
  }

  /// No element off, cosine > 0.9999, and a gradient that is not vacuous.
  void expect_agreement() const {
    EXPECT_EQ(bad, 0);
    EXPECT_GT(dot / std::sqrt(nf * ng), 0.9999);
    EXPECT_GT(ng, 1e-4);  // the check is not vacuous
  }
};

/// The gradients of one model on two backends (`ref` the reference backend's) agree to 1e-4 of
/// the largest |ref| element: float32 with different summation orders.
inline void expect_gradients_close(const std::vector<float>& ref, const std::vector<float>& other,
                                   const std::string& what = "") {
  ASSERT_EQ(ref.size(), other.size()) << what;
  double maxdiff = 0, maxg = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    maxdiff = std::max(maxdiff, static_cast<double>(std::fabs(ref[i] - other[i])));
    maxg = std::max(maxg, static_cast<double>(std::fabs(ref[i])));
  }
  EXPECT_LT(maxdiff, 1e-4 * maxg) << what;
}

}  // namespace dd::test
