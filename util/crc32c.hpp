// util/crc32c.hpp — CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of every
// push and broadcast chunk's payload (messages/wire.capnp) and of a safetensors file's data
// section (runtime/checkpoint.hpp). Software slicing-by-8; pure, any thread.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dd::util {

/// CRC-32C of `size` bytes at `data`, continuing from `crc` (the CRC of the bytes before them;
/// 0 to start): crc32c(b, crc32c(a)) == crc32c(a ‖ b). crc32c("123456789") == 0xE3069283.
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0) noexcept;

}  // namespace dd::util
