// actors/services/chaos_endpoint.hpp — a node's chaos endpoint: a loopback TCP control socket
// through which `dd-chaos msg ...` applies message faults inside a running node (drop, duplicate,
// delay or reorder pushes and broadcasts, corrupt a push, a NaN in a learner's step, a learner that
// fails at a step). Off unless `--chaos-endpoint HOST:PORT` is given to `dd-node syncer` /
// `dd-node learner`; `dd-node launch` gives it on 127.0.0.1 and records the port in nodes.json
// (`endpoints.chaos`). Non-loopback addresses are refused: nodes do not authenticate yet.
//
// Protocol (docs/chaos.md "Message faults"): one JSON request per line, one JSON reply line per
// request, several requests per connection allowed:
//   {"op":"fault","kind":"drop_push","learner":1,"fragment":-1,"for_s":10,"count":-1,"delay_s":0}
//       → {"ok":true,"id":3,"kind":"drop_push",...}
//   {"op":"fault","kind":"scale_push","learner":1,"count":1,"factor":1000}   (factor: scale_push;
//       "seed": random_push, default 0)
//   {"op":"fault","kind":"nan_step","learner":1,"at_step":40}   (push and step kinds)
//       → {"ok":true,"armed":true,"at_step":40,...}: starts when learner 1 finishes step 40
//       ("at_fraction":F instead: step round(F × the learner's step budget))
//   {"op":"clear"}   → {"ok":true,"cleared":2}          every live fault ends now
//   {"op":"challenge"} → {"ok":true,"challenge":"<64 hex digits>"}: with a join token, a fault
//       or clear request then carries "auth": the hex HMAC-SHA256 of the token over
//       "dd-operator/1\nnonce <challenge>\n<the request without auth, as nlohmann's dump()>"
//       (actors/link/join_auth.hpp operator_context); one challenge per request
//   {"op":"status"}  → {"ok":true,"node":"learner-0","role":"learner","learners":[0,1],
//                       "faults":[{"id","kind","learner","fragment","hits","expires_in_s"?,
//                                  "count_left"?,"delay_s"?,"factor"?,"seed"?}]}
// Errors: {"ok":false,"error":"..."} (unknown op or kind, a learner this node does not host, a
// push kind sent to the syncer node, no duration nor count, bad JSON).
//
// Served by one thread of its own (never an actor thread): poll on the listener, each
// connection read with a 5 s deadline; requests become fault_hooks::add_live / clear_live calls
// (fault_hooks is thread-safe), which the node's learners and owners consult at every push,
// broadcast and step. A fault reverts itself inside the node when its time or count is spent —
// the tool that set it need not be alive.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/services/fault_hooks.hpp"

namespace dd::actors {

/// What a node's endpoint accepts.
struct chaos_endpoint_options {
  std::string host = "127.0.0.1";  ///< must be loopback (127.0.0.0/8, ::1 or "localhost")
  uint16_t port = 0;               ///< 0 = any free port (see chaos_endpoint::port())
  std::string node_name;           ///< in status replies
  /// "learner" (push and step kinds, for `learners`), "syncer" (broadcast kinds) or "all" (both:
  /// a node that hosts learners and owners).
  std::string role = "learner";
  /// Learner ids this node hosts (learner role); a request naming another is refused.
  std::vector<int32_t> learners;
  /// Fragments (syncer role): a request naming fragment >= this is refused.
  int fragments = 0;
  /// Inner steps each learner takes in the run (its budget), for `at_fraction` requests;
  /// 0 = unknown (at_fraction refused).
  uint64_t steps_per_learner = 0;
  /// The run's join token (actors/link/join_auth.hpp): non-empty = a fault or clear request
  /// must carry "auth", the token's proof over a challenge this connection asked for with
  /// {"op":"challenge"} (each challenge good for one request). Status needs none.
  std::string join_token;
};

/// The running endpoint; stops (and closes its socket) when destroyed.
class chaos_endpoint {
 public:
  /// Binds and starts serving. `hooks` (not null) must outlive the endpoint. Throws
  /// std::invalid_argument for a non-loopback host, std::runtime_error naming HOST:PORT when
  /// it cannot listen there.
  chaos_endpoint(chaos_endpoint_options options, fault_hooks* hooks);
  ~chaos_endpoint();
  chaos_endpoint(const chaos_endpoint&) = delete;
  chaos_endpoint& operator=(const chaos_endpoint&) = delete;

  /// The bound port.
  uint16_t port() const { return port_; }

  /// Handles one request (the JSON text of one line) and returns the reply object; what the
  /// socket thread does for every line, exposed for tests. `challenge`: the connection's
  /// outstanding challenge (hex; set by a challenge request, spent by the next fault or clear);
  /// null = none.
  nlohmann::json handle(const std::string& line, std::string* challenge = nullptr);

 private:
  void serve();
  void serve_connection(int fd);

  chaos_endpoint_options o_;
  fault_hooks* hooks_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

/// True for 127.0.0.0/8, ::1 and "localhost".
bool chaos_endpoint_loopback(const std::string& host);

}  // namespace dd::actors
