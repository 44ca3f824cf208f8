// actors/policy/restart_budget.cpp — restart budget and backoff (see restart_budget.hpp).
#include "actors/policy/restart_budget.hpp"

#include <algorithm>
#include <cmath>
#include <string>

namespace dd::policy {

const char* to_string(restart_action a) {
  switch (a) {
    case restart_action::restart: return "restart";
    case restart_action::give_up: return "give_up";
  }
  return "unknown";
}

const char* to_string(restart_reason r) {
  switch (r) {
    case restart_reason::first_restart: return "first_restart";
    case restart_reason::backoff: return "backoff";
    case restart_reason::budget_exhausted: return "budget_exhausted";
    case restart_reason::invalid_config: return "invalid_config";
  }
  return "unknown";
}

restart_decision decide_restart(const restart_config& config, const restart_history& history,
                                double now_s) {
  restart_decision d;
  const double stable = config.stable_after_s < 0.0 ? config.window_s : config.stable_after_s;
  if (!std::isfinite(config.window_s) || config.window_s <= 0.0 ||
      !std::isfinite(config.backoff_base_s) || config.backoff_base_s < 0.0 ||
      !std::isfinite(config.backoff_cap_s) || config.backoff_cap_s < config.backoff_base_s ||
      !std::isfinite(stable) || !std::isfinite(now_s)) {
    d.reason = restart_reason::invalid_config;
    d.message = "give up: invalid restart config (need W > 0, 0 <= base <= cap)";
    return d;
  }
  const auto& t = history.restart_times_s;
  for (double x : t) {
    if (x > now_s - config.window_s && x <= now_s) ++d.in_window;
  }
  if (d.in_window >= config.max_restarts) {
    d.reason = restart_reason::budget_exhausted;
    d.message = "give up: " + std::to_string(d.in_window) + " restarts in the last " +
                std::to_string(config.window_s) + " s (max " + std::to_string(config.max_restarts) +
                ")";
    return d;
  }
  // k: chain of consecutive restarts ending now, scanning back from the newest.
  double next = now_s;
  for (auto it = t.rbegin(); it != t.rend(); ++it) {
    if (*it > next || next - *it >= stable) break;
    ++d.consecutive;
    next = *it;
  }
  const double factor = std::ldexp(1.0, static_cast<int>(std::min<std::size_t>(d.consecutive, 60)));
  d.delay_s = std::min(config.backoff_base_s * factor, config.backoff_cap_s);
  d.action = restart_action::restart;
  d.reason = d.consecutive == 0 ? restart_reason::first_restart : restart_reason::backoff;
  d.message = "restart after " + std::to_string(d.delay_s) + " s (" +
              std::to_string(d.consecutive) + " consecutive, " + std::to_string(d.in_window) + "/" +
              std::to_string(config.max_restarts) + " in window)";
  return d;
}

void record_restart(restart_history& history, double at_s) {
  history.restart_times_s.push_back(at_s);
  // Bounded memory: a child that keeps restarting forever must not grow the history forever.
  constexpr std::size_t keep = 1024;
  if (history.restart_times_s.size() > keep) {
    history.restart_times_s.erase(history.restart_times_s.begin(),
                                  history.restart_times_s.end() - keep);
  }
}

}  // namespace dd::policy
