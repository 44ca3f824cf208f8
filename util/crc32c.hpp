// util/crc32c.hpp — CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of every
// push and broadcast chunk's payload (messages/wire.capnp) and of a safetensors file's data
// section (runtime/checkpoint.hpp). Two implementations give the same values: the SSE4.2 `crc32`
// instruction (three interleaved streams) on x86-64 CPUs that have it, chosen at run time, and
// software slicing-by-8 everywhere else. Pure, any thread.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dd::util {

/// CRC-32C of `size` bytes at `data`, continuing from `crc` (the CRC of the bytes before them;
/// 0 to start): crc32c(b, crc32c(a)) == crc32c(a ‖ b). crc32c("123456789") == 0xE3069283.
/// Uses crc32c_active()'s implementation.
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0) noexcept;

/// Copies `size` bytes from `src` to `dst` (which must not overlap) and returns their CRC-32C,
/// continuing from `crc` as crc32c() does, reading each source byte once: with SSE4.2 each word
/// is checksummed and stored from the same load (three streams interleaved, as crc32c()), so a
/// receiver that must both keep a chunk's payload and check it reads it from memory once instead
/// of twice. crc32c_copy(d, s, n, c) == crc32c(s, n, c) and d holds s's bytes afterwards.
uint32_t crc32c_copy(void* dst, const void* src, size_t size, uint32_t crc = 0) noexcept;

/// The CRC-32C of a ‖ b from crc_a = crc32c(a), crc_b = crc32c(b) and b's length, without
/// reading either: crc32c_combine(crc32c(a), crc32c(b), |b|) == crc32c(a ‖ b). Lets a reader
/// that checks a message's CRC keep the CRC of a part of it (a chunk's payload) from the same
/// pass. One product mod P per set bit of len_b, from a table of x^(2^k) (well under a
/// microsecond for a chunk's length).
uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) noexcept;

/// The implementations of crc32c(); every one gives the same values.
enum class crc32c_impl : uint8_t {
  table,  ///< software slicing-by-8 (eight 256-entry tables), any CPU
  sse42,  ///< x86-64 SSE4.2 `crc32` instruction, three streams interleaved
};

/// Whether `impl` runs on this CPU (table: always; sse42: x86-64 with SSE4.2, checked once with
/// the CPU's feature bits).
bool crc32c_supported(crc32c_impl impl) noexcept;

/// The implementation crc32c() uses here: sse42 where supported, table otherwise.
crc32c_impl crc32c_active() noexcept;

/// "table" or "sse42".
const char* to_string(crc32c_impl impl) noexcept;

/// crc32c() computed by `impl` (tests and benchmarks compare them). An implementation that
/// crc32c_supported() says does not run here is replaced by the table.
uint32_t crc32c_with(crc32c_impl impl, const void* data, size_t size, uint32_t crc = 0) noexcept;
/// crc32c_copy() done by `impl` (table: the checksum, then memcpy); replaced as crc32c_with().
uint32_t crc32c_copy_with(crc32c_impl impl, void* dst, const void* src, size_t size,
                          uint32_t crc = 0) noexcept;

}  // namespace dd::util
