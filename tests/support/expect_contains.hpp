// tests/support/expect_contains.hpp — expectations on what a text (a process's output, a scraped
// page) says: each needle is checked on its own and a miss shows the needle and the whole text.
#pragma once

#include <initializer_list>
#include <string>

#include <gtest/gtest.h>

namespace dd::test {

/// Expects `text` to contain every one of `needles`.
inline void expect_contains_all(const std::string& text,
                                std::initializer_list<std::string> needles) {
  for (const auto& n : needles)
    EXPECT_NE(text.find(n), std::string::npos) << "missing: " << n << "\nin:\n" << text;
}

}  // namespace dd::test
