// tests/runtime/trainer_test.cpp — the trainer's determinism (same seed → bit-identical losses
// and parameters on the cpu backend), checkpoint → load → continue == uninterrupted (bit-equal),
// optimizer reset, evaluation, and that training actually lowers the loss.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>

#include "kernels/backend.hpp"
#include "runtime/trainer.hpp"

namespace {

using ::testing::HasSubstr;

const dd::text_dataset& shakespeare() {
  static const dd::text_dataset d =
      dd::text_dataset::from_file(std::string(DD_DATA_DIR) + "/tinyshakespeare/input.txt");
  return d;
}

dd::trainer_config small_config() {
  dd::trainer_config c;
  c.model = dd::gpt_config{256, 32, 2, 2, 32};
  c.batch = 4;
  c.seq_len = 32;
  c.schedule = dd::lr_schedule{3e-3, 3, 20, 0.1};
  c.seed = 123;
  c.learner = 1;
  c.learners = 2;
  return c;
}

std::unique_ptr<dd::kernels::backend> cpu() { return dd::kernels::make_backend("cpu", {2, 0}); }

TEST(Trainer, SameSeedIsBitIdentical) {
  auto be1 = cpu(), be2 = cpu();
  dd::trainer a(*be1, shakespeare(), small_config()), b(*be2, shakespeare(), small_config());
  for (int s = 0; s < 8; ++s) {
    const auto ra = a.step(), rb = b.step();
    ASSERT_EQ(ra.loss, rb.loss) << "step " << s;  // bit-equal, not approximately equal
    ASSERT_EQ(ra.grad_norm, rb.grad_norm);
  }
  EXPECT_EQ(a.model().get_parameters(), b.model().get_parameters());
  EXPECT_EQ(a.data().cursor(), b.data().cursor());
}

TEST(Trainer, SaveLoadContinueEqualsUninterrupted) {
  const std::string path = ::testing::TempDir() + "dd_trainer_resume.safetensors";
  auto be1 = cpu(), be2 = cpu(), be3 = cpu();
  dd::trainer full(*be1, shakespeare(), small_config());
  std::vector<double> want;
  for (int s = 0; s < 10; ++s) want.push_back(full.step().loss);

  {
    dd::trainer first(*be2, shakespeare(), small_config());
    for (int s = 0; s < 5; ++s) ASSERT_EQ(first.step().loss, want[s]);
    first.save(path);
  }
  auto cfg = small_config();
  cfg.seed = 123;  // same stream; init weights are overwritten by the load
  dd::trainer resumed(*be3, shakespeare(), cfg);
  resumed.load(path);
  EXPECT_EQ(resumed.steps_done(), 5);
  for (int s = 5; s < 10; ++s) ASSERT_EQ(resumed.step().loss, want[s]) << "step " << s;
  EXPECT_EQ(resumed.model().get_parameters(), full.model().get_parameters());
  EXPECT_EQ(resumed.data().cursor(), full.data().cursor());
  std::remove(path.c_str());
}

TEST(Trainer, LoadRefusesOtherModelConfigAndLeavesStateAlone) {
  const std::string path = ::testing::TempDir() + "dd_trainer_other.safetensors";
  auto be = cpu();
  auto cfg = small_config();
  cfg.model.width = 16;
  cfg.model.heads = 2;
  {
    dd::trainer t(*be, shakespeare(), cfg);
    t.save(path);
  }
  dd::trainer t(*be, shakespeare(), small_config());
  const auto before = t.model().get_parameters();
  try {
    t.load(path);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr(path));
    EXPECT_THAT(e.what(), HasSubstr("model config"));
  }
  EXPECT_EQ(t.model().get_parameters(), before);
  std::remove(path.c_str());
}

TEST(Trainer, LearnsAndEvaluates) {
  auto be = cpu();
  auto cfg = small_config();
  cfg.schedule = dd::lr_schedule{3e-3, 5, 60, 0.1};
  dd::trainer t(*be, shakespeare(), cfg);
  const double v0 = t.evaluate(4);
  // Untrained model: close to uniform over 256 bytes, ln 256 = 5.545 nats (init noise ±0.1).
  EXPECT_NEAR(v0, 5.545, 0.1);
  const auto grads_before = t.model().get_gradients();
  EXPECT_EQ(t.evaluate(4), v0);                        // deterministic slice
  EXPECT_EQ(t.model().get_gradients(), grads_before);  // evaluation touches no gradient
  for (int s = 0; s < 60; ++s) t.step();
  const double v1 = t.evaluate(4);
  // 60 steps of 128 tokens learn the byte unigram statistics: measured 3.61 nats; a broken
  // backward or optimizer stays near 5.5, so 4.0 separates the two with margin both ways.
  EXPECT_LT(v1, 4.0);
  EXPECT_EQ(t.tokens_seen(), 60 * 4 * 32);
}

TEST(Trainer, ResetOptimizerZeroesMoments) {
  auto be = cpu();
  dd::trainer t(*be, shakespeare(), small_config());
  t.step();
  t.step();
  EXPECT_EQ(t.optimizer().steps(), 2);
  t.reset_optimizer();
  EXPECT_EQ(t.optimizer().steps(), 0);
  EXPECT_EQ(t.steps_done(), 2);  // the schedule's step counter is kept
  std::vector<float> m(t.optimizer().size());
  be->download(m.data(), t.optimizer().m(), m.size());
  for (float x : m) ASSERT_EQ(x, 0.0f);
}

TEST(Trainer, BadConfigIsRefused) {
  auto be = cpu();
  auto cfg = small_config();
  cfg.seq_len = 64;  // > context 32
  try {
    dd::trainer t(*be, shakespeare(), cfg);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("seq_len 64"));
  }
}

}  // namespace
