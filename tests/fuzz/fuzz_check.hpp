// tests/fuzz/fuzz_check.hpp — how a fuzz target reports a broken property: it names the target
// (DD_FUZZ_TARGET, set by dd_add_fuzzer) and the property, then aborts, which libFuzzer reports
// as a crash with the input that caused it.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#ifndef DD_FUZZ_TARGET
#error \
    "DD_FUZZ_TARGET (the fuzz target's name) is set by dd_add_fuzzer in tests/fuzz/CMakeLists.txt"
#endif

namespace dd::fuzz {

[[noreturn]] inline void violated(const char* what, const std::string& detail = {}) {
  if (detail.empty()) {
    std::fprintf(stderr, "%s: property violated: %s\n", DD_FUZZ_TARGET, what);
  } else {
    std::fprintf(stderr, "%s: property violated: %s\n%s\n", DD_FUZZ_TARGET, what, detail.c_str());
  }
  std::abort();
}

}  // namespace dd::fuzz

/// Aborts naming the condition when `cond` is false.
#define FUZZ_CHECK(cond)                      \
  do {                                        \
    if (!(cond)) ::dd::fuzz::violated(#cond); \
  } while (0)
