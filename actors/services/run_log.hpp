// actors/services/run_log.hpp — what a run records: the event stream (events.jsonl) and the
// run-wide counters the progress line and summary.json are computed from.
//
// A write-only event sink for the roles: they see it as an event_sink (event_sink.hpp), write
// events and counters and never read a fact back. What steers the run travels as messages (the
// monitor's global step and tokens to the evaluator, the evaluator's validation loss to the job,
// each owner's version to the monitor's status answer); only the node's reporting reads the
// counters back, through run_report (actors/services/run_report.hpp: summary.json, the progress
// lines, and what node_metrics shows at /metrics and /status); the node's loop reads its write
// failures.
//
// One `run_log` per node, created and owned by the node (job_runner, a learner node, or a test)
// and handed as the event sink of the services of every role it spawns
// (actors/services/node_services.hpp); it outlives them. Thread-safe: learners run on their own
// threads and all call it. Every event is one JSON object per line with "event" (its kind), "t"
// (seconds since the run started, on the log's clock) and "time" (Unix seconds, wall clock). Each
// line is appended whole or not at all (util::append_file); the first write that fails is kept
// (write_failure()) so the run can end loudly instead of going on without its record.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/services/event_sink.hpp"
#include "actors/services/write_policy.hpp"
#include "util/files.hpp"

namespace dd::actors {

/// Per-learner counters (one entry per learner id, across incarnations).
struct learner_stats {
  uint64_t incarnation = 0;
  uint64_t step = 0;    ///< inner steps completed (the learner's own counter)
  uint64_t tokens = 0;  ///< tokens computed, all incarnations together
  /// Last training loss, nats/token; NaN until its first step report (not known: shown "—").
  double loss = std::numeric_limits<double>::quiet_NaN();
  double compute_s = 0.0;        ///< seconds spent in inner steps (goodput numerator)
  double steps_per_s = 0.0;      ///< EMA of the learner's step rate
  uint64_t restarts = 0;         ///< respawns of this id
  uint64_t discarded_steps = 0;  ///< non-finite steps thrown away
  uint64_t pushes_sent = 0;      ///< pushes (resends included) sent by this node's learner
  uint64_t push_bytes_sent = 0;  ///< their encoded bytes
  double last_report_s = -1.0;   ///< log time of its last step report or heartbeat (< 0: none)
  /// Version of the global value it last applied, per fragment (learner side: read after each
  /// broadcast; syncer side: the base version of its last push to that fragment).
  std::map<int32_t, uint64_t> applied;
  std::map<int32_t, double> applied_at_s;  ///< log time each `applied` entry last changed
  bool stepping = false;                   ///< inside its step loop right now (uptime)
  bool alive = false;
  /// Left the run (budget spent, drained, given up) and not stepping again since: the progress
  /// line shows it as "left".
  bool finished = false;
};

/// Run-wide counters. Plain value (a snapshot copy is handed out to the node's reporting).
struct run_counters {
  std::map<int32_t, learner_stats> learners;
  uint64_t merges = 0;
  uint64_t contributors = 0;  ///< Σ contributors over merges
  uint64_t pushes = 0;
  uint64_t pushes_rejected = 0;
  uint64_t pushes_dropped = 0;  ///< lost by fault injection
  uint64_t bytes_pushed = 0;
  uint64_t bytes_broadcast = 0;
  uint64_t tokens_merged = 0;  ///< Σ over merges of the contributors' token counters
  uint64_t learner_restarts = 0;
  uint64_t owner_restarts = 0;
  /// Push and broadcast chunks refused because their payload did not match its CRC-32C.
  uint64_t chunks_refused = 0;
  /// Messages refused at their envelope: another run, a stale sender incarnation or another
  /// schema version (actors/link/wire_refusal.hpp). Never applied.
  uint64_t envelopes_refused = 0;
  /// Pushes a fragment owner refused as implausible: a pseudo-gradient norm far above the
  /// median of its recently accepted ones, or more tokens than steps × batch × context.
  uint64_t pushes_implausible = 0;
  /// Connections the syncer's frame guard closed: an oversized frame, or past the strangers'
  /// limits (actors/link/frame_guard.hpp).
  uint64_t frames_refused = 0;
  /// Join token proofs refused (actors/link/join_auth.hpp): a node handshake, a tensor channel
  /// greeting, a drain without the right token, or replayed.
  uint64_t auth_refused = 0;
  /// Heartbeats that reported a learner holding a global value other than its owner's
  /// (actors/roles/membership.hpp divergence).
  uint64_t divergences = 0;
  std::map<int32_t, double> grace_s;     ///< last grace window used per fragment, seconds
  std::map<int32_t, uint64_t> versions;  ///< current version per fragment
  double last_val_loss = -1.0;           ///< < 0 until the first evaluation
  /// Validation accuracy of the last evaluation, in [0, 1]; < 0 when none or not a classifier.
  double last_val_accuracy = -1.0;
  double last_val_at_s = 0.0;
  /// Seconds with at least K learners stepping, and seconds observed: computed by the health
  /// monitor (actors/policy/uptime.hpp) and handed over with run_log::set_uptime.
  double uptime_s = 0.0;
  double observed_s = 0.0;
  /// Learners whose supervisor gave up (restart budget spent) → their last crash reason.
  std::map<int32_t, std::string> learners_given_up;
  /// Fragment owners whose supervisor gave up → their last crash reason.
  std::map<int32_t, std::string> owners_given_up;
  /// What the run lost and went on without, each "what" → reason: "fragment 2" (an owner found
  /// no usable checkpoint and no learner's copy, so it restarted from the initial weights),
  /// or a file ("events.jsonl", an owner checkpoint) that could not be written for a while.
  /// summary.json lists them as `degraded`.
  std::map<std::string, std::string> degraded;
};

/// What a node's metrics (actors/services/node_metrics.hpp) learn from the log as it happens.
/// Called on the thread that records, under the log's lock: keep it cheap and never call the log.
class run_observer {
 public:
  virtual ~run_observer() = default;
  /// Every event line, with "event", "t" and "time".
  virtual void on_event(const nlohmann::json& line) = 0;
  /// An inner step of learner `learner` recorded at this node (its wall time, seconds).
  virtual void on_step(int32_t learner, double step_s) = 0;
};

/// The event stream and counters of one run. Thread-safe. Roles see it as an event_sink
/// (write-only); the node that owns it also reads it back for its reporting.
class run_log final : public event_sink {
 public:
  /// Seconds on the log's clock; must be monotonic.
  using clock_fn = std::function<double()>;

  /// `events_path` empty: keep events in memory only (tests); otherwise append JSON lines to the
  /// file (created or truncated). `keep_in_memory` keeps a copy of every event for `events()`.
  /// `clock` defaults to a steady clock started now. `append`: add to an existing file (a
  /// resumed run) instead of truncating it. Throws std::runtime_error naming the file and
  /// errno's text when it cannot be opened.
  explicit run_log(const std::string& events_path = {}, bool keep_in_memory = false,
                   clock_fn clock = {}, bool append = false);
  ~run_log() override;
  run_log(const run_log&) = delete;
  run_log& operator=(const run_log&) = delete;

  /// Seconds since the run started (the log's clock).
  double now() const override;
  /// Replaces the clock (a simulation switches to the actor system's manual clock before any
  /// actor runs). Not thread-safe against concurrent calls of now(): call it before spawning.
  void set_clock(clock_fn clock);
  /// Bits per byte per nat of the run's evaluation windows (runtime/eval.hpp
  /// bits_per_byte_per_nat); when > 0 every "eval" event with a val_loss also gets val_bpb =
  /// val_loss × it. Call before spawning.
  void set_bits_per_byte_per_nat(double f) { bpb_per_nat_ = f; }

  /// Appends one event: `fields` plus "event", "t" and "time", as one whole line (one write).
  /// "t" and "time" are stamped under the log's lock, in the order lines are written, so "t"
  /// never decreases from one line to the next (file, tap and events()), whatever the threads.
  /// A line that cannot be written is recorded as the write failure (see write_failed).
  void emit(const std::string& kind, nlohmann::json fields = nlohmann::json::object()) override;

  /// Records that a file the run promised could not be written (`message` names it and gives
  /// errno's text): the first one is kept and printed once on the console hook as an error.
  /// Later events are not written to the file any more (they stay in memory when kept).
  void write_failed(const std::string& message) override;
  /// The first write failure of the run; empty while every write succeeded.
  std::string write_failure() const;

  /// The node's write-failure policy (actors/services/write_policy.hpp; default end_the_run),
  /// set by the node before it spawns anything. retry_and_degrade (cluster nodes): a failed write
  /// does not end the run at once. An events.jsonl line that cannot be written is kept (at most
  /// 8 MiB of lines; beyond that lines are dropped and counted) and written again, in order, with
  /// backoff (0.5 s doubling to 10 s, on the next emit or retry_pending()); the file is marked
  /// degraded (run_counters::degraded) and the first failure and the recovery are printed on the
  /// console. Other files report through write_trouble / write_recovered. The node's loop asks
  /// the policy (write_policy::on_failing) what failing_for_s() means for the run.
  void set_write_policy(const write_policy& policy);
  /// The policy, for the node that set it; a writer is told what to do, never asks.
  write_policy policy() const;
  /// A write of `file` failed (`message` names it with errno's text). What it means is the
  /// node's policy (write_policy::on_failed_write): under retry_and_degrade `file` is degraded
  /// and failing (the console gets the first failure of a streak; failing_for_s counts it) and
  /// the answer is retry_degraded; otherwise it is the run's write failure (write_failed: the
  /// node ends the run) and the answer is end_the_run. Called by the node: its job actor for a
  /// role's report (write_trouble_atom, answered with write_verdict_atom) and the node's own
  /// writers (events.jsonl, retried_lines).
  write_verdict write_trouble(const std::string& file, const std::string& message);
  /// A write of `file` succeeded again: its failing streak ends (it stays degraded).
  void write_recovered(const std::string& file) override;
  /// Seconds the longest-failing file has been failing without a success (0: none failing).
  double failing_for_s() const;
  /// The files failing now and their last error, for messages.
  std::string failing_files() const;
  /// Writes kept events.jsonl lines when their backoff has expired.
  void retry_pending();

  /// Where warn() lines go: `dd-node run` (run_job) prints them on stderr; tests capture
  /// them. Called under no lock of the log, from any actor's thread. Set before spawning.
  using console_fn = std::function<void(const std::string& line)>;
  void set_console(console_fn console);
  /// Receives every event line as written (JSON + '\n'), under the log's lock: keep it cheap
  /// (a learner node buffers the lines and forwards them to the syncer). Set before spawning.
  using tap_fn = std::function<void(const std::string& line)>;
  void set_tap(tap_fn tap);
  /// One line for the person watching the run (not an event; emit the event as well):
  /// "[    t s] warning: <text>" to the console hook; nothing when none is set.
  void warn(const std::string& text) const override;

  /// The node's metrics observer (null: none). Set before spawning; it must outlive every
  /// thread that records, or be unset (nullptr) first.
  void set_observer(run_observer* observer);
  /// Learner `learner_id` stepped once (step_s seconds): the observer hears of it.
  void note_step(int32_t learner_id, double step_s) override;
  /// Learner `learner_id` holds version `version` of fragment `fragment` (learner_stats::applied);
  /// changes nothing when it already did.
  void note_applied(int32_t learner_id, int32_t fragment, uint64_t version) override;

  /// Copy of every event kept in memory (empty unless keep_in_memory).
  std::vector<nlohmann::json> events() const;

  /// Mutates the counters under the lock.
  void update(const std::function<void(run_counters&)>& f) override;
  /// Snapshot of the counters. Called by run_report only (actors/services/run_report.hpp), the
  /// node's one reader of the log; no role and no node loop reads it.
  run_counters snapshot() const;

  /// A learner enters (true) or leaves (false) its stepping state (learner_stats::stepping; a
  /// learner stepping again is not `finished` any more).
  void set_stepping(int32_t learner_id, bool stepping) override;
  /// The uptime figures as the health monitor computed them up to now (run_counters::uptime_s,
  /// observed_s); ignored once freeze_uptime() was called.
  void set_uptime(double uptime_s, double observed_s) override;
  /// The end of training: the uptime figures stay as they are (the monitor may still report).
  void freeze_uptime();
  /// Learner `learner_id` finished its budget, was drained or given up for good: not stepping,
  /// learner_stats::finished.
  void learner_finished(int32_t learner_id) override;

 private:
  mutable std::mutex mutex_;
  clock_fn clock_;
  double bpb_per_nat_ = 0.0;
  console_fn console_;
  tap_fn tap_;
  run_observer* observer_ = nullptr;
  util::append_file out_;
  std::string write_failure_;
  write_policy policy_;
  std::string events_path_;
  std::string pending_;           // events.jsonl lines not yet written (retry_and_degrade)
  uint64_t pending_dropped_ = 0;  // lines dropped because pending_ was full
  double next_retry_s_ = 0.0;
  double backoff_s_ = 0.5;
  std::map<std::string, std::pair<double, std::string>> failing_;  // file -> (since, error)
  bool flush_pending_locked(double now);
  void warn_error(const std::string& text) const;  // "[t s] error: <text>" to the console
  bool keep_;
  std::vector<nlohmann::json> events_;
  run_counters counters_;
  bool uptime_frozen_ = false;
};

/// A file of whole lines that a node appends to besides events.jsonl (the syncer's
/// learner_loss.csv and its learner nodes' forwarded <node>.events.jsonl), with `log`'s rule for
/// a failed write. Under retry_and_degrade (run_log::set_write_policy: cluster nodes) lines that
/// cannot be written are kept (at most 8 MiB; beyond that dropped and counted in `degraded`) and
/// written again in order with backoff (0.5 s doubling to 10 s, on the next append() or retry());
/// the file is reported through run_log::write_trouble (stderr, `degraded` naming it, counted by
/// failing_for_s() toward checkpoint.max_failing_seconds) and write_recovered. Otherwise
/// (`dd-node run`) the first failure is run_log::write_failed (the run ends, naming the file)
/// and nothing more is written. Not thread-safe: one owner (an actor) calls it.
class retried_lines {
 public:
  /// `header`: a first line written when the file does not exist yet (empty: none).
  retried_lines(run_log* log, std::string path, std::string header = {});
  /// Appends `lines` (each ending in '\n'; a cut-off last line is dropped).
  void append(std::string_view lines);
  /// Writes kept lines when their backoff has expired (call it now and then).
  void retry();
  const std::string& path() const { return path_; }
  /// Lines kept because their write failed, bytes.
  size_t pending_bytes() const { return pending_.size(); }

 private:
  void flush();
  run_log* log_;
  std::string path_;
  util::append_file out_;
  std::string pending_;
  uint64_t dropped_ = 0;
  bool failing_ = false, dead_ = false;
  double next_retry_s_ = 0.0, backoff_s_ = 0.5;
};

}  // namespace dd::actors
