// tests/actors/main_job_e2e_test.cpp — the main job end to end on Tiny Shakespeare with the real
// scheduler (detached learners on their own threads) and a small model and budget: the run
// directory holds summary.json with exactly the documented keys and sane values and an
// events.jsonl of timestamped JSON objects; with learner 2 killed at 40% of the run, merges never
// stop (uptime 100% with K = 1), the learner is respawned and contributes again. A learner that
// exhausts its restart budget fails the run ("failed" in summary.json); data too small for the
// learners is refused before anything starts; a new run removes an earlier run's summary.
// What the clean run leaves behind: model.safetensors (the very model its final evaluation
// scored: same loss on the windows summary.json states, same digest) and learner_loss.csv (one
// row per learner step, with the lr).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "actors/nodes/experiment_views.hpp"
#include "actors/nodes/job_runner.hpp"
#include "actors/roles/evaluator.hpp"
#include "kernels/backend.hpp"
#include "messages/checkpoint_file.hpp"
#include "runtime/data.hpp"
#include "runtime/eval.hpp"
#include "runtime/fragments.hpp"
#include "runtime/model_file.hpp"
#include "runtime/run_dir_rules.hpp"
#include "tests/actors/test_support.hpp"
#include "tests/support/error_of.hpp"
#include "tests/support/expect_contains.hpp"
#include "tests/support/fresh_dir.hpp"

namespace dd::actors {
namespace {

config::experiment small_experiment(const std::string& name) {
  auto e = test::named_experiment(name, 11);
  test::set_tiny_gpt(e, 2, 32);
  test::set_small_training(e, 4, 4, 5, 8, 80);
  e.eval.every_seconds = 0;
  e.eval.batches = 4;
  e.checkpoint.every_versions = 5;
  // This tiny run lasts about a second: a respawn backoff short against it, as 0.5 s is against
  // a real run (otherwise the others finish while a killed learner waits to come back).
  e.restart.backoff_base_s = 0.01;
  return e;
}

/// Options of a run into `run_dir` without progress lines.
run_options quiet_run(const std::filesystem::path& run_dir) {
  run_options ro;
  ro.progress_every_s = 0;
  ro.run_dir = run_dir.string();
  return ro;
}

/// A chaos event of the experiment: `action` on learner or fragment `target` at fraction `at` of
/// the budget.
config::chaos_event fault_at_fraction(double at, config::fault_kind action, int target) {
  config::chaos_event ev;
  ev.trigger = config::chaos_trigger::at_fraction;
  ev.at = at;
  ev.action = action;
  ev.target = target;
  return ev;
}

nlohmann::json read_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

/// A folder `name` under the test's temporary directory, emptied.
std::filesystem::path fresh_dir(const std::string& name) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / name;
  std::filesystem::remove_all(dir);
  return dir;
}

/// Every line of an events.jsonl file, parsed.
std::vector<nlohmann::json> read_events(const std::filesystem::path& p) {
  std::vector<nlohmann::json> out;
  std::ifstream in(p);
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

/// Runs `e` with no restarts allowed and one kill (`what` of `target` at step/version `at`) into
/// a fresh `dir`.
run_result run_with_one_fatal_kill(config::experiment e, const std::filesystem::path& dir,
                                   fault_kind what, int32_t target, uint64_t at) {
  std::filesystem::remove_all(dir);
  run_options ro = quiet_run(dir);
  fault_spec kill;
  kill.what = what;
  kill.target = target;
  kill.at_step = at;
  ro.faults.push_back(kill);
  e.restart.max_restarts = 0;  // the first crash is the last
  return run_job(e, ro);
}

/// Expects `r` finished and failed with a reason containing `reason`, and summary.json in `dir`
/// saying the same; returns summary.json.
nlohmann::json expect_failed_run(const run_result& r, const std::filesystem::path& dir,
                                 const std::string& reason) {
  EXPECT_TRUE(r.finished);
  EXPECT_TRUE(r.failed);
  EXPECT_NE(r.failure_reason.find(reason), std::string::npos) << r.failure_reason;
  auto summary = read_json(dir / "summary.json");
  EXPECT_EQ(summary.value("failed", false), true);
  EXPECT_EQ(summary.value("failure_reason", std::string()), r.failure_reason);
  return summary;
}

TEST(main_job, writes_summary_and_events_and_survives_a_learner_kill) {
  const auto dir = fresh_dir("dd_main_job_e2e");
  run_options ro;
  ro.progress_every_s = 0;

  // Without faults.
  ro.run_dir = (dir / "clean").string();
  auto clean = run_job(small_experiment("clean"), ro);
  ASSERT_TRUE(clean.finished);
  auto summary = read_json(dir / "clean" / "summary.json");
  const std::set<std::string> keys = {"final_val_loss",
                                      "auth_refused",
                                      "tokens",
                                      "wall_seconds",
                                      "goodput",
                                      "effective_goodput",
                                      "uptime",
                                      "merges",
                                      "mean_contributors_per_merge",
                                      "learner_restarts",
                                      "bytes_pushed",
                                      "bytes_broadcast",
                                      "chunks_refused",
                                      "final_eval",
                                      "model_file",
                                      "envelopes_refused",
                                      "frames_refused",
                                      "pushes_implausible",
                                      "divergences",
                                      "final_val_bpb"};
  std::set<std::string> got;
  for (auto& [k, v] : summary.items()) got.insert(k);
  EXPECT_EQ(got, keys);
  EXPECT_EQ(summary["divergences"].get<int>(), 0) << "a clean run holds the owners' values";
  // Byte tokens: bits per byte = nats per token / ln 2.
  EXPECT_NEAR(summary["final_val_bpb"].get<double>(),
              summary["final_val_loss"].get<double>() / std::log(2.0), 1e-12);
  {
    // The windows: the evaluator's B, T and batches on the validation split of the data file.
    const auto fe = summary["final_eval"];
    EXPECT_EQ(fe["batch"], 4);
    EXPECT_EQ(fe["seq_len"], 32);
    EXPECT_EQ(fe["windows"], 16);  // the deprecated eval.batches: 4 batches × 4
    EXPECT_EQ(fe["split"], "validation");
    EXPECT_EQ(fe["backend"], "cpu");
    const auto data = text_dataset::from_file(fe["data_file"].get<std::string>(),
                                              fe["train_fraction"].get<double>());
    EXPECT_EQ(fe["validation_offset"].get<size_t>(), data.train().size());
    EXPECT_EQ(fe["validation_tokens"].get<size_t>(), data.validation().size());
    // The model file holds the model the final evaluation scored: evaluated again on the same
    // backend (cpu, 1 thread, as the evaluator) it gives the same loss to the last bit.
    EXPECT_EQ(summary["model_file"], "model.safetensors");
    auto be = kernels::make_backend("cpu", {1, 0});
    auto m = read_any_model_file((dir / "clean").string(), *be);
    EXPECT_EQ(m.metadata.at("model_kind"), "gpt");
    EXPECT_EQ(m.model->config().layers, 2);
    EXPECT_EQ(m.metadata.at("digest"), fmt::format("{:016x}", clean.digest));
    EXPECT_EQ(std::stod(m.metadata.at("val_loss")), summary["final_val_loss"].get<double>());
    EXPECT_EQ(evaluate_loss(*m.model, data.validation(), 4, 32, 4),
              summary["final_val_loss"].get<double>());
    const auto spec = eval_spec::from_json(nlohmann::json::parse(m.metadata.at("eval")));
    EXPECT_EQ(spec.batch, 4);
    EXPECT_EQ(spec.validation_tokens, data.validation().size());
  }
  {
    // One row per learner step: 4 learners × 80 steps, steps 1..80 in order, lr > 0.
    std::ifstream in(dir / "clean" / "learner_loss.csv");
    std::string line;
    std::getline(in, line);
    EXPECT_EQ(line, "wall_time,learner,incarnation,step,tokens,loss,lr");
    std::map<int, std::vector<int>> steps;
    while (std::getline(in, line)) {
      std::vector<std::string> f;
      std::stringstream ss(line);
      for (std::string x; std::getline(ss, x, ',');) f.push_back(x);
      ASSERT_EQ(f.size(), 7u) << line;
      steps[std::stoi(f[1])].push_back(std::stoi(f[3]));
      EXPECT_EQ(std::stoull(f[4]), std::stoull(f[3]) * 4u * 32u) << line;
      EXPECT_GT(std::stod(f[6]), 0.0) << line;
    }
    ASSERT_EQ(steps.size(), 4u);
    std::vector<int> want(80);
    for (int i = 0; i < 80; ++i) want[static_cast<size_t>(i)] = i + 1;
    for (const auto& [id, got_steps] : steps) EXPECT_EQ(got_steps, want) << "learner " << id;
  }
  // Every message of the run named the run and a current incarnation: none was refused.
  EXPECT_EQ(summary["envelopes_refused"].get<uint64_t>(), 0u);
  EXPECT_EQ(summary["tokens"].get<uint64_t>(), 4u * 80u * 4u * 32u);
  EXPECT_LT(summary["final_val_loss"].get<double>(), 4.5);  // ln 256 ≈ 5.55 untrained
  EXPECT_GT(summary["merges"].get<uint64_t>(), 10u);
  EXPECT_GT(summary["goodput"].get<double>(), 0.2);
  EXPECT_LE(summary["goodput"].get<double>(), 1.0);
  EXPECT_GT(summary["effective_goodput"].get<double>(), 0.0);
  EXPECT_GT(summary["uptime"].get<double>(), 0.95);
  EXPECT_EQ(summary["learner_restarts"].get<int>(), 0);
  EXPECT_GT(summary["bytes_pushed"].get<uint64_t>(), 0u);
  EXPECT_GT(summary["bytes_broadcast"].get<uint64_t>(), 0u);
  {
    std::set<std::string> kinds;
    for (const auto& ev : read_events(dir / "clean" / "events.jsonl")) {
      ASSERT_TRUE(ev.contains("t") && ev.contains("time") && ev.contains("event"));
      kinds.insert(ev["event"]);
    }
    for (const char* k : {"start", "push", "merge", "broadcast", "eval", "finished"})
      EXPECT_EQ(kinds.count(k), 1u) << k;
  }

  // Learner 2 killed at 40% of its steps.
  auto e = small_experiment("kill");
  config::chaos_event kill = fault_at_fraction(0.4, config::fault_kind::kill_learner, 2);
  e.chaos.events.push_back(kill);
  ro.run_dir = (dir / "kill").string();
  auto killed = run_job(e, ro);
  ASSERT_TRUE(killed.finished);
  EXPECT_EQ(killed.summary["learner_restarts"].get<int>(), 1);
  EXPECT_DOUBLE_EQ(killed.summary["uptime"].get<double>(), 1.0);
  bool fault = false, respawn = false, contributed = false;
  for (const auto& ev : read_events(dir / "kill" / "events.jsonl")) {
    if (ev["event"] == "fault" && ev["target"] == 2 && ev["at_step"] == 32) fault = true;
    if (ev["event"] == "respawn" && ev["id"] == 2) respawn = true;
    if (ev["event"] == "merge")
      for (const auto& c : ev["contributors"])
        if (c["learner"] == 2 && c["incarnation"] == 1) contributed = true;
  }
  EXPECT_TRUE(fault);
  EXPECT_TRUE(respawn);
  EXPECT_TRUE(contributed);
  EXPECT_LT(killed.final_val_loss, 4.5);
  std::filesystem::remove_all(dir);
}

// Divergence detection end to end: learner 1's stored copy of a global value is altered halfway
// (the corrupt_held fault). The heartbeat of that very step reports it, the monitor logs one
// `divergence` naming the learner, fragment and both digests, the learner fetches the fragment
// again, and the run ends with summary.json counting exactly that one divergence.
TEST(main_job, experiments_with_different_batches_are_scored_on_the_same_windows) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / "dd_same_windows";
  std::filesystem::remove_all(dir);
  std::vector<nlohmann::json> evals;
  for (int batch : {4, 8}) {
    auto e = small_experiment(fmt::format("batch{}", batch));
    e.eval.batches = 0;  // the defaults: the final evaluation scores the whole split
    e.learners.batch = batch;
    e.budget.steps = 10;
    run_options ro = quiet_run(dir / e.name);
    auto r = run_job(e, ro);
    ASSERT_TRUE(r.finished);
    ASSERT_FALSE(r.failed) << r.failure_reason;
    const auto fe = read_json(dir / e.name / "summary.json")["final_eval"];
    EXPECT_EQ(fe["batch"], batch);
    EXPECT_EQ(fe["evaluation"], "final");
    evals.push_back(fe);
    // The final "eval" event says how many windows it scored: every window of the split.
    bool final_seen = false;
    std::ifstream in(dir / e.name / "events.jsonl");
    for (std::string line; std::getline(in, line);) {
      const auto ev = nlohmann::json::parse(line);
      if (ev.value("event", "") != "eval" || !ev.value("final", false)) continue;
      final_seen = true;
      EXPECT_EQ(ev["windows"], fe["windows"]);
      EXPECT_EQ(ev["val_loss"].get<double>(), r.final_val_loss);
    }
    EXPECT_TRUE(final_seen);
  }
  const auto data =
      text_dataset::from_file(std::string(DD_DATA_DIR) + "/tinyshakespeare/input.txt", 0.9);
  const auto W = windows_in_split(data.validation().size(), 32);
  EXPECT_GT(W, 3000);  // Tiny Shakespeare's 111,540 validation bytes in windows of 32 + 1
  for (const auto& fe : evals) {
    EXPECT_EQ(fe["windows"].get<int64_t>(), W);
    EXPECT_EQ(fe["covers_split"], true);
  }
  EXPECT_EQ(scoring_difference(evals[0], evals[1]), "");
  // The deprecated eval.batches scored batches × learners.batch windows: not comparable.
  auto legacy = small_experiment("legacy");
  legacy.learners.batch = 8;
  auto old = eval_spec_of(legacy, data).to_json();
  EXPECT_EQ(old["windows"], 32);
  EXPECT_EQ(scoring_difference(evals[0], old), fmt::format("windows: {} vs 32", W));
}

TEST(main_job, a_learner_holding_an_altered_global_value_is_found_in_one_heartbeat_and_repaired) {
  const auto dir = fresh_dir("dd_main_job_divergence");
  auto e = small_experiment("divergence");
  e.chaos.events.push_back(fault_at_fraction(0.5, config::fault_kind::corrupt_held, 1));
  run_options ro = quiet_run(dir);
  auto r = run_job(e, ro);
  ASSERT_TRUE(r.finished);
  EXPECT_FALSE(r.failed) << r.failure_reason;
  EXPECT_EQ(r.summary["divergences"].get<int>(), 1) << r.summary.dump();
  nlohmann::json corrupted, divergence, refetch;
  int divergences = 0;
  for (const auto& ev : read_events(dir / "events.jsonl")) {
    if (ev["event"] == "held_value_corrupted") corrupted = ev;
    if (ev["event"] == "value_refetch") refetch = ev;
    if (ev["event"] == "divergence") {
      divergence = ev;
      ++divergences;
    }
  }
  ASSERT_TRUE(corrupted.is_object());
  ASSERT_TRUE(divergence.is_object());
  ASSERT_TRUE(refetch.is_object());
  EXPECT_EQ(divergences, 1);
  EXPECT_EQ(corrupted["learner"], 1);
  EXPECT_EQ(divergence["learner"], 1);
  EXPECT_EQ(divergence["fragment"], corrupted["fragment"]);
  EXPECT_NE(divergence["owner_digest"], divergence["held_digest"]);
  EXPECT_EQ(refetch["learner"], 1);
  EXPECT_EQ(refetch["fragment"], corrupted["fragment"]);
  EXPECT_EQ(refetch["step"], corrupted["step"]) << "found by the heartbeat of the same step";
  EXPECT_LT(r.final_val_loss, 4.5);
  std::filesystem::remove_all(dir);
}

// A learner whose supervisor gives up (restart budget spent) fails the run: summary.json keeps
// every key and adds "failed": true with the reason.
TEST(main_job, a_learner_that_exhausts_its_restarts_fails_the_run) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / "dd_main_job_give_up";
  auto e = small_experiment("give_up");
  e.budget.steps = 30;
  auto r = run_with_one_fatal_kill(e, dir, fault_kind::kill_learner, 1, 10);
  auto summary = expect_failed_run(r, dir, "learner 1 of 4 exhausted its restart budget");
  for (const char* k : {"final_val_loss", "tokens", "wall_seconds", "goodput", "effective_goodput",
                        "uptime", "merges", "mean_contributors_per_merge", "learner_restarts",
                        "bytes_pushed", "bytes_broadcast"})
    EXPECT_TRUE(summary.contains(k)) << k;
  EXPECT_GT(summary["tokens"].get<uint64_t>(), 0u);
  std::filesystem::remove_all(dir);
}

// A fragment owner whose supervisor gives up loses the fragment's global value and outer state
// since its last checkpoint: the job stops the learners at once and fails, without hanging on a
// final evaluation that can no longer assemble the model.
TEST(main_job, an_owner_that_exhausts_its_restarts_stops_and_fails_the_run) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / "dd_main_job_owner_lost";
  auto e = small_experiment("owner_lost");
  e.budget.steps = 400;  // long enough that finishing it would mean the stop did not happen
  // Owner 1 killed at its third version.
  auto r = run_with_one_fatal_kill(e, dir, fault_kind::kill_owner, 1, 3);
  auto summary = expect_failed_run(r, dir, "fragment owner 1 of 2 exhausted its restart budget");
  // Stopped early: far fewer tokens than the 4 × 400 steps of the budget.
  EXPECT_GT(summary["tokens"].get<uint64_t>(), 0u);
  EXPECT_LT(summary["tokens"].get<uint64_t>(),
            static_cast<uint64_t>(4 * 400 / 2 * e.tokens_per_step()));
  bool gave_up = false, stopped = false;
  std::vector<double> val_losses;  // of the periodic evaluations
  for (const auto& ev : read_events(dir / "events.jsonl")) {
    if (ev["event"] == "give_up" && ev["kind"] == "owner" && ev["id"] == 1) gave_up = true;
    if (ev["event"] == "stop" &&
        ev["reason"].get<std::string>().find("fragment owner") != std::string::npos)
      stopped = true;
    if (ev["event"] == "eval") val_losses.push_back(ev["val_loss"].get<double>());
  }
  EXPECT_TRUE(gave_up);
  EXPECT_TRUE(stopped);
  // No final evaluation: final_val_loss is the last periodic one the evaluator sent the job (one
  // of the eval events; an evaluation may end while the run finalizes), or none.
  if (val_losses.empty()) {
    EXPECT_TRUE(summary["final_val_loss"].is_null()) << summary["final_val_loss"];
  } else {
    ASSERT_TRUE(summary["final_val_loss"].is_number()) << summary["final_val_loss"];
    EXPECT_NE(
        std::find(val_losses.begin(), val_losses.end(), summary["final_val_loss"].get<double>()),
        val_losses.end())
        << summary["final_val_loss"];
  }
  std::filesystem::remove_all(dir);
}

// Regression: a learner that is down shows no step rate (its last one, 'L1 ✗36.80st/s', read
// as if it still trained), in the syncer's line and in a learner node's.
TEST(main_job, a_down_learner_shows_no_step_rate_in_the_progress_line) {
  run_counters now, prev;
  now.learners[0].alive = now.learners[1].alive = true;
  now.learners[0].step = now.learners[1].step = 40;
  now.learners[0].steps_per_s = 10.0;
  now.learners[1].steps_per_s = 36.8;
  now.learners[0].loss = now.learners[1].loss = 2.316;
  prev = now;
  now.learners[1].alive = false;  // killed: its rate and step stay as they were
  const std::string line = progress_line(now, prev, 5.0, 70.0);
  EXPECT_NE(line.find(" L0 0.00st/s 2.316 L1 ✗ down 2.316 |"), std::string::npos) << line;
  const std::string node = node_progress_line(now, 70.0);
  EXPECT_NE(node.find(" L0 10.00st/s 2.316 L1 ✗ down 2.316 | restarts 0"), std::string::npos)
      << node;
  EXPECT_EQ(node.find("36.80"), std::string::npos) << node;
}

// Regression: where an ETA would only grow the line says why instead: once a signal is stopping
// the run ('17% ETA 39m21s' ... 'ETA 40m36s' while the learners wound down), and once every
// learner still up has left, naming the down ones the rest of the budget waits for ('81% ETA
// 10s' ... 'ETA 13s').
TEST(main_job, the_progress_line_says_stopping_or_waiting_instead_of_an_eta_that_grows) {
  run_counters now, prev;
  for (int i = 0; i < 3; ++i) {
    now.learners[i].step = 20;
    now.learners[i].alive = true;
  }
  const std::string running = progress_line(now, prev, 5.0, 70.0, 0.17);
  EXPECT_NE(running.find("| 17% ETA 5m42s"), std::string::npos) << running;
  const std::string stopping = progress_line(now, prev, 5.0, 70.0, 0.17, 0.0, 0.0, 0, true);
  EXPECT_NE(stopping.find("| 17% stopping"), std::string::npos) << stopping;
  EXPECT_EQ(stopping.find("ETA"), std::string::npos) << stopping;
  EXPECT_NE(progress_line(now, prev, 5.0, 70.0, 0.81).find("| 81% ETA 16s"), std::string::npos);
  now.learners[0].finished = true;  // left at the end of its budget
  now.learners[1].alive = false;    // killed
  const std::string one_up = progress_line(now, prev, 5.0, 70.0, 0.81);
  EXPECT_NE(one_up.find("| 81% ETA"), std::string::npos) << one_up;  // learner 2 still steps
  now.learners[2].finished = true;
  const std::string waiting = progress_line(now, prev, 5.0, 70.0, 0.81);
  EXPECT_NE(waiting.find("| 81% waiting for learner 1 (down) to rejoin"), std::string::npos)
      << waiting;
  EXPECT_EQ(waiting.find("ETA"), std::string::npos) << waiting;
}

// The progress line ends with the share of the budget spent and the time left.
TEST(main_job, progress_line_shows_the_budget_spent_and_the_time_left) {
  auto e = small_experiment("progress");  // 80 steps per learner, 4 learners
  run_counters now, prev;
  for (int i = 0; i < 4; ++i) {
    now.learners[i].step = 20 + 10 * static_cast<uint64_t>(i);  // mean 35 of 80
    now.learners[i].tokens = 1000;
    now.learners[i].alive = true;
  }
  EXPECT_DOUBLE_EQ(budget_done(e, 80, now, 10.0), 35.0 / 80.0);
  const std::string line = progress_line(now, prev, 5.0, 70.0, budget_done(e, 80, now, 70.0));
  // 70 s for 43.75%: 90 s left.
  EXPECT_NE(line.find("| 44% ETA 1m30s"), std::string::npos) << line;
  // A resumed part measures its own pace (43% ETA 7s with 65 s to go): its first
  // line came at 10 s with 25% spent by the earlier parts; 60 s for 18.75% more: 180 s left.
  const std::string resumed =
      progress_line(now, prev, 5.0, 70.0, budget_done(e, 80, now, 70.0), 10.0, 0.25);
  EXPECT_NE(resumed.find("| 44% ETA 3m00s"), std::string::npos) << resumed;
  // The step rate is the one observed since the previous line: a paused learner shows 0, not
  // its EMA ('L2 2.69st/s' through a 6 s pause).
  run_counters before = now, after = now;
  before.learners[2].step = 40;
  before.learners[3].step = 30;
  after.learners[2].step = 40;  // paused
  after.learners[3].step = 45;  // 15 steps in 5 s
  after.learners[2].steps_per_s = 2.69;
  // Both lines saw them live (the observed rate is of a learner live through the window).
  before.learners[2].alive = before.learners[3].alive = true;
  after.learners[2].alive = after.learners[3].alive = true;
  const std::string rates = progress_line(after, before, 5.0, 75.0);
  EXPECT_NE(rates.find(" L2 0.00st/s"), std::string::npos) << rates;
  EXPECT_NE(rates.find(" L3 3.00st/s"), std::string::npos) << rates;
  // No ETA until the part has made progress of its own.
  EXPECT_EQ(progress_line(now, prev, 5.0, 70.0, 0.25, 10.0, 0.25).find("ETA"), std::string::npos);
  e.budget.kind = config::budget_kind::tokens;
  e.budget.tokens = 8000;
  EXPECT_DOUBLE_EQ(budget_done(e, 80, now, 10.0), 0.5);
  e.budget.kind = config::budget_kind::seconds;
  e.budget.seconds = 40;
  EXPECT_DOUBLE_EQ(budget_done(e, 80, now, 10.0), 0.25);
  EXPECT_DOUBLE_EQ(budget_done(e, 80, now, 100.0), 1.0);                        // clamped
  EXPECT_EQ(progress_line(now, prev, 5.0, 70.0).find('%'), std::string::npos);  // unknown
}

// Regression: a learner that (re)joined since the previous line showed a bogus rate
// ('L2 925.96st/s' against a pace of 100–250): a live rejoin after a syncer outage brings the
// steps it took while away at once. The observed rate's window restarts when a learner
// (re)joins: it shows its step-time EMA until the next line.
TEST(main_job, progress_line_rate_restarts_when_a_learner_rejoins) {
  run_counters prev, now;
  struct row {
    const char* what;
    bool alive_before;
    uint64_t inc_before, step_before, inc_now, step_now;
    const char* shown;
  };
  const std::vector<row> table = {
      {"live through the window: observed", true, 0, 1000, 0, 1750, " L0 150.00st/s"},
      {"rejoined after an outage with the steps taken away", false, 0, 1000, 0, 5630,
       " L0 200.00st/s"},
      {"a new incarnation resumed from its record", true, 0, 1000, 1, 5630, " L0 200.00st/s"},
      {"a step that went back (restored from a checkpoint)", true, 1, 1000, 1, 900,
       " L0 200.00st/s"},
  };
  for (const auto& r : table) {
    prev.learners[0].alive = r.alive_before;
    prev.learners[0].incarnation = r.inc_before;
    prev.learners[0].step = r.step_before;
    now.learners[0].alive = true;
    now.learners[0].incarnation = r.inc_now;
    now.learners[0].step = r.step_now;
    now.learners[0].steps_per_s = 200.0;  // its EMA
    const std::string line = progress_line(now, prev, 5.0, 30.0);
    EXPECT_NE(line.find(r.shown), std::string::npos) << r.what << ": " << line;
  }
  // The first line that knows the learner: its EMA.
  EXPECT_NE(progress_line(now, run_counters{}, 5.0, 5.0).find(" L0 200.00st/s"), std::string::npos);
}

// Regression: a syncer node's progress line says how many of M learners joined until all have,
// not "[    5.0s] | val - | ..." with no word of the learners it waits for.
TEST(main_job, progress_line_of_a_syncer_says_how_many_learners_joined) {
  run_counters none, prev;
  const std::string waiting = progress_line(none, prev, 5.0, 5.0, 0.0, 0.0, 0.0, 4);
  EXPECT_EQ(waiting.rfind("[    5.0s] 0 of 4 joined | val -", 0), 0u) << waiting;
  run_counters some = none;
  some.learners[0].alive = some.learners[2].alive = true;
  EXPECT_NE(progress_line(some, prev, 5.0, 10.0, 0.0, 0.0, 0.0, 4).find(" 2 of 4 joined |"),
            std::string::npos);
  for (int i = 0; i < 4; ++i) some.learners[i].alive = true;
  EXPECT_EQ(progress_line(some, prev, 5.0, 15.0, 0.0, 0.0, 0.0, 4).find("joined"),
            std::string::npos);
  EXPECT_EQ(progress_line(none, prev, 5.0, 5.0).find("joined"), std::string::npos)
      << "dd-node run spawns its learners itself";
}

// a learner that left (drained, or its budget spent) is shown as such, not with
// its last step rate as if it still trained; one that is down is marked ✗.
TEST(main_job, progress_line_shows_a_learner_that_left) {
  run_log log;
  log.set_stepping(0, true);
  log.set_stepping(1, true);
  log.set_stepping(2, true);
  log.update([](run_counters& c) {
    for (auto& [id, l] : c.learners) {
      l.alive = true;
      l.steps_per_s = 2.0;
      l.loss = 3.5;
    }
    c.learners[2].alive = false;
  });
  log.learner_finished(1);  // drained
  const auto now = log.snapshot();
  const std::string line = progress_line(now, run_counters{}, 5.0, 10.0);
  EXPECT_NE(line.find(" L0 2.00st/s 3.500 L1 left L2 ✗ down 3.500 |"), std::string::npos) << line;
  log.set_stepping(1, true);  // its node was given its id back: it trains again
  EXPECT_NE(progress_line(log.snapshot(), run_counters{}, 5.0, 10.0).find(" L1 2.00st/s"),
            std::string::npos);
}

// a learner node's line shows what the node knows — its learners and their
// restarts — not the syncer's validation loss, merges, contributors and grace (always "-" and 0
// there).
TEST(main_job, a_learner_nodes_progress_line_has_no_syncer_figures) {
  run_log log;
  log.set_stepping(2, true);
  log.update([](run_counters& c) {
    c.learners[2].alive = true;
    c.learners[2].steps_per_s = 3.74;
    c.learners[2].loss = 3.773;
    c.learner_restarts = 1;
  });
  const std::string line = node_progress_line(log.snapshot(), 10.3);
  EXPECT_EQ(line, "[   10.3s] L2 3.74st/s 3.773 | restarts 1");
}

// The run's outcome is a pure function of its counters (actors/services/run_report.hpp): summary
// keys and values, and a failure reason that names every cause.
TEST(run_report, outcome_names_every_cause_of_failure) {
  run_counters c;
  c.learners[0].tokens = 3000;
  c.learners[0].compute_s = 6.0;
  c.learners[1].tokens = 1000;
  c.learners[1].compute_s = 2.0;
  c.merges = 4;
  c.contributors = 6;
  c.tokens_merged = 6000;  // of P × tokens = 2 × 4000
  c.uptime_s = 3.0;
  c.observed_s = 4.0;
  c.learners_given_up[1] = "boom";
  c.degraded["fragment 1"] = "no checkpoint";
  run_facts f;
  f.experiment = "report";
  f.learners = 2;
  f.fragments = 2;
  f.sync_interval = 10;
  f.resumed = true;
  f.seconds_before = 12.5;
  f.interrupted = "SIGINT";
  f.faults_fired = 3;
  const auto r = make_run_result(f, c, 2.5, 0xabcdef, 20.0, 8.0);
  EXPECT_TRUE(r.finished);
  EXPECT_EQ(r.summary["tokens"], 4000);
  // Resumed: the compute seconds carry over the resume, so goodput divides them by the training
  // seconds of both parts (8 + 12.5), not of the last one only.
  EXPECT_DOUBLE_EQ(r.summary["goodput"].get<double>(), 8.0 / (2 * (8.0 + 12.5)));
  EXPECT_DOUBLE_EQ(r.summary["effective_goodput"].get<double>(), 6000.0 / 8000.0);
  EXPECT_DOUBLE_EQ(r.summary["uptime"].get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(r.summary["mean_contributors_per_merge"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(r.summary["final_val_loss"].get<double>(), 2.5);
  EXPECT_EQ(r.summary["resumed"], true);
  EXPECT_DOUBLE_EQ(r.summary["seconds_before_resume"].get<double>(), 12.5);
  EXPECT_EQ(r.summary["interrupt_reason"], "SIGINT");
  EXPECT_TRUE(r.failed);
  EXPECT_EQ(r.failure_reason,
            "learner 1 of 2 exhausted its restart budget and stayed down (last crash: boom; see "
            "events.jsonl); degraded (fragment 1: no checkpoint); set "
            "checkpoint.allow_degraded = true to accept it");
  EXPECT_EQ(r.info["digest"], "0000000000abcdef");
  EXPECT_EQ(r.info["faults_fired"], 3);
  // Allowed degradation and no lost learner: reported, not failed; no evaluation: null loss.
  c.learners_given_up.clear();
  f.allow_degraded = true;
  const auto ok = make_run_result(f, c, -1.0, 0, 20.0, 8.0);
  EXPECT_FALSE(ok.failed);
  EXPECT_EQ(ok.summary["degraded"].size(), 1u);
  EXPECT_TRUE(ok.summary["final_val_loss"].is_null());
}

// The run directory's lifecycle (runtime/run_dir.hpp): what it holds, clearing an earlier run,
// the resume record.
TEST(run_dir, lifecycle_of_a_run_directory) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "dd_run_dir_lifecycle_test";
  fs::remove_all(dir);
  fs::create_directories(dir / "checkpoints");
  EXPECT_EQ(inspect_run_dir(dir.string()), run_dir_state::empty);
  EXPECT_THROW(read_resume_record(dir.string(), ""), std::runtime_error);
  write_run_id(dir.string(), "00000000000000aa");
  std::ofstream(dir / "events.jsonl") << R"({"event":"merge","fragment":1,"version":7})"
                                      << "\n"
                                      << R"({"event":"merge","fragment":1,"version":5})"
                                      << "\n"
                                      << R"({"event":"owner_start","fragment":0,"version":2})"
                                      << "\n";
  std::ofstream(dir / "monitor.json") << R"({"training_seconds": 4.5})";
  EXPECT_EQ(inspect_run_dir(dir.string()), run_dir_state::unfinished);
  const auto rec = read_resume_record(dir.string(), "");
  EXPECT_EQ(rec.run_id, "00000000000000aa");
  EXPECT_EQ(rec.versions.at(0), 2u);
  EXPECT_EQ(rec.versions.at(1), 7u);
  EXPECT_DOUBLE_EQ(rec.seconds_before, 4.5);
  EXPECT_THROW(read_resume_record(dir.string(), "00000000000000bb"), std::runtime_error);
  write_result_files(dir.string(), {{"tokens", 1}}, {{"digest", "x"}});
  EXPECT_EQ(inspect_run_dir(dir.string()), run_dir_state::finished);
  std::ofstream(dir / "checkpoints" / "owner_0.ddck") << "x";
  std::ofstream(dir / "checkpoints" / "owner_1.ddck") << "x";
  const auto replaced = clear_earlier_run(dir.string(), checkpoint_dir_of(dir.string(), ""), 2);
  EXPECT_EQ(replaced, (std::vector<std::string>{"summary.json", "run_info.json", "events.jsonl",
                                                "2 owner checkpoints"}));
  EXPECT_FALSE(fs::exists(dir / "summary.json"));
  EXPECT_FALSE(fs::exists(dir / "monitor.json"));
  EXPECT_FALSE(fs::exists(dir / "checkpoints" / "owner_1.ddck"));
  EXPECT_EQ(checkpoint_dir_of(dir.string(), "/elsewhere"), "/elsewhere");
  fs::remove_all(dir);
}

// One rule for `--resume` in dd-node run, syncer and launch: the syncer and the
// launcher resume a run stopped with Ctrl-C, as dd-node run does.
TEST(run_dir, a_crashed_or_interrupted_run_can_be_resumed_a_finished_one_cannot) {
  namespace fs = std::filesystem;
  const fs::path dir = dd::test::fresh_dir("dd_run_dir_resumable_test");
  EXPECT_EQ(why_not_resumable(dir.string()), "no run to resume");
  std::ofstream(dir / "events.jsonl") << R"({"event":"merge","fragment":0,"version":1})"
                                      << "\n";
  EXPECT_EQ(why_not_resumable(dir.string()), "");  // crashed: events, no summary.json
  std::ofstream(dir / "summary.json") << R"({"tokens": 5, "interrupted": true})";
  EXPECT_EQ(why_not_resumable(dir.string()), "");  // Ctrl-C / SIGTERM
  std::ofstream(dir / "summary.json") << R"({"tokens": 5})";
  EXPECT_EQ(why_not_resumable(dir.string()),
            "a finished run (summary.json without \"interrupted\")");
  std::ofstream(dir / "summary.json") << R"({"tokens": )";
  EXPECT_NE(why_not_resumable(dir.string()).find("an unreadable summary.json"), std::string::npos);
  fs::remove_all(dir);
}

// `--resume` restored another run's owner checkpoint of the
// same shapes (version 33 where this run was at 183) and another run's monitor.json (learners
// back at step 400 instead of ~862), exit 0, no word; with monitor.json missing the learners
// restarted at step 0 (772 + 2000 steps against a 2000-step budget, a 60 s budget restarted
// under launch). resume_refusal — the one check of dd-node run, syncer, launch and the run's
// setup — refuses each, naming both runs; files of an older writer (no run id) still resume.
TEST(run_dir, resume_refuses_another_runs_files_and_a_trained_run_without_its_records) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "dd_run_dir_whose_state_test";
  const nlohmann::json exp = {{"model", {{"layers", 1}}},
                              {"sync", {{"fragments", 2}}},
                              {"learners", {{"count", 2}, {"batch", 4}}},
                              {"checkpoint", {{"dir", ""}}},
                              {"budget", {{"seconds", 60}}}};
  const std::string id = "00000000000000aa";
  auto checkpoint = [&](int fragment, const std::string& run, const std::string& digest) {
    owner_checkpoint c;
    c.fragment_id = fragment;
    c.version = 183;
    c.value = {1.0f, 2.0f};
    c.momentum = {0.0f, 0.0f};
    c.run_id = run;
    c.experiment_digest = digest;
    return c;
  };
  // A run of `id` as it leaves its directory when killed.
  auto make = [&] {
    fs::remove_all(dir);
    fs::create_directories(dir / "checkpoints");
    write_run_id(dir.string(), id);
    std::ofstream(dir / "events.jsonl") << R"({"event":"start","t":0})"
                                        << "\n"
                                        << R"({"event":"join","learner":0,"t":1})"
                                        << "\n";
    auto e = exp;
    e["run_id"] = id;
    std::ofstream(dir / "experiment.json") << e.dump();
    std::ofstream(dir / "monitor.json") << nlohmann::json{
        {"format", 1},
        {"run_id", id},
        {"learners", nlohmann::json::array()}}.dump();
    ASSERT_TRUE(save_checkpoint((dir / "checkpoints" / "owner_0.ddck").string(),
                                checkpoint(0, id, state_digest(exp)))
                    .ok());
  };
  auto refusal = [&] { return resume_refusal(dir.string(), exp); };
  auto expect_refused = [&](const std::string& words) {
    const std::string why = refusal();
    EXPECT_NE(why.find(words), std::string::npos) << "refusal: '" << why << "'";
  };
  make();
  EXPECT_EQ(refusal(), "");
  // Another run's monitor.json, experiment.json, owner checkpoint: refused, both runs named.
  std::ofstream(dir / "monitor.json") << R"({"format":1,"run_id":"00000000000000bb"})";
  expect_refused("a monitor.json of run 00000000000000bb, not of this run 00000000000000aa");
  EXPECT_THROW(read_resume_record(dir.string(), ""), std::runtime_error);  // and where loaded
  make();
  {
    auto e = exp;
    e["run_id"] = "00000000000000bb";
    std::ofstream(dir / "experiment.json") << e.dump();
  }
  expect_refused("an experiment.json of run 00000000000000bb, not of this run 00000000000000aa");
  make();
  ASSERT_TRUE(save_checkpoint((dir / "checkpoints" / "owner_1.ddck").string(),
                              checkpoint(1, "00000000000000bb", state_digest(exp)))
                  .ok());
  expect_refused("an owner checkpoint of run 00000000000000bb, not of this run 00000000000000aa");
  // A checkpoint of another fragment, or written for another model.
  make();
  ASSERT_TRUE(save_checkpoint((dir / "checkpoints" / "owner_1.ddck").string(),
                              checkpoint(0, id, state_digest(exp)))
                  .ok());
  expect_refused("of fragment 0, not 1");
  make();
  {
    auto other = exp;
    other["model"]["layers"] = 2;
    ASSERT_TRUE(save_checkpoint((dir / "checkpoints" / "owner_1.ddck").string(),
                                checkpoint(1, id, state_digest(other)))
                    .ok());
  }
  expect_refused("written for another experiment");
  // A run that trained without its records: never a silent restart from zero.
  make();
  fs::remove(dir / "monitor.json");
  expect_refused("no monitor.json");
  make();
  fs::remove(dir / "experiment.json");
  expect_refused("no experiment.json");
  // ... while a run killed before any learner joined (no checkpoint, no join) has none to lose.
  make();
  fs::remove(dir / "monitor.json");
  fs::remove(dir / "checkpoints" / "owner_0.ddck");
  std::ofstream(dir / "events.jsonl") << R"({"event":"start","t":0})"
                                      << "\n";
  EXPECT_EQ(refusal(), "");
  // Files of an older writer (no run id in them) are not refused for that.
  make();
  std::ofstream(dir / "monitor.json") << R"({"format":1,"learners":[]})";
  std::ofstream(dir / "experiment.json") << exp.dump();
  ASSERT_TRUE(
      save_checkpoint((dir / "checkpoints" / "owner_0.ddck").string(), checkpoint(0, "", "")).ok());
  EXPECT_EQ(refusal(), "");
  // The digest covers what the state depends on, not the budget.
  auto longer = exp;
  longer["budget"]["seconds"] = 120;
  EXPECT_EQ(state_digest(longer), state_digest(exp));
  auto wider = exp;
  wider["learners"]["count"] = 3;
  EXPECT_NE(state_digest(wider), state_digest(exp));
  fs::remove_all(dir);
}

// What the earlier parts of a run counted, from events.jsonl (count_earlier_parts): a dd-node run
// part (learner respawns count as restarts), then a syncer part killed mid-run (its "listening"
// event: rejoins of restarted learner processes count, live ones do not), and a line cut off by
// the kill. Wall time is the sum of the parts' spans.
TEST(run_dir, earlier_parts_are_counted_from_events) {
  namespace fs = std::filesystem;
  const fs::path dir = dd::test::fresh_dir("dd_run_dir_earlier_parts_test");
  const char* lines[] = {
      R"({"event":"start","t":0.5})",
      R"({"event":"push","accepted":true,"bytes":100,"t":1.0})",
      R"({"event":"push","accepted":false,"bytes":40,"t":1.5})",
      R"({"event":"push","accepted":false,"reason":"implausible","bytes":60,"t":1.6})",
      R"({"event":"merge","fragment":0,"version":1,"contributors":[{"learner":0,"tokens":256},{"learner":1,"tokens":128}],"t":2.0})",
      R"({"event":"broadcast","fragment":0,"version":1,"bytes":1000,"t":2.0})",
      R"({"event":"respawn","kind":"learner","id":1,"t":2.5})",
      R"({"event":"rejoin","learner":1,"incarnation":1,"live":false,"t":2.6})",
      R"({"event":"respawn","kind":"owner","id":0,"t":3.0})",
      R"({"event":"finished","t":10.5})",
      R"({"event":"chaos_endpoint","t":0.01})",
      R"({"event":"resume","t":0.25})",
      R"({"event":"listening","port":1,"t":0.3})",
      R"({"event":"merge","fragment":1,"version":1,"contributors":[{"learner":2,"tokens":512}],"t":4.0})",
      R"({"event":"chunk_refused","fragment":1,"t":4.1})",
      R"({"event":"envelope_refused","fragment":1,"t":4.2})",
      R"({"event":"rejoin","learner":0,"incarnation":2,"live":true,"t":4.5})",
      R"({"event":"rejoin","learner":2,"incarnation":1,"live":false,"t":5.0})",
      R"({"event":"rejoin","learner":2,"incarnation":2,"live":false,"t":6.25})",
      R"({"event":"merge","fragment":1,"vers)"};
  {
    std::ofstream out(dir / "events.jsonl");
    for (const char* l : lines) out << l << "\n";
  }
  const auto b = count_earlier_parts((dir / "events.jsonl").string());
  EXPECT_EQ(b.parts, 2);
  EXPECT_EQ(b.merges, 2u);
  EXPECT_EQ(b.contributors, 3u);
  EXPECT_EQ(b.tokens_merged, 256u + 128u + 512u);
  EXPECT_EQ(b.pushes, 3u);
  EXPECT_EQ(b.pushes_rejected, 2u);
  EXPECT_EQ(b.pushes_implausible, 1u);
  EXPECT_EQ(b.bytes_pushed, 200u);
  EXPECT_EQ(b.bytes_broadcast, 1000u);
  EXPECT_EQ(b.chunks_refused, 1u);
  EXPECT_EQ(b.envelopes_refused, 1u);
  EXPECT_EQ(b.learner_restarts, 1u + 2u);  // part 1: one respawn; part 2: two non-live rejoins
  EXPECT_EQ(b.owner_restarts, 1u);
  EXPECT_DOUBLE_EQ(b.wall_s, (10.5 - 0.5) + (6.25 - 0.25));
  const auto none = count_earlier_parts((dir / "missing.jsonl").string());
  EXPECT_EQ(none.parts, 0);
  EXPECT_EQ(none.merges, 0u);
  EXPECT_DOUBLE_EQ(none.wall_s, 0.0);
  fs::remove_all(dir);
}

// The data check run before anything starts: a shard shorter than 2·T+1 tokens, or a validation
// split shorter than T+1, is refused with the file, the learner count and the sizes.
TEST(main_job, data_too_small_for_the_learners_is_refused) {
  auto e = small_experiment("small");
  e.data.file = "small.txt";
  e.model.context = 128;
  e.data.sharding = config::sharding_kind::contiguous;
  const auto data = text_dataset::from_text(std::string(300, 'a'), 0.9, "small.txt");
  const auto refusal = [&] {
    return dd::test::error_of<std::invalid_argument>([&] { check_learner_data(e, data); });
  };
  dd::test::expect_contains_all(
      refusal(), {"data.file 'small.txt' (300 tokens: 270 train, 30 validation)", "4 learners",
                  "learner 0 of 4 has a shard of 67 tokens, fewer than 2·T+1 = 257"});
  e.data.sharding = config::sharding_kind::interleaved;  // the same stream the learners build
  dd::test::expect_contains_all(refusal(), {"the train split has 270 tokens, fewer than"});
  e.learners.count = 1;
  e.model.context = 64;  // shard 270 >= 129, validation 30 < 65
  dd::test::expect_contains_all(refusal(), {"validation split has 30 tokens, fewer than T+1 = 65"});
  e.model.context = 16;
  EXPECT_NO_THROW(check_learner_data(e, data));
  // make_job_setup refuses it too, before it creates the run directory.
  const auto dir = fresh_dir("dd_main_job_small");
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "small.txt") << std::string(300, 'a');
  e.data.file = (dir / "small.txt").string();
  e.model.context = 128;
  e.learners.count = 4;
  run_options ro;
  ro.run_dir = (dir / "run").string();
  EXPECT_THROW(make_job_setup(e, ro), std::invalid_argument);
  EXPECT_FALSE(std::filesystem::exists(dir / "run"));
  std::filesystem::remove_all(dir);
}

// Data so small that the run trains but its numbers mislead gets a warning per reason: the budget
// goes over the train split more than 20 times, or the validation split holds fewer than 16
// windows. The main job (Tiny Shakespeare, 4.9M tokens) gets none.
TEST(main_job, small_data_is_warned_about_when_the_budget_memorizes_it_or_validation_is_tiny) {
  struct row {
    const char* name;
    uint64_t train, validation, budget;
    int context;
    std::vector<std::string> want;  // a piece of each warning, in order
  };
  const std::vector<row> rows = {
      {"the main job", 1003854, 111540, 4915200, 128, {}},
      {"a 3,000-byte file",
       2700,
       300,
       4915200,
       128,
       {"the budget of 4915200 tokens goes over the 2700 train tokens of 'f.txt' 1820 times",
        "the validation split of 'f.txt' holds 2 windows of model.context + 1 = 129 tokens"}},
      {"20 passes exactly", 1000, 16 * 129, 20000, 128, {}},
      {"21 passes",
       1000,
       16 * 129,
       21000,
       128,
       {"goes over the 1000 train tokens of 'f.txt' 21 times"}},
      {"15 windows", 1000000, 16 * 129 - 1, 1000, 128, {"holds 15 windows of"}},
      {"1 window", 1000000, 129, 1000, 128, {"holds 1 window of"}},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.name);
    const auto got = small_data_warnings("f.txt", r.train, r.validation, r.context, r.budget);
    ASSERT_EQ(got.size(), r.want.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_NE(got[i].find(r.want[i]), std::string::npos) << got[i];
  }
}

/// Overwrites bytes in the middle of a file (its CRC no longer matches).
void damage(const std::filesystem::path& p) {
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(std::filesystem::file_size(p) / 2));
  f.write("damaged!damaged!", 16);
}

// An owner killed mid-run with its checkpoint damaged (kill_owner with
// damage_checkpoint) is rebuilt from a learner's copy: a fragment_rebuilt event names the
// learner, the new version is above every earlier one of that fragment (versions never
// repeat), nothing restarts from the initial weights and the run is not degraded.
TEST(main_job, an_owner_killed_with_a_damaged_checkpoint_is_rebuilt_from_a_learner) {
  const auto dir = fresh_dir("dd_main_job_rebuild");
  auto e = small_experiment("rebuild");
  e.checkpoint.every_versions = 1;
  config::chaos_event kill = fault_at_fraction(0.5, config::fault_kind::kill_owner, 1);
  kill.damage_checkpoint = true;
  e.chaos.events.push_back(kill);
  run_options ro = quiet_run(dir);
  auto r = run_job(e, ro);
  ASSERT_TRUE(r.finished);
  EXPECT_FALSE(r.failed) << r.failure_reason;
  EXPECT_FALSE(r.summary.contains("degraded")) << r.summary.dump();
  bool damaged = false, unreadable = false, rebuilt = false, reset = false;
  uint64_t last_version = 0, rebuilt_version = 0;
  bool repeated = false;
  for (const auto& ev : read_events(dir / "events.jsonl")) {
    if (ev["event"] == "checkpoint_damaged" && ev["fragment"] == 1) damaged = ev["ok"] == true;
    if (ev["event"] == "failure" && ev.value("what", "") == "checkpoint_unreadable")
      unreadable = true;
    if (ev["event"] == "owner_start" && ev.contains("reset")) reset = true;
    if (ev["event"] == "fragment_rebuilt") {
      rebuilt = true;
      EXPECT_EQ(ev["fragment"], 1);
      EXPECT_GE(ev["learner"].get<int>(), 0);
      EXPECT_GT(ev["version"].get<uint64_t>(), ev["learner_version"].get<uint64_t>());
      EXPECT_GT(ev["version"].get<uint64_t>(), last_version) << "above every earlier version";
      EXPECT_GT(ev["learner_version"].get<uint64_t>(), 0u) << "a trained copy";
      rebuilt_version = ev["version"].get<uint64_t>();
      last_version = rebuilt_version;
    }
    if (ev["event"] == "merge" && ev["fragment"] == 1) {
      const uint64_t v = ev["version"].get<uint64_t>();
      if (v <= last_version) repeated = true;
      last_version = v;
    }
  }
  EXPECT_TRUE(damaged);
  EXPECT_TRUE(unreadable);
  EXPECT_TRUE(rebuilt);
  EXPECT_FALSE(reset) << "no owner restarted from the initial weights";
  EXPECT_FALSE(repeated) << "a version of fragment 1 repeated";
  EXPECT_GT(last_version, rebuilt_version) << "merges went on after the rebuild";
  EXPECT_LT(r.final_val_loss, 4.5);
  std::filesystem::remove_all(dir);
}

// Resumed (run_options::resume) with one owner checkpoint damaged and no learner holding a
// copy (in-process learners start again empty): that owner falls back to the initial weights,
// numbered above every version events.jsonl names; summary.json says `degraded` naming the
// fragment and the run fails — unless checkpoint.allow_degraded = true. The other owner
// restores its checkpoint. A budget.seconds run also counts the seconds of its first part.
// A run stopped before its first merge left no owner checkpoint;
// resuming it called every fragment "degraded" and failed the run, although the initial
// weights were exactly every fragment's value (no merge existed to lose).
TEST(main_job, a_run_resumed_before_any_merge_is_not_degraded) {
  const auto dir = fresh_dir("dd_main_job_no_merge_resume");
  auto e = small_experiment("no_merge_resume");
  e.budget.steps = 4;  // fewer inner steps than sync.interval (8): no push, no merge
  e.checkpoint.rebuild_wait_seconds = 0.5;
  run_options ro = quiet_run(dir);
  auto first = run_job(e, ro);
  ASSERT_TRUE(first.finished);
  // As a run stopped before its first merge leaves it: no owner checkpoint and no fragment
  // version in events.jsonl (the learners' final pushes of this tiny run may have merged: their
  // traces are taken out).
  std::filesystem::remove_all(dir / "checkpoints");
  {
    std::ifstream in(dir / "events.jsonl");
    std::string kept, line;
    while (std::getline(in, line))
      if (line.find("\"fragment\"") == std::string::npos ||
          line.find("\"version\"") == std::string::npos)
        kept += line + "\n";
    in.close();
    std::ofstream(dir / "events.jsonl", std::ios::trunc) << kept;
  }
  e.budget.steps = 12;
  ro.resume = true;
  auto second = run_job(e, ro);
  ASSERT_TRUE(second.finished);
  EXPECT_FALSE(second.failed) << second.failure_reason;
  EXPECT_FALSE(second.summary.contains("degraded")) << second.summary.dump();
  EXPECT_EQ(second.summary.value("resumed", false), true);
}

// summary.json of a resumed run counted merges, wall seconds
// and effective goodput of the last part only, and tokens of both (12 merges of 26). A run
// stopped after its first part (its stop, evaluation and summary taken out, as a kill leaves
// it) and resumed: every figure covers both parts — merges equal the merge events of the whole
// events.jsonl, contributors and merged tokens sum over them, wall time is the sum of the parts'
// spans, and summary.json says resumed, 2 parts.
TEST(main_job, a_resumed_runs_summary_covers_both_parts) {
  const auto dir = fresh_dir("dd_main_job_resume_summary");
  auto e = small_experiment("resume_summary");
  e.budget.steps = 40;
  run_options ro = quiet_run(dir);
  auto first = run_job(e, ro);
  ASSERT_TRUE(first.finished);
  ASSERT_FALSE(first.failed) << first.failure_reason;
  std::filesystem::remove(dir / "summary.json");
  {
    std::ifstream in(dir / "events.jsonl");
    std::string kept, line;
    while (std::getline(in, line))
      if (line.find("\"event\":\"stop\"") == std::string::npos &&
          line.find("\"event\":\"eval\"") == std::string::npos &&
          line.find("\"event\":\"model_written\"") == std::string::npos &&
          line.find("\"event\":\"finished\"") == std::string::npos)
        kept += line + "\n";
    in.close();
    std::ofstream(dir / "events.jsonl", std::ios::trunc) << kept;
  }
  uint64_t merges1 = 0;
  double last1 = 0;
  for (const auto& ev : read_events(dir / "events.jsonl")) {
    if (ev["event"] == "merge") ++merges1;
    last1 = std::max(last1, ev["t"].get<double>());
  }
  ASSERT_GT(merges1, 0u);
  // The earlier part's wall time: the larger of its events' span and its record's seconds.
  const double record_s = read_json(dir / "monitor.json").value("training_seconds", 0.0);
  double span1 = -1;
  for (const auto& ev : read_events(dir / "events.jsonl"))
    if (ev["event"] == "start") span1 = last1 - ev["t"].get<double>();
  ASSERT_GE(span1, 0.0);
  const double before_s = std::max(span1, record_s);
  e.budget.steps = 80;
  ro.resume = true;
  auto second = run_job(e, ro);
  ASSERT_TRUE(second.finished);
  ASSERT_FALSE(second.failed) << second.failure_reason;
  const auto summary = read_json(dir / "summary.json");
  EXPECT_EQ(summary.value("resumed", false), true);
  EXPECT_EQ(summary.value("parts", 0), 2);
  uint64_t merges = 0, contributors = 0, merged_tokens = 0;
  bool resumed = false;
  double part2_start = -1;
  for (const auto& ev : read_events(dir / "events.jsonl")) {
    if (ev["event"] == "resume") {
      resumed = true;
      part2_start = ev["t"].get<double>();
    }
    if (ev["event"] != "merge") continue;
    ++merges;
    for (const auto& c : ev["contributors"]) {
      ++contributors;
      merged_tokens += c["tokens"].get<uint64_t>();
    }
  }
  ASSERT_TRUE(resumed);
  EXPECT_GT(merges, merges1) << "the second part merged too";
  EXPECT_EQ(summary["merges"].get<uint64_t>(), merges);
  EXPECT_DOUBLE_EQ(summary["mean_contributors_per_merge"].get<double>(),
                   static_cast<double>(contributors) / static_cast<double>(merges));
  // Every learner trained 80 steps of batch × context tokens, each counted once.
  const uint64_t tokens = summary["tokens"].get<uint64_t>();
  EXPECT_EQ(tokens, 4u * 80u * 4u * 32u);
  EXPECT_DOUBLE_EQ(
      summary["effective_goodput"].get<double>(),
      std::min(1.0, static_cast<double>(merged_tokens) / (2.0 * static_cast<double>(tokens))));
  EXPECT_DOUBLE_EQ(summary["wall_seconds_before_resume"].get<double>(), before_s);
  EXPECT_GT(summary["wall_seconds"].get<double>(), before_s);
  EXPECT_LT(summary["wall_seconds"].get<double>(),
            before_s + second.info["training_seconds"].get<double>() + 5.0);
  EXPECT_GE(part2_start, 0.0);
  EXPECT_GT(summary["uptime"].get<double>(), 0.0);
  std::filesystem::remove_all(dir);
}

TEST(main_job, a_resumed_owner_without_any_copy_is_degraded_and_fails_the_run) {
  const auto dir = fresh_dir("dd_main_job_degraded");
  auto e = small_experiment("degraded");
  e.checkpoint.every_versions = 1;
  // The owner decides within this wait whether or not the learners answered (slow under
  // sanitizers and load), and the wait ends well before the resumed runs' budgets (2 s and
  // 2 s): so the run always reaches the decision (degraded) before it ends.
  e.checkpoint.rebuild_wait_seconds = 0.5;
  e.budget.kind = config::budget_kind::seconds;
  e.budget.seconds = 3;
  e.inner.decay_steps = 200;
  run_options ro = quiet_run(dir);
  auto first = run_job(e, ro);
  ASSERT_TRUE(first.finished);
  ASSERT_FALSE(first.failed) << first.failure_reason;
  const auto record = read_json(dir / "monitor.json");
  const double first_s = record.value("training_seconds", 0.0);
  EXPECT_GT(first_s, 2.5);
  uint64_t highest = 0;
  for (const auto& ev : read_events(dir / "events.jsonl"))
    if (ev["event"] == "merge" && ev["fragment"] == 1)
      highest = std::max(highest, ev["version"].get<uint64_t>());
  ASSERT_GT(highest, 0u);
  damage(dir / "checkpoints" / "owner_1.ddck");

  // Resumed with a 5 s budget: 3 s were spent, so about 2 s are left.
  e.budget.seconds = first_s + 2.0;
  ro.resume = true;
  auto second = run_job(e, ro);
  ASSERT_TRUE(second.finished);
  EXPECT_TRUE(second.failed);
  EXPECT_NE(second.failure_reason.find("degraded (fragment 1:"), std::string::npos)
      << second.failure_reason;
  EXPECT_NE(second.failure_reason.find("checkpoint.allow_degraded"), std::string::npos);
  ASSERT_TRUE(second.summary.contains("degraded")) << second.summary.dump();
  ASSERT_EQ(second.summary["degraded"].size(), 1u);
  EXPECT_EQ(second.summary["degraded"][0]["what"], "fragment 1");
  EXPECT_EQ(second.summary.value("resumed", false), true);
  EXPECT_NEAR(second.summary["seconds_before_resume"].get<double>(), first_s, 0.01);
  const double training_s = second.info["training_seconds"].get<double>();
  EXPECT_LT(training_s, 4.5) << "the seconds budget counts the first part";
  EXPECT_GT(training_s, 1.0);
  bool restored0 = false, reset1 = false;
  for (const auto& ev : read_events(dir / "events.jsonl")) {
    if (ev["event"] == "owner_restored" && ev["fragment"] == 0) restored0 = true;
    if (ev["event"] == "owner_start" && ev["fragment"] == 1 && ev.contains("reset")) {
      reset1 = true;
      EXPECT_EQ(ev["version"].get<uint64_t>(), highest + 1) << "versions never repeat";
    }
  }
  EXPECT_TRUE(restored0);
  EXPECT_TRUE(reset1);

  // The same with checkpoint.allow_degraded: reported, not failed.
  damage(dir / "checkpoints" / "owner_1.ddck");
  e.checkpoint.allow_degraded = true;
  e.budget.seconds = read_json(dir / "monitor.json").value("training_seconds", 0.0) + 2.0;
  auto third = run_job(e, ro);
  ASSERT_TRUE(third.finished);
  EXPECT_FALSE(third.failed) << third.failure_reason;
  ASSERT_TRUE(third.summary.contains("degraded"));
  EXPECT_EQ(third.summary["degraded"][0]["what"], "fragment 1");
  std::filesystem::remove_all(dir);
}

// An interrupt during a final evaluation longer than the interrupt limit (the whole split of a
// large validation set under load) still leaves the model file: the evaluator writes the model
// as soon as it is assembled (metadata "evaluation": not scored yet) and again once scored; cut
// short, the file stays, it is the final global model (the owners' final checkpoints, value for
// value), and summary.json names it with final_eval.evaluation "last periodic".
TEST(main_job, an_interrupt_during_a_slow_final_evaluation_still_leaves_the_model_file) {
  const auto dir = fresh_dir("dd_main_job_cut_final_eval");
  auto e = small_experiment("cut_final_eval");
  e.budget.steps = 160;
  e.eval.batches = 0;
  e.eval.every_steps = 20;      // periodic evaluations: the loss summary.json falls back to
  e.eval.periodic_windows = 8;  // a quick one
  e.eval.windows = 20'000;      // a final evaluation of seconds, against an interrupt limit
                                // of 10 ms
  std::atomic<int> interrupt{0};
  run_options ro;
  ro.progress_every_s = 0;
  ro.run_dir = dir.string();
  ro.interrupt = &interrupt;
  ro.interrupt_timeout_s = 0.01;
  // SIGTERM once the final model is on disk and its scoring has begun.
  std::atomic<bool> done{false};
  std::thread watcher([&] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (!done && std::chrono::steady_clock::now() < deadline) {
      std::ifstream in(dir / "events.jsonl");
      std::stringstream ss;
      ss << in.rdbuf();
      if (ss.str().find("\"event\":\"model_written\"") != std::string::npos) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    interrupt = SIGTERM;
  });
  auto r = run_job(e, ro);
  done = true;
  watcher.join();
  ASSERT_TRUE(r.finished);
  const auto summary = read_json(dir / "summary.json");
  EXPECT_EQ(summary.value("interrupted", false), true) << summary.dump();
  EXPECT_EQ(summary.value("model_file", std::string()), "model.safetensors") << summary.dump();
  EXPECT_EQ(summary["final_eval"].value("evaluation", std::string()), "last periodic")
      << summary.dump();
  EXPECT_EQ(summary["final_eval"].value("windows", 0), 8) << "the periodic evaluation's windows";
  ASSERT_TRUE(summary["final_val_loss"].is_number()) << summary.dump();
  size_t written = 0, final_evals = 0;
  for (const auto& ev : read_events(dir / "events.jsonl")) {
    if (ev["event"] == "model_written") {
      ++written;
      EXPECT_EQ(ev["evaluation"], "last periodic") << ev.dump();
      EXPECT_FALSE(ev.contains("val_loss")) << ev.dump();
    }
    if (ev["event"] == "eval" && ev.value("final", false)) ++final_evals;
  }
  EXPECT_EQ(written, 1u) << "written once, before the scoring";
  EXPECT_EQ(final_evals, 0u) << "the final evaluation was cut short";

  // The file loads; its metadata says it was not scored and carries the periodic loss.
  auto be = kernels::make_backend("cpu", {1, 0});
  auto m = read_any_model_file(dir.string(), *be);
  EXPECT_EQ(m.metadata.at("model_kind"), "gpt");
  EXPECT_EQ(m.metadata.at("evaluation"), "last periodic");
  EXPECT_EQ(m.metadata.count("val_loss"), 0u);
  EXPECT_EQ(std::stod(m.metadata.at("last_periodic_val_loss")),
            summary["final_val_loss"].get<double>());
  const auto windows = nlohmann::json::parse(m.metadata.at("eval"));
  EXPECT_EQ(windows.value("evaluation", std::string()), "last periodic");
  EXPECT_EQ(windows.value("windows", std::int64_t{0}), 20'000) << "the final windows";
  // It is the final global model: the owners' final checkpoints, assembled.
  const auto flat = m.model->get_parameters();
  EXPECT_EQ(m.metadata.at("digest"), fmt::format("{:016x}", digest_floats(flat)));
  const auto plan = plan_of(e);
  std::vector<float> owners(plan.total_numel);
  const auto versions = nlohmann::json::parse(m.metadata.at("versions"));
  ASSERT_EQ(versions.size(), 2u);
  for (const auto& layout : plan.fragments) {
    auto c = load_checkpoint(
        (dir / "checkpoints" / fmt::format("owner_{}.ddck", layout.fragment_id)).string());
    ASSERT_TRUE(c.ok()) << "fragment " << layout.fragment_id;
    ASSERT_EQ(c->value.size(), layout.numel);
    EXPECT_EQ(versions[static_cast<size_t>(layout.fragment_id)].get<uint64_t>(), c->version);
    EXPECT_GT(c->version, 0u);
    scatter_fragment(layout, c->value.data(), owners.data());
  }
  EXPECT_TRUE(flat == owners) << "the model file is not the owners' final global model";
  std::filesystem::remove_all(dir);
}

// A run directory holds one run: an earlier run's summary.json and run_info.json are removed
// when the next run starts (a killed re-run must not leave a stale summary that looks finished).
TEST(main_job, a_new_run_removes_the_earlier_runs_summary) {
  const auto dir = fresh_dir("dd_main_job_rerun");
  std::filesystem::create_directories(dir / "checkpoints");
  std::ofstream(dir / "summary.json") << "{\"final_val_loss\": 1.5}\n";
  std::ofstream(dir / "run_info.json") << "{}\n";
  std::ofstream(dir / "checkpoints" / "owner_1.ddck") << "old";
  std::ofstream(dir / "model.safetensors") << "old";
  auto e = small_experiment("rerun");
  e.checkpoint.dir = (dir / "checkpoints").string();
  run_options ro;
  ro.run_dir = dir.string();
  auto setup = make_job_setup(e, ro);
  EXPECT_FALSE(std::filesystem::exists(dir / "summary.json"));
  EXPECT_FALSE(std::filesystem::exists(dir / "run_info.json"));
  EXPECT_FALSE(std::filesystem::exists(dir / "checkpoints" / "owner_1.ddck"));
  EXPECT_FALSE(std::filesystem::exists(dir / "model.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(dir / "experiment.json"));
  const std::vector<std::string> want = {"summary.json", "run_info.json", "model.safetensors",
                                         "1 owner checkpoint"};
  EXPECT_EQ(setup->replaced, want);
  setup.reset();
  // Nothing there: nothing replaced.
  const auto fresh = dir / "fresh";
  e.checkpoint.dir = (fresh / "checkpoints").string();
  ro.run_dir = fresh.string();
  EXPECT_TRUE(make_job_setup(e, ro)->replaced.empty());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dd::actors
