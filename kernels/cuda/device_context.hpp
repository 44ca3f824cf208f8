// kernels/cuda/device_context.hpp — the per-device resources one CUDA backend object owns
// (internal to kernels/cuda/).
//
// A device_context holds a device ordinal, a non-blocking stream and a cuBLAS handle bound to
// that stream (default math mode: fp32 compute, no TF32). device_workspace is a grow-only
// scratch allocation on that device. Both are move-only RAII types with one owner (the
// cuda_backend object); there are no global handles. Used by the thread that uses the backend.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>

namespace dd::kernels::cuda_detail {

/// Device ordinal + stream + cuBLAS handle. Construction makes `device` current on the
/// calling thread. Throws backend_error (naming "device_context") when the device cannot be
/// selected or a resource cannot be created.
class device_context {
 public:
  explicit device_context(int device);
  device_context(const device_context&) = delete;
  device_context& operator=(const device_context&) = delete;
  device_context(device_context&& other) noexcept;
  device_context& operator=(device_context&& other) noexcept;
  ~device_context();

  /// CUDA device ordinal.
  int device() const noexcept { return device_; }
  /// The stream every op of the owning backend is queued on.
  cudaStream_t stream() const noexcept { return stream_; }
  /// cuBLAS handle bound to stream().
  cublasHandle_t cublas() const noexcept { return cublas_; }
  /// Makes this context's device current on the calling thread (cheap when it already is).
  /// Throws backend_error naming `op`.
  void make_current(const char* op) const;
  /// Waits for every op queued on stream(). Throws backend_error naming `op`.
  void synchronize(const char* op) const;

 private:
  void release() noexcept;
  int device_ = -1;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
};

/// A grow-only device allocation used as scratch by one op at a time (contents are not kept
/// meaningful between ops). Move-only; frees on destruction.
class device_workspace {
 public:
  device_workspace() = default;
  device_workspace(const device_workspace&) = delete;
  device_workspace& operator=(const device_workspace&) = delete;
  device_workspace(device_workspace&& other) noexcept;
  device_workspace& operator=(device_workspace&& other) noexcept;
  ~device_workspace();

  /// Returns a device pointer to at least `bytes` bytes, reallocating when the current
  /// allocation is smaller (the old contents are lost). Throws backend_error naming `op`.
  void* reserve(size_t bytes, const char* op);

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace dd::kernels::cuda_detail
