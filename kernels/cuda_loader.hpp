// kernels/cuda_loader.hpp — finds and dlopen()s the CUDA backend module (libdd_backend_cuda.so)
// on first need, so a process that never asks for "cuda" never maps cuBLAS (~540 MB of shared
// libraries, docs/caf.md "Build"). Part of dd_kernels_all; init_all_backends() registers the
// lazy functions below with make_backend() (kernels/registry.hpp).
//
// Where the module is looked for, in order:
//   1. $DD_CUDA_MODULE, when set and non-empty — and then nowhere else (an explicit path that
//      fails is an error, not a reason to pick up some other build's module);
//   2. <directory of /proc/self/exe>/../lib/libdd_backend_cuda.so (build tree: bin/ and lib/);
//   3. <directory of /proc/self/exe>/libdd_backend_cuda.so;
//   4. libdd_backend_cuda.so through the dynamic loader's search (LD_LIBRARY_PATH, ld.so.cache).
//
// A module, once loaded, is never unloaded: backends it made may live until process exit. The
// lazy functions load at most once per process (the first call decides; DD_CUDA_MODULE is read
// then). The uncached functions (cuda_module_candidates, open_cuda_module, find_cuda_module) are
// for tests and diagnostics. All functions are thread-safe and never throw, except lazy_cuda_make.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/cuda/module_api.hpp"

namespace dd::kernels {

/// The outcome of loading the module: `entry` is set on success, `error` otherwise.
struct cuda_module_handle {
  /// The module's entry points (static storage in the module); null when loading failed.
  const cuda_module::entry_points* entry = nullptr;
  /// The path that was loaded, or the last one tried.
  std::string path;
  /// Why loading failed, naming each path tried and the dynamic loader's message; "" on success.
  std::string error;
};

/// The paths tried, in order (see the file comment). Reads DD_CUDA_MODULE.
std::vector<std::string> cuda_module_candidates();

/// dlopen()s `path` (RTLD_NOW | RTLD_LOCAL) and checks its entry symbol and ABI version. On
/// failure the error names the path and the dlerror() text or the mismatch.
cuda_module_handle open_cuda_module(const std::string& path);

/// The first candidate that opens; on failure the error lists every attempt.
cuda_module_handle find_cuda_module();

/// The module of this process: find_cuda_module() on the first call, the same result after.
const cuda_module_handle& loaded_cuda_module();

/// The lazy hooks init_all_backends() registers. lazy_cuda_present: the module loaded and
/// reports a usable device. lazy_cuda_reason: "CUDA backend not available: <error>" when the
/// module did not load, else "no usable CUDA device (<driver status>)". lazy_cuda_make: creates
/// a backend through the module; throws backend_error ("CUDA backend not available: ...") when
/// it did not load, and whatever the module's factory throws.
bool lazy_cuda_present();
std::string lazy_cuda_reason();
std::unique_ptr<backend> lazy_cuda_make(const backend_options& opts);

}  // namespace dd::kernels
