// util/crc32c.cpp — see crc32c.hpp. Software: slicing-by-8 over eight 256-entry tables built
// once. SSE4.2: the `crc32` instruction has a latency of 3 cycles and a throughput of 1 per
// cycle, so one stream runs at a third of what the unit can do; the buffer is cut into three
// blocks that are checksummed side by side and the three CRCs are combined with "append this
// many zero bytes" operators (linear in the CRC register, so four 256-entry tables each).
#include "util/crc32c.hpp"

#include <array>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define DD_CRC32C_X86 1
#include <nmmintrin.h>
#else
#define DD_CRC32C_X86 0
#endif

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

uint32_t crc32c_table(const void* data, size_t size, uint32_t crc) noexcept {
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

#if DD_CRC32C_X86

/// Block lengths of the three interleaved streams: long blocks for the bulk of a buffer, short
/// ones for what is left (each a multiple of 8).
constexpr size_t long_block = 8192;
constexpr size_t short_block = 256;

/// The linear map "CRC register after `n` more zero bytes" of a raw (uninverted) register,
/// as four byte-indexed tables: shift(c) = t[0][c & 0xFF] ^ t[1][c >> 8 & 0xFF] ^ ...
struct zeros_op {
  std::array<std::array<uint32_t, 256>, 4> t{};

  explicit zeros_op(size_t n) {
    const auto& byte = table()[0];
    // The image of each of the 32 basis registers, then every byte value by linearity.
    std::array<uint32_t, 32> basis{};
    for (int bit = 0; bit < 32; ++bit) {
      uint32_t c = uint32_t{1} << bit;
      for (size_t i = 0; i < n; ++i) c = (c >> 8) ^ byte[c & 0xFFu];
      basis[static_cast<size_t>(bit)] = c;
    }
    for (size_t k = 0; k < 4; ++k) {
      t[k][0] = 0;
      for (uint32_t b = 1; b < 256; ++b)
        t[k][b] = t[k][b & (b - 1)] ^ basis[8 * k + static_cast<size_t>(__builtin_ctz(b))];
    }
  }

  uint32_t operator()(uint32_t c) const noexcept {
    return t[0][c & 0xFFu] ^ t[1][(c >> 8) & 0xFFu] ^ t[2][(c >> 16) & 0xFFu] ^ t[3][c >> 24];
  }
};

const zeros_op& zeros_long() {
  static const zeros_op op(long_block);
  return op;
}
const zeros_op& zeros_short() {
  static const zeros_op op(short_block);
  return op;
}

inline uint64_t load64(const uint8_t* p) noexcept {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

/// Three streams of `block` bytes each from `p`, continuing register `c`; returns the register
/// after all 3 × block bytes.
__attribute__((target("sse4.2"))) inline uint32_t three_blocks(const uint8_t* p, size_t block,
                                                               uint32_t c, const zeros_op& shift) {
  uint64_t a = c, b = 0, d = 0;
  const uint8_t* end = p + block;
  for (; p < end; p += 8) {
    a = _mm_crc32_u64(a, load64(p));
    b = _mm_crc32_u64(b, load64(p + block));
    d = _mm_crc32_u64(d, load64(p + 2 * block));
  }
  // crc(a ‖ B) = shift_|B|(crc(a)) ^ crc_from_0(B): the register is linear in its start value.
  uint32_t r = shift(static_cast<uint32_t>(a)) ^ static_cast<uint32_t>(b);
  return shift(r) ^ static_cast<uint32_t>(d);
}

inline void store64(uint8_t* p, uint64_t v) noexcept { std::memcpy(p, &v, 8); }

/// three_blocks() that also stores each word it checksums at the same place under `q`.
__attribute__((target("sse4.2"))) inline uint32_t three_blocks_copy(uint8_t* q, const uint8_t* p,
                                                                    size_t block, uint32_t c,
                                                                    const zeros_op& shift) {
  uint64_t a = c, b = 0, d = 0;
  const uint8_t* end = p + block;
  for (; p < end; p += 8, q += 8) {
    const uint64_t x = load64(p), y = load64(p + block), z = load64(p + 2 * block);
    a = _mm_crc32_u64(a, x);
    b = _mm_crc32_u64(b, y);
    d = _mm_crc32_u64(d, z);
    store64(q, x);
    store64(q + block, y);
    store64(q + 2 * block, z);
  }
  uint32_t r = shift(static_cast<uint32_t>(a)) ^ static_cast<uint32_t>(b);
  return shift(r) ^ static_cast<uint32_t>(d);
}

/// The SSE4.2 walk over `data`; with kCopy it also stores each byte it checksums at the same
/// place under `dst` (the same steps: the source's alignment decides the word boundaries, the
/// stores need none).
template <bool kCopy>
__attribute__((target("sse4.2"))) uint32_t crc32c_walk(uint8_t* q, const void* data, size_t size,
                                                       uint32_t crc) noexcept {
  (void)q;  // unused without kCopy
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  // Align to 8 bytes so the bulk reads whole aligned words.
  while (size > 0 && (reinterpret_cast<uintptr_t>(p) & 7u) != 0) {
    if constexpr (kCopy) *q++ = *p;
    c = _mm_crc32_u8(c, *p++);
    --size;
  }
  // Long blocks first, then short ones for the rest (each with its own zeros operator).
  for (const bool is_long : {true, false}) {
    const size_t block = is_long ? long_block : short_block;
    if (size < 3 * block) continue;
    const zeros_op& shift = is_long ? zeros_long() : zeros_short();
    do {
      if constexpr (kCopy) {
        c = three_blocks_copy(q, p, block, c, shift);
        q += 3 * block;
      } else {
        c = three_blocks(p, block, c, shift);
      }
      p += 3 * block;
      size -= 3 * block;
    } while (size >= 3 * block);
  }
  uint64_t w = c;
  for (; size >= 8; p += 8, size -= 8) {
    const uint64_t x = load64(p);
    w = _mm_crc32_u64(w, x);
    if constexpr (kCopy) {
      store64(q, x);
      q += 8;
    }
  }
  c = static_cast<uint32_t>(w);
  while (size-- > 0) {
    if constexpr (kCopy) *q++ = *p;
    c = _mm_crc32_u8(c, *p++);
  }
  return ~c;
}

uint32_t crc32c_sse42(const void* data, size_t size, uint32_t crc) noexcept {
  return crc32c_walk<false>(nullptr, data, size, crc);
}

uint32_t crc32c_copy_sse42(void* dst, const void* data, size_t size, uint32_t crc) noexcept {
  return crc32c_walk<true>(static_cast<uint8_t*>(dst), data, size, crc);
}

bool have_sse42() noexcept {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2") != 0;
  }();
  return yes;
}

#endif  // DD_CRC32C_X86

}  // namespace

bool crc32c_supported(crc32c_impl impl) noexcept {
  switch (impl) {
    case crc32c_impl::table: return true;
    case crc32c_impl::sse42:
#if DD_CRC32C_X86
      return have_sse42();
#else
      return false;
#endif
  }
  return false;
}

crc32c_impl crc32c_active() noexcept {
  return crc32c_supported(crc32c_impl::sse42) ? crc32c_impl::sse42 : crc32c_impl::table;
}

const char* to_string(crc32c_impl impl) noexcept {
  switch (impl) {
    case crc32c_impl::table: return "table";
    case crc32c_impl::sse42: return "sse42";
  }
  return "unknown";
}

uint32_t crc32c_with(crc32c_impl impl, const void* data, size_t size, uint32_t crc) noexcept {
#if DD_CRC32C_X86
  if (impl == crc32c_impl::sse42 && have_sse42()) return crc32c_sse42(data, size, crc);
#else
  (void)impl;
#endif
  return crc32c_table(data, size, crc);
}

uint32_t crc32c_copy_with(crc32c_impl impl, void* dst, const void* src, size_t size,
                          uint32_t crc) noexcept {
#if DD_CRC32C_X86
  if (impl == crc32c_impl::sse42 && have_sse42()) return crc32c_copy_sse42(dst, src, size, crc);
#else
  (void)impl;
#endif
  const uint32_t out = crc32c_table(src, size, crc);
  if (size != 0) std::memcpy(dst, src, size);
  return out;
}

uint32_t crc32c_copy(void* dst, const void* src, size_t size, uint32_t crc) noexcept {
  return crc32c_copy_with(crc32c_active(), dst, src, size, crc);
}

namespace {

// Polynomials mod P in the reflected bit order of the CRC register: bit 31 is x^0, bit 0 is
// x^31 (zlib's crc32_combine does the same for CRC-32).

/// a · b mod P.
uint32_t mul_mod_p(uint32_t a, uint32_t b) noexcept {
  uint32_t m = uint32_t{1} << 31, p = 0;
  for (;;) {
    if ((a & m) != 0) {
      p ^= b;
      if ((a & (m - 1)) == 0) break;
    }
    m >>= 1;
    b = (b & 1u) != 0 ? (b >> 1) ^ castagnoli_reflected : b >> 1;
  }
  return p;
}

/// x^(2^k) mod P for k = 0..66 (8 · len_b has its bits below 2^67).
std::array<uint32_t, 67> make_x2n() {
  std::array<uint32_t, 67> t{};
  uint32_t p = uint32_t{1} << 30;  // x^1
  for (auto& v : t) {
    v = p;
    p = mul_mod_p(p, p);
  }
  return t;
}

const std::array<uint32_t, 67>& x2n() {
  static const std::array<uint32_t, 67> t = make_x2n();
  return t;
}

}  // namespace

uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) noexcept {
  // crc(a ‖ b) = crc(a) · x^(8·len_b) mod P, xor crc(b) (the pre- and post-inversions of a and
  // of b cancel: the register is affine in its start value). x^(8·len_b) is the product of
  // x^(2^k) over the bits k of 8·len_b, from a table: one 32-step product per set bit of len_b
  // (a 4 MiB length has one), where squaring 32×32 bit matrices took thousands.
  if (len_b == 0) return crc_a;
  const auto& t = x2n();
  uint32_t shift = uint32_t{1} << 31;  // x^0
  for (unsigned k = 3; len_b != 0; len_b >>= 1, ++k)
    if ((len_b & 1u) != 0) shift = mul_mod_p(t[k], shift);
  return mul_mod_p(shift, crc_a) ^ crc_b;
}

uint32_t crc32c(const void* data, size_t size, uint32_t crc) noexcept {
#if DD_CRC32C_X86
  if (have_sse42()) return crc32c_sse42(data, size, crc);
#endif
  return crc32c_table(data, size, crc);
}

}  // namespace dd::util
