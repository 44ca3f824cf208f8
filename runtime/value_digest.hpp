// runtime/value_digest.hpp — the digest of a global fragment value, for divergence detection:
// the fragment owner computes it once when it makes a value (of the value as a learner decodes
// it, after any quantization) and sends it with the broadcast; a learner recomputes it over the
// copy it keeps of that value and reports both in its heartbeat; the health monitor reports a
// learner whose two differ (docs/runtime.md, Divergence detection).
//
// XXH3-64 (Debian libxxhash-dev) of the values' bytes, little-endian float32: about 10 GB/s on
// one core, so one fragment of a 25M-parameter model costs a few milliseconds. Never 0 (0 means
// "no digest" on the wire): a hash of 0 is reported as 1.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dd {

uint64_t value_digest(const float* values, size_t count) noexcept;
inline uint64_t value_digest(const std::vector<float>& values) noexcept {
  return value_digest(values.data(), values.size());
}

}  // namespace dd
