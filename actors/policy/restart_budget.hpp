// actors/policy/restart_budget.hpp — supervisor restart budget with exponential backoff.
//
// Pure function plus a copyable history value. The supervisor actor keeps one `restart_history`
// per child and calls `decide_restart` when the child goes down; the goodput simulator may do the
// same. Any thread may call them.
//
// Source: DESIGN.md, "Actors" — "respawns with backoff and a restart budget (max restarts per
// window, as OTP supervisors do)". Backoff = min(base · 2^k, cap) is ours.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace dd::policy {

/// Restart budget configuration (all times in seconds).
struct restart_config {
  /// N: at most N restarts in any sliding window of `window_s`; 0 = never restart (the first
  /// crash gives up with reason budget_exhausted).
  std::size_t max_restarts = 5;
  double window_s = 60.0;       ///< W: sliding window length (s), > 0.
  double backoff_base_s = 0.5;  ///< first delay (s), >= 0.
  double backoff_cap_s = 30.0;  ///< largest delay (s), >= backoff_base_s.
  /// Two restarts are "consecutive" when the later one is less than this after the earlier one;
  /// < 0 means "use window_s".
  double stable_after_s = -1.0;
};

/// Times at which a child was restarted (seconds, non-decreasing).
struct restart_history {
  std::vector<double> restart_times_s;
};

/// What the supervisor does.
enum class restart_action { restart, give_up };

/// Stable machine name of an action.
const char* to_string(restart_action a);

/// Why.
enum class restart_reason {
  first_restart,     ///< no recent restart: restart after backoff_base_s.
  backoff,           ///< k consecutive restarts before this one: restart after min(base·2^k, cap).
  budget_exhausted,  ///< N restarts already inside the window ending now: give up.
  invalid_config,    ///< W <= 0, negative or non-finite delays: give up.
};

/// Stable machine name of a reason.
const char* to_string(restart_reason r);

/// Result of `decide_restart`.
struct restart_decision {
  restart_action action = restart_action::give_up;
  double delay_s = 0.0;         ///< restart after this many seconds (action == restart).
  std::size_t in_window = 0;    ///< restarts inside (now − W, now].
  std::size_t consecutive = 0;  ///< k: length of the chain of consecutive restarts ending now.
  restart_reason reason = restart_reason::invalid_config;
  std::string message;
};

/// Decide, at `now_s` (the child just went down), whether to restart and after how long.
/// Give up when at least N restarts happened in (now − W, now]. Otherwise k = number of earlier
/// restarts forming a chain in which each is closer than `stable_after_s` to the next and the last
/// is closer than `stable_after_s` to now; delay = min(base · 2^k, cap).
restart_decision decide_restart(const restart_config& config, const restart_history& history,
                                double now_s);

/// Appends a restart at `at_s`; keeps the newest 1024 entries (bounded memory).
void record_restart(restart_history& history, double at_s);

}  // namespace dd::policy
