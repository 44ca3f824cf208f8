// actors/services/run_report.hpp — what a run reports, as pure functions of its counters
// (actors/services/run_log.hpp): summary.json, the outcome (finished, interrupted, failed and why),
// run_info.json, the share of the budget spent and the progress line. The job
// (actors/nodes/job.cpp) calls them at the end of a run, the main loops
// (actors/nodes/job_runner.cpp, actors/nodes/learner_node.cpp) for the progress line, the node's
// metrics (actors/services/node_metrics.cpp) at each scrape. The only reader of the run log's
// counters (run_log::snapshot): the log is a sink the roles write to. Any thread.
//
// Goodput = Σ learner time in inner steps / (M × training wall time) (ALGORITHM.md, Goodput);
// effective goodput = tokens merged / (P × tokens trained); uptime = time with at least a quorum
// of learners stepping / time observed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <caf/allowed_unsafe_message_type.hpp>
#include <nlohmann/json.hpp>

#include "actors/services/run_log.hpp"
#include "runtime/config/experiment.hpp"
#include "runtime/run_dir.hpp"

namespace dd::actors {

/// The outcome of a run (what summary.json holds, plus a few extras). The job sends it to whoever
/// awaits the run as (finished_atom, run_result) (actors/nodes/job.hpp), within one process.
struct run_result {
  bool finished = false;
  bool interrupted = false;      ///< stopped by run_options::interrupt
  std::string interrupt_reason;  ///< "SIGINT", "SIGTERM", ... when interrupted
  /// The run produced nothing trustworthy: no token was trained, or a learner's or a fragment
  /// owner's supervisor gave up on it (restart budget spent; the experiment's `restart`).
  /// summary.json then also carries "failed": true and "failure_reason"; `dd-node run` exits 1.
  bool failed = false;
  std::string failure_reason;
  double final_val_loss = -1.0;
  uint64_t digest = 0;     ///< FNV-1a of the final global model
  nlohmann::json summary;  ///< exactly the summary.json keys
  nlohmann::json info;     ///< extras (experiment name, M, P, H, K, restarts, digest...)
};

/// What the report of a run needs besides its counters.
struct run_facts {
  std::string experiment;  ///< its name
  int learners = 1;        ///< M
  int fragments = 1;       ///< P
  int sync_interval = 1;   ///< H
  bool synchronous = false;
  bool resumed = false;         ///< continued an earlier run (--resume)
  double seconds_before = 0.0;  ///< training seconds of the earlier parts (resumed)
  /// Resumed: what the earlier parts counted (count_earlier_parts); added to this part's
  /// counters so that summary.json covers the whole run.
  earlier_parts before;
  std::string interrupted;      ///< the interrupt's reason; empty = not interrupted
  bool allow_degraded = false;  ///< checkpoint.allow_degraded
  std::string write_failure;    ///< the write failure that stopped the run; empty = none
  size_t faults_fired = 0;
};

/// summary.json for a finished run of `learners` learners over `fragments` fragments: final
/// validation loss (null when < 0: no evaluation ran), tokens, wall seconds, goodput, effective
/// goodput, uptime, merges, mean contributors per merge, learner restarts, bytes pushed and
/// broadcast, chunks refused.
nlohmann::json make_summary(int learners, int fragments, const run_counters& c,
                            double final_val_loss, double wall_s, double training_s);

/// The whole run's counters: this part's `c` plus what the earlier parts of a resumed run
/// counted (`b`: merges, contributors, merged tokens, pushes, bytes, refusals, divergences,
/// restarts). The learners' tokens and compute seconds already cover every part (the monitor's
/// record carries them over the resume).
run_counters whole_run(const run_counters& c, const earlier_parts& b);

/// The earlier parts' wall seconds: their events' spans and the monitor record's training
/// seconds both fall short of it (a killed part's last event or record came before the kill; a
/// merge pause writes no event for many seconds): the larger one.
inline double wall_seconds_before(const earlier_parts& b, double seconds_before) {
  return b.wall_s > seconds_before ? b.wall_s : seconds_before;
}

/// The outcome of a finished run: make_summary (of the whole run: a resumed run adds
/// `f.before`, the earlier parts' counts, and their wall seconds: the larger of their events'
/// spans and `f.seconds_before`), plus "resumed" with "parts",
/// "seconds_before_resume" and "wall_seconds_before_resume", "interrupted" and — when no
/// token was trained, a learner or an owner was given up, a fragment's value was lost (unless
/// allowed) or a write failed — "failed" with a "failure_reason" naming each cause; `info` holds
/// run_info.json.
run_result make_run_result(const run_facts& f, const run_counters& c, double final_val_loss,
                           uint64_t digest, double wall_s, double training_s);

/// The end of a run for the person at the terminal (replaces a line of JSON; summary.json keeps
/// every key): a header "== NAME done in 12.3 s" ("== NAME FAILED: <reason>", "== NAME interrupted
/// by SIGINT"), then a few aligned lines — final validation loss, tokens (and per second), wall
/// time, goodput, effective goodput and uptime, merges and contributors per merge, restarts,
/// refusals — and where the files are: the model (summary "model_file"), summary.json and
/// events.jsonl in `run_dir`, the figures (`dd-node plot RUN_DIR` writes RUN_DIR/figures/) and
/// `logs_dir` when not empty (dd-node launch: the nodes' logs). Each line ends in '\n'.
std::string summary_text(const std::string& experiment, const run_result& r,
                         const std::string& run_dir, const std::string& logs_dir = {});

/// The progress line: per-learner step rate (observed since `prev` when it knows the learner,
/// else its step-time EMA) and loss ("✗" before a learner that is down, "left" for one that
/// finished or was drained), global validation loss, merges per second
/// (since `prev`, `dt_s` seconds earlier), mean contributors per merge, current grace window,
/// restarts. `t_s` is the run time shown. `done` in [0, 1] is the share of the budget spent
/// (< 0: unknown); when known the line ends with it and an estimate of the time left from the
/// pace since (`since_t` s, `since_done` spent then): (t_s − since_t) × (1 − done) / (done −
/// since_done), e.g. "| 37% ETA 3m12s". A fresh run measures from its start (0, 0); a resumed
/// one from its first line, since the share its earlier parts spent took none of this part's
/// seconds (measured from the run's start, it would read 7 s at 43% with 65 s to go).
/// `expected_learners` > 0 (a syncer node, whose learners join from elsewhere): while fewer
/// learners than that are known, the line says how many joined, e.g. "[    5.0s] 0 of 4 joined |
/// val - | ...". `stopping` (a signal or a write failure is stopping the run): no ETA, the share
/// spent is followed by "stopping", e.g. "| 17% stopping".
std::string progress_line(const run_counters& now, const run_counters& prev, double dt_s,
                          double t_s, double done = -1.0, double since_t = 0.0,
                          double since_done = 0.0, int expected_learners = 0,
                          bool stopping = false);

/// A learner node's progress line: its own learners' part of progress_line and their restarts,
/// without the syncer's figures (validation loss, merges, contributors, grace), which a learner
/// node does not know, e.g. "[   10.3s] L2 3.74st/s 3.773 | restarts 0"; a learner that is
/// down shows no step rate, e.g. "L1 ✗ down 2.316".
std::string node_progress_line(const run_counters& now, double t_s);

/// Share of the budget spent, in [0, 1]: mean learner step / steps per learner (steps budget),
/// Σ tokens / budget tokens (tokens), elapsed / budget seconds (seconds).
double budget_done(const config::experiment& exp, uint64_t steps_per_learner,
                   const run_counters& now, double t_s);

// The log's readers. run_log is a write-only sink for the roles; what a node reports from it
// (summary.json, the progress lines, /metrics and /status) is read here and only here.

/// make_run_result over the log's counters as they are now.
run_result make_run_result(const run_facts& f, const run_log& log, double final_val_loss,
                           uint64_t digest, double wall_s, double training_s);

/// What the progress line of `dd-node run` / `dd-node syncer` needs besides the log.
struct progress_facts {
  const config::experiment* exp = nullptr;
  uint64_t steps_per_learner = 0;
  /// A resumed run: its ETA is of this part's pace (from its first line on); restarts count the
  /// earlier parts too, as summary.json does; the budget spent counts their seconds.
  bool resumed = false;
  double seconds_before = 0.0;
  earlier_parts before;
  /// > 0: a syncer node, whose learners join from elsewhere (progress_line's expected_learners).
  int expected_learners = 0;
};

/// The main loop's progress line: remembers the counters and time of the line before (the step
/// and merge rates are measured between two lines) and where the ETA is measured from.
class run_progress {
 public:
  /// The first line's rates are measured from the log's counters now, at log time `t_s`.
  run_progress(const run_log& log, progress_facts facts, double t_s);
  /// Seconds since the last line (or the start).
  double since_last(double t_s) const { return t_s - prev_t_; }
  /// progress_line at log time `t_s`, with the budget spent and its ETA (none once `stopping`).
  std::string line(const run_log& log, double t_s, bool stopping = false);

 private:
  progress_facts f_;
  run_counters prev_;
  double prev_t_ = 0.0;
  double eta_from_t_ = -1.0, eta_from_done_ = 0.0;
};

/// A learner node's progress line (node_progress_line) at `t_s` seconds, followed by
/// `suffix_if_finished` once one of its learners has finished, else by `suffix`.
std::string node_progress(const run_log& log, double t_s, const std::string& suffix,
                          const std::string& suffix_if_finished);

/// Inner steps of every learner the log knows, {"id": step} (a learner node's syncer_lost and
/// syncer_back events).
nlohmann::json learner_steps(const run_log& log);

/// The counters a node's metrics and /status show (actors/services/node_metrics.hpp), as they
/// are now.
run_counters reported_counters(const run_log& log);

}  // namespace dd::actors

// The job's answer to run_job (finished_atom, run_result) stays within its actor system: the
// result is never serialized, so it needs no type ID of its own.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dd::actors::run_result)
