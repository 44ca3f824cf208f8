// actors/policy/quorum.cpp — min quorum and merge decision (see quorum.hpp).
#include "actors/policy/quorum.hpp"

#include <algorithm>
#include <cmath>
#include <string>

namespace dd::policy {

const char* to_string(quorum_reason r) {
  switch (r) {
    case quorum_reason::reached: return "reached";
    case quorum_reason::not_reached: return "not_reached";
    case quorum_reason::no_live_learners: return "no_live_learners";
    case quorum_reason::invalid_spec: return "invalid_spec";
  }
  return "unknown";
}

const char* to_string(merge_action a) {
  switch (a) {
    case merge_action::wait: return "wait";
    case merge_action::start_grace_timer: return "start_grace_timer";
    case merge_action::merge_now: return "merge_now";
    case merge_action::cancel_grace_timer: return "cancel_grace_timer";
  }
  return "unknown";
}

const char* to_string(merge_reason r) {
  switch (r) {
    case merge_reason::no_pending: return "no_pending";
    case merge_reason::no_live_learners: return "no_live_learners";
    case merge_reason::invalid_spec: return "invalid_spec";
    case merge_reason::quorum_not_reached: return "quorum_not_reached";
    case merge_reason::all_live_pending: return "all_live_pending";
    case merge_reason::quorum_reached_no_grace: return "quorum_reached_no_grace";
    case merge_reason::grace_started: return "grace_started";
    case merge_reason::grace_running: return "grace_running";
    case merge_reason::grace_expired: return "grace_expired";
    case merge_reason::quorum_lost: return "quorum_lost";
  }
  return "unknown";
}

quorum_decision compute_quorum(const quorum_spec& spec, std::size_t live, std::size_t have) {
  quorum_decision d;
  d.have = std::min(have, live);
  const bool valid =
      spec.mode == quorum_spec::kind::count
          ? spec.count >= 1
          : (std::isfinite(spec.fraction) && spec.fraction > 0.0 && spec.fraction <= 1.0);
  if (!valid) {
    d.reason = quorum_reason::invalid_spec;
    d.message =
        spec.mode == quorum_spec::kind::count
            ? "invalid quorum: count K must be >= 1"
            : "invalid quorum: fraction must be in (0, 1], got " + std::to_string(spec.fraction);
    return d;
  }
  if (live == 0) {
    d.reason = quorum_reason::no_live_learners;
    d.message = "quorum impossible: no live learners";
    return d;
  }
  d.needed = spec.resolve(live);
  d.reached = d.have >= d.needed;
  d.reason = d.reached ? quorum_reason::reached : quorum_reason::not_reached;
  d.message = "quorum " + std::to_string(d.have) + "/" + std::to_string(d.needed) + " of " +
              std::to_string(live) + " live learners: " + (d.reached ? "reached" : "not reached");
  return d;
}

merge_decision decide_merge(const quorum_spec& spec, const round_state& state, double now_s,
                            double grace_s) {
  merge_decision d;
  d.quorum = compute_quorum(spec, state.live, state.pending);
  auto finish = [&](merge_action a, merge_reason r, std::string why) {
    d.action = a;
    d.reason = r;
    d.message = std::move(why) + " (" + d.quorum.message + ")";
    return d;
  };
  if (d.quorum.reason == quorum_reason::invalid_spec) {
    return finish(state.grace_running ? merge_action::cancel_grace_timer : merge_action::wait,
                  merge_reason::invalid_spec, "cannot merge: invalid quorum spec");
  }
  if (state.live == 0) {
    return finish(state.grace_running ? merge_action::cancel_grace_timer : merge_action::wait,
                  merge_reason::no_live_learners, "cannot merge: no live learners");
  }
  if (d.quorum.have == 0) {
    return finish(state.grace_running ? merge_action::cancel_grace_timer : merge_action::wait,
                  merge_reason::no_pending, "nothing pending");
  }
  if (d.quorum.have >= state.live) {
    return finish(merge_action::merge_now, merge_reason::all_live_pending,
                  "every live learner is pending: merge now");
  }
  if (!d.quorum.reached) {
    if (state.grace_running) {
      return finish(merge_action::cancel_grace_timer, merge_reason::quorum_lost,
                    "quorum lost while the grace timer ran: cancel it");
    }
    return finish(merge_action::wait, merge_reason::quorum_not_reached, "waiting for quorum");
  }
  if (state.grace_running) {
    if (now_s >= state.grace_deadline_s) {
      return finish(merge_action::merge_now, merge_reason::grace_expired,
                    "grace window expired with quorum: merge");
    }
    d.grace_deadline_s = state.grace_deadline_s;
    return finish(merge_action::wait, merge_reason::grace_running,
                  "grace window running until t=" + std::to_string(state.grace_deadline_s) + " s");
  }
  if (!(grace_s > 0.0)) {  // also catches NaN
    return finish(merge_action::merge_now, merge_reason::quorum_reached_no_grace,
                  "quorum reached, no grace window: merge now");
  }
  d.grace_deadline_s = now_s + grace_s;
  return finish(merge_action::start_grace_timer, merge_reason::grace_started,
                "quorum reached: grace window of " + std::to_string(grace_s) + " s starts");
}

}  // namespace dd::policy
