// tests/actors/cluster_sim_test.cpp — the whole cluster (health monitor, owners, learners,
// supervisors, evaluator) on CAF's test coordinator in logical time, with a tiny GPT on Tiny
// Shakespeare: scripted faults fire and are recorded; seeded random kills, slowdowns, dropped
// and delayed pushes and an owner kill leave the invariants intact (versions only increase, no
// push merged twice, weights sum to 1, no merge below quorum, every respawned learner catches up
// and contributes again); the same seed gives the same digest of the final global model;
// eval.every_steps evaluates at each multiple of the global step.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "actors/nodes/job.hpp"
#include "actors/nodes/job_runner.hpp"
#include "runtime/rng.hpp"
#include "tests/actors/test_support.hpp"
#include "tests/support/invariants.hpp"

namespace dd::actors {
namespace {

config::experiment tiny_experiment(const std::string& name) {
  return test::tiny_experiment(name, 4);
}

struct sim_outcome {
  run_result result;
  std::vector<nlohmann::json> events;
  std::vector<fired_fault> fired;
  size_t scheduled = 0;
};

/// An actor that keeps the job's answer (finished_atom, run_result) in `cell`, then quits. (The
/// cell is passed as an argument, not captured: CAF 0.17 spawns a function actor without
/// arguments through a null shared_ptr<tuple<>>, which UBSan reports.)
caf::actor result_sink(caf::actor_system& sys, std::shared_ptr<run_result> cell) {
  return sys.spawn(
      [](caf::event_based_actor* self, std::shared_ptr<run_result> out) -> caf::behavior {
        return {[=](atoms::finished_atom, run_result& r) {
          *out = std::move(r);
          self->quit();
        }};
      },
      std::move(cell));
}

/// Runs one experiment to completion on the test coordinator (logical time).
sim_outcome simulate(const config::experiment& e, std::vector<fault_spec> faults,
                     const std::string& dir) {
  dd::test::coordinator env;
  run_options ro;
  ro.run_dir = dir;
  ro.simulated_time = true;
  ro.sim_step_s = 0.1;
  ro.faults = std::move(faults);
  ro.keep_events = true;
  ro.write_events = false;
  ro.progress_every_s = 0;
  auto setup = make_job_setup(e, ro);
  auto result = std::make_shared<run_result>();
  spawn_job(*env.sys, setup, result_sink(*env.sys, result));
  size_t guard = 0;
  while (!result->finished && guard++ < 5'000'000) {
    if (env.sched->try_run_once()) continue;
    if (!env.sched->trigger_timeout()) break;
  }
  env.run();  // let the shutdown exits reach every actor before the system goes away
  sim_outcome out;
  out.result = *result;
  out.events = setup->log->events();
  out.fired = setup->faults->fired();
  out.scheduled = setup->faults->scheduled().size();
  setup->log->set_clock([] { return 0.0; });  // the manual clock goes away with env
  return out;
}

/// The invariants of ALGORITHM.md checked over a run's events (tests/support/invariants.hpp:
/// versions only increase, no push merged twice, weights sum to 1, no merge below quorum), and
/// that every learner reaches its budget and every respawned incarnation contributes again.
void check_invariants(const sim_outcome& o, const config::experiment& e) {
  ASSERT_TRUE(o.result.finished);
  const auto checker = dd::test::expect_merge_invariants(o.events, e);
  const size_t merges = checker.merges();
  auto contributions = checker.contributions_by_incarnation();  // (learner, incarnation) → merges
  EXPECT_GT(merges, 0u);
  // Every learner reaches the end of its budget; every respawned incarnation re-syncs, reaches the
  // end and contributes again.
  std::map<int, uint64_t> final_step;
  for (const auto& ev : o.events) {
    if (ev["event"] == "learner_done") final_step[ev["learner"].get<int>()] = ev["step"];
    if (ev["event"] == "rejoin") {
      const int id = ev["learner"];
      const uint64_t inc = ev["incarnation"];
      bool synced = false;
      for (const auto& s : o.events)
        if (s["event"] == "learner_synced" && s["learner"] == id && s["incarnation"] == inc)
          synced = true;
      EXPECT_TRUE(synced) << "learner " << id << " incarnation " << inc << " never re-synced";
      const uint64_t resumed = ev["resume_step"];
      bool killed_again = false;  // a later incarnation means this one was killed in its turn
      for (const auto& s : o.events)
        if (s["event"] == "rejoin" && s["learner"] == id && s["incarnation"] > inc)
          killed_again = true;
      if (!killed_again && resumed + 2 * static_cast<uint64_t>(e.sync.interval) <
                               static_cast<uint64_t>(e.budget.steps)) {
        EXPECT_GT((contributions[{id, inc}]), 0)
            << "learner " << id << " incarnation " << inc << " never contributed again";
      }
    }
  }
  for (int i = 0; i < e.learners.count; ++i)
    EXPECT_EQ(final_step[i], static_cast<uint64_t>(e.budget.steps)) << "learner " << i;
}

TEST(cluster_sim, scripted_faults_fire_and_the_killed_learner_comes_back) {
  auto e = tiny_experiment("sim_scripted");
  std::vector<fault_spec> faults(3);
  faults[0].what = fault_kind::kill_learner;
  faults[0].target = 2;
  faults[0].at_step = 19;  // 40% of 48
  faults[1].what = fault_kind::slow_learner;
  faults[1].target = 1;
  faults[1].at_step = 5;
  faults[1].factor = 1.5;
  faults[2].what = fault_kind::drop_push;
  faults[2].target = 3;
  faults[2].at_step = 10;
  auto o = simulate(e, faults, ::testing::TempDir() + "dd_sim_scripted");
  ASSERT_EQ(o.fired.size(), 3u);
  EXPECT_EQ(o.fired[0].spec.what, fault_kind::slow_learner);
  EXPECT_EQ(o.fired[0].step, 5u);
  EXPECT_EQ(o.fired[1].spec.what, fault_kind::drop_push);
  EXPECT_EQ(o.fired[2].spec.what, fault_kind::kill_learner);
  EXPECT_EQ(o.fired[2].step, 19u);
  EXPECT_EQ(o.result.summary["learner_restarts"], 1);
  EXPECT_DOUBLE_EQ(o.result.summary["uptime"].get<double>(), 1.0);  // K = 1: merges never stop
  bool rejoined = false;
  for (const auto& ev : o.events)
    if (ev["event"] == "rejoin" && ev["learner"] == 2 && ev["incarnation"] == 1) {
      rejoined = true;
      EXPECT_GE(ev["resume_step"].get<uint64_t>(), 18u);  // resumes (about) where it died
    }
  EXPECT_TRUE(rejoined);
  check_invariants(o, e);
  EXPECT_LT(o.result.final_val_loss, 5.0);  // ln 256 ≈ 5.55 untrained
}

TEST(cluster_sim, a_time_keyed_owner_kill_fires_on_time_not_at_the_next_merge) {
  auto e = tiny_experiment("sim_owner_at_time");
  fault_spec kill;
  kill.what = fault_kind::kill_owner;
  kill.target = 1;
  kill.at_seconds = 1.234;  // between two merges of fragment 1 (they are ~0.4 s apart)
  auto o = simulate(e, {kill}, ::testing::TempDir() + "dd_sim_owner_at_time");
  ASSERT_EQ(o.fired.size(), 1u);
  EXPECT_GE(o.fired[0].at_s, 1.234);
  EXPECT_LT(o.fired[0].at_s, 1.234 + 0.01);
  bool respawned = false;
  for (const auto& ev : o.events) {
    if (ev["event"] == "fault") {
      EXPECT_TRUE(ev.contains("at_version")) << ev.dump();  // an owner's fault names its version
      EXPECT_FALSE(ev.contains("at_step")) << ev.dump();
    }
    if (ev["event"] == "respawn" && ev["kind"] == "owner" && ev["id"] == 1) respawned = true;
  }
  EXPECT_TRUE(respawned);
  check_invariants(o, e);
}

TEST(cluster_sim, every_learners_final_push_of_each_fragment_is_merged_before_it_leaves) {
  // A learner's last push comes at its last step; leaving at once would drop it from the
  // owners' pending sets (a learner that left is no longer live), losing that work and, with
  // K = M, leaving the last merges to the learners still running.
  for (const bool synchronous : {false, true}) {
    auto e = tiny_experiment(synchronous ? "sim_drain_sync" : "sim_drain");
    e.learners.speed = {1.0, 1.0, 1.2, 1.5};
    if (synchronous) e.sync.min_quorum.count = 4;
    auto o = simulate(e, {}, ::testing::TempDir() + e.name);
    ASSERT_TRUE(o.result.finished);
    std::map<std::pair<int, int>, uint64_t> last_accepted;  // (learner, fragment) → transfer
    std::set<std::tuple<int, int, uint64_t>> merged;
    for (const auto& ev : o.events) {
      if (ev["event"] == "push" && ev["accepted"] == true) {
        auto& t = last_accepted[{ev["learner"].get<int>(), ev["fragment"].get<int>()}];
        t = std::max(t, ev["transfer_id"].get<uint64_t>());
      }
      if (ev["event"] == "merge") {
        if (synchronous) {
          EXPECT_EQ(ev["contributors"].size(), 4u) << ev.dump();
        }
        for (const auto& c : ev["contributors"])
          merged.insert({c["learner"].get<int>(), ev["fragment"].get<int>(),
                         c["transfer_id"].get<uint64_t>()});
      }
    }
    ASSERT_EQ(last_accepted.size(), 8u);  // 4 learners × 2 fragments
    for (const auto& [key, transfer] : last_accepted)
      EXPECT_EQ(merged.count({key.first, key.second, transfer}), 1u)
          << (synchronous ? "K = M" : "K = 1") << ": learner " << key.first << " fragment "
          << key.second << " transfer " << transfer << " never merged";
    check_invariants(o, e);
  }
}

/// Random faults drawn from one seed: kills, slowdowns, dropped and delayed pushes, an owner kill.
std::vector<fault_spec> random_faults(uint64_t seed, const config::experiment& e) {
  rng r(seed);
  std::vector<fault_spec> out;
  const uint64_t steps = static_cast<uint64_t>(e.budget.steps);
  for (int k = 0; k < 2; ++k) {
    fault_spec f;
    f.what = fault_kind::kill_learner;
    f.target = static_cast<int32_t>(r.below(4));
    f.at_step = 4 + r.below(steps / 2);
    out.push_back(f);
  }
  fault_spec slow;
  slow.what = fault_kind::slow_learner;
  slow.target = static_cast<int32_t>(r.below(4));
  slow.at_step = 1 + r.below(10);
  slow.factor = 1.0 + 0.5 * r.uniform();
  out.push_back(slow);
  for (int k = 0; k < 3; ++k) {
    fault_spec f;
    f.what = k == 2 ? fault_kind::delay_push : fault_kind::drop_push;
    f.target = static_cast<int32_t>(r.below(4));
    f.at_step = 2 + r.below(steps / 2);
    f.delay_s = 0.3;
    out.push_back(f);
  }
  fault_spec owner;
  owner.what = fault_kind::kill_owner;
  owner.target = static_cast<int32_t>(r.below(2));
  owner.at_step = 2 + r.below(3);  // the owner's version
  out.push_back(owner);
  return out;
}

TEST(cluster_sim, random_faults_keep_the_invariants_and_the_same_seed_gives_the_same_digest) {
  auto e = tiny_experiment("sim_random");
  e.learners.backend = config::backend_kind::reference;
  const uint64_t seed = 20260604;
  auto first = simulate(e, random_faults(seed, e), ::testing::TempDir() + "dd_sim_random_a");
  check_invariants(first, e);
  EXPECT_EQ(first.fired.size(), first.scheduled);  // every scripted fault fired
  EXPECT_GE(first.result.summary["learner_restarts"].get<int>(), 1);
  auto second = simulate(e, random_faults(seed, e), ::testing::TempDir() + "dd_sim_random_b");
  check_invariants(second, e);
  EXPECT_NE(first.result.digest, 0u);
  EXPECT_EQ(first.result.digest, second.result.digest);
  EXPECT_EQ(first.result.summary["merges"], second.result.summary["merges"]);
  EXPECT_EQ(first.result.final_val_loss, second.result.final_val_loss);
  // Pinned: the same seed gives this digest, merge count and final loss. A commit that changes
  // message order or a policy changes these constants and says why. The run uses the reference
  // backend (learners and evaluator): the CPU backend's OpenBLAS picks its sgemm kernel per CPU
  // model, which would change these numbers from one machine to the next.
  EXPECT_EQ(first.result.digest, 7114178066034565378ULL);
  EXPECT_EQ(first.result.summary["merges"].get<uint64_t>(), 38u);
  EXPECT_DOUBLE_EQ(first.result.final_val_loss, 3.9530711267143488);
  // The tolerance that shows the new constants follow from the rule, not from another change:
  // under the mean (the constants pinned before, 37 merges and 3.9545745234936476) the same seed
  // gave a run within one merge and 0.002 nats of this one.
  EXPECT_NEAR(static_cast<double>(first.result.summary["merges"].get<uint64_t>()), 37.0, 1.0);
  EXPECT_NEAR(first.result.final_val_loss, 3.9545745234936476, 0.002);
}

// Seeds of the sweep below: 50 in the normal tree, 5 in the sanitizer tree (tests/actors/
// CMakeLists.txt); the environment variable DD_SIM_SEEDS overrides the count.
#ifndef DD_SIM_SWEEP_SEEDS
#define DD_SIM_SWEEP_SEEDS 50
#endif

TEST(cluster_sim, random_faults_keep_the_invariants_across_a_sweep_of_seeds) {
  // The faults of random_faults() drawn from each seed in turn, K = 1 and K = 2 alternately (so
  // the quorum check meets merges that wait for a second learner); every invariant after each
  // run. The seed is printed first: a failure reproduces with that seed alone.
  int seeds = DD_SIM_SWEEP_SEEDS;
  if (const char* env = std::getenv("DD_SIM_SEEDS")) seeds = std::atoi(env);
  ASSERT_GT(seeds, 0);
  const uint64_t first_seed = 20261206;
  size_t restarts = 0, merges = 0;
  for (int i = 0; i < seeds; ++i) {
    const uint64_t seed = first_seed + static_cast<uint64_t>(i);
    auto e = tiny_experiment("sim_sweep");
    e.learners.backend = config::backend_kind::reference;
    e.sync.min_quorum.count = static_cast<size_t>(1 + i % 2);
    std::printf("seed %llu (K = %zu)\n", static_cast<unsigned long long>(seed),
                e.sync.min_quorum.count);
    std::fflush(stdout);
    SCOPED_TRACE("seed " + std::to_string(seed));
    auto o = simulate(e, random_faults(seed, e),
                      ::testing::TempDir() + "dd_sim_sweep_" + std::to_string(seed));
    check_invariants(o, e);
    restarts += o.result.summary["learner_restarts"].get<size_t>();
    merges += o.result.summary["merges"].get<size_t>();
    if (::testing::Test::HasFailure()) break;  // the seed above names the run that failed
  }
  std::printf("%d seeds: %zu merges, %zu learner restarts\n", seeds, merges, restarts);
  EXPECT_GE(restarts, static_cast<size_t>(seeds));  // the kills fired
}

TEST(cluster_sim, stale_pushes_are_rejected_and_the_learner_resynchronizes) {
  // max_staleness 0 with delayed pushes: a push whose base is older than the owner's version is
  // refused as stale; the owner sends the current value and the learner's next push of that
  // fragment starts from it.
  auto e = tiny_experiment("sim_stale");
  e.outer.max_staleness = 0;
  std::vector<fault_spec> faults;
  for (int k = 0; k < 4; ++k) {
    fault_spec f;
    f.what = fault_kind::delay_push;
    f.target = k % 2;
    f.at_step = static_cast<uint64_t>(4 + 8 * k);
    f.delay_s = 0.25;  // after the others' merge (grace ≈ 0.16 s), before its next push (0.4 s)
    faults.push_back(f);
  }
  auto o = simulate(e, faults, ::testing::TempDir() + "dd_sim_stale");
  check_invariants(o, e);
  size_t stale = 0;
  for (size_t i = 0; i < o.events.size(); ++i) {
    const auto& ev = o.events[i];
    if (ev["event"] != "push" || ev.value("reason", "") != "stale") continue;
    ++stale;
    const uint64_t current = ev["version"];
    // The learner's next accepted push of this fragment is based on the value it was sent.
    for (size_t j = i + 1; j < o.events.size(); ++j) {
      const auto& nx = o.events[j];
      if (nx["event"] == "push" && nx["learner"] == ev["learner"] &&
          nx["fragment"] == ev["fragment"] && nx["accepted"] == true) {
        EXPECT_GE(nx["base_version"].get<uint64_t>(), current) << nx.dump();
        break;
      }
    }
  }
  EXPECT_GE(stale, 1u);
}

/// The "step" of every "eval" event before the job's "stop" (the periodic evaluations).
std::vector<double> periodic_eval_steps(const sim_outcome& o) {
  std::vector<double> steps;
  for (const auto& ev : o.events) {
    if (ev["event"] == "stop") break;
    if (ev["event"] == "eval") steps.push_back(ev["step"].get<double>());
  }
  return steps;
}

TEST(cluster_sim, eval_every_steps_evaluates_each_time_the_global_step_crosses_a_multiple) {
  // Global step = mean of the learners' own step counters. 48 steps, every 8: evaluations at
  // 8, 16, 24, 32 and 40 (48 is the end of the run: the final evaluation).
  auto e = tiny_experiment("sim_eval_steps");
  e.eval.every_seconds = 0;
  e.eval.every_steps = 8;
  auto o = simulate(e, {}, ::testing::TempDir() + "dd_sim_eval_steps");
  ASSERT_TRUE(o.result.finished);
  const auto steps = periodic_eval_steps(o);
  ASSERT_GE(steps.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_GE(steps[i], 8.0 * static_cast<double>(i + 1)) << i;
    EXPECT_LT(steps[i], 8.0 * static_cast<double>(i + 2)) << i;  // no multiple skipped
  }
  EXPECT_LE(steps.size(), 6u);

  // Together with every_seconds: both clocks trigger (whichever fires first).
  e.eval.every_seconds = 1.0;
  auto both = simulate(e, {}, ::testing::TempDir() + "dd_sim_eval_both");
  ASSERT_TRUE(both.result.finished);
  EXPECT_GT(periodic_eval_steps(both).size(), steps.size());
}

/// Mean contributors per merge over the merges of a run that had a grace window (the owners
/// know the learners' step time only after the first heartbeats; before, grace is 0).
double mean_contributors_with_grace(const sim_outcome& o, size_t* with_slowest = nullptr,
                                    size_t* merges_out = nullptr) {
  size_t merges = 0, contributors = 0, slowest = 0;
  for (const auto& ev : o.events) {
    if (ev["event"] != "merge" || !(ev["grace_s"].get<double>() > 0)) continue;
    ++merges;
    contributors += ev["contributors"].size();
    for (const auto& c : ev["contributors"])
      if (c["learner"] == 3) ++slowest;
  }
  if (with_slowest != nullptr) *with_slowest = slowest;
  if (merges_out != nullptr) *merges_out = merges;
  return merges == 0 ? 0.0 : static_cast<double>(contributors) / static_cast<double>(merges);
}

TEST(cluster_sim, global_push_clock_gathers_learners_of_different_speeds_into_one_merge) {
  // Learners 1×, 1×, 1.2×, 1.5× slower, K = 1 with the adaptive grace window, equal tokens.
  // On their own step counters the slow learners push each fragment later and later, so merges
  // split; on the global mean step (sync.push_clock = global, the default when K < M) every
  // learner pushes a fragment when the mean step crosses its turn and one grace window gathers
  // them.
  auto e = tiny_experiment("sim_push_clock");
  e.learners.speed = {1.0, 1.0, 1.2, 1.5};
  e.budget.kind = config::budget_kind::tokens;
  e.budget.tokens = 4 * 48 * e.tokens_per_step();
  ASSERT_EQ(e.push_clock(), config::schedule_clock::global);  // K = 1 < M: the default
  auto global = simulate(e, {}, ::testing::TempDir() + "dd_sim_push_clock_global");
  e.sync.push_clock = config::schedule_clock::learner;
  auto own = simulate(e, {}, ::testing::TempDir() + "dd_sim_push_clock_learner");
  for (const auto* o : {&own, &global}) {
    ASSERT_TRUE(o->result.finished);
    for (const auto& ev : o->events) {
      if (ev["event"] != "merge") continue;
      double sum = 0;
      for (const auto& c : ev["contributors"]) sum += c["weight"].get<double>();
      EXPECT_NEAR(sum, 1.0, 1e-9) << ev.dump();
    }
  }
  size_t with_slowest = 0, merges = 0;
  const double c_global = mean_contributors_with_grace(global, &with_slowest, &merges);
  const double c_own = mean_contributors_with_grace(own);
  EXPECT_GE(merges, 20u);
  EXPECT_GE(c_global, 3.5) << "learner clock: " << c_own;
  EXPECT_GT(c_global, c_own + 0.5);
  // The slowest learner is in (nearly) every merge, not left to merges of its own.
  EXPECT_GE(static_cast<double>(with_slowest), 0.9 * static_cast<double>(merges));
}

/// Merges of `fragment`-any that the learners in `fast` contributed to, per (simulated) second of
/// the run, and the mean grace window of those merges.
std::pair<double, double> fast_merge_rate(const sim_outcome& o, const std::set<int>& fast) {
  size_t merges = 0;
  double grace = 0, end_t = 0;
  for (const auto& ev : o.events) {
    end_t = std::max(end_t, ev.value("t", 0.0));
    if (ev["event"] != "merge") continue;
    bool with_fast = false;
    for (const auto& c : ev["contributors"]) with_fast |= fast.count(c["learner"].get<int>()) > 0;
    if (!with_fast) continue;
    ++merges;
    grace += ev["grace_s"].get<double>();
  }
  return {end_t > 0 ? static_cast<double>(merges) / end_t : 0.0,
          merges > 0 ? grace / static_cast<double>(merges) : 0.0};
}

// One learner 60× slower than the three others sized every grace window from the
// mean step time (about 13× longer) and halved the fast learners' merge rate. The window follows
// the live learners' lower median step time: with the straggler it stays what it is without it.
// The fast learners' merge rate is printed for docs/results.md (logical time: the same numbers
// on every machine); it still falls with the straggler, because the global push clock advances
// by the mean step of all live learners (not fixed here).
TEST(cluster_sim, one_straggler_does_not_stretch_the_grace_window) {
  auto e = tiny_experiment("sim_straggler");
  e.budget.kind = config::budget_kind::seconds;
  e.budget.seconds = 20;
  e.eval.every_seconds = 10;
  const auto none = simulate(e, {}, ::testing::TempDir() + "dd_sim_straggler_none");
  e.learners.speed = {1.0, 1.0, 1.0, 60.0};
  const auto one = simulate(e, {}, ::testing::TempDir() + "dd_sim_straggler_one");
  ASSERT_TRUE(none.result.finished);
  ASSERT_TRUE(one.result.finished);
  const auto [rate_none, grace_none] = fast_merge_rate(none, {0, 1, 2});
  const auto [rate_one, grace_one] = fast_merge_rate(one, {0, 1, 2});
  std::printf(
      "fast learners' merges per second: %.3f without a straggler (mean grace %.3f s), "
      "%.3f with one 60x slower learner (mean grace %.3f s): ratio %.2f\n",
      rate_none, grace_none, rate_one, grace_one, rate_one / rate_none);
  EXPECT_GT(rate_none, 1.0);
  EXPECT_GT(rate_one, 0.0);
  EXPECT_LE(grace_one, 1.2 * grace_none) << "the straggler stretched the grace window";
}

}  // namespace
}  // namespace dd::actors

namespace dd::actors {
namespace {

TEST(cluster_sim, a_push_replaced_or_dropped_in_the_queue_is_not_waited_for_by_the_drain) {
  // max_inflight = 1, four fragments (one due per step), and learner 0's push at
  // step 45 held up in transit for 0.35 s, so its only slot stays busy over its last steps: the
  // pushes of steps 46-48 queue up and the older ones are dropped from the queue unsent. A
  // drain that waited for those too would make learner 0 sit out the whole drain timeout (5 s
  // against 4.8 s of training) and the run's goodput fall to about 0.5.
  auto e = tiny_experiment("sim_queue_drain");
  e.sync.fragments = 4;
  e.sync.interval = 4;
  e.sync.max_inflight = 1;
  fault_spec held;
  held.what = fault_kind::delay_push;
  held.target = 0;
  held.at_step = 45;
  held.delay_s = 0.35;
  auto o = simulate(e, {held}, ::testing::TempDir() + e.name);
  ASSERT_TRUE(o.result.finished);
  ASSERT_EQ(o.fired.size(), 1u);
  std::map<int, double> last_push_t, done_t;
  for (const auto& ev : o.events) {
    if (ev["event"] == "push") last_push_t[ev["learner"].get<int>()] = ev["t"].get<double>();
    if (ev["event"] == "learner_done") done_t[ev["learner"].get<int>()] = ev["t"].get<double>();
  }
  ASSERT_EQ(done_t.size(), 4u);
  for (const auto& [id, t] : done_t) {
    ASSERT_EQ(last_push_t.count(id), 1u);
    EXPECT_LT(t - last_push_t[id], 1.0) << "learner " << id << " waited out its drain";
  }
  EXPECT_GT(o.result.summary["goodput"].get<double>(), 0.9) << o.result.summary.dump();
  ::testing::Test::RecordProperty("goodput",
                                  std::to_string(o.result.summary["goodput"].get<double>()));
  check_invariants(o, e);
}

TEST(cluster_sim, a_push_damaged_in_transit_is_refused_and_sent_again) {
  auto e = tiny_experiment("sim_corrupt_push");
  std::vector<fault_spec> faults(2);
  faults[0].what = fault_kind::corrupt_push;
  faults[0].target = 1;
  faults[0].at_step = 8;
  faults[1].what = fault_kind::corrupt_push;  // the final push, during the drain
  faults[1].target = 2;
  faults[1].at_step = static_cast<uint64_t>(e.budget.steps);
  auto o = simulate(e, faults, ::testing::TempDir() + e.name);
  ASSERT_EQ(o.fired.size(), 2u);
  EXPECT_EQ(o.result.summary["chunks_refused"], 2) << o.result.summary.dump();
  std::vector<std::pair<int, uint64_t>> resent;
  for (const auto& ev : o.events)
    if (ev["event"] == "push_resent")
      resent.emplace_back(ev["learner"].get<int>(), ev["transfer_id"].get<uint64_t>());
  ASSERT_EQ(resent.size(), 2u);
  for (const auto& [learner, transfer] : resent) {
    bool refused = false, accepted = false, merged = false;
    for (const auto& ev : o.events) {
      if (ev["event"] == "chunk_refused" && ev["learner"] == learner &&
          ev["transfer_id"] == transfer)
        refused = true;
      if (ev["event"] == "push" && ev["learner"] == learner && ev["transfer_id"] == transfer &&
          ev["accepted"] == true)
        accepted = true;
      if (ev["event"] == "merge")
        for (const auto& c : ev["contributors"])
          if (c["learner"] == learner && c["transfer_id"] == transfer) merged = true;
    }
    EXPECT_TRUE(refused) << "learner " << learner << " transfer " << transfer;
    EXPECT_TRUE(accepted) << "the re-sent copy of learner " << learner << "'s transfer " << transfer
                          << " was not accepted";
    EXPECT_TRUE(merged) << "learner " << learner << " transfer " << transfer << " never merged";
  }
  check_invariants(o, e);
}

}  // namespace
}  // namespace dd::actors
