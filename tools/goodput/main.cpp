// tools/goodput/main.cpp — dd-goodput: goodput and uptime of data-parallel, elastic
// data-parallel, DiLoCo and Decoupled DiLoCo on a failing cluster (docs/goodput.md).
//
//   dd-goodput --table --out goodput-out      # the N × M grid, JSON + CSV (dd-node plot draws it)
//   dd-goodput --chips 1200000 --learners 8   # one cluster, every strategy
//   dd-goodput --scaling                      # wall time against N and simulated days
//
// Exit status: 0 ok; 1 an output file could not be written (the message names it; files are
// replaced atomically, so none is left 0-byte or torn) or an unexpected error; 2 bad flags or a
// configuration the simulator refuses (checked for every cell before any simulation runs).
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tools/goodput/sim.hpp"
#include "util/files.hpp"
#include "util/parse.hpp"

namespace {

using dd::goodput::sim_config;
using dd::goodput::sim_result;
using dd::goodput::strategy;

const char* usage =
    R"(dd-goodput — goodput simulator: data-parallel vs Decoupled DiLoCo on a failing cluster.

Modes
  (default)              simulate --chips with every strategy (DiLoCo variants with --learners)
  --table                the grid N in {150k,300k,600k,1.2M,2.4M} x M in {2,4,8,16}
  --scaling              wall time of one run against N and against simulated days
  --trace FILE           one Decoupled DiLoCo run (--seed) of --chips: write its failure
                         trace as a dd-chaos scenario FILE (each failure of learner g's
                         slice = kill "learner:g", held down for its repair time) and
                         FILE.json (the trace and the simulator's goodput and uptime for
                         it), for simulation in the loop: replay FILE with `dd-chaos run`
                         on `dd-node launch` and set the run's goodput beside the prediction
Run control
  --seed S               first seed (default 1); run k uses seed S+k. Printed with every run.
  --seeds K              seeds per cell (default 5); the table shows mean ± std-dev
  --strategies LIST      comma list of data_parallel,elastic_dp,diloco,decoupled_diloco
  --out DIR              write DIR/goodput.json, goodput.csv (default goodput-out);
                         `dd-node plot DIR` draws DIR/figures/goodput.png
Cluster and failures (defaults: docs/goodput.md, "Parameters")
  --chips N              allocated chips, spares not counted            [1200000]
  --slice-chips S        chips per slice = failure domain               [256]
  --learners M           learners (DiLoCo, Decoupled DiLoCo)            [8]
  --mtbi-days D          mean time between interruptions of ONE chip    [365]
  --days T               simulated wall time                            [30]
  --mtbi-seconds X       --mtbi-days in seconds (a trace for a short real run)
  --seconds T            --days in seconds
  --recovery-dist K      fixed | exponential | lognormal                [lognormal]
  --recovery-mean SEC    mean time until a failed slice (or hot spare) is usable [60]
  --recovery-cv C        coefficient of variation (lognormal)           [0.5]
  --speed-cv C           per-chip speed variation (lognormal CV)        [0]
  --idle-failures Y      no: only chips under load fail; yes: idle chips of a stalled
                         or paused job fail too (failures pile up in the stall) [no]
Data-parallel without elasticity
  --restart SEC          WARM relaunch once the slice is back: the failure came within
                         --restart-warm-window of the previous relaunch's end, so hosts
                         kept processes, program and staged checkpoint  [5]
  --restart-cold SEC     COLD relaunch: reschedule, start, compile/load, read checkpoint
                         from storage; also every DiLoCo learner respawn (>= --restart) [35]
  --restart-warm-window SEC  W: failures less than W after a relaunch ended get a warm
                         relaunch; 0 = always cold                       [45]
  --checkpoint-interval SEC  training time between checkpoints; -1 = Young's optimum
                         sqrt(2 x write x MTBF); 0 = every step, free    [0]
  --checkpoint-write SEC training blocked per checkpoint write          [0]
Elastic data-parallel and every learner of the DiLoCo variants
  --downscale-pause SEC  global pause to drop a failed slice            [18]
  --upscale-pause SEC    global pause to add a returned slice           [14]
  --upscale-batch SEC    a returned slice waits up to this long to join at the next
                         downscale for free, else an upscale pause adds it; 0 = at once [60]
  --pause-overlap K      serial | coalesce                              [serial]
  --step SEC             inner step time; a failure loses the step in flight [1]
DiLoCo / Decoupled DiLoCo
  --sync-interval H      inner steps between syncs of a fragment        [24]
  --outer-sync SEC       DiLoCo blocking outer all-reduce per round     [2]
  --quorum K             Decoupled DiLoCo min quorum as a count         [1]
  --quorum-fraction F    ... or as a fraction of live learners (0 = use --quorum) [0]
  --max-staleness V      versions                                       [4]
  --tau T                overlap τ in steps (grace window input)        [2]
  --grace-gamma G        grace safety margin γ                          [0.8]
)";

struct options {
  sim_config cfg;
  bool table = false, scaling = false;
  std::string trace;  ///< --trace FILE
  std::uint64_t seed = 1, seeds = 5;
  std::string out = "goodput-out";
  std::vector<strategy> strategies = {strategy::data_parallel, strategy::elastic_dp,
                                      strategy::diloco, strategy::decoupled_diloco};
};

[[noreturn]] void die(const std::string& msg) {
  std::cerr << "dd-goodput: " << msg << "\n(see dd-goodput --help)\n";
  std::exit(2);
}

double to_double(const std::string& flag, const std::string& v) {
  double d = 0;
  if (dd::util::parse_number(v, d)) return d;
  if (v.find_first_of("0123456789") != std::string::npos || v == "nan" || v == "inf" || v == "-inf")
    die(flag + " expects a finite number, got '" + v + "'");
  die(flag + " expects a number, got '" + v + "'");
}

std::uint64_t to_u64(const std::string& flag, const std::string& v) {
  const double d = to_double(flag, v);
  if (!(d >= 0) || d != std::floor(d) || d > 1e18) {
    die(flag + " expects a non-negative integer, got '" + v + "'");
  }
  return static_cast<std::uint64_t>(d);
}

options parse(int argc, char** argv) {
  options o;
  auto& c = o.cfg;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      std::cout << usage;
      std::exit(0);
    } else if (a == "--table")
      o.table = true;
    else if (a == "--scaling")
      o.scaling = true;
    else if (a == "--trace")
      o.trace = val();
    else if (a == "--seed")
      o.seed = to_u64(a, val());
    else if (a == "--seeds")
      o.seeds = to_u64(a, val());
    else if (a == "--out")
      o.out = val();
    else if (a == "--strategies") {
      o.strategies.clear();
      std::string list = val(), item;
      for (std::size_t p = 0; p <= list.size(); ++p) {
        if (p == list.size() || list[p] == ',') {
          auto s = dd::goodput::parse_strategy(item);
          if (!s) die("unknown strategy '" + item + "'");
          o.strategies.push_back(*s);
          item.clear();
        } else {
          item += list[p];
        }
      }
    } else if (a == "--chips")
      c.chips = to_u64(a, val());
    else if (a == "--slice-chips")
      c.slice_chips = to_u64(a, val());
    else if (a == "--learners")
      c.learners = to_u64(a, val());
    else if (a == "--mtbi-days")
      c.mtbi_days = to_double(a, val());
    else if (a == "--days")
      c.days = to_double(a, val());
    else if (a == "--mtbi-seconds")
      c.mtbi_days = to_double(a, val()) / 86400.0;
    else if (a == "--seconds")
      c.days = to_double(a, val()) / 86400.0;
    else if (a == "--recovery-dist") {
      const std::string v = val();
      if (v == "fixed")
        c.recovery = dd::goodput::recovery_dist::fixed;
      else if (v == "exponential")
        c.recovery = dd::goodput::recovery_dist::exponential;
      else if (v == "lognormal")
        c.recovery = dd::goodput::recovery_dist::lognormal;
      else
        die("--recovery-dist expects fixed, exponential or lognormal, got '" + v + "'");
    } else if (a == "--recovery-mean")
      c.recovery_mean_s = to_double(a, val());
    else if (a == "--recovery-cv")
      c.recovery_cv = to_double(a, val());
    else if (a == "--speed-cv")
      c.chip_speed_cv = to_double(a, val());
    else if (a == "--idle-failures") {
      const std::string v = val();
      if (v == "yes")
        c.idle_failures = true;
      else if (v == "no")
        c.idle_failures = false;
      else
        die("--idle-failures expects yes or no, got '" + v + "'");
    } else if (a == "--restart")
      c.restart_s = to_double(a, val());
    else if (a == "--restart-cold")
      c.restart_cold_s = to_double(a, val());
    else if (a == "--restart-warm-window")
      c.restart_warm_window_s = to_double(a, val());
    else if (a == "--checkpoint-interval")
      c.checkpoint_interval_s = to_double(a, val());
    else if (a == "--checkpoint-write")
      c.checkpoint_write_s = to_double(a, val());
    else if (a == "--downscale-pause")
      c.downscale_pause_s = to_double(a, val());
    else if (a == "--upscale-pause")
      c.upscale_pause_s = to_double(a, val());
    else if (a == "--upscale-batch")
      c.upscale_batch_s = to_double(a, val());
    else if (a == "--pause-overlap") {
      const std::string v = val();
      if (v == "serial")
        c.overlap = dd::goodput::pause_overlap::serial;
      else if (v == "coalesce")
        c.overlap = dd::goodput::pause_overlap::coalesce;
      else
        die("--pause-overlap expects serial or coalesce, got '" + v + "'");
    } else if (a == "--step")
      c.step_s = to_double(a, val());
    else if (a == "--sync-interval")
      c.sync_interval = to_u64(a, val());
    else if (a == "--outer-sync")
      c.outer_sync_s = to_double(a, val());
    else if (a == "--quorum")
      c.quorum_count = to_u64(a, val());
    else if (a == "--quorum-fraction")
      c.quorum_fraction = to_double(a, val());
    else if (a == "--max-staleness")
      c.max_staleness = to_u64(a, val());
    else if (a == "--tau")
      c.overlap_tau = to_double(a, val());
    else if (a == "--grace-gamma")
      c.grace_gamma = to_double(a, val());
    else
      die("unknown flag '" + a + "'");
  }
  if (o.seeds == 0) die("--seeds must be >= 1, got 0");
  return o;
}

struct cell {
  strategy which;
  std::uint64_t chips = 0, learners = 0;
  std::vector<sim_result> runs;
  std::vector<double> wall_s;
  double mean(double sim_result::*f) const {
    double s = 0;
    for (const auto& r : runs) s += r.*f;
    return s / static_cast<double>(runs.size());
  }
  double sd(double sim_result::*f) const {
    if (runs.size() < 2) return 0;
    const double m = mean(f);
    double s = 0;
    for (const auto& r : runs) s += (r.*f - m) * (r.*f - m);
    return std::sqrt(s / static_cast<double>(runs.size() - 1));
  }
};

cell run_cell(const options& o, strategy s, std::uint64_t chips, std::uint64_t learners) {
  sim_config c = o.cfg;
  c.chips = chips;
  c.learners = learners;
  const std::string err = dd::goodput::validate(c, s);
  if (!err.empty()) die(err);
  cell out{s, chips, learners, {}, {}};
  for (std::uint64_t k = 0; k < o.seeds; ++k) {
    const auto t0 = std::chrono::steady_clock::now();
    out.runs.push_back(dd::goodput::simulate(c, s, o.seed + k));
    out.wall_s.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return out;
}

std::string label(const cell& c) {
  const bool m = c.which == strategy::diloco || c.which == strategy::decoupled_diloco;
  return std::string(to_string(c.which)) + (m ? " M=" + std::to_string(c.learners) : "");
}

std::string chips_label(std::uint64_t n) {
  char b[32];
  if (n >= 1'000'000)
    std::snprintf(b, sizeof b, "%.1fM", static_cast<double>(n) / 1e6);
  else
    std::snprintf(b, sizeof b, "%.0fk", static_cast<double>(n) / 1e3);
  return b;
}

// The paper's goodput table (MTBI = 1 year per chip), Decoupled DiLoCo arXiv 2604.21428.
const std::map<strategy, std::vector<double>> paper = {
    {strategy::data_parallel, {0.72, 0.57, 0.38, 0.27, 0.18}},
    {strategy::elastic_dp, {0.88, 0.80, 0.69, 0.58, 0.40}},
};

/// Writes `text` to `path` atomically; a failure ends the program (exit 1) naming the file.
void write_or_die(const std::string& path, const std::string& text) {
  if (auto st = dd::util::write_file_atomic(path, text); !st) {
    std::cerr << "dd-goodput: " << st.message << "\n";
    std::exit(1);
  }
}

/// The simulation parameters of `c` (cluster size aside), as goodput.json and --trace write them.
nlohmann::json config_json(const sim_config& c) {
  return {
      {"slice_chips", c.slice_chips},
      {"mtbi_days", c.mtbi_days},
      {"days", c.days},
      {"recovery_dist", to_string(c.recovery)},
      {"recovery_mean_s", c.recovery_mean_s},
      {"recovery_cv", c.recovery_cv},
      {"idle_failures", c.idle_failures},
      {"restart_s", c.restart_s},
      {"restart_cold_s", c.restart_cold_s},
      {"restart_warm_window_s", c.restart_warm_window_s},
      {"checkpoint_interval_s", c.checkpoint_interval_s},
      {"checkpoint_write_s", c.checkpoint_write_s},
      {"downscale_pause_s", c.downscale_pause_s},
      {"upscale_pause_s", c.upscale_pause_s},
      {"upscale_batch_s", c.upscale_batch_s},
      {"pause_overlap", c.overlap == dd::goodput::pause_overlap::serial ? "serial" : "coalesce"},
      {"step_s", c.step_s},
      {"chip_speed_cv", c.chip_speed_cv},
      {"sync_interval", c.sync_interval},
      {"outer_sync_s", c.outer_sync_s},
      {"quorum_count", c.quorum_count},
      {"quorum_fraction", c.quorum_fraction},
      {"max_staleness", c.max_staleness}};
}

void write_outputs(const options& o, const std::vector<cell>& cells,
                   const std::vector<std::uint64_t>& ns) {
  if (auto st = dd::util::make_dirs(o.out); !st) {
    std::cerr << "dd-goodput: --out " << o.out << ": " << st.message << "\n";
    std::exit(1);
  }
  nlohmann::json j;
  j["tool"] = "dd-goodput";
  j["seed"] = o.seed;
  j["seeds"] = o.seeds;
  j["config"] = config_json(o.cfg);
  std::string csv =
      "strategy,chips,learners,seed,goodput,uptime,failures,recoveries,events,"
      "stale_rejections,grace_s,wall_s\n";
  for (const auto& cl : cells) {
    nlohmann::json jc = {{"strategy", to_string(cl.which)},
                         {"chips", cl.chips},
                         {"learners", cl.learners},
                         {"goodput_mean", cl.mean(&sim_result::goodput)},
                         {"goodput_sd", cl.sd(&sim_result::goodput)},
                         {"uptime_mean", cl.mean(&sim_result::uptime)},
                         {"uptime_sd", cl.sd(&sim_result::uptime)}};
    for (std::size_t k = 0; k < cl.runs.size(); ++k) {
      const auto& r = cl.runs[k];
      jc["runs"].push_back({{"seed", r.seed},
                            {"goodput", r.goodput},
                            {"uptime", r.uptime},
                            {"failures", r.failures},
                            {"recoveries", r.recoveries},
                            {"events", r.events},
                            {"stale_rejections", r.stale_rejections},
                            {"warm_restarts", r.warm_restarts},
                            {"cold_restarts", r.cold_restarts},
                            {"grace_s", r.grace_s},
                            {"wall_s", cl.wall_s[k]}});
      char line[512];
      std::snprintf(
          line, sizeof line, "%s,%llu,%llu,%llu,%.6f,%.6f,%llu,%llu,%llu,%llu,%.4f,%.4f\n",
          to_string(cl.which), static_cast<unsigned long long>(cl.chips),
          static_cast<unsigned long long>(cl.learners), static_cast<unsigned long long>(r.seed),
          r.goodput, r.uptime, static_cast<unsigned long long>(r.failures),
          static_cast<unsigned long long>(r.recoveries), static_cast<unsigned long long>(r.events),
          static_cast<unsigned long long>(r.stale_rejections), r.grace_s, cl.wall_s[k]);
      csv += line;
    }
    j["cells"].push_back(jc);
  }
  // The paper's numbers, drawn as crosses by `dd-node plot` (docs/plots.md), on the table's grid.
  if (ns.size() == 5) {
    nlohmann::json pts = nlohmann::json::array();
    for (auto s : {strategy::data_parallel, strategy::elastic_dp})
      for (std::size_t i = 0; i < 5; ++i)
        pts.push_back({{"strategy", to_string(s)}, {"chips", ns[i]}, {"goodput", paper.at(s)[i]}});
    pts.push_back({{"strategy", to_string(strategy::decoupled_diloco)},
                   {"learners", 8},
                   {"chips", 1200000},
                   {"goodput", 0.88}});
    j["paper"] = {{"source", "Decoupled DiLoCo, arXiv 2604.21428, MTBI 1 year per chip"},
                  {"points", pts}};
  }
  write_or_die(o.out + "/goodput.csv", csv);
  write_or_die(o.out + "/goodput.json", j.dump(2) + "\n");

  std::cout << "wrote " << o.out << "/goodput.json, goodput.csv (figure: dd-node plot " << o.out
            << ")\n";
}

void print_table(const std::vector<cell>& cells, const std::vector<std::uint64_t>& ns,
                 double sim_result::*f, const char* what) {
  std::printf("\n%s (mean ± std-dev over seeds, %%)\n%-26s", what, "strategy");
  for (auto n : ns) std::printf(" %13s", chips_label(n).c_str());
  std::printf("\n");
  std::vector<std::string> order;
  for (const auto& c : cells) {
    const std::string l = label(c);
    if (std::find(order.begin(), order.end(), l) == order.end()) order.push_back(l);
  }
  for (const auto& l : order) {
    std::printf("%-26s", l.c_str());
    for (auto n : ns) {
      const cell* hit = nullptr;
      for (const auto& c : cells)
        if (label(c) == l && c.chips == n) hit = &c;
      if (hit)
        std::printf("   %5.1f ± %4.1f", 100 * hit->mean(f), 100 * hit->sd(f));
      else
        std::printf(" %13s", "-");
    }
    std::printf("\n");
  }
}

int run_grid(const options& o, const std::vector<std::uint64_t>& ns,
             const std::vector<std::uint64_t>& ms) {
  std::printf(
      "dd-goodput: seeds %llu..%llu, %g days simulated, MTBI %g days/chip, %llu chips/slice\n",
      static_cast<unsigned long long>(o.seed),
      static_cast<unsigned long long>(o.seed + o.seeds - 1), o.cfg.days, o.cfg.mtbi_days,
      static_cast<unsigned long long>(o.cfg.slice_chips));
  std::vector<cell> cells;
  double total_wall = 0;
  for (auto s : o.strategies) {
    const bool per_m = s == strategy::diloco || s == strategy::decoupled_diloco;
    for (auto m : per_m ? ms : std::vector<std::uint64_t>{1}) {
      for (auto n : ns) {
        cells.push_back(run_cell(o, s, n, per_m ? m : o.cfg.learners));
        if (!per_m) cells.back().learners = 1;
        for (double w : cells.back().wall_s) total_wall += w;
        std::fprintf(stderr, "  %-26s N=%-7s goodput %.3f  (%.2f s/run)\n",
                     label(cells.back()).c_str(), chips_label(n).c_str(),
                     cells.back().mean(&sim_result::goodput), cells.back().wall_s.front());
      }
    }
  }
  print_table(cells, ns, &sim_result::goodput, "Goodput");
  print_table(cells, ns, &sim_result::uptime, "Uptime");
  if (ns.size() == 5 && o.cfg.mtbi_days == 365.0) {
    std::printf("\nCheck against the paper (MTBI 1 year; tolerance ±3 points):\n");
    bool all = true;
    for (const auto& [s, ref] : paper) {
      for (std::size_t i = 0; i < ns.size(); ++i) {
        for (const auto& c : cells) {
          if (c.which != s || c.chips != ns[i]) continue;
          const double d = 100 * (c.mean(&sim_result::goodput) - ref[i]);
          const bool ok = std::fabs(d) <= 3.0;
          all = all && ok;
          std::printf("  %-14s N=%-6s sim %5.1f  paper %4.0f  diff %+5.1f  %s\n", to_string(s),
                      chips_label(ns[i]).c_str(), 100 * c.mean(&sim_result::goodput), 100 * ref[i],
                      d, ok ? "ok" : "OUT");
        }
      }
    }
    std::printf("  => %s\n", all ? "all within ±3 points" : "some cells outside ±3 points");
  }
  std::printf("\ntotal simulation wall time: %.1f s\n", total_wall);
  write_outputs(o, cells, ns);
  return 0;
}

int run_scaling(const options& o) {
  std::printf("dd-goodput scaling: wall time of one run (seed %llu), this machine\n",
              static_cast<unsigned long long>(o.seed));
  std::printf("%-18s %9s %7s %10s %10s %9s %12s\n", "strategy", "chips", "days", "failures",
              "events", "wall_s", "ns/event");
  auto one = [&](strategy s, std::uint64_t n, double days) {
    sim_config c = o.cfg;
    c.chips = n;
    c.days = days;
    c.learners = 8;
    const auto t0 = std::chrono::steady_clock::now();
    const auto r = dd::goodput::simulate(c, s, o.seed);
    const double w = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%-18s %9llu %7g %10llu %10llu %9.3f %12.0f\n", to_string(s),
                static_cast<unsigned long long>(n), days,
                static_cast<unsigned long long>(r.failures),
                static_cast<unsigned long long>(r.events), w,
                1e9 * w / static_cast<double>(std::max<std::uint64_t>(1, r.events)));
  };
  for (auto s : o.strategies) {
    for (std::uint64_t n : {150'000ull, 300'000ull, 600'000ull, 1'200'000ull, 2'400'000ull})
      one(s, n, 30);
    for (double d : {7.5, 15.0, 60.0}) one(s, 2'400'000, d);
  }
  return 0;
}

}  // namespace

/// --trace: one seeded Decoupled DiLoCo run whose failures become a dd-chaos scenario.
int run_trace(const options& o) {
  sim_config c = o.cfg;
  c.record_trace = true;
  const auto r = dd::goodput::simulate(c, strategy::decoupled_diloco, o.seed);
  std::string lua = fmt::format(
      "-- dd-goodput --trace: {} failures of a Decoupled DiLoCo run simulated with seed {} over "
      "{:.1f} s\n-- ({} chips in slices of {}, {} learners, MTBI {:.1f} s per chip). Replay: "
      "dd-chaos run THIS_FILE\n-- against a dd-node launch cluster of as many learners.\n"
      "return {{\n",
      r.failures, o.seed, r.sim_seconds, c.chips, c.slice_chips, c.learners, c.mtbi_days * 86400.0);
  nlohmann::json trace = nlohmann::json::array();
  for (const auto& f : r.trace) {
    lua += fmt::format(
        "  {{ at = {:.3f}, kind = \"kill\", target = \"learner:{}\", for_ = {:.3f} }},\n", f.at_s,
        f.group, f.recovery_s);
    trace.push_back(
        {{"at_s", f.at_s}, {"learner", f.group}, {"slice", f.slice}, {"recovery_s", f.recovery_s}});
  }
  lua += "}\n";
  const nlohmann::json j = {{"seed", o.seed},
                            {"strategy", "decoupled_diloco"},
                            {"chips", c.chips},
                            {"learners", c.learners},
                            {"config", config_json(c)},
                            {"predicted", {{"goodput", r.goodput}, {"uptime", r.uptime}}},
                            {"sim_seconds", r.sim_seconds},
                            {"failures", r.failures},
                            {"trace", trace}};
  write_or_die(o.trace, lua);
  write_or_die(o.trace + ".json", j.dump(2) + "\n");
  std::printf(
      "dd-goodput --trace: seed %llu, %llu failures over %.1f s; predicted goodput %.4f, uptime "
      "%.4f\nwrote %s (dd-chaos scenario) and %s.json\n",
      static_cast<unsigned long long>(o.seed), static_cast<unsigned long long>(r.failures),
      r.sim_seconds, r.goodput, r.uptime, o.trace.c_str(), o.trace.c_str());
  return 0;
}

/// Every cell the mode will run, validated before the first simulation (exit 2 on the first
/// refusal), so a bad flag never costs a partial run.
void validate_all(const options& o, const std::vector<std::uint64_t>& ns,
                  const std::vector<std::uint64_t>& ms) {
  for (auto s : o.strategies)
    for (auto n : ns)
      for (auto m : ms) {
        sim_config c = o.cfg;
        c.chips = n;
        c.learners = m;
        if (const std::string err = dd::goodput::validate(c, s); !err.empty()) die(err);
      }
}

int main(int argc, char** argv) {
  try {
    const options o = parse(argc, argv);
    const std::vector<std::uint64_t> table_ns = {150'000, 300'000, 600'000, 1'200'000, 2'400'000};
    if (o.scaling) {
      validate_all(o, table_ns, {8});
      return run_scaling(o);
    }
    if (!o.trace.empty()) {
      validate_all(o, {o.cfg.chips}, {o.cfg.learners});
      return run_trace(o);
    }
    // The output folder must exist and be writable before the simulation spends its time.
    if (auto st = dd::util::make_dirs(o.out); !st) die("--out " + o.out + ": " + st.message);
    if (::access(o.out.c_str(), W_OK) != 0)
      die("--out " + o.out + ": cannot write into it: " + dd::util::errno_text(errno));
    if (o.table) {
      validate_all(o, table_ns, {2, 4, 8, 16});
      return run_grid(o, table_ns, {2, 4, 8, 16});
    }
    validate_all(o, {o.cfg.chips}, {o.cfg.learners});
    return run_grid(o, {o.cfg.chips}, {o.cfg.learners});
  } catch (const std::exception& e) {
    std::cerr << "dd-goodput: error: " << e.what() << "\n";
    return 1;
  }
}
