// kernels/cpu/detail/openblas_core.hpp — makes a DYNAMIC_ARCH OpenBLAS use the kernels the CPU
// can run when its own CPU detection does not know the CPU model.
//
// OpenBLAS built with DYNAMIC_ARCH (Debian's libopenblas0) picks its kernel set from the CPUID
// family and model at load time. A model newer than the library (OpenBLAS 0.3.21 on a Xeon of
// family 6, model 207) is not in its table, and it falls back to "Prescott": SSE3 kernels, about
// a sixth of the AVX-512 kernels' sgemm rate on such a CPU. The choice is read again only when
// the library is re-initialized, so the fix is: at load time, when the library reports Prescott
// but the CPU has AVX2 + FMA (which no Prescott has), re-run its initialization with
// OPENBLAS_CORETYPE set to the family the CPU's features allow ("SkylakeX" for AVX-512 F/BW/VL/DQ,
// else "Haswell"). A user's own OPENBLAS_CORETYPE is left alone. Internal to kernels/cpu/.
#pragma once

#include <string>

namespace dd::kernels::cpu_detail {

/// What the CPU can run, as far as choosing an OpenBLAS kernel family goes.
struct cpu_features {
  bool avx2_fma = false;  ///< AVX2 and FMA3
  bool avx512 = false;    ///< AVX-512 F, BW, VL and DQ (what OpenBLAS's SkylakeX kernels use)
};

/// The decision (no I/O): the OPENBLAS_CORETYPE to re-initialize OpenBLAS with, or "" to keep
/// the library's choice. `current` is openblas_get_corename(); `env_override` whether the user
/// set OPENBLAS_CORETYPE.
std::string openblas_core_to_force(const std::string& current, bool env_override,
                                   const cpu_features& cpu);

/// Applies the decision to the loaded OpenBLAS once per process (later calls do nothing): a
/// no-op unless the library is a DYNAMIC_ARCH build that exports its re-initialization entry
/// points. Runs before main (a static initializer in cpu_backend.cpp), before any sgemm.
void select_openblas_core();

/// The kernel family OpenBLAS uses now (openblas_get_corename()), e.g. "SkylakeX".
std::string openblas_core();

}  // namespace dd::kernels::cpu_detail
