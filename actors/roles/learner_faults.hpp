// actors/roles/learner_faults.hpp — the faults injected into one learner (fault_hooks.hpp),
// kept apart from its decisions (learner_core) and its I/O (learner.cpp), which call it at
// three points: every push the core builds goes through `route` (its fate on the way to its
// owner: drop, delay, duplicate, corrupt, reorder), every applied step through `at_step` (a
// `slow` fault's factor, read before the heartbeat) and `after_heartbeat` (nan, fail, kill).
// Single-threaded: the learner actor owns it.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "actors/roles/learner_core.hpp"
#include "actors/services/fault_hooks.hpp"
#include "runtime/model.hpp"

namespace dd::actors {

class run_log;
class step_admission;

class learner_faults {
 public:
  /// `hooks` and `log` may be null (no faults, nothing logged).
  learner_faults(fault_hooks* hooks, run_log* log) : hooks_(hooks), log_(log) {}

  /// One due push: through its fate, or — without one — queued in `core`. Lost: it occupies its
  /// in-flight slot until it expires. Damaged (corrupt): one bit of the first chunk flips on
  /// this first sending; a resend after the owner's refusal carries the intact chunks. Sent
  /// twice (duplicate), late (delay), or held back and sent right after the learner's next push
  /// (reorder). Faults compose. A push held back earlier is sent after this one. Returns the
  /// sends, in order.
  learner_actions route(learner_core& core, due_push d);

  /// The slowdown of the next step (>= 1): the last `slow` fault read.
  double slow_factor() const noexcept { return slow_factor_; }
  /// True once for the step after a nan fault: that step is discarded as non-finite whatever
  /// arrives before it (a broadcast may replace the NaN'd values first).
  bool take_poison() noexcept { return std::exchange(poison_next_step_, false); }

  /// The faults of applied step `step`; sets the slowdown.
  step_faults at_step(int32_t id, uint64_t incarnation, uint64_t step);
  /// Carries out a step's nan (one NaN in every fragment of `m`: a push due now carries it and
  /// its owner refuses it; the next step is discarded and the learner reloads), fail (throws
  /// std::runtime_error) and kill (false: the actor exits with an error). A crash leaves `gate`.
  /// Carries out a step's corrupt_held (the core alters its stored copy of one global value,
  /// which this step's heartbeat then checks; event `held_value_corrupted`).
  void before_heartbeat(const step_faults& sf, learner_core& core, uint64_t step);
  bool after_heartbeat(const step_faults& sf, model& m, const fragment_plan& plan, int32_t id,
                       uint64_t incarnation, uint64_t step, step_admission* gate);

 private:
  learner_actions send_with_fate(learner_core& core, int32_t p, uint64_t step, inflight_push push);

  fault_hooks* hooks_;
  run_log* log_;
  /// A push held back by a live `reorder_push` fault (fragment, chunks).
  std::optional<std::pair<int32_t, std::vector<wire_bytes>>> held_push_;
  double slow_factor_ = 1.0;
  bool poison_next_step_ = false;
};

/// A copy of encoded push chunk `chunk` with one bit of its payload flipped (damage in transit
/// that the owner's CRC-32C check must catch).
wire_bytes damaged_copy(const wire_bytes& chunk);

}  // namespace dd::actors
