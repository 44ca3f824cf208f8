// tests/util/parse_assert_test.cpp — the strict number parser (whole string, range, finite) and
// DD_ASSERT (aborts with file:line in every build, Release included).
#include <cstdint>
#include <limits>
#include <string>

#include <gtest/gtest.h>

#include "util/assert.hpp"
#include "util/parse.hpp"

namespace dd::util {
namespace {

TEST(parse_number, takes_whole_integers_that_fit) {
  int i = 7;
  EXPECT_TRUE(parse_number("42", i));
  EXPECT_EQ(i, 42);
  EXPECT_TRUE(parse_number("-3", i));
  EXPECT_EQ(i, -3);
  for (const char* bad : {"", " 1", "1 ", "12x", "x", "+1", "0x10", "1.5", "99999999999"}) {
    i = 7;
    EXPECT_FALSE(parse_number(bad, i)) << bad;
    EXPECT_EQ(i, 7) << "unchanged on failure: " << bad;
  }
  unsigned long long u = 0;
  EXPECT_TRUE(parse_number("18446744073709551615", u));
  EXPECT_EQ(u, std::numeric_limits<unsigned long long>::max());
  EXPECT_FALSE(parse_number("-1", u));
  EXPECT_FALSE(parse_number("18446744073709551616", u));
  EXPECT_TRUE(parse_number_in("5", i, 1, 10));
  EXPECT_EQ(i, 5);
  EXPECT_FALSE(parse_number_in("11", i, 1, 10));
}

TEST(parse_number, takes_finite_decimal_numbers_only) {
  double d = 0;
  EXPECT_TRUE(parse_number("1.5", d));
  EXPECT_EQ(d, 1.5);
  EXPECT_TRUE(parse_number("-2e-3", d));
  EXPECT_EQ(d, -2e-3);
  for (const char* bad : {"", "nan", "inf", "-inf", "1e309", "0x1p3", " 1", "1,5", "+1", "1.5s"}) {
    d = 9;
    EXPECT_FALSE(parse_number(bad, d)) << bad;
    EXPECT_EQ(d, 9) << bad;
  }
}

TEST(DD_ASSERT, passes_quietly_and_aborts_with_file_line_when_broken) {
  int evaluated = 0;
  DD_ASSERT(++evaluated == 1, "evaluated once");
  EXPECT_EQ(evaluated, 1);
  EXPECT_DEATH(DD_ASSERT(evaluated == 2, "the count is off"),
               "parse_assert_test.cpp:[0-9]+: invariant failed: evaluated == 2: the count is off");
  EXPECT_DEATH(DD_ASSERT(evaluated < 0), "invariant failed: evaluated < 0");
}

}  // namespace
}  // namespace dd::util
