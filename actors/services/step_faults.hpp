// actors/services/step_faults.hpp — the node's one fault hook at a learner's step: the faults
// (fault_hooks.hpp) of the step a learner just applied, decided once per step (`at_step`), and
// what they make the learner do: a `slow` factor for its next steps, a corrupt_held before the
// step's heartbeat, a nan, fail or kill after it. Message faults are not here: a learner's
// pushes meet theirs on the link (actors/link/push_faults.hpp). The node hands one to each
// learner; single-threaded (the learner actor owns it).
#pragma once

#include <cstdint>
#include <utility>

#include <caf/error.hpp>

#include "actors/roles/learner_core.hpp"
#include "actors/services/fault_hooks.hpp"
#include "runtime/model.hpp"

namespace dd::actors {

class event_sink;
class step_admission;

class learner_step_faults {
 public:
  /// `hooks` and `log` may be null (no faults, nothing logged).
  learner_step_faults(fault_hooks* hooks, event_sink* log) : hooks_(hooks), log_(log) {}

  /// The slowdown of the next step (>= 1): the last `slow` fault read.
  double slow_factor() const noexcept { return slow_factor_; }
  /// True once for the step after a nan fault: that step is discarded as non-finite whatever
  /// arrives before it (a broadcast may replace the NaN'd values first).
  bool take_poison() noexcept { return std::exchange(poison_next_step_, false); }

  /// The hook: the faults of applied step `step` (once per step); sets the slowdown.
  step_faults at_step(int32_t id, uint64_t incarnation, uint64_t step);
  /// Carries out a step's corrupt_held (the core alters its stored copy of one global value,
  /// which this step's heartbeat then checks; event `held_value_corrupted`).
  void before_heartbeat(const step_faults& sf, learner_core& core, uint64_t step);
  /// Carries out a step's nan (one NaN in every fragment of `m`: a push due now carries it and
  /// its owner refuses it; the next step is discarded and the learner reloads), fail (throws
  /// std::runtime_error) and kill (an error: the actor exits with it, "fault injected: kill
  /// learner", carrying the kill's downtime for its supervisor: with_downtime,
  /// actors/roles/supervisor.hpp). No error: the learner goes on. A crash leaves `gate`.
  caf::error after_heartbeat(const step_faults& sf, model& m, const fragment_plan& plan, int32_t id,
                             uint64_t incarnation, uint64_t step, step_admission* gate);

 private:
  fault_hooks* hooks_;
  event_sink* log_;
  double slow_factor_ = 1.0;
  bool poison_next_step_ = false;
};

}  // namespace dd::actors
