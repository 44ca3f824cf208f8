// tools/chaos/report.hpp — `dd-chaos report RUN_DIR`: what the cluster did under the faults of
// a run, judged from the files the run left (docs/chaos-report.md "The report"). Pure reading: no
// process is touched, nothing is written but the JSON report. Any thread may call.
//
// Inputs (each optional; an invariant whose evidence is missing is "unknown"):
//   <run_dir>/events.jsonl              the syncer's events (merge, push, chunk_refused, failure,
//                                       join/rejoin, node_join, owner_restored, eval, start/resume)
//   <run_dir>/nodes/<node>.events.jsonl learner nodes' forwarded events (node_start, syncer_lost,
//                                       syncer_back, learner_rejoined, nonfinite, chunk_refused)
//   <run_dir>/learner_loss.csv          one row per heartbeat: time,learner,incarnation,step,...
//   <run_dir>/monitor.json              the monitor's record: each learner's step and tokens
//   <run_dir>/summary.json              final_val_loss, goodput, uptime (written at the end)
//   <run_dir>/experiment.json           the resolved experiment (checkpoint.every_versions)
//   <run_dir>/nodes.json                which learners each node process hosts
//   <run_dir>/chaos.jsonl               the tape: every fault dd-chaos fired
// Events are ordered by their "time" field (Unix seconds): each process has its own "t" clock.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace dd::chaos {

/// What `report` reads and how it judges.
struct report_options {
  std::string run_dir;           ///< the run directory to judge (must exist)
  std::string baseline_dir;      ///< a clean run's directory ("" = no loss comparison)
  double loss_tolerance = 0.03;  ///< final loss may exceed the baseline's by this fraction
  std::string tape;              ///< the tape ("" = <run_dir>/chaos.jsonl)
};

/// Builds the report: {"run_dir", "inputs": {file: "read"|"missing"|error}, "faults": [...],
/// "run": {figures}, "invariants": [{"name","verdict","detail"}], "verdict":
/// "valid"|"invalid"|"unknown"}. Times are Unix seconds; each fault's "*_after_s" are seconds
/// after its injection (null when the event never came). "run" holds "global_downtime_s" and
/// its "downtime_intervals" (judged per step advance against the learner's local pace), the
/// "between_parts" left out of the observed time (a planned stop up to the next resume), and
/// "unexplained": {"count", "events"} — link drops (`failure`, `syncer_lost`) no fault explains.
/// Throws chaos_error when run_dir is not a directory, or a present JSON file (summary.json,
/// experiment.json) does not parse.
nlohmann::json build_report(const report_options& options);

/// The settings of two experiment.json files that make their final losses incomparable, as
/// "path: this vs baseline" ("-" where one lacks it): the budget, the model, the data, the
/// learners' count and batch, the final evaluation's windows (eval.windows), and the inner,
/// outer and sync settings. Empty when they agree (run_dir, run_id, checkpoint, chaos, restart,
/// names and the periodic evaluation do not count). Pure.
std::vector<std::string> experiment_differences(const nlohmann::json& run,
                                                const nlohmann::json& baseline);

/// The report as a table for people (per-fault rows, run figures, one line per invariant).
std::string format_report(const nlohmann::json& report);

/// 1 when any invariant is invalid, else 0.
int report_exit_status(const nlohmann::json& report);

}  // namespace dd::chaos
