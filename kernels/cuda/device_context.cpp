// kernels/cuda/device_context.cpp — RAII ownership of a device's stream, cuBLAS handle and
// scratch memory (see device_context.hpp).
#include "kernels/cuda/device_context.hpp"

#include <utility>

#include "kernels/cuda/cuda_check.hpp"

namespace dd::kernels::cuda_detail {

device_context::device_context(int device) : device_(device) {
  const char* op = "device_context";
  int count = 0;
  DD_CUDA_CHECK(op, cudaGetDeviceCount(&count));
  if (device < 0 || device >= count) {
    throw backend_error("cuda backend: device_context: device ordinal " + std::to_string(device) +
                        " out of range (" + std::to_string(count) + " device(s) present)");
  }
  DD_CUDA_CHECK(op, cudaSetDevice(device));
  try {
    DD_CUDA_CHECK(op, cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    DD_CUBLAS_CHECK(op, cublasCreate(&cublas_));
    DD_CUBLAS_CHECK(op, cublasSetStream(cublas_, stream_));
    // fp32 compute without TF32 tensor-op conversion, so matrix products track the CPU
    // reference (docs/gpu.md, "Tolerances").
    DD_CUBLAS_CHECK(op, cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH));
  } catch (...) {
    release();
    throw;
  }
}

device_context::device_context(device_context&& other) noexcept
    : device_(std::exchange(other.device_, -1)),
      stream_(std::exchange(other.stream_, nullptr)),
      cublas_(std::exchange(other.cublas_, nullptr)) {}

device_context& device_context::operator=(device_context&& other) noexcept {
  if (this != &other) {
    release();
    device_ = std::exchange(other.device_, -1);
    stream_ = std::exchange(other.stream_, nullptr);
    cublas_ = std::exchange(other.cublas_, nullptr);
  }
  return *this;
}

device_context::~device_context() { release(); }

void device_context::release() noexcept {
  if (device_ >= 0) (void)cudaSetDevice(device_);
  if (cublas_ != nullptr) (void)cublasDestroy(cublas_);
  if (stream_ != nullptr) {
    (void)cudaStreamSynchronize(stream_);
    (void)cudaStreamDestroy(stream_);
  }
  cublas_ = nullptr;
  stream_ = nullptr;
}

void device_context::make_current(const char* op) const {
  int current = -1;
  DD_CUDA_CHECK(op, cudaGetDevice(&current));
  if (current != device_) DD_CUDA_CHECK(op, cudaSetDevice(device_));
}

void device_context::synchronize(const char* op) const {
  DD_CUDA_CHECK(op, cudaStreamSynchronize(stream_));
}

device_workspace::device_workspace(device_workspace&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

device_workspace& device_workspace::operator=(device_workspace&& other) noexcept {
  if (this != &other) {
    if (ptr_ != nullptr) (void)cudaFree(ptr_);
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

device_workspace::~device_workspace() {
  if (ptr_ != nullptr) (void)cudaFree(ptr_);
}

void* device_workspace::reserve(size_t bytes, const char* op) {
  if (bytes <= bytes_ && ptr_ != nullptr) return ptr_;
  if (ptr_ != nullptr) {
    // cudaFree waits for the device, so queued ops that still read the old block are done.
    DD_CUDA_CHECK(op, cudaFree(ptr_));
    ptr_ = nullptr;
    bytes_ = 0;
  }
  const size_t want = bytes < 256 ? 256 : bytes;
  DD_CUDA_CHECK(op, cudaMalloc(&ptr_, want));
  bytes_ = want;
  return ptr_;
}

}  // namespace dd::kernels::cuda_detail
