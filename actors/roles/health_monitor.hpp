// actors/roles/health_monitor.hpp — membership and health of the learners, and the directory of
// fragment owners.
//
// Promises: assigns each joining learner its id, a new incarnation and its data shard, and hands
// a respawned learner the step and data cursor last recorded for it; keeps a heartbeat lease per
// learner and declares a learner dead when its actor goes down or its lease expires (then it is
// killed so its supervisor respawns it); flags stragglers; publishes the live-learner view to
// every fragment owner whenever it changes (and periodically, with fresh step-time EMAs); tells
// learners the current owner of every fragment; reports when a token budget is spent.
//
// Interface: monitor_hdl (actors/link/protocol.hpp; every `bytes` is a wire message,
// messages/control.hpp, stamped with the run id and the syncer's incarnation and checked on
// decode). It sends (live_atom, bytes live_view_msg, learner handles) to the owners,
// (owners_atom, bytes owner_directory, owner handles), (progress_atom, bytes) and (stop_atom,
// bytes stop_msg) to learners, (budget_spent_atom) to the job when the budget is spent, and
// (children_done_atom, child_kind::learner) when every remote learner has left. Event-based.
//
// Node handshake (remote learners): a node_join asking for 0 learners only asks for the run's
// description (run id, experiment, data identity); one asking for learners is checked (protocol
// version, run id, data size and hash) and given free ids — ids asked for by number when they
// are not live (or live but held by the asking CAF node itself: a learner process reconnecting
// after its link dropped), else the lowest ids that are neither live, finished nor reserved — or
// refused with a reason that the monitor logs ("node_refused" event) and the node prints. A learner
// join needs such a reservation, except the join of a dead, unfinished learner id from the CAF node
// its last incarnation joined from (a learner actor its node's supervisor respawned).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/node_id.hpp>
#include <caf/stateful_actor.hpp>
#include <nlohmann/json.hpp>

#include "actors/link/atoms.hpp"
#include "actors/policy/uptime.hpp"
#include "actors/link/protocol.hpp"
#include "actors/services/run_log.hpp"
#include "util/files.hpp"

namespace dd::actors {

class run_log;

/// Configuration of the health monitor.
struct monitor_context {
  int learners = 4;   ///< M: shard count and learner ids 0..M-1
  int fragments = 1;  ///< P: owners in the directory
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
  /// How often leases are checked and the view republished, seconds.
  double tick_s = 0.5;
  /// A learner whose step-time EMA exceeds this × the median is flagged a straggler (logged).
  double straggler_factor = 1.5;
  /// Stop when Σ tokens over all learners reaches this (0 = no token budget).
  uint64_t token_budget = 0;
  /// Synchronous baselines (K = M): a respawned learner resumes at the group's step (the
  /// highest step of the live learners) so its push schedule is in phase with theirs; otherwise
  /// it resumes its own recorded step (ALGORITHM.md, Recovery).
  bool align_resume_to_group = false;
  /// The experiment as JSON text (sent in join replies).
  std::string experiment_json;
  /// Receives (budget_spent_atom) when the token budget is spent; may be invalid.
  job_hdl job;
  /// The learners run in other processes (dd-node syncer; their nodes join with node_join_atom):
  /// the monitor then mirrors every heartbeat into this process's run log (step, tokens, loss,
  /// compute time, stepping — the learner's own log is in its process), counts rejoins as
  /// restarts, forwards (stop_atom) from the job to every live learner, and sends the job
  /// (children_done_atom, child_kind::learner) once every learner has left — or, after a stop,
  /// once none is live.
  bool remote_learners = false;
  /// The run's identity, checked at every node handshake (messages/control.hpp) and on every
  /// message's envelope.
  std::string run_id;
  /// The syncer's incarnation (job_setup: 1 for a fresh run, one more per --resume),
  /// stamped on every message the monitor sends: a learner refuses a message of an older
  /// syncer. Every syncer role of a node must be given the same value (0 by default).
  uint64_t syncer_incarnation = 0;
  std::string experiment_hash;
  uint64_t data_bytes = 0;
  std::string data_hash;
  uint64_t steps_per_learner = 0;
  /// Learner ids handed to a node stay reserved for it this long, seconds, until its learners
  /// join (so two nodes joining at once never get the same id).
  double reserve_s = 30.0;
  /// The monitor's record of every learner (incarnation, step, tokens, compute time, data
  /// cursor, finished), the push clock and the run's training seconds so far (all parts:
  /// `training_seconds`, what a resumed `budget.seconds` run subtracts), written atomically (temp
  /// file, fsync, rename) to this path every `record_every_s` seconds and when a learner leaves;
  /// empty = not persisted. A resumed syncer (dd-node syncer --resume) starts from
  /// `restored_record`, the file's JSON (null = none): a respawned learner then resumes from its
  /// recorded step and cursor, and the tokens budget counts the tokens of the earlier part.
  std::string record_path;
  /// Where learner nodes' forwarded event lines go (<dir>/<node>.events.jsonl); empty = dropped.
  std::string forward_dir;
  /// Every heartbeat's training loss as a CSV row — a learner sends one after every applied
  /// inner step, so one row per learner step while the monitor hears it:
  /// wall_time,learner,incarnation,step,tokens,loss,lr (wall_time: Unix seconds when the
  /// monitor recorded it; tokens: the learner's total over its incarnations; loss: that step's
  /// training loss, nats/token; lr: the learning rate it applied). Empty = not written.
  /// A failed write of any of these three files (record_path, forward_dir's files, loss_path)
  /// is handled as `log` says for the node: retried with backoff and reported `degraded`
  /// (cluster nodes, run_log::set_retry_writes), or the end of the run (`dd-node run`).
  std::string loss_path;
  double record_every_s = 2.0;
  /// K of the run's uptime (summary.json `uptime`: the share of the observed time with at least
  /// K learners stepping), computed here from the heartbeats (actors/policy/uptime.hpp) and
  /// handed to `log` (run_log::set_uptime) after every heartbeat, change and tick. A learner
  /// counts as stepping for max(uptime_window_min_s, uptime_window_steps × its step-time EMA)
  /// after each heartbeat.
  size_t uptime_quorum = 1;
  /// A steps budget's inner steps per learner (0 = another budget): the heartbeat of that step
  /// is the learner's last stepping moment (its drain and leave come later).
  uint64_t uptime_last_step = 0;
  double uptime_window_min_s = 0.5;
  double uptime_window_steps = 3.0;
  nlohmann::json restored_record;
  run_log* log = nullptr;
};

/// What the monitor knows about one learner id.
struct learner_record {
  uint64_t incarnation = 0;
  bool alive = false;
  bool finished = false;
  bool straggler = false;
  learner_at_syncer_hdl handle;
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
  /// The CAF node its last incarnation joined from: a dead learner's id may be joined again
  /// without a new node handshake only from there (a learner actor its node respawned).
  caf::node_id caf_node;
};

/// CAF state of the monitor.
struct monitor_state {
  std::map<int32_t, learner_record> learners;
  std::vector<owner_hdl> owners;  ///< per fragment: its current owner (null until subscribed)
  uint64_t epoch = 0;
  bool budget_reported = false;
  /// The global push clock (progress_msg::mean_step): Σ over accepted heartbeats of the steps
  /// they advance / the learners live then.
  double mean_step = 0.0;
  /// The job asked every learner to stop (remote learners): joins are refused from now on.
  bool stopping = false;
  bool done_reported = false;
  /// Learner id → (node name, reserved until, monitor clock seconds) handed out at a node
  /// handshake and not yet joined.
  std::map<int32_t, std::pair<std::string, double>> reserved;
  double last_record_s = 0.0;
  /// Training seconds of the run's earlier parts (a resumed run: the record's
  /// `training_seconds`), and when this part's monitor started (its clock, seconds).
  double seconds_before = 0.0;
  double started_s = 0.0;
  /// Uptime seconds and observed seconds of the earlier parts (the record's `uptime_s` and
  /// `observed_s`): added to this part's before they go to the run log, so that summary.json's
  /// uptime covers the whole run.
  double uptime_before_s = 0.0, observed_before_s = 0.0;
  /// Per node: its forwarded event lines (retried on a failed write, see run_log.hpp).
  std::map<std::string, std::shared_ptr<retried_lines>> forwarded;
  std::shared_ptr<retried_lines> loss_csv;
  /// The run's uptime (see monitor_context::uptime_quorum).
  policy::uptime_meter uptime;
  /// monitor.json failed to be written: the next try (monitor clock, seconds) and its backoff.
  bool record_failing = false;
  double record_retry_s = 0.0, record_backoff_s = 0.5;
  static inline const char* name = "health_monitor";
};

using monitor_actor = monitor_hdl::stateful_base<monitor_state>;

/// The monitor's record as JSON (see monitor_context::record_path) and its inverse; a record
/// that does not parse as one throws std::invalid_argument naming the field. `clock_s` is the
/// monitor's clock: training_seconds = seconds_before + clock_s − started_s. A record without
/// training_seconds (an older writer) restores 0; so does one without uptime_s / observed_s
/// (the seconds with at least K learners stepping, and observed, over every part so far).
nlohmann::json monitor_record(const monitor_state& st, double clock_s = 0.0);
void restore_monitor_record(monitor_state& st, const nlohmann::json& record);

/// The monitor's behavior.
monitor_hdl::behavior_type health_monitor(monitor_actor* self,
                                          std::shared_ptr<const monitor_context> ctx);

}  // namespace dd::actors
