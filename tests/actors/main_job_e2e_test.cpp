// tests/actors/main_job_e2e_test.cpp — the main job end to end on Tiny Shakespeare with the real
// scheduler (detached learners on their own threads) and a small model and budget: the run
// directory holds summary.json with exactly the documented keys and sane values and an
// events.jsonl of timestamped JSON objects; with learner 2 killed at 40% of the run, merges never
// stop (uptime 100% with K = 1), the learner is respawned and contributes again.
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "actors/cluster.hpp"

namespace dd::actors {
namespace {

config::experiment small_experiment(const std::string& name) {
  config::experiment e;
  e.name = name;
  e.seed = 11;
  e.data.file = std::string(DD_DATA_DIR) + "/tinyshakespeare/input.txt";
  e.model.layers = 2;
  e.model.width = 32;
  e.model.heads = 2;
  e.model.context = 32;
  e.learners.count = 4;
  e.learners.batch = 4;
  e.learners.threads = 1;
  e.inner.lr = 3e-3;
  e.inner.warmup = 5;
  e.sync.fragments = 2;
  e.sync.interval = 8;
  e.outer.momentum = 0.5;
  e.budget.kind = config::budget_kind::steps;
  e.budget.steps = 80;
  e.eval.every_seconds = 0;
  e.eval.batches = 4;
  e.checkpoint.every_versions = 5;
  return e;
}

nlohmann::json read_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

TEST(main_job, writes_summary_and_events_and_survives_a_learner_kill) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / "dd_main_job_e2e";
  std::filesystem::remove_all(dir);
  run_options ro;
  ro.progress_every_s = 0;
  // This tiny run lasts about a second: a respawn backoff short against it, as 0.5 s is against
  // a real run (otherwise the others finish while learner 2 waits to come back).
  ro.restart.backoff_base_s = 0.01;

  // Without faults.
  ro.run_dir = (dir / "clean").string();
  auto clean = run_cluster(small_experiment("clean"), ro);
  ASSERT_TRUE(clean.finished);
  auto summary = read_json(dir / "clean" / "summary.json");
  const std::set<std::string> keys = {"final_val_loss", "tokens", "wall_seconds", "goodput",
                                      "effective_goodput", "uptime", "merges",
                                      "mean_contributors_per_merge", "learner_restarts",
                                      "bytes_pushed", "bytes_broadcast"};
  std::set<std::string> got;
  for (auto& [k, v] : summary.items()) got.insert(k);
  EXPECT_EQ(got, keys);
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
    std::ifstream in(dir / "clean" / "events.jsonl");
    std::string line;
    std::set<std::string> kinds;
    while (std::getline(in, line)) {
      auto ev = nlohmann::json::parse(line);
      ASSERT_TRUE(ev.contains("t") && ev.contains("time") && ev.contains("event"));
      kinds.insert(ev["event"]);
    }
    for (const char* k : {"start", "push", "merge", "broadcast", "eval", "finished"})
      EXPECT_EQ(kinds.count(k), 1u) << k;
  }

  // Learner 2 killed at 40% of its steps.
  auto e = small_experiment("kill");
  config::chaos_event kill;
  kill.trigger = config::chaos_trigger::at_fraction;
  kill.at = 0.4;
  kill.action = config::chaos_action::kill;
  kill.target = 2;
  e.chaos.events.push_back(kill);
  ro.run_dir = (dir / "kill").string();
  auto killed = run_cluster(e, ro);
  ASSERT_TRUE(killed.finished);
  EXPECT_EQ(killed.summary["learner_restarts"].get<int>(), 1);
  EXPECT_DOUBLE_EQ(killed.summary["uptime"].get<double>(), 1.0);
  std::ifstream in(dir / "kill" / "events.jsonl");
  std::string line;
  bool fault = false, respawn = false, contributed = false;
  while (std::getline(in, line)) {
    auto ev = nlohmann::json::parse(line);
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

}  // namespace
}  // namespace dd::actors
