// messages/encoding.hpp — payload encodings of fragment pushes and broadcasts, and the exact
// byte size each encoding gives n elements. The codec uses the sizes to validate chunked
// payloads; runtime/quantize.hpp implements the encodings. Header-only; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace dd {

/// How a fragment payload's float32 elements are stored on the wire (ALGORITHM.md "Defaults",
/// wire format of pushes; the paper reports int4 near-lossless). Values match the Cap'n Proto
/// enum PayloadEncoding in messages/wire.capnp.
enum class payload_encoding : uint8_t {
  fp32 = 0,  ///< raw IEEE float32, little-endian, 4 bytes/element
  bf16 = 1,  ///< bfloat16 (upper 16 bits, round-to-nearest-even), 2 bytes/element
  int8 = 2,  ///< blockwise absmax int8: per block of 64 a float32 scale + 64 int8
  int4 = 3,  ///< blockwise absmax int4: per block of 64 a float32 scale + 32 bytes (2 per byte)
};

/// Elements per quantization block for int8/int4 (the last block may be shorter).
inline constexpr size_t quant_block = 64;

/// Short name: "fp32", "bf16", "int8", "int4".
constexpr std::string_view to_string(payload_encoding e) noexcept {
  switch (e) {
    case payload_encoding::fp32: return "fp32";
    case payload_encoding::bf16: return "bf16";
    case payload_encoding::int8: return "int8";
    case payload_encoding::int4: return "int4";
  }
  return "?";
}

/// Parses "fp32" | "bf16" | "int8" | "int4"; std::nullopt otherwise.
constexpr std::optional<payload_encoding> parse_payload_encoding(std::string_view s) noexcept {
  if (s == "fp32") return payload_encoding::fp32;
  if (s == "bf16") return payload_encoding::bf16;
  if (s == "int8") return payload_encoding::int8;
  if (s == "int4") return payload_encoding::int4;
  return std::nullopt;
}

/// Exact encoded size in bytes of n elements. Layout of int8/int4: blocks of quant_block
/// elements, each [float32 scale][codes]; int4 codes take ceil(len/2) bytes per block.
/// Returns std::nullopt when the size would overflow size_t or the encoding is unknown.
constexpr std::optional<size_t> encoded_size(payload_encoding e, size_t n) noexcept {
  constexpr size_t max = ~size_t{0};
  switch (e) {
    case payload_encoding::fp32:
      if (n > max / 4) return std::nullopt;
      return n * 4;
    case payload_encoding::bf16:
      if (n > max / 2) return std::nullopt;
      return n * 2;
    case payload_encoding::int8: {
      size_t blocks = n / quant_block + (n % quant_block != 0);
      if (blocks > (max - n) / 4) return std::nullopt;
      return blocks * 4 + n;
    }
    case payload_encoding::int4: {
      size_t full = n / quant_block;
      size_t tail = n % quant_block;
      size_t blocks = full + (tail != 0);
      if (blocks > max / (4 + quant_block / 2)) return std::nullopt;
      return full * (4 + quant_block / 2) + (tail != 0 ? 4 + (tail + 1) / 2 : 0);
    }
  }
  return std::nullopt;
}

}  // namespace dd
