// runtime/run_dir.hpp, run_dir_rules.hpp: what a resume may change of the run's experiment, and
// which run a command may open a run directory over.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "runtime/run_dir.hpp"
#include "runtime/run_dir_rules.hpp"
#include "tests/support/expect_contains.hpp"
#include "tests/support/fresh_dir.hpp"

namespace {

namespace fs = std::filesystem;

nlohmann::json experiment_at(const std::string& run_dir, const std::string& checkpoint_dir) {
  return {{"name", "tiny"},
          {"run_dir", run_dir},
          {"model", {{"width", 32}}},
          {"checkpoint", {{"dir", checkpoint_dir}, {"every", 1}}}};
}

fs::path run_dir_with(const std::string& name, const nlohmann::json& experiment) {
  const fs::path dir = dd::test::fresh_dir(name);
  std::ofstream(dir / "experiment.json") << experiment.dump(2);
  return dir;
}

}  // namespace

// Regression: a run directory copied elsewhere names its old place in checkpoint.dir; resuming
// the copy is not refused as another experiment ("/checkpoint/dir: runs/a/checkpoints in the
// run, runs/b/checkpoints now").
TEST(run_dir, a_copied_run_directory_resumes_its_checkpoint_dir_is_relative_to_it) {
  const fs::path dir = run_dir_with("copied", experiment_at("runs/a", "runs/a/checkpoints"));
  EXPECT_EQ(dd::experiment_change_on_resume(
                dir.string(), experiment_at("/elsewhere/b", "/elsewhere/b/checkpoints")),
            "");
  EXPECT_EQ(dd::experiment_change_on_resume(dir.string(),
                                            experiment_at("runs/b/", "runs/b/./checkpoints")),
            "");
  // A checkpoint directory outside the run directory stays as it was named, and another one
  // inside it is another place.
  const auto moved_out =
      dd::experiment_change_on_resume(dir.string(), experiment_at("runs/b", "/data/checkpoints"));
  EXPECT_NE(moved_out.find("/checkpoint/dir: \"<run_dir>/checkpoints\" in the run, "
                           "\"/data/checkpoints\" now"),
            std::string::npos)
      << moved_out;
  EXPECT_NE(dd::experiment_change_on_resume(dir.string(), experiment_at("runs/b", "runs/b/ck")),
            "");
  const fs::path outside = run_dir_with("outside", experiment_at("runs/a", "/shared/ck"));
  EXPECT_EQ(
      dd::experiment_change_on_resume(outside.string(), experiment_at("runs/b", "/shared/ck")), "");
  EXPECT_NE(dd::experiment_change_on_resume(outside.string(), experiment_at("runs/b", "/other/ck")),
            "");
}

// Regression: re-running the same command after Ctrl-C replaced the interrupted run ("held an
// earlier run (...): replaced by this run") although `--resume` could continue it. The rule of
// run_dir_refusal for each thing a run directory can hold and each way of opening it: a new run
// replaces only a finished run; an interrupted run, like a crashed one, needs --resume or
// --overwrite; a --resume of a finished run says what to do instead.
TEST(run_dir, an_interrupted_run_is_not_replaced_without_resume_or_a_fresh_start) {
  struct row {
    const char* holds;
    const char* summary;  // summary.json's text, nullptr: none
    bool events;
    dd::run_dir_mode mode;
    const char* refusal;  // "" or a part of the refusal
  };
  using m = dd::run_dir_mode;
  const char* interrupted = R"({"tokens": 9, "interrupted": true})";
  const char* finished = R"({"tokens": 9})";
  const std::vector<row> table = {
      {"nothing", nullptr, false, m::fresh, ""},
      {"a finished run", finished, true, m::fresh, ""},
      {"an interrupted run", interrupted, true, m::fresh,
       "holds an interrupted run (summary.json with \"interrupted\"): continue it with --resume, "
       "or replace it with --overwrite"},
      {"a crashed run", nullptr, true, m::fresh,
       "holds an unfinished run (no summary.json): continue it with --resume, or replace it "
       "with --overwrite"},
      {"an interrupted run", interrupted, true, m::overwrite, ""},
      {"a crashed run", nullptr, true, m::overwrite, ""},
      {"a finished run", finished, true, m::overwrite, ""},
      {"a finished run", finished, true, m::resume,
       "holds a finished run (summary.json without \"interrupted\"): it ran to its end, nothing "
       "is left to continue; start a new run there without --resume (it replaces this one), or "
       "in another run directory (--run-dir DIR) to keep it"},
      {"nothing", nullptr, false, m::resume, "holds no run to resume"},
  };
  int i = 0;
  for (const auto& r : table) {
    const fs::path dir = dd::test::fresh_dir("refusal_" + std::to_string(i++));
    if (r.summary) std::ofstream(dir / "summary.json") << r.summary;
    if (r.events) std::ofstream(dir / "events.jsonl") << "{\"event\":\"start\"}\n";
    const std::string why = dd::run_dir_refusal(dir.string(), r.mode, experiment_at("x", ""));
    const std::string what =
        std::string(r.holds) + ", mode " + std::to_string(static_cast<int>(r.mode));
    if (std::string(r.refusal).empty()) {
      EXPECT_EQ(why, "") << what;
    } else {
      EXPECT_NE(why.find(r.refusal), std::string::npos) << what << ": " << why;
      EXPECT_NE(why.find("run directory '" + dir.string() + "'"), std::string::npos) << why;
    }
  }
}

// Regression: a resumed part that a second signal ends writes no summary.json; the earlier
// part's must not stay beside this part's events as if it were the run's result (dd-chaos
// report read it as final, dd-node status called the run finished). Once a resumed part starts
// the directory holds an unfinished run, still resumable, with its events.
TEST(run_dir, a_resumed_part_removes_the_earlier_parts_summary_and_stays_resumable) {
  const fs::path dir = dd::test::fresh_dir("resumed_part");
  std::ofstream(dir / "summary.json") << R"({"tokens": 9, "interrupted": true})";
  std::ofstream(dir / "run_info.json") << R"({"interrupted": true})";
  std::ofstream(dir / "events.jsonl") << "{\"event\":\"start\"}\n";
  std::ofstream(dir / "run_id") << "r-1";
  ASSERT_EQ(dd::inspect_run_dir(dir.string()), dd::run_dir_state::finished);
  dd::start_resumed_part(dir.string());
  EXPECT_FALSE(fs::exists(dir / "summary.json"));
  EXPECT_FALSE(fs::exists(dir / "run_info.json"));
  EXPECT_TRUE(fs::exists(dir / "events.jsonl"));
  EXPECT_EQ(dd::inspect_run_dir(dir.string()), dd::run_dir_state::unfinished);
  EXPECT_EQ(dd::why_not_resumable(dir.string()), "");
  EXPECT_EQ(dd::run_dir_refusal(dir.string(), dd::run_dir_mode::resume, experiment_at("x", "")),
            "");
}

// The console line of a resumed part names the run, the part and where the earlier ones ended.
TEST(run_dir, a_resumed_run_says_on_the_console_which_run_and_part_it_resumes) {
  dd::resume_record rec;
  rec.run_id = "r-1234";
  rec.seconds_before = 41.6;
  rec.before.parts = 2;
  rec.before.merges = 37;
  rec.before.tokens_merged = 950272;
  rec.tokens_before = 337920;
  EXPECT_EQ(dd::resuming_line(rec),
            "resuming run r-1234 from part 3 (after 42 s of training, 37 merges, 337920 "
            "tokens)");
}

// Regression: the line said "1082368 tokens merged", the pushes' tokens summed once per
// fragment they merged into (3x the run's tokens with 3 fragments), beside a summary.json of
// 337920 tokens. It says the run's tokens: monitor.json's learners, as summary.json counts them.
TEST(run_dir, the_resume_line_counts_the_runs_tokens_not_once_per_fragment) {
  const fs::path dir = dd::test::fresh_dir("resume_tokens");
  std::ofstream(dir / "run_id") << "0e45a625752ae5ec";
  {
    std::ofstream ev(dir / "events.jsonl");
    ev << "{\"event\":\"start\",\"t\":0}\n";
    // One push of 1000 tokens merged into each of 3 fragments.
    for (int f = 0; f < 3; ++f)
      ev << "{\"event\":\"merge\",\"t\":1,\"fragment\":" << f
         << ",\"version\":1,\"contributors\":[{\"learner\":0,\"tokens\":1000}]}\n";
  }
  std::ofstream(dir / "monitor.json")
      << R"({"format":1,"run_id":"0e45a625752ae5ec","mean_step":2,"training_seconds":67.2,)"
         R"("learners":[{"learner":0,"incarnation":2,"finished":false,"step":2,)"
         R"("tokens_before":600,"tokens_this_incarnation":400,"compute_before_s":1,)"
         R"("compute_this_incarnation_s":1,"data_cursor":""},)"
         R"({"learner":1,"incarnation":1,"finished":false,"step":1,"tokens_before":0,)"
         R"("tokens_this_incarnation":500,"compute_before_s":0,)"
         R"("compute_this_incarnation_s":1,"data_cursor":""}]})";
  const auto rec = dd::read_resume_record(dir.string(), "");
  EXPECT_EQ(rec.before.tokens_merged, 3000u);
  EXPECT_EQ(rec.tokens_before, 1500u);
  EXPECT_EQ(dd::resuming_line(rec),
            "resuming run 0e45a625752ae5ec from part 2 (after 67 s of training, 3 merges, 1500 "
            "tokens)");
}

// A resume with another experiment's name or settings that may change (budget, inner) is
// allowed but named in one warning line; the same experiment in a copied run directory, or one
// that only differs where the resume is refused anyway (model), gets none.
TEST(run_dir, a_resume_names_the_settings_it_changes_that_it_may_change) {
  // The run's experiment.json carries its run_id beside the resolved experiment; the experiment a
  // resume resolves has none, and that is no difference.
  auto written = experiment_at("runs/a", "runs/a/checkpoints");
  written["run_id"] = "86f0409d25a6fef2";
  const fs::path dir = run_dir_with("drift", written);
  EXPECT_EQ(
      dd::experiment_drift_on_resume(dir.string(), experiment_at("runs/a", "runs/a/checkpoints")),
      "");
  EXPECT_EQ(dd::experiment_drift_on_resume(
                dir.string(), experiment_at("/elsewhere/b", "/elsewhere/b/checkpoints")),
            "");
  auto other = experiment_at("runs/a", "runs/a/checkpoints");
  other["name"] = "decoupled";
  other["inner"] = {{"lr", 0.002}};
  other["model"]["width"] = 64;  // kept: refused by experiment_change_on_resume, not named here
  const std::string drift = dd::experiment_drift_on_resume(dir.string(), other);
  dd::test::expect_contains_all(
      drift, {"resuming with settings that differ from the run's: ",
              "/name: \"tiny\" in the run, \"decoupled\" now", "/inner: (none) in the run"});
  EXPECT_EQ(drift.find("/model"), std::string::npos) << drift;
  EXPECT_EQ(dd::experiment_drift_on_resume((dir / "absent").string(), other), "");
}
