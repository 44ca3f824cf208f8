// tests/kernels/openblas_core_test.cpp — the choice of OpenBLAS kernel family when the library
// does not know the CPU model (kernels/cpu/detail/openblas_core.hpp), and that the process the
// cpu backend runs in uses a family the CPU supports.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "kernels/backend.hpp"
#include "kernels/cpu/detail/openblas_core.hpp"

namespace dd::kernels::cpu_detail {
namespace {

TEST(openblas_core, only_the_prescott_fallback_is_replaced_by_what_the_cpu_supports) {
  const cpu_features none{false, false}, avx2{true, false}, avx512{true, true};
  struct row {
    std::string current;
    bool env_override;
    cpu_features cpu;
    std::string want;
  };
  const row rows[] = {
      {"Prescott", false, avx512, "SkylakeX"},  // model unknown to the library, AVX-512 CPU
      {"PRESCOTT", false, avx512, "SkylakeX"},  // names compare as OpenBLAS does: any case
      {"Prescott", false, avx2, "Haswell"},     // model unknown, AVX2 CPU
      {"Prescott", false, none, ""},            // a CPU without AVX2: the fallback is right
      {"Prescott", true, avx512, ""},           // the user's OPENBLAS_CORETYPE wins
      {"Haswell", false, avx512, ""},           // the library recognized the CPU
      {"SkylakeX", false, avx512, ""},         {"Zen", false, avx2, ""},
      {"Cooperlake", false, avx512, ""},
  };
  for (const row& r : rows) {
    EXPECT_EQ(openblas_core_to_force(r.current, r.env_override, r.cpu), r.want)
        << r.current << " override=" << r.env_override;
  }
}

TEST(openblas_core, a_process_with_the_cpu_backend_does_not_run_the_sse3_fallback) {
  auto be = make_backend("cpu");
  const std::string core = openblas_core();
  EXPECT_FALSE(core.empty());
#if defined(__x86_64__)
  __builtin_cpu_init();
  // (A user's OPENBLAS_CORETYPE is obeyed whatever it names.)
  if (std::getenv("OPENBLAS_CORETYPE") == nullptr && __builtin_cpu_supports("avx2") &&
      __builtin_cpu_supports("fma")) {
    EXPECT_NE(core, "Prescott") << "OpenBLAS runs its SSE3 kernels on a CPU with AVX2";
  }
#endif
}

}  // namespace
}  // namespace dd::kernels::cpu_detail
