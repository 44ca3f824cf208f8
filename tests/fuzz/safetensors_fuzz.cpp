// tests/fuzz/safetensors_fuzz.cpp — libFuzzer target for the safetensors reader
// (dd::parse_safetensors, the validation behind read_safetensors and load_checkpoint).
//
// Input layout: byte 0 picks a mode, the rest is the payload.
//   even mode: the payload is a whole file (u64 header length, JSON header, data).
//   odd mode:  the payload is [u16 little-endian JSON length][JSON][data]; the harness writes
//              the u64 header length, so mutations of the JSON keep a consistent framing.
// Bit 1 of the mode sets st_read_options::require_checksum.
// Properties: bad bytes give std::runtime_error only (anything else escaping aborts); a file that
// loads has tensors in increasing, gap-free offset order whose value counts match their shapes.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>

#include "runtime/checkpoint.hpp"
#include "tests/fuzz/fuzz_check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  std::string file;
  if (mode & 1) {
    if (size < 3) return 0;
    const size_t json_len = std::min<size_t>(data[1] | (size_t{data[2]} << 8), size - 3);
    for (int i = 0; i < 8; ++i)
      file.push_back(static_cast<char>(static_cast<uint64_t>(json_len) >> (8 * i)));
    file.append(reinterpret_cast<const char*>(data + 3), size - 3);
  } else {
    file.assign(reinterpret_cast<const char*>(data + 1), size - 1);
  }
  dd::st_read_options options;
  options.require_checksum = (mode & 2) != 0;
  try {
    const dd::st_file f = dd::parse_safetensors(file, "fuzz.safetensors", options);
    if (options.require_checksum) FUZZ_CHECK(f.metadata.count(dd::st_checksum_key) == 1);
    size_t total = 0;
    for (const auto& t : f.tensors) {
      size_t numel = 1;
      for (auto d : t.shape) {
        FUZZ_CHECK(d >= 0);
        numel *= static_cast<size_t>(d);
      }
      FUZZ_CHECK(numel == t.data.size());
      total += t.data.size() * sizeof(float);
    }
    FUZZ_CHECK(total <= file.size());
  } catch (const std::runtime_error&) {
    // The documented refusal.
  } catch (const std::exception& e) {
    std::fprintf(stderr, "safetensors_fuzz: unexpected exception: %s\n", e.what());
    std::abort();
  }
  return 0;
}
