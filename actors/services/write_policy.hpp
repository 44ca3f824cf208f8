// actors/services/write_policy.hpp — what a node does when a file it promised cannot be written
// (events.jsonl, an owner checkpoint, the monitor's record, learner_loss.csv, a learner node's
// forwarded events). The node chooses it once, when it starts, and hands it to its run log
// (run_log::set_write_policy), which applies it to every failed write reported to it
// (run_log::write_trouble). A role reports a failed write to its node by message
// (write_trouble_atom, file, error: an owner's checkpoint, the monitor's record) and the node's
// job actor answers with the verdict by message (write_verdict_atom, file, write_verdict); the
// role does what it says and never asks which policy holds. The node's own writers (events.jsonl,
// retried_lines) apply it in place. The node's loop asks the policy what the writes failing now
// mean for the run (on_failing).
//
// Two policies: `dd-node run` ends the run at the first failed write, naming the file;
// cluster nodes (`dd-node syncer`, `dd-node learner`) retry with backoff, mark the file degraded
// and go on until writes have kept failing for longer than checkpoint.max_failing_seconds.
// A plain value, sans-IO; any thread.
#pragma once

#include <string>

namespace dd::actors {

/// What a failed or failing write means, as the node's policy says.
enum class write_verdict {
  go_on,           ///< nothing is failing: carry on
  retry_degraded,  ///< write it again with backoff; the run goes on, the file marked degraded
  end_the_run,     ///< do not retry: the node ends the run (naming the file)
};

/// "go_on", "retry_degraded", "end_the_run".
const char* to_string(write_verdict v);

class write_policy {
 public:
  /// dd-node run: the first failed write ends the run (run_log::write_failed), naming the file.
  static write_policy end_the_run() { return write_policy(false, 0.0); }
  /// Cluster nodes: a failed write is kept and written again with backoff, the file is marked
  /// degraded (summary.json `degraded`) and the run goes on, until writes have kept failing for
  /// more than `max_failing_s` seconds (checkpoint.max_failing_seconds).
  static write_policy retry_and_degrade(double max_failing_s) {
    return write_policy(true, max_failing_s);
  }
  /// end_the_run.
  write_policy() = default;

  /// Failed writes are retried (retry_and_degrade).
  bool retries() const noexcept { return retry_; }
  /// retry_and_degrade: how long writes may keep failing, seconds.
  double max_failing_s() const noexcept { return max_failing_s_; }

  /// A write failed just now: what its writer must do (retry_degraded or end_the_run).
  write_verdict on_failed_write() const noexcept {
    return retry_ ? write_verdict::retry_degraded : write_verdict::end_the_run;
  }
  /// Writes have kept failing for `failing_s` seconds without a success (0: none failing;
  /// run_log::failing_for_s): go_on when none fails, retry_degraded up to max_failing_s
  /// (inclusive), end_the_run past it. end_the_run's first failure ends the run at once.
  write_verdict on_failing(double failing_s) const noexcept;
  /// The run's write failure when on_failing(`failing_s`) ends the run (`files`: which, with
  /// their errors; run_log::failing_files): "writes kept failing for 12 s
  /// (checkpoint.max_failing_seconds = 10): ...".
  std::string limit_message(double failing_s, const std::string& files) const;

 private:
  write_policy(bool retry, double max_failing_s) : retry_(retry), max_failing_s_(max_failing_s) {}
  bool retry_ = false;
  double max_failing_s_ = 0.0;
};

}  // namespace dd::actors
