// tests/runtime/vit_golden_test.cpp — the ViT (both poolings) against an independent PyTorch
// implementation: init, logits, loss and per-tensor gradients of the first batch, then three
// AdamW steps. tests/fixtures/vit_golden.json was written by
// tools/torch_reference/make_vit_golden.py (regenerate: python3 with torch,
// `python3 tools/torch_reference/make_vit_golden.py`), which re-implements dd::rng and
// vit::init, so both sides start from bit-identical weights, on the first 12 MNIST t10k images.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "kernels/backend.hpp"
#include "runtime/adamw.hpp"
#include "runtime/vit.hpp"
#include "tests/runtime/golden_support.hpp"

namespace {

class VitGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(VitGolden, MatchesPyTorch) {
  const auto g = dd::test::load_golden("vit_golden.json");
  auto be = dd::kernels::make_backend(GetParam(), {1, 0});
  const int B = g["B"];
  for (const auto& run : g["runs"]) {
    const auto cfg = dd::vit_config::from_json(run["config"]);
    SCOPED_TRACE(std::string("pooling ") + dd::to_string(cfg.pooling));
    dd::vit m(*be, cfg);
    m.init(g["seed"].get<uint64_t>());
    const auto p0 = m.get_parameters();
    dd::test::expect_init_matches(p0, run["init"]);

    dd::adamw opt(*be, m.tensors(), m.num_params(), dd::test::golden_adamw(g["hyper"]));
    const float lr = g["hyper"]["lr"].get<float>();
    for (size_t s = 0; s < run["losses"].size(); ++s) {
      const auto& batch = g["batches"][s];
      const auto px = batch["pixels"].get<std::vector<int32_t>>();
      const auto lab = batch["labels"].get<std::vector<int32_t>>();
      m.zero_grad();
      const double loss = m.forward(px, lab, B);
      // float32 on both sides, different summation orders. Measured worst cases (both
      // backends, both poolings, 3 steps): |Δloss| 1.8e-7; per-tensor Σ|g| 3.3e-7 relative;
      // after a step Σ|θ| 4.1e-7 and Σθ² 7e-9 relative. Tolerances are 25-55x those.
      EXPECT_NEAR(loss, run["losses"][s].get<double>(), 1e-5) << "step " << s;
      if (s == 0) {
        const auto logits = m.last_logits();
        for (int b = 0; b < B; ++b)
          for (int k = 0; k < cfg.classes; ++k)
            EXPECT_NEAR(logits[static_cast<size_t>(b) * cfg.classes + k],
                        run["logits0"][b][k].get<double>(), 1e-5)
                << "logit " << b << "," << k;
      }
      m.backward();
      if (s == 0) {
        const auto grads = m.get_gradients();
        for (const auto& t : m.tensors()) {
          double sum = 0, sum_abs = 0;
          for (size_t k = 0; k < t.numel; ++k) {
            sum += grads[t.offset + k];
            sum_abs += std::fabs(grads[t.offset + k]);
          }
          const auto& want = run["grads0"][t.name];
          const double wa = want["sum_abs"].get<double>();
          EXPECT_GT(wa, 0.0) << t.name;
          EXPECT_NEAR(sum_abs, wa, 1e-5 * wa) << t.name;
          EXPECT_NEAR(sum, want["sum"].get<double>(), 1e-5 * wa) << t.name;
        }
      }
      opt.step(m.params(), m.grads(), lr);
      dd::test::expect_sums_match(m.get_parameters(), run["after_step"][s], 1e-5, 3e-7, s);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(backends, VitGolden, ::testing::Values("reference", "cpu"));

}  // namespace
