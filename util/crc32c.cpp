// util/crc32c.cpp — see crc32c.hpp. Slicing-by-8 over eight 256-entry tables built once.
#include "util/crc32c.hpp"

#include <array>
#include <cstring>

namespace dd::util {

namespace {

constexpr uint32_t castagnoli_reflected = 0x82F63B78u;

using tables = std::array<std::array<uint32_t, 256>, 8>;

tables make_tables() {
  tables t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ castagnoli_reflected : c >> 1;
    t[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; ++i)
    for (size_t s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFFu];
  return t;
}

const tables& table() {
  static const tables t = make_tables();
  return t;
}

}  // namespace

uint32_t crc32c(const void* data, size_t size, uint32_t crc) noexcept {
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
                "slicing-by-8 reads little-endian words");
  const auto& t = table();
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  while (size >= 8) {
    uint32_t lo = 0, hi = 0;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= c;
    c = t[7][lo & 0xFFu] ^ t[6][(lo >> 8) & 0xFFu] ^ t[5][(lo >> 16) & 0xFFu] ^ t[4][lo >> 24] ^
        t[3][hi & 0xFFu] ^ t[2][(hi >> 8) & 0xFFu] ^ t[1][(hi >> 16) & 0xFFu] ^ t[0][hi >> 24];
    p += 8;
    size -= 8;
  }
  while (size-- > 0) c = (c >> 8) ^ t[0][(c ^ *p++) & 0xFFu];
  return ~c;
}

}  // namespace dd::util
