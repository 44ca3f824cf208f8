// tests/util/crc32c_test.cpp — CRC-32C against its published check value and known vectors,
// split-invariance (crc32c(b, crc32c(a)) == crc32c(a ‖ b)) across every slicing-by-8 boundary,
// and the SSE4.2 implementation against the table one on random bytes of many lengths,
// alignments and start values.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "util/crc32c.hpp"

namespace {

using dd::util::crc32c;
using dd::util::crc32c_impl;
using dd::util::crc32c_with;

TEST(crc32c, check_value_of_123456789_is_e3069283) {
  const std::string s = "123456789";
  EXPECT_EQ(crc32c(s.data(), s.size()), 0xE3069283u);
}

TEST(crc32c, known_vectors) {
  EXPECT_EQ(crc32c(nullptr, 0), 0u);
  // RFC 3720 (iSCSI) B.4: 32 bytes of zeros, of 0xFF, and an ascending run.
  std::vector<unsigned char> zeros(32, 0), ones(32, 0xFF), inc(32);
  for (int i = 0; i < 32; ++i) inc[i] = static_cast<unsigned char>(i);
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  EXPECT_EQ(crc32c(inc.data(), inc.size()), 0x46DD794Eu);
}

TEST(crc32c, continuing_from_a_prefix_equals_the_whole) {
  std::vector<unsigned char> data(100);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 37 + 11);
  const uint32_t whole = crc32c(data.data(), data.size());
  for (size_t cut = 0; cut <= data.size(); ++cut) {
    const uint32_t a = crc32c(data.data(), cut);
    EXPECT_EQ(crc32c(data.data() + cut, data.size() - cut, a), whole) << "cut at " << cut;
  }
}

TEST(crc32c, one_flipped_bit_changes_it) {
  std::vector<unsigned char> data(4096, 0x5A);
  const uint32_t before = crc32c(data.data(), data.size());
  data[2049] ^= 0x10;
  EXPECT_NE(crc32c(data.data(), data.size()), before);
}

TEST(crc32c, every_implementation_gives_the_check_value) {
  const std::string s = "123456789";
  for (auto impl : {crc32c_impl::table, crc32c_impl::sse42}) {
    EXPECT_EQ(crc32c_with(impl, s.data(), s.size()), 0xE3069283u) << dd::util::to_string(impl);
  }
}

TEST(crc32c, the_active_implementation_is_sse42_where_the_cpu_has_it) {
  EXPECT_TRUE(dd::util::crc32c_supported(crc32c_impl::table));
  EXPECT_EQ(dd::util::crc32c_active(), dd::util::crc32c_supported(crc32c_impl::sse42)
                                           ? crc32c_impl::sse42
                                           : crc32c_impl::table);
}

// Lengths around every boundary of the SSE4.2 path (8-byte words, 3 x 256-byte and
// 3 x 8192-byte interleaved blocks) and random ones, at every alignment mod 16, from 0 and from
// a running CRC: the instruction path must equal the table path bit for bit.
TEST(crc32c, sse42_agrees_with_the_table_on_random_inputs) {
  if (!dd::util::crc32c_supported(crc32c_impl::sse42)) GTEST_SKIP() << "no SSE4.2 on this CPU";
  std::mt19937_64 rng(20261202);
  std::vector<unsigned char> data(5 * 3 * 8192 + 64);
  for (auto& b : data) b = static_cast<unsigned char>(rng());
  std::vector<size_t> lengths;
  for (size_t edge : {size_t{0}, size_t{8}, size_t{3 * 256}, size_t{2 * 3 * 256}, size_t{3 * 8192},
                      size_t{2 * 3 * 8192 + 3 * 256}}) {
    for (size_t d = 0; d < 10; ++d) {
      lengths.push_back(edge + d);
      if (edge >= d) lengths.push_back(edge - d);
    }
  }
  std::uniform_int_distribution<size_t> any_length(0, data.size() - 16);
  for (int i = 0; i < 100; ++i) lengths.push_back(any_length(rng));
  int compared = 0;
  for (size_t offset = 0; offset < 16; ++offset) {
    for (size_t len : lengths) {
      if (offset + len > data.size()) continue;
      for (uint32_t start : {0u, 0xFFFFFFFFu, static_cast<uint32_t>(rng())}) {
        const unsigned char* p = data.data() + offset;
        ASSERT_EQ(crc32c_with(crc32c_impl::sse42, p, len, start),
                  crc32c_with(crc32c_impl::table, p, len, start))
            << "offset " << offset << " length " << len << " start " << start;
        ++compared;
      }
    }
  }
  EXPECT_GT(compared, 16 * 100);
}

// crc32c_copy gives crc32c's value and leaves an exact copy, for every implementation, at
// lengths around each block edge and at every source and destination alignment; the bytes
// around the destination are untouched.
TEST(crc32c, copy_checksums_and_copies_at_every_length_and_alignment) {
  std::mt19937_64 rng(20261207);
  std::vector<unsigned char> data(2 * 3 * 8192 + 3 * 256 + 64);
  for (auto& b : data) b = static_cast<unsigned char>(rng());
  std::vector<size_t> lengths;
  for (size_t edge :
       {size_t{0}, size_t{8}, size_t{3 * 256}, size_t{3 * 8192}, size_t{2 * 3 * 8192 + 3 * 256}}) {
    for (size_t d = 0; d < 10; ++d) {
      lengths.push_back(edge + d);
      if (edge >= d) lengths.push_back(edge - d);
    }
  }
  std::vector<unsigned char> out(data.size() + 32);
  int compared = 0;
  for (crc32c_impl impl : {crc32c_impl::table, crc32c_impl::sse42}) {
    if (!dd::util::crc32c_supported(impl)) continue;
    for (size_t from : {size_t{0}, size_t{3}, size_t{8}}) {
      for (size_t to : {size_t{0}, size_t{5}, size_t{16}}) {
        for (size_t len : lengths) {
          if (from + len > data.size() - 16) continue;
          std::fill(out.begin(), out.end(), static_cast<unsigned char>(0xA5));
          const unsigned char* p = data.data() + from;
          const uint32_t start = static_cast<uint32_t>(rng());
          ASSERT_EQ(dd::util::crc32c_copy_with(impl, out.data() + to, p, len, start),
                    crc32c_with(crc32c_impl::table, p, len, start))
              << dd::util::to_string(impl) << " from " << from << " to " << to << " length " << len;
          ASSERT_TRUE(std::equal(p, p + len, out.begin() + static_cast<std::ptrdiff_t>(to)))
              << dd::util::to_string(impl) << " length " << len;
          for (size_t i = 0; i < to; ++i) ASSERT_EQ(out[i], 0xA5) << "before, byte " << i;
          for (size_t i = to + len; i < out.size(); ++i)
            ASSERT_EQ(out[i], 0xA5) << "after, byte " << i;
          ++compared;
        }
      }
    }
  }
  EXPECT_GT(compared, 9 * 80);
  // The default entry point is the active implementation's.
  std::vector<unsigned char> copy(100);
  EXPECT_EQ(dd::util::crc32c_copy(copy.data(), data.data(), copy.size()),
            crc32c(data.data(), copy.size()));
  EXPECT_TRUE(std::equal(copy.begin(), copy.end(), data.begin()));
}

// The path crc32c() takes is split-invariant over the long interleaved blocks too.
TEST(crc32c, continuing_across_long_blocks_equals_the_whole) {
  std::vector<unsigned char> data(4 * 3 * 8192 + 13);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 131 + 7);
  const uint32_t whole = crc32c(data.data(), data.size());
  EXPECT_EQ(whole, crc32c_with(crc32c_impl::table, data.data(), data.size()));
  for (size_t cut :
       {size_t{1}, size_t{8191}, size_t{3 * 8192}, size_t{3 * 8192 + 5}, data.size() - 1}) {
    const uint32_t a = crc32c(data.data(), cut);
    EXPECT_EQ(crc32c(data.data() + cut, data.size() - cut, a), whole) << "cut at " << cut;
  }
}

// crc32c_combine(crc(a), crc(b), |b|) == crc(a ‖ b) without reading the bytes: the check string
// cut at every point, the empty part on either side, and cuts of a 4 MiB + 13 buffer (a chunk's
// size: the length's every bit up to 2^22 is used).
TEST(crc32c, combine_of_two_parts_equals_the_crc_of_the_whole) {
  const std::string s = "123456789";
  for (size_t cut = 0; cut <= s.size(); ++cut) {
    const uint32_t a = crc32c(s.data(), cut), b = crc32c(s.data() + cut, s.size() - cut);
    EXPECT_EQ(dd::util::crc32c_combine(a, b, s.size() - cut), 0xE3069283u) << "cut at " << cut;
  }
  EXPECT_EQ(dd::util::crc32c_combine(0x12345678u, 0u, 0), 0x12345678u);  // b empty: crc(a)
  std::vector<unsigned char> data((size_t{4} << 20) + 13);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (auto& c : data) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    c = static_cast<unsigned char>(x >> 56);
  }
  const uint32_t whole = crc32c(data.data(), data.size());
  for (size_t cut :
       {size_t{0}, size_t{1}, size_t{4096}, size_t{1} << 20, data.size() - 1, data.size()}) {
    const uint32_t a = crc32c(data.data(), cut);
    const uint32_t b = crc32c(data.data() + cut, data.size() - cut);
    EXPECT_EQ(dd::util::crc32c_combine(a, b, data.size() - cut), whole) << "cut at " << cut;
  }
  // Three parts, as a message's checksum is rebuilt from its prefix, payload and suffix.
  const size_t p = 1000, q = data.size() - 1000;
  const uint32_t pre = crc32c(data.data(), p), mid = crc32c(data.data() + p, q - p),
                 post = crc32c(data.data() + q, data.size() - q);
  EXPECT_EQ(
      dd::util::crc32c_combine(dd::util::crc32c_combine(pre, mid, q - p), post, data.size() - q),
      whole);
}

// The combine's shift by x^(8·len) mod P composes: shifting by n1 bytes, then by n2, is shifting
// by n1 + n2, for lengths far past any buffer (every entry of the x^(2^k) table is used, up to
// the top bit of a 64-bit length).
TEST(crc32c, combine_shifts_compose_for_lengths_up_to_64_bits) {
  const uint32_t c = 0xE3069283u;
  const uint64_t lens[] = {1,
                           7,
                           4096,
                           (uint64_t{4} << 20) + 13,
                           (uint64_t{1} << 40) + 12345,
                           (uint64_t{1} << 61) + 3,
                           uint64_t{0xFFFFFFFFFFFFFFFF} / 3};
  for (uint64_t n1 : lens)
    for (uint64_t n2 : lens) {
      if (n1 > UINT64_MAX - n2) continue;
      EXPECT_EQ(dd::util::crc32c_combine(dd::util::crc32c_combine(c, 0, n1), 0, n2),
                dd::util::crc32c_combine(c, 0, n1 + n2))
          << n1 << " + " << n2;
    }
  // The last bit of a 64-bit length, and a length of all ones (2^64 - 1 = (2^63 - 1) + 2^63).
  const uint64_t top = uint64_t{1} << 63;
  EXPECT_EQ(dd::util::crc32c_combine(dd::util::crc32c_combine(c, 0, top - 1), 0, top),
            dd::util::crc32c_combine(c, 0, UINT64_MAX));
  EXPECT_NE(dd::util::crc32c_combine(c, 0, top), c);
}

}  // namespace
