// kernels/cuda/module_entry.cpp — the exported entry of the CUDA backend module
// (libdd_backend_cuda.so); compiled only into that module. See module_api.hpp.
#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/cuda/module_api.hpp"

namespace dd::kernels::cuda_module {
namespace {

std::string device_status() {
  try {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();  // clear it so later calls do not report it
      return std::string("cudaGetDeviceCount: ") + cudaGetErrorString(err);
    }
    return count > 0 ? std::string() : std::string("0 devices");
  } catch (...) {
    return "device status unavailable";
  }
}

constexpr entry_points table = {
    abi_version,        sizeof(backend_options), sizeof(entry_points),
    &make_cuda_backend, &cuda_device_present,    &device_status,
};

}  // namespace
}  // namespace dd::kernels::cuda_module

extern "C" __attribute__((visibility("default"))) const dd::kernels::cuda_module::entry_points*
dd_cuda_module_entry() {
  return &dd::kernels::cuda_module::table;
}
