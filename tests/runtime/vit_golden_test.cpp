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

namespace {

nlohmann::json load_golden() {
  const std::string path = std::string(DD_SOURCE_DIR) + "/tests/fixtures/vit_golden.json";
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  return nlohmann::json::parse(in);
}

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

class VitGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(VitGolden, MatchesPyTorch) {
  const auto g = load_golden();
  auto be = dd::kernels::make_backend(GetParam(), {1, 0});
  const int B = g["B"];
  for (const auto& run : g["runs"]) {
    const auto cfg = dd::vit_config::from_json(run["config"]);
    SCOPED_TRACE(std::string("pooling ") + dd::to_string(cfg.pooling));
    dd::vit m(*be, cfg);
    m.init(g["seed"].get<uint64_t>());
    const auto p0 = m.get_parameters();
    for (int i = 0; i < 8; ++i) EXPECT_EQ(p0[i], run["init"]["first"][i].get<float>()) << i;
    const auto s0 = checksums(p0);
    EXPECT_NEAR(s0.sum_sq, run["init"]["sum_sq"].get<double>(), 1e-9);
    EXPECT_NEAR(s0.sum, run["init"]["sum"].get<double>(), 1e-9);

    dd::adamw_config oc;
    oc.weight_decay = g["hyper"]["weight_decay"].get<float>();
    dd::adamw opt(*be, m.tensors(), m.num_params(), oc);
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
      const auto sa = checksums(m.get_parameters());
      const auto& want = run["after_step"][s];
      EXPECT_NEAR(sa.sum_abs, want["sum_abs"].get<double>(), 1e-5 * want["sum_abs"].get<double>())
          << "step " << s;
      EXPECT_NEAR(sa.sum_sq, want["sum_sq"].get<double>(), 3e-7 * want["sum_sq"].get<double>())
          << "step " << s;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(backends, VitGolden, ::testing::Values("reference", "cpu"));

}  // namespace
