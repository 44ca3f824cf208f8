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
//   handshake left unanswered for `connect_timeout_s` by a syncer just reached is retried at
//   once on fresh connections, once per backoff step. A syncer
//   lost for any other reason than a lost link (a garbled frame killed the monitor's proxy),
//   a lookup that returns a dead handle, or one refused as a second connection to the same node
//   shuts the node's connections to the syncer down first (shutdown_connections_to,
//   `syncer_connection_dropped` event), so the rejoin gets fresh proxies. While
//   the syncer is away the node logs an `outage_steps` event (every learner's step) once a
//   second, forwarded with its other buffered events after the rejoin (dd-chaos report);
// - refused at the handshake: exits with the status of the refusal (below), after printing the
//   monitor's reason; `run_finished` is a clean exit (0).
// Thread: call from main(); returns the process exit status.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <caf/actor.hpp>
#include <caf/local_actor.hpp>

#include "actors/link/protocol.hpp"
#include "actors/nodes/node_config.hpp"
#include "messages/control.hpp"

namespace dd::actors {

/// Exit statuses of a learner node (documented in `dd-node learner --help` and docs/operating.md).
enum learner_node_exit : int {
  node_exit_ok = 0,             ///< every learner finished, or the run was already over
  node_exit_failure = 1,        ///< a runtime failure (a learner given up, bad experiment)
  node_exit_usage = 2,          ///< bad flags
  node_exit_other_run = 3,      ///< the syncer runs another run (run id differs)
  node_exit_protocol = 4,       ///< the syncer speaks another protocol version
  node_exit_data_mismatch = 5,  ///< this node's data differs from the syncer's
  node_exit_deadline = 6,       ///< no syncer reached (or no learner id free) by --join-deadline
  node_exit_unauthorized = 7,   ///< the syncer refused this node's join token (or it has none)
  node_exit_interrupted = 130,  ///< SIGINT (143 SIGTERM): learners stopped and left
};

/// Flags of `dd-node learner`.
struct learner_node_options {
  /// Syncer addresses (host, port), tried in turn.
  std::vector<std::pair<std::string, uint16_t>> join;
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
  /// (learner_context::compute_nice), so the middleman's threads, at the process's own nice, run
  /// ahead of this node's compute. 0 = off (the default: against load from other processes it
  /// did not reduce link drops; docs/operating.md, "Under load").
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

/// Whether a node whose handshake the syncer refused for `r` asks again (after a backoff step)
/// instead of exiting with refusal_status: `no_free_learner` (ids may free up) and `bad_request`
/// (the syncer could not decode the node_join; this node encodes well-formed requests, so the
/// bytes were damaged on the way — a link that corrupts, e.g. `dd-chaos net corrupt` — and the
/// node once exited 2, "bad flags", leaving its learners out of the rest of the run). Every
/// other refusal is final.
bool refusal_is_retried(dd::node_refusal r);

/// Whether a failed remote lookup of the syncer's monitor (its error text) can have left CAF
/// holding a connection to the syncer that every later lookup reuses, so the node must shut its
/// sockets to the syncer down (shutdown_connections_to) before the next attempt:
/// `disconnect_during_handshake` (CAF refuses a second connection to a node it is still
/// connected to) and `unexpected_actor_messaging_interface` (the handshake's interface
/// signatures did not match monitor_hdl; with the same app identifier, i.e. protocol version,
/// they were damaged on the way, and CAF's middleman caches that handshake per host and port for
/// as long as its connection lives: a node once failed every rejoin for the rest of the run on
/// one damaged handshake).
bool lookup_error_leaves_stale_connection(const std::string& error);

/// Runs the learner node to the end of the run; returns its exit status (learner_node_exit).
int run_learner_node(const learner_node_options& options);

/// Backoff before connection attempt `attempt` (0-based): min(cap, min(cap, base × 2^attempt) ×
/// (1 + j)) with j uniform in [−0.2, 0.2] drawn from `u01` in [0, 1): never above the cap.
/// Seconds.
double join_backoff_s(int attempt, double base_s, double cap_s, double u01);

/// True when a TCP connection to host:port is accepted within `timeout_s` (a non-blocking
/// connect and poll; never blocks longer). `why` gets the reason when it is not.
bool tcp_reachable(const std::string& host, uint16_t port, double timeout_s, std::string* why);

/// Shuts down (shutdown(2), SHUT_RDWR; the descriptor stays open for its owner) every TCP socket
/// of this process whose peer is one of `peers` (host, port; resolved, IPv4 and IPv6). CAF's
/// multiplexer then reads end-of-file and drops that connection with every proxy it made, so the
/// next remote lookup connects afresh: CAF 0.17 has no call that closes a client connection,
/// keeps a connection whose proxies a garbled frame killed (the syncer's monitor then looks down
/// though the syncer runs), and refuses a second connection to a node it is still connected to
/// (disconnect_during_handshake). Returns the number of sockets shut down (0 when /proc/self/fd
/// cannot be read).
int shutdown_connections_to(const std::vector<std::pair<std::string, uint16_t>>& peers);

struct job_setup;

/// The learner node of `dd-node run`, in the job's process: spawns from `self` the
/// learner supervisor with the run's M learners, configured from `setup` (role_configs.hpp)
/// with the node's services (the run's dataset, event log, fault hooks and step admission),
/// joining `monitor`; the supervisor reports to `job`. Learners are detached in real time and
/// event-based in logical time (options.simulated_time).
supervisor_hdl spawn_local_learners(caf::local_actor* self, const supervisor_report_hdl& job,
                                    job_setup& setup, const monitor_hdl& monitor);

}  // namespace dd::actors
