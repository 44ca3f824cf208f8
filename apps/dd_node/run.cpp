// apps/dd_node/run.cpp — `dd-node run <experiment.lua> [flags]`: the main job. Starts the whole
// cluster (health monitor, fragment owners, learners, evaluator) in this process for each
// selected experiment of the file, prints live progress, and writes each run directory
// (events.jsonl, summary.json, experiment.json, run_info.json). With several experiments (e.g.
// examples/baselines.lua) they run one after another on the same machine and a comparison table
// is printed at the end (also written as JSON to --table FILE, default runs/comparison.json).
//
// A run directory holds one run: run_job removes an earlier run's summary.json/run_info.json
// and owner checkpoints at the start (and says so on stderr). Every run directory is locked for
// the life of the process (run_lock.hpp). SIGINT / SIGTERM:
// the first one stops the run gracefully (learners stop at their next step boundary, final
// evaluation, summary.json with "interrupted": true; experiments not yet started are skipped);
// a second one exits at once. The handler only touches lock-free atomics (and write/_exit on
// the second signal); run_job's progress loop polls the flag.
// Exit codes: 0 ok, 1 runtime failure (an exception, or a run that failed: it trained no token
// or a learner exhausted its restart budget — summary.json then has "failed": true and
// "failure_reason"), 2 bad flags, bad configuration (including data too small for the learners,
// checked before anything starts) or a run directory in use by another process, 128 + signal
// (130 SIGINT, 143 SIGTERM) when interrupted — after the graceful stop as well as on the
// immediate exit.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "actors/nodes/job_runner.hpp"
#include "actors/nodes/memory_check.hpp"
#include "apps/dd_node/node_flags.hpp"
#include "apps/dd_node/run_lock.hpp"
#include "kernels/all_backends.hpp"
#include "runtime/config/loader.hpp"
#include "util/files.hpp"

namespace dd::app {

namespace {

static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free atomic");
/// The first signal's number (0 = none); polled by run_job.
std::atomic<int> g_interrupt{0};
/// Signals received so far.
std::atomic<int> g_signals{0};

extern "C" void on_stop_signal(int sig) {
  // Async-signal-safe only: lock-free atomics, write(2), _exit(2).
  if (g_signals.fetch_add(1) >= 1) {
    static const char msg[] = "dd-node run: second signal, exiting at once\n";
    ssize_t ignored = ::write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)ignored;
    ::_exit(128 + sig);
  }
  g_interrupt.store(sig);
}

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

void print_run_help(FILE* f) {
  std::fprintf(f,
               "usage: dd-node run <experiment.lua> [--name N]... [--set key=value]...\n"
               "                   [--run-dir DIR] [--progress SECONDS] [--table FILE]\n"
               "                   [--script-timeout SECONDS] [--resume | --overwrite]\n"
               "                   [--force-memory] [--http HOST:PORT]\n"
               "Runs every selected experiment of the file as one in-process cluster (learners,\n"
               "fragment owners, health monitor, evaluator) and writes its run directory:\n"
               "events.jsonl, summary.json, experiment.json, run_info.json.\n"
               "With several experiments they run one after another and a comparison table is\n"
               "printed (and written as JSON to --table FILE, default runs/comparison.json).\n"
               "  --name N         run only experiment N (repeatable)\n"
               "  --set k=v        override a key of every selected experiment, e.g.\n"
               "                   --set budget.steps=50 (applied after --name selects)\n"
               "  --run-dir DIR    run directory (one experiment only; default runs/<name>);\n"
               "                   also moves the owner checkpoints to DIR/checkpoints unless\n"
               "                   the experiment sets checkpoint.dir\n"
               "  --progress S     progress line every S seconds (a number >= 0; default 5;\n"
               "                   0 = off)\n"
               "  --table FILE     where the comparison table of several experiments is\n"
               "                   written as JSON (default runs/comparison.json)\n"
               "  --script-timeout S  wall-clock limit of evaluating the experiment file (and\n"
               "                   --set values), seconds > 0 (default 10); the script runs in\n"
               "                   a child process that is killed at the limit\n"
               "  --resume         continue the run in the run directory (one experiment) that\n"
               "                   crashed or was interrupted: same run id, owners restored from\n"
               "                   their checkpoints (or rebuilt), learners from the monitor's\n"
               "                   record (monitor.json); the budget counts both parts and\n"
               "                   summary.json says \"resumed\": true\n"
               "  --overwrite      replace the unfinished run in the run directory\n"
               "  --force-memory   start even when the memory estimate (dd-node resolve prints\n"
               "                   it) exceeds the available memory or the address-space limit\n"
               "                   (RLIMIT_AS); without it such a run is refused (exit 2)\n"
               "  --http HOST:PORT serve /metrics (Prometheus), /healthz, /readyz and /status\n"
               "                   (JSON) on this loopback address while the run lasts (port\n"
               "                   0 = any; printed); off by default\n"
               "A run directory holds one run: without --resume a new run replaces what a\n"
               "finished one left there (summary.json, run_info.json, events.jsonl, owner\n"
               "checkpoints, and a cluster run's nodes.json, chaos.jsonl, nodes/, logs/); an\n"
               "unfinished run (crashed or killed: no summary.json) is refused without\n"
               "--resume or --overwrite, as by dd-node launch and dd-node syncer.\n"
               "A run directory is locked (DIR/LOCK) while a run uses it: a second run on it\n"
               "exits with status 2. SIGINT/SIGTERM stops gracefully (summary.json gets\n"
               "\"interrupted\": true; exit status 130/143); a second signal exits at once.\n"
               "Exit status: 0 ok; 1 runtime failure (also a run that trained no token or lost\n"
               "a learner for good: summary.json gets \"failed\": true); 2 bad flags, bad\n"
               "configuration (e.g. a data file too small for the learners) or a locked run\n"
               "directory; 130/143 interrupted.\n");
}

std::string table_row(const std::string& name, const nlohmann::json& s, const nlohmann::json& i) {
  auto num = [&](const char* k) {
    auto it = s.find(k);
    return it != s.end() && it->is_number() ? it->get<double>() : std::nan("");
  };
  return fmt::format(
      "{:<22} {:>2} {:>2} {:>6} {:>9.4f} {:>8.4f} {:>10} {:>8.1f} {:>7.3f} {:>7.3f} {:>6.3f} "
      "{:>7} {:>7.2f} {:>4} {:>9.1f}",
      name, i.value("learners", 0), i.value("fragments", 0),
      i.value("synchronous", false) ? "K=M" : "K<M", num("final_val_loss"), num("final_val_bpb"),
      s.value("tokens", uint64_t{0}), num("wall_seconds"), num("goodput"), num("effective_goodput"),
      num("uptime"), s.value("merges", uint64_t{0}), num("mean_contributors_per_merge"),
      s.value("learner_restarts", uint64_t{0}),
      static_cast<double>(s.value("bytes_pushed", uint64_t{0})) / 1e6);
}

/// Parses the value of a numeric flag: a finite number >= 0, the whole string. False (with a
/// message on stderr) otherwise.
bool parse_seconds(const char* flag, const char* text, double& out) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (end == text || *end != '\0' || errno == ERANGE || !std::isfinite(v) || v < 0.0) {
    std::fprintf(stderr, "dd-node run: %s needs a number of seconds >= 0 (0 = off), got '%s'\n",
                 flag, text);
    return false;
  }
  out = v;
  return true;
}

}  // namespace

/// Entry point of `dd-node run`; argv[0] is "run".
int run_main(int argc, char** argv) {
  std::string file, run_dir, table_path = "runs/comparison.json";
  double progress = 5.0;
  bool resume = false, overwrite = false, force_memory = false;
  std::pair<std::string, uint16_t> http;
  config::load_options lo;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto need = [&](const char* flag) -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "dd-node run: %s needs a value\n", flag);
        return nullptr;
      }
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      print_run_help(stdout);
      return 0;
    } else if (a == "--name") {
      const char* v = need("--name");
      if (v == nullptr) return 2;
      lo.names.emplace_back(v);
    } else if (a == "--set") {
      const char* v = need("--set");
      if (v == nullptr) return 2;
      lo.overrides.emplace_back(v);
    } else if (a == "--resume") {
      resume = true;
    } else if (a == "--overwrite") {
      overwrite = true;
    } else if (a == "--force-memory") {
      force_memory = true;
    } else if (a == "--http") {
      const char* v = need("--http");
      if (v == nullptr || !parse_http_flag("dd-node run", v, false, http)) return 2;
    } else if (a == "--run-dir") {
      const char* v = need("--run-dir");
      if (v == nullptr) return 2;
      run_dir = v;
    } else if (a == "--progress") {
      const char* v = need("--progress");
      if (v == nullptr || !parse_seconds("--progress", v, progress)) return 2;
    } else if (a == "--script-timeout") {
      const char* v = need("--script-timeout");
      std::string why;
      if (v == nullptr) return 2;
      if (!config::parse_script_timeout(v, lo.script_timeout, why)) {
        std::fprintf(stderr, "dd-node run: %s\n", why.c_str());
        return 2;
      }
    } else if (a == "--table") {
      const char* v = need("--table");
      if (v == nullptr) return 2;
      table_path = v;
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "dd-node run: unknown flag '%s'\n", a.c_str());
      print_run_help(stderr);
      return 2;
    } else if (file.empty()) {
      file = a;
    } else {
      std::fprintf(stderr, "dd-node run: more than one experiment file given\n");
      return 2;
    }
  }
  if (file.empty()) {
    print_run_help(stderr);
    return 2;
  }
  lo.run_dir = run_dir;  // moves the default checkpoint.dir with it
  auto loaded = config::load_file(file, lo);
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s", loaded.error_text().c_str());
    return 2;
  }
  if (resume && overwrite) {
    std::fprintf(stderr, "dd-node run: --resume and --overwrite exclude each other\n");
    return 2;
  }
  if (resume && loaded.experiments.size() > 1) {
    std::fprintf(stderr, "dd-node run: --resume needs a single experiment (use --name)\n");
    return 2;
  }
  if (!run_dir.empty() && loaded.experiments.size() > 1) {
    std::fprintf(stderr, "dd-node run: --run-dir needs a single experiment (use --name)\n");
    return 2;
  }
  // Process and network faults act on node processes and links from outside: a single
  // process cannot fire them at itself.
  for (const auto& exp : loaded.experiments) {
    bool refused = false;
    for (size_t i = 0; i < exp.chaos.events.size(); ++i) {
      const auto& ev = exp.chaos.events[i];
      const auto layer = config::chaos_layer_of(ev.action);
      if (layer == config::chaos_layer::in_process) continue;
      std::fprintf(stderr,
                   "%s: chaos.events[%zu]: action '%s' is a %s fault fired from outside the "
                   "nodes: run it with `dd-node launch %s` (which starts dd-chaos with the chaos "
                   "section) or `dd-chaos run %s --run-dir DIR` against a running cluster; "
                   "`dd-node run` runs only in-process actions (kill, slow, drop_push, "
                   "delay_push, kill_owner and the message kinds)\n",
                   ev.where.c_str(), i + 1, config::to_string(ev.action),
                   layer == config::chaos_layer::process   ? "process"
                   : layer == config::chaos_layer::network ? "network"
                                                           : "disk",
                   file.c_str(), file.c_str());
      refused = true;
    }
    if (exp.chaos.random.cluster_mtbf_seconds > 0) {
      std::fprintf(stderr,
                   "%s: chaos.random.cluster_mtbf_seconds: whole-cluster random faults are drawn "
                   "and fired by dd-chaos: run it with `dd-node launch %s`, or use "
                   "chaos.random.mtbf_seconds (per actor, in-process)\n",
                   exp.chaos.random.where.c_str(), file.c_str());
      refused = true;
    }
    if (refused) return 2;
  }
  kernels::init_all_backends();
  // Refuse before anything starts when a requested backend cannot be created here (e.g. cuda
  // without a device): otherwise every learner would die at spawn and exhaust its restarts.
  for (const auto& exp : loaded.experiments) {
    try {
      (void)kernels::make_backend(config::to_string(exp.learners.backend), {1, 0});
    } catch (const std::exception& e) {
      std::fprintf(stderr, "dd-node run: %s: learners.backend = \"%s\": %s\n", exp.name.c_str(),
                   config::to_string(exp.learners.backend), e.what());
      return 2;
    }
    // Likewise when the data cannot feed every learner (a shard shorter than 2·T+1 tokens) or
    // the evaluator: every learner would throw at spawn, exhaust its restarts, and the run
    // would end having trained nothing.
    try {
      actors::check_experiment_data(exp);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "dd-node run: %s: %s\n", exp.name.c_str(), e.what());
      return 2;
    }
    // And when the run cannot fit in memory: every learner would fail to allocate its model or
    // activations and the run would end having trained nothing (or be killed by the kernel).
    if (auto why =
            actors::check_before_start(exp, actors::start_check_for::whole_run, 0, force_memory);
        !why.empty()) {
      std::fprintf(stderr, "dd-node run: %s: %s\n", exp.name.c_str(), why.c_str());
      return 2;
    }
  }
  // The comparison table's file must be writable before hours of training are spent.
  if (loaded.experiments.size() > 1) {
    // (Checked without creating it: a run that fails must not leave a 0-byte table behind.)
    std::error_code ec;
    auto parent = std::filesystem::path(table_path).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    const std::string folder = parent.empty() ? std::string(".") : parent.string();
    std::string why;
    if (ec)
      why = ec.message();
    else if (::access(folder.c_str(), W_OK) != 0)
      why = "its folder '" + folder + "': " + util::errno_text(errno);
    else if (std::filesystem::is_directory(table_path, ec))
      why = "it is a directory";
    if (!why.empty()) {
      std::fprintf(stderr, "dd-node run: --table %s: cannot write this file (%s)\n",
                   table_path.c_str(), why.c_str());
      return 2;
    }
  }
  // Lock every run directory, and every checkpoint directory outside its run directory (a run
  // deletes its fragments' old checkpoints as it starts), before anything is written.
  std::vector<run_dir_lock> locks;
  std::vector<std::string> locked;
  auto lock_dir = [&](const std::string& dir, const std::string& name, bool checkpoints) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    std::string key =
        std::filesystem::weakly_canonical(std::filesystem::absolute(dir), ec).string();
    if (ec) key = dir;
    if (std::find(locked.begin(), locked.end(), key) != locked.end()) return true;
    std::string error;
    auto lock = checkpoints ? run_dir_lock::acquire(dir, error, "checkpoint directory",
                                                    "point checkpoint.dir elsewhere")
                            : run_dir_lock::acquire(dir, error);
    if (!lock.held()) {
      std::fprintf(stderr, "dd-node run: %s: %s\n", name.c_str(), error.c_str());
      return false;
    }
    locks.push_back(std::move(lock));
    locked.push_back(key);
    return true;
  };
  for (const auto& exp : loaded.experiments) {
    const std::string dir = !run_dir.empty()       ? run_dir
                            : !exp.run_dir.empty() ? exp.run_dir
                                                   : "runs/" + exp.name;
    if (!lock_dir(dir, exp.name, false)) return 2;
    if (!exp.checkpoint.dir.empty() && checkpoint_dir_outside(dir, exp.checkpoint.dir) &&
        !lock_dir(exp.checkpoint.dir, exp.name + ": checkpoint.dir", true))
      return 2;
    // The rule of dd-node launch and dd-node syncer: an unfinished run is never replaced
    // silently.
    if (!resume && !overwrite && inspect_run_dir(dir) == run_dir_state::unfinished) {
      std::fprintf(stderr,
                   "dd-node run: %s: run directory '%s' holds an unfinished run (no "
                   "summary.json): continue it with --resume, or replace it with --overwrite\n",
                   exp.name.c_str(), dir.c_str());
      return 2;
    }
  }
  if (!resume)
    for (const auto& exp : loaded.experiments) {
      const std::string dir = !run_dir.empty()       ? run_dir
                              : !exp.run_dir.empty() ? exp.run_dir
                                                     : "runs/" + exp.name;
      const auto removed = clear_cluster_files(dir);
      std::string names;
      for (const auto& n : removed) names += (names.empty() ? "" : ", ") + n;
      if (!names.empty())
        std::fprintf(stderr, "dd-node run: %s: removed the earlier cluster run's %s from '%s'\n",
                     exp.name.c_str(), names.c_str(), dir.c_str());
    }
  if (resume) {
    // What can be continued: a run that crashed (events but no summary.json) or one that was
    // interrupted (summary.json says so). A finished run or an empty directory cannot.
    const auto& exp = loaded.experiments.front();
    const std::string dir = !run_dir.empty()       ? run_dir
                            : !exp.run_dir.empty() ? exp.run_dir
                                                   : "runs/" + exp.name;
    if (const auto why = why_not_resumable(dir); !why.empty()) {
      std::fprintf(stderr, "dd-node run: --resume: run directory '%s' holds %s\n", dir.c_str(),
                   why.c_str());
      return 2;
    }
    if (const auto why = experiment_change_on_resume(dir, config::to_json(exp)); !why.empty()) {
      std::fprintf(stderr, "dd-node run: --resume: run directory '%s' holds %s\n", dir.c_str(),
                   why.c_str());
      return 2;
    }
  }
  install_stop_handlers();
  // Each row names its run directory, where `dd-node plot TABLE` finds the experiment's curves.
  auto dir_of = [&](const config::experiment& exp) {
    return !run_dir.empty() ? run_dir : !exp.run_dir.empty() ? exp.run_dir : "runs/" + exp.name;
  };
  nlohmann::json table = nlohmann::json::array();
  std::vector<std::string> rows;
  int failed = 0;
  for (const auto& exp : loaded.experiments) {
    if (g_interrupt.load() != 0) break;  // interrupted between two experiments
    actors::run_options ro;
    ro.run_dir = run_dir;
    ro.progress_every_s = progress;
    ro.interrupt = &g_interrupt;
    ro.resume = resume;
    ro.http = http;
    std::printf("== %s: M = %d learners, P = %d fragments, H = %d, K = %s, budget %s\n",
                exp.name.c_str(), exp.learners.count, exp.sync.fragments, exp.sync.interval,
                exp.sync.min_quorum.is_fraction
                    ? fmt::format("{} of live", exp.sync.min_quorum.fraction).c_str()
                    : std::to_string(exp.sync.min_quorum.count).c_str(),
                config::to_json(exp)["budget"].dump().c_str());
    std::fflush(stdout);
    actors::run_result r;
    try {
      r = actors::run_job(exp, ro);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "dd-node run: %s: %s\n", exp.name.c_str(), e.what());
      return 1;
    }
    if (!r.finished) {
      std::fprintf(stderr, "dd-node run: %s did not finish\n", exp.name.c_str());
      return 1;
    }
    // A readable summary; every key is in <run_dir>/summary.json.
    std::printf("%s", actors::summary_text(exp.name, r, dir_of(exp)).c_str());
    std::fflush(stdout);
    if (r.failed) {
      ++failed;
      std::fprintf(stderr, "dd-node run: %s failed: %s\n", exp.name.c_str(),
                   r.failure_reason.c_str());
      std::fflush(stderr);
    }
    rows.push_back(table_row(exp.name, r.summary, r.info));
    table.push_back({{"experiment", exp.name},
                     {"run_dir", dir_of(exp)},
                     {"summary", r.summary},
                     {"info", r.info}});
  }
  if (loaded.experiments.size() > 1) {
    std::printf("\n%-22s %2s %2s %6s %9s %8s %10s %8s %7s %7s %6s %7s %7s %4s %9s\n", "experiment",
                "M", "P", "K", "val_loss", "val_bpb", "tokens", "wall_s", "goodput", "eff_gp",
                "uptime", "merges", "contrib", "rst", "MB_pushed");
    for (const auto& row : rows) std::printf("%s\n", row.c_str());
    if (auto st = util::write_file_atomic(table_path, table.dump(2) + "\n"); !st) {
      std::fprintf(stderr, "dd-node run: --table %s: writing the comparison failed: %s\n",
                   table_path.c_str(), st.message.c_str());
      ++failed;
    } else {
      std::printf("comparison written to %s\n", table_path.c_str());
    }
  }
  if (const int sig = g_interrupt.load(); sig != 0) return 128 + sig;
  if (failed > 0) {
    if (loaded.experiments.size() > 1)
      std::fprintf(stderr, "dd-node run: %d of %zu experiments failed\n", failed,
                   loaded.experiments.size());
    return 1;
  }
  return 0;
}

}  // namespace dd::app
