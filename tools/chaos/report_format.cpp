// tools/chaos/report_format.cpp — format_report (report.hpp): the report as a table for people.
#include <sstream>

#include <fmt/format.h>

#include "tools/chaos/common.hpp"
#include "tools/chaos/report.hpp"

namespace dd::chaos {

using nlohmann::json;

std::string format_report(const json& r) {
  std::ostringstream out;
  auto secs = [](const json& v) {
    return v.is_number() ? fmt::format("{:+.1f}s", v.get<double>()) : std::string("-");
  };
  auto fig = [](const json& v, const char* fmtspec = "{:.3f}") {
    if (v.is_null()) return std::string("-");
    if (v.is_number_float()) return fmt::format(fmt::runtime(fmtspec), v.get<double>());
    return v.dump();
  };
  out << "dd-chaos report " << r.value("run_dir", "") << "\n";
  for (const auto& [file, what] : r["inputs"].items())
    out << fmt::format("  {:<28} {}\n", file, what.get<std::string>());
  const auto& faults = r["faults"];
  out << fmt::format("\nfaults ({}); times after injection\n", faults.size());
  if (!faults.empty()) {
    out << fmt::format("  {:>3} {:>8} {:<12} {:<20} {:>7} {:>8} {:>9} {:>9} {:>10} {:>9} {:>11}\n",
                       "#", "at", "kind", "target", "for", "noticed", "excluded", "restarted",
                       "rejoined", "merged", "result");
    int i = 0;
    for (const auto& f : faults)
      out << fmt::format(
          "  {:>3} {:>7.1f}s {:<12} {:<20} {:>7} {:>8} {:>9} {:>9} {:>10} {:>9} {:>11}\n", ++i,
          f["offset_s"].get<double>(), f["kind"].get<std::string>(),
          f["target"].get<std::string>().substr(0, 20),
          f["duration_s"].is_number() ? format_duration(f["duration_s"].get<double>())
                                      : std::string("-"),
          secs(f["noticed_after_s"]), secs(f["excluded_after_s"]), secs(f["restarted_after_s"]),
          secs(f["rejoined_after_s"]), secs(f["first_merge_after_s"]),
          f["result"].get<std::string>());
  }
  const auto& run = r["run"];
  out << "\nrun\n";
  out << fmt::format("  global downtime      {} s", fig(run["global_downtime_s"], "{:.2f}"));
  if (run.contains("between_parts") && !run["between_parts"].empty()) {
    double between = 0;
    for (const auto& g : run["between_parts"]) between += g.value("seconds", 0.0);
    const size_t n = run["between_parts"].size();
    out << fmt::format(" ({:.2f} s between the parts not observed: {} planned stop{} and resume{})",
                       between, n, n == 1 ? "" : "s", n == 1 ? "" : "s");
  }
  out << "\n";
  if (run.contains("unexplained")) {
    // Offsets of the unexplained link drops, one per second in which some came.
    std::string at;
    double last = -1e300;
    size_t shown = 0;
    for (const auto& u : run["unexplained"]["events"]) {
      const double t = u["offset_s"].get<double>();
      if (t - last < 1.0) continue;
      last = t;
      if (++shown > 10) {
        at += ", …";
        break;
      }
      at += fmt::format("{}+{:.1f}s", at.empty() ? " at " : ", ", t);
    }
    out << fmt::format("  unexplained drops    {} (failure/syncer_lost no fault explains){}\n",
                       fig(run["unexplained"]["count"]), at);
  }
  const auto& g = run["merge_pauses"]["global"];
  out << fmt::format("  merges               {} (longest pause {} s", fig(run["merges"]),
                     fig(g["longest_s"], "{:.2f}"));
  for (const auto& [frag, p] : run["merge_pauses"]["fragments"].items())
    out << fmt::format("; fragment {} {} s", frag, fig(p["longest_s"], "{:.2f}"));
  out << ")\n";
  out << fmt::format("  below quorum         {}\n", fig(run["merges_below_quorum"]));
  out << fmt::format("  versions lost        {} (checkpoint.every_versions {})\n",
                     fig(run["versions_lost"]), fig(run["checkpoint_every_versions"]));
  out << fmt::format("  pushes merged twice  {} (of {} push events)\n",
                     fig(run["pushes_merged_twice"]), fig(run["pushes"]));
  out << fmt::format("  chunks refused       {} (merged {})\n", fig(run["chunks_refused"]),
                     fig(run["corrupt_chunks_merged"]));
  out << fmt::format("  implausible pushes   {} (no fault explains {})\n",
                     fig(run["pushes_implausible"]), fig(run["pushes_implausible_unexplained"]));
  out << fmt::format("  non-finite           {} merges, {} learner steps discarded\n",
                     fig(run["nonfinite_merges"]), fig(run["nonfinite_learner_steps"]));
  // A baseline of another experiment: its figure is shown, marked as not comparable.
  const bool other_experiment = run.contains("baseline_differences") &&
                                run["baseline_differences"].is_array() &&
                                !run["baseline_differences"].empty();
  out << fmt::format("  final val loss       {} (start {}; baseline {}, {}{})\n",
                     fig(run["final_val_loss"], "{:.4f}"), fig(run["start_loss"], "{:.4f}"),
                     fig(run["baseline_val_loss"], "{:.4f}"),
                     run["loss_vs_baseline"].is_number()
                         ? fmt::format("{:+.2f}%", run["loss_vs_baseline"].get<double>() * 100)
                         : std::string("-"),
                     other_experiment ? ": another experiment, not compared" : "");
  out << fmt::format("  goodput              {} (effective {}), uptime {}\n", fig(run["goodput"]),
                     fig(run["effective_goodput"]), fig(run["uptime"]));
  out << "\ninvariants\n";
  for (const auto& i : r["invariants"])
    out << fmt::format("  {:<8} {:<32} {}\n", i["verdict"].get<std::string>(),
                       i["name"].get<std::string>(), i["detail"].get<std::string>());
  // An unknown verdict names the checks that could not be made, so a run whose only unknown is
  // the missing --baseline reads as such.
  std::string why;
  size_t valid = 0, unknown = 0;
  for (const auto& i : r["invariants"]) {
    if (i["verdict"] == "valid") ++valid;
    if (i["verdict"] != "unknown") continue;
    ++unknown;
    why += (why.empty() ? "" : ", ") + i["name"].get<std::string>();
  }
  const std::string overall = r.value("verdict", "unknown");
  if (overall == "unknown" && unknown > 0)
    out << fmt::format("\nverdict: unknown ({} not checked: {}; {} of {} checks valid)\n", unknown,
                       why, valid, r["invariants"].size());
  else
    out << fmt::format("\nverdict: {}\n", overall);
  return out.str();
}

}  // namespace dd::chaos
