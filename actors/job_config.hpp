// actors/job_config.hpp — the translation of a resolved experiment (runtime/config/experiment.hpp)
// into what the actors of a node are configured with: the learner's context, the owner's
// options, the fault schedule, the per-learner step horizon. One place, used by the in-process
// job (actors/cluster.cpp) and by the learner node (actors/learner_node.cpp), so a learner built
// in another process from its join reply is configured exactly like one built in-process.
// Pure functions of their arguments; any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor.hpp>

#include "actors/fault_hooks.hpp"
#include "actors/learner.hpp"
#include "actors/policy/grace.hpp"
#include "actors/policy/quorum.hpp"
#include "actors/policy/restart_budget.hpp"
#include "messages/encoding.hpp"
#include "runtime/config/experiment.hpp"
#include "runtime/fragments.hpp"
#include "runtime/model.hpp"

namespace dd::actors {

/// Node-local services a learner uses; none of them crosses a process (all may be null).
struct learner_services {
  const text_dataset* data = nullptr;  ///< required; outlives the learner
  run_log* log = nullptr;
  fault_hooks* faults = nullptr;
  step_admission* gate = nullptr;
};

payload_encoding to_encoding(config::wire_format w);
fragment_strategy to_strategy(config::fragment_strategy_kind k);
std::string backend_name(config::backend_kind k);
/// The experiment's model kind and shape (model.*).
model_config model_of(const config::experiment& e);
/// K = M (count >= M, or fraction 1): the synchronous baselines.
bool synchronous(const config::experiment& e);
policy::quorum_spec quorum_of(const config::experiment& e);
policy::grace_config grace_of(const config::experiment& e);
policy::restart_config restart_of(const config::experiment& e);
/// Seconds → CAF timespan (rounded up; negative = 0).
caf::timespan span(double s);

/// The fragment plan of the experiment's model (sync.fragments, sync.strategy). Throws
/// std::invalid_argument "sync.fragments: ..." when it cannot be made.
fragment_plan plan_of(const config::experiment& e);

/// Inner steps per learner: the steps budget, the tokens budget spread over M learners, or for
/// a seconds budget inner.decay_steps (1000 when 0). Always >= 1.
uint64_t steps_per_learner_of(const config::experiment& e);

/// Threads per learner: learners.threads when > 0, else max(1, cores / learners_here).
int learner_threads_of(const config::experiment& e, int learners_here);

/// The context of learner `id` of `e`: model, batch, schedule over `steps_per_learner`, AdamW,
/// shard (id of M), push schedule, wire encoding, barrier (K = M), budget, speed; peers and
/// services as given. `simulated_time` / `sim_step_s`: logical-time mode (tests).
std::shared_ptr<const learner_context> make_learner_context(
    const config::experiment& e, int32_t id, uint64_t steps_per_learner, const fragment_plan& plan,
    int threads, caf::actor monitor, const learner_services& services, bool simulated_time = false,
    double sim_step_s = 0.1);

/// The experiment's chaos schedule (chaos.events, chaos.random) as fault specs. Fractions are
/// of the per-learner step budget, or of the seconds budget; owner faults count the owner's
/// versions ≈ steps / H; random faults are keyed on wall time with the seconds budget (24 h for
/// tokens/steps budgets) as horizon.
std::vector<fault_spec> fault_specs_of(const config::experiment& e, uint64_t steps_per_learner,
                                       int fragments);

/// Hex FNV-1a 64 of `text` (experiment and data hashes of the node handshake).
std::string fnv1a_hex(const void* data, size_t size);

}  // namespace dd::actors
