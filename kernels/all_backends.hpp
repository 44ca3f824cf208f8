// kernels/all_backends.hpp — startup hook that registers every optional backend of this build
// (today: CUDA, when the module libdd_backend_cuda.so was built). Link dd_kernels_all and call
// init_all_backends() once from main() before make_backend("cuda"); binaries that link only
// dd_kernels get "reference" and "cpu". See kernels/registry.hpp for why this is explicit and
// kernels/cuda_loader.hpp for how the module is found and loaded on first need.
#pragma once

namespace dd::kernels {

/// Registers the optional backends of this build with make_backend(). Idempotent, thread-safe,
/// never throws; loads nothing and touches no device (the CUDA module is dlopen()ed by the first
/// make_backend("cuda") or cuda_available()).
void init_all_backends();

/// True when this build has the CUDA backend (the module dd_backend_cuda was built). Whether it
/// loads on this machine is known only at first use (kernels/cuda_loader.hpp).
bool cuda_backend_compiled();

}  // namespace dd::kernels
