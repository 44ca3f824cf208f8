// actors/nodes/learner_node.hpp — a learner process (`dd-node learner`): joins the health monitor
// of a syncer node over the network, receives the run's identity, experiment and its learner ids in
// the node handshake (messages/control.hpp), and runs those learners under a learner
// supervisor with node-local services (its own copy of the data, step admission, event log,
// fault hooks). Nothing but actor handles and Cap'n Proto bytes crosses to the syncer.
//
// Promises under failure:
// - the syncer unreachable at start: connection attempts go on with exponential backoff and
//   ±20% jitter (base 0.5 s, cap `backoff_cap_s`), every attempt bounded (a non-blocking TCP
//   connect with a deadline first, then CAF's handshake on its own thread with a deadline), for
//   ever or until `join_deadline_s` (exit_deadline; no attempt runs past it);
// - the syncer lost mid-run (its process died, the link went silent for the middleman's
//   connection timeout): the learners keep stepping — pushes to the lost owners are dropped, at
//   most one per fragment stays queued — and the node reconnects with the same backoff (after
//   `join_deadline_s` of it the learners are stopped and the node exits exit_deadline); once the
//   syncer is back (same run id) every live learner rejoins it with a new incarnation and keeps
//   its own step and data cursor; a syncer of another run is refused (exit_other_run). A rejoin
//   handshake left unanswered by a syncer just reached (for 1 s, or `connect_timeout_s` when
//   shorter) is retried at once on fresh connections, with the whole `connect_timeout_s`, once
//   per backoff step. A syncer
//   lost for any other reason than a lost link (a garbled frame killed the monitor's proxy),
//   a lookup that returns a dead handle, or one refused as a second connection to the same node
//   shuts the node's connections to the syncer down first (shutdown_connections_to,
//   `syncer_connection_dropped` event), so the rejoin gets fresh proxies. While
//   the syncer is away the node logs an `outage_steps` event (every learner's step) once a
//   second, forwarded with its other buffered events after the rejoin (dd-chaos report);
// - refused at the handshake: exits with the status of the refusal (below), after printing the
//   monitor's reason; `run_finished` is a clean exit (0).
// Its states and decisions: learner_node_core.hpp; dialing the syncer: node_connector.hpp.
// Thread: call from main(); returns the process exit status.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <caf/actor.hpp>
#include <caf/local_actor.hpp>

#include "actors/link/protocol.hpp"
#include "actors/nodes/learner_node_core.hpp"
#include "actors/nodes/node_config.hpp"
#include "actors/nodes/node_connector.hpp"
#include "messages/control.hpp"

namespace dd::actors {

/// Flags of `dd-node learner`.
struct learner_node_options {
  /// Syncer addresses (host, port), tried in turn.
  std::vector<std::pair<std::string, uint16_t>> join;
  /// What a failed attempt to reach the syncer at one of `join` says (node_connector::explain;
  /// dd-node learner: join_failure_text, naming the syncer behind a TLS forwarder; `reached`:
  /// the node reached the syncer before). None: the lookup's error.
  std::function<std::string(const std::pair<std::string, uint16_t>& addr, const std::string& error,
                            bool reached)>
      explain_join_failure;
  /// Learner ids to run; empty: `learners` free ids chosen by the monitor.
  std::vector<int32_t> learner_ids;
  int learners = 1;
  /// Compute threads per learner; 0 = max(1, cores / learners on this node).
  int threads = 0;
  /// Start even when the learners' memory estimate (actors/nodes/memory_check.hpp) exceeds the
  /// host's available memory or address-space limit; otherwise that exits 2 after the handshake.
  bool force_memory = false;
  /// Data file; empty = the experiment's data.file (its path on this host).
  std::string data_file;
  /// Where this node writes events.jsonl; empty = runs/<experiment>/nodes/<node name>.
  std::string run_dir;
  /// Name in logs and in the nodes file; empty = <hostname>-<pid>.
  std::string node_name;
  /// The run this node must belong to; empty = whichever the syncer runs (learned at the first
  /// handshake and required from then on).
  std::string run_id;
  /// The run's join token (actors/link/join_auth.hpp), proven at every node handshake and
  /// tensor channel hello when the syncer asks for it; empty = none. Never logged.
  std::string join_token;
  /// This node's TLS certificate's notAfter, unix seconds (0 = no TLS): the metric
  /// dd_tls_cert_expiry_seconds. The TLS itself is the forwarders dd-node learner puts in front
  /// of `join` (actors/link/tls_tunnel.hpp).
  double tls_not_after_unix = 0;
  /// Give up after this many seconds without a syncer, at start or after losing it (0 = never).
  double join_deadline_s = 0.0;
  double backoff_base_s = 0.5;
  /// The longest wait between attempts. 5 s: below an owner's default wait for the learners'
  /// fragment copies after a resume (`checkpoint.rebuild_wait_seconds`, 10 s), so a node that
  /// holds newer fragments than the checkpoints is back in time to hand them over (with 15 s, two
  /// of four fragments were restored from an older checkpoint).
  double backoff_cap_s = 5.0;
  /// Deadline of one connection attempt (TCP connect, then CAF's handshake), seconds.
  double connect_timeout_s = 3.0;
  /// Progress line period on stdout, seconds (0 = off).
  double progress_every_s = 5.0;
  /// Seed of the backoff jitter (printed); 0 = derived from the node name.
  uint64_t seed = 0;
  node_transport transport;
  /// Nice steps added to every learner's compute thread and its backend's pool
  /// (learner_config::compute_nice), so the middleman's threads, at the process's own nice, run
  /// ahead of this node's compute. 0 = off (the default: against load from other processes it
  /// did not reduce link drops; docs/cluster.md, "Under load").
  int compute_nice = 0;
  /// Host-wide step admission shared with the other learner processes of this host
  /// ("sysv:<semaphore id>", made by dd-node launch); empty = the node's own compute gate.
  std::string step_admission;
  /// The chaos endpoint's loopback address (actors/services/chaos_endpoint.hpp); port 0 = any.
  /// Empty host = off. Started once the node knows its learner ids; its port is printed.
  std::pair<std::string, uint16_t> chaos_endpoint;
  /// The experiment's message faults (is_message_fault) are not applied from the experiment:
  /// dd-chaos sends them through the chaos endpoint (dd-node launch; needs chaos_endpoint).
  bool message_faults_via_endpoint = false;
  /// The node's HTTP listener (actors/services/node_metrics.hpp: /metrics, /healthz, /readyz,
  /// /status) on this address (port 0 = any; printed); empty host = off. Started once the node
  /// knows its run and learner ids.
  std::pair<std::string, uint16_t> http;
  /// Set to a signal number by a signal handler: the learners stop at their next step and leave.
  const std::atomic<int>* interrupt = nullptr;
};

/// Runs the learner node to the end of the run; returns its exit status (learner_node_exit).
int run_learner_node(const learner_node_options& options);

struct job_setup;

/// The learner node of `dd-node run`, in the job's process: spawns from `self` the
/// learner supervisor with the run's M learners, configured from `setup` (role_contexts.hpp)
/// with the node's services (the run's dataset, event log, fault hooks and step admission),
/// joining `monitor`; the supervisor reports to `job`. Learners are detached in real time and
/// event-based in logical time (options.simulated_time).
supervisor_hdl spawn_local_learners(caf::local_actor* self, const supervisor_report_hdl& job,
                                    job_setup& setup, const monitor_hdl& monitor);

}  // namespace dd::actors
