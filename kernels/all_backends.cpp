// kernels/all_backends.cpp — registers the optional backends (see all_backends.hpp).
#include "kernels/all_backends.hpp"

#include "kernels/registry.hpp"

#ifdef DD_KERNELS_WITH_CUDA
#include "kernels/cuda/cuda_backend.hpp"
#endif

namespace dd::kernels {

void init_all_backends() {
#ifdef DD_KERNELS_WITH_CUDA
  register_cuda_factory(&make_cuda_backend, &cuda_device_present);
#endif
}

bool cuda_backend_compiled() {
#ifdef DD_KERNELS_WITH_CUDA
  return true;
#else
  return false;
#endif
}

}  // namespace dd::kernels
