// actors/nodes/node_connector.hpp — a learner node's I/O towards its syncer: dialing the
// syncer's health monitor (a bounded TCP probe, then CAF's remote lookup on its own thread with
// a deadline), the node_join handshake, the backoff between attempts, and shutting stale
// connections down. What to do with each outcome is learner_node_core's (learner_node_core.hpp).
// Thread: the node's main thread (a lookup runs on a thread of its own and is abandoned past
// its deadline).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/link/protocol.hpp"
#include "messages/control.hpp"
#include "runtime/rng.hpp"

namespace dd::actors {

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

/// One node handshake: a node_join round trip, and when the syncer answers with a join token
/// challenge (node_refusal::auth_challenge), the same request again with the proof over it
/// (actors/link/join_auth.hpp; a node without `token` sends it back unproven and gets an
/// `unauthorized` reply naming what it lacks). nullopt (with `why`) when the monitor did not
/// answer in time (`*timed_out` set, when given), answered with an error or with bytes that do
/// not decode. The reply is decoded under the run its own envelope names, so a syncer of another
/// run is read as a refusal (other_run) rather than as undecodable bytes; a request naming a run
/// answered by another run is refused here whatever the reply says.
std::optional<node_join_reply> node_handshake(caf::scoped_actor& self, const monitor_hdl& monitor,
                                              const node_join& req, const std::string& token,
                                              double timeout_s, std::string* why,
                                              bool* timed_out = nullptr);

/// What a failed attempt to reach the syncer says (`error`: "HOST:PORT: what went wrong", the
/// lookup's). With TLS (`forwarder` = "127.0.0.1:F", the node's local TLS forwarder that
/// `error` names; `syncer` = the syncer's HOST:PORT behind it): the forwarder's refusal when its
/// handshake with the syncer failed since the last attempt (`tls_refusal`, naming the syncer and
/// the cause), else `error` with the syncer's address in front of the forwarder's. Without TLS
/// (`forwarder` empty): a connection the syncer closed during the handshake gets its possible
/// causes — a syncer restarting, a proxy closing the connection, and, only on a node that never
/// reached the syncer (`reached_before` false), a syncer that listens with TLS (it closes a
/// plaintext node's connection so; a node that reached it before speaks what it speaks).
std::string join_failure_text(const std::string& error, const std::string& forwarder,
                              const std::string& syncer, const std::string& tls_refusal,
                              bool reached_before = false);

/// The syncer addresses tried in turn, each attempt bounded by `connect_timeout_s` and by the
/// deadline, and the backoff between failed attempts.
struct node_connector {
  node_connector(const std::vector<std::pair<std::string, uint16_t>>& join, std::string name,
                 caf::actor_system& sys, double backoff_base_s, double backoff_cap_s,
                 double connect_timeout_s, uint64_t jitter_seed)
      : join(join),
        name(std::move(name)),
        sys(sys),
        backoff_base_s(backoff_base_s),
        backoff_cap_s(backoff_cap_s),
        connect_timeout_s(connect_timeout_s),
        jitter(jitter_seed) {}

  const std::vector<std::pair<std::string, uint16_t>>& join;
  std::string name;  ///< the node's name, in its messages
  caf::actor_system& sys;
  double backoff_base_s = 0.5;
  double backoff_cap_s = 5.0;
  double connect_timeout_s = 3.0;
  rng jitter;
  size_t next = 0;
  int attempt = 0;          ///< the backoff step
  double next_try_s = 0.0;  ///< steady seconds
  std::string last_error;
  double deadline_at = 0.0;  ///< steady seconds; no attempt runs past it (0 = none)
  std::pair<std::string, uint16_t> last_addr;  ///< the address of the latest attempt
  bool reached = false;  ///< a lookup of the syncer succeeded once (its CAF handshake passed)
  /// Rewrites a failed lookup's error for the node's messages (e.g. join_failure_text; `reached`:
  /// the node reached the syncer before); none: the error as it is.
  std::function<std::string(const std::pair<std::string, uint16_t>& addr, const std::string& error,
                            bool reached)>
      explain;

  static double now_s();
  /// One attempt when its time has come; the monitor or nullopt. A failed lookup counts as a
  /// failed attempt (failed()); `attempt` restarts only when told (a handshake accepted).
  std::optional<monitor_hdl> try_once();
  /// Counts a failed attempt (the lookup, or the handshake after it): the next one waits a
  /// backoff step, said on stderr.
  void failed(const std::string& why);
  /// Shuts the node's connections to the syncer down; returns how many, said on stderr when any.
  int drop_connections(const std::string& why);
};

}  // namespace dd::actors
