// kernels/cuda/cuda_backend.hpp — entry points of the CUDA (cuBLAS) compute backend.
//
// The backend itself (class cuda_backend, defined in cuda_backend.cu) implements every op of
// kernels/backend.hpp on one CUDA device: matrix products through cuBLAS in fp32 (no TF32, so
// results track the CPU reference), everything else through this folder's own kernels. This
// header is plain C++ (no CUDA headers) so any layer may include it; only code that links
// `dd_kernels_cuda` (dd-gpu-check) or the module itself (module_entry.cpp) can call it. Most
// callers go through make_backend("cuda"), which reaches make_cuda_backend through the module
// libdd_backend_cuda.so, loaded on demand (kernels/cuda_loader.hpp).
//
// Threading: like every backend, one object is used by one thread at a time. Each object owns
// its own device context (stream + cuBLAS handle), so several objects, on the same device or
// on different devices, may run concurrently from different threads.
#pragma once

#include <memory>
#include <string>

#include "kernels/backend.hpp"

namespace dd::kernels {

/// Creates a CUDA backend on device `opts.device` (`opts.threads` is ignored). Every op is
/// queued on the backend's own stream; ops that return a host value (sum_squares, all_finite)
/// and transfers (upload_bytes, download_bytes) wait for the stream. Throws backend_error when
/// no device is present, the ordinal is out of range, or the stream / cuBLAS handle cannot be
/// created; the message names the failing call and the CUDA error string.
std::unique_ptr<backend> make_cuda_backend(const backend_options& opts);

/// True when the CUDA runtime reports at least one usable device. Never throws: a failing
/// cudaGetDeviceCount (no driver, "driver version is insufficient", ...) counts as no device.
bool cuda_device_present() noexcept;

/// Number of CUDA devices the runtime reports; 0 on any error. Never throws.
int cuda_device_count() noexcept;

/// A one-line description of device `device` ("NVIDIA H200, sm_90, 139.8 GiB, 132 SMs"), or
/// the CUDA error string when it cannot be queried. Never throws.
std::string cuda_device_description(int device) noexcept;

}  // namespace dd::kernels
