// tests/sim/goodput_sim_test.cpp — analytic checks of the goodput simulator (tools/goodput).
//
// Each expected number is derived by hand from the model in docs/goodput.md; tolerances are
// floating-point round-off (1e-9 relative) for deterministic cases and 4 standard deviations of
// a Poisson count for the statistical one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
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
  c.restart_cold_s = 12.0;  // one relaunch cost (the warm/cold tests set their own)
  c.restart_warm_window_s = 0.0;
  c.checkpoint_interval_s = 0.0;
  c.downscale_pause_s = 18.0;
  c.upscale_pause_s = 14.0;
  c.upscale_batch_s = 0.0;
  c.step_s = 1.0;
  c.outer_sync_s = 2.0;
  c.sync_interval = 24;
  return c;
}

/// small() failing: each chip once in `mtbi_days` on average, over `days` simulated days.
sim_config small_failing(double mtbi_days, double days) {
  sim_config c = small();
  c.mtbi_days = mtbi_days;
  c.days = days;
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

TEST(GoodputSim, SecondRelaunchIsWarmWithinTheWindowAndColdAfter) {
  // Warm relaunch 5 s, cold 35 s, window 45 s, recovery 100 s. Failure 1 at t = 1000 s: no
  // relaunch before it, so cold; the job resumes at 1000 + 100 + 35 = 1135 s. Failure 2 (another
  // slice) `gap` seconds after 1135 s, back 100 s (or `rec2`) later. Each failure also loses
  // half a step of work.
  sim_config c = small();
  c.restart_s = 5.0;
  c.restart_cold_s = 35.0;
  c.restart_warm_window_s = 45.0;
  auto run = [&](double gap, double rec2) {
    return simulate_scripted(c, strategy::data_parallel,
                             {{3, 1000.0, 100.0}, {5, 1135.0 + gap, rec2}});
  };
  struct expect {
    double gap, rec2, second_restart;
    std::uint64_t warm;
  };
  const expect cases[] = {
      {20.0, 100.0, 5.0, 1},                           // within W: exactly the warm cost
      {44.0, 100.0, 5.0, 1},  {45.0, 100.0, 35.0, 0},  // W is exclusive: exactly W after is cold
      {60.0, 100.0, 35.0, 0},                          // after W: exactly the cold cost
      {20.0, 300.0, 5.0, 1},  // decided at the failure: a long wait for the slice stays warm
  };
  for (const auto& e : cases) {
    const auto r = run(e.gap, e.rec2);
    const double stall = (100.0 + 35.0) + (e.rec2 + e.second_restart);
    EXPECT_EQ(r.failures, 2u) << e.gap;
    EXPECT_EQ(r.warm_restarts, e.warm) << e.gap;
    EXPECT_EQ(r.cold_restarts, 2u - e.warm) << e.gap;
    EXPECT_NEAR(r.uptime, 1.0 - stall / day, 1e-12) << e.gap;
    EXPECT_NEAR(r.goodput, 1.0 - (stall + 2 * 0.5) / day, 1e-12) << e.gap;
  }
  // Window 0: always cold, whatever the gap.
  c.restart_warm_window_s = 0.0;
  const auto r0 = run(1.0, 100.0);
  EXPECT_EQ(r0.warm_restarts, 0u);
  EXPECT_NEAR(r0.uptime, 1.0 - (135.0 + 135.0) / day, 1e-12);
}

TEST(GoodputSim, WarmWindowZeroReproducesTheSingleRestartModel) {
  // --restart-warm-window 0 with --restart-cold = --restart is the model before warm/cold
  // relaunches. Golden values: dd-goodput of that version, --strategies
  // data_parallel,decoupled_diloco --chips 2560 --learners 10 --mtbi-days 10 --days 10
  // --recovery-mean 100 --restart 12 --seeds 1 --seed 42 (decoupled_diloco with one slice per
  // learner: every failure is a learner respawn).
  sim_config c;
  c.chips = 2560;
  c.learners = 10;
  c.mtbi_days = 10.0;
  c.days = 10.0;
  c.recovery_mean_s = 100.0;
  c.restart_s = 12.0;
  c.restart_cold_s = 12.0;
  c.restart_warm_window_s = 0.0;
  const auto dp = simulate(c, strategy::data_parallel, 42);
  EXPECT_DOUBLE_EQ(dp.goodput, 0.7547093124489386);
  EXPECT_DOUBLE_EQ(dp.uptime, 0.7558232006038541);
  EXPECT_EQ(dp.failures, 1925u);
  EXPECT_EQ(dp.events, 5775u);
  EXPECT_EQ(dp.warm_restarts, 0u);
  EXPECT_EQ(dp.cold_restarts, 1925u);
  const auto dd = simulate(c, strategy::decoupled_diloco, 42);
  EXPECT_DOUBLE_EQ(dd.goodput, 0.967564951155727);
  EXPECT_DOUBLE_EQ(dd.uptime, 1.0);
  EXPECT_EQ(dd.failures, 2427u);
  EXPECT_EQ(dd.events, 7281u);
  EXPECT_EQ(dd.cold_restarts, 2427u);  // respawns are always cold

  // With window 0 every relaunch costs --restart-cold: --restart no longer matters.
  c.restart_cold_s = 35.0;
  const auto a = simulate(c, strategy::data_parallel, 42);
  c.restart_s = 0.0;
  const auto b = simulate(c, strategy::data_parallel, 42);
  EXPECT_EQ(a.goodput, b.goodput);
  EXPECT_EQ(a.events, b.events);
  EXPECT_LT(a.goodput, dp.goodput);
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

/// Summed over the runs of `c` under `s` with seeds `first_seed`, `first_seed` + 1, ... (`seeds` of
/// them): the failures and the chip-seconds under load.
struct seed_totals {
  double failures = 0;
  double loaded_chip_s = 0;
};
seed_totals over_seeds(const sim_config& c, strategy s, uint64_t first_seed, int seeds) {
  seed_totals t;
  for (int k = 0; k < seeds; ++k) {
    const auto r = simulate(c, s, first_seed + static_cast<uint64_t>(k));
    t.failures += static_cast<double>(r.failures);
    t.loaded_chip_s += r.loaded_chip_s;
  }
  return t;
}

TEST(GoodputSim, FailureRateMatchesChipsOverMtbi) {
  // No pauses, so every chip is under load all the time: E[failures] = N · T / MTBI.
  sim_config c = small_failing(100.0, 10.0);
  c.downscale_pause_s = 0;
  c.upscale_pause_s = 0;
  c.recovery_mean_s = 1.0;
  const int seeds = 40;
  const auto [failures, loaded] = over_seeds(c, strategy::elastic_dp, 1000, seeds);
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
  sim_config c = small_failing(10.0, 10.0);
  c.restart_s = 400.0;
  c.restart_cold_s = 400.0;
  const int seeds = 20;
  c.idle_failures = true;
  const auto [failures, exposed] = over_seeds(c, strategy::data_parallel, 2000, seeds);
  c.idle_failures = false;
  const double loaded_only = over_seeds(c, strategy::data_parallel, 2000, seeds).loaded_chip_s;
  const double from_exposure = exposed / (10.0 * day);
  EXPECT_NEAR(failures, from_exposure, 4 * std::sqrt(from_exposure));
  const double all_chip_s = seeds * 2560.0 * 10.0 * day;
  EXPECT_GT(exposed, 0.95 * all_chip_s);     // a down slice is 1 of 10, down ~100 s per failure
  EXPECT_LT(loaded_only, 0.5 * all_chip_s);  // stalled ~500 s per ~340 s of stepping
}

TEST(GoodputSim, SameSeedSameOutput) {
  sim_config c = small_failing(30.0, 1.0);
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

// The trace dd-goodput --trace writes is the run: replayed as scripted failures it gives the
// same goodput and uptime, and every failure names its learner (the group of its slice).
TEST(GoodputSim, ARecordedTraceReplaysToTheSameRun) {
  sim_config c = small();
  c.chips = 4;  // a real cluster's shape: one slice per learner
  c.slice_chips = 1;
  c.learners = 4;
  c.days = 600.0 / day;  // a 10-minute run
  c.mtbi_days = 240.0 / day;
  c.recovery = recovery_dist::lognormal;
  c.recovery_mean_s = 8.0;
  c.restart_s = 2.0;
  c.restart_cold_s = 2.0;
  c.step_s = 0.1;
  c.record_trace = true;
  const uint64_t seed = 20261206;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const auto r = simulate(c, strategy::decoupled_diloco, seed);
  ASSERT_EQ(r.trace.size(), r.failures);
  ASSERT_GE(r.failures, 4u);  // 4 chips × 600 s / 240 s = 10 expected
  std::vector<scripted_failure> script;
  for (size_t k = 0; k < r.trace.size(); ++k) {
    const auto& f = r.trace[k];
    EXPECT_EQ(f.group, f.slice) << "one slice per learner";
    EXPECT_LT(f.group, 4u);
    if (k > 0) {
      EXPECT_GE(f.at_s, r.trace[k - 1].at_s);
    }
    EXPECT_GT(f.recovery_s, 0.0);
    script.push_back({f.slice, f.at_s, f.recovery_s});
  }
  c.record_trace = false;
  const auto replay = simulate_scripted(c, strategy::decoupled_diloco, script);
  EXPECT_EQ(replay.failures, r.failures);
  EXPECT_NEAR(replay.goodput, r.goodput, 1e-12);
  EXPECT_NEAR(replay.uptime, r.uptime, 1e-12);
  EXPECT_LT(r.goodput, 1.0);
  // Without record_trace nothing is kept, and the run is the same.
  const auto quiet = simulate(c, strategy::decoupled_diloco, seed);
  EXPECT_TRUE(quiet.trace.empty());
  EXPECT_EQ(quiet.goodput, r.goodput);
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
  sim_config restart_neg = small();
  restart_neg.restart_s = -1;
  sim_config cold_neg = small();
  cold_neg.restart_cold_s = -2;
  sim_config cold_low = small();
  cold_low.restart_cold_s = 3;  // below the warm relaunch (12 s)
  sim_config window_neg = small();
  window_neg.restart_warm_window_s = -5;
  sim_config window_nan = small();
  window_nan.restart_warm_window_s = std::nan("");
  const row rows[] = {
      {neg, strategy::data_parallel, "--mtbi-days must be > 0, got -1"},
      {zero, strategy::elastic_dp, "--chips must be > 0"},
      {many, strategy::decoupled_diloco,
       "--learners (11) must not exceed the number of slices (10"},
      {slice0, strategy::diloco, "--slice-chips must be > 0"},
      {restart_neg, strategy::data_parallel, "--restart must be >= 0 s, got -1"},
      {cold_neg, strategy::data_parallel, "--restart-cold must be >= 0 s, got -2"},
      {cold_low, strategy::data_parallel, "--restart-cold must be >= --restart (12 s"},
      {window_neg, strategy::data_parallel, "--restart-warm-window must be >= 0 s, got -5"},
      {window_nan, strategy::diloco, "--restart-warm-window must be >= 0 s, got nan"},
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
