// tests/apps/full_disk_test.cpp — a full disk at several points of a run, for each binary that
// promises files: `dd-node run` (experiment.json, events.jsonl, owner checkpoints, summary.json,
// run_info.json), `dd-node train` (loss.csv, checkpoint.safetensors, summary.json) and
// `dd-goodput` (goodput.json/.csv). Each run must exit non-zero with a stderr message that
// names the file and says "No space left on device", and leave no 0-byte or torn file where a
// complete one was promised: every JSON file present parses, events.jsonl and loss.csv end in a
// whole line. The disk is a tmpfs mounted for the test and filled with a ballast file.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/child_process.hpp"
#include "tests/support/fresh_dir.hpp"
#include "tests/support/scoped_tmpfs.hpp"
#include "tests/support/tiny_lua.hpp"
#include "util/net.hpp"

namespace {

namespace fs = std::filesystem;

using dd::test::read_text;
using dd::test::start_process;
using dd::test::wait_exit;

/// Runs `argv` in `cwd` with stdout/stderr to cwd/<tag>.out/.err; its exit status (-1 when it
/// had to be killed after `seconds`, 256 + signal when a signal ended it).
int run(const fs::path& cwd, const std::string& tag, std::vector<std::string> argv,
        double seconds = 90) {
  return wait_exit(start_process(cwd, tag, std::move(argv)), seconds);
}

/// No promised file is 0-byte or torn: every *.json under `dir` parses, every *.jsonl line
/// parses, every *.csv ends in a newline; no *.tmp is left. `what` names the case.
void expect_no_torn_files(const fs::path& dir, const std::string& what) {
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    const fs::path p = entry.path();
    const std::string name = p.filename().string();
    if (name == "ballast" || name == "LOCK") continue;
    const std::string text = read_text(p);
    const std::string ext = p.extension().string();
    EXPECT_NE(ext, ".tmp") << what << ": temporary file left: " << p;
    if (ext == ".json") {
      EXPECT_FALSE(text.empty()) << what << ": 0-byte " << p;
      EXPECT_TRUE(nlohmann::json::accept(text)) << what << ": torn " << p;
    } else if (ext == ".jsonl" || ext == ".csv") {
      if (text.empty()) continue;
      EXPECT_EQ(text.back(), '\n') << what << ": " << p << " ends in half a line";
      if (ext == ".jsonl") {
        std::istringstream lines(text);
        std::string l;
        while (std::getline(lines, l))
          EXPECT_TRUE(nlohmann::json::accept(l)) << what << ": torn line in " << p << ": " << l;
      }
    } else if (ext == ".safetensors" || ext == ".ddck") {
      EXPECT_FALSE(text.empty()) << what << ": 0-byte " << p;
    }
  }
}

/// A fresh work directory with a tmpfs of `size` bytes mounted at work/disk.
struct full_disk : ::testing::Test {
  fs::path work;
  std::unique_ptr<dd::test::scoped_tmpfs> disk;

  void mount(const std::string& name, size_t size) {
    work = fs::path(::testing::TempDir()) / ("dd_full_disk_" + name);
    if (fs::exists(work / "disk")) ::umount2((work / "disk").c_str(), MNT_DETACH);
    fs::remove_all(work);
    fs::create_directories(work);
    disk = std::make_unique<dd::test::scoped_tmpfs>(work / "disk", size);
  }

  /// `what` (the command `argv(out_dir)`, output in `tag`.err) writing into folder `tag` of a
  /// tmpfs of `size` bytes filled up to `leave` free bytes, for each of `leaves`: it exits 1
  /// saying "No space left on device" and naming the folder, and leaves no torn file.
  void expect_fails_naming_the_file(
      const std::string& what, const std::string& tag, size_t size,
      std::initializer_list<size_t> leaves,
      const std::function<std::vector<std::string>(const fs::path&)>& argv) {
    for (size_t leave : leaves) {
      SCOPED_TRACE("free bytes " + std::to_string(leave));
      mount(tag + "_" + std::to_string(leave), size);
      if (!disk->mounted()) GTEST_SKIP() << disk->error();
      const fs::path out_dir = disk->dir() / tag;
      fs::create_directories(out_dir);
      ASSERT_TRUE(disk->fill(leave));
      const int rc = run(work, tag, argv(out_dir));
      const std::string err = read_text(work / (tag + ".err"));
      EXPECT_EQ(rc, 1) << err;
      EXPECT_NE(err.find("No space left on device"), std::string::npos) << err;
      EXPECT_NE(err.find(out_dir.string()), std::string::npos) << "no file named: " << err;
      expect_no_torn_files(disk->dir(), what + ", " + std::to_string(leave) + " bytes free");
      disk.reset();
    }
  }
};

std::string tiny_experiment() {
  dd::test::tiny_lua t;
  t.learners = 2;
  t.decay_steps = 1000;
  t.budget = "{ steps = 40 }";
  return t.text();
}

TEST_F(full_disk, dd_node_run_ends_loudly_at_every_point_the_disk_fills) {
  // Free bytes left on the run directory's disk: none (experiment.json cannot be written),
  // a little (events.jsonl or the first owner checkpoint fails), more (later checkpoints or the
  // summary fail). Every case must fail loudly; none may leave a torn file.
  // With checkpoints off the disk fills with the run's records instead: events.jsonl, or
  // monitor.json, which every join writes before it is answered.
  struct point {
    size_t leave;
    bool checkpoints;
  };
  for (const point pt : {point{0, true}, point{6 << 10, true}, point{24 << 10, true},
                         point{700 << 10, true}, point{24 << 10, false}}) {
    const std::string tag = std::to_string(pt.leave) + (pt.checkpoints ? "" : "_no_ckpt");
    SCOPED_TRACE("free bytes " + tag);
    mount("run_" + tag, 2 << 20);
    if (!disk->mounted()) GTEST_SKIP() << disk->error();
    std::ofstream(work / "tiny.lua") << tiny_experiment();
    const fs::path run_dir = disk->dir() / "run";
    fs::create_directories(run_dir);
    ASSERT_TRUE(disk->fill(pt.leave));
    std::vector<std::string> argv = {DD_NODE_BIN, "run",       "tiny.lua",      "--progress",
                                     "0",         "--run-dir", run_dir.string()};
    if (!pt.checkpoints) {
      argv.push_back("--set");
      argv.push_back("checkpoint.every_versions=0");
    }
    const int rc = run(work, "run", argv);
    const std::string err = read_text(work / "run.err");
    EXPECT_EQ(rc, 1) << err;
    EXPECT_NE(err.find("No space left on device"), std::string::npos) << err;
    EXPECT_NE(err.find(run_dir.string()), std::string::npos) << "no file named: " << err;
    if (!pt.checkpoints) {
      EXPECT_TRUE(err.find("events.jsonl") != std::string::npos ||
                  err.find("monitor.json") != std::string::npos)
          << err;
      EXPECT_EQ(err.find("checkpoints/"), std::string::npos) << err;
    }
    const std::string out = read_text(work / "run.out");
    EXPECT_EQ(out.find(" done: "), std::string::npos) << "reported success: " << out;
    expect_no_torn_files(disk->dir(), "dd-node run, " + tag + " bytes free");
    if (fs::exists(run_dir / "summary.json")) {  // written once the failed write freed space
      const auto summary = nlohmann::json::parse(read_text(run_dir / "summary.json"));
      EXPECT_EQ(summary.value("failed", false), true) << summary.dump();
    }
    disk.reset();
  }
}

/// A free TCP port on 127.0.0.1 (bound and released: a short race the tests accept).
int free_port() { return dd::util::free_loopback_port(); }

// `dd-node syncer` on a full disk does not stop at the first
// failed write. It retries with backoff (stderr says so, naming the file), and
//  - when the disk stays full past checkpoint.max_failing_seconds it ends the run, exit 1,
//    naming the files;
//  - when space comes back it writes the kept events.jsonl lines in order, finishes with
//    exit 0, and summary.json lists the files that failed under `degraded`.
TEST_F(full_disk, dd_node_syncer_retries_marks_degraded_and_gives_up_after_the_limit) {
  for (const bool recovers : {false, true}) {
    SCOPED_TRACE(recovers ? "space comes back" : "the disk stays full");
    // 64 MiB when space comes back: the rest of the run (checkpoints of every version, events)
    // must fit once the ballast is gone.
    mount(recovers ? "syncer_recovers" : "syncer_full", recovers ? (64 << 20) : (2 << 20));
    if (!disk->mounted()) GTEST_SKIP() << disk->error();
    std::string exp = tiny_experiment();
    exp.replace(exp.find("budget = { steps = 40 }"), 23, "budget = { seconds = 10 }");
    std::ofstream(work / "tiny.lua") << exp;
    const fs::path run_dir = disk->dir() / "run";
    fs::create_directories(run_dir);
    ASSERT_TRUE(disk->fill(24 << 10));
    const int port = free_port();
    ASSERT_GT(port, 0);
    const std::string addr = "127.0.0.1:" + std::to_string(port);
    const pid_t syncer = start_process(
        work, "syncer",
        {DD_NODE_BIN, "syncer", "tiny.lua", "--listen", addr, "--run-dir", run_dir.string(),
         "--progress", "0", "--set",
         // Space comes back only once every file below has failed: not before the limit.
         recovers ? "checkpoint.max_failing_seconds=60" : "checkpoint.max_failing_seconds=4"});
    const pid_t learner =
        start_process(work, "learner",
                      {DD_NODE_BIN, "learner", "--join", addr, "--learners", "2", "--threads", "1",
                       "--run-dir", (work / "ln").string(), "--join-deadline", "30"});
    // Wait for the first failure on the syncer's stderr.
    bool retrying = false;
    for (int i = 0; i < 300 && !retrying; ++i) {
      retrying = read_text(work / "syncer.err").find("retrying with backoff") != std::string::npos;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_TRUE(retrying) << read_text(work / "syncer.err");
    // Not only events.jsonl and the checkpoints: the monitor's record, the loss CSV and the
    // learner node's forwarded events fail too, each reported naming its file.
    const std::vector<std::string> files = {(run_dir / "monitor.json").string(),
                                            (run_dir / "learner_loss.csv").string(),
                                            (run_dir / "nodes").string() + "/"};
    auto all_named = [&] {
      const std::string err = read_text(work / "syncer.err");
      for (const auto& f : files)
        if (err.find(f) == std::string::npos) return false;
      return true;
    };
    for (int i = 0; i < 200 && !all_named(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_TRUE(all_named()) << read_text(work / "syncer.err");
    if (recovers) fs::remove(disk->dir() / "ballast");
    const int rc = wait_exit(syncer, 60);
    const std::string err = read_text(work / "syncer.err");
    EXPECT_NE(err.find("No space left on device"), std::string::npos) << err;
    EXPECT_NE(err.find(run_dir.string()), std::string::npos) << "no file named: " << err;
    if (recovers) {
      EXPECT_EQ(rc, 0) << err;
      EXPECT_NE(err.find("writing again after a failure"), std::string::npos) << err;
      ASSERT_TRUE(fs::exists(run_dir / "summary.json")) << err;
      const auto summary = nlohmann::json::parse(read_text(run_dir / "summary.json"));
      ASSERT_TRUE(summary.contains("degraded")) << summary.dump();
      bool names_file = false;
      for (const auto& d : summary["degraded"])
        if (d["what"].get<std::string>().find(run_dir.string()) == 0) names_file = true;
      EXPECT_TRUE(names_file) << summary.dump();
      for (const auto& f : files) {
        bool listed = false;
        for (const auto& d : summary["degraded"])
          if (d["what"].get<std::string>().rfind(f, 0) == 0) listed = true;
        EXPECT_TRUE(listed) << f << " not in degraded: " << summary.dump();
      }
      // Their kept lines were written once space came back: the CSV has rows after its header,
      // and the forwarded events file exists with whole lines.
      const std::string csv = read_text(run_dir / "learner_loss.csv");
      EXPECT_EQ(csv.rfind("wall_time,learner,incarnation,step,tokens,loss,lr\n", 0), 0u) << csv;
      EXPECT_GT(std::count(csv.begin(), csv.end(), '\n'), 2) << csv;
      EXPECT_TRUE(nlohmann::json::accept(read_text(run_dir / "monitor.json")));
      EXPECT_FALSE(summary.value("failed", false)) << summary.dump();
      // The kept lines were written in order: t never goes back (run_log stamps t under the
      // lock that orders the lines; run_log_test hammers that from several threads).
      std::istringstream lines(read_text(run_dir / "events.jsonl"));
      std::string l;
      double t = -1;
      size_t n = 0;
      while (std::getline(lines, l)) {
        const auto ev = nlohmann::json::parse(l);
        EXPECT_GE(ev["t"].get<double>(), t) << l;
        t = ev["t"].get<double>();
        ++n;
      }
      EXPECT_GT(n, 10u);
    } else {
      EXPECT_EQ(rc, 1) << err;
      EXPECT_NE(err.find("writes kept failing for"), std::string::npos) << err;
      EXPECT_NE(err.find("checkpoint.max_failing_seconds = 4"), std::string::npos) << err;
    }
    wait_exit(learner, 30);
    expect_no_torn_files(disk->dir(), recovers ? "syncer, recovers" : "syncer, full");
    disk.reset();
  }
}

TEST_F(full_disk, dd_node_train_fails_naming_the_file) {
  expect_fails_naming_the_file(
      "dd-node train", "train", 1 << 20, {size_t{0}, size_t{8} << 10, size_t{64} << 10},
      [](const fs::path& out_dir) -> std::vector<std::string> {
        return {DD_NODE_BIN,      "train",
                "--data",         std::string(DD_DATA_DIR) + "/tinyshakespeare/input.txt",
                "--steps",        "4",
                "--layers",       "1",
                "--width",        "32",
                "--heads",        "2",
                "--context",      "32",
                "--batch",        "2",
                "--eval-batches", "1",
                "--log-every",    "1",
                "--out",          out_dir.string()};
      });
}

TEST_F(full_disk, dd_goodput_fails_naming_the_file) {
  expect_fails_naming_the_file(
      "dd-goodput", "gp", 256 << 10, {size_t{0}, size_t{6} << 10},
      [](const fs::path& out_dir) -> std::vector<std::string> {
        return {DD_GOODPUT_BIN, "--chips", "4096",  "--learners",    "2", "--days", "1",
                "--seeds",      "2",       "--out", out_dir.string()};
      });
}

}  // namespace

namespace {

TEST(bad_flags, non_finite_numbers_are_refused_before_any_work_with_exit_2) {
  const fs::path work = dd::test::fresh_dir("dd_bad_flags");
  EXPECT_EQ(run(work, "gp", {DD_GOODPUT_BIN, "--days", "nan", "--out", "gp"}), 2);
  EXPECT_NE(read_text(work / "gp.err").find("--days expects a finite number, got 'nan'"),
            std::string::npos)
      << read_text(work / "gp.err");
  EXPECT_EQ(run(work, "gp2", {DD_GOODPUT_BIN, "--step", "1e309", "--out", "gp"}), 2);
  EXPECT_NE(read_text(work / "gp2.err").find("finite number"), std::string::npos);
  EXPECT_EQ(run(work, "gp3", {DD_GOODPUT_BIN, "--out", "/proc/none/x"}), 2);  // before simulating
  EXPECT_EQ(read_text(work / "gp3.out").find("goodput"), std::string::npos);
  EXPECT_EQ(run(work, "tr", {DD_NODE_BIN, "train", "--lr", "inf"}), 2);
  EXPECT_NE(read_text(work / "tr.err").find("--lr needs a finite number, got 'inf'"),
            std::string::npos)
      << read_text(work / "tr.err");
  EXPECT_FALSE(fs::exists(work / "gp" / "goodput.json"));
}

struct flag_case {
  std::vector<std::string> argv;
  std::string message;  // a part of the one-line refusal on stderr
};

void expect_refused(const fs::path& work, const flag_case& c, int n) {
  const std::string tag = "flag" + std::to_string(n);
  EXPECT_EQ(run(work, tag, c.argv, 30), 2) << c.argv[0] << " " << c.argv[1];
  const std::string err = read_text(work / (tag + ".err"));
  EXPECT_NE(err.find(c.message), std::string::npos) << err;
  EXPECT_EQ(err.find("terminate called"), std::string::npos) << err;
  EXPECT_EQ(read_text(work / (tag + ".out")), "") << "no work before the refusal";
}

// Every binary: a number flag given junk, and an unknown flag, are refused with exit 2 and a
// line naming the flag, before any work (no output) and never by an uncaught exception.
TEST(bad_flags, every_binary_refuses_a_bad_number_and_an_unknown_flag_with_exit_2) {
  const fs::path work = dd::test::fresh_dir("dd_bad_flags_all");
  std::vector<flag_case> cases = {
      {{DD_NODE_BIN, "train", "--steps", "12x"}, "--steps needs a whole number >= 1, got '12x'"},
      {{DD_NODE_BIN, "train", "--bogus"}, "unknown flag '--bogus'"},
      {{DD_NODE_BIN, "run", "x.lua", "--progress", "x"}, "--progress"},
      {{DD_NODE_BIN, "run", "x.lua", "--script-timeout", "0"},
       "--script-timeout: expected seconds, a number > 0 and at most 86400, got '0'"},
      {{DD_NODE_BIN, "resolve", "x.lua", "--script-timeout", "ten"}, "--script-timeout"},
      {{DD_NODE_BIN, "syncer", "x.lua", "--listen", "127.0.0.1:0", "--script-timeout", "-1"},
       "--script-timeout"},
      {{DD_NODE_BIN, "launch", "x.lua", "--script-timeout", "nan"}, "--script-timeout"},
      {{DD_NODE_BIN, "launch", "x.lua", "--learner-processes", "2x"}, "--learner-processes"},
      {{DD_NODE_BIN, "run", "x.lua", "--bogus"}, "unknown flag '--bogus'"},
      {{DD_NODE_BIN, "sample", "r", "--prompt", "x", "--tokens", "12x"},
       "--tokens needs a whole number in 0..16777216, got '12x'"},
      {{DD_NODE_BIN, "sample", "r", "--prompt", "x", "--temperature", "nan"}, "--temperature"},
      {{DD_NODE_BIN, "sample", "r", "--bogus"}, "unknown flag '--bogus'"},
      {{DD_NODE_BIN, "eval", "r", "--batches", "0"}, "--batches"},
      {{DD_NODE_BIN, "eval", "r", "--train-fraction", "1"}, "--train-fraction"},
      {{DD_NODE_BIN, "eval", "r", "--bogus"}, "unknown flag '--bogus'"},
      {{DD_NODE_BIN, "plot", "r", "--bogus"}, "unknown flag '--bogus'"},
      {{DD_NODE_BIN, "export", "r", "--bogus"}, "unknown flag '--bogus'"},
      {{DD_NODE_BIN, "tokenize", "--vocab", "12x"}, "--vocab"},
      {{DD_NODE_BIN, "tokenize", "--val-fraction", "1"}, "--val-fraction"},
      {{DD_NODE_BIN, "tokenize", "--bogus"}, "unknown flag '--bogus'"},
      {{DD_GOODPUT_BIN, "--days", "x"}, "--days expects a number, got 'x'"},
      {{DD_GOODPUT_BIN, "--bogus"}, "unknown flag '--bogus'"},
      {{DD_GOODPUT_BIN, "--seeds", "0"}, "--seeds must be >= 1, got 0"},
      {{DD_GOODPUT_BIN, "--seed", "1.5"}, "--seed expects a non-negative integer, got '1.5'"},
      {{DD_GOODPUT_BIN, "--strategies", "diloco,nope"},
       "--strategies has an unknown strategy 'nope'"},
      {{DD_GOODPUT_BIN, "--idle-failures", "1"}, "--idle-failures expects yes or no, got '1'"},
      {{DD_GOODPUT_BIN, "--out"}, "--out needs a value"},
      {{DD_CHAOS_BIN, "--bogus"}, "unknown flag '--bogus'"},
  };
#ifdef DD_BENCH_TRAIN_BIN
  cases.push_back({{DD_BENCH_TRAIN_BIN, "--steps", "3x"},
                   "--steps needs a whole number in 1..1048576, got '3x'"});
  cases.push_back({{DD_BENCH_TRAIN_BIN, "--bogus"}, "unknown flag '--bogus'"});
#endif
#ifdef DD_BENCH_SYNC_BIN
  cases.push_back({{DD_BENCH_SYNC_BIN, "--rounds", "abc"},
                   "--rounds needs a whole number in 1..1048576, got 'abc'"});
  cases.push_back({{DD_BENCH_SYNC_BIN, "--bogus", "1"}, "unknown flag '--bogus'"});
#endif
#ifdef DD_BENCH_TRANSPORT_BIN
  cases.push_back({{DD_BENCH_TRANSPORT_BIN, "--repeats", "5x"}, "--repeats"});
  cases.push_back({{DD_BENCH_TRANSPORT_BIN, "--bogus"}, "unknown flag '--bogus'"});
#endif
#ifdef DD_GPU_CHECK_BIN
  cases.push_back({{DD_GPU_CHECK_BIN, "--threads", "x"},
                   "--threads expects a whole number in [0, 4096], got 'x'"});
  cases.push_back({{DD_GPU_CHECK_BIN, "--bogus"}, "unknown flag '--bogus'"});
  cases.push_back(
      {{DD_GPU_CHECK_BIN, "--backend", "gpu"}, "--backend expects cuda or cpu, got 'gpu'"});
  cases.push_back({{DD_GPU_CHECK_BIN, "--device"}, "--device needs a value"});
#endif
  int n = 0;
  for (const auto& c : cases) expect_refused(work, c, n++);
  fs::remove_all(work);
}

// Every command's --help comes from the flag table that parses its flags (util/flags.hpp): it
// exits 0 and lists each flag the command takes.
TEST(help, every_command_lists_every_flag_it_takes) {
  const fs::path work = dd::test::fresh_dir("dd_help_all");
  const std::vector<std::string> experiment = {
      "EXP", "--name", "--set", "--script-timeout", "--run-dir", "--resume", "--overwrite"};
  auto with = [](std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  struct help_case {
    std::vector<std::string> argv;
    std::string usage;
    std::vector<std::string> flags;
  };
  std::vector<help_case> cases = {
      {{DD_NODE_BIN, "run"},
       "usage: dd-node run",
       with(experiment, {"--progress", "--table", "--force-memory", "--http"})},
      {{DD_NODE_BIN, "syncer"},
       "usage: dd-node syncer",
       with(experiment, {"--listen", "--advertise", "--insecure", "--progress", "--heartbeat",
                         "--connection-timeout", "--max-frame-bytes", "--stranger-bytes",
                         "--stranger-connections", "--force-memory", "--http", "--chaos-endpoint",
                         "--message-faults-via-endpoint"})},
      {{DD_NODE_BIN, "launch"},
       "usage: dd-node launch",
       with(experiment, {"--learner-processes", "--syncer-restart-delay", "--port", "--via-proxy",
                         "--no-step-admission", "--progress", "--learner-backoff-cap",
                         "--heartbeat", "--connection-timeout", "--compute-nice", "--force-memory",
                         "--http", "--no-http", "--slurm", "--dry-run"})},
      {{DD_NODE_BIN, "learner"},
       "usage: dd-node learner",
       {"--join",
        "--learners",
        "--learner-ids",
        "--threads",
        "--data",
        "--run-dir",
        "--node-name",
        "--run-id",
        "--join-deadline",
        "--backoff-cap",
        "--connect-timeout",
        "--progress",
        "--seed",
        "--heartbeat",
        "--connection-timeout",
        "--compute-nice",
        "--step-admission",
        "--chaos-endpoint",
        "--message-faults-via-endpoint",
        "--force-memory",
        "--http"}},
      {{DD_NODE_BIN, "status"}, "usage: dd-node status", {"RUN_DIR|HOST:PORT", "--json"}},
      {{DD_NODE_BIN, "drain"}, "usage: dd-node drain", {"learner:N RUN_DIR|HOST:PORT"}},
      {{DD_NODE_BIN, "resolve"},
       "usage: dd-node resolve",
       {"EXP", "--name", "--set", "--script-timeout", "--no-check-files"}},
      {{DD_NODE_BIN, "plot"}, "usage: dd-node plot", {"INPUT", "--out", "--python"}},
      {{DD_NODE_BIN, "export"},
       "usage: dd-node export",
       {"RUN_DIR|FILE OUT", "--format", "--tokenizer"}},
      {{DD_NODE_BIN, "tokenize"},
       "usage: dd-node tokenize",
       {"TEXT...", "--train-tokenizer", "--vocab", "--tokenizer", "--out", "--val-fraction"}},
      {{DD_NODE_BIN, "sample"},
       "usage: dd-node sample",
       {"RUN_DIR|FILE", "--backend", "--threads", "--prompt", "--tokens", "--temperature",
        "--top-k", "--seed", "--tokenizer"}},
      {{DD_NODE_BIN, "eval"},
       "usage: dd-node eval",
       {"RUN_DIR|FILE", "--backend", "--threads", "--data", "--train-fraction", "--batch",
        "--batches"}},
      {{DD_NODE_BIN, "train"},
       "usage: dd-node train",
       {"--data",       "--backend",          "--threads",      "--steps",     "--batch",
        "--context",    "--layers",           "--heads",        "--width",     "--vocab",
        "--lr",         "--warmup",           "--min-lr-ratio", "--grad-clip", "--weight-decay",
        "--eval-every", "--eval-batches",     "--seed",         "--out",       "--checkpoint-every",
        "--resume",     "--require-checksum", "--log-every"}},
      {{DD_CHAOS_BIN, "pause"},
       "usage: dd-chaos pause",
       {"--run-dir", "--nodes", "--dry-run", "--tape", "--for", "--pick", "--seed", "--protect",
        "--exact"}},
      {{DD_CHAOS_BIN, "slow"},
       "usage: dd-chaos slow",
       {"--run-dir", "--nodes", "--dry-run", "--tape", "--for", "--pick", "--seed", "--protect",
        "--exact", "--duty", "--period", "--via"}},
      {{DD_CHAOS_BIN, "net"},
       "usage: dd-chaos net",
       {"--for", "--proxy", "--ms", "--jitter", "--rate", "--p", "--size", "--delay-us", "--bytes",
        "--dir"}},
      {{DD_CHAOS_BIN, "msg"}, "usage: dd-chaos msg", {"--for", "--ms", "--count"}},
      {{DD_CHAOS_BIN, "disk"},
       "usage: dd-chaos disk",
       {"--keep", "--count", "--max-fill", "--reserve"}},
      {{DD_CHAOS_BIN, "random"},
       "usage: dd-chaos random",
       {"--mtbf", "--recovery", "--duration", "--kinds", "--targets", "--max-concurrent",
        "--min-gap", "--no-heal"}},
      {{DD_CHAOS_BIN, "run"},
       "usage: dd-chaos run",
       {"--no-heal", "--set", "--name", "--script-timeout"}},
      {{DD_CHAOS_BIN, "report"},
       "usage: dd-chaos report",
       {"--baseline", "--json", "--loss-tolerance"}},
      {{DD_CHAOS_BIN, "proxy"},
       "usage: dd-chaos proxy",
       {"--control", "--link", "--ports-file", "--seed"}},
      {{DD_CHAOS_BIN, "heal"}, "usage: dd-chaos heal", {"--proxy"}},
      {{DD_CHAOS_BIN, "status"}, "usage: dd-chaos status", {"--proxy"}},
      {{DD_GOODPUT_BIN},
       "usage: dd-goodput",
       {"--table",
        "--scaling",
        "--trace",
        "--seed",
        "--seeds",
        "--strategies",
        "--out",
        "--chips",
        "--slice-chips",
        "--learners",
        "--mtbi-days",
        "--days",
        "--mtbi-seconds",
        "--seconds",
        "--recovery-dist",
        "--recovery-mean",
        "--recovery-cv",
        "--speed-cv",
        "--idle-failures",
        "--restart",
        "--restart-cold",
        "--restart-warm-window",
        "--checkpoint-interval",
        "--checkpoint-write",
        "--downscale-pause",
        "--upscale-pause",
        "--upscale-batch",
        "--pause-overlap",
        "--step",
        "--sync-interval",
        "--outer-sync",
        "--quorum",
        "--quorum-fraction",
        "--max-staleness",
        "--tau",
        "--grace-gamma"}},
  };
#ifdef DD_BENCH_TRAIN_BIN
  cases.push_back({{DD_BENCH_TRAIN_BIN},
                   "usage: dd-bench-train",
                   {"--threads", "--steps", "--batch", "--context", "--layers", "--heads",
                    "--width", "--profile"}});
#endif
#ifdef DD_BENCH_SYNC_BIN
  cases.push_back({{DD_BENCH_SYNC_BIN},
                   "usage: dd-bench-sync",
                   {"--part", "--contributors", "--size-mb", "--tensors", "--repeats", "--threads",
                    "--experiment", "--steps", "--rounds", "--set", "--learners", "--batch",
                    "--width", "--layers", "--heads", "--context"}});
#endif
#ifdef DD_BENCH_TRANSPORT_BIN
  cases.push_back({{DD_BENCH_TRANSPORT_BIN},
                   "usage: dd-bench-transport",
                   {"--size-mb", "--chunk-bytes", "--window", "--repeats", "--warmup", "--learners",
                    "--heartbeat-s", "--connection-timeout-s", "--json", "--oversized-header",
                    "--announce-bytes", "--oversized-connections"}});
#endif
#ifdef DD_BENCH_RECEIVE_BIN
  cases.push_back({{DD_BENCH_RECEIVE_BIN},
                   "usage: dd-bench-receive",
                   {"--size-mb", "--chunk-bytes", "--repeats"}});
#endif
#ifdef DD_GPU_CHECK_BIN
  cases.push_back(
      {{DD_GPU_CHECK_BIN},
       "usage: dd-gpu-check",
       {"--require-device", "--quick", "--no-bench", "--device", "--threads", "--backend"}});
#endif
  int n = 0;
  for (auto c : cases) {
    c.argv.push_back("--help");
    const std::string tag = "help" + std::to_string(n++);
    EXPECT_EQ(run(work, tag, c.argv, 30), 0) << c.usage;
    const std::string out = read_text(work / (tag + ".out"));
    EXPECT_EQ(out.rfind(c.usage, 0), 0u) << out;
    for (const auto& f : c.flags)
      EXPECT_NE(out.find("\n  " + f), std::string::npos) << c.usage << ": " << f << "\n" << out;
  }
  fs::remove_all(work);
}

}  // namespace
