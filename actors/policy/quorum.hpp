// actors/policy/quorum.hpp — min quorum (K) and the fragment owner's merge decision.
//
// Pure functions: no clock, no actor, no I/O. The fragment owner actor calls `decide_merge` on
// every push, on every change of the live-learner view and when its grace timer fires; the goodput
// simulator (tools/goodput) calls the same function. Any thread may call them.
//
// Source: ALGORITHM.md, "Fragment owner" (quorum K, grace window ξ_grace) — Decoupled DiLoCo,
// arXiv 2604.21428.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>

namespace dd::policy {

/// How the min quorum K is given: an absolute count of contributions or a fraction of the live
/// learners. Paper symbol K; default K = 1 (count). K = M gives synchronous streaming DiLoCo.
/// Also the experiment's `sync.min_quorum` (runtime/config/experiment.hpp).
struct quorum_spec {
  enum class kind { count, fraction };
  kind mode = kind::count;
  std::size_t count = 1;  ///< K as a count (mode == count); must be >= 1.
  double fraction = 1.0;  ///< K as a fraction of live learners (mode == fraction), in (0, 1].

  /// K as a count of contributions.
  static quorum_spec of_count(std::size_t k) { return {kind::count, k, 1.0}; }
  /// K as a fraction of live learners.
  static quorum_spec of_fraction(double f) { return {kind::fraction, 1, f}; }

  /// True when K is a fraction of the live learners.
  bool is_fraction() const { return mode == kind::fraction; }
  /// K for `live` live learners: the count or ceil(fraction · live), clamped to [1, live]; 1
  /// when live is 0 (compute_quorum's `needed`). Inline: the experiment's readers use it without
  /// linking the policy library.
  std::size_t resolve(std::size_t live) const {
    if (live == 0) return 1;
    std::size_t needed = count;
    if (mode == kind::fraction) {
      // ceil(f · live); subtract a tiny epsilon so that e.g. 0.5 · 4 = 2 does not round up to 3
      // through floating-point noise in f.
      const double raw = std::ceil(fraction * static_cast<double>(live) - 1e-9);
      needed = raw < 1.0 ? 1 : static_cast<std::size_t>(raw);
    }
    return std::clamp<std::size_t>(needed, 1, live);
  }
  /// Synchronous (K = M): the fraction is 1, or the count reaches `learners`.
  bool synchronous(std::size_t learners) const {
    return is_fraction() ? fraction >= 1.0 : count >= learners;
  }
};

/// Why a quorum decision came out the way it did.
enum class quorum_reason {
  reached,           ///< have >= needed.
  not_reached,       ///< have < needed.
  no_live_learners,  ///< live == 0: nothing can be merged.
  invalid_spec,      ///< count == 0, or fraction outside (0, 1] or not finite.
};

/// Stable machine name of a reason ("reached", "not_reached", ...).
const char* to_string(quorum_reason r);

/// Result of `compute_quorum`.
struct quorum_decision {
  bool reached = false;
  std::size_t needed = 0;  ///< contributions required now (0 only when live == 0 or invalid).
  std::size_t have = 0;    ///< validated pending contributions from live learners.
  quorum_reason reason = quorum_reason::not_reached;
  std::string message;  ///< human-readable, e.g. "quorum 2/3 of 4 live learners: not reached".
};

/// Is the min quorum reached?
///
/// needed = clamp(K, 1, live) for a count, clamp(ceil(fraction · live), 1, live) for a fraction
/// (ALGORITHM.md, "Quorum": K is a count or a fraction of live learners). `have` counts pending
/// pushes from live learners only (pushes from learners declared dead are dropped). have > live is
/// a caller bug and is clamped to live.
quorum_decision compute_quorum(const quorum_spec& spec, std::size_t live, std::size_t have);

/// What the owner should do now.
enum class merge_action {
  wait,                ///< nothing to do yet.
  start_grace_timer,   ///< quorum newly reached: arm the grace timer until `grace_deadline_s`.
  merge_now,           ///< merge the pending pushes and broadcast.
  cancel_grace_timer,  ///< the timer is running but quorum was lost (a learner died): disarm it.
};

/// Stable machine name of an action.
const char* to_string(merge_action a);

/// Why `decide_merge` chose its action.
enum class merge_reason {
  no_pending,               ///< no pending push.
  no_live_learners,         ///< live == 0.
  invalid_spec,             ///< the quorum spec is invalid (see quorum_reason::invalid_spec).
  quorum_not_reached,       ///< fewer than K pending and no timer running.
  all_live_pending,         ///< every live learner is pending: merge without waiting.
  quorum_reached_no_grace,  ///< quorum reached and the grace window is 0 s: merge at once.
  grace_started,            ///< quorum newly reached: grace timer armed.
  grace_running,            ///< timer armed and not expired: keep waiting.
  grace_expired,            ///< timer expired with quorum: merge.
  quorum_lost,              ///< timer armed (or expired) but quorum no longer holds.
};

/// Stable machine name of a reason.
const char* to_string(merge_reason r);

/// The owner's view of its current round, as the caller sees it at `now_s`.
struct round_state {
  std::size_t live = 0;         ///< live learners (health monitor's view).
  std::size_t pending = 0;      ///< validated pending pushes from live learners.
  bool grace_running = false;   ///< a grace timer is armed for this round.
  double grace_deadline_s = 0;  ///< when the armed timer fires (seconds, caller's clock).
};

/// Result of `decide_merge`.
struct merge_decision {
  merge_action action = merge_action::wait;
  merge_reason reason = merge_reason::no_pending;
  double grace_deadline_s = 0;  ///< set with start_grace_timer: now_s + grace_s (seconds).
  quorum_decision quorum;       ///< the quorum evaluation behind the decision.
  std::string message;          ///< human-readable.
};

/// The merge rule of a fragment owner (ALGORITHM.md, "Fragment owner"): merge now when every live
/// learner is pending; otherwise, when quorum is newly reached start a grace timer of `grace_s`
/// seconds (merge at once when grace_s <= 0); merge when the timer has expired (now_s >=
/// deadline) and quorum still holds; cancel the timer when quorum was lost.
/// `now_s` and `grace_s` are seconds on the caller's clock; `grace_s` normally comes from
/// `compute_grace` (grace.hpp).
merge_decision decide_merge(const quorum_spec& spec, const round_state& state, double now_s,
                            double grace_s);

}  // namespace dd::policy
