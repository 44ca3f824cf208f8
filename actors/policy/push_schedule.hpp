// actors/policy/push_schedule.hpp — which fragment a learner pushes at which inner step.
//
// Pure functions. The learner actor calls `fragment_due` after every inner step; the goodput
// simulator and tests use the same functions. Any thread may call them.
//
// Source: ALGORITHM.md, "Learner loop": fragment p is pushed at step s when
// (s − offset_p) mod H == 0, offset_p = floor(p · H / P), s >= 1, P <= H (streaming DiLoCo,
// arXiv 2501.18512; paper default P = H = 24).
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dd::policy {

/// Why a schedule decision came out the way it did.
enum class schedule_reason {
  due,              ///< (s − offset_p) mod H == 0.
  not_due,          ///< not this fragment's turn.
  step_zero,        ///< s == 0: nothing computed yet, nothing to push.
  before_offset,    ///< s < offset_p: the fragment's first turn is still ahead.
  invalid_config,   ///< H == 0, P == 0, P > H, or p >= P.
};

/// Stable machine name of a reason.
const char* to_string(schedule_reason r);

/// Result of `fragment_due`.
struct schedule_decision {
  bool due = false;
  schedule_reason reason = schedule_reason::invalid_config;
  std::string message;
};

/// Checks H (sync interval, inner steps) and P (fragments): H >= 1, 1 <= P <= H. Returns
/// reason `due` when valid (the decision's `due` field is then true), `invalid_config` otherwise.
schedule_decision validate_schedule(std::uint64_t sync_interval, std::uint64_t fragments);

/// offset_p = floor(p · H / P) in inner steps. Precondition: valid H, P and p < P.
std::uint64_t fragment_offset(std::uint64_t fragment, std::uint64_t sync_interval,
                              std::uint64_t fragments);

/// Is fragment p due at inner step s (s counted from 1)? Due when s >= 1, s >= offset_p and
/// (s − offset_p) mod H == 0.
schedule_decision fragment_due(std::uint64_t step, std::uint64_t fragment,
                               std::uint64_t sync_interval, std::uint64_t fragments);

/// Every fragment due at step s, in increasing order (empty on an invalid config).
std::vector<std::uint64_t> fragments_due(std::uint64_t step, std::uint64_t sync_interval,
                                         std::uint64_t fragments);

/// Every fragment due at some clock value s in (from, to], each at most once, in increasing
/// order: the schedule read off a clock that may advance by more than one per inner step (the
/// global push clock, `sync.push_clock = "global"`, where a slow learner's view of the mean step
/// moves by more than one per own step, and a fast learner's by less). to <= from gives none;
/// to − from >= H gives every fragment. Empty on an invalid config.
std::vector<std::uint64_t> fragments_due_between(std::uint64_t from, std::uint64_t to,
                                                 std::uint64_t sync_interval,
                                                 std::uint64_t fragments);

/// The global push clock as one learner sees it: the live learners' mean inner step (the health
/// monitor's progress replies, progress_msg::mean_step), extrapolated to "now".
///
/// A learner handles messages only between its inner steps, so a reading is one or two of its
/// own steps old when the schedule is checked; a learner 1.5× slower than the rest would push
/// every fragment 1–2 slow steps after the others and miss their grace window. Each reading is
/// therefore dated by the learner's own clock (the send time of the heartbeat it answers) and
/// the estimate adds rate × elapsed, the rate taken over the last `window` readings.
///
/// Not thread-safe (one learner actor owns one). Times in seconds of any monotonic clock.
class global_clock {
 public:
  /// window: readings the rate is measured over (>= 2).
  explicit global_clock(std::size_t window = 9) : window_(window < 2 ? 2 : window) {}

  /// Records that the mean step was `mean_step` at time `t_s`. A reading older than the newest
  /// one is ignored (replies overtaken on the wire).
  void observe(double t_s, double mean_step);

  /// The estimated mean step at `t_s`: the newest reading plus rate × (t_s − its time), the
  /// extrapolation clamped to [0, max_ahead_s] seconds (so a stalled group is not run ahead of).
  /// nullopt before the first reading.
  std::optional<double> at(double t_s, double max_ahead_s) const;

  /// Mean steps per second over the window (0 with fewer than two readings).
  double rate() const;

  /// Forgets every reading (a learner that reloads starts over).
  void reset() { readings_.clear(); }

 private:
  std::size_t window_;
  std::deque<std::pair<double, double>> readings_;  // (t_s, mean_step), oldest first
};

}  // namespace dd::policy
