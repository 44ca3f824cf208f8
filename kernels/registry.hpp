// kernels/registry.hpp — the hook through which an optional backend library (the CUDA backend,
// dd_kernels_cuda) makes itself known to make_backend() without dd_kernels linking it.
//
// Why a hook: cuBLAS pulls in ~540 MB of shared libraries (CAF_NOTES.md, "Build"); binaries that
// only need the CPU must not link it. dd_kernels therefore knows "cuda" only by name; the library
// dd_kernels_all provides init_all_backends() (kernels/all_backends.hpp), which calls
// register_cuda_factory() with the CUDA backend's functions. The call is explicit because static
// initializers in static libraries are dropped by the linker when nothing references them.
//
// Who may call: init_all_backends() (or a test) at program startup. Registration is thread-safe
// and idempotent (the last registration wins); it is the only process-wide state in kernels/ and
// holds nothing but two function pointers.
#pragma once

#include <memory>

#include "kernels/backend.hpp"

namespace dd::kernels {

/// Creates a CUDA backend; throws backend_error when no device can be used.
using backend_factory = std::unique_ptr<backend> (*)(const backend_options&);
/// Returns true when at least one CUDA device is usable. Must not throw.
using device_probe = bool (*)();

/// Registers the CUDA backend's factory and device probe. Either may be null to unregister.
void register_cuda_factory(backend_factory make, device_probe present);

/// True when a CUDA factory has been registered (whether or not a device is present).
bool cuda_factory_registered();

}  // namespace dd::kernels
