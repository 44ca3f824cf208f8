// actors/services/fault_hooks.hpp — in-process fault injection for tests and chaos schedules: kill
// a learner or a fragment owner, slow a learner by a factor, drop, delay or damage a push.
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

#include "runtime/config/experiment.hpp"
#include "runtime/config/fault_kind.hpp"

namespace dd::actors {

class run_log;

using config::fault_kind;

/// A message fault applied from outside while the run goes on (the chaos endpoint,
/// actors/services/chaos_endpoint.hpp): it acts on every matching push, broadcast or step until its
/// time is up or its count is spent, whichever comes first, then reverts itself (nothing to
/// undo: it simply stops matching).
struct live_fault {
  /// One of the live kinds (config::is_live_fault): a push or broadcast kind, nan_step,
  /// fail_step.
  fault_kind what = fault_kind::drop_push;
  /// Push and step kinds: the learner that pushes / steps; broadcast kinds: the learner that
  /// receives. −1 = any.
  int32_t learner = -1;
  /// Push kinds: the pushed fragment; broadcast kinds: the broadcasting owner. −1 = any.
  int32_t fragment = -1;
  /// Seconds (on the hooks' clock) after which it stops matching; < 0 = no time bound.
  double until_s = -1.0;
  /// Matches left; < 0 = unbounded. At least one of until_s / count must bound the fault.
  int64_t count = -1;
  /// delay kinds: seconds each message is held back (> 0).
  double delay_s = 0.0;
  /// scale_push: the factor every pushed value is multiplied by (finite, not 0; others: 0).
  double factor = 0.0;
  /// random_push: the seed of the N(0, 1) draws that replace the pushed values (each push
  /// draws from its own stream of it, the fragment and the transfer).
  uint64_t seed = 0;
  /// Who started it: "endpoint" (the chaos endpoint, tests) or "schedule" (a start_live fault
  /// of the experiment's chaos section); the "source" of its events.
  std::string origin = "endpoint";
  uint64_t id = 0;    ///< assigned by fault_hooks::add_live (1, 2, ...)
  uint64_t hits = 0;  ///< messages / steps it has acted on
};

/// One scripted fault: kill_learner, slow_learner, kill_owner, or drop_push / delay_push /
/// corrupt_push on one push; or, with `live_window`, a window of live fault `live` (dup_push,
/// scale_push, random_push, ...).
struct fault_spec {
  fault_kind what = fault_kind::kill_learner;
  /// When due, starts `live` (for duration_s seconds, or live.count matches) instead: the DSL's
  /// message kinds (dup_push, ..., nan_step, fail_step) scheduled in the experiment, and the
  /// endpoint's step-keyed requests (arm_live). Its fired record reads "start_live".
  bool live_window = false;
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
  /// start_live: seconds the live fault lasts (0: live.count bounds it, default 1).
  double duration_s = 0.0;
  /// kill_owner: the owner damages its own checkpoint file as it dies (take_damage).
  bool damage_checkpoint = false;
  /// start_live: the fault to start (kind, learner, fragment, count, delay).
  live_fault live;
};

/// A record of one fault that fired.
struct fired_fault {
  fault_spec spec;
  uint64_t step = 0;  ///< learner step / owner version at which it fired
  uint64_t incarnation = 0;
  double at_s = 0.0;  ///< seconds since the run started
};

/// What a learner must do after an inner step.
struct step_faults {
  bool kill = false;  ///< crash now (exit with an error)
  /// With `kill`: the least seconds before the learner is respawned (the kill's downtime; 0: its
  /// supervisor's backoff alone). It travels in the learner's exit reason (with_downtime).
  double kill_downtime_s = 0.0;
  double slow_factor = 1.0;  ///< current step-time multiplier (>= 1)
  /// A live `nan_step` fault: the learner writes a NaN into one value of every fragment of its
  /// model (the next push is refused by its owner as non-finite; the next step's loss is
  /// non-finite and the learner reloads the global model).
  bool nan = false;
  /// A live `fail_step` fault: the learner throws from its step (the actor dies with the
  /// exception's message; its supervisor respawns it).
  bool fail = false;
  /// A live `corrupt_held` fault: the learner alters its stored copy of one global value (not
  /// its parameters) before this step's heartbeat, whose divergence check finds it.
  bool corrupt_held = false;
};

/// What happens to one push.
struct push_fault {
  bool drop = false;
  double delay_s = 0.0;
  /// Damaged in transit: one bit of the first chunk's payload flips on its first sending (the
  /// owner refuses the chunk by its CRC-32C and the learner sends the push again).
  bool corrupt = false;
  /// Sent twice (the owner refuses the second copy as a duplicate).
  bool duplicate = false;
  /// Held back and sent after the learner's next push (the pushes arrive out of order).
  bool reorder = false;
  /// Every value of the pseudo-gradient multiplied by this (scale_push; 1: unchanged).
  double scale = 1.0;
  /// Every value replaced by a draw of N(0, 1) from a stream of `seed` (random_push).
  bool random = false;
  uint64_t seed = 0;
};

/// What happens to one broadcast (the chunks of one merged version to one learner).
struct broadcast_fault {
  bool drop = false;       ///< not sent (the learner catches up by a later version or a pull)
  bool duplicate = false;  ///< sent twice (the learner's assembler drops the copy)
  double delay_s = 0.0;    ///< sent this many seconds later
  bool reorder = false;    ///< held back and sent after the owner's next broadcast to anyone
};

/// The live kind named `name` (config::to_string's spelling); nullopt when none is.
std::optional<fault_kind> live_kind_from(const std::string& name);

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
  /// A kill fires: the least seconds before the owner is respawned (its downtime; 0: the
  /// supervisor's backoff alone); nothing: no kill.
  std::optional<double> on_owner(int32_t fragment, uint64_t version);
  /// Seconds from now until each time-keyed kill of fragment owner `fragment` that has not
  /// fired (negative: overdue). The owner sets a timer for each and calls on_owner when it
  /// rings, so a time-keyed owner kill fires on time rather than at the next merge.
  std::vector<double> owner_kill_delays(int32_t fragment) const;

  /// True once for fragment owner `fragment` after a kill_owner fault with damage_checkpoint
  /// fired: the dying owner must damage its checkpoint file. Consumed by the call.
  bool take_damage(int32_t fragment);
  /// Starts a live fault (id assigned, returned); `f.until_s` is on this hooks' clock (see
  /// now()). Throws std::invalid_argument when neither a time nor a count bounds it, or a delay
  /// kind has no positive delay. Emits a "chaos_fault" event {"action":"start",...}.
  uint64_t add_live(live_fault f);
  /// Arms a live fault that starts when learner `f.learner` (>= 0) finishes inner step
  /// `at_step` — as a step-keyed message event of the experiment's chaos section would — and
  /// then lasts `duration_s` seconds (0: `f.count` matches; nan_step / fail_step default to one
  /// step). The chaos endpoint's `at_step` requests (dd-node launch fires the experiment's
  /// step-keyed message faults this way). Throws std::invalid_argument as add_live does, and
  /// for a broadcast kind or no learner. Emits "chaos_fault" {"action":"armed","at_step",...}.
  void arm_live(live_fault f, uint64_t at_step, double duration_s);
  /// Ends every live fault now; returns how many were active. Emits "chaos_fault"
  /// {"action":"clear"}.
  size_t clear_live();
  /// The live faults still active (expired ones are pruned first).
  std::vector<live_fault> live() const;
  /// The owner of `fragment` is about to send a merged version's chunks to learner `learner`.
  broadcast_fault on_broadcast(int32_t fragment, int32_t learner);
  /// The hooks' clock: seconds since the run started.
  double now() const { return clock_(); }

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
  std::vector<int32_t> damage_;  // fragments whose owner must damage its checkpoint
  std::vector<live_fault> live_;
  uint64_t next_live_id_ = 1;
  /// Takes one match of every live fault of kind `k` matching (learner, fragment); the
  /// matching faults, after their hit is counted (expired and spent ones are pruned).
  std::vector<live_fault> take_live_locked(fault_kind k, int32_t learner, int32_t fragment,
                                           double now);
  void prune_live_locked(double now);
  /// Starts every due start_live fault: time-keyed ones always, step-keyed ones of `learner`
  /// at `step` (learner < 0: none step-keyed).
  void promote_locked(double now, int32_t learner, uint64_t step);
  void add_live_locked(live_fault f, double now);
};

/// How long a randomly failed actor stays down (seconds).
struct random_recovery {
  enum class distribution { exponential, fixed, lognormal, weibull };
  distribution dist = distribution::exponential;
  double mean_s = 5.0;  ///< mean downtime, seconds (> 0)
  double sigma = 0.5;   ///< lognormal: σ of log-downtime (the mean stays mean_s)
  double shape = 1.5;   ///< weibull: shape k > 0 (the scale is chosen so the mean stays mean_s)
};

/// Draws a random failure schedule: for each of `targets` actors independently, failure times
/// from a Poisson process with mean time between failures `mtbf_s` (seconds of wall time since
/// the run started, exponential gaps measured from the end of the previous downtime), each with
/// a downtime drawn from `recovery`, up to `horizon_s`. `kind` is kill_learner or kill_owner.
/// Deterministic in `seed` (runtime/rng.hpp: splitmix64). At most `max_per_target` faults per
/// actor. Throws std::invalid_argument when mtbf_s <= 0, horizon_s < 0 or recovery.mean_s <= 0.
std::vector<fault_spec> random_fault_schedule(fault_kind kind, int targets, double mtbf_s,
                                              const random_recovery& recovery, double horizon_s,
                                              uint64_t seed, int max_per_target = 1000);

/// True for a fault of the experiment's message kinds (drop_push, delay_push, and the live
/// ones: dup/reorder/corrupt push, the broadcast kinds, nan, fail): those a node started with
/// `--message-faults-via-endpoint` leaves to dd-chaos, which sends them through its chaos
/// endpoint (dd-node launch).
bool is_message_fault(const fault_spec& f);

/// The experiment's chaos schedule (chaos.events, chaos.random) as fault specs. Fractions are
/// of the per-learner step budget, or of the seconds budget; owner faults count the owner's
/// versions ≈ steps / H; random faults are keyed on wall time with the seconds budget (24 h for
/// tokens/steps budgets) as horizon.
std::vector<fault_spec> fault_specs_of(const config::experiment& e, uint64_t steps_per_learner,
                                       int fragments);

}  // namespace dd::actors
