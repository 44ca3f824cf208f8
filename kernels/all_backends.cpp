// kernels/all_backends.cpp — registers the optional backends (see all_backends.hpp).
#include "kernels/all_backends.hpp"

#include "kernels/registry.hpp"

#ifdef DD_KERNELS_WITH_CUDA
#include "kernels/cuda_loader.hpp"
#endif

namespace dd::kernels {

void init_all_backends() {
#ifdef DD_KERNELS_WITH_CUDA
  // Lazy: nothing is loaded until the first cuda_available() / make_backend("cuda").
  register_cuda_factory(&lazy_cuda_make, &lazy_cuda_present, &lazy_cuda_reason);
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
