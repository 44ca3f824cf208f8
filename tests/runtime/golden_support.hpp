// tests/runtime/golden_support.hpp — what the golden tests against PyTorch (golden_test,
// vit_golden_test, moe_test) share: reading a fixture of tests/fixtures/, the parameter
// checksums the fixtures carry, the init check, and the fixture's optimizer.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "kernels/backend.hpp"
#include "runtime/adamw.hpp"
#include "runtime/lr_schedule.hpp"

namespace dd::test {

/// Σθ, Σθ² and Σ|θ| of a parameter vector, in double.
struct param_sums {
  double sum = 0, sum_sq = 0, sum_abs = 0;
};

inline param_sums checksums(const std::vector<float>& p) {
  param_sums s;
  for (float x : p) {
    s.sum += x;
    s.sum_sq += static_cast<double>(x) * x;
    s.sum_abs += std::fabs(x);
  }
  return s;
}

/// tests/fixtures/NAME parsed; throws naming the path when it cannot be opened.
inline nlohmann::json load_golden(const std::string& name) {
  const std::string path = std::string(DD_SOURCE_DIR) + "/tests/fixtures/" + name;
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  return nlohmann::json::parse(in);
}

/// The Python RNG twin must reproduce our init: the first 8 values bit-identical, and as each
/// value is a float32 rounding of the same double, Σθ and Σθ² agree to double rounding.
inline void expect_init_matches(const std::vector<float>& p, const nlohmann::json& init) {
  for (int i = 0; i < 8; ++i) EXPECT_EQ(p[i], init["first"][i].get<float>()) << "param " << i;
  const auto s = checksums(p);
  EXPECT_NEAR(s.sum_sq, init["sum_sq"].get<double>(), 1e-9);
  EXPECT_NEAR(s.sum, init["sum"].get<double>(), 1e-9);
}

/// Σ|θ| and Σθ² after step `step` against the fixture's `want`, each within its relative tolerance.
inline void expect_sums_match(const std::vector<float>& p, const nlohmann::json& want,
                              double rel_sum_abs, double rel_sum_sq, size_t step) {
  const auto s = checksums(p);
  const double wa = want["sum_abs"].get<double>(), wq = want["sum_sq"].get<double>();
  EXPECT_NEAR(s.sum_abs, wa, rel_sum_abs * wa) << "step " << step;
  EXPECT_NEAR(s.sum_sq, wq, rel_sum_sq * wq) << "step " << step;
}

/// A fixture's batch rows ([[t, ...], ...]) as one row-major vector.
inline std::vector<int32_t> flat_rows(const nlohmann::json& rows) {
  std::vector<int32_t> out;
  for (const auto& row : rows)
    for (const auto& v : row) out.push_back(v.get<int32_t>());
  return out;
}

/// The learning-rate schedule of a fixture's "hyper" table.
inline lr_schedule golden_schedule(const nlohmann::json& hp) {
  return {hp["lr"].get<double>(), hp["warmup"].get<int64_t>(), hp["total"].get<int64_t>(),
          hp["min_lr_ratio"].get<double>()};
}

/// The AdamW settings of a fixture's "hyper" table.
inline adamw_config golden_adamw(const nlohmann::json& hp) {
  adamw_config oc;
  oc.weight_decay = hp["weight_decay"].get<float>();
  return oc;
}

/// Initialises `m` from the fixture `g`'s seed and checks the init against the fixture.
template <class Model>
void init_as_golden(Model& m, const nlohmann::json& g) {
  m.init(g["seed"].get<std::uint64_t>());
  expect_init_matches(m.get_parameters(), g["init"]);
}

/// The fixture's optimizer for a model: AdamW with its weight decay, at the learning rate its
/// schedule gives each step.
class golden_optimizer {
 public:
  template <class Model>
  golden_optimizer(kernels::backend& be, Model& m, const nlohmann::json& hp)
      : sched_(golden_schedule(hp)), opt_(be, m.tensors(), m.num_params(), golden_adamw(hp)) {}

  /// The AdamW step of `m` number `step` (0-based).
  template <class Model>
  void step(Model& m, std::size_t step) {
    opt_.step(m.params(), m.grads(),
              static_cast<float>(sched_.at(static_cast<std::int64_t>(step))));
  }

 private:
  lr_schedule sched_;
  adamw opt_;
};

}  // namespace dd::test
