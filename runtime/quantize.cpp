// runtime/quantize.cpp — fp32/bf16/int8/int4 payload encodings (layout in quantize.hpp).
#include "runtime/quantize.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

namespace dd {

namespace {

void put_f32(uint8_t* p, float v) { std::memcpy(p, &v, 4); }  // x86/ARM: little-endian
float get_f32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}

float block_absmax(const float* x, size_t n) {
  float m = 0.0f;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  // A NaN anywhere makes the scale NaN so decoding exposes it (std::max drops NaNs).
  for (size_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) return x[i];
  }
  return m;
}

// Bytes of the codes of a block of len values: one per value (int8), two values per byte (int4).
template <int QMax>
size_t code_bytes(size_t len) {
  return QMax == 127 ? len : (len + 1) / 2;
}

// Symmetric blockwise quantization with qmax levels each side (127 for int8, 7 for int4): each
// block is its scale (f32) then its codes, store(codes, i, q) writing value i's code q.
template <int QMax, class Store>
void quantize_blocks(const float* x, size_t n, uint8_t* out, Store store) {
  size_t pos = 0;
  for (size_t start = 0; start < n; start += quant_block) {
    const size_t len = std::min(quant_block, n - start);
    const float absmax = block_absmax(x + start, len);
    const float scale = absmax / static_cast<float>(QMax);
    put_f32(out + pos, scale);
    pos += 4;
    const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
    for (size_t i = 0; i < len; ++i) {
      float q = std::nearbyint(x[start + i] * inv);
      q = std::min(std::max(q, -static_cast<float>(QMax)), static_cast<float>(QMax));
      int qi = std::isfinite(q) ? static_cast<int>(q) : 0;
      store(out + pos, i, qi);
    }
    pos += code_bytes<QMax>(len);
  }
}

// The inverse: value i of a block is load(codes, i) · the block's scale.
template <int QMax, class Load>
void dequantize_blocks(const uint8_t* bytes, size_t n, float* out, Load load) {
  size_t pos = 0;
  for (size_t start = 0; start < n; start += quant_block) {
    const size_t len = std::min(quant_block, n - start);
    const float scale = get_f32(bytes + pos);
    pos += 4;
    for (size_t i = 0; i < len; ++i)
      out[start + i] = static_cast<float>(load(bytes + pos, i)) * scale;
    pos += code_bytes<QMax>(len);
  }
}

}  // namespace

uint16_t float_to_bf16(float x) noexcept {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  if (std::isnan(x)) return static_cast<uint16_t>((bits >> 16) | 0x0040u);  // keep quiet NaN
  // Round to nearest, ties to even: add 0x7FFF plus the lowest kept bit.
  const uint32_t lsb = (bits >> 16) & 1u;
  bits += 0x7FFFu + lsb;
  return static_cast<uint16_t>(bits >> 16);
}

float bf16_to_float(uint16_t b) noexcept {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float x;
  std::memcpy(&x, &bits, 4);
  return x;
}

void encode_payload(payload_encoding e, const float* x, size_t n, std::vector<uint8_t>& out) {
  const auto size = encoded_size(e, n);
  out.assign(size ? *size : 0, 0);
  uint8_t* o = out.data();
  switch (e) {
    case payload_encoding::fp32:
      if (n) std::memcpy(o, x, n * 4);
      return;
    case payload_encoding::bf16:
      for (size_t i = 0; i < n; ++i) {
        const uint16_t b = float_to_bf16(x[i]);
        o[2 * i] = static_cast<uint8_t>(b & 0xFF);
        o[2 * i + 1] = static_cast<uint8_t>(b >> 8);
      }
      return;
    case payload_encoding::int8:
      quantize_blocks<127>(x, n, o, [](uint8_t* codes, size_t i, int q) {
        codes[i] = static_cast<uint8_t>(static_cast<int8_t>(q));
      });
      return;
    case payload_encoding::int4:
      quantize_blocks<7>(x, n, o, [](uint8_t* codes, size_t i, int q) {
        const uint8_t nib = static_cast<uint8_t>(q + 8);
        if (i % 2 == 0) {
          codes[i / 2] = static_cast<uint8_t>((codes[i / 2] & 0xF0) | nib);
        } else {
          codes[i / 2] = static_cast<uint8_t>((codes[i / 2] & 0x0F) | (nib << 4));
        }
      });
      return;
  }
}

std::vector<uint8_t> encode_payload(payload_encoding e, const float* x, size_t n) {
  std::vector<uint8_t> out;
  encode_payload(e, x, n, out);
  return out;
}

status decode_payload(payload_encoding e, const uint8_t* bytes, size_t size, float* out, size_t n) {
  if (static_cast<uint8_t>(e) > static_cast<uint8_t>(payload_encoding::int4)) {
    return {errc::invalid_argument,
            "payload encoding: unknown value " + std::to_string(static_cast<int>(e))};
  }
  const auto expect = encoded_size(e, n);
  if (!expect || *expect != size) {
    return {errc::size_mismatch,
            "payload of " + std::to_string(size) + " bytes does not hold " + std::to_string(n) +
                " " + std::string(to_string(e)) + " elements (" +
                (expect ? std::to_string(*expect) : std::string("overflow")) + " bytes)"};
  }
  switch (e) {
    case payload_encoding::fp32:
      if (n) std::memcpy(out, bytes, n * 4);
      break;
    case payload_encoding::bf16:
      for (size_t i = 0; i < n; ++i) {
        out[i] = bf16_to_float(static_cast<uint16_t>(bytes[2 * i] | (bytes[2 * i + 1] << 8)));
      }
      break;
    case payload_encoding::int8:
      dequantize_blocks<127>(bytes, n, out, [](const uint8_t* codes, size_t i) {
        return static_cast<int>(static_cast<int8_t>(codes[i]));
      });
      break;
    case payload_encoding::int4:
      dequantize_blocks<7>(bytes, n, out, [](const uint8_t* codes, size_t i) {
        const uint8_t byte = codes[i / 2];
        return ((i % 2 == 0) ? (byte & 0x0F) : (byte >> 4)) - 8;
      });
      break;
  }
  return {};
}

result<std::vector<float>> decode_payload(payload_encoding e, const uint8_t* bytes, size_t size,
                                          size_t n) {
  std::vector<float> out;
  const auto expect = encoded_size(e, n);
  if (expect && *expect == size) out.resize(n);  // never allocate on a size the bytes refute
  auto st = decode_payload(e, bytes, size, out.data(), n);
  if (!st) return st.error();
  return out;
}

double max_abs_error(payload_encoding e, double x, double absmax) noexcept {
  // Float rounding slack: computing q = x·(1/s) and x̂ = q·s in float32 costs a few ulps of absmax.
  const double slack = 4.0 * 1.1920929e-7 * absmax;
  switch (e) {
    case payload_encoding::fp32: return 0.0;
    case payload_encoding::bf16: return std::ldexp(std::fabs(x), -8);
    case payload_encoding::int8: return absmax / 254.0 + slack;
    case payload_encoding::int4: return absmax / 14.0 + slack;
  }
  return 0.0;
}

}  // namespace dd
