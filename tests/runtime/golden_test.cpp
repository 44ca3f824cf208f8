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
#include "tests/runtime/golden_support.hpp"

namespace {

class Golden : public ::testing::TestWithParam<std::string> {};

TEST_P(Golden, FiveAdamWStepsMatchPyTorch) {
  const auto g = dd::test::load_golden("gpt_golden.json");
  auto be = dd::kernels::make_backend(GetParam(), {1, 0});
  const auto cfg = dd::gpt_config::from_json(g["config"]);
  dd::gpt m(*be, cfg);
  dd::test::init_as_golden(m, g);
  dd::test::golden_optimizer opt(*be, m, g["hyper"]);
  const int B = g["B"], T = g["T"];
  for (size_t s = 0; s < g["losses"].size(); ++s) {
    const auto tok = dd::test::flat_rows(g["batches"][s]["tokens"]);
    const auto tgt = dd::test::flat_rows(g["batches"][s]["targets"]);
    m.zero_grad();
    const double loss = m.forward(tok, tgt, B, T);
    m.backward();
    const double gn =
        dd::clip_grad_norm(*be, m.grads(), m.num_params(), g["hyper"]["grad_clip"].get<double>());
    opt.step(m, s);
    // Float32 on both sides with different summation orders. Measured worst case over the 5
    // steps on both backends: loss 4.2e-7 nats, grad norm 3e-7 relative, sum|θ| 3e-7 relative,
    // Σθ² 6e-8 relative. Tolerances are ~30-50x those, and orders of magnitude below what any
    // real error causes (one step changes the loss by ~0.2 and sum|θ| by ~10%).
    EXPECT_NEAR(loss, g["losses"][s].get<double>(), 2e-5) << "step " << s;
    EXPECT_NEAR(gn, g["grad_norms"][s].get<double>(), 1e-5 * g["grad_norms"][s].get<double>())
        << "step " << s;
    dd::test::expect_sums_match(m.get_parameters(), g["after_step"][s], 1e-5, 1e-5, s);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, Golden, ::testing::Values("reference", "cpu"));

}  // namespace
