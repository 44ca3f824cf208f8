// runtime/rng.cpp — see rng.hpp.
#include "runtime/rng.hpp"

#include <cmath>

namespace dd {

double rng::normal() {
  const double u1 = uniform();
  const double u2 = uniform();
  constexpr double two_pi = 6.283185307179586476925286766559;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(two_pi * u2);
}

uint64_t derive_seed(uint64_t base, uint64_t stream) {
  rng r(base ^ (stream * 0xd1b54a32d192ed03ULL));
  return r.next_u64();
}

}  // namespace dd
