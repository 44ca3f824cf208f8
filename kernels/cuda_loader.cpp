// kernels/cuda_loader.cpp — on-demand loading of the CUDA backend module (see cuda_loader.hpp).
#include "kernels/cuda_loader.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>

namespace dd::kernels {
namespace {

constexpr const char* env_var = "DD_CUDA_MODULE";

// Directory of the running executable ("" when /proc/self/exe cannot be read).
std::string exe_dir() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  const std::string exe(buf, static_cast<size_t>(n));
  const size_t slash = exe.rfind('/');
  return slash == std::string::npos ? std::string() : exe.substr(0, slash);
}

std::string dl_error() {
  const char* e = ::dlerror();
  return e != nullptr ? e : "unknown dynamic loader error";
}

}  // namespace

std::vector<std::string> cuda_module_candidates() {
  const char* env = std::getenv(env_var);
  if (env != nullptr && *env != '\0') return {env};
  std::vector<std::string> paths;
  const std::string dir = exe_dir();
  if (!dir.empty()) {
    paths.push_back(dir + "/../lib/" + cuda_module::file_name);
    paths.push_back(dir + "/" + cuda_module::file_name);
  }
  paths.push_back(cuda_module::file_name);
  return paths;
}

cuda_module_handle open_cuda_module(const std::string& path) {
  cuda_module_handle out;
  out.path = path;
  void* lib = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    out.error = dl_error();  // already names the path: "<path>: cannot open shared object ..."
    if (out.error.find(path) == std::string::npos) out.error = path + ": " + out.error;
    return out;
  }
  (void)::dlerror();
  void* sym = ::dlsym(lib, cuda_module::entry_symbol);
  if (sym == nullptr) {
    out.error = path + ": no symbol " + cuda_module::entry_symbol +
                " (not a dd CUDA backend module): " + dl_error();
    ::dlclose(lib);
    return out;
  }
  const auto entry_fn = reinterpret_cast<cuda_module::entry_fn>(sym);
  const cuda_module::entry_points* entry = entry_fn();
  if (entry == nullptr || entry->abi_version != cuda_module::abi_version ||
      entry->options_size != sizeof(backend_options) ||
      entry->table_size != sizeof(cuda_module::entry_points) || entry->make == nullptr ||
      entry->present == nullptr || entry->device_status == nullptr) {
    out.error = path + ": ABI mismatch (module ABI version " +
                (entry != nullptr ? std::to_string(entry->abi_version) : std::string("?")) +
                ", this binary expects " + std::to_string(cuda_module::abi_version) +
                "); the module must come from the same build as the binary";
    ::dlclose(lib);
    return out;
  }
  out.entry = entry;  // `lib` is deliberately never closed: backends it made may outlive us
  return out;
}

cuda_module_handle find_cuda_module() {
  const char* env = std::getenv(env_var);
  const bool overridden = env != nullptr && *env != '\0';
  std::string tried;
  cuda_module_handle last;
  for (const std::string& path : cuda_module_candidates()) {
    last = open_cuda_module(path);
    if (last.entry != nullptr) return last;
    tried += (tried.empty() ? "" : "; ") + last.error;
  }
  last.error = overridden ? std::string(env_var) + "=" + env + ": " + tried
                          : "tried " + tried + " (set " + env_var + " to the module's path)";
  return last;
}

const cuda_module_handle& loaded_cuda_module() {
  static const cuda_module_handle module = find_cuda_module();  // thread-safe, once
  return module;
}

bool lazy_cuda_present() {
  const cuda_module_handle& m = loaded_cuda_module();
  return m.entry != nullptr && m.entry->present();
}

std::string lazy_cuda_reason() {
  try {
    const cuda_module_handle& m = loaded_cuda_module();
    if (m.entry == nullptr) return "CUDA backend not available: " + m.error;
    const std::string status = m.entry->device_status();
    return "no usable CUDA device (" +
           (status.empty() ? std::string("no GPU or driver present") : status) + ")";
  } catch (...) {
    return "";
  }
}

std::unique_ptr<backend> lazy_cuda_make(const backend_options& opts) {
  const cuda_module_handle& m = loaded_cuda_module();
  if (m.entry == nullptr) {
    throw backend_error("make_backend(\"cuda\"): CUDA backend not available: " + m.error);
  }
  return m.entry->make(opts);
}

}  // namespace dd::kernels
