// kernels/registry.hpp — the hook through which an optional backend (the CUDA backend, loaded
// on demand from the module libdd_backend_cuda.so) makes itself known to make_backend() without
// dd_kernels linking it.
//
// Why a hook: cuBLAS pulls in ~540 MB of shared libraries (docs/caf.md, "Build"); binaries that
// only need the CPU must not load it. dd_kernels therefore knows "cuda" only by name; the library
// dd_kernels_all provides init_all_backends() (kernels/all_backends.hpp), which calls
// register_cuda_factory() with the lazy loader's functions (kernels/cuda_loader.hpp): the first
// cuda_available() or make_backend("cuda") dlopen()s the module. The call is explicit because
// static initializers in static libraries are dropped by the linker when nothing references them.
//
// Who may call: init_all_backends() (or a test) at program startup. Registration is thread-safe
// and idempotent (the last registration wins); it holds nothing but three function pointers.
#pragma once

#include <memory>
#include <string>

#include "kernels/backend.hpp"

namespace dd::kernels {

/// Creates a CUDA backend; throws backend_error when no device can be used.
using backend_factory = std::unique_ptr<backend> (*)(const backend_options&);
/// Returns true when at least one CUDA device is usable. Must not throw.
using device_probe = bool (*)();

/// Explains why `device_probe` returned false, as a clause that completes
/// "make_backend(\"cuda\"): ..." (e.g. "CUDA backend not available: <dlerror>"). Must not throw.
using unavailable_reason = std::string (*)();

/// Registers the CUDA backend's factory, device probe and (optionally) the explanation used when
/// the probe says no. Any may be null; a null `make` unregisters.
void register_cuda_factory(backend_factory make, device_probe present,
                           unavailable_reason why = nullptr);

/// True when a CUDA factory has been registered (whether or not a device is present).
bool cuda_factory_registered();

}  // namespace dd::kernels
