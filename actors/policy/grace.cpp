// actors/policy/grace.cpp — EMA and grace window (see grace.hpp).
#include "actors/policy/grace.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>

namespace dd::policy {

ema::ema(double smoothing)
    : smoothing_(std::isfinite(smoothing) ? std::clamp(smoothing, 1e-12, 1.0) : 0.2) {}

bool ema::update(double x) {
  if (!std::isfinite(x)) return false;
  if (!initialized_) {
    value_ = x;
    initialized_ = true;
  } else {
    value_ = (1.0 - smoothing_) * value_ + smoothing_ * x;
  }
  return true;
}

const char* to_string(grace_reason r) {
  switch (r) {
    case grace_reason::off: return "off";
    case grace_reason::fixed: return "fixed";
    case grace_reason::adaptive: return "adaptive";
    case grace_reason::clamped_to_zero: return "clamped_to_zero";
    case grace_reason::clamped_to_max: return "clamped_to_max";
    case grace_reason::no_step_estimate: return "no_step_estimate";
    case grace_reason::invalid_config: return "invalid_config";
  }
  return "unknown";
}

grace_decision compute_grace(const grace_config& config, double tau_steps, double xi_step_s,
                             double xi_quorum_s, double xi_sync_s) {
  grace_decision d;
  switch (config.mode) {
    case grace_mode::off:
      d.reason = grace_reason::off;
      d.message = "grace window off";
      return d;
    case grace_mode::fixed:
      if (!std::isfinite(config.fixed_s) || config.fixed_s < 0.0) {
        d.reason = grace_reason::invalid_config;
        d.message = "invalid grace config: fixed window must be >= 0 s, got " +
                    std::to_string(config.fixed_s);
        return d;
      }
      d.grace_s = config.fixed_s;
      d.reason = grace_reason::fixed;
      d.message = "fixed grace window " + std::to_string(d.grace_s) + " s";
      return d;
    case grace_mode::adaptive: break;
  }
  if (!std::isfinite(config.gamma) || config.gamma < 0.0 || config.gamma > 1.0 ||
      !std::isfinite(tau_steps) || tau_steps < 0.0 || !std::isfinite(xi_quorum_s) ||
      !std::isfinite(xi_sync_s) || !std::isfinite(config.grace_max_s) ||
      !std::isfinite(config.max_factor) || config.max_factor < 0.0) {
    d.reason = grace_reason::invalid_config;
    d.message = "invalid grace input: need gamma in [0,1], tau >= 0 and finite EMAs";
    return d;
  }
  if (!std::isfinite(xi_step_s) || xi_step_s <= 0.0) {
    d.reason = grace_reason::no_step_estimate;
    d.message = "no learner step-time estimate yet: grace 0 s";
    return d;
  }
  const double grace_max =
      config.grace_max_s < 0.0 ? config.max_factor * xi_step_s : config.grace_max_s;
  const double raw = config.gamma * (tau_steps * xi_step_s - xi_quorum_s - xi_sync_s);
  const std::string numbers =
      " (gamma=" + std::to_string(config.gamma) + ", tau=" + std::to_string(tau_steps) +
      ", xi_step=" + std::to_string(xi_step_s) + " s, xi_quorum=" + std::to_string(xi_quorum_s) +
      " s, xi_sync=" + std::to_string(xi_sync_s) + " s, max=" + std::to_string(grace_max) + " s)";
  if (raw <= 0.0) {
    d.reason = grace_reason::clamped_to_zero;
    d.message = "no slack left in the overlap: grace 0 s" + numbers;
  } else if (raw > grace_max) {
    d.grace_s = grace_max;
    d.reason = grace_reason::clamped_to_max;
    d.message = "grace capped at " + std::to_string(grace_max) + " s" + numbers;
  } else {
    d.grace_s = raw;
    d.reason = grace_reason::adaptive;
    d.message = "adaptive grace " + std::to_string(raw) + " s" + numbers;
  }
  return d;
}

}  // namespace dd::policy

namespace dd::policy {

double robust_step_time(std::vector<double> step_times_s) {
  step_times_s.erase(std::remove_if(step_times_s.begin(), step_times_s.end(),
                                    [](double x) { return !(std::isfinite(x) && x > 0); }),
                     step_times_s.end());
  if (step_times_s.empty()) return 0.0;
  const size_t k = (step_times_s.size() - 1) / 2;  // ⌈n/2⌉-th smallest, 0-based
  std::nth_element(step_times_s.begin(), step_times_s.begin() + static_cast<std::ptrdiff_t>(k),
                   step_times_s.end());
  return step_times_s[k];
}

}  // namespace dd::policy
