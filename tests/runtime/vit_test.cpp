// tests/runtime/vit_test.cpp — the vision transformer: layout, config round trip and refusals,
// a finite-difference gradient check of every parameter for both poolings, cpu against
// reference, and a short training run on the real MNIST t10k split.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "runtime/adamw.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/idx.hpp"
#include "runtime/model.hpp"
#include "runtime/rng.hpp"
#include "runtime/vit.hpp"
#include "tests/runtime/grad_check.hpp"
#include "tests/support/error_of.hpp"

namespace {

using dd::test::error_of;

TEST(Vit, LayoutOfDefaultModel) {
  dd::vit_config cfg;  // 28x28, p 7, C 64, 2 layers, cls
  EXPECT_EQ(cfg.patches(), 16);
  EXPECT_EQ(cfg.tokens(), 17);
  const auto t = dd::vit_tensors(cfg);
  ASSERT_EQ(t.size(), 4 + 2 * 12 + 4u);
  EXPECT_EQ(t[0].name, "patch_embed.weight");
  EXPECT_EQ(t[0].shape, (std::vector<int64_t>{64, 49}));
  EXPECT_EQ(t[2].name, "cls_token");
  EXPECT_TRUE(t[2].is_embedding);
  EXPECT_FALSE(t[2].decay);
  EXPECT_EQ(t[3].name, "pos_embed");
  EXPECT_EQ(t[3].shape, (std::vector<int64_t>{17, 64}));
  EXPECT_FALSE(t[3].decay);
  EXPECT_EQ(t[4].name, "h.0.ln_1.weight");
  EXPECT_EQ(t[4].layer, 0);
  EXPECT_EQ(t[4 + 12 + 2].name, "h.1.attn.qkv.weight");
  EXPECT_TRUE(t[4 + 12 + 2].decay);
  EXPECT_EQ(t.back().name, "head.bias");
  EXPECT_EQ(t[t.size() - 2].shape, (std::vector<int64_t>{10, 64}));
  // 64·49+64 + 64 + 17·64 + 2·(12·64² + 13·64) + 2·64 + 10·64 + 10
  const size_t want = 64 * 49 + 64 + 64 + 17 * 64 + 2 * (12 * 64 * 64 + 13 * 64) + 128 + 650;
  EXPECT_EQ(dd::vit_num_params(cfg), want);
  cfg.pooling = dd::vit_pooling::mean;
  EXPECT_EQ(dd::vit_num_params(cfg), want - 64 - 64);  // no cls_token, one fewer position
  // FLOPs: 6·(T·12·L·C² + P·p²·C + C·K) + 12·L·T²·C with T = 16 (mean).
  EXPECT_DOUBLE_EQ(dd::vit_flops_per_sample(cfg),
                   6.0 * (16 * 12.0 * 2 * 64 * 64 + 16 * 49.0 * 64 + 640) + 12.0 * 2 * 256 * 64);
}

TEST(Vit, ConfigRoundTripAndRefusals) {
  dd::vit_config c;
  c.pooling = dd::vit_pooling::mean;
  c.width = 48;
  c.heads = 3;
  const auto j = c.to_json();
  EXPECT_EQ(j["pooling"], "mean");
  EXPECT_EQ(dd::vit_config::from_json(j), c);
  auto bad = j;
  bad["pooling"] = "max";
  EXPECT_NE(error_of([&] {
              dd::vit_config::from_json(bad);
            }).find("pooling 'max' is not one of \"cls\", \"mean\""),
            std::string::npos);
  bad = j;
  bad["patch"] = 5;
  EXPECT_NE(error_of([&] {
              dd::vit_config::from_json(bad);
            }).find("patch (5) must divide rows (28) and cols (28)"),
            std::string::npos);
  bad = j;
  bad.erase("classes");
  EXPECT_NE(error_of([&] { dd::vit_config::from_json(bad); }).find("missing field 'classes'"),
            std::string::npos);
  bad = j;
  bad["heads"] = 5;
  EXPECT_NE(error_of([&] { dd::vit_config::from_json(bad); }).find("width (48) must be divisible"),
            std::string::npos);
}

TEST(Vit, ForwardRefusesBadInput) {
  auto be = dd::kernels::make_backend("reference");
  dd::vit_config cfg{8, 8, 4, 3, 1, 2, 8, dd::vit_pooling::cls};
  dd::vit m(*be, cfg);
  m.init(1);
  std::vector<int32_t> px(2 * 64, 7), lab = {0, 2};
  EXPECT_NO_THROW(m.forward(px, lab, 2));
  EXPECT_NE(error_of([&] { m.forward(px, lab, 3); }).find("expected B·rows·cols = 3·8·8 = 192"),
            std::string::npos);
  px[64 + 5] = 256;
  EXPECT_NE(error_of([&] { m.forward(px, lab, 2); }).find("pixel 5 of image 1 is 256"),
            std::string::npos);
  px[64 + 5] = 0;
  lab[1] = 3;
  EXPECT_NE(error_of([&] { m.forward(px, lab, 2); }).find("label 3 of image 1 is outside [0, 3)"),
            std::string::npos);
  dd::vit fresh(*be, cfg);
  EXPECT_THROW(fresh.backward(), std::logic_error);
}

// Central finite differences of the mean loss against backward() for EVERY parameter of a tiny
// ViT on the reference backend (tolerances argued as in gpt_test.cpp's check).
void gradient_check(dd::vit_pooling pooling) {
  auto be = dd::kernels::make_backend("reference");
  dd::vit_config cfg{6, 4, 2, 3, 2, 2, 8, pooling};  // 3x2 = 6 patches of 2x2
  dd::vit m(*be, cfg);
  m.init(3);
  dd::rng r(17);
  auto p = dd::test::perturb_parameters(m, r);
  const int B = 3;
  std::vector<int32_t> px(static_cast<size_t>(B) * 24), lab(B);
  for (auto& v : px) v = static_cast<int32_t>(r.below(256));
  for (auto& v : lab) v = static_cast<int32_t>(r.below(3));
  m.zero_grad();
  m.forward(px, lab, B);
  m.backward();
  const auto g = m.get_gradients();
  dd::test::fd_tally tally;
  for (size_t i = 0; i < p.size(); ++i) {
    const double fd = dd::test::central_difference(
        p[i], 1e-2f,
        [&](float v) {
          p[i] = v;
          m.set_parameters(p);
        },
        [&] { return m.forward(px, lab, B); });
    tally.add(fd, g[i], [&] { return "param " + std::to_string(i); });
  }
  tally.expect_agreement();
  // Every tensor receives gradient (no path is dead), cls_token included.
  for (const auto& t : m.tensors()) {
    double s = 0;
    for (size_t k = 0; k < t.numel; ++k) s += std::fabs(g[t.offset + k]);
    EXPECT_GT(s, 0.0) << t.name;
  }
}

TEST(Vit, FiniteDifferenceGradientCheckCls) { gradient_check(dd::vit_pooling::cls); }
TEST(Vit, FiniteDifferenceGradientCheckMean) { gradient_check(dd::vit_pooling::mean); }

TEST(Vit, CpuMatchesReference) {
  auto ref = dd::kernels::make_backend("reference");
  auto cpu = dd::kernels::make_backend("cpu", {2, 0});
  for (auto pooling : {dd::vit_pooling::cls, dd::vit_pooling::mean}) {
    dd::vit_config cfg{28, 28, 7, 10, 2, 4, 32, pooling};
    dd::vit a(*ref, cfg), b(*cpu, cfg);
    a.init(9);
    b.init(9);
    const int B = 5;
    std::vector<int32_t> px(static_cast<size_t>(B) * 784), lab(B);
    dd::rng r(2);
    for (auto& v : px) v = static_cast<int32_t>(r.below(256));
    for (auto& v : lab) v = static_cast<int32_t>(r.below(10));
    a.zero_grad();
    b.zero_grad();
    const double la = a.forward(px, lab, B), lb = b.forward(px, lab, B);
    EXPECT_NEAR(la, lb, 1e-5);
    EXPECT_EQ(a.last_correct(), b.last_correct());
    a.backward();
    b.backward();
    dd::test::expect_gradients_close(a.get_gradients(), b.get_gradients(), dd::to_string(pooling));
  }
}

// A few hundred AdamW steps on the real t10k train split (cpu backend) must learn the digits:
// validation accuracy well above chance (10%).
TEST(Vit, LearnsMnist) {
  const std::string dir = std::string(DD_DATA_DIR) + "/mnist-t10k/";
  const auto data = dd::image_dataset::from_files(dir + "t10k-images-idx3-ubyte.gz",
                                                  dir + "t10k-labels-idx1-ubyte.gz", 0.8);
  auto be = dd::kernels::make_backend("cpu", {1, 0});
  dd::vit_config cfg{28, 28, 7, 10, 1, 2, 32, dd::vit_pooling::mean};
  dd::vit m(*be, cfg);
  const uint64_t seed = 5;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  m.init(seed);
  dd::adamw_config oc;
  oc.weight_decay = 0.0f;
  dd::adamw opt(*be, m.tensors(), m.num_params(), oc);
  dd::image_stream s(data, 0, 1, seed);
  std::vector<int32_t> px, lab;
  const auto before = m.evaluate(data, 500);
  for (int step = 0; step < 600; ++step) {
    s.next(32, px, lab);
    m.zero_grad();
    m.forward(px, lab, 32);
    m.backward();
    opt.step(m.params(), m.grads(), 2e-3f);
  }
  const auto after = m.evaluate(data, 500);
  std::printf("validation: before loss %.4f acc %.4f; after 600 steps loss %.4f acc %.4f\n",
              before.loss, before.accuracy, after.loss, after.accuracy);
  EXPECT_EQ(after.samples, 2000u);
  EXPECT_NEAR(before.loss, std::log(10.0), 0.1);  // near-uniform at init
  EXPECT_LT(after.loss, 1.0);
  EXPECT_GT(after.accuracy, 0.7);
}

// kind "vit" behind the model interface: config round trip, layout, batches of features.
TEST(Vit, ModelInterface) {
  dd::model_config mc;
  mc.kind = "vit";
  mc.layers = 1;
  mc.heads = 2;
  mc.width = 16;
  mc.vit.patch = 4;
  mc.vit.pooling = dd::vit_pooling::mean;
  const auto j = mc.to_json();
  EXPECT_EQ(j["kind"], "vit");
  EXPECT_EQ(j["patch"], 4);
  EXPECT_EQ(j["pooling"], "mean");
  EXPECT_EQ(dd::model_config::from_json(j), mc);
  auto bad = j;
  bad["patch"] = 5;
  EXPECT_NE(error_of([&] { dd::model_config::from_json(bad); }).find("patch (5) must divide"),
            std::string::npos);

  auto be = dd::kernels::make_backend("cpu", {1, 0});
  auto m = dd::make_model(*be, mc);
  EXPECT_EQ(m->config(), mc);
  const auto t = dd::model_tensors(mc);
  ASSERT_EQ(t.size(), m->tensors().size());
  EXPECT_EQ(t[2].name, "pos_embed");  // mean pooling: no cls_token
  EXPECT_EQ(m->num_params(), dd::vit_num_params(mc.vit_shape()));
  EXPECT_DOUBLE_EQ(m->flops_per_sample(1), dd::vit_flops_per_sample(mc.vit_shape()));
  m->init(4);

  dd::vit direct(*be, mc.vit_shape());
  direct.init(4);
  EXPECT_EQ(direct.get_parameters(), m->get_parameters());
  const int B = 3;
  dd::rng r(8);
  std::vector<int32_t> px(static_cast<size_t>(B) * 784), lab(B);
  for (auto& v : px) v = static_cast<int32_t>(r.below(256));
  for (auto& v : lab) v = static_cast<int32_t>(r.below(10));
  dd::model_batch batch;
  batch.B = B;
  batch.T = 1;
  batch.features.assign(px.begin(), px.end());
  batch.targets = lab;
  const double l1 = m->forward(batch);
  const double l2 = direct.forward(px, lab, B);
  EXPECT_EQ(l1, l2);
  const auto metric = m->evaluate(batch);
  EXPECT_EQ(metric.loss, l1);
  EXPECT_EQ(metric.accuracy, static_cast<double>(direct.last_correct()) / B);
  m->zero_grad();
  m->forward(batch);
  m->backward();
  direct.zero_grad();
  direct.forward(px, lab, B);
  direct.backward();
  EXPECT_EQ(m->get_gradients(), direct.get_gradients());

  batch.T = 2;
  EXPECT_NE(error_of([&] { m->forward(batch); }).find("batch.T is 2"), std::string::npos);
  batch.T = 1;
  batch.features[5] = 300.0f;
  EXPECT_NE(error_of([&] { m->forward(batch); }).find("pixel 5 of image 0 is 300"),
            std::string::npos);
}

// A ViT checkpoint (safetensors + metadata, runtime/checkpoint.hpp) loads back bit for bit and
// records the vit config; a ViT of another shape refuses it naming the tensor.
TEST(Vit, CheckpointRoundTrip) {
  auto be = dd::kernels::make_backend("cpu", {1, 0});
  dd::vit_config cfg{28, 28, 7, 10, 1, 2, 16, dd::vit_pooling::cls};
  dd::vit a(*be, cfg);
  a.init(21);
  const auto path =
      (std::filesystem::temp_directory_path() /
       ("dd_vit_ckpt_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
        ".safetensors"))
          .string();
  dd::save_checkpoint(path, a, nullptr, {});
  dd::vit b(*be, cfg);
  const auto meta = dd::load_checkpoint(path, b, nullptr);
  EXPECT_EQ(b.get_parameters(), a.get_parameters());
  ASSERT_TRUE(meta.count("config")) << "checkpoint metadata has no config";
  EXPECT_EQ(dd::model_config::from_json(nlohmann::json::parse(meta.at("config"))), a.config());
  cfg.pooling = dd::vit_pooling::mean;  // no cls_token, 16 positions
  dd::vit c(*be, cfg);
  EXPECT_NE(error_of([&] { dd::load_checkpoint(path, c, nullptr); }).find("pos_embed"),
            std::string::npos);
  std::filesystem::remove(path);
}

}  // namespace
