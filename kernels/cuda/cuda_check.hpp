// kernels/cuda/cuda_check.hpp — error checking for CUDA runtime and cuBLAS calls (internal to
// kernels/cuda/; other folders never include it).
//
// Every CUDA and cuBLAS call of the backend goes through DD_CUDA_CHECK / DD_CUBLAS_CHECK, which
// throw dd::kernels::backend_error with the op name, the failing expression, file:line and the
// library's error name and string. Kernel launches are followed by DD_CUDA_CHECK_LAUNCH.
// Asynchronous faults (an illegal address inside a kernel) surface at the next checked call,
// which then names its own op; the error is sticky and ends the learner (docs/style.md, "Errors").
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "kernels/backend.hpp"

namespace dd::kernels::cuda_detail {

/// Throws backend_error for a failed CUDA runtime call. `op` is the backend op ("matmul_forward").
[[noreturn]] inline void throw_cuda_error(cudaError_t err, const char* op, const char* expr,
                                          const char* file, int line) {
  throw backend_error(std::string("cuda backend: ") + op + ": " + expr + " failed at " + file +
                      ":" + std::to_string(line) + ": " + cudaGetErrorName(err) + ": " +
                      cudaGetErrorString(err));
}

/// Throws backend_error for a failed cuBLAS call.
[[noreturn]] inline void throw_cublas_error(cublasStatus_t st, const char* op, const char* expr,
                                            const char* file, int line) {
  throw backend_error(std::string("cuda backend: ") + op + ": " + expr + " failed at " + file +
                      ":" + std::to_string(line) + ": " + cublasGetStatusName(st) + ": " +
                      cublasGetStatusString(st));
}

}  // namespace dd::kernels::cuda_detail

/// Checks a cudaError_t-returning expression; throws backend_error naming `op` on failure.
#define DD_CUDA_CHECK(op, expr)                                                                    \
  do {                                                                                             \
    const cudaError_t dd_cuda_err_ = (expr);                                                       \
    if (dd_cuda_err_ != cudaSuccess)                                                               \
      ::dd::kernels::cuda_detail::throw_cuda_error(dd_cuda_err_, (op), #expr, __FILE__, __LINE__); \
  } while (0)

/// Checks the launch of the kernel just queued (configuration errors, not async faults).
#define DD_CUDA_CHECK_LAUNCH(op) DD_CUDA_CHECK(op, cudaGetLastError())

/// Checks a cublasStatus_t-returning expression; throws backend_error naming `op` on failure.
#define DD_CUBLAS_CHECK(op, expr)                                                          \
  do {                                                                                     \
    const cublasStatus_t dd_cublas_st_ = (expr);                                           \
    if (dd_cublas_st_ != CUBLAS_STATUS_SUCCESS)                                            \
      ::dd::kernels::cuda_detail::throw_cublas_error(dd_cublas_st_, (op), #expr, __FILE__, \
                                                     __LINE__);                            \
  } while (0)
