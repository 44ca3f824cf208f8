// tests/util/hex_test.cpp — util/hex.hpp: round trip, and what from_hex refuses.
#include <gtest/gtest.h>

#include "util/hex.hpp"

namespace dd::util {
namespace {

TEST(hex, bytes_round_trip_as_two_lowercase_digits_each) {
  const std::vector<uint8_t> b = {0x00, 0x0f, 0xa5, 0xff, 0x10};
  EXPECT_EQ(to_hex(b), "000fa5ff10");
  EXPECT_EQ(from_hex("000fa5ff10"), b);
  EXPECT_EQ(to_hex({}), "");
  EXPECT_EQ(from_hex(""), std::vector<uint8_t>{});
}

TEST(hex, odd_lengths_and_other_characters_are_refused) {
  EXPECT_FALSE(from_hex("abc").has_value());
  EXPECT_FALSE(from_hex("0g").has_value());
  EXPECT_FALSE(from_hex("AB").has_value());  // lowercase only, as to_hex writes
  EXPECT_FALSE(from_hex(" 0").has_value());
}

}  // namespace
}  // namespace dd::util
