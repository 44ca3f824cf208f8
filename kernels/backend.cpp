// kernels/backend.cpp — make_backend() / cuda_available() and the CUDA registration hook.
#include "kernels/backend.hpp"

#include <mutex>

#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/reference/reference_backend.hpp"
#include "kernels/registry.hpp"

namespace dd::kernels {
namespace {

// The registration hook's state: three function pointers, written at startup by
// init_all_backends(). Guarded by a mutex so concurrent make_backend() calls are safe.
struct cuda_hook {
  std::mutex mutex;
  backend_factory make = nullptr;
  device_probe present = nullptr;
  unavailable_reason why = nullptr;
};

cuda_hook& hook() {
  static cuda_hook h;
  return h;
}

}  // namespace

void register_cuda_factory(backend_factory make, device_probe present, unavailable_reason why) {
  auto& h = hook();
  std::lock_guard<std::mutex> lock(h.mutex);
  h.make = make;
  h.present = present;
  h.why = why;
}

bool cuda_factory_registered() {
  auto& h = hook();
  std::lock_guard<std::mutex> lock(h.mutex);
  return h.make != nullptr;
}

bool cuda_available() {
  device_probe present = nullptr;
  {
    auto& h = hook();
    std::lock_guard<std::mutex> lock(h.mutex);
    if (h.make == nullptr) return false;
    present = h.present;
  }
  if (present == nullptr) return false;
  try {
    return present();
  } catch (...) {
    return false;
  }
}

std::unique_ptr<backend> make_backend(const std::string& name, const backend_options& opts) {
  if (name == "reference") return make_reference_backend();
  if (name == "cpu") return make_cpu_backend(opts);
  if (name == "cuda") {
    backend_factory make = nullptr;
    device_probe present = nullptr;
    unavailable_reason why = nullptr;
    {
      auto& h = hook();
      std::lock_guard<std::mutex> lock(h.mutex);
      make = h.make;
      present = h.present;
      why = h.why;
    }
    if (make == nullptr) {
      throw backend_error(
          "make_backend(\"cuda\"): the CUDA backend is not available in this binary (built "
          "without CUDA, or dd::kernels::init_all_backends() was not called; link dd_kernels_all "
          "and call it at startup); use \"cpu\"");
    }
    bool ok = false;
    try {
      ok = present == nullptr || present();
    } catch (...) {
      ok = false;
    }
    if (!ok) {
      std::string reason;
      try {
        if (why != nullptr) reason = why();
      } catch (...) {
        reason.clear();
      }
      if (reason.empty()) reason = "no usable CUDA device (no GPU or driver present)";
      throw backend_error("make_backend(\"cuda\"): " + reason + "; use \"cpu\"");
    }
    return make(opts);
  }
  throw backend_error("make_backend: unknown backend \"" + name +
                      "\" (expected \"reference\", \"cpu\" or \"cuda\")");
}

}  // namespace dd::kernels
