// actors/fault_hooks.hpp — in-process fault injection for tests and chaos schedules: kill a
// learner or a fragment owner, slow a learner by a factor, drop, delay or damage a push.
//
// Faults are keyed on logical time: a learner's inner step (checked by the learner at every step
// boundary and at every push) or a fragment owner's version (checked by the owner after every
// merge); a fault may instead be keyed on seconds since the run started (checked at the same
// points, against the hook's clock). Each fault fires once and records that it fired (returned by
// `fired()` and emitted as a "fault" event). Thread-safe: learners on their own threads call it.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace dd::actors {

class run_log;

/// One scripted fault.
struct fault_spec {
  enum class kind { kill_learner, kill_owner, slow_learner, drop_push, delay_push, corrupt_push };
  kind what = kind::kill_learner;
  /// Learner id, or fragment id for kill_owner.
  int32_t target = 0;
  /// Fires when the learner's step (the owner's version for kill_owner) reaches this; ignored
  /// when at_seconds >= 0.
  uint64_t at_step = 0;
  /// Fires at this many seconds since the run started instead (< 0: step-keyed).
  double at_seconds = -1.0;
  /// slow_learner: step-time multiplier f >= 1 (sleep (f − 1) × step time after each step).
  double factor = 1.0;
  /// delay_push: seconds the push is held back.
  double delay_s = 0.0;
  /// kill_learner / kill_owner: minimum seconds the victim stays down before its respawn.
  double downtime_s = 0.0;
  /// slow_learner: seconds the slowdown lasts after it fires; 0 = for the rest of the run.
  double duration_s = 0.0;
  /// kill_owner: the owner damages its own checkpoint file as it dies (take_damage).
  bool damage_checkpoint = false;
};

/// "kill_learner", "kill_owner", "slow_learner", "drop_push", "delay_push", "corrupt_push".
const char* to_string(fault_spec::kind k);

/// A record of one fault that fired.
struct fired_fault {
  fault_spec spec;
  uint64_t step = 0;       ///< learner step / owner version at which it fired
  uint64_t incarnation = 0;
  double at_s = 0.0;       ///< seconds since the run started
};

/// What a learner must do after an inner step.
struct step_faults {
  bool kill = false;       ///< crash now (exit with an error)
  double slow_factor = 1.0;///< current step-time multiplier (>= 1)
};

/// What happens to one push.
struct push_fault {
  bool drop = false;
  double delay_s = 0.0;
  /// Damaged in transit: one bit of the first chunk's payload flips on its first sending (the
  /// owner refuses the chunk by its CRC-32C and the learner sends the push again).
  bool corrupt = false;
};

/// The fault schedule of one run. Thread-safe.
class fault_hooks {
 public:
  /// `clock` gives seconds since the run started (defaults to the log's clock, or 0 without a
  /// log); `log` (may be null) receives a "fault" event for every fault that fires.
  explicit fault_hooks(std::vector<fault_spec> faults = {}, run_log* log = nullptr,
                       std::function<double()> clock = {});

  /// Adds a fault (tests build schedules incrementally).
  void add(const fault_spec& f);

  /// Learner `id` (incarnation `inc`) finished inner step `step`.
  step_faults on_learner_step(int32_t id, uint64_t inc, uint64_t step);
  /// Learner `id` is about to push fragment `fragment` at step `step`.
  push_fault on_push(int32_t id, uint64_t inc, int32_t fragment, uint64_t step);
  /// Fragment owner `fragment` reached `version` (after a merge, or when handling a message).
  bool on_owner(int32_t fragment, uint64_t version);
  /// Seconds from now until each time-keyed kill of fragment owner `fragment` that has not
  /// fired (negative: overdue). The owner sets a timer for each and calls on_owner when it
  /// rings, so a time-keyed owner kill fires on time rather than at the next merge.
  std::vector<double> owner_kill_delays(int32_t fragment) const;

  /// Minimum downtime the supervisor must honour before respawning `learner` (or, with
  /// `owner` = true, fragment owner `id`) after a kill fault; consumed by the call.
  double take_downtime(int32_t id, bool owner);

  /// True once for fragment owner `fragment` after a kill_owner fault with damage_checkpoint
  /// fired: the dying owner must damage its checkpoint file. Consumed by the call.
  bool take_damage(int32_t fragment);
  /// Every fault that fired, in firing order.
  std::vector<fired_fault> fired() const;
  /// Faults scheduled (fired or not).
  std::vector<fault_spec> scheduled() const;

 private:
  bool due_locked(const fault_spec& f, uint64_t logical, double now) const;
  void fire_locked(size_t i, uint64_t logical, uint64_t inc, double now);

  mutable std::mutex mutex_;
  std::vector<fault_spec> faults_;
  std::vector<bool> done_;
  std::vector<fired_fault> fired_;
  std::vector<double> fired_at_;  // per fault: seconds when it fired (slow windows)
  run_log* log_;
  std::function<double()> clock_;
  std::vector<std::pair<std::pair<int32_t, bool>, double>> downtime_;
  std::vector<int32_t> damage_;  // fragments whose owner must damage its checkpoint
};

/// How long a randomly failed actor stays down (seconds).
struct random_recovery {
  enum class distribution { exponential, fixed, lognormal };
  distribution dist = distribution::exponential;
  double mean_s = 5.0;  ///< mean downtime, seconds (> 0)
  double sigma = 0.5;   ///< lognormal: σ of log-downtime (the mean stays mean_s)
};

/// Draws a random failure schedule: for each of `targets` actors independently, failure times
/// from a Poisson process with mean time between failures `mtbf_s` (seconds of wall time since
/// the run started, exponential gaps measured from the end of the previous downtime), each with
/// a downtime drawn from `recovery`, up to `horizon_s`. `kind` is kill_learner or kill_owner.
/// Deterministic in `seed` (runtime/rng.hpp: splitmix64). At most `max_per_target` faults per
/// actor. Throws std::invalid_argument when mtbf_s <= 0, horizon_s < 0 or recovery.mean_s <= 0.
std::vector<fault_spec> random_fault_schedule(fault_spec::kind kind, int targets, double mtbf_s,
                                              const random_recovery& recovery, double horizon_s,
                                              uint64_t seed, int max_per_target = 1000);

}  // namespace dd::actors
