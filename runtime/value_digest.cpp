// runtime/value_digest.cpp — see value_digest.hpp.
#include "runtime/value_digest.hpp"

#include <xxhash.h>

namespace dd {

uint64_t value_digest(const float* values, size_t count) noexcept {
  static_assert(sizeof(float) == 4, "float32 values");
  const uint64_t h = XXH3_64bits(values, count * sizeof(float));
  return h == 0 ? 1 : h;
}

}  // namespace dd
