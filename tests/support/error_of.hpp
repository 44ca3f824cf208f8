// tests/support/error_of.hpp — the message of the exception a call throws, for tests that assert
// what an error names.
#pragma once

#include <exception>
#include <functional>
#include <string>

namespace dd::test {

/// what() of the exception of type E that `f` throws, or "(no error)" when it returns; an
/// exception of another type goes on (and fails the test).
template <class E = std::exception>
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace dd::test
