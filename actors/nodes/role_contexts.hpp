// actors/nodes/role_contexts.hpp — what each role is configured with, built from a resolved
// experiment (runtime/config/experiment.hpp): the health monitor's, a fragment owner's, a learner's
// and the evaluator's. One place, used by the job (actors/nodes/job.cpp), the learner node
// (actors/nodes/learner_node.cpp), the tests and the benchmarks, so a learner built in another
// process from its join reply is configured exactly like one built in-process. Each function fills
// what the experiment decides; the caller fills the run's own fields (peers, the run log, paths,
// run identity). Pure functions of their arguments; any thread.
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
#include "actors/services/fault_hooks.hpp"
#include "runtime/config/experiment.hpp"
#include "runtime/data.hpp"
#include "runtime/fragments.hpp"
#include "runtime/idx.hpp"

namespace dd::actors {

/// Node-local services a learner uses; none of them crosses a process (all may be null).
struct learner_services {
  const text_dataset* data = nullptr;     ///< required for text data; outlives the learner
  const image_dataset* images = nullptr;  ///< required for data.kind = "idx"; outlives it
  run_log* log = nullptr;
  fault_hooks* faults = nullptr;
  step_admission* gate = nullptr;
  /// The transport of the learner's chunks to other nodes (null: CAF only).
  std::shared_ptr<const channel_route> channel;
};

/// The context of learner `id` of `e`: model, batch, schedule over `steps_per_learner`, AdamW,
/// shard (id of M), push schedule, wire encoding, barrier (K = M), budget, speed; peers and
/// services as given. `simulated_time` / `sim_step_s`: logical-time mode (tests).
std::shared_ptr<const learner_context> make_learner_context(
    const config::experiment& e, int32_t id, uint64_t steps_per_learner, const fragment_plan& plan,
    int threads, monitor_hdl monitor, const learner_services& services, bool simulated_time = false,
    double sim_step_s = 0.1);

/// The health monitor's configuration from `e` with `fragments` owners: M learners, the token
/// budget (0 unless budget.tokens), the experiment JSON of the join replies, group-aligned
/// resumes for the synchronous baselines (K = M, M > 1), and the uptime's K (sync.min_quorum
/// of M, at least 1) and last step (budget.steps). The run's identity, record paths,
/// peers and log are the caller's.
monitor_context monitor_context_of(const config::experiment& e, int fragments);

/// A fragment owner's options from `e` for the fragment `layout`: quorum, grace, τ (overlap),
/// EMA smoothing, staleness bound, merge rule and anchor, outer optimizer (lr; momentum 0 for
/// outer.kind = sgd), token weighting, partial-merge scaling, and checkpoints to
/// `checkpoint_path` every checkpoint.every_versions versions (`checkpoint_every` >= 0
/// overrides it; 0 = never).
owner_options owner_options_of(const config::experiment& e, const fragment_layout& layout,
                               const std::string& checkpoint_path, int checkpoint_every = -1);

/// The evaluator's configuration from `e` over `plan` and `data` (not owned; outlives the
/// evaluator): model, B, T, batches, cadence (eval.every_seconds, eval.every_steps), M, and the
/// reference backend for an experiment on it (bit-reproducible losses), else "cpu". Peers, log,
/// the step poll and the adaptive cadence are the caller's.
evaluator_context evaluator_context_of(const config::experiment& e, const fragment_plan& plan,
                                       const text_dataset* data,
                                       const image_dataset* images = nullptr);

}  // namespace dd::actors
