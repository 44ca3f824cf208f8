// actors/nodes/experiment_views.hpp — the translation of a resolved experiment
// (runtime/config/experiment.hpp) into the runtime's enums and structs where the two differ
// (strategy, model, quorum, restart budget, fragment plan, per-learner step horizon; the wire
// encoding, the grace window and the fault kinds are one type on both sides). The roles' contexts
// are built from these in actors/nodes/role_contexts.hpp; the chaos schedule's fault specs in
// actors/services/fault_hooks.hpp. Pure functions of their arguments; any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor.hpp>

#include "actors/policy/grace.hpp"
#include "actors/policy/quorum.hpp"
#include "actors/policy/restart_budget.hpp"
#include "actors/roles/learner.hpp"
#include "actors/services/fault_hooks.hpp"
#include "messages/encoding.hpp"
#include "runtime/config/experiment.hpp"
#include "runtime/fragments.hpp"
#include "runtime/model.hpp"
#include "runtime/model_file.hpp"

namespace dd::actors {

fragment_strategy to_strategy(config::fragment_strategy_kind k);
std::string backend_name(config::backend_kind k);
/// The experiment's model kind and shape (model.*).
model_config model_of(const config::experiment& e);
/// The windows the run's final evaluation scores: the first final_eval_windows of the
/// validation split of `data` (T = model.context, loaded from data.file with
/// data.train_fraction), learners.batch of them per forward pass; backend "reference" when the
/// learners' is, else "cpu".
eval_spec eval_spec_of(const config::experiment& e, const text_dataset& data);
/// How many windows the final evaluation scores: eval.windows, 0 = every window of a validation
/// split of `validation_tokens` tokens; the deprecated eval.batches, when set, batches ×
/// learners.batch.
std::int64_t final_eval_windows(const config::experiment& e, std::size_t validation_tokens);
/// How many windows each periodic evaluation scores: eval.periodic_windows, or the deprecated
/// eval.batches × learners.batch when that is set.
std::int64_t periodic_eval_windows(const config::experiment& e);
/// K = M (count >= M, or fraction 1): the synchronous baselines.
bool synchronous(const config::experiment& e);
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

/// Hex FNV-1a 64 of `text` (experiment and data hashes of the node handshake).
std::string fnv1a_hex(const void* data, size_t size);

}  // namespace dd::actors
