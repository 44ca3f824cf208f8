// actors/roles/learner.hpp — the learner actor: inner AdamW steps on its own data shard,
// asynchronous pushes of the scheduled fragments, application of arriving global fragments at step
// boundaries, heartbeats. It never blocks on the syncer (except in the optional barrier mode that
// emulates synchronous Streaming DiLoCo, where waiting is what the baseline measures).
//
// Promises under failure: a non-finite step is discarded, every fragment is reloaded from the
// owners and a "nonfinite" event is reported — nothing non-finite is ever pushed; a push that
// gets no answer within H steps is given up (its tokens ride on the next push of that fragment);
// pushes to an owner that is respawned are re-sent to the new owner (only the newest per
// fragment); a respawned learner (new incarnation) resumes the step and data cursor the health
// monitor recorded, pulls every fragment and starts with fresh AdamW moments and a re-warmup.
//
// Every decision is learner_core's (learner_core.hpp); the actor feeds it messages, timers and
// the results of its inner steps (trainer::step) and carries out what it returns.
//
// Threading: spawn it `detached` (own thread: its steps block for tens of milliseconds). The step
// loop is a self-sent `step_atom`, so messages that arrive during a step (broadcasts, acks, stop)
// are handled before the next step. With the simulated step timer the actor may run on the test
// coordinator: a step then "takes" sim_step_s × slowdown of the actor clock (delayed message)
// instead of wall time, which makes whole-cluster runs deterministic.
// Interface: learner_hdl (actors/link/protocol.hpp); the monitor and the owners address it through
// its facets learner_at_monitor_hdl and learner_at_owner_hdl.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/stateful_actor.hpp>

#include "actors/link/chunk_flow.hpp"
#include "actors/link/protocol.hpp"
#include "actors/roles/learner_core.hpp"
#include "actors/services/node_services.hpp"
#include "messages/codec.hpp"
#include "runtime/data.hpp"
#include "runtime/fragments.hpp"
#include "runtime/rng.hpp"
#include "runtime/trainer.hpp"

namespace dd::actors {

/// Configuration of one learner id (shared by its incarnations): its decisions' options
/// (learner_core.hpp; the modes are strategies chosen once, in actors/nodes/role_contexts.hpp)
/// and what only the actor needs — the trainer, the data and the peers. A plain value; the
/// node's services come separately (learner_services, actors/services/node_services.hpp).
struct learner_config : learner_options {
  /// Model, batch, sequence length, schedule, AdamW, clipping, seed, shard (learner, learners).
  trainer_config trainer;
  /// Shared dataset (read-only; outlives the learner).
  const text_dataset* data = nullptr;
  /// Shared image dataset (data.kind = "idx"; read-only; outlives the learner); when set the
  /// trainer reads it instead of `data`.
  const image_dataset* images = nullptr;
  /// Chunks in flight per link (push and copy chunks to each owner), `sync.window_chunks`.
  int window_chunks = policy::default_window_chunks;
  /// Step-time multiplier of emulated slower hardware (>= 1) and random spread in [0, 1).
  double speed = 1.0;
  double jitter = 0.0;
  /// Compute backend and its threads.
  std::string backend = "cpu";
  int threads = 1;
  /// Added to the nice value of the learner's thread (and of its backend's worker pool, which
  /// inherits it) before it computes: a learner node's compute yields the CPU to its I/O
  /// threads (util/thread_priority.hpp). 0 = unchanged. Only for a learner on its own thread
  /// (detached); the learner node sets it (`dd-node learner --compute-nice`, default 0).
  int compute_nice = 0;
  /// The health monitor (a learner node's learners ask learner_services::current_monitor
  /// instead when it is set). A learner node's learner also leaves by leave_protocol::acked:
  /// a leave the syncer did not take (it went away around the learner's last step) is sent
  /// again every 2 s while the monitor is reachable, and otherwise kept until the node reaches
  /// a syncer again (syncer_atom): the learner then rejoins as a live incarnation (reporting the
  /// steps and tokens it trained meanwhile), pushes what it trained since its last global
  /// values and leaves. A stop from its own node ends the wait (the leave is then lost).
  monitor_hdl monitor;
};

/// CAF state of the learner actor: the trainer, the core, and what only I/O needs (the owners'
/// handles, the links' credit, the injected faults).
struct learner_state {
  using phase = learner_phase;
  std::unique_ptr<kernels::backend> backend;
  std::unique_ptr<trainer> tr;
  std::unique_ptr<model_params> params;
  std::unique_ptr<learner_core> core;
  std::vector<owner_hdl> owners;  ///< per fragment: its owner (null: none known)
  chunk_flow flow;  ///< push chunks under credit, per owner (actors/link/chunk_flow.hpp)
  /// Copy chunks (an owner's rebuild) under their own credit: a rebuilding owner leaves pushes
  /// in its mailbox uncredited until it serves, so copies must not wait behind them.
  chunk_flow copies;
  monitor_hdl monitor;        ///< the health monitor (context's; replaced when the syncer returns)
  uint64_t join_attempt = 0;  ///< the newest first-join request (older answers are ignored)
  std::unique_ptr<learner_step_faults> faults;  ///< the node's fault hook at the step
  std::unique_ptr<rng> jitter_rng;
  static inline const char* name = "learner";
};

using learner_actor = learner_hdl::stateful_base<learner_state>;

/// The learner's behavior. Joins the health monitor, pulls every fragment, then steps.
/// It also answers an owner's fragment_query (query_atom, between steps: it never blocks
/// stepping) with a fragment_held (held_atom) naming the version of the global value it last
/// applied, and with send_value sends that value (base_p, its version and merged list, fp32,
/// chunked as broadcast_msg) on copy_atom.
/// `services`: the node's, handed to every incarnation of this learner id.
learner_hdl::behavior_type learner(learner_actor* self,
                                   std::shared_ptr<const learner_config> config,
                                   learner_services services);

}  // namespace dd::actors
