// kernels/cpu/detail/openblas_core.cpp — see openblas_core.hpp.
#include "kernels/cpu/detail/openblas_core.hpp"

#include <cblas.h>
#include <strings.h>

#include <cstdlib>
#include <mutex>

// A DYNAMIC_ARCH OpenBLAS exports these (driver/others/dynamic.c); other builds and other BLAS
// libraries do not, hence weak: their address is null where they are missing.
extern "C" void gotoblas_dynamic_init(void) __attribute__((weak));
extern "C" void gotoblas_dynamic_quit(void) __attribute__((weak));

namespace dd::kernels::cpu_detail {

std::string openblas_core_to_force(const std::string& current, bool env_override,
                                   const cpu_features& cpu) {
  // Only the fallback is overridden: a real Prescott has no AVX, so "Prescott" on a CPU with
  // AVX2 + FMA means the library did not recognize the model.
  if (env_override || strcasecmp(current.c_str(), "Prescott") != 0) return "";
  if (cpu.avx512 && cpu.avx2_fma) return "SkylakeX";
  if (cpu.avx2_fma) return "Haswell";
  return "";
}

std::string openblas_core() {
  const char* name = openblas_get_corename();
  return name != nullptr ? name : "";
}

namespace {

cpu_features this_cpu() {
  cpu_features f;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  f.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  f.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#endif
  return f;
}

}  // namespace

void select_openblas_core() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (gotoblas_dynamic_init == nullptr || gotoblas_dynamic_quit == nullptr) return;
    const std::string core = openblas_core_to_force(
        openblas_core(), std::getenv("OPENBLAS_CORETYPE") != nullptr, this_cpu());
    if (core.empty()) return;
    // gotoblas_dynamic_init reads OPENBLAS_CORETYPE only when its table pointer is null, which
    // gotoblas_dynamic_quit sets; the variable is removed again so child processes detect anew.
    setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
    gotoblas_dynamic_quit();
    gotoblas_dynamic_init();
    unsetenv("OPENBLAS_CORETYPE");
  });
}

}  // namespace dd::kernels::cpu_detail
