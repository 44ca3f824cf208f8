// tests/util/crc32c_test.cpp — CRC-32C against its published check value and known vectors,
// split-invariance (crc32c(b, crc32c(a)) == crc32c(a ‖ b)) across every slicing-by-8 boundary.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "util/crc32c.hpp"

namespace {

using dd::util::crc32c;

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

}  // namespace
