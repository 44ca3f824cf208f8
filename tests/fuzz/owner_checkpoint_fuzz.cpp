// tests/fuzz/owner_checkpoint_fuzz.cpp — libFuzzer target for the fragment owner's checkpoint
// reader (dd::decode_checkpoint, messages/codec.hpp).
//
// Input layout: byte 0 picks a mode, the rest is the payload.
//   even mode: the payload is a whole checkpoint file (header + body) as read from disk.
//   odd mode:  the payload is a body only; the harness writes a correct 24-byte header in front
//              (magic, format version, CRC32 and length of the body), so mutations reach the
//              Cap'n Proto body parser instead of dying at the CRC check.
// Properties: never an exception or a crash; a decoded checkpoint has value, momentum and every
// anchor of one length; encode_checkpoint(decoded) decodes again and re-encodes to the same bytes.
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <vector>

#include "messages/codec.hpp"
#include "tests/fuzz/fuzz_check.hpp"

namespace {

std::vector<uint8_t> with_header(const uint8_t* body, size_t n) {
  std::vector<uint8_t> out(24 + n);
  std::memcpy(out.data(), "DDOWNCK1", 8);
  const uint32_t version = dd::checkpoint_format_version;
  const uint32_t crc =
      static_cast<uint32_t>(::crc32(::crc32(0L, Z_NULL, 0), body, static_cast<uInt>(n)));
  const uint64_t len = n;
  for (int i = 0; i < 4; ++i) out[8 + i] = static_cast<uint8_t>(version >> (8 * i));
  for (int i = 0; i < 4; ++i) out[12 + i] = static_cast<uint8_t>(crc >> (8 * i));
  for (int i = 0; i < 8; ++i) out[16 + i] = static_cast<uint8_t>(len >> (8 * i));
  if (n > 0) std::memcpy(out.data() + 24, body, n);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  std::vector<uint8_t> file =
      (data[0] & 1) ? with_header(data + 1, size - 1) : std::vector<uint8_t>(data + 1, data + size);
  try {
    auto c = dd::decode_checkpoint(file.data(), file.size());
    if (!c.ok()) return 0;
    FUZZ_CHECK(c->momentum.size() == c->value.size());
    for (const auto& a : c->anchors) FUZZ_CHECK(a.value.size() == c->value.size());
    const std::vector<uint8_t> first = dd::encode_checkpoint(*c);
    auto again = dd::decode_checkpoint(first.data(), first.size());
    FUZZ_CHECK(again.ok());
    FUZZ_CHECK(dd::encode_checkpoint(*again) == first);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "owner_checkpoint_fuzz: exception escaped: %s\n", e.what());
    std::abort();
  }
  return 0;
}
