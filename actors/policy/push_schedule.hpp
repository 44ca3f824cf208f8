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
#include <string>
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

}  // namespace dd::policy
