// tests/sim/goodput_sim_test.cpp — analytic checks of the goodput simulator (tools/goodput).
//
// Each expected number is derived by hand from the model in docs/goodput.md; tolerances are
// floating-point round-off (1e-9 relative) for deterministic cases and 4 standard deviations of
// a Poisson count for the statistical one.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

#include "actors/policy/grace.hpp"
#include "tools/goodput/sim.hpp"

namespace dd::goodput {
namespace {

constexpr double day = 86400.0;

/// A small cluster: 10 slices of 256 chips, one simulated day, known timing constants.
sim_config small() {
  sim_config c;
  c.chips = 2560;
  c.slice_chips = 256;
  c.learners = 2;
  c.days = 1.0;
  c.mtbi_days = 1e12;  // effectively never
  c.recovery = recovery_dist::fixed;
  c.recovery_mean_s = 100.0;
  c.restart_s = 12.0;
  c.checkpoint_interval_s = 0.0;
  c.downscale_pause_s = 18.0;
  c.upscale_pause_s = 14.0;
  c.upscale_batch_s = 0.0;
  c.step_s = 1.0;
  c.outer_sync_s = 2.0;
  c.sync_interval = 24;
  return c;
}

TEST(GoodputSim, NoFailuresGivesFullGoodput) {
  for (auto s : {strategy::data_parallel, strategy::elastic_dp, strategy::decoupled_diloco}) {
    const auto r = simulate(small(), s, 7);
    EXPECT_EQ(r.failures, 0u) << to_string(s);
    EXPECT_DOUBLE_EQ(r.goodput, 1.0) << to_string(s);
    EXPECT_DOUBLE_EQ(r.uptime, 1.0) << to_string(s);
  }
}

TEST(GoodputSim, DilocoWithoutFailuresPaysOnlyTheOuterSync) {
  // Each round: H · step = 24 s of training, then a 2 s blocking all-reduce → 24/26. One day is
  // 86400 / 26 = 3323.08 rounds; the partial last round trains its first 0.08 · 26 = 2 s fully.
  const auto r = simulate(small(), strategy::diloco, 7);
  const double rounds = std::floor(day / 26.0);
  const double tail = std::min(24.0, day - rounds * 26.0);
  EXPECT_NEAR(r.goodput, (rounds * 24.0 + tail) / day, 1e-9);
}

TEST(GoodputSim, SingleFailureDataParallelLosesExactlyTheStall) {
  // Failure at t = 1000 s: stall 100 s (slice back) + 12 s (restart) + half a step lost.
  const auto r = simulate_single_failure(small(), strategy::data_parallel, 3, 1000.0, 100.0);
  EXPECT_EQ(r.failures, 1u);
  EXPECT_EQ(r.recoveries, 1u);
  EXPECT_NEAR(r.goodput, 1.0 - (100.0 + 12.0 + 0.5) / day, 1e-12);
  EXPECT_NEAR(r.uptime, 1.0 - (100.0 + 12.0) / day, 1e-12);
}

TEST(GoodputSim, SingleFailureCheckpointRollbackIsExact) {
  // Checkpoint every 300 s of training, no write cost: a failure at 1000 s rolls back to 900 s.
  sim_config c = small();
  c.checkpoint_interval_s = 300.0;
  const auto r = simulate_single_failure(c, strategy::data_parallel, 0, 1000.0, 100.0);
  EXPECT_NEAR(r.goodput, 1.0 - (100.0 + 12.0 + 100.0) / day, 1e-12);
  EXPECT_NEAR(r.lost_work_chip_s, 100.0 * 2560, 1e-6);
}

TEST(GoodputSim, SingleFailureElasticLosesPausesAndOneSlice) {
  // All chips idle for the 18 s downscale and the 14 s upscale, half a step lost; one slice
  // (256 chips) idle from the end of the downscale (t+18) until it returns (t+100).
  const double n = 2560, s = 256;
  const double lost = n * (18.0 + 14.0 + 0.5) + s * (100.0 - 18.0);
  const auto r = simulate_single_failure(small(), strategy::elastic_dp, 4, 1000.0, 100.0);
  EXPECT_NEAR(r.goodput, 1.0 - lost / (n * day), 1e-12);
  EXPECT_NEAR(r.uptime, 1.0 - 32.0 / day, 1e-12);

  // With upscale batching (60 s) and no other failure, the slice waits the whole window.
  sim_config c = small();
  c.upscale_batch_s = 60.0;
  const auto b = simulate_single_failure(c, strategy::elastic_dp, 4, 1000.0, 100.0);
  const double lost_b = n * (18.0 + 14.0 + 0.5) + s * (160.0 - 18.0);
  EXPECT_NEAR(b.goodput, 1.0 - lost_b / (n * day), 1e-12);
}

TEST(GoodputSim, SingleFailureDecoupledTouchesOnlyItsLearner) {
  // M = 2 learners of 5 slices (1280 chips): only learner 0 pauses; global training never stops.
  const double n = 2560, half = 1280, s = 256;
  const double lost = half * (18.0 + 14.0 + 0.5) + s * (100.0 - 18.0);
  const auto r = simulate_single_failure(small(), strategy::decoupled_diloco, 0, 1000.0, 100.0);
  EXPECT_NEAR(r.goodput, 1.0 - lost / (n * day), 1e-12);
  EXPECT_DOUBLE_EQ(r.uptime, 1.0);
  EXPECT_EQ(r.stale_rejections, 0u);  // an 18 s pause is far below 4 versions × 24 s
}

TEST(GoodputSim, FailureRateMatchesChipsOverMtbi) {
  // No pauses, so every chip is under load all the time: E[failures] = N · T / MTBI.
  sim_config c = small();
  c.mtbi_days = 100.0;
  c.days = 10.0;
  c.downscale_pause_s = 0;
  c.upscale_pause_s = 0;
  c.recovery_mean_s = 1.0;
  const int seeds = 40;
  double failures = 0, loaded = 0;
  for (int k = 0; k < seeds; ++k) {
    const auto r = simulate(c, strategy::elastic_dp, 1000 + k);
    failures += static_cast<double>(r.failures);
    loaded += r.loaded_chip_s;
  }
  const double expected = seeds * 2560.0 * 10.0 / 100.0;  // 10,240
  EXPECT_NEAR(failures, expected, 4 * std::sqrt(expected));
  // And against the chip-time actually under load (slices down 1 s each are excluded).
  const double from_load = loaded / (100.0 * day);
  EXPECT_NEAR(failures, from_load, 4 * std::sqrt(from_load));
  EXPECT_LT(from_load, expected);
}

TEST(GoodputSim, IdleFailuresStrikeStalledChipsAtTheSameRate) {
  // Non-elastic DP with long stalls (100 s recovery + 400 s restart, ~1 failure per 340 s of
  // exposure): with idle_failures every up chip is exposed all the time, so failures ≈ (up
  // chip-time) / MTBI and up chip-time ≈ N · T; without it only stepping chips are (a fraction).
  sim_config c = small();
  c.mtbi_days = 10.0;
  c.days = 10.0;
  c.restart_s = 400.0;
  const int seeds = 20;
  double failures = 0, exposed = 0, loaded_only = 0;
  for (int k = 0; k < seeds; ++k) {
    c.idle_failures = true;
    const auto r = simulate(c, strategy::data_parallel, 2000 + k);
    failures += static_cast<double>(r.failures);
    exposed += r.loaded_chip_s;
    c.idle_failures = false;
    loaded_only += simulate(c, strategy::data_parallel, 2000 + k).loaded_chip_s;
  }
  const double from_exposure = exposed / (10.0 * day);
  EXPECT_NEAR(failures, from_exposure, 4 * std::sqrt(from_exposure));
  const double all_chip_s = seeds * 2560.0 * 10.0 * day;
  EXPECT_GT(exposed, 0.95 * all_chip_s);  // a down slice is 1 of 10, down ~100 s per failure
  EXPECT_LT(loaded_only, 0.5 * all_chip_s);  // stalled ~500 s per ~340 s of stepping
}

TEST(GoodputSim, SameSeedSameOutput) {
  sim_config c = small();
  c.mtbi_days = 30.0;
  c.chip_speed_cv = 0.05;
  c.recovery = recovery_dist::lognormal;
  for (auto s : {strategy::data_parallel, strategy::elastic_dp, strategy::diloco,
                 strategy::decoupled_diloco}) {
    const auto a = simulate(c, s, 42), b = simulate(c, s, 42), d = simulate(c, s, 43);
    EXPECT_EQ(a.goodput, b.goodput) << to_string(s);
    EXPECT_EQ(a.uptime, b.uptime) << to_string(s);
    EXPECT_EQ(a.failures, b.failures) << to_string(s);
    EXPECT_EQ(a.events, b.events) << to_string(s);
    EXPECT_NE(a.goodput, d.goodput) << to_string(s);
    EXPECT_GT(a.failures, 0u);
  }
}

TEST(GoodputSim, GraceWindowComesFromThePolicyCode) {
  sim_config c = small();
  c.outer_sync_s = 0.5;
  const auto r = simulate(c, strategy::decoupled_diloco, 1);
  policy::grace_config g;
  g.gamma = c.grace_gamma;
  const double expected = policy::compute_grace(g, c.overlap_tau, c.step_s, 0.0, 0.5).grace_s;
  EXPECT_NEAR(expected, 0.8 * (2.0 * 1.0 - 0.5), 1e-12);  // 1.2 s
  EXPECT_DOUBLE_EQ(r.grace_s, expected);
}

TEST(GoodputSim, BadParametersAreRefusedClearly) {
  struct row {
    sim_config c;
    strategy s;
    const char* needle;
  };
  sim_config neg = small();
  neg.mtbi_days = -1;
  sim_config zero = small();
  zero.chips = 0;
  sim_config many = small();
  many.learners = 11;  // 10 slices
  sim_config slice0 = small();
  slice0.slice_chips = 0;
  const row rows[] = {
      {neg, strategy::data_parallel, "--mtbi-days must be > 0, got -1"},
      {zero, strategy::elastic_dp, "--chips must be > 0"},
      {many, strategy::decoupled_diloco, "--learners (11) must not exceed the number of slices (10"},
      {slice0, strategy::diloco, "--slice-chips must be > 0"},
  };
  for (const auto& r : rows) {
    const std::string msg = validate(r.c, r.s);
    EXPECT_NE(msg.find(r.needle), std::string::npos) << msg;
    EXPECT_THROW(simulate(r.c, r.s, 1), std::invalid_argument);
  }
  EXPECT_EQ(validate(many, strategy::data_parallel), "");  // M is ignored by data-parallel
}

}  // namespace
}  // namespace dd::goodput
