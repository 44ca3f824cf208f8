// actors/roles/membership.hpp — the health monitor's decisions, sans I/O: who is a learner of the
// run, with which incarnation, step, tokens and data cursor; who may join (node handshakes and
// their id reservations); leases, stragglers, leaves and drains; the token budget, the global
// push clock and the run's uptime; and the monitor's record (monitor.json).
//
// Per learner id:
//
//   unknown --join--> alive --heartbeats--> alive
//                      |  \--leave / normal exit--> finished (stopped, when the run is stopping
//                      |                               or its node was stopped: a later node or
//                      |                               a resumed run takes it back)
//                      |--down (crash) / lease expired--> dead --join (respawn)--> alive (inc+1)
//
// Every call takes the monitor's clock (`now`, seconds) and returns a decision with its reason;
// the actor (health_monitor.cpp) decodes messages, sends, logs and writes what the decisions
// say. Pure value: no CAF, no files, no wall clock. Not thread-safe (one owner). Table tests:
// tests/actors/membership_test.cpp (a manual clock).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/policy/uptime.hpp"
#include "actors/services/write_policy.hpp"
#include "messages/codec.hpp"
#include "messages/control.hpp"

namespace dd::actors {

/// What the membership core is configured with (the health monitor's monitor_config extends
/// it).
struct membership_options {
  int learners = 4;  ///< M: shard count and learner ids 0..M-1
  /// A learner without a heartbeat for max(lease_min_s, lease_steps × its step-time EMA)
  /// seconds is declared dead.
  double lease_min_s = 30.0;
  double lease_steps = 50.0;
  /// A live id is given back to the node (by name) that holds it when that node asks for it
  /// again and the learner's heartbeats stopped max(reclaim_min_s, 5 × its step-time EMA)
  /// seconds ago: the node lost its link (it says so by asking), though the monitor saw no
  /// down message for it (a CAF handshake garbled on a corrupting link can record another CAF
  /// node id for the learner, and the lease takes lease_min_s).
  double reclaim_min_s = 1.0;
  /// A learner whose step-time EMA exceeds this × the median is flagged a straggler.
  double straggler_factor = 1.5;
  /// Stop when Σ tokens over all learners reaches this (0 = no token budget).
  uint64_t token_budget = 0;
  /// Tokens of one inner step (batch × context): the most a live rejoin's reported steps can
  /// have trained (live_rejoin_totals); 0 = unbounded.
  uint64_t tokens_per_step = 0;
  /// Synchronous baselines (K = M): a respawned learner resumes at the group's step (the
  /// highest step of the live learners) so its push schedule is in phase with theirs; otherwise
  /// it resumes its own recorded step (ALGORITHM.md, Recovery).
  bool align_resume_to_group = false;
  /// The learners run in other processes (dd-node syncer; their nodes join with a node
  /// handshake): a join needs a reservation, a respawn counts as a restart, and the monitor
  /// mirrors every heartbeat into its process's run log (monitor_log.hpp), forwards a stop from
  /// the job to every live learner and tells the job once every learner has left — or, after a
  /// stop, once none is live.
  bool remote_learners = false;
  /// Learner ids handed to a node stay reserved for it this long, seconds, until its learners
  /// join (so two nodes joining at once never get the same id).
  double reserve_s = 30.0;
  /// The run's identity, checked at every node handshake (messages/control.hpp) and on every
  /// message's envelope, and its data (size, training-split hash) a node must hold.
  std::string run_id;
  uint64_t data_bytes = 0;
  std::string data_hash;
  /// K of the run's uptime (summary.json `uptime`: the share of the observed time with at least
  /// K learners stepping), computed from the heartbeats (actors/policy/uptime.hpp). A learner
  /// counts as stepping for max(uptime_window_min_s, uptime_window_steps × its step-time EMA)
  /// after each heartbeat.
  size_t uptime_quorum = 1;
  /// A steps budget's inner steps per learner (0 = another budget): the heartbeat of that step
  /// is the learner's last stepping moment (its drain and leave come later).
  uint64_t uptime_last_step = 0;
  double uptime_window_min_s = 0.5;
  double uptime_window_steps = 3.0;
  /// monitor.json is written this often, seconds (and at each leave).
  double record_every_s = 2.0;
};

/// What the monitor knows about one learner id.
struct learner_record {
  uint64_t incarnation = 0;
  bool alive = false;
  bool finished = false;
  bool straggler = false;
  uint64_t step = 0;
  uint64_t tokens_this_incarnation = 0;
  uint64_t tokens_before = 0;  ///< tokens of earlier incarnations
  double step_time_ema_s = 0.0;
  std::vector<uint8_t> data_cursor;
  double last_heartbeat_s = 0.0;
  /// When it was last declared dead (monitor clock, seconds) and why (dd-node drain says so).
  double down_since_s = 0.0;
  std::string down_reason;
  double compute_this_incarnation_s = 0.0;
  double compute_before_s = 0.0;  ///< compute seconds of earlier incarnations
  std::string node;               ///< the node that holds it (remote learners)
  /// The CAF node its last incarnation joined from (rendered; empty = unknown): a dead learner's
  /// id may be joined again without a new node handshake only from there.
  std::string origin;
  /// The training loss of its last heartbeat, nats/token (NaN: none yet, nor in the record it
  /// was restored from).
  double last_loss = std::numeric_limits<double>::quiet_NaN();

  uint64_t tokens() const { return tokens_before + tokens_this_incarnation; }
  double compute_s() const { return compute_before_s + compute_this_incarnation_s; }
};

/// monitor.json: every learner's incarnation, step, tokens, compute seconds, data cursor and
/// whether it finished; the push clock; the training, uptime and observed seconds of every part
/// so far. Written by the monitor (atomically) and read by a resumed syncer.
struct monitor_record {
  struct learner {
    int32_t id = 0;
    uint64_t incarnation = 0;
    bool finished = false;
    uint64_t step = 0;
    uint64_t tokens_before = 0;
    uint64_t tokens_this_incarnation = 0;
    double compute_before_s = 0.0;
    double compute_this_incarnation_s = 0.0;
    std::vector<uint8_t> data_cursor;
    /// Its last heartbeat's training loss (NaN: unknown; a record from an older writer has none):
    /// a resumed syncer shows it for a learner not rejoined yet ("L1 ✗ down 2.316").
    double loss = std::numeric_limits<double>::quiet_NaN();
  };
  /// Whose record this is: the run's id (membership_options::run_id); empty from an older
  /// writer. A resume refuses a record of another run (runtime/run_dir.hpp state_refusal).
  std::string run_id;
  double mean_step = 0.0;
  double training_seconds = 0.0;
  double uptime_s = 0.0;
  double observed_s = 0.0;
  std::vector<learner> learners;

  /// {"format": 1, "run_id" (when known), "mean_step", "training_seconds", "uptime_s",
  /// "observed_s", "learners":
  /// [{"learner", "incarnation", "finished", "step", "tokens_before",
  /// "tokens_this_incarnation", "compute_before_s", "compute_this_incarnation_s",
  /// "data_cursor" (hex), "loss" (only when known)}]}.
  nlohmann::json to_json() const;
  /// The inverse. A record without training_seconds (an older writer) reads 0, so does one
  /// without uptime_s / observed_s; anything else missing, of the wrong type or out of range
  /// (a negative or non-finite training_seconds, uptime_s above observed_s, a data_cursor that
  /// is not hex) throws std::invalid_argument naming the field.
  static monitor_record from_json(const nlohmann::json& j);
};

/// A learner declared dead (its actor went down, its lease expired, a new incarnation replaced
/// it), and the live view right after, to publish.
struct learner_down {
  int32_t id = 0;
  uint64_t incarnation = 0;
  uint64_t step = 0;
  std::string reason;
  live_view_msg view;
};

/// Outcome of a node handshake (node_join): the ids handed to the node, or a refusal.
struct node_join_decision {
  bool accepted = false;
  /// Only the run's description was asked for (no learner ids).
  bool describe_only = false;
  node_refusal refusal = node_refusal::none;
  std::string reason;
  std::vector<int32_t> ids;
};

/// Outcome of a learner's join.
struct join_decision {
  enum class verdict { joined, rejoined, out_of_range, stopping, not_reserved };
  verdict what = verdict::joined;
  std::string reason;  ///< why it was refused; empty when accepted
  int32_t id = -1;
  uint64_t incarnation = 0;
  uint64_t resume_step = 0;
  std::vector<uint8_t> data_cursor;
  /// Its tokens and compute seconds of earlier incarnations (join_reply::tokens_before): a live
  /// rejoin later reports them plus its own as its total.
  uint64_t tokens_before = 0;
  double compute_before_s = 0.0;
  /// The id was known before (a respawn, or a live learner rejoining).
  bool known = false;
  bool live = false;
  /// A respawned (not live) learner of a remote node: counted as a restart.
  bool restart = false;
  /// The id's previous incarnation was still alive: declared dead first.
  std::optional<learner_down> replaced;
  bool accepted() const { return what == verdict::joined || what == verdict::rejoined; }
};

/// What a live rejoin of the learner recorded as `r` makes its tokens and compute seconds
/// before the new incarnation: the record's count with the incarnation's figures as the join
/// reports them, or — when the join carries the learner's totals over every incarnation
/// (protocol 5) — the larger of the record's count and that total; never backwards, and the
/// tokens at most max(req.step, r.step) × tokens_per_step (0 = unbounded) unless the record
/// already counts more. A syncer that crashed before recording an earlier rejoin's addition
/// loses none of it: the learner's total still holds it.
struct rejoin_totals {
  uint64_t tokens = 0;
  double compute_s = 0.0;
};
rejoin_totals live_rejoin_totals(const learner_record& r, const join_request& req,
                                 uint64_t tokens_per_step);

/// A learner that holds a global value other than the one its owner made for that version: the
/// digest of the bytes it holds differs from the digest the owner sent with the value
/// (heartbeat_msg::held_*). The learner fetches the fragment again on its own finding; the
/// monitor reports it (event `divergence`, dd_divergences_total, the status page).
struct divergence {
  int32_t learner = 0;
  uint64_t incarnation = 0;
  int32_t fragment = 0;
  uint64_t version = 0;
  uint64_t owner_digest = 0;
  uint64_t held_digest = 0;
};

/// Outcome of a heartbeat.
struct heartbeat_decision {
  enum class verdict { accepted, unknown_learner, stale_incarnation, not_alive };
  verdict what = verdict::accepted;
  /// Learners live now, Σ tokens of the run, the push clock after this heartbeat.
  size_t live = 0;
  uint64_t total_tokens = 0;
  double mean_step = 0.0;
  /// The token budget was spent by this heartbeat (reported once).
  bool budget_spent = false;
  /// The heartbeat reports a held value that differs from its owner's (accepted heartbeats).
  std::optional<divergence> diverged;
  bool accepted() const { return what == verdict::accepted; }
};

/// Outcome of a leave.
struct leave_decision {
  enum class verdict { left, not_current, already_gone };
  verdict what = verdict::not_current;
  /// Finished its budget (false: the run is stopping, or its node was stopped). The record's
  /// word: a resumed run takes an unfinished id back.
  bool finished = false;
  /// Left because its own node was stopped (an interrupted leave): its id waits for the next
  /// node that asks. The progress line shows such a learner away (✗) and every other leave —
  /// its budget done, drained, or stopped with the run — as "left".
  bool away = false;
  uint64_t step = 0;
};

/// Outcome of a learner actor going down.
struct down_decision {
  enum class verdict { left, dead, already_gone };
  verdict what = verdict::already_gone;
  bool finished = false;  ///< left: as a leave
  std::optional<learner_down> dead;
};

/// A learner newly flagged as a straggler.
struct straggler_flag {
  int32_t id = 0;
  double step_time_s = 0.0;
  double median_s = 0.0;
};

/// Outcome of a lease tick.
struct tick_decision {
  std::vector<learner_down> expired;  ///< leases that ran out: declared dead, to be killed
  std::vector<straggler_flag> stragglers;
  bool save_record = false;
};

/// Outcome of an operator's drain.
struct drain_decision {
  bool accepted = false;
  std::string detail;
};

class membership {
 public:
  membership(membership_options options, double now);

  /// A resumed syncer's record (monitor.json).
  void restore(const monitor_record& record, double now);
  /// The record to write now (training seconds up to `now`).
  monitor_record record(double now) const;
  /// The record was written (ok) or not at `now`: when the next write is due. Returns true
  /// when it was failing before and now succeeded.
  bool record_written(bool ok, double now);
  /// The node's verdict on a failed write of the record (write_policy.hpp): retry_degraded keeps
  /// the retries with backoff; end_the_run stops them (the node ends the run) until a write
  /// succeeds again (a join or a leave writes the record at once).
  void record_verdict(write_verdict verdict);

  /// `allowed`: the learner ids the node's certificate grants (mutual TLS; null = any): a node
  /// asking for another id is refused as unauthorized, and free ids are chosen among these.
  node_join_decision node_join(const dd::node_join& req, const std::string& origin, double now,
                               const std::set<int32_t>* allowed = nullptr);
  join_decision join(const join_request& req, const std::string& origin, double now);
  heartbeat_decision heartbeat(const heartbeat_msg& hb, double now);
  leave_decision leave(int32_t id, uint64_t incarnation, bool interrupted, double now);
  down_decision down(int32_t id, bool normal_exit, const std::string& reason, double now);
  tick_decision tick(double now);
  drain_decision drain(int32_t id, double now) const;
  /// The job asked every learner to stop: joins are refused from now on. Returns the ids of the
  /// live learners to tell.
  std::vector<int32_t> stop(double now);
  /// Remote learners: true once (then false) when every learner has left, or none is live after
  /// a stop.
  bool done_due();

  /// The live learners (ascending id) and the view's epoch (it grows with every change).
  live_view_msg view() const;
  /// dd-node status: the learners and the run's figures.
  nlohmann::json status(double now) const;
  /// Integrated uptime and observed seconds up to `now`, earlier parts included.
  std::pair<double, double> uptime(double now);

  const std::map<int32_t, learner_record>& learners() const { return learners_; }
  learner_record* find(int32_t id);
  size_t live_count() const;
  uint64_t total_tokens() const;
  /// The global step, the `eval.every_steps` clock: the mean of the learners' own inner-step
  /// counters, Σ step_m / M over the M learners of the run (a respawned learner resumes its
  /// counter, one not yet joined counts 0); 0 when M < 1. Not the push clock (mean_step).
  double global_step() const;
  double mean_step() const { return mean_step_; }
  /// Heartbeats that reported a divergence (heartbeat_decision::diverged) so far, this part.
  uint64_t divergences() const { return divergences_; }
  bool stopping() const { return stopping_; }
  double seconds_before() const { return seconds_before_; }

 private:
  learner_down declare_dead(int32_t id, const std::string& why, double now);
  bool free_for(int32_t id, const dd::node_join& req, const std::string& origin, double now) const;

  membership_options opts_;
  std::map<int32_t, learner_record> learners_;
  /// Learner id → (node name, reserved until) handed out at a node handshake, not yet joined.
  std::map<int32_t, std::pair<std::string, double>> reserved_;
  uint64_t epoch_ = 0;
  double mean_step_ = 0.0;
  uint64_t divergences_ = 0;
  bool stopping_ = false, done_reported_ = false, budget_reported_ = false;
  double started_s_ = 0.0, seconds_before_ = 0.0;
  double uptime_before_s_ = 0.0, observed_before_s_ = 0.0;
  policy::uptime_meter uptime_;
  double last_record_s_ = 0.0;
  bool record_failing_ = false;
  bool record_retries_ = true;  // record_verdict: failed writes are retried
  double record_retry_s_ = 0.0, record_backoff_s_ = 0.5;
};

}  // namespace dd::actors
