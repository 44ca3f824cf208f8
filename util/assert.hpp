// util/assert.hpp — DD_ASSERT: the project's one way to state an invariant (a bug if false).
// Unlike assert(), it is on in every build (Release included, NDEBUG or not): a broken invariant
// aborts at once with file:line, the condition and a message, instead of corrupting state.
// Failures a caller reacts to are not assertions: they are errors (docs/style.md, "Errors").
// Header-only, no dependencies (no CAF), usable from any layer and any thread.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace dd::util {

/// Prints "FILE:LINE: invariant failed: COND: MESSAGE" on stderr and aborts. Not for direct use.
[[noreturn]] inline void assert_fail(const char* cond, const char* file, int line,
                                     const char* message) noexcept {
  std::fprintf(stderr, "%s:%d: invariant failed: %s%s%s\n", file, line, cond,
               (message != nullptr && *message != '\0') ? ": " : "",
               message != nullptr ? message : "");
  std::fflush(stderr);
  std::abort();
}

}  // namespace dd::util

/// DD_ASSERT(cond) or DD_ASSERT(cond, "what it means"): aborts with file:line when `cond` is
/// false, in every build. `cond` is evaluated exactly once; the message must be a string literal.
#define DD_ASSERT(...) DD_ASSERT_IMPL_(__VA_ARGS__, "", "")
/// Not for direct use (the padding keeps DD_ASSERT(cond) valid ISO C++ without a message).
#define DD_ASSERT_IMPL_(cond, message, ...)       \
  (static_cast<bool>(cond) ? static_cast<void>(0) \
                           : ::dd::util::assert_fail(#cond, __FILE__, __LINE__, "" message))
