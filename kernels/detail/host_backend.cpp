// kernels/detail/host_backend.cpp — host memory for the reference and cpu backends.
#include "kernels/detail/host_backend.hpp"

#include <cstdlib>
#include <cstring>
#include <string>

namespace dd::kernels::detail {

void* host_backend::allocate_bytes(size_t n) {
  const size_t rounded = (n + host_alignment - 1) / host_alignment * host_alignment;
  void* p = std::aligned_alloc(host_alignment, rounded == 0 ? host_alignment : rounded);
  if (p == nullptr) {
    throw backend_error(name() + ": allocate_bytes: out of host memory allocating " +
                        std::to_string(n) + " bytes");
  }
  std::memset(p, 0, rounded == 0 ? host_alignment : rounded);
  return p;
}

void host_backend::free_bytes(void* p) noexcept { std::free(p); }

void host_backend::upload_bytes(void* dst, const void* src_host, size_t n) {
  if (n != 0) std::memcpy(dst, src_host, n);
}

void host_backend::download_bytes(void* dst_host, const void* src, size_t n) {
  if (n != 0) std::memcpy(dst_host, src, n);
}

void host_backend::copy_bytes(void* dst, const void* src, size_t n) {
  if (n != 0 && dst != src) std::memmove(dst, src, n);
}

void host_backend::zero_bytes(void* dst, size_t n) {
  if (n != 0) std::memset(dst, 0, n);
}

}  // namespace dd::kernels::detail
