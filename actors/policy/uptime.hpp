// actors/policy/uptime.hpp — the run's uptime: the share of the observed time during which at
// least K learners were stepping (summary.json `uptime`).
//
// Computed by the health monitor, which knows who is live and stepping: a learner sends a heartbeat
// after every inner step, so a learner counts as stepping from each heartbeat until `window_s`
// after it — extended by its next heartbeat — unless the monitor stops it first (declared dead,
// left, finished). A learner that waits (for its model after a rejoin, at a barrier, paused,
// partitioned) sends no heartbeat and stops counting when its window runs out. The observed time
// starts at the first heartbeat of the run and ends when the meter is frozen (end of training) or
// every expected learner has finished.
//
// Pure value, exact: the integral is piecewise constant between the heartbeats, stops and
// window ends, and advance() integrates every piece. Times are seconds on one monotonic clock,
// never decreasing (an earlier time is taken as the last one). Not thread-safe (one owner).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>

namespace dd::policy {

class uptime_meter {
 public:
  /// `needed` = K (learners that must be stepping; 0 is taken as 1); `expected` = M (the
  /// integral freezes once M distinct learners have finished; 0 = never by itself).
  explicit uptime_meter(std::size_t needed = 1, std::size_t expected = 0);

  /// Learner `id` completed a step at `t_s`: stepping until t_s + window_s (window_s > 0; the
  /// monitor uses max(0.5 s, 3 × the learner's step-time EMA)). The first heartbeat starts the
  /// observation. A finished learner that steps again (its node was given its id back) counts
  /// again.
  void heartbeat(std::int32_t id, double t_s, double window_s);
  /// Learner `id` stopped stepping at `t_s` (declared dead); a later heartbeat counts again.
  void stop(std::int32_t id, double t_s);
  /// Learner `id` left the run at `t_s` (budget spent, drained, given up): not stepping, and
  /// counted toward `expected`.
  void finished(std::int32_t id, double t_s);
  /// Ends the observation at `t_s` (end of training): later calls change nothing.
  void freeze(double t_s);

  /// Integrates up to `t_s`.
  void advance(double t_s);
  /// Seconds with at least K learners stepping, and seconds observed, up to the last advance.
  double uptime_s() const { return uptime_s_; }
  double observed_s() const { return observed_s_; }
  /// uptime_s / observed_s (0 before anything was observed).
  double ratio() const { return observed_s_ > 0 ? uptime_s_ / observed_s_ : 0.0; }
  bool frozen() const { return frozen_; }

 private:
  std::size_t stepping_at(double t_s) const;  // learners whose window covers [t_s, next edge)
  std::size_t needed_;
  std::size_t expected_;
  std::map<std::int32_t, double> until_s_;  // stepping until (exclusive); absent = not
  std::map<std::int32_t, bool> finished_;
  double last_s_ = 0.0;
  double uptime_s_ = 0.0;
  double observed_s_ = 0.0;
  bool started_ = false;
  bool frozen_ = false;
};

}  // namespace dd::policy
