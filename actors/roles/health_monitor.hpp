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
//
// Every decision is the membership core's (actors/roles/membership.hpp, table-tested); this actor
// decodes, sends, logs, and writes monitor.json. learner_loss.csv and the forwarded node event
// files are the syncer node's recorder's (actors/services/recorder.hpp).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/node_id.hpp>
#include <caf/stateful_actor.hpp>
#include <nlohmann/json.hpp>

#include "actors/link/atoms.hpp"
#include "actors/link/join_auth.hpp"
#include "actors/link/peer_identity.hpp"
#include "actors/link/protocol.hpp"
#include "actors/roles/membership.hpp"
#include "actors/services/node_services.hpp"

namespace dd::actors {

/// Configuration of the health monitor: the membership core's options (membership.hpp: M,
/// leases, reservations, the token budget, uptime, the run's identity) and what the actor sends
/// and writes. A plain value; the node's services (event sink, recorder, TLS identities) come
/// separately (monitor_services, actors/services/node_services.hpp).
struct monitor_config : membership_options {
  int fragments = 1;  ///< P: owners in the directory
  /// How often leases are checked and the view republished, seconds.
  double tick_s = 0.5;
  /// The experiment as JSON text (sent in join replies).
  std::string experiment_json;
  /// Receives (budget_spent_atom) when the token budget is spent; may be invalid.
  job_hdl job;
  /// The syncer's incarnation (job_setup: 1 for a fresh run, one more per --resume),
  /// stamped on every message the monitor sends: a learner refuses a message of an older
  /// syncer. Every syncer role of a node must be given the same value (0 by default).
  uint64_t syncer_incarnation = 0;
  /// Sent to learner nodes in the handshake's reply.
  std::string experiment_hash;
  uint64_t steps_per_learner = 0;
  /// The monitor's record (monitor_record, membership.hpp), written atomically (temp file,
  /// fsync, rename) to this path every `record_every_s` seconds and when a learner leaves;
  /// empty = not persisted. A resumed syncer (dd-node syncer --resume) starts from
  /// `restored_record`, the file's JSON (null = none): a respawned learner then resumes from its
  /// recorded step and cursor, and the tokens budget counts the tokens of the earlier part. A
  /// failed write is handled as the node's policy says: retried with backoff and reported
  /// `degraded` (cluster nodes, the node's write policy), or the end of the run (`dd-node
  /// run`).
  std::string record_path;
  nlohmann::json restored_record;
  /// The join token (actors/link/join_auth.hpp): a node handshake and a drain must prove it
  /// over a challenge this monitor issued (the handshake's authChallenge reply, a status
  /// reply); empty = none asked. Never logged.
  std::string join_token;
};

/// CAF state of the monitor: the membership core (every decision) and the handles it sends to.
struct monitor_state {
  std::optional<membership> core;
  /// Per learner id: the actor of its current incarnation (null once it went down).
  std::map<int32_t, learner_at_syncer_hdl> handles;
  std::vector<owner_hdl> owners;  ///< per fragment: its current owner (null until subscribed)
  /// The challenges issued to nodes and operators (join_auth.hpp), each good for one proof.
  challenge_book challenges;
  static inline const char* name = "health_monitor";
};

using monitor_actor = monitor_hdl::stateful_base<monitor_state>;

/// The monitor's behavior.
/// `services`: the node's.
monitor_hdl::behavior_type health_monitor(monitor_actor* self,
                                          std::shared_ptr<const monitor_config> config,
                                          monitor_services services);

}  // namespace dd::actors
