// tests/actors/dd_node_run_test.cpp — `dd-node run` as a process, on a tiny experiment (a
// 1-layer GPT, 2 learners, an endless steps budget) in a temporary directory:
//   - SIGINT stops it gracefully: exit status 130, summary.json valid JSON with
//     "interrupted": true and the reason, a "stop" event naming the interrupt, "finished";
//     and --run-dir moved the owner checkpoints to <run dir>/checkpoints (nothing under the
//     default runs/<name>);
//   - a second signal exits at once (SIGTERM twice: 143);
//   - a second run on the same run directory exits 2 naming the directory and the holder's PID;
//     once the holder is gone (killed), the directory can be used again; the same for a
//     checkpoint.dir outside the run directory, held by dd-node run, syncer or launch (the
//     launcher holds it for its children) and refused to dd-node run, syncer and launch;
//   - data too small for the learners: exit 2 before anything starts; a learner lost for good
//     (restart budget spent): exit 1, "failed" in summary.json, and an owner respawned before
//     its first checkpoint is rebuilt from a learner and says so on stderr; a re-run removes
//     the earlier summary.json at its start; --progress takes only a number >= 0.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/child_process.hpp"
#include "tests/support/expect_contains.hpp"
#include "tests/support/fresh_dir.hpp"

namespace {

namespace fs = std::filesystem;

using dd::test::read_text;
using dd::test::wait_exit;

/// The Lua of a tiny experiment (1-layer GPT, 2 learners, P = 2, H = 4) named `name` (a Lua
/// expression), with `sync_extra` inside `sync` and `rest` (more keys) before the closing brace.
std::string tiny_experiment(const std::string& name, const std::string& sync_extra,
                            const std::string& rest) {
  return "experiment {\n"
         "  name = " +
         name +
         ",\n"
         "  data = { file = '" +
         std::string(DD_DATA_DIR) +
         "/tinyshakespeare/input.txt' },\n"
         "  model = { layers = 1, width = 32, heads = 2, context = 32 },\n"
         "  learners = { count = 2, batch = 4, threads = 1 },\n"
         "  sync = { fragments = 2, interval = 4" +
         sync_extra + " },\n" + rest + "}\n";
}

/// The tests' fixture: make_workdir's directories are removed when the test ends.
class dd_node_run : public ::testing::Test {
 protected:
  /// A fresh temporary directory holding the tiny experiment file.
  fs::path make_workdir(const std::string& name) {
    const fs::path dir = dd::test::fresh_dir("dd_node_run_" + name);
    workdirs_.push_back(dir);
    std::ofstream(dir / "tiny.lua")
        << tiny_experiment("'tiny'", "",
                           "  inner = { lr = 3e-3, warmup = 5, decay_steps = 1000 },\n"
                           "  outer = { momentum = 0.5 },\n"
                           "  eval = { every_seconds = 0, batches = 2 },\n"
                           "  budget = { steps = 1000000 },\n"
                           "  checkpoint = { every_versions = 1 },\n");
    return dir;
  }
  void TearDown() override {
    for (const auto& d : workdirs_) fs::remove_all(d);
  }

 private:
  std::vector<fs::path> workdirs_;
};

/// Starts `dd-node run <file> --progress 0 <args>` in `cwd`, stdout/stderr to cwd/<tag>.out /
/// .err.
pid_t start(const fs::path& cwd, const std::string& tag, const std::vector<std::string>& args,
            const std::string& file = "tiny.lua") {
  std::vector<std::string> argv = {DD_NODE_BIN, "run", file, "--progress", "0"};
  argv.insert(argv.end(), args.begin(), args.end());
  return dd::test::start_process(cwd, tag, std::move(argv));
}

using dd::test::wait_until;

bool has_event(const fs::path& events, const std::string& kind) {
  return read_text(events).find("\"event\":\"" + kind + "\"") != std::string::npos;
}

/// Starts `dd-node run tiny.lua --run-dir run` in `dir` with `more` flags (tag "a") and waits up to
/// 60 s for a `kind` event in run/events.jsonl; when none comes it kills the run and fails. The
/// process in `pid`.
void start_until_event(const fs::path& dir, const std::vector<std::string>& more,
                       const std::string& kind, pid_t& pid) {
  std::vector<std::string> args = {"--run-dir", "run"};
  args.insert(args.end(), more.begin(), more.end());
  pid = start(dir, "a", args);
  ASSERT_GT(pid, 0);
  const bool seen = wait_until([&] { return has_event(dir / "run" / "events.jsonl", kind); }, 60);
  if (!seen) ::kill(pid, SIGKILL);
  ASSERT_TRUE(seen) << read_text(dir / "a.err");
}

/// Whether `holder` wrote its pid to the lock file `lock` (and `also` holds) within `seconds`;
/// when not, the holder is killed.
bool holds_lock(
    pid_t holder, const fs::path& lock, double seconds,
    const std::function<bool()>& also = [] { return true; }) {
  const std::string pid_line = std::to_string(holder) + "\n";
  const bool held = wait_until([&] { return read_text(lock) == pid_line && also(); }, seconds);
  if (!held) ::kill(holder, SIGKILL);
  return held;
}

/// Writes `name`.lua in `dir`: the tiny experiment named `name` with a budget of 40 steps, the
/// keys `more`, and the chaos events `events` (Lua table entries, a line each).
void write_chaos_experiment(const fs::path& dir, const std::string& name, const std::string& events,
                            const std::string& more = "") {
  std::ofstream(dir / (name + ".lua")) << tiny_experiment(
      "'" + name + "'", "",
      "  budget = { steps = 40 },\n" + more + "  chaos = { events = {\n" + events + "  } },\n");
}

/// The files an earlier, finished run left in `run` (its summary, events and chaos tape), and
/// `more` (relative path, text).
void write_earlier_run(const fs::path& run,
                       std::initializer_list<std::pair<const char*, const char*>> more) {
  dd::test::write_files(run, {{"summary.json", "{\"final_val_loss\": 1.5}\n"},
                              {"events.jsonl", "{\"event\":\"finished\"}\n"},
                              {"chaos.jsonl", "{\"kind\":\"kill\"}\n"}});
  dd::test::write_files(run, more);
}

TEST_F(dd_node_run, sigint_stops_gracefully_and_writes_an_interrupted_summary) {
  const fs::path dir = make_workdir("sigint");
  const fs::path run = dir / "run";
  // Training has started once an owner has checkpointed a merge.
  pid_t pid = 0;
  ASSERT_NO_FATAL_FAILURE(start_until_event(dir, {}, "checkpoint", pid));
  ::kill(pid, SIGINT);
  const int rc = wait_exit(pid, 40);
  EXPECT_EQ(rc, 130) << read_text(dir / "a.err");
  dd::test::expect_contains_all(read_text(dir / "a.err"), {"SIGINT received"});

  ASSERT_TRUE(fs::exists(run / "summary.json"));
  const auto summary = nlohmann::json::parse(read_text(run / "summary.json"));  // throws if bad
  EXPECT_EQ(summary.value("interrupted", false), true);
  EXPECT_EQ(summary.value("interrupt_reason", std::string()), "SIGINT");
  EXPECT_GT(summary["tokens"].get<uint64_t>(), 0u);
  EXPECT_GT(summary["merges"].get<uint64_t>(), 0u);
  EXPECT_TRUE(summary.contains("final_val_loss"));
  EXPECT_TRUE(has_event(run / "events.jsonl", "finished"));
  EXPECT_NE(read_text(run / "events.jsonl").find("\"reason\":\"interrupted (SIGINT)\""),
            std::string::npos);
  // The end of the run on stdout: a readable summary, not a line of JSON (summary.json has it).
  const std::string out = read_text(dir / "a.out");
  EXPECT_NE(out.find("== tiny interrupted by SIGINT after "), std::string::npos) << out;
  EXPECT_NE(out.find("  final val loss  "), std::string::npos) << out;
  EXPECT_NE(out.find("  summary         run/summary.json"), std::string::npos) << out;
  EXPECT_EQ(out.find("{\"bytes_broadcast\""), std::string::npos) << out;

  // --run-dir moved the owners' checkpoints (the experiment does not set checkpoint.dir).
  EXPECT_TRUE(fs::exists(run / "checkpoints" / "owner_0.ddck"));
  EXPECT_TRUE(fs::exists(run / "checkpoints" / "owner_1.ddck"));
  EXPECT_FALSE(fs::exists(dir / "runs")) << "something was written under the default runs/tiny";
  const auto exp = nlohmann::json::parse(read_text(run / "experiment.json"));
  EXPECT_EQ(exp["run_dir"], "run");
  EXPECT_EQ(exp["checkpoint"]["dir"], "run/checkpoints");
}

/// The lines of `text`, without empty ones.
std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> out;
  std::string::size_type at = 0;
  while (at < text.size()) {
    auto end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    if (end > at) out.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

// `dd-node run --resume` continues an interrupted run in its run directory —
// same run id, owners restored from their checkpoints, versions above every earlier one, the
// tokens of both parts counted, summary.json "resumed": true. A finished run or an empty
// directory is refused (exit 2), and so is a new run over the interrupted one (exit 2).
TEST_F(dd_node_run, resume_continues_an_interrupted_run) {
  const fs::path dir = make_workdir("resume");
  const fs::path run = dir / "run";
  pid_t pid = 0;
  ASSERT_NO_FATAL_FAILURE(start_until_event(dir, {}, "checkpoint", pid));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ::kill(pid, SIGINT);
  ASSERT_EQ(wait_exit(pid, 40), 130) << read_text(dir / "a.err");
  const auto first = nlohmann::json::parse(read_text(run / "summary.json"));
  ASSERT_TRUE(first.value("interrupted", false));
  const uint64_t first_tokens = first["tokens"].get<uint64_t>();
  const std::string first_run_id = read_text(run / "run_id");
  ASSERT_FALSE(first_run_id.empty());
  uint64_t first_version = 0;
  for (const auto& line : split_lines(read_text(run / "events.jsonl"))) {
    const auto ev = nlohmann::json::parse(line);
    if (ev["event"] == "merge")
      first_version = std::max(first_version, ev["version"].get<uint64_t>());
  }
  ASSERT_GT(first_version, 0u);

  // Re-running the first command (no --resume) does not replace the interrupted run: exit 2,
  // both choices named, nothing touched.
  const std::string events_at_interrupt = read_text(run / "events.jsonl");
  const pid_t again = start(dir, "g", {"--run-dir", "run"});
  EXPECT_EQ(wait_exit(again, 60), 2) << read_text(dir / "g.err");
  dd::test::expect_contains_all(
      read_text(dir / "g.err"),
      {"run directory 'run' holds an interrupted run (summary.json with \"interrupted\"): "
       "continue it with --resume, or replace it with --overwrite"});
  EXPECT_EQ(read_text(run / "events.jsonl"), events_at_interrupt);
  EXPECT_TRUE(nlohmann::json::parse(read_text(run / "summary.json")).value("interrupted", false));

  // A resume with another model (the first part's --set flags
  // forgotten) is refused before anything is touched, naming the field; it once restarted every
  // fragment from the initial weights under the same run id.
  const std::string events_before = read_text(run / "events.jsonl");
  const pid_t other = start(dir, "o", {"--run-dir", "run", "--resume", "--set", "model.width=48"});
  EXPECT_EQ(wait_exit(other, 60), 2) << read_text(dir / "o.err");
  dd::test::expect_contains_all(read_text(dir / "o.err"), {"/model/width: 32 in the run, 48 now"});
  EXPECT_EQ(read_text(run / "events.jsonl"), events_before);

  // A budget a little beyond what the first part trained: the resumed part trains the rest.
  const uint64_t budget = first_tokens + 4000;
  const pid_t second = start(
      dir, "b",
      {"--run-dir", "run", "--resume", "--set", "budget={tokens=" + std::to_string(budget) + "}"});
  ASSERT_EQ(wait_exit(second, 120), 0) << read_text(dir / "b.err");
  const auto summary = nlohmann::json::parse(read_text(run / "summary.json"));
  EXPECT_TRUE(summary.value("resumed", false)) << summary.dump();
  EXPECT_FALSE(summary.value("interrupted", false));
  EXPECT_GE(summary["tokens"].get<uint64_t>(), budget) << "the tokens of both parts count";
  EXPECT_LT(summary["tokens"].get<uint64_t>(), budget + first_tokens)
      << "the resumed part did not start the budget from zero";
  EXPECT_EQ(read_text(run / "run_id"), first_run_id) << "a resumed run keeps its run id";
  // Regression: the resumed part says so on the console, naming the run and the part.
  const std::string id = first_run_id.substr(0, first_run_id.find_last_not_of("\n \t") + 1);
  EXPECT_NE(read_text(dir / "b.out").find("resuming run " + id + " from part 2 (after "),
            std::string::npos)
      << read_text(dir / "b.out");
  bool resumed = false, later_merge = false;
  uint64_t merges = 0;
  for (const auto& line : split_lines(read_text(run / "events.jsonl"))) {
    const auto ev = nlohmann::json::parse(line);
    if (ev["event"] == "resume") resumed = true;
    if (ev["event"] == "merge") ++merges;
    if (resumed && ev["event"] == "merge") {
      later_merge = true;
      EXPECT_GT(ev["version"].get<uint64_t>(), 0u);
    }
    if (resumed && ev["event"] == "owner_start") {
      EXPECT_FALSE(ev.contains("reset")) << "an owner restarted from the initial weights";
    }
  }
  EXPECT_TRUE(resumed);
  EXPECT_TRUE(later_merge);
  // Issue 10: summary.json covers both parts — its merges are every merge event of the file.
  EXPECT_EQ(summary.value("parts", 0), 2) << summary.dump();
  EXPECT_EQ(summary["merges"].get<uint64_t>(), merges) << summary.dump();
  EXPECT_GT(summary["merges"].get<uint64_t>(), first["merges"].get<uint64_t>());

  // A finished run, and a directory holding no run, are refused.
  const pid_t third = start(dir, "c", {"--run-dir", "run", "--resume"});
  EXPECT_EQ(wait_exit(third, 60), 2);
  dd::test::expect_contains_all(read_text(dir / "c.err"), {"a finished run"});
  const pid_t fourth = start(dir, "d", {"--run-dir", "empty", "--resume"});
  EXPECT_EQ(wait_exit(fourth, 60), 2);
  dd::test::expect_contains_all(read_text(dir / "d.err"), {"no run to resume"});
  EXPECT_FALSE(fs::exists(dir / "empty")) << "a refused --resume creates no directory";
}

// A run interrupted before its first periodic checkpoint
// (checkpoint.every_versions not reached) wrote no owner checkpoint, and `--resume` restarted
// every fragment from the initial weights (train loss back from 2.78 to 4.69) and then failed the
// run as degraded. Every owner now writes a checkpoint of its current state when the run stops.
TEST_F(dd_node_run,
       an_interrupted_run_resumes_from_its_last_merge_not_its_last_periodic_checkpoint) {
  const fs::path dir = make_workdir("resume_final");
  const fs::path run = dir / "run";
  const std::vector<std::string> rare = {"--set", "checkpoint.every_versions=100000"};
  pid_t pid = 0;
  ASSERT_NO_FATAL_FAILURE(start_until_event(dir, rare, "merge", pid));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ::kill(pid, SIGINT);
  ASSERT_EQ(wait_exit(pid, 40), 130) << read_text(dir / "a.err");
  const auto first = nlohmann::json::parse(read_text(run / "summary.json"));
  ASSERT_TRUE(first.value("interrupted", false));
  std::map<int, uint64_t> merged_version, checkpointed;
  for (const auto& line : split_lines(read_text(run / "events.jsonl"))) {
    const auto ev = nlohmann::json::parse(line);
    if (ev["event"] == "merge") {
      auto& v = merged_version[ev["fragment"].get<int>()];
      v = std::max(v, ev["version"].get<uint64_t>());
    }
    if (ev["event"] == "checkpoint" && ev.value("final", false))
      checkpointed[ev["fragment"].get<int>()] = ev["version"].get<uint64_t>();
  }
  ASSERT_FALSE(merged_version.empty());
  for (const auto& [frag, v] : merged_version)
    EXPECT_EQ(checkpointed[frag], v)
        << "fragment " << frag << ": no final checkpoint of version " << v;
  for (int frag : {0, 1})
    EXPECT_TRUE(fs::exists(run / "checkpoints" / ("owner_" + std::to_string(frag) + ".ddck")));

  const uint64_t budget = first["tokens"].get<uint64_t>() + 4000;
  std::vector<std::string> again = {"--run-dir", "run", "--resume", "--set",
                                    "budget={tokens=" + std::to_string(budget) + "}"};
  again.insert(again.end(), rare.begin(), rare.end());
  const pid_t second = start(dir, "b", again);
  ASSERT_EQ(wait_exit(second, 120), 0) << read_text(dir / "b.err");
  EXPECT_EQ(read_text(dir / "b.err").find("without a checkpoint"), std::string::npos)
      << read_text(dir / "b.err");
  bool resumed = false;
  std::map<int, uint64_t> first_after;
  for (const auto& line : split_lines(read_text(run / "events.jsonl"))) {
    const auto ev = nlohmann::json::parse(line);
    if (ev["event"] == "resume") resumed = true;
    if (!resumed) continue;
    if (ev["event"] == "owner_start") {
      EXPECT_FALSE(ev.contains("reset")) << "an owner restarted from the initial weights";
    }
    if (ev["event"] == "merge" && !first_after.count(ev["fragment"].get<int>()))
      first_after[ev["fragment"].get<int>()] = ev["version"].get<uint64_t>();
  }
  ASSERT_TRUE(resumed);
  for (const auto& [frag, v] : first_after)
    EXPECT_GT(v, merged_version[frag]) << "fragment " << frag << " did not continue its versions";
  const auto summary = nlohmann::json::parse(read_text(run / "summary.json"));
  EXPECT_FALSE(summary.value("failed", false)) << summary.dump();
}

TEST_F(dd_node_run, version_prints_the_version_the_commit_and_the_backends) {
  const fs::path dir = make_workdir("version");
  const pid_t pid = dd::test::start_process(dir, "v", {DD_NODE_BIN, "--version"});
  ASSERT_GT(pid, 0);
  EXPECT_EQ(wait_exit(pid, 10), 0);
  const std::string out = read_text(dir / "v.out");
  EXPECT_EQ(out.rfind("dd-node 0.", 0), 0u) << out;
  EXPECT_NE(out.find(" (commit "), std::string::npos) << out;
  EXPECT_NE(out.find("\nbackends: reference cpu"), std::string::npos) << out;
}

TEST_F(dd_node_run, a_second_signal_exits_at_once) {
  const fs::path dir = make_workdir("twice");
  pid_t pid = 0;
  ASSERT_NO_FATAL_FAILURE(start_until_event(dir, {}, "learner_start", pid));
  ::kill(pid, SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ::kill(pid, SIGTERM);
  EXPECT_EQ(wait_exit(pid, 10), 143) << read_text(dir / "a.err");
  dd::test::expect_contains_all(read_text(dir / "a.err"), {"second signal"});
}

TEST_F(dd_node_run, a_second_run_on_the_same_directory_is_refused) {
  const fs::path dir = make_workdir("lock");
  const pid_t holder = start(dir, "a", {"--run-dir", "run"});
  ASSERT_GT(holder, 0);
  const std::string pid_text = std::to_string(holder);
  ASSERT_TRUE(holds_lock(holder, dir / "run" / "LOCK", 30)) << read_text(dir / "a.err");

  const pid_t second = start(dir, "b", {"--run-dir", "run", "--set", "budget.steps=4"});
  EXPECT_EQ(wait_exit(second, 30), 2);
  const std::string err = read_text(dir / "b.err");
  EXPECT_NE(err.find("run directory 'run' is in use by dd-node run (pid " + pid_text),
            std::string::npos)
      << err;
  EXPECT_FALSE(fs::exists(dir / "run" / "summary.json"));
  EXPECT_EQ(::kill(holder, 0), 0) << "the holder must keep running";

  // A crashed holder releases the lock: the directory is usable again, and the crashed run in
  // it is replaced only when asked (--overwrite), as dd-node launch and syncer require.
  ::kill(holder, SIGKILL);
  EXPECT_EQ(wait_exit(holder, 10), 256 + SIGKILL);
  const pid_t refused = start(dir, "r", {"--run-dir", "run", "--set", "budget.steps=4"});
  EXPECT_EQ(wait_exit(refused, 60), 2) << read_text(dir / "r.err");
  dd::test::expect_contains_all(
      read_text(dir / "r.err"),
      {"dd-node run: tiny: run directory 'run' holds an unfinished run (no summary.json): continue "
       "it with --resume, or replace it with --overwrite"});
  const pid_t third =
      start(dir, "c", {"--run-dir", "run", "--set", "budget.steps=4", "--overwrite"});
  EXPECT_EQ(wait_exit(third, 60), 0) << read_text(dir / "c.err");
  EXPECT_TRUE(fs::exists(dir / "run" / "summary.json"));
}

// A checkpoint.dir outside the run directory is locked too: a second run naming the same
// checkpoint folder (which it would clean as it starts) is refused while the first one runs.
TEST_F(dd_node_run, a_second_run_on_the_same_checkpoint_dir_is_refused) {
  const fs::path dir = make_workdir("ckpt_lock");
  const pid_t holder =
      start(dir, "a", {"--run-dir", "run_a", "--set", "checkpoint.dir=\"shared_ck\""});
  ASSERT_GT(holder, 0);
  const std::string pid_text = std::to_string(holder);
  ASSERT_TRUE(holds_lock(holder, dir / "shared_ck" / "LOCK", 30)) << read_text(dir / "a.err");
  ASSERT_TRUE(wait_until([&] { return fs::exists(dir / "shared_ck" / "owner_0.ddck"); }, 60))
      << read_text(dir / "a.err");

  const pid_t second = start(
      dir, "b",
      {"--run-dir", "run_b", "--set", "checkpoint.dir=\"shared_ck\"", "--set", "budget.steps=4"});
  EXPECT_EQ(wait_exit(second, 30), 2);
  const std::string err = read_text(dir / "b.err");
  EXPECT_NE(err.find("checkpoint.dir: checkpoint directory 'shared_ck' is in use"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("pid " + pid_text), std::string::npos) << err;
  EXPECT_TRUE(fs::exists(dir / "shared_ck" / "owner_0.ddck")) << "the live run's checkpoints";
  EXPECT_FALSE(fs::exists(dir / "run_b" / "summary.json"));
  ::kill(holder, SIGKILL);
  wait_exit(holder, 10);
}

/// Starts `dd-node <args>` in `cwd`, stdout/stderr to cwd/<tag>.out / .err.
pid_t start_node(const fs::path& cwd, const std::string& tag,
                 const std::vector<std::string>& args) {
  std::vector<std::string> argv = {DD_NODE_BIN};
  argv.insert(argv.end(), args.begin(), args.end());
  return dd::test::start_process(cwd, tag, std::move(argv));
}

// A syncer whose --listen or --http port is taken exits 2 before it writes anything, so a retry
// on a free port is a new run, not an unfinished one it would have to --resume or --overwrite.
TEST_F(dd_node_run, a_syncer_whose_port_is_taken_writes_no_run_directory) {
  const fs::path dir = make_workdir("port_taken");
  const int taken = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(taken, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(taken, reinterpret_cast<const sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(taken, 1), 0);
  socklen_t len = sizeof a;
  ASSERT_EQ(::getsockname(taken, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const std::string at = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  const pid_t listen =
      start_node(dir, "l", {"syncer", "tiny.lua", "--listen", at, "--run-dir", "run"});
  EXPECT_EQ(wait_exit(listen, 30), 2);
  dd::test::expect_contains_all(
      read_text(dir / "l.err"),
      {"dd-node syncer: cannot listen on " + at + ": Address already in use (nothing written)"});
  const pid_t http = start_node(
      dir, "h",
      {"syncer", "tiny.lua", "--listen", "127.0.0.1:0", "--http", at, "--run-dir", "run"});
  EXPECT_EQ(wait_exit(http, 30), 2);
  dd::test::expect_contains_all(read_text(dir / "h.err"),
                                {"dd-node syncer: --http: cannot listen on " + at +
                                 ": Address already in use (nothing written)"});
  EXPECT_FALSE(fs::exists(dir / "run"));
  ::close(taken);
}

// dd-node syncer and dd-node launch lock a checkpoint.dir outside their run directory too (the
// same rule as dd-node run): with a live syncer on "shared_ck", a second syncer, a launch and a
// run pointed at it exit 2 naming that path and the holder, and the live checkpoints stay.
TEST_F(dd_node_run, a_live_syncers_checkpoint_dir_is_refused_for_syncer_launch_and_run) {
  const fs::path dir = make_workdir("ckpt_lock_nodes");
  const std::vector<std::string> shared = {"--set", "checkpoint.dir=\"shared_ck\""};
  auto with = [&](std::vector<std::string> v) {
    v.insert(v.end(), shared.begin(), shared.end());
    return v;
  };
  // The holder waits for learners that never come: it holds its locks and trains nothing.
  const pid_t holder = start_node(
      dir, "a", with({"syncer", "tiny.lua", "--listen", "127.0.0.1:0", "--run-dir", "run_a"}));
  ASSERT_GT(holder, 0);
  const std::string pid_text = std::to_string(holder);
  ASSERT_TRUE(holds_lock(holder, dir / "shared_ck" / "LOCK", 60, [&] {
    return read_text(dir / "a.out").find("listening on") != std::string::npos;
  })) << read_text(dir / "a.err");
  // What a live run keeps there (a second run would delete its fragments' checkpoints).
  std::ofstream(dir / "shared_ck" / "owner_0.ddck") << "live";

  const std::string in_use = "checkpoint directory 'shared_ck' is in use by dd-node syncer (pid " +
                             pid_text + ", lock shared_ck/LOCK)";
  const pid_t syncer = start_node(
      dir, "b", with({"syncer", "tiny.lua", "--listen", "127.0.0.1:0", "--run-dir", "run_b"}));
  EXPECT_EQ(wait_exit(syncer, 30), 2);
  EXPECT_NE(read_text(dir / "b.err").find("dd-node syncer: tiny: checkpoint.dir: " + in_use),
            std::string::npos)
      << read_text(dir / "b.err");
  const pid_t launch = start_node(dir, "c", with({"launch", "tiny.lua", "--run-dir", "run_c"}));
  EXPECT_EQ(wait_exit(launch, 30), 2);
  EXPECT_NE(read_text(dir / "c.err").find("dd-node launch: tiny: checkpoint.dir: " + in_use),
            std::string::npos)
      << read_text(dir / "c.err");
  EXPECT_FALSE(fs::exists(dir / "run_c" / "nodes.json")) << "no child was started";
  const pid_t run = start(dir, "d", with({"--run-dir", "run_d", "--set", "budget.steps=4"}));
  EXPECT_EQ(wait_exit(run, 30), 2);
  EXPECT_NE(read_text(dir / "d.err").find("dd-node run: tiny: checkpoint.dir: " + in_use),
            std::string::npos)
      << read_text(dir / "d.err");

  EXPECT_EQ(read_text(dir / "shared_ck" / "owner_0.ddck"), "live") << "the live run's checkpoint";
  for (const char* r : {"run_b", "run_c", "run_d"})
    EXPECT_FALSE(fs::exists(dir / r / "events.jsonl")) << r;
  EXPECT_EQ(::kill(holder, 0), 0) << "the holder must keep running";
  ::kill(holder, SIGKILL);
  wait_exit(holder, 10);
}

// dd-node launch holds the checkpoint directory's lock for its children: its own syncer starts
// (it is the launcher's child), while another run on that checkpoint directory is refused.
TEST_F(dd_node_run, a_launch_holds_its_checkpoint_dir_for_its_children) {
  const fs::path dir = make_workdir("ckpt_lock_launch");
  const pid_t launcher = start_node(
      dir, "a", {"launch", "tiny.lua", "--run-dir", "run_l", "--set", "checkpoint.dir=\"ck_l\""});
  ASSERT_GT(launcher, 0);
  const std::string pid_text = std::to_string(launcher);
  ASSERT_TRUE(
      holds_lock(launcher, dir / "ck_l" / "LOCK", 60,
                 [&] {
                   return read_text(dir / "run_l" / "logs" / "syncer.log").find("listening on") !=
                          std::string::npos;
                 }))
      << read_text(dir / "a.err") << read_text(dir / "run_l" / "logs" / "syncer.log");
  EXPECT_EQ(read_text(dir / "run_l" / "logs" / "syncer.log").find("in use"), std::string::npos);
  const pid_t run =
      start(dir, "b",
            {"--run-dir", "run_b", "--set", "checkpoint.dir=\"ck_l\"", "--set", "budget.steps=4"});
  EXPECT_EQ(wait_exit(run, 30), 2);
  EXPECT_NE(read_text(dir / "b.err")
                .find("checkpoint directory 'ck_l' is in use by dd-node launch (pid " + pid_text +
                      ", lock ck_l/LOCK)"),
            std::string::npos)
      << read_text(dir / "b.err");
  EXPECT_FALSE(fs::exists(dir / "run_b" / "events.jsonl"));
  // The nodes file names the run as soon as the syncer has written its run id (it was "" in the
  // first nodes file, written before the syncer started).
  std::string run_id, listed;
  const bool named = wait_until(
      [&] {
        run_id = read_text(dir / "run_l" / "run_id");
        while (!run_id.empty() && run_id.back() == '\n') run_id.pop_back();
        try {
          listed = nlohmann::json::parse(read_text(dir / "run_l" / "nodes.json"))
                       .value("run_id", std::string());
        } catch (const std::exception&) {
          listed.clear();
        }
        return !run_id.empty() && listed == run_id;
      },
      10);
  EXPECT_TRUE(named) << "run_id '" << run_id << "', nodes.json '" << listed << "'";
  // Ctrl-C: the launcher returns 130 and its last line says so (not the syncer's status).
  ::kill(launcher, SIGINT);
  const int rc = wait_exit(launcher, 60);
  if (rc == -1) ADD_FAILURE() << "the launcher did not stop on SIGINT";
  EXPECT_EQ(rc, 130) << read_text(dir / "a.out");
  dd::test::expect_contains_all(read_text(dir / "a.out"), {"dd-node launch: done (exit 130"});
}

// --table FILE that cannot be written is refused before any training (exit 2), not reported as
// written after the runs.
TEST_F(dd_node_run, an_unwritable_table_file_is_refused_before_training) {
  const fs::path dir = make_workdir("table");
  std::ofstream(dir / "two.lua") << "for _, k in ipairs { 1, 2 } do\n"
                                 << tiny_experiment("'two' .. k", ", min_quorum = k",
                                                    "  budget = { steps = 4 },\n")
                                 << "end\n";
  std::ofstream(dir / "a_file") << "x";
  const pid_t pid = start(dir, "a", {"--table", "a_file/t.json"}, "two.lua");
  EXPECT_EQ(wait_exit(pid, 30), 2);
  const std::string err = read_text(dir / "a.err");
  EXPECT_NE(err.find("--table a_file/t.json: cannot write"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(dir / "runs" / "two1" / "summary.json"));
  EXPECT_EQ(read_text(dir / "a.out").find("comparison written"), std::string::npos);
}

// A data file too small for the learners is refused before anything starts (exit 2, naming the
// file, the learner count and the sizes), instead of learners crashing at spawn until their
// restart budgets run out and the run "finishing" with 0 tokens.
TEST_F(dd_node_run, data_too_small_for_the_learners_is_refused_with_exit_2) {
  const fs::path dir = make_workdir("small");
  {
    std::ifstream in(std::string(DD_DATA_DIR) + "/tinyshakespeare/input.txt", std::ios::binary);
    std::string text(300, '\0');
    in.read(text.data(), 300);
    std::ofstream(dir / "small.txt", std::ios::binary) << text;
  }
  const pid_t pid = start(
      dir, "a",
      {"--run-dir", "run", "--set", "data.file=\"small.txt\"", "--set", "learners.count=4", "--set",
       "model.context=128", "--set", "data.sharding=\"contiguous\"", "--set", "budget.steps=2"});
  EXPECT_EQ(wait_exit(pid, 30), 2) << read_text(dir / "a.err");
  const std::string err = read_text(dir / "a.err");
  EXPECT_NE(err.find("small.txt' (300 tokens: 270 train, 30 validation) is too small for 4 "
                     "learners"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("has a shard of 67 tokens, fewer than 2·T+1 = 257"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(dir / "run" / "summary.json"));
  EXPECT_FALSE(fs::exists(dir / "run" / "events.jsonl"));
  EXPECT_EQ(read_text(dir / "a.out").find("done"), std::string::npos);
}

// A run that loses a learner for good (restart budget spent: six kills in a row) is a runtime
// failure: exit 1, the reason on stderr, "failed": true in summary.json. An owner killed at
// version 1 with no checkpoint yet is rebuilt from a live learner's copy and says so on stderr.
TEST_F(dd_node_run, a_run_that_loses_a_learner_for_good_exits_1) {
  const fs::path dir = make_workdir("fail");
  write_chaos_experiment(
      dir, "fail",
      "    { at_step = 4, action = 'kill_owner', target = 0 },\n"
      "    { at_step = 2, action = 'kill', target = 1 }, { at_step = 4, action = 'kill', target = "
      "1 },\n"
      "    { at_step = 6, action = 'kill', target = 1 }, { at_step = 8, action = 'kill', target = "
      "1 },\n"
      "    { at_step = 10, action = 'kill', target = 1 }, { at_step = 12, action = 'kill', target "
      "= 1 },\n",
      "  eval = { every_seconds = 0, batches = 2 },\n"
      "  checkpoint = { every_versions = 1000 },\n");
  // Restart backoff 0.5 + 1 + 2 + 4 + 8 s before the sixth kill gives up: about 16 s.
  const pid_t pid = start(dir, "a", {"--run-dir", "run"}, "fail.lua");
  EXPECT_EQ(wait_exit(pid, 90), 1) << read_text(dir / "a.err");
  const std::string err = read_text(dir / "a.err");
  // The owner killed before its first checkpoint is rebuilt from a live learner's copy (it
  // says so on stderr) instead of restarting from the initial weights.
  dd::test::expect_contains_all(
      err, {"dd-node run: fail failed: learner 1 of 2 exhausted its restart budget",
            "warning: fragment owner 0: it was respawned before its first checkpoint",
            "rebuilt from learner"});
  EXPECT_EQ(err.find("restarts from the initial weights"), std::string::npos) << err;
  dd::test::expect_contains_all(read_text(dir / "a.out"), {"== fail FAILED: learner 1 of 2"});
  dd::test::expect_contains_all(read_text(dir / "a.out"), {"  restarts        5 learner, "});
  ASSERT_TRUE(fs::exists(dir / "run" / "summary.json"));
  const auto summary = nlohmann::json::parse(read_text(dir / "run" / "summary.json"));
  EXPECT_EQ(summary.value("failed", false), true);
  EXPECT_NE(summary.value("failure_reason", std::string()).find("learner 1 of 2"),
            std::string::npos);
  EXPECT_TRUE(summary.contains("final_val_loss") && summary.contains("tokens") &&
              summary.contains("learner_restarts"));
  EXPECT_EQ(summary["learner_restarts"].get<int>(), 5);
}

// A run directory holds one run: a re-run removes the earlier run's summary.json and
// run_info.json as it starts (and says so), so a re-run killed midway never leaves a stale
// summary that looks finished.
TEST_F(dd_node_run, a_rerun_removes_the_earlier_summary_at_the_start) {
  const fs::path dir = make_workdir("rerun");
  dd::test::write_files(dir / "run",
                        {{"summary.json", "{\"final_val_loss\": 1.5, \"tokens\": 9}\n"},
                         {"run_info.json", "{}\n"},
                         {"events.jsonl", "{\"event\":\"finished\"}\n"},
                         {"checkpoints/owner_0.ddck", "old"}});
  const pid_t pid = start(dir, "a", {"--run-dir", "run"});
  ASSERT_GT(pid, 0);
  const bool started =
      wait_until([&] { return has_event(dir / "run" / "events.jsonl", "learner_start"); }, 60);
  EXPECT_TRUE(started) << read_text(dir / "a.err");
  EXPECT_FALSE(fs::exists(dir / "run" / "summary.json"));
  EXPECT_FALSE(fs::exists(dir / "run" / "run_info.json"));
  EXPECT_FALSE(has_event(dir / "run" / "events.jsonl", "finished"));
  ::kill(pid, SIGKILL);  // a re-run killed midway
  EXPECT_EQ(wait_exit(pid, 10), 256 + SIGKILL);
  EXPECT_FALSE(fs::exists(dir / "run" / "summary.json"));
  const std::string err = read_text(dir / "a.err");
  EXPECT_NE(err.find("run directory 'run' held an earlier run (summary.json, run_info.json, "
                     "events.jsonl, 1 owner checkpoint): replaced by this run"),
            std::string::npos)
      << err;
}

// a run into a directory that held a cluster run (dd-node launch) starts without
// that run's nodes.json, chaos.jsonl, nodes/ and logs/, so `dd-chaos report` never reads two
// runs as one; dd-chaos's chaos-state.json (faults still to heal) stays.
TEST_F(dd_node_run, a_rerun_removes_an_earlier_cluster_runs_files) {
  const fs::path dir = make_workdir("rerun_cluster");
  const fs::path run = dir / "run";
  write_earlier_run(run, {{"nodes.json", "{\"nodes\": []}\n"},
                          {"chaos-state.json", "{}\n"},
                          {"monitor.json.tmp", "{\"learn"},
                          {"nodes/learner-0/events.jsonl", "{\"event\":\"syncer_lost\"}\n"},
                          {"logs/syncer.log", "old\n"}});
  const pid_t pid = start(dir, "a", {"--run-dir", "run", "--set", "budget.steps=4"});
  ASSERT_GT(pid, 0);
  EXPECT_EQ(wait_exit(pid, 60), 0) << read_text(dir / "a.err");
  for (const char* gone : {"nodes.json", "chaos.jsonl", "nodes", "logs", "monitor.json.tmp"})
    EXPECT_FALSE(fs::exists(run / gone)) << gone;
  EXPECT_TRUE(fs::exists(run / "chaos-state.json"));
  EXPECT_TRUE(fs::exists(run / "summary.json"));
  dd::test::expect_contains_all(read_text(dir / "a.err"),
                                {"dd-node run: tiny: removed the earlier cluster run's nodes.json, "
                                 "chaos.jsonl, nodes/, logs/ from 'run'"});
}

// The same for dd-node launch: it clears the earlier cluster run's files before it starts a
// child, and its own syncer (under the launcher's lock) leaves the launcher's fresh nodes.json
// and logs/ alone.
TEST_F(dd_node_run, a_launch_removes_an_earlier_cluster_runs_files) {
  const fs::path dir = make_workdir("relaunch_cluster");
  const fs::path run = dir / "run";
  write_earlier_run(run, {{"nodes/old-node/events.jsonl", "{}\n"}, {"logs/old-node.log", "old\n"}});
  const pid_t launch = start_node(
      dir, "a",
      {"launch", "tiny.lua", "--run-dir", "run", "--progress", "0", "--set", "budget.steps=8"});
  ASSERT_GT(launch, 0);
  EXPECT_EQ(wait_exit(launch, 120), 0) << read_text(dir / "a.err");
  EXPECT_FALSE(fs::exists(run / "chaos.jsonl"));
  EXPECT_FALSE(fs::exists(run / "nodes" / "old-node"));
  EXPECT_FALSE(fs::exists(run / "logs" / "old-node.log"));
  EXPECT_TRUE(fs::exists(run / "nodes.json"));
  EXPECT_TRUE(fs::exists(run / "logs" / "syncer.log"));
  dd::test::expect_contains_all(
      read_text(dir / "a.err"),
      {"dd-node launch: removed the earlier cluster run's chaos.jsonl, nodes/, logs/ from 'run'"});
}

// dd-node status and drain on a directory without a run, or with a finished one,
// say so (exit 2: no run there; exit 1: the run finished, nothing live to ask).
TEST_F(dd_node_run, status_and_drain_name_a_missing_or_finished_run) {
  const fs::path dir = make_workdir("status_dirs");
  fs::create_directories(dir / "empty");
  fs::create_directories(dir / "done");
  std::ofstream(dir / "done" / "summary.json") << "{\"final_val_loss\": 1.5}\n";
  // Its launcher's nodes file still names the syncer, which is gone (nothing listens on port 1).
  std::ofstream(dir / "done" / "nodes.json")
      << "{\"nodes\": [{\"role\": \"syncer\", \"listen\": \"127.0.0.1:1\"}]}\n";
  const pid_t missing = start_node(dir, "m", {"status", "nope"});
  EXPECT_EQ(wait_exit(missing, 30), 2);
  dd::test::expect_contains_all(
      read_text(dir / "m.err"),
      {"dd-node status: no run in 'nope' (no such directory), and it is not a syncer's HOST:PORT"});
  const pid_t empty = start_node(dir, "e", {"drain", "learner:0", "empty"});
  EXPECT_EQ(wait_exit(empty, 30), 2);
  dd::test::expect_contains_all(
      read_text(dir / "e.err"),
      {"dd-node drain: no run in 'empty' (no nodes.json, events.jsonl or summary.json)"});
  for (const char* cmd : {"status", "drain"}) {
    std::vector<std::string> args = {cmd, "done"};
    if (std::string(cmd) == "drain") args = {cmd, "learner:0", "done"};
    const pid_t done = start_node(dir, cmd, args);
    EXPECT_EQ(wait_exit(done, 30), 1) << cmd;
    const std::string err = read_text(dir / (std::string(cmd) + ".err"));
    EXPECT_NE(err.find(std::string("dd-node ") + cmd + ": the run in 'done' finished at 20"),
              std::string::npos)
        << err;
    EXPECT_NE(err.find(" UTC (summary.json); no syncer to ask"), std::string::npos) << err;
  }
  // A run with events and no summary.json (a resumed part ended by a second signal) is named
  // unfinished, not finished.
  fs::create_directories(dir / "cut");
  std::ofstream(dir / "cut" / "events.jsonl") << "{\"event\":\"resume\"}\n";
  const pid_t cut = start_node(dir, "u", {"status", "cut"});
  EXPECT_EQ(wait_exit(cut, 30), 2);
  dd::test::expect_contains_all(
      read_text(dir / "u.err"),
      {"dd-node status: the run in 'cut' is unfinished (events.jsonl, no summary.json: still "
       "running, or ended by a crash or a second signal; --resume continues it)"});
  // A syncer started by hand writes no nodes.json: its newest listening event names it (a
  // wildcard host asked on the loopback). Nothing listens on port 1 here: not reachable, and the
  // line names the address the event gave, not the older part's.
  fs::create_directories(dir / "hand");
  std::ofstream(dir / "hand" / "events.jsonl")
      << "{\"event\":\"listening\",\"host\":\"127.0.0.9\",\"port\":7}\n"
         "{\"event\":\"resume\"}\n"
         "{\"event\":\"listening\",\"host\":\"0.0.0.0\",\"port\":1}\n";
  const pid_t hand = start_node(dir, "h", {"status", "hand"});
  EXPECT_EQ(wait_exit(hand, 30), 1);
  dd::test::expect_contains_all(read_text(dir / "h.err"),
                                {"dd-node status: the syncer is not reachable: 127.0.0.1:1"});
}

// Numeric flags take numbers: --progress abc / -1 is refused (never read as 0: off).
// Process and network faults act from outside (dd-chaos): `dd-node run` refuses them, naming
// the event's file:line, before anything starts; whole-cluster random faults likewise.
TEST_F(dd_node_run, a_process_chaos_kind_is_refused_with_file_and_line) {
  const fs::path dir = make_workdir("outside_chaos");
  write_chaos_experiment(
      dir, "pause", "    { at_time = 2, action = 'pause', target = 'learner:1', duration = 5 },\n");
  pid_t pid = start(dir, "a", {"--run-dir", "run"}, "pause.lua");
  EXPECT_EQ(wait_exit(pid, 30), 2);
  std::string err = read_text(dir / "a.err");
  EXPECT_NE(err.find("pause.lua:9: chaos.events[1]: action 'pause' is a process fault fired from "
                     "outside the nodes: run it with `dd-node launch pause.lua`"),
            std::string::npos)
      << err;
  std::ofstream(dir / "random.lua")
      << tiny_experiment("'random'", "",
                         "  budget = { steps = 40 },\n"
                         "  chaos = { random = { cluster_mtbf_seconds = 30 } },\n");
  pid = start(dir, "b", {"--run-dir", "run"}, "random.lua");
  EXPECT_EQ(wait_exit(pid, 30), 2);
  err = read_text(dir / "b.err");
  EXPECT_NE(err.find("random.lua:8: chaos.random.cluster_mtbf_seconds: whole-cluster random "
                     "faults are drawn and fired by dd-chaos"),
            std::string::npos)
      << err;
  EXPECT_FALSE(fs::exists(dir / "run"));
}

TEST_F(dd_node_run, a_launch_refused_for_a_network_fault_without_the_proxy_writes_nothing) {
  const fs::path dir = make_workdir("launch_no_proxy");
  write_chaos_experiment(
      dir, "net",
      "    { at_time = 2, action = 'latency', target = 'learner:1', ms = 50, duration = 5 },\n");
  const pid_t pid = start_node(dir, "a", {"launch", "net.lua", "--run-dir", "run"});
  EXPECT_EQ(wait_exit(pid, 30), 2);
  const std::string err = read_text(dir / "a.err");
  EXPECT_NE(err.find("chaos.events[1]: action 'latency' faults a link through the fault proxy: "
                     "add --via-proxy"),
            std::string::npos)
      << err;
  EXPECT_FALSE(fs::exists(dir / "run")) << "no run directory, no LOCK";
}

TEST_F(dd_node_run, a_non_numeric_progress_is_refused_with_exit_2) {
  const fs::path dir = make_workdir("flags");
  for (const std::string bad : {"abc", "-1", "5x", "", "nan", "s"}) {
    const pid_t pid = start(dir, "a", {"--run-dir", "run", "--progress", bad});
    EXPECT_EQ(wait_exit(pid, 30), 2) << bad;
    EXPECT_NE(read_text(dir / "a.err").find("--progress needs a number of seconds >= 0"),
              std::string::npos)
        << bad << ": " << read_text(dir / "a.err");
  }
  EXPECT_FALSE(fs::exists(dir / "run"));
}

}  // namespace
