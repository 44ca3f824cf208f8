// tests/config/config_test_util.hpp — shared helpers of the config DSL tests.
#pragma once

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/config/loader.hpp"

namespace dd::config::test {

/// Options under which repository files resolve wherever ctest runs: relative data paths are
/// also looked up from the repository root (where datasets/ is the data folder).
inline load_options repo_options() {
  load_options o;
  o.search_dirs.push_back(DD_SOURCE_DIR);
  return o;
}

/// A path inside the repository.
inline std::string repo_path(const std::string& rel) {
  return std::string(DD_SOURCE_DIR) + "/" + rel;
}

/// `r` was refused with exactly the errors `want`, in order, each as error::to_string() writes it.
inline void expect_errors(const load_result& r, const std::vector<std::string>& want) {
  std::vector<std::string> got;
  for (const auto& e : r.errors) got.push_back(e.to_string());
  EXPECT_EQ(got, want) << r.error_text();
}

/// The data line every inline test script uses.
inline const char* const k_data = "data = { file = \"datasets/tinyshakespeare/input.txt\" }";

/// One experiment of the data line and `fields` (", "-separated keys, "" for none), loaded as file
/// `file` under repo_options().
inline load_result load_one(const std::string& fields, const std::string& file = "m.lua") {
  return load_string(
      std::string("experiment { ") + k_data + (fields.empty() ? "" : ", ") + fields + " }\n", file,
      repo_options());
}

}  // namespace dd::config::test
