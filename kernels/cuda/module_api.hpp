// kernels/cuda/module_api.hpp — the boundary between a host binary and the CUDA backend module
// (libdd_backend_cuda.so, built from kernels/cuda/ by kernels/cuda/CMakeLists.txt).
//
// The module exports exactly one symbol, the extern "C" function named by `entry_symbol`, which
// returns a pointer to a static `entry_points` table. Everything else in the module is hidden
// (visibility preset + a linker version script), so the module's copies of cuBLAS wrappers,
// kernels and template instantiations never interpose on the host's. The host side is
// kernels/cuda_loader.{hpp,cpp}, which dlopen()s the module on first need.
//
// Ownership across the boundary: `make` returns a backend created by code in the module; its
// virtual destructor (also module code) destroys it, so std::unique_ptr<backend>'s default
// deleter is sound on the host side. The module is never unloaded, so a backend may live until
// process exit. Exceptions thrown by module code are backend_error (kernels/backend.hpp); the
// host catches them by type (libstdc++ matches exception types across shared objects by their
// mangled name, and backend_error is not in an anonymous namespace).
//
// Plain C++ (no CUDA headers). Both sides must be built from the same tree: `abi_version` and
// the recorded struct sizes let the loader refuse a stale module with a clear message instead
// of crashing. Bump `abi_version` whenever backend.hpp's vtable or this table changes.
#pragma once

#include <cstddef>
#include <string>

#include "kernels/registry.hpp"

namespace dd::kernels::cuda_module {

/// Version of this table and of the backend interface it hands out.
inline constexpr int abi_version = 1;
/// The one symbol the module exports (an extern "C" function of type `entry_fn`).
inline constexpr const char* entry_symbol = "dd_cuda_module_entry";
/// The module's file name (CMake target dd_backend_cuda).
inline constexpr const char* file_name = "libdd_backend_cuda.so";

/// The module's entry points. Static storage inside the module; never freed.
struct entry_points {
  /// `abi_version` as the module was compiled.
  int abi_version;
  /// sizeof(backend_options) and sizeof(entry_points) as the module was compiled.
  size_t options_size;
  size_t table_size;
  /// make_cuda_backend (kernels/cuda/cuda_backend.hpp). Throws backend_error.
  backend_factory make;
  /// cuda_device_present. Never throws.
  device_probe present;
  /// Why no device is usable, e.g. "cudaGetDeviceCount: CUDA driver version is insufficient
  /// for CUDA runtime version" or "0 devices"; "" when a device is usable. Never throws.
  std::string (*device_status)();
};

/// Type of the exported entry function.
using entry_fn = const entry_points* (*)();

}  // namespace dd::kernels::cuda_module
