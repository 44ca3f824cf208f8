// tests/actors/run_ends_test.cpp — every run ends: `dd-node run` as a process
// on a tiny experiment (a 1-layer GPT, 2 learners):
//   - a model too big for memory (context 20000) is refused before anything starts, and its
//     memory estimate printed by `dd-node resolve`; forced, every learner fails with a named
//     allocation error and is given up, and the run ends failed with a summary within a minute;
//   - SIGTERM during the final evaluation ends the run within the interrupt limit.
// Label `cluster` (not the sanitizer stage): an address-space limit and ASan's shadow memory do
// not go together.
#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/child_process.hpp"
#include "tests/support/fresh_dir.hpp"

namespace {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

using dd::test::read_text;
using dd::test::wait_exit;

/// A fresh temporary directory holding tiny.lua: a 1-layer GPT, 2 learners, P = 2, H = 4.
fs::path make_workdir(const std::string& name) {
  const fs::path dir = dd::test::fresh_dir("dd_run_ends_" + name);
  std::ofstream(dir / "tiny.lua")
      << "experiment {\n  name = 'tiny',\n  data = { file = '" << DD_DATA_DIR
      << "/tinyshakespeare/input.txt' },\n"
         "  model = { layers = 1, width = 32, heads = 2, context = 32 },\n"
         "  learners = { count = 2, batch = 4, threads = 1 },\n"
         "  sync = { fragments = 2, interval = 4 },\n"
         "  inner = { lr = 3e-3, warmup = 5, decay_steps = 1000 },\n"
         "  outer = { momentum = 0.5 },\n"
         "  eval = { every_seconds = 0, batches = 2 },\n"
         "  budget = { steps = 1000000 },\n"
         "  checkpoint = { every_versions = 1 },\n}\n";
  return dir;
}

/// Starts `dd-node run tiny.lua --progress 0 <args>` in `cwd`; output in cwd/<tag>.out / .err.
pid_t start(const fs::path& cwd, const std::string& tag, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {DD_NODE_BIN, "run", "tiny.lua", "--progress", "0"};
  argv.insert(argv.end(), args.begin(), args.end());
  return dd::test::start_process(cwd, tag, std::move(argv));
}

using dd::test::wait_until;

}  // namespace

// A model too big for memory (context 20000: the attention matrices alone need
// tens of GiB) made every learner fail, then `dd-node run` never ended. Now `resolve` prints the
// estimate; `run` refuses it before anything starts (here under an address-space limit, the
// only memory limit a test can set without a cgroup); forced, every learner fails with a named
// allocation error, is given up, and the run ends failed with a summary, within a minute.
TEST(dd_node_run, a_model_too_big_for_memory_is_refused_and_forced_it_ends_failed) {
  const fs::path dir = make_workdir("memory");
  const std::vector<std::string> big = {"--set", "model.context=20000", "--set",
                                        "restart.max_restarts=1"};
  std::vector<std::string> resolve = {DD_NODE_BIN, "resolve", "tiny.lua"};
  resolve.insert(resolve.end(), big.begin(), big.end());
  ASSERT_EQ(wait_exit(dd::test::start_process(dir, "r", resolve), 30), 0)
      << read_text(dir / "r.err");
  const std::string estimate = read_text(dir / "r.err");
  EXPECT_NE(estimate.find("memory estimate: per learner"), std::string::npos) << estimate;
  EXPECT_NE(estimate.find("on this machine: dd-node run needs about"), std::string::npos)
      << estimate;
  auto run = [&](const std::string& tag, std::vector<std::string> extra) {
    std::vector<std::string> argv = {
        "/usr/bin/prlimit", "--as=4294967296", "--", DD_NODE_BIN, "run",
        "tiny.lua",         "--progress",      "0",  "--run-dir", "run"};
    argv.insert(argv.end(), big.begin(), big.end());
    argv.insert(argv.end(), extra.begin(), extra.end());
    return dd::test::start_process(dir, tag, argv);
  };
  const auto t0 = clock_type::now();
  EXPECT_EQ(wait_exit(run("a", {}), 60), 2) << read_text(dir / "a.err");
  EXPECT_NE(read_text(dir / "a.err")
                .find("dd-node run: tiny: this run (2 learners, 2 fragment owners and the "
                      "evaluator in one process) needs about"),
            std::string::npos)
      << read_text(dir / "a.err");
  EXPECT_FALSE(fs::exists(dir / "run" / "events.jsonl")) << "refused before anything started";
  const int forced = wait_exit(run("b", {"--force-memory"}), 60);
  const double took = std::chrono::duration<double>(clock_type::now() - t0).count();
  EXPECT_EQ(forced, 1) << read_text(dir / "b.err");
  EXPECT_LT(took, 60.0);
  ASSERT_TRUE(fs::exists(dir / "run" / "summary.json")) << read_text(dir / "b.err");
  const auto summary = nlohmann::json::parse(read_text(dir / "run" / "summary.json"));
  EXPECT_TRUE(summary.value("failed", false)) << summary.dump();
  const std::string events = read_text(dir / "run" / "events.jsonl");
  EXPECT_NE(events.find("out of host memory allocating"), std::string::npos)
      << "the learners' failure names the allocation";
  EXPECT_NE(read_text(dir / "b.err").find("every learner was given up: no final evaluation"),
            std::string::npos)
      << read_text(dir / "b.err");
  fs::remove_all(dir);
}

// SIGTERM during the final evaluation was ignored (the job was already
// finalizing) while the evaluation ran on for up to 600 s. It now ends the run within the
// interrupt limit (30 s) like in any other state: summary.json "interrupted", exit 143.
TEST(dd_node_run, sigterm_during_the_final_evaluation_ends_the_run_within_its_limit) {
  const fs::path dir = make_workdir("final_eval");
  // A final evaluation of minutes: 2^20 batches of a model four times wider and longer.
  const pid_t pid =
      start(dir, "a",
            {"--run-dir", "run", "--set", "budget.steps=8", "--set", "eval.batches=1048576",
             "--set", "model.width=64", "--set", "model.context=128"});
  ASSERT_GT(pid, 0);
  const bool finalizing = wait_until(
      [&] {
        return read_text(dir / "run" / "events.jsonl").find("every learner finished") !=
               std::string::npos;
      },
      60);
  if (!finalizing) ::kill(pid, SIGKILL);
  ASSERT_TRUE(finalizing) << read_text(dir / "a.err");
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const auto t0 = clock_type::now();
  ::kill(pid, SIGTERM);
  const int status = wait_exit(pid, 50);
  const double took = std::chrono::duration<double>(clock_type::now() - t0).count();
  EXPECT_EQ(status, 143) << read_text(dir / "a.err");
  EXPECT_LT(took, 45.0) << "the interrupt limit is 30 s";
  const auto summary = nlohmann::json::parse(read_text(dir / "run" / "summary.json"));
  EXPECT_TRUE(summary.value("interrupted", false)) << summary.dump();
  // The final evaluation never answered: final_val_loss is the last periodic one (or none), and
  // final_eval says so instead of naming the final evaluation's windows.
  const auto evaluation = summary["final_eval"].value("evaluation", std::string());
  EXPECT_EQ(evaluation, summary["final_val_loss"].is_null() ? "none" : "last periodic")
      << summary.dump();
  fs::remove_all(dir);
}
