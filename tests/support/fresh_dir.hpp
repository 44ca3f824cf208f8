// tests/support/fresh_dir.hpp — a test's scratch directory, empty at the start of the test, and
// the files a test lays out in it.
#pragma once

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <utility>

#include <gtest/gtest.h>

namespace dd::test {

/// NAME under gtest's TempDir() (TEST_TMPDIR: the build tree's test_tmp, see tests/CMakeLists.txt),
/// removed with whatever an earlier run left there and created empty.
inline std::filesystem::path fresh_dir(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

/// Writes each (relative path, text) under `dir`, creating the folders on the way.
inline void write_files(const std::filesystem::path& dir,
                        std::initializer_list<std::pair<const char*, const char*>> files) {
  for (const auto& [rel, text] : files) {
    const std::filesystem::path p = dir / rel;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
}

}  // namespace dd::test
