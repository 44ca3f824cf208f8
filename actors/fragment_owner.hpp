// actors/fragment_owner.hpp — the fragment owner actor: one per fragment, holding the global
// copy θ_p, its outer momentum b_p and version. A thin CAF shell over fragment_owner_state
// (quorum, grace window, merge, outer Nesterov, EMAs, checkpoints); this file adds messaging:
// acks and rejections to learners, broadcasts to every live learner, the grace timer, the
// "push"/"merge"/"broadcast" events, and restore from its checkpoint when respawned.
//
// Protocol (actors/atoms.hpp): receives (push_atom, bytes), (pull_atom, bytes pull_request),
// (live_atom, live_view), (grace_atom, timer_id); sends (ack_atom, bytes push_ack),
// (reject_atom, bytes), (broadcast_atom, bytes); on start it sends (subscribe_atom, fragment,
// self) to the health monitor. Event-based: it must stay responsive while learners compute.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_clock.hpp>
#include <caf/stateful_actor.hpp>

#include "actors/fragment_owner_state.hpp"

namespace dd::actors {

class run_log;
class fault_hooks;

/// Everything an owner needs from the job; shared read-only between incarnations.
struct owner_context {
  owner_options options;
  /// Value at version 0 (used when no checkpoint exists), layout.numel floats.
  std::vector<float> initial;
  /// Backend for the merge ("cpu", "reference" or "cuda") and its threads.
  std::string backend = "cpu";
  int threads = 1;
  /// The health monitor (subscription, live view).
  caf::actor monitor;
  run_log* log = nullptr;        ///< may be null
  fault_hooks* faults = nullptr; ///< may be null
  /// Incarnations started with this context (the first is 0; later ones are respawns).
  mutable std::atomic<uint64_t> starts{0};
};

/// CAF state of the owner actor.
struct owner_actor_state {
  std::unique_ptr<kernels::backend> backend;
  std::unique_ptr<fragment_owner_state> core;
  std::map<int32_t, caf::actor> learners;  ///< live learners' handles (broadcast targets)
  /// Broadcasts held back by a live `reorder_broadcast` fault (learner, chunks): sent right
  /// after the owner's next broadcast, so a newer version reaches the learner first.
  std::vector<std::pair<caf::actor, std::vector<wire_bytes>>> held_broadcasts;
  bool restored = false;
  static inline const char* name = "fragment_owner";
};

using owner_actor = caf::stateful_actor<owner_actor_state>;

/// The owner's behavior. On start it restores from options.checkpoint_path when that file
/// exists (a respawn), else starts from `initial` at version 0; then subscribes with the monitor.
/// A corrupt checkpoint is reported as a "failure" event and the owner starts from `initial`.
/// When a respawned owner (or any owner whose checkpoint is unreadable) restarts from `initial`
/// — no checkpoint yet, checkpoints off, or an unreadable file — its "owner_start" event carries
/// "reset": <why>, and one warning line goes to the run log's console (run_log::warn; on stderr
/// in `dd-node run`) naming the fragment, the reason and that its value restarts from the
/// initial weights.
caf::behavior fragment_owner(owner_actor* self, std::shared_ptr<const owner_context> ctx);

/// Seconds of an actor clock's time point (steady, or the test coordinator's manual clock).
double clock_seconds(caf::actor_clock::time_point t);

}  // namespace dd::actors
