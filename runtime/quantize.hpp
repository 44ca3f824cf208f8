// runtime/quantize.hpp — payload encodings of fragment pushes/broadcasts: fp32, bf16, and
// blockwise-absmax int8/int4 (ALGORITHM.md "Defaults", wire format of pushes; the paper reports
// int4 near-lossless, 2-bit and 1-bit not). Host memory only: learners encode after
// downloading a delta, owners decode before uploading. Pure functions; any thread.
//
// Byte layout (little-endian), sizes from messages/encoding.hpp `encoded_size`:
//   fp32: n × float32.
//   bf16: n × uint16 = upper half of the float32 after round-to-nearest-even.
//   int8: per block of 64 elements (last block shorter): float32 scale s = absmax/127, then one
//         int8 code q = round(x/s) in [-127, 127] per element; x̂ = q·s.
//   int4: per block: float32 scale s = absmax/7, then ceil(len/2) bytes, element 2j in the low
//         nibble and 2j+1 in the high nibble, each nibble = q + 8 with q = round(x/s) in [-7, 7];
//         x̂ = q·s. (Nibble 0 is never produced; decoding maps it to -8·s.)
// Max error per element (x finite, absmax = max |x| over the element's block):
//   fp32: 0.  bf16: |x̂ - x| <= 2^-8 |x| for normal |x| (half an ulp of 8 significant bits).
//   int8: |x̂ - x| <= absmax/254 (half a step) plus float rounding (~1e-7 · absmax).
//   int4: |x̂ - x| <= absmax/14  (half a step) plus float rounding.
// Non-finite input: fp32/bf16 keep NaN/Inf; int8/int4 produce a non-finite scale, so decoding
// yields non-finite values — the owner's finite check rejects them (learners never push them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "messages/encoding.hpp"
#include "messages/error.hpp"

namespace dd {

/// bf16 bits of x, round-to-nearest-even; NaN stays a (quiet) NaN.
uint16_t float_to_bf16(float x) noexcept;
/// float32 value of bf16 bits.
float bf16_to_float(uint16_t b) noexcept;

/// Encodes n floats; returns exactly encoded_size(e, n) bytes. (n) → (bytes).
std::vector<uint8_t> encode_payload(payload_encoding e, const float* x, size_t n);
/// Same, appending to/overwriting `out` (resized to encoded_size(e, n)) to reuse its capacity.
void encode_payload(payload_encoding e, const float* x, size_t n, std::vector<uint8_t>& out);

/// Decodes `size` bytes holding n elements into out (n). errc::size_mismatch when size !=
/// encoded_size(e, n), naming both; errc::invalid_argument for an unknown encoding value.
status decode_payload(payload_encoding e, const uint8_t* bytes, size_t size, float* out, size_t n);
/// Same, returning a new vector of n floats.
result<std::vector<float>> decode_payload(payload_encoding e, const uint8_t* bytes, size_t size,
                                          size_t n);

/// Upper bound on |x̂ - x| for one element whose block has max |x| = absmax and whose own value
/// is x (bf16 uses |x|), per the table in the file comment, including float rounding slack.
/// Tests use it; callers may use it to size tolerances.
double max_abs_error(payload_encoding e, double x, double absmax) noexcept;

}  // namespace dd
