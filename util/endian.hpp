// util/endian.hpp — fixed-width little-endian integers in byte buffers. The project's file and
// frame formats (owner checkpoints, data cursors, safetensors' header length, the tensor
// channel's frames) are little-endian whatever the host; these are the one place that says how.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dd::util {

/// Writes the low `n` bytes of `v` at `p`, least significant first. `p`: `n` writable bytes;
/// `n` in [0, 8].
inline void store_le(uint8_t* p, uint64_t v, size_t n) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

/// Reads `n` bytes at `p` as an unsigned little-endian integer. `p`: `n` readable bytes; `n` in
/// [0, 8].
inline uint64_t load_le(const uint8_t* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

/// `sizeof(T)` bytes of the integer `v` at `p` (a signed value as its two's complement).
template <class T>
void store_le(uint8_t* p, T v) {
  store_le(p, static_cast<uint64_t>(v), sizeof(T));
}

/// The integer of type `T` stored at `p` by store_le<T>.
template <class T>
T load_le(const uint8_t* p) {
  return static_cast<T>(load_le(p, sizeof(T)));
}

}  // namespace dd::util
