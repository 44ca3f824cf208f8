// kernels/all_backends.hpp — startup hook that registers every optional backend compiled into
// this build (today: CUDA, when dd_kernels_cuda was built). Link dd_kernels_all and call
// init_all_backends() once from main() before make_backend("cuda"); binaries that link only
// dd_kernels get "reference" and "cpu". See kernels/registry.hpp for why this is explicit.
#pragma once

namespace dd::kernels {

/// Registers the optional backends built into this binary with make_backend(). Idempotent,
/// thread-safe, never throws; does not touch any device (probing happens in make_backend /
/// cuda_available).
void init_all_backends();

/// True when this binary was built with the CUDA backend linked (dd_kernels_cuda).
bool cuda_backend_compiled();

}  // namespace dd::kernels
