// actors/nodes/node_config.hpp — the one CAF configuration every node of the runtime starts its
// actor system with: `dd-node run`, `dd-node syncer`, `dd-node learner` and the multi-node tests.
//
// It loads the middleman (CAF's network layer), registers the project's type-ID block
// (actors/link/atoms.hpp) so every message type can be serialized to a remote node, turns on the
// middleman heartbeat and connection timeout (a SIGSTOPped or partitioned peer is otherwise never
// noticed: CAF's defaults are 0 = off), sets the app identifier "decoupled-diloco/<protocol
// version>" (a peer of another version is refused at CAF's handshake), silences CAF's console
// logger, and lets idle scheduler workers wait instead of polling every 50 µs (node_config.cpp,
// k_moderate_poll_attempts; DD_CAF_POLLING=caf keeps CAF's polling). With the middleman it also
// fixes glibc's mmap threshold at 1 MiB, process-wide, so freed chunk buffers leave the process
// (node_config.cpp; DD_MMAP_THRESHOLD=0 in the environment keeps glibc's default). Build it before
// the actor_system; not thread-safe (a config is a value).
#pragma once

#include <cstdint>
#include <string>

#include <caf/actor_system_config.hpp>

namespace dd::actors {

/// Knobs of the node's transport.
struct node_transport {
  /// Load the middleman (false only for tests on the test coordinator).
  bool middleman = true;
  /// Middleman heartbeat period and the silence after which a connection is dropped, seconds.
  /// A stopped (SIGSTOP) or partitioned peer is noticed after about the timeout (docs/caf.md), here
  /// 10–11 s. The trade-off: 0.5 / 3 s noticed it in about 3 s but dropped healthy links of
  /// nice-15 nodes under nice-0 load (1–4 drops in 45 s; docs/cluster.md, "Under
  /// load"), where 1 / 10 s dropped none; a learner's liveness is the monitor's lease besides.
  /// Tests set short ones (e.g. 0.2 / 1 s).
  double heartbeat_s = 1.0;
  double connection_timeout_s = 10.0;
};

/// The app identifier this build's nodes present at CAF's handshake.
std::string app_identifier();

/// A CAF system configuration for one node (see the file comment).
class node_config : public caf::actor_system_config {
 public:
  explicit node_config(const node_transport& transport = {});
};

}  // namespace dd::actors
