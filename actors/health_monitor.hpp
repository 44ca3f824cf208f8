// actors/health_monitor.hpp — membership and health of the learners, and the directory of
// fragment owners.
//
// Promises: assigns each joining learner its id, a new incarnation and its data shard, and hands
// a respawned learner the step and data cursor last recorded for it; keeps a heartbeat lease per
// learner and declares a learner dead when its actor goes down or its lease expires (then it is
// killed so its supervisor respawns it); flags stragglers; publishes the live-learner view to
// every fragment owner whenever it changes (and periodically, with fresh step-time EMAs); tells
// learners the current owner of every fragment; reports when a token budget is spent.
//
// Protocol (actors/atoms.hpp): (join_atom, bytes, actor) -> bytes join_reply;
// (heartbeat_atom, bytes); (leave_atom, id, incarnation); (subscribe_atom, fragment, actor);
// (get_atom, owners_atom) -> std::vector<actor>; sends (live_atom, live_view) to owners,
// (owners_atom, std::vector<actor>) to learners, (done_atom) to the job when the budget is spent.
// Event-based.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/stateful_actor.hpp>

#include "actors/atoms.hpp"

namespace dd::actors {

class run_log;

/// Configuration of the health monitor.
struct monitor_context {
  int learners = 4;             ///< M: shard count and learner ids 0..M-1
  int fragments = 1;            ///< P: owners in the directory
  /// A learner without a heartbeat for max(lease_min_s, lease_steps × its step-time EMA)
  /// seconds is declared dead.
  double lease_min_s = 30.0;
  double lease_steps = 50.0;
  /// How often leases are checked and the view republished, seconds.
  double tick_s = 0.5;
  /// A learner whose step-time EMA exceeds this × the median is flagged a straggler (logged).
  double straggler_factor = 1.5;
  /// Stop when Σ tokens over all learners reaches this (0 = no token budget).
  uint64_t token_budget = 0;
  /// Synchronous baselines (K = M): a respawned learner resumes at the group's step (the
  /// highest step of the live learners) so its push schedule is in phase with theirs; otherwise
  /// it resumes its own recorded step (ALGORITHM.md, Recovery).
  bool align_resume_to_group = false;
  /// The experiment as JSON text (sent in join replies).
  std::string experiment_json;
  /// Receives (done_atom) when the token budget is spent; may be invalid.
  caf::actor job;
  run_log* log = nullptr;
};

/// What the monitor knows about one learner id.
struct learner_record {
  uint64_t incarnation = 0;
  bool alive = false;
  bool finished = false;
  bool straggler = false;
  caf::actor handle;
  uint64_t step = 0;
  uint64_t tokens_this_incarnation = 0;
  uint64_t tokens_before = 0;      ///< tokens of earlier incarnations
  double step_time_ema_s = 0.0;
  std::vector<uint8_t> data_cursor;
  double last_heartbeat_s = 0.0;
};

/// CAF state of the monitor.
struct monitor_state {
  std::map<int32_t, learner_record> learners;
  std::vector<caf::actor> owners;
  uint64_t epoch = 0;
  bool budget_reported = false;
  /// The global push clock (progress_msg::mean_step): Σ over accepted heartbeats of the steps
  /// they advance / the learners live then.
  double mean_step = 0.0;
  static inline const char* name = "health_monitor";
};

using monitor_actor = caf::stateful_actor<monitor_state>;

/// The monitor's behavior.
caf::behavior health_monitor(monitor_actor* self, std::shared_ptr<const monitor_context> ctx);

}  // namespace dd::actors
