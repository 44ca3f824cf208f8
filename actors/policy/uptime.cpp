// actors/policy/uptime.cpp — see uptime.hpp.
#include "actors/policy/uptime.hpp"

#include <algorithm>
#include <vector>

namespace dd::policy {

uptime_meter::uptime_meter(std::size_t needed, std::size_t expected)
    : needed_(needed == 0 ? 1 : needed), expected_(expected) {}

std::size_t uptime_meter::stepping_at(double t_s) const {
  std::size_t n = 0;
  for (const auto& [id, until] : until_s_)
    if (until > t_s) ++n;
  return n;
}

void uptime_meter::advance(double t_s) {
  if (!started_ || frozen_) {
    last_s_ = std::max(last_s_, t_s);
    return;
  }
  if (t_s <= last_s_) return;
  // The count changes only where a window ends: integrate piece by piece.
  std::vector<double> edges;
  for (const auto& [id, until] : until_s_)
    if (until > last_s_ && until < t_s) edges.push_back(until);
  std::sort(edges.begin(), edges.end());
  edges.push_back(t_s);
  for (double edge : edges) {
    if (edge <= last_s_) continue;
    const double dt = edge - last_s_;
    observed_s_ += dt;
    if (stepping_at(last_s_) >= needed_) uptime_s_ += dt;
    last_s_ = edge;
  }
}

void uptime_meter::heartbeat(std::int32_t id, double t_s, double window_s) {
  if (frozen_) return;
  advance(t_s);
  if (!started_) {
    started_ = true;
    last_s_ = std::max(last_s_, t_s);
  }
  finished_.erase(id);  // stepping again
  const double from = std::max(t_s, last_s_);
  auto& until = until_s_[id];
  until = std::max(until, from + std::max(0.0, window_s));
}

void uptime_meter::stop(std::int32_t id, double t_s) {
  if (frozen_) return;
  advance(t_s);
  until_s_.erase(id);
}

void uptime_meter::finished(std::int32_t id, double t_s) {
  if (frozen_) return;
  advance(t_s);
  until_s_.erase(id);
  finished_[id] = true;
  if (expected_ > 0 && finished_.size() >= expected_) frozen_ = true;
}

void uptime_meter::freeze(double t_s) {
  if (frozen_) return;
  advance(t_s);
  frozen_ = true;
}

}  // namespace dd::policy
