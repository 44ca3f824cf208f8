// actors/nodes/role_contexts.hpp — what each role is configured with, built from a resolved
// experiment (runtime/config/experiment.hpp): the health monitor's, a fragment owner's, a
// learner's, the evaluator's and a supervisor's. One place, used by the job (actors/nodes/job.cpp),
// the learner node (actors/nodes/learner_node.cpp), the tests and the benchmarks, so a learner
// built in another process from its join reply is configured exactly like one built in-process.
// Each function fills what the experiment decides; the caller fills the run's own fields (peers,
// paths, run identity). A role's services (the node's run log, fault hooks, gate, channel route)
// are not configuration: the node hands them to the role beside it
// (actors/services/node_services.hpp). Pure functions of their arguments; any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <caf/actor.hpp>

#include "actors/nodes/experiment_views.hpp"
#include "actors/roles/evaluator.hpp"
#include "actors/roles/health_monitor.hpp"
#include "actors/roles/learner.hpp"
#include "actors/roles/owner_core.hpp"
#include "actors/roles/supervisor.hpp"
#include "actors/services/node_services.hpp"
#include "runtime/config/experiment.hpp"
#include "runtime/data.hpp"
#include "runtime/fragments.hpp"
#include "runtime/idx.hpp"

namespace dd::actors {

/// The configuration of learner `id` of `e`: model, batch, schedule over `steps_per_learner`,
/// AdamW, shard (id of M), push schedule, wire encoding, barrier (K = M), budget, speed; its data
/// (`data` for text, `images` for data.kind = "idx"; not owned, they outlive the learner) and
/// monitor as given. `simulated_time` / `sim_step_s`: logical-time mode (tests).
learner_config learner_config_of(const config::experiment& e, int32_t id,
                                 uint64_t steps_per_learner, const fragment_plan& plan, int threads,
                                 monitor_hdl monitor, const text_dataset* data,
                                 const image_dataset* images = nullptr, bool simulated_time = false,
                                 double sim_step_s = 0.1);

/// A learner's services from its node's: the event sink, the fault hook at its step and on its
/// pushes (the link's filter), the compute gate, the channel route.
learner_services learner_services_of(const node_services& node);

/// A supervisor's configuration for `kind` children of `e`: the experiment's restart policy, its
/// reports to `job`. The children are the caller's.
supervisor_config supervisor_config_of(const config::experiment& e, child_kind kind,
                                       supervisor_report_hdl job);

/// A supervisor's services from its node's: the event sink. (A kill fault's downtime reaches the
/// supervisor in its child's exit reason: with_downtime, actors/roles/supervisor.hpp.)
supervisor_services supervisor_services_of(const node_services& node);

/// The health monitor's configuration from `e` with `fragments` owners: M learners, the token
/// budget (0 unless budget.tokens), the experiment JSON of the join replies, group-aligned
/// resumes for the synchronous baselines (K = M, M > 1), and the uptime's K (sync.min_quorum
/// of M, at least 1) and last step (budget.steps). The run's identity, record paths,
/// peers are the caller's.
monitor_config monitor_config_of(const config::experiment& e, int fragments);

/// A fragment owner's options from `e` for the fragment `layout`: quorum, grace, τ (overlap),
/// EMA smoothing, staleness bound, merge rule and anchor, outer optimizer (lr; momentum 0 for
/// outer.kind = sgd), token weighting, partial-merge scaling, and checkpoints to
/// `checkpoint_path` every checkpoint.every_versions versions (`checkpoint_every` >= 0
/// overrides it; 0 = never).
owner_options owner_options_of(const config::experiment& e, const fragment_layout& layout,
                               const std::string& checkpoint_path, int checkpoint_every = -1);

/// The evaluator's configuration from `e` over `plan` and `data` (not owned; outlives the
/// evaluator): model, B, T, batches, cadence (eval.every_seconds, eval.every_steps), M, and the
/// reference backend for an experiment on it (bit-reproducible losses), else "cpu". Peers,
/// the step poll and the adaptive cadence are the caller's.
evaluator_config evaluator_config_of(const config::experiment& e, const fragment_plan& plan,
                                     const text_dataset* data,
                                     const image_dataset* images = nullptr);

}  // namespace dd::actors
