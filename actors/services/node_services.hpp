// actors/services/node_services.hpp — what a node hands the roles it spawns besides their
// configuration: its services. A node (job_runner's syncer and learner nodes, dd-node learner, a
// test) owns the run log, the fault hooks, the compute gate, the channel route, each owner's
// history and the evaluator's flags; a role gets the ones it uses, as one of the structs below,
// at spawn (`learner(self, config, services)`), next to its `*_config` (a plain value: what the
// experiment and the node decided; no service pointers, no shared state). Every incarnation a
// supervisor spawns gets the same services. A role writes to the run log only through its
// event_sink (write-only; the node's reporting reads the log); the services outlive the roles.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>

#include "actors/link/chunk_flow.hpp"
#include "actors/link/protocol.hpp"
#include "actors/services/event_sink.hpp"
#include "actors/services/owner_history.hpp"
#include "actors/services/step_faults.hpp"

namespace dd::actors {

class fault_hooks;
class node_recorder;
class owner_faults;
class peer_identity;
class step_admission;

/// What a node owns and shares out to its roles (all may be null): the run log as their event
/// sink, the fault hooks, the compute gate and the route of its tensor channel. The node builds
/// each role's services from it (actors/nodes/role_contexts.hpp learner_services_of).
struct node_services {
  event_sink* log = nullptr;
  fault_hooks* faults = nullptr;
  step_admission* gate = nullptr;
  /// The transport of chunks to other nodes (null: CAF only).
  std::shared_ptr<const channel_route> channel;
};

/// A learner's services (one learner id; each incarnation starts from a copy).
struct learner_services {
  /// The node's event sink; null: nothing is recorded.
  event_sink* log = nullptr;
  /// The node's fault hook at the step (actors/services/step_faults.hpp); each incarnation
  /// starts from this copy. Default: no faults.
  learner_step_faults step_faults{nullptr, nullptr};
  /// The node's decisions about the learner's links (the fault filter on its pushes, their
  /// transport).
  link_setup link;
  /// Step admission: fair core sharing with the learners of the process or host (may be null);
  /// see compute_gate.hpp.
  step_admission* gate = nullptr;
  /// Node-local: the current health monitor when it can change under the learner (a learner
  /// node whose syncer restarted); when set, an incarnation joins the monitor it returns instead
  /// of the configured one. May be empty (see learner_config::leave for what it changes).
  std::function<monitor_hdl()> current_monitor;
};

/// A fragment owner's services (one fragment; every incarnation gets the same).
struct owner_services {
  /// The node's event sink; null: nothing is recorded.
  event_sink* log = nullptr;
  /// The node's fault hook at this owner (kill_owner faults, actors/services/owner_faults.hpp);
  /// null: none.
  std::shared_ptr<const owner_faults> faults;
  /// The node's decisions about the owner's links (its fault filter on broadcasts, transport).
  link_setup link;
  /// What the earlier incarnations of this owner left (starts, highest version); never null.
  std::shared_ptr<owner_history> history = std::make_shared<owner_history>();
  /// Where a failed checkpoint write is reported (write_trouble_atom): the node (the job), which
  /// answers with its verdict (write_verdict_atom). Empty: a failed write is a `failure` event
  /// only, never written again.
  write_report_hdl node;
};

/// The health monitor's services.
struct monitor_services {
  /// The node's event sink: events, the remote learners' mirrored progress (monitor_log.hpp),
  /// uptime; null: nothing is recorded.
  event_sink* log = nullptr;
  /// The node's recorder (learner_loss.csv, forwarded node events): the monitor hands it every
  /// heartbeat's loss and every node's forwarded event lines. Null = neither is kept.
  std::shared_ptr<node_recorder> recorder;
  /// Mutual TLS: which certificate each CAF node connected with (the frame guard binds them).
  /// Set: a node handshake is answered only for a node bound to a certificate, with learner ids
  /// that certificate names (tls.hpp learner_ids_of). Null: no TLS.
  const peer_identity* identities = nullptr;
  /// Where a failed write of the monitor's record is reported (write_trouble_atom): the node (the
  /// job), which answers with its verdict (write_verdict_atom). Empty: a failed write is a
  /// `failure` event only, retried on the record's own backoff.
  write_report_hdl node;
};

/// The evaluator's services: its event sink and the two flags it shares with the job.
struct evaluator_services {
  /// The node's event sink (write-only: the evaluator reads nothing back); may be null.
  event_sink* log = nullptr;
  /// Set by the job when the run ends without waiting for an evaluation in progress (an interrupt
  /// past its deadline): the evaluation stops at its next batch. Null = never.
  std::shared_ptr<std::atomic<bool>> stop;
  /// Set once the final global model is on disk at the configured model path (before its
  /// scoring): the job names the file in summary.json even when an interrupt cut the scoring
  /// short. Null = none.
  std::shared_ptr<std::atomic<bool>> model_written;
};

/// A supervisor's services.
struct supervisor_services {
  /// The node's event sink (respawn, give_up); may be null.
  event_sink* log = nullptr;
};

}  // namespace dd::actors
