// actors/nodes/job.hpp — the job: the lifecycle of one job. It spawns the syncer node
// (actors/nodes/syncer_node.hpp) and, in `dd-node run`, an in-process learner node
// (actors/nodes/learner_node.hpp), then runs the job's state machine: running → stopping (budget
// spent, interrupted, or a fragment owner lost) → final evaluation → finished. It talks to both
// nodes by message only.
//
// Promises: a spent budget (the monitor's token count, or the `budget.seconds` timer, which a
// resumed run shortens by the seconds its earlier parts trained) or an interrupt stops every
// learner at its next step boundary; once they are done the evaluator runs a final round (at
// most 600 s; interrupted: what is left of interrupt_timeout_s, else the last periodic
// validation loss stands in); then every actor of the job is shut down and `reply_to` gets the
// result (actors/services/run_report.hpp) as a message: (finished_atom, run_result).
//
// The job holds the node's write-failure policy (set on its run log, write_policy.hpp): a role
// whose write failed (an owner's checkpoint, the monitor's record) reports it with
// (write_trouble_atom, file, error) and the job answers it with (write_verdict_atom, file,
// verdict): retry_degraded or end_the_run.
#pragma once

#include <memory>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include "actors/link/protocol.hpp"
#include "actors/nodes/job_runner.hpp"

namespace dd::actors {

/// Spawns the job actor (interface: job_hdl, actors/link/protocol.hpp). When the run ends it sends
/// (finished_atom, run_result) to `reply_to` (if valid) and quits. A syncer node's job sends
/// (publish_atom, monitor) to `reply_to` first, for the main loop to publish the monitor. In
/// logical time (options.simulated_time) the run log reads the actor system's clock from now on.
job_hdl spawn_job(caf::actor_system& sys, std::shared_ptr<job_setup> setup,
                  caf::actor reply_to = {});

}  // namespace dd::actors
