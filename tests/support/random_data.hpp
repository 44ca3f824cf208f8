// tests/support/random_data.hpp — seeded random host data for the kernel tests and dd-gpu-check
// (no GoogleTest here: dd-gpu-check is a program, not a test binary).
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace dd::test {

/// Uniform floats in [lo, hi) from a fixed seed.
inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

/// Uniform ints in [0, hi) from a fixed seed.
inline std::vector<int32_t> random_ints(size_t n, int32_t hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, hi - 1);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

}  // namespace dd::test
