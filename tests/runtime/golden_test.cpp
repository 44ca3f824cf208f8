// tests/runtime/golden_test.cpp — the whole training step (init, forward, backward, clip, AdamW,
// schedule) against PyTorch. tests/fixtures/gpt_golden.json was written by
// tools/torch_reference/make_golden.py (regenerate: /usr/bin/python3
// tools/torch_reference/make_golden.py), which re-implements dd::rng and gpt::init in Python,
// so both sides start from bit-identical weights and train 5 steps on the same batches.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "kernels/backend.hpp"
#include "runtime/adamw.hpp"
#include "runtime/gpt.hpp"
#include "runtime/lr_schedule.hpp"

namespace {

struct sums {
  double sum = 0, sum_sq = 0, sum_abs = 0;
};

sums checksums(const std::vector<float>& p) {
  sums s;
  for (float x : p) {
    s.sum += x;
    s.sum_sq += static_cast<double>(x) * x;
    s.sum_abs += std::fabs(x);
  }
  return s;
}

nlohmann::json load_golden() {
  const std::string path = std::string(DD_SOURCE_DIR) + "/tests/fixtures/gpt_golden.json";
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  return nlohmann::json::parse(in);
}

class Golden : public ::testing::TestWithParam<std::string> {};

TEST_P(Golden, FiveAdamWStepsMatchPyTorch) {
  const auto g = load_golden();
  auto be = dd::kernels::make_backend(GetParam(), {1, 0});
  const auto cfg = dd::gpt_config::from_json(g["config"]);
  dd::gpt m(*be, cfg);
  m.init(g["seed"].get<uint64_t>());
  auto p = m.get_parameters();

  // Init: the Python RNG twin must reproduce our weights. Each value is a float32 rounding of the
  // same double, so the sums agree to double rounding (1e-12 relative).
  for (int i = 0; i < 8; ++i) EXPECT_EQ(p[i], g["init"]["first"][i].get<float>()) << "param " << i;
  const auto s0 = checksums(p);
  EXPECT_NEAR(s0.sum_sq, g["init"]["sum_sq"].get<double>(), 1e-9);
  EXPECT_NEAR(s0.sum, g["init"]["sum"].get<double>(), 1e-9);

  const auto& hp = g["hyper"];
  dd::lr_schedule sched{hp["lr"].get<double>(), hp["warmup"].get<int64_t>(),
                        hp["total"].get<int64_t>(), hp["min_lr_ratio"].get<double>()};
  dd::adamw_config oc;
  oc.weight_decay = hp["weight_decay"].get<float>();
  dd::adamw opt(*be, m.tensors(), m.num_params(), oc);
  const int B = g["B"], T = g["T"];
  for (size_t s = 0; s < g["losses"].size(); ++s) {
    std::vector<int32_t> tok, tgt;
    for (const auto& row : g["batches"][s]["tokens"])
      for (const auto& v : row) tok.push_back(v.get<int32_t>());
    for (const auto& row : g["batches"][s]["targets"])
      for (const auto& v : row) tgt.push_back(v.get<int32_t>());
    m.zero_grad();
    const double loss = m.forward(tok, tgt, B, T);
    m.backward();
    const double gn =
        dd::clip_grad_norm(*be, m.grads(), m.num_params(), hp["grad_clip"].get<double>());
    opt.step(m.params(), m.grads(), static_cast<float>(sched.at(static_cast<int64_t>(s))));
    // Float32 on both sides with different summation orders. Measured worst case over the 5
    // steps on both backends: loss 4.2e-7 nats, grad norm 3e-7 relative, sum|θ| 3e-7 relative,
    // Σθ² 6e-8 relative. Tolerances are ~30-50x those, and orders of magnitude below what any
    // real error causes (one step changes the loss by ~0.2 and sum|θ| by ~10%).
    EXPECT_NEAR(loss, g["losses"][s].get<double>(), 2e-5) << "step " << s;
    EXPECT_NEAR(gn, g["grad_norms"][s].get<double>(), 1e-5 * g["grad_norms"][s].get<double>())
        << "step " << s;
    const auto ss = checksums(m.get_parameters());
    const auto& want = g["after_step"][s];
    EXPECT_NEAR(ss.sum_abs, want["sum_abs"].get<double>(), 1e-5 * want["sum_abs"].get<double>())
        << "step " << s;
    EXPECT_NEAR(ss.sum_sq, want["sum_sq"].get<double>(), 1e-5 * want["sum_sq"].get<double>())
        << "step " << s;
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, Golden, ::testing::Values("reference", "cpu"));

}  // namespace
