// actors/roles/learner_record.hpp — what a learner's actions (learner_core.hpp) write into its
// node's services: events and counters into the run log, whether it is stepping, the end of
// its training, its model's statistics, and its place at the compute gate. The learner actor hands
// every action here first and carries out the others itself (messages, timers, exit). Any thread
// that owns the action (the event sink and the gate are thread-safe).
#pragma once

#include <cstdint>

#include "actors/roles/learner_core.hpp"

namespace dd::actors {

class event_sink;
class step_admission;

/// Records `a` of learner `learner` into `log` and `gate` (either may be null: nothing is
/// recorded there). False when `a` is no record (a message, a timer, the exit).
bool record(learner_action& a, int32_t learner, event_sink* log, step_admission* gate);

/// Model statistics (moe_gpt: the router's per-expert load) of `learner` after step `step`,
/// once per sync interval H: the model's own event, stamped with the learner's id, incarnation
/// and step.
void record_model_stats(model& m, uint64_t step, int sync_interval, const learner_core& learner,
                        event_sink& log);

}  // namespace dd::actors
