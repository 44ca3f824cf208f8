// actors/policy/push_schedule.cpp — push schedule (see push_schedule.hpp).
#include "actors/policy/push_schedule.hpp"

#include <algorithm>
#include <string>

namespace dd::policy {

const char* to_string(schedule_reason r) {
  switch (r) {
    case schedule_reason::due: return "due";
    case schedule_reason::not_due: return "not_due";
    case schedule_reason::step_zero: return "step_zero";
    case schedule_reason::before_offset: return "before_offset";
    case schedule_reason::invalid_config: return "invalid_config";
  }
  return "unknown";
}

schedule_decision validate_schedule(std::uint64_t sync_interval, std::uint64_t fragments) {
  schedule_decision d;
  if (sync_interval == 0 || fragments == 0 || fragments > sync_interval) {
    d.reason = schedule_reason::invalid_config;
    d.message = "invalid push schedule: need H >= 1 and 1 <= P <= H, got H=" +
                std::to_string(sync_interval) + ", P=" + std::to_string(fragments);
    return d;
  }
  d.due = true;
  d.reason = schedule_reason::due;
  d.message =
      "valid schedule H=" + std::to_string(sync_interval) + ", P=" + std::to_string(fragments);
  return d;
}

std::uint64_t fragment_offset(std::uint64_t fragment, std::uint64_t sync_interval,
                              std::uint64_t fragments) {
  return fragment * sync_interval / fragments;
}

schedule_decision fragment_due(std::uint64_t step, std::uint64_t fragment,
                               std::uint64_t sync_interval, std::uint64_t fragments) {
  schedule_decision d = validate_schedule(sync_interval, fragments);
  if (!d.due) return d;
  d.due = false;
  if (fragment >= fragments) {
    d.reason = schedule_reason::invalid_config;
    d.message = "fragment " + std::to_string(fragment) +
                " out of range (P=" + std::to_string(fragments) + ")";
    return d;
  }
  if (step == 0) {
    d.reason = schedule_reason::step_zero;
    d.message = "step 0: nothing to push yet";
    return d;
  }
  const std::uint64_t offset = fragment_offset(fragment, sync_interval, fragments);
  if (step < offset) {
    d.reason = schedule_reason::before_offset;
    d.message =
        "fragment " + std::to_string(fragment) + " first due at step " + std::to_string(offset);
    return d;
  }
  d.due = (step - offset) % sync_interval == 0;
  d.reason = d.due ? schedule_reason::due : schedule_reason::not_due;
  d.message = "fragment " + std::to_string(fragment) + " at step " + std::to_string(step) +
              (d.due ? ": due" : ": not due") + " (offset " + std::to_string(offset) +
              ", H=" + std::to_string(sync_interval) + ")";
  return d;
}

std::vector<std::uint64_t> fragments_due(std::uint64_t step, std::uint64_t sync_interval,
                                         std::uint64_t fragments) {
  std::vector<std::uint64_t> out;
  if (!validate_schedule(sync_interval, fragments).due || step == 0) return out;
  for (std::uint64_t p = 0; p < fragments; ++p) {
    const std::uint64_t offset = fragment_offset(p, sync_interval, fragments);
    if (step >= offset && (step - offset) % sync_interval == 0) out.push_back(p);
  }
  return out;
}

std::vector<std::uint64_t> fragments_due_between(std::uint64_t from, std::uint64_t to,
                                                 std::uint64_t sync_interval,
                                                 std::uint64_t fragments) {
  std::vector<std::uint64_t> out;
  if (!validate_schedule(sync_interval, fragments).due || to <= from) return out;
  // Within any H consecutive clock values every fragment falls due exactly once.
  const std::uint64_t first = to - from > sync_interval ? to - sync_interval + 1 : from + 1;
  std::vector<bool> hit(fragments, false);
  for (std::uint64_t s = first; s <= to; ++s)
    for (std::uint64_t p : fragments_due(s, sync_interval, fragments)) hit[p] = true;
  for (std::uint64_t p = 0; p < fragments; ++p)
    if (hit[p]) out.push_back(p);
  return out;
}

void global_clock::observe(double t_s, double mean_step) {
  if (!readings_.empty() && t_s < readings_.back().first) return;
  if (!readings_.empty() && mean_step < readings_.back().second) {
    readings_.clear();
    ++restarts_;
  }
  readings_.emplace_back(t_s, mean_step);
  while (readings_.size() > window_) readings_.pop_front();
}

double global_clock::rate() const {
  if (readings_.size() < 2) return 0.0;
  const double dt = readings_.back().first - readings_.front().first;
  const double dg = readings_.back().second - readings_.front().second;
  return dt > 0 && dg > 0 ? dg / dt : 0.0;
}

std::optional<double> global_clock::at(double t_s, double max_ahead_s,
                                       double max_ahead_steps) const {
  if (readings_.empty()) return std::nullopt;
  const double ahead = std::clamp(t_s - readings_.back().first, 0.0, std::max(0.0, max_ahead_s));
  const double steps = std::min(rate() * ahead, std::max(0.0, max_ahead_steps));
  return readings_.back().second + steps;
}

void heartbeat_dates::sent(std::uint64_t step, double t_s) {
  sent_.emplace_back(step, t_s);
  while (sent_.size() > capacity_) sent_.pop_front();
}

std::optional<double> heartbeat_dates::answer(std::uint64_t step) {
  if (sent_.empty() || step < sent_.front().first) return std::nullopt;
  while (!sent_.empty() && sent_.front().first < step) sent_.pop_front();
  if (sent_.empty() || sent_.front().first != step) return std::nullopt;
  const double t = sent_.front().second;
  sent_.pop_front();
  return t;
}

}  // namespace dd::policy
