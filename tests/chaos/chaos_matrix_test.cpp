// tests/chaos/chaos_matrix_test.cpp — the fault matrix: every fault kind of dd-chaos once,
// injected with the real `dd-chaos` binary into a real tiny cluster under `dd-node launch` on
// loopback (1 syncer process, 3 learner processes, 2 fragments, H = 4, checkpoints every version,
// heartbeat 0.2 s, connection timeout 1 s), then judged with `dd-chaos report RUN_DIR --json`.
//
// Faults are grouped, one after the other and spaced, in four cluster runs (one TEST each), and
// a fifth (paused_peer: learner 2 paused, then x1000 pushes of learner 0, all refused):
//   process  kill learner:0 (held 1 s), term learner:1 (held 1 s), pause learner:2 (2 s),
//            slow learner:0 --via cgroup (2 s), slow learner:1 --via signals (2 s),
//            restart learner:2
//   network  (`launch --via-proxy`) latency learner:0, bandwidth learner:1, reset learner:2,
//            blackhole learner:0 (up only), partition learner:1 (both ways), slice learner:0,
//            close_after learner:1; corrupt learner:2 alone in `network_corrupt` (seed 11)
//   message  (the chaos endpoints) drop-/dup-/delay-/reorder-/corrupt-push, drop-/dup-/delay-/
//            reorder-broadcast, nan, fail
//   disk     (run directory on a 64 MiB tmpfs) the syncer paused, owner 0's checkpoint
//            truncated and owner 1's corrupted while it is stopped, the syncer killed (the
//            launcher restarts it with --resume, which reads the damage back), then disk full
//            on learner-0's run directory (2 s)
// Each run goes on a fixed time after its fifth merge (the faults' clock) and is then stopped
// with Ctrl-C (SIGINT to the launcher), so a slow start cannot shorten the time the last
// faulted learner has to come back. Each run asserts every fault was applied (dd-chaos exit 0,
// tape result "ok"), the launcher's exit 130 (interrupted), and the report's verdicts:
// no_merge_below_quorum, no_push_merged_twice, no_version_repeated, no_version_lost,
// no_corrupt_chunk_merged, no_nonfinite_in_global_fragment, faulted_learners_back,
// zero_global_downtime valid; final_loss_vs_baseline unknown (no
// --baseline: the documented verdict when the logs cannot judge it). The whole matrix takes
// about 3 minutes on a 2-core machine (RUN_SERIAL: every core); the disk run is skipped with the
// reason printed where a tmpfs cannot be mounted (not root).
#include <sys/mount.h>
#include <sys/wait.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/actors/process_support.hpp"
#include "tests/support/tiny_lua.hpp"

namespace {

namespace fs = std::filesystem;
using namespace dd::test;
using nlohmann::json;

/// Runs a shell command; exit status (−1 when not exited normally) and stdout+stderr.
std::pair<int, std::string> run_cmd(const std::string& cmd) { return dd::test::run_command(cmd); }

/// One fault of a run: `dd-chaos ARGS --run-dir RUN` fired `at` seconds after the cluster's
/// fifth merge; `tape_kind` is the kind its tape record must carry.
struct fault {
  double at;
  std::string args;
  std::string tape_kind;
};

/// A tiny cluster run under `dd-node launch`: the experiment, the launcher, the faults.
struct matrix_run {
  std::string name;
  /// Seconds the run goes on after its fifth merge (t0, the faults' clock); then the test stops
  /// it with SIGINT. Counted from t0, not from the launch: a slow start (12 s on a loaded
  /// 2-core machine, 3 s idle) must not eat the time the last fault's learner has to come back.
  double run_s = 28;
  std::vector<std::string> launch_flags;  ///< extra `dd-node launch` flags
  std::vector<fault> faults;
  bool tmpfs = false;  ///< the run directory on a 64 MiB tmpfs (mounted by the test)
  std::function<void(const fs::path& run)> more;  ///< further checks on the run directory
};

/// Added to run_s for the experiment's seconds budget, which only ends a run the test's SIGINT
/// did not stop.
constexpr double k_budget_cap_extra_s = 120;

const std::vector<std::string> k_asserted_valid = {
    "no_merge_below_quorum", "no_push_merged_twice",    "no_version_repeated",
    "no_version_lost",       "no_corrupt_chunk_merged", "no_nonfinite_in_global_fragment",
    "faulted_learners_back", "zero_global_downtime",    "no_divergence"};

/// Starts the cluster, fires the faults on schedule, waits for the run's end, runs the report
/// and checks its verdicts. Returns the report (null when a step failed fatally).
json run_matrix(const matrix_run& m) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("dd_chaos_matrix_" + m.name);
  const fs::path run = dir / "run";
  if (m.tmpfs) ::umount2(run.c_str(), MNT_DETACH);
  fs::remove_all(dir);
  fs::create_directories(run);
  if (m.tmpfs && ::mount("tmpfs", run.c_str(), "tmpfs", 0, "size=64m") != 0) {
    std::printf("SKIP %s: cannot mount a tmpfs on %s (%s); disk full needs one\n", m.name.c_str(),
                run.c_str(), std::strerror(errno));
    return json::object({{"skipped", true}});
  }
  dd::test::tiny_lua t;
  t.name = "matrix_" + m.name;
  // The budget only caps a run whose SIGINT went unheeded.
  t.budget = "{ seconds = " + std::to_string(m.run_s + k_budget_cap_extra_s) + " }";
  std::ofstream(dir / "tiny.lua") << t.text();
  std::vector<std::string> flags = {"--overwrite"};
  flags.insert(flags.end(), m.launch_flags.begin(), m.launch_flags.end());
  const auto t_launch = std::chrono::steady_clock::now();
  const pid_t launch = launch_tiny(dir, flags);
  // Every learner joined (its node's chaos endpoint is up only then), and merging.
  EXPECT_TRUE(wait_events(run / "events.jsonl", "join", 3, 60)) << text(dir / "launch.out");
  EXPECT_TRUE(wait_events(run / "events.jsonl", "merge", 5, 60)) << text(dir / "launch.out");
  const auto t0 = std::chrono::steady_clock::now();
  std::printf("[%s] cluster merging %.1f s after launch\n", m.name.c_str(),
              std::chrono::duration<double>(t0 - t_launch).count());
  for (const auto& f : m.faults) {
    std::this_thread::sleep_until(t0 + std::chrono::duration<double>(f.at));
    const auto [rc, out] =
        run_cmd(std::string(DD_CHAOS_BIN) + " " + f.args + " --run-dir " + run.string());
    std::printf("[%s] +%.1f s dd-chaos %s -> %d\n%s", m.name.c_str(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                f.args.c_str(), rc, out.c_str());
    EXPECT_EQ(rc, 0) << f.args << "\n" << out;
  }
  std::this_thread::sleep_until(t0 + std::chrono::duration<double>(m.run_s));
  ::kill(launch, SIGINT);
  // Ctrl-C on the launcher: the syncer stops the run gracefully (summary.json, final eval), the
  // launcher exits 128 + SIGINT (docs/operating.md "Stopping: SIGINT and SIGTERM").
  const int launch_rc = wait_for(launch, 90);
  EXPECT_EQ(launch_rc, 128 + SIGINT) << text(dir / "launch.out");
  std::printf("[%s] run over %.1f s after launch\n", m.name.c_str(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t_launch).count());

  const auto [rc, out] = run_cmd(std::string(DD_CHAOS_BIN) + " report " + run.string() +
                                 " --json " + (dir / "report.json").string());
  std::printf("%s", out.c_str());
  json r;
  try {
    r = json::parse(text(dir / "report.json"));
  } catch (const std::exception& e) {
    ADD_FAILURE() << "no report: " << e.what() << "\n" << out;
    return json();
  }
  auto v = report_verdicts(r, rc);
  for (const auto& n : k_asserted_valid) EXPECT_EQ(v[n], "valid") << m.name << ": " << n;
  EXPECT_EQ(v["final_loss_vs_baseline"], "unknown") << "no --baseline";
  EXPECT_GT(r["run"]["merges"].get<int>(), 20);

  // The tape: one record per fault, in order, each applied.
  std::vector<json> tape;
  for (const auto& e : events(run / "chaos.jsonl"))
    if (e.value("kind", "") != "session" && e.value("kind", "") != "heal") tape.push_back(e);
  EXPECT_EQ(tape.size(), m.faults.size()) << text(run / "chaos.jsonl");
  for (size_t i = 0; i < tape.size() && i < m.faults.size(); ++i) {
    EXPECT_EQ(tape[i]["kind"], m.faults[i].tape_kind) << tape[i].dump();
    EXPECT_EQ(tape[i]["result"], "ok") << tape[i].dump();
  }
  // The report times each of them.
  std::multiset<std::string> reported;
  for (const auto& f : r["faults"]) reported.insert(f.value("kind", ""));
  for (const auto& f : m.faults)
    EXPECT_GE(reported.count(f.tape_kind), 1u) << f.tape_kind << " missing from the report";
  if (m.more) m.more(run);
  if (m.tmpfs) ::umount2(run.c_str(), MNT_DETACH);
  return r;
}

}  // namespace

TEST(chaos_matrix, process_faults) {
  matrix_run m;
  m.name = "process";
  m.run_s = 27;
  m.faults = {
      {1.0, "kill learner:0 --for 1s", "kill"},
      {4.0, "term learner:1 --for 1s", "term"},
      {7.0, "pause learner:2 --for 2s", "pause"},
      {10.5, "slow learner:0 --via cgroup --duty 0.75 --for 2s", "slow"},
      {13.5, "slow learner:1 --via signals --duty 0.75 --for 2s", "slow"},
      {16.5, "restart learner:2", "restart"},
  };
  // term is a graceful stop that the launcher restarts (exit 143 is not 0): learner-1's process
  // drained, exited 143 and was started again after its 1 s hold (docs/chaos.md "term").
  m.more = [](const fs::path& run) {
    const std::string out = text(run.parent_path() / "launch.out");
    EXPECT_NE(out.find("dd-node launch: learner-1 died (exit 143); restarting"), std::string::npos)
        << out;
    bool restarted = false;
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);)
      restarted = restarted || (line.find("started learner-1 (pid ") != std::string::npos &&
                                line.find(", start 2)") != std::string::npos);
    EXPECT_TRUE(restarted) << out;
  };
  run_matrix(m);
}

TEST(chaos_matrix, network_faults) {
  matrix_run m;
  m.name = "network";
  m.run_s = 31;
  m.launch_flags = {"--via-proxy", "--learner-backoff-cap", "2"};
  m.faults = {
      {1.0, "net latency learner:0 --ms 200 --jitter 50 --for 2s", "latency"},
      {3.5, "net bandwidth learner:1 --rate 20000 --for 2s", "bandwidth"},
      {6.0, "net reset learner:2 --for 1s", "reset"},
      {8.5, "net blackhole learner:0 --dir up --for 2s", "blackhole"},
      {11.5, "partition learner:1 --for 2s", "blackhole"},
      {14.5, "net slice learner:0 --size 16 --delay-us 200 --for 2s", "slice"},
      {17.0, "net close_after learner:1 --bytes 4096 --for 1s", "close_after"},
  };
  run_matrix(m);
}

// Byte corruption on one link, alone: the chunk CRC refuses a damaged push; a damaged byte in
// CAF's own BASP framing (no checksum) costs at most that link: no actor dies of a garbled
// message, and a node whose proxy of the syncer's monitor a garbled frame killed connects afresh
// (docs/chaos-report.md "Byte corruption on a link").
TEST(chaos_matrix, network_corrupt) {
  matrix_run m;
  m.name = "network_corrupt";
  m.run_s = 13;
  m.launch_flags = {"--via-proxy", "--learner-backoff-cap", "2"};
  m.faults = {{2.0, "net corrupt learner:2 --p 0.001 --seed 11 --for 1s", "corrupt"}};
  run_matrix(m);
}

TEST(chaos_matrix, message_faults) {
  matrix_run m;
  m.name = "message";
  m.run_s = 31;
  m.faults = {
      {1.0, "msg drop-push learner:0 --for 1s", "drop_push"},
      {3.0, "msg dup-push learner:1 --count 3", "dup_push"},
      {5.0, "msg delay-push learner:2 --ms 300 --for 1s", "delay_push"},
      {7.0, "msg reorder-push learner:0 --count 2", "reorder_push"},
      {9.0, "msg corrupt-push learner:1 --count 1", "corrupt_push"},
      {11.0, "msg drop-broadcast learner:2 --for 1s", "drop_broadcast"},
      {13.0, "msg dup-broadcast learner:0 --count 3", "dup_broadcast"},
      {15.0, "msg delay-broadcast learner:1 --ms 300 --for 1s", "delay_broadcast"},
      {17.0, "msg reorder-broadcast learner:2 --count 2", "reorder_broadcast"},
      {19.0, "msg nan learner:0", "nan_step"},
      {21.0, "msg fail learner:1", "fail_step"},
  };
  run_matrix(m);
}

// Regression (a x1000 push merged into the global model): with learner 2 paused (declared down
// after a heartbeat timeout, or quiet past the newest 16 pushes) one peer was left, fewer than
// the gate's 2, and the gate opened: learner 0's scaled pushes were merged. Now the other
// learners' accepted history judges them: they are refused as implausible (5 scaled, so that
// one superseded or stale before the gate cannot leave none to judge), and the report's
// no_honest_push_refused_as_implausible is valid (the scale_push fault explains them).
TEST(chaos_matrix, a_paused_peer_does_not_open_the_gate) {
  matrix_run m;
  m.name = "paused_peer";
  m.run_s = 12;
  m.faults = {
      {1.0, "pause learner:2 --for 6s", "pause"},
      {4.0, "msg scale-push learner:0 --factor 1000 --count 5", "scale_push"},
  };
  m.more = [](const fs::path& run) {
    const json summary = json::parse(text(run / "summary.json"));
    EXPECT_GE(summary.value("pushes_implausible", 0), 1) << summary.dump();
  };
  const json r = run_matrix(m);
  if (r.is_null()) return;
  EXPECT_EQ(report_verdicts(r, 0)["no_honest_push_refused_as_implausible"], "valid");
}

TEST(chaos_matrix, disk_faults) {
  matrix_run m;
  m.name = "disk";
  m.run_s = 27;
  m.tmpfs = true;
  m.launch_flags = {"--syncer-restart-delay", "1"};
  m.faults = {
      // Stopped, the syncer cannot replace the damaged files with its next checkpoints; killed,
      // it is restarted with --resume and reads them back.
      {1.0, "pause node:syncer --for 4s", "pause"},
      {1.5, "disk truncate owner:0", "disk_truncate"},
      {2.0, "disk corrupt owner:1 --count 16 --seed 5", "disk_corrupt"},
      {2.5, "kill node:syncer", "kill"},
      {12.0, "disk full node:learner-0 --for 2s", "disk_full"},
  };
  // The damage was read back: both fragments rebuilt from the learners' copies, not restored.
  m.more = [](const fs::path& run) {
    std::set<int> rebuilt;
    for (const auto& e : events(run / "events.jsonl"))
      if (e["event"] == "fragment_rebuilt") rebuilt.insert(e["fragment"].get<int>());
    EXPECT_EQ(rebuilt, (std::set<int>{0, 1}));
  };
  const json r = run_matrix(m);
  if (r.value("skipped", false)) GTEST_SKIP() << "no tmpfs: cannot mount one here (needs root)";
}
