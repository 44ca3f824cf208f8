// util/duration.hpp — seconds (the project's unit for every configured time) as a chrono
// duration for timers and waits. Header-only; any thread.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>

namespace dd::util {

/// `seconds` as whole nanoseconds (caf::timespan is this type), rounded up so that a timer never
/// fires before the time asked; negative or NaN → 0.
inline std::chrono::nanoseconds to_timespan(double seconds) {
  if (!(seconds > 0)) return std::chrono::nanoseconds{0};
  return std::chrono::nanoseconds{static_cast<int64_t>(std::ceil(seconds * 1e9))};
}

}  // namespace dd::util
