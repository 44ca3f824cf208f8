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
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tools/goodput/sim.hpp"
#include "util/files.hpp"
#include "util/flags.hpp"
#include "util/parse.hpp"

namespace {

using dd::goodput::sim_config;
using dd::goodput::sim_result;
using dd::goodput::strategy;

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

/// A finite number, as the simulator's flags take it; else why not ("expects a number, got 'x'").
std::string take_double(const std::string& v, double& out) {
  if (dd::util::parse_number(v, out)) return {};
  if (v.find_first_of("0123456789") != std::string::npos || v == "nan" || v == "inf" || v == "-inf")
    return "expects a finite number, got '" + v + "'";
  return "expects a number, got '" + v + "'";
}

/// A whole number >= `lo` (at most 1e18), written as an integer or a float ("1e6", "5.0").
std::string take_u64(const std::string& v, std::uint64_t& out, std::uint64_t lo = 0) {
  double d = 0;
  if (auto why = take_double(v, d); !why.empty()) return why;
  if (!(d >= 0) || d != std::floor(d) || d > 1e18)
    return "expects a non-negative integer, got '" + v + "'";
  if (d < static_cast<double>(lo)) return "must be >= " + std::to_string(lo) + ", got " + v;
  out = static_cast<std::uint64_t>(d);
  return {};
}

/// The names of a choice flag's values, in the order the help lists them.
template <class T>
using choices = std::vector<std::pair<const char*, T>>;

/// One of `names`, setting `out` to the matching value.
template <class T>
std::string take_choice(const std::string& v, T& out, const choices<T>& names) {
  std::string list;
  std::size_t k = 0;
  for (const auto& [name, value] : names) {
    if (v == name) {
      out = value;
      return {};
    }
    list += (k == 0 ? "" : k + 1 == names.size() ? " or " : ", ") + std::string(name);
    ++k;
  }
  return "expects " + list + ", got '" + v + "'";
}

/// "fixed | exponential | lognormal (default lognormal)": the names and the one `now` has.
template <class T>
std::string choice_help(const choices<T>& names, T now) {
  std::string list, dflt;
  for (const auto& [name, value] : names) {
    list += (list.empty() ? "" : " | ") + std::string(name);
    if (value == now) dflt = name;
  }
  return list + " (default " + dflt + ")";
}

/// A comma list of strategies.
std::string take_strategies(const std::string& list, std::vector<strategy>& out) {
  std::vector<strategy> got;
  std::string item;
  for (std::size_t p = 0; p <= list.size(); ++p) {
    if (p == list.size() || list[p] == ',') {
      auto s = dd::goodput::parse_strategy(item);
      if (!s)
        return "has an unknown strategy '" + item +
               "' (known: data_parallel, elastic_dp, diloco, decoupled_diloco)";
      got.push_back(*s);
      item.clear();
    } else {
      item += list[p];
    }
  }
  out = got;
  return {};
}

/// The flag table of dd-goodput, writing into `o`: the one source of its parsing and its --help.
dd::util::flag_table flags(options& o) {
  auto& c = o.cfg;
  dd::util::flag_table t(
      "dd-goodput", "[flags]",
      "Goodput simulator: data-parallel vs Decoupled DiLoCo on a failing cluster "
      "(docs/goodput.md).\nWithout a mode flag it simulates --chips with every strategy (the "
      "DiLoCo variants with --learners).");
  // Each default shown in the help is the value the field holds before parsing.
  auto real = [&t](const char* name, double* out, const char* value, const std::string& help) {
    t.custom(name, value, fmt::format("{} (default {:g})", help, *out),
             [out](const std::string& v) { return take_double(v, *out); });
  };
  auto whole = [&t](const char* name, std::uint64_t* out, const char* value,
                    const std::string& help, std::uint64_t lo = 0) {
    t.custom(name, value, fmt::format("{} (default {})", help, *out),
             [out, lo](const std::string& v) { return take_u64(v, *out, lo); });
  };
  // --mtbi-seconds and --seconds set the day-valued fields.
  auto in_days = [&t](const char* name, double* days, const char* value, const std::string& help) {
    t.custom(name, value, help, [days](const std::string& v) {
      double s = 0;
      auto why = take_double(v, s);
      if (why.empty()) *days = s / 86400.0;
      return why;
    });
  };
  t.heading("Modes")
      .toggle("--table", &o.table, "the grid N in {150k,300k,600k,1.2M,2.4M} x M in {2,4,8,16}")
      .toggle("--scaling", &o.scaling, "wall time of one run against N and against simulated days")
      .text("--trace", &o.trace, "FILE",
            "one Decoupled DiLoCo run (--seed) of --chips: write its failure trace as a dd-chaos "
            "scenario FILE (each failure of learner g's slice = kill \"learner:g\", held down for "
            "its repair time) and FILE.json (the trace and the simulator's goodput and uptime for "
            "it), for simulation in the loop: replay FILE with `dd-chaos run` on `dd-node launch` "
            "and set the run's goodput beside the prediction");
  t.heading("Run control");
  whole("--seed", &o.seed, "S", "first seed; run k uses seed S+k, printed with every run");
  whole("--seeds", &o.seeds, "K", "seeds per cell, >= 1; the table shows mean ± std-dev", 1);
  t.custom("--strategies", "LIST",
           "comma list of data_parallel,elastic_dp,diloco,decoupled_diloco (default all four)",
           [&o](const std::string& v) { return take_strategies(v, o.strategies); })
      .text("--out", &o.out, "DIR",
            "write DIR/goodput.json, goodput.csv (default goodput-out); `dd-node plot DIR` draws "
            "DIR/figures/goodput.png");
  t.heading("Cluster and failures (defaults: docs/goodput.md, \"Parameters\")");
  whole("--chips", &c.chips, "N", "allocated chips, spares not counted");
  whole("--slice-chips", &c.slice_chips, "S", "chips per slice = failure domain");
  whole("--learners", &c.learners, "M", "learners (DiLoCo, Decoupled DiLoCo)");
  real("--mtbi-days", &c.mtbi_days, "D", "mean time between interruptions of ONE chip");
  real("--days", &c.days, "T", "simulated wall time");
  in_days("--mtbi-seconds", &c.mtbi_days, "X",
          "--mtbi-days in seconds (a trace for a short real run)");
  in_days("--seconds", &c.days, "T", "--days in seconds");
  using dd::goodput::recovery_dist_names;
  t.custom("--recovery-dist", "K", choice_help(recovery_dist_names, c.recovery),
           [&c](const std::string& v) { return take_choice(v, c.recovery, recovery_dist_names); });
  real("--recovery-mean", &c.recovery_mean_s, "SEC",
       "mean time until a failed slice (or hot spare) is usable");
  real("--recovery-cv", &c.recovery_cv, "C", "coefficient of variation (lognormal)");
  real("--speed-cv", &c.chip_speed_cv, "C", "per-chip speed variation (lognormal CV)");
  const choices<bool> yes_no = {{"yes", true}, {"no", false}};
  t.custom("--idle-failures", "Y",
           "no: only chips under load fail; yes: idle chips of a stalled or paused job fail too "
           "(failures pile up in the stall); " +
               choice_help(yes_no, c.idle_failures),
           [&c, yes_no](const std::string& v) { return take_choice(v, c.idle_failures, yes_no); });
  t.heading("Data-parallel without elasticity");
  real("--restart", &c.restart_s, "SEC",
       "WARM relaunch once the slice is back: the failure came within --restart-warm-window of "
       "the previous relaunch's end, so hosts kept processes, program and staged checkpoint");
  real("--restart-cold", &c.restart_cold_s, "SEC",
       "COLD relaunch: reschedule, start, compile/load, read checkpoint from storage; also every "
       "DiLoCo learner respawn (>= --restart)");
  real("--restart-warm-window", &c.restart_warm_window_s, "SEC",
       "W: failures less than W after a relaunch ended get a warm relaunch; 0 = always cold");
  real("--checkpoint-interval", &c.checkpoint_interval_s, "SEC",
       "training time between checkpoints; -1 = Young's optimum sqrt(2 x write x MTBF); 0 = every "
       "step, free");
  real("--checkpoint-write", &c.checkpoint_write_s, "SEC", "training blocked per checkpoint write");
  t.heading("Elastic data-parallel and every learner of the DiLoCo variants");
  real("--downscale-pause", &c.downscale_pause_s, "SEC", "global pause to drop a failed slice");
  real("--upscale-pause", &c.upscale_pause_s, "SEC", "global pause to add a returned slice");
  real("--upscale-batch", &c.upscale_batch_s, "SEC",
       "a returned slice waits up to this long to join at the next downscale for free, else an "
       "upscale pause adds it; 0 = at once");
  using dd::goodput::pause_overlap;
  const choices<pause_overlap> overlaps = {{"serial", pause_overlap::serial},
                                           {"coalesce", pause_overlap::coalesce}};
  t.custom("--pause-overlap", "K", choice_help(overlaps, c.overlap),
           [&c, overlaps](const std::string& v) { return take_choice(v, c.overlap, overlaps); });
  real("--step", &c.step_s, "SEC", "inner step time; a failure loses the step in flight");
  t.heading("DiLoCo / Decoupled DiLoCo");
  whole("--sync-interval", &c.sync_interval, "H", "inner steps between syncs of a fragment");
  real("--outer-sync", &c.outer_sync_s, "SEC", "DiLoCo blocking outer all-reduce per round");
  whole("--quorum", &c.quorum_count, "K", "Decoupled DiLoCo min quorum as a count");
  real("--quorum-fraction", &c.quorum_fraction, "F",
       "... or as a fraction of live learners (0 = use --quorum)");
  whole("--max-staleness", &c.max_staleness, "V", "versions");
  real("--tau", &c.overlap_tau, "T", "overlap τ in steps (grace window input)");
  real("--grace-gamma", &c.grace_gamma, "G", "grace safety margin γ");
  t.heading("").epilog(
      "Exit status: 0 ok; 1 an output file could not be written (the message names it) or an\n"
      "unexpected error; 2 bad flags or a configuration the simulator refuses (checked for every\n"
      "cell before any simulation runs).");
  return t;
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
    options o;
    if (auto rc = flags(o).parse(argc, argv)) return *rc;
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
