// apps/dd_node/run.cpp — `dd-node run <experiment.lua> [flags]`: the main job. Starts the whole
// cluster (health monitor, fragment owners, learners, evaluator) in this process for each
// selected experiment of the file, prints live progress, and writes each run directory
// (events.jsonl, summary.json, experiment.json, run_info.json). With several experiments (e.g.
// examples/baselines.lua) they run one after another on the same machine and a comparison table
// is printed at the end (also written as JSON to --table FILE, default runs/comparison.json) —
// only when every experiment's final evaluation scored the same validation windows.
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
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "actors/nodes/job_runner.hpp"
#include "actors/nodes/memory_check.hpp"
#include "apps/dd_node/job_output.hpp"
#include "apps/dd_node/node_flags.hpp"
#include "apps/dd_node/run_lock.hpp"
#include "kernels/all_backends.hpp"
#include "runtime/config/loader.hpp"
#include "runtime/config/run_dir_default.hpp"
#include "runtime/model_file.hpp"
#include "util/files.hpp"
#include "util/flags.hpp"

namespace dd::app {

namespace {

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

/// The flags of `dd-node run`, and what the parse made of them. The runs' options are parsed
/// straight into `ro`.
struct run_flags {
  experiment_args ea;
  actors::run_options ro;
  std::string table_path = "runs/comparison.json";
  bool force_memory = false;
  std::string http_text;
  // From the flags, once parsed.
  run_dir_mode mode{};
};

/// Parses `dd-node run`'s flags into `o` (help generated from the same table); the exit status
/// when the command ends here (--help, a bad flag).
std::optional<int> parse_run_flags(int argc, char** argv, run_flags& o) {
  util::flag_table t("dd-node run", "EXP [flags]",
                     "Runs every selected experiment of the file as one in-process cluster "
                     "(learners,\nfragment owners, health monitor, evaluator) and writes its run "
                     "directory:\nevents.jsonl, summary.json, experiment.json, run_info.json, "
                     "model.safetensors.\nWith several experiments they run one after another and "
                     "a comparison table is printed.");
  add_experiment_flags(t, o.ea);
  t.seconds("--progress", &o.ro.progress_every_s,
            "progress line every S seconds (default 5; 0 = off)")
      .text("--table", &o.table_path, "FILE",
            "where the comparison table of several experiments is written as JSON (default "
            "runs/comparison.json)");
  add_force_memory_flag(t, &o.force_memory, "the memory estimate",
                        "such a run is refused (exit 2)");
  add_http_flag(t, &o.http_text, "Loopback only, while the run lasts");
  t.epilog(
      "A run directory holds one run: without --resume a new run replaces what a\n"
      "finished one left there (summary.json, run_info.json, events.jsonl, owner\n"
      "checkpoints, and a cluster run's nodes.json, chaos.jsonl, nodes/, logs/); an\n"
      "unfinished run (crashed or killed: no summary.json) or an interrupted one\n"
      "(summary.json with \"interrupted\") is refused without --resume or\n"
      "--overwrite, as by dd-node launch and dd-node syncer. --resume and\n"
      "--run-dir need a single experiment (select it with --name).\n"
      "A run directory is locked (DIR/LOCK) while a run uses it: a second run on it\n"
      "exits with status 2. SIGINT/SIGTERM stops gracefully (summary.json gets\n"
      "\"interrupted\": true; exit status 130/143); a second signal exits at once.\n"
      "Exit status: 0 ok; 1 runtime failure (also a run that trained no token or lost\n"
      "a learner for good: summary.json gets \"failed\": true); 2 bad flags, bad\n"
      "configuration (e.g. a data file too small for the learners) or a locked run\n"
      "directory; 130/143 interrupted.\n");
  if (auto rc = t.parse(argc, argv)) return rc;
  if (!o.http_text.empty() && !parse_http_flag("dd-node run", o.http_text, false, o.ro.http))
    return 2;
  if (!o.ea.mode("dd-node run", o.mode)) return 2;
  return std::nullopt;
}

/// --resume and --run-dir need a single experiment. False after one line on stderr.
bool check_selection(const run_flags& o, const config::load_result& loaded) {
  if (o.ea.resume && loaded.experiments.size() > 1) {
    std::fprintf(stderr, "dd-node run: --resume needs a single experiment (use --name)\n");
    return false;
  }
  if (!o.ea.load.run_dir.empty() && loaded.experiments.size() > 1) {
    std::fprintf(stderr, "dd-node run: --run-dir needs a single experiment (use --name)\n");
    return false;
  }
  return true;
}

/// Process, network and disk faults act on node processes and links from outside: a single
/// process cannot fire them at itself. False after one line on stderr for each.
bool in_process_faults_only(const config::experiment& exp, const std::string& file) {
  bool refused = false;
  for (size_t i = 0; i < exp.chaos.events.size(); ++i) {
    const auto& ev = exp.chaos.events[i];
    const auto layer = config::fault_layer_of(ev.action);
    if (layer == config::fault_layer::in_process) continue;
    std::fprintf(stderr,
                 "%s: chaos.events[%zu]: action '%s' is a %s fault fired from outside the "
                 "nodes: run it with `dd-node launch %s` (which starts dd-chaos with the chaos "
                 "section) or `dd-chaos run %s --run-dir DIR` against a running cluster; "
                 "`dd-node run` runs only in-process actions (kill_learner, slow_learner, "
                 "drop_push, delay_push, kill_owner and the message kinds)\n",
                 ev.where.c_str(), i + 1, config::dsl_name(ev.action),
                 layer == config::fault_layer::process   ? "process"
                 : layer == config::fault_layer::network ? "network"
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
  return !refused;
}

/// Refused before anything starts, else every learner would die at spawn and exhaust its
/// restarts, and the run would end having trained nothing: a requested backend that cannot be
/// created here (e.g. cuda without a device), data that cannot feed every learner (a shard
/// shorter than 2·T+1 tokens) or the evaluator, a run that cannot fit in memory (or would be
/// killed by the kernel). False after one line on stderr.
bool check_runnable(const config::experiment& exp, bool force_memory) {
  try {
    (void)kernels::make_backend(config::to_string(exp.learners.backend), {1, 0});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dd-node run: %s: learners.backend = \"%s\": %s\n", exp.name.c_str(),
                 config::to_string(exp.learners.backend), e.what());
    return false;
  }
  if (auto why = actors::check_startable(exp, actors::start_check_for::whole_run, force_memory);
      !why.empty()) {
    std::fprintf(stderr, "dd-node run: %s: %s\n", exp.name.c_str(), why.c_str());
    return false;
  }
  return true;
}

/// The comparison table's file must be writable before hours of training are spent (checked
/// without creating it: a run that fails must not leave a 0-byte table behind). False after one
/// line on stderr.
bool table_writable(const std::string& table_path) {
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
  if (why.empty()) return true;
  std::fprintf(stderr, "dd-node run: --table %s: cannot write this file (%s)\n", table_path.c_str(),
               why.c_str());
  return false;
}

/// What the experiments run so far came to: the comparison table's JSON and lines, and how
/// many failed.
struct run_outcomes {
  nlohmann::json table = nlohmann::json::array();
  std::vector<std::string> rows;
  int failed = 0;
};

/// Runs the experiments one after another (until a signal), each reported and added to `out`;
/// 1 when one threw or did not finish (the command ends there).
std::optional<int> run_experiments(const run_flags& o, const config::load_result& loaded,
                                   run_outcomes& out) {
  const std::string& run_dir = o.ea.load.run_dir;  // moves the default checkpoint.dir with it
  // Each row names its run directory, where `dd-node plot TABLE` finds the experiment's curves.
  auto dir_of = [&](const config::experiment& exp) {
    return !run_dir.empty() ? run_dir : config::run_dir_of(exp);
  };
  for (const auto& exp : loaded.experiments) {
    if (g_node_interrupt.load() != 0) break;  // interrupted between two experiments
    actors::run_options ro = o.ro;
    o.ea.apply(ro);
    std::printf("== %s: M = %d learners, P = %d fragments, H = %d, K = %s, budget %s\n",
                exp.name.c_str(), exp.learners.count, exp.sync.fragments, exp.sync.interval,
                exp.sync.min_quorum.is_fraction()
                    ? fmt::format("{} of live", exp.sync.min_quorum.fraction).c_str()
                    : std::to_string(exp.sync.min_quorum.count).c_str(),
                config::to_json(exp)["budget"].dump().c_str());
    std::fflush(stdout);
    const auto ran = run_job_or_say("dd-node run", exp, ro);
    if (!ran) return 1;
    const actors::run_result& r = *ran;
    if (!r.finished) {
      std::fprintf(stderr, "dd-node run: %s did not finish\n", exp.name.c_str());
      return 1;
    }
    if (report_job_result("dd-node run", exp.name, r, dir_of(exp))) ++out.failed;
    out.rows.push_back(table_row(exp.name, r.summary, r.info));
    out.table.push_back({{"experiment", exp.name},
                         {"run_dir", dir_of(exp)},
                         {"summary", r.summary},
                         {"info", r.info}});
  }
  return std::nullopt;
}

/// With several experiments: the comparison table, printed and written to --table, only when
/// every experiment was scored on the same validation windows (else that counts as a failure,
/// as does a table not written).
void print_comparison(const run_flags& o, size_t experiments, run_outcomes& out) {
  std::string not_comparable;
  for (size_t i = 1; i < out.table.size() && not_comparable.empty(); ++i) {
    const auto why =
        scoring_difference(out.table[0]["summary"].value("final_eval", nlohmann::json()),
                           out.table[i]["summary"].value("final_eval", nlohmann::json()));
    if (!why.empty())
      not_comparable = fmt::format("{} and {} were scored on different validation windows ({})",
                                   out.table[0]["experiment"].get<std::string>(),
                                   out.table[i]["experiment"].get<std::string>(), why);
  }
  if (!not_comparable.empty()) {
    std::fprintf(stderr, "dd-node run: no comparison table: %s\n", not_comparable.c_str());
    ++out.failed;
    return;
  }
  if (experiments <= 1) return;
  std::printf("\n%-22s %2s %2s %6s %9s %8s %10s %8s %7s %7s %6s %7s %7s %4s %9s\n", "experiment",
              "M", "P", "K", "val_loss", "val_bpb", "tokens", "wall_s", "goodput", "eff_gp",
              "uptime", "merges", "contrib", "rst", "MB_pushed");
  for (const auto& row : out.rows) std::printf("%s\n", row.c_str());
  if (auto st = util::write_file_atomic(o.table_path, out.table.dump(2) + "\n"); !st) {
    std::fprintf(stderr, "dd-node run: --table %s: writing the comparison failed: %s\n",
                 o.table_path.c_str(), st.message.c_str());
    ++out.failed;
  } else {
    std::printf("comparison written to %s\n", o.table_path.c_str());
  }
}

}  // namespace

/// Entry point of `dd-node run`; argv[0] is "run".
int run_main(int argc, char** argv) {
  run_flags o;
  if (auto rc = parse_run_flags(argc, argv, o)) return *rc;
  config::load_result loaded;
  if (!o.ea.load_experiments("dd-node run", /*single=*/false, loaded)) return 2;
  if (!check_selection(o, loaded)) return 2;
  for (const auto& exp : loaded.experiments)
    if (!in_process_faults_only(exp, o.ea.file())) return 2;
  kernels::init_all_backends();
  for (const auto& exp : loaded.experiments)
    if (!check_runnable(exp, o.force_memory)) return 2;
  if (loaded.experiments.size() > 1 && !table_writable(o.table_path)) return 2;
  // Every run directory (and checkpoint directory outside it) is locked and checked before
  // anything is written.
  run_dir_opener dirs("dd-node run", o.mode, /*name_in_lines=*/true);
  for (const auto& exp : loaded.experiments)
    if (!dirs.open(exp)) return 2;
  dirs.begin();
  install_node_stop_handlers("dd-node run");
  run_outcomes out;
  if (auto rc = run_experiments(o, loaded, out)) return *rc;
  print_comparison(o, loaded.experiments.size(), out);
  if (const int sig = g_node_interrupt.load(); sig != 0) return 128 + sig;
  if (out.failed > 0) {
    if (loaded.experiments.size() > 1)
      std::fprintf(stderr, "dd-node run: %d of %zu experiments failed\n", out.failed,
                   loaded.experiments.size());
    return 1;
  }
  return 0;
}

}  // namespace dd::app
