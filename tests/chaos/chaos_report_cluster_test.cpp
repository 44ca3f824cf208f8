// tests/chaos/chaos_report_cluster_test.cpp — `dd-chaos report` on a real run: a tiny experiment
// under `dd-node launch` (3 learner processes, checkpoints every version), one learner process
// killed by dd-chaos and held down 1 s by the launcher; the report must time the fault from the
// real events and judge the run's merges valid.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/actors/process_support.hpp"
#include "tests/support/tiny_lua.hpp"

namespace {

namespace fs = std::filesystem;
using dd::test::wait_events;
using nlohmann::json;

std::pair<int, std::string> run_cmd(const std::string& cmd) { return dd::test::run_command(cmd); }

}  // namespace

TEST(chaos_report_cluster, a_killed_learner_process_is_timed_and_the_run_judged) {
  const fs::path dir = dd::test::fresh_dir("dd_chaos_report_cluster");
  std::ofstream(dir / "tiny.lua") << dd::test::tiny_lua{}.text();
  const fs::path run = dir / "run";
  const pid_t launch = dd::test::launch_tiny(dir);
  ASSERT_TRUE(wait_events(run / "events.jsonl", "merge", 5, 60))
      << dd::test::text(dir / "launch.out");
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const auto [krc, kout] =
      run_cmd(std::string(DD_CHAOS_BIN) + " kill learner:2 --for 1s --run-dir " + run.string());
  ASSERT_EQ(krc, 0) << kout;
  ASSERT_EQ(dd::test::wait_for(launch, 90), 0) << dd::test::text(dir / "launch.out");

  const auto [rc, out] = run_cmd(std::string(DD_CHAOS_BIN) + " report " + run.string() +
                                 " --json " + (dir / "report.json").string());
  std::printf("%s", out.c_str());
  const json r = json::parse(dd::test::text(dir / "report.json"));
  auto v = dd::test::report_verdicts(r, rc);
  for (const char* n :
       {"no_merge_below_quorum", "no_push_merged_twice", "no_version_repeated", "no_version_lost",
        "no_corrupt_chunk_merged", "no_nonfinite_in_global_fragment", "faulted_learners_back"})
    EXPECT_EQ(v[n], "valid") << n << "\n" << out;
  EXPECT_EQ(v["final_loss_vs_baseline"], "unknown");  // no --baseline
  EXPECT_GT(r["run"]["merges"].get<int>(), 5);
  EXPECT_TRUE(r["run"]["global_downtime_s"].is_number());
  EXPECT_TRUE(r["run"]["goodput"].is_number());

  ASSERT_EQ(r["faults"].size(), 1u);
  const json& f = r["faults"][0];
  EXPECT_EQ(f["kind"], "kill");
  EXPECT_EQ(f["result"], "ok");
  EXPECT_EQ(f["learners"], json::array({2}));
  for (const char* k : {"noticed_after_s", "excluded_after_s", "restarted_after_s",
                        "rejoined_after_s", "first_merge_after_s"})
    ASSERT_TRUE(f[k].is_number()) << k << "\n" << f.dump(2);
  EXPECT_GE(f["restarted_after_s"].get<double>(), 0.9);  // held down 1 s by the launcher
  EXPECT_LE(f["noticed_after_s"].get<double>(), f["rejoined_after_s"].get<double>());
  EXPECT_LE(f["restarted_after_s"].get<double>(), f["rejoined_after_s"].get<double>());
  EXPECT_LE(f["rejoined_after_s"].get<double>(), f["first_merge_after_s"].get<double>());
  fs::remove_all(dir);
}
