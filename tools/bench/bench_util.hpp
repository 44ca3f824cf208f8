// tools/bench/bench_util.hpp — the clock and the statistic the benches share.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <vector>

namespace dd::bench {

/// Monotonic clock, seconds.
inline double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// The median of `v` (the mean of the middle two for an even count); 0 for none.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

}  // namespace dd::bench
