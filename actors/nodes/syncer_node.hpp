// actors/nodes/syncer_node.hpp — the syncer node of a run: the health monitor, the owner supervisor
// with one fragment owner per fragment, and the evaluator. `dd-node run` spawns it next to an
// in-process learner node (actors/nodes/learner_node.hpp) under one job (actors/nodes/job.hpp);
// `dd-node syncer` spawns it alone and publishes the monitor (publish_monitor), the node's only
// well-known address: learner nodes join it over CAF's middleman.
//
// Promises: the monitor reports to `job` (budget spent; every remote learner gone), the owner
// supervisor reports a fragment owner it gave up on; an owner restores from its checkpoint
// (checkpoint.dir, default <run_dir>/checkpoints) and, resumed, numbers its values above the
// highest version the earlier part logged. Thread: call from the job's handler.
#pragma once

#include <cstdint>
#include <memory>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/local_actor.hpp>

#include "actors/link/frame_guard.hpp"
#include "actors/link/protocol.hpp"
#include "actors/link/tensor_channel.hpp"
#include "actors/nodes/job_runner.hpp"

namespace dd::actors {

/// The actors of a syncer node.
struct syncer_node {
  monitor_hdl monitor;       ///< the health monitor (published by dd-node syncer)
  supervisor_hdl owner_sup;  ///< supervisor of the fragment owners
  evaluator_hdl eval;        ///< the evaluator (detached in real time: blocking compute)
};

/// Spawns the syncer node of `setup` from `self` (the job); `job` receives the monitor's
/// and the owner supervisor's reports. Spawned in this order: monitor, owners, evaluator.
syncer_node spawn_syncer_node(caf::local_actor* self, const job_hdl& job, job_setup& setup);

/// Publishes `monitor` with reuse_addr on options.listen_host:listen_port — behind a frame guard
/// on that address when options.guard.max_frame_bytes > 0 (the middleman then listens on an
/// ephemeral loopback port; `guard` receives it, and must outlive `sys`) — logs a "listening" event
/// and calls options.on_published with the bound port. With the guard, learner nodes' tensor
/// channels (actors/link/tensor_channel.hpp) come in on the same address: `channels` receives the
/// hub that serves them (destroy it before `sys`; its events go to the run log). A port that cannot
/// be bound ends the process: "dd-node syncer: cannot listen on HOST:PORT: <why>" on stderr,
/// exit 2.
void publish_monitor(caf::actor_system& sys, const monitor_hdl& monitor, job_setup& setup,
                     std::unique_ptr<frame_guard>& guard,
                     std::shared_ptr<tensor_channel_hub>& channels);

}  // namespace dd::actors
