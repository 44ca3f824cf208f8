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
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dd::policy {

/// Why a schedule decision came out the way it did.
enum class schedule_reason {
  due,             ///< (s − offset_p) mod H == 0.
  not_due,         ///< not this fragment's turn.
  step_zero,       ///< s == 0: nothing computed yet, nothing to push.
  before_offset,   ///< s < offset_p: the fragment's first turn is still ahead.
  invalid_config,  ///< H == 0, P == 0, P > H, or p >= P.
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
/// Readings must be dated by when their heartbeat left, never by when the reply arrived: replies
/// held up by a busy syncer arrive in a burst, microseconds apart, and a rate measured over such
/// a burst is thousands of steps per second; the learner latches the clock's highest value, so
/// one such estimate would stop every learner's pushes for seconds.
/// `at` also bounds the extrapolation in steps, so a misdated reading costs at most that much.
///
/// Not thread-safe (one learner actor owns one). Times in seconds of any monotonic clock.
class global_clock {
 public:
  /// window: readings the rate is measured over (>= 2).
  explicit global_clock(std::size_t window = 9) : window_(window < 2 ? 2 : window) {}

  /// Records that the mean step was `mean_step` at time `t_s`. A reading older than the newest
  /// one is ignored (replies overtaken on the wire). A reading whose value is below the newest
  /// one means the clock started over (a restarted health monitor restored an older mean step):
  /// the older readings are forgotten and `restarts()` counts one more.
  void observe(double t_s, double mean_step);

  /// The estimated mean step at `t_s`: the newest reading plus rate × (t_s − its time), the
  /// elapsed time clamped to [0, max_ahead_s] seconds (so a stalled group is not run ahead of)
  /// and the added steps to at most `max_ahead_steps` (>= 0; a learner passes its sync interval
  /// H, so an overestimate it latches can delay a fragment's push by at most one turn).
  /// nullopt before the first reading.
  std::optional<double> at(double t_s, double max_ahead_s,
                           double max_ahead_steps = std::numeric_limits<double>::infinity()) const;

  /// Mean steps per second over the window (0 with fewer than two readings).
  double rate() const;

  /// How many times the clock went backwards and started over (see `observe`); a learner that
  /// latches the clock's value re-bases it when this changes.
  std::uint64_t restarts() const { return restarts_; }

  /// Forgets every reading (a learner that reloads starts over).
  void reset() { readings_.clear(); }

 private:
  std::size_t window_;
  std::uint64_t restarts_ = 0;
  std::deque<std::pair<double, double>> readings_;  // (t_s, mean_step), oldest first
};

/// The send times of a learner's heartbeats not yet answered, to date the progress replies
/// that answer them (global_clock). Heartbeats carry strictly increasing steps and the health
/// monitor answers them in order, so a reply for step s answers the oldest entry of step s;
/// entries before it were never answered (a reply lost, or a monitor that went away) and are
/// dropped with it.
///
/// Holds at most `capacity` entries (the oldest are dropped beyond it): a reply whose heartbeat
/// is no longer held cannot be dated and `answer` returns nullopt, and the learner then skips
/// that reading rather than date it by its arrival (see global_clock). Not thread-safe.
class heartbeat_dates {
 public:
  /// capacity: unanswered heartbeats kept (>= 1). A reply more than `capacity` heartbeats late
  /// is not used.
  explicit heartbeat_dates(std::size_t capacity = 4096) : capacity_(capacity < 1 ? 1 : capacity) {}

  /// Records that the heartbeat of step `step` left at `t_s`.
  void sent(std::uint64_t step, double t_s);

  /// The send time of the heartbeat of step `step` (a reply arrived for it), or nullopt when it
  /// is not held; it and every older entry are forgotten either way, unless `step` is older than
  /// every entry held (a duplicate or stray reply: nothing changes).
  std::optional<double> answer(std::uint64_t step);

  /// Entries held.
  std::size_t size() const { return sent_.size(); }

 private:
  std::size_t capacity_;
  std::deque<std::pair<std::uint64_t, double>> sent_;  // (step, t_s), oldest first
};

}  // namespace dd::policy
