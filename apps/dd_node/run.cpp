// apps/dd_node/run.cpp — `dd-node run <experiment.lua> [flags]`: the main job. Starts the whole
// cluster (health monitor, fragment owners, learners, evaluator) in this process for each
// selected experiment of the file, prints live progress, and writes each run directory
// (events.jsonl, summary.json, experiment.json, run_info.json). With several experiments (e.g.
// examples/baselines.lua) they run one after another on the same machine and a comparison table
// is printed at the end (also written to <first run dir>/../comparison.json).
// Exit codes: 0 ok, 1 runtime failure, 2 bad flags or bad configuration.
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "actors/cluster.hpp"
#include "kernels/all_backends.hpp"
#include "runtime/config/loader.hpp"

namespace dd::app {

namespace {

void print_run_help(FILE* f) {
  std::fprintf(f,
               "usage: dd-node run <experiment.lua> [--name N]... [--set key=value]...\n"
               "                   [--run-dir DIR] [--progress SECONDS] [--table FILE]\n"
               "Runs every selected experiment of the file as one in-process cluster (learners,\n"
               "fragment owners, health monitor, evaluator) and writes its run directory:\n"
               "events.jsonl, summary.json, experiment.json, run_info.json.\n"
               "With several experiments they run one after another and a comparison table is\n"
               "printed (and written as JSON to --table FILE, default runs/comparison.json).\n"
               "  --name N         run only experiment N (repeatable)\n"
               "  --set k=v        override a key of every experiment, e.g. --set budget.steps=50\n"
               "  --run-dir DIR    run directory (one experiment only; default runs/<name>)\n"
               "  --progress S     progress line every S seconds (default 5; 0 = off)\n");
}

std::string table_row(const std::string& name, const nlohmann::json& s, const nlohmann::json& i) {
  auto num = [&](const char* k) { return s.value(k, 0.0); };
  return fmt::format("{:<22} {:>2} {:>2} {:>6} {:>9.4f} {:>10} {:>8.1f} {:>7.3f} {:>7.3f} {:>6.3f} "
                     "{:>7} {:>7.2f} {:>4} {:>9.1f}",
                     name, i.value("learners", 0), i.value("fragments", 0),
                     i.value("synchronous", false) ? "K=M" : "K<M", num("final_val_loss"),
                     s.value("tokens", uint64_t{0}), num("wall_seconds"), num("goodput"),
                     num("effective_goodput"), num("uptime"), s.value("merges", uint64_t{0}),
                     num("mean_contributors_per_merge"), s.value("learner_restarts", uint64_t{0}),
                     static_cast<double>(s.value("bytes_pushed", uint64_t{0})) / 1e6);
}

}  // namespace

/// Entry point of `dd-node run`; argv[0] is "run".
int run_main(int argc, char** argv) {
  std::string file, run_dir, table_path = "runs/comparison.json";
  double progress = 5.0;
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
    } else if (a == "--run-dir") {
      const char* v = need("--run-dir");
      if (v == nullptr) return 2;
      run_dir = v;
    } else if (a == "--progress") {
      const char* v = need("--progress");
      if (v == nullptr) return 2;
      progress = std::atof(v);
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
  auto loaded = config::load_file(file, lo);
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s", loaded.error_text().c_str());
    return 2;
  }
  if (!run_dir.empty() && loaded.experiments.size() > 1) {
    std::fprintf(stderr, "dd-node run: --run-dir needs a single experiment (use --name)\n");
    return 2;
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
  }
  nlohmann::json table = nlohmann::json::array();
  std::vector<std::string> rows;
  for (const auto& exp : loaded.experiments) {
    actors::run_options ro;
    ro.run_dir = run_dir;
    ro.progress_every_s = progress;
    std::printf("== %s: M = %d learners, P = %d fragments, H = %d, K = %s, budget %s\n",
                exp.name.c_str(), exp.learners.count, exp.sync.fragments, exp.sync.interval,
                exp.sync.min_quorum.is_fraction
                    ? fmt::format("{} of live", exp.sync.min_quorum.fraction).c_str()
                    : std::to_string(exp.sync.min_quorum.count).c_str(),
                config::to_json(exp)["budget"].dump().c_str());
    std::fflush(stdout);
    actors::run_result r;
    try {
      r = actors::run_cluster(exp, ro);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "dd-node run: %s: %s\n", exp.name.c_str(), e.what());
      return 1;
    }
    if (!r.finished) {
      std::fprintf(stderr, "dd-node run: %s did not finish\n", exp.name.c_str());
      return 1;
    }
    std::printf("== %s done: %s\n", exp.name.c_str(), r.summary.dump().c_str());
    std::fflush(stdout);
    rows.push_back(table_row(exp.name, r.summary, r.info));
    table.push_back({{"experiment", exp.name}, {"summary", r.summary}, {"info", r.info}});
  }
  if (loaded.experiments.size() > 1) {
    std::printf("\n%-22s %2s %2s %6s %9s %10s %8s %7s %7s %6s %7s %7s %4s %9s\n", "experiment",
                "M", "P", "K", "val_loss", "tokens", "wall_s", "goodput", "eff_gp", "uptime",
                "merges", "contrib", "rst", "MB_pushed");
    for (const auto& row : rows) std::printf("%s\n", row.c_str());
    std::error_code ec;
    auto parent = std::filesystem::path(table_path).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    std::ofstream(table_path) << table.dump(2) << '\n';
    std::printf("comparison written to %s\n", table_path.c_str());
  }
  return 0;
}

}  // namespace dd::app
