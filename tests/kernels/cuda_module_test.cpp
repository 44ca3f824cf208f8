// tests/kernels/cuda_module_test.cpp — the CUDA backend module (libdd_backend_cuda.so) and its
// loader (kernels/cuda_loader.hpp) through the uncached functions: where it is searched, the
// errors for a missing path or a library that is not the module, and that the built module
// loads, reports no device here, and that its exceptions and objects cross the module boundary
// soundly (caught as the host's backend_error; destroyed by the module's destructor).
// DD_CUDA_MODULE_BUILT is the module's path in the build tree (tests/kernels/CMakeLists.txt).
#include <gtest/gtest.h>

#include <cstdlib>
#include <initializer_list>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/cuda_loader.hpp"

namespace dd::kernels {
namespace {

// Sets (or, with nullptr, unsets) DD_CUDA_MODULE for one scope and restores it after.
class scoped_module_env {
 public:
  explicit scoped_module_env(const char* value) {
    const char* old = std::getenv("DD_CUDA_MODULE");
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (value != nullptr) {
      ::setenv("DD_CUDA_MODULE", value, 1);
    } else {
      ::unsetenv("DD_CUDA_MODULE");
    }
  }
  ~scoped_module_env() {
    if (had_) {
      ::setenv("DD_CUDA_MODULE", old_.c_str(), 1);
    } else {
      ::unsetenv("DD_CUDA_MODULE");
    }
  }
  scoped_module_env(const scoped_module_env&) = delete;
  scoped_module_env& operator=(const scoped_module_env&) = delete;

 private:
  bool had_ = false;
  std::string old_;
};

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

/// Expects `m` not loaded, its error naming every one of `parts`.
void expect_not_loaded(const cuda_module_handle& m, std::initializer_list<const char*> parts) {
  EXPECT_EQ(m.entry, nullptr);
  for (const char* part : parts) EXPECT_TRUE(contains(m.error, part)) << m.error;
}

TEST(cuda_module, missing_path_reports_the_path_and_the_loader_error) {
  const cuda_module_handle m = open_cuda_module("/nonexistent/libdd_backend_cuda.so");
  expect_not_loaded(m, {"/nonexistent/libdd_backend_cuda.so", "cannot open shared object file"});
}

TEST(cuda_module, env_override_is_the_only_candidate) {
  scoped_module_env env("/nonexistent");
  EXPECT_EQ(cuda_module_candidates(), std::vector<std::string>{"/nonexistent"});
  const cuda_module_handle m = find_cuda_module();
  expect_not_loaded(m, {"DD_CUDA_MODULE=/nonexistent", "cannot open shared object file"});
}

TEST(cuda_module, default_search_finds_the_module_beside_the_executable) {
  scoped_module_env env(nullptr);
  const std::vector<std::string> paths = cuda_module_candidates();
  ASSERT_EQ(paths.size(), 3u);
  EXPECT_TRUE(ends_with(paths[0], "/../lib/libdd_backend_cuda.so")) << paths[0];
  EXPECT_TRUE(ends_with(paths[1], "/libdd_backend_cuda.so")) << paths[1];
  EXPECT_EQ(paths[2], "libdd_backend_cuda.so");
  // The test binary is in build/bin and the module in build/lib: the first candidate.
  const cuda_module_handle m = find_cuda_module();
  ASSERT_NE(m.entry, nullptr) << m.error;
  EXPECT_EQ(m.path, paths[0]);
}

TEST(cuda_module, a_library_without_the_entry_symbol_is_refused) {
  const cuda_module_handle m = open_cuda_module("libm.so.6");
  expect_not_loaded(m, {"libm.so.6", "no symbol dd_cuda_module_entry"});
}

TEST(cuda_module, built_module_loads_and_probes_without_throwing) {
  const cuda_module_handle m = open_cuda_module(DD_CUDA_MODULE_BUILT);
  ASSERT_NE(m.entry, nullptr) << m.error;
  EXPECT_EQ(m.entry->abi_version, cuda_module::abi_version);
  EXPECT_EQ(m.error, "");
  const bool present = m.entry->present();
  const std::string status = m.entry->device_status();
  if (present) {
    EXPECT_EQ(status, "");
    GTEST_SKIP() << "a CUDA device is present";
  }
  // No GPU / no driver on this machine: the probe says no and the status says why.
  EXPECT_FALSE(present);
  EXPECT_FALSE(status.empty());
}

// The factory is module code; whatever it throws must be catchable as the host's backend_error,
// and a backend it makes must be destroyed by its own (module) destructor through unique_ptr.
TEST(cuda_module, module_exceptions_are_host_backend_errors) {
  const cuda_module_handle m = open_cuda_module(DD_CUDA_MODULE_BUILT);
  ASSERT_NE(m.entry, nullptr) << m.error;
  backend_options opts;
  if (!m.entry->present()) {
    // Without a device, device_context's constructor throws inside the module.
    try {
      (void)m.entry->make(opts);
      FAIL() << "the module's factory succeeded without a device";
    } catch (const backend_error& e) {
      EXPECT_TRUE(contains(e.what(), "cuda backend: device_context")) << e.what();
    }
    return;
  }
  // With a device: an impossible allocation throws from a virtual function in the module, and
  // the backend is destroyed by the module's destructor when `be` goes out of scope.
  std::unique_ptr<backend> be = m.entry->make(opts);
  ASSERT_NE(be, nullptr);
  EXPECT_EQ(be->name(), "cuda");
  EXPECT_THROW(be->allocate_bytes(size_t{1} << 60), backend_error);
  auto buf = be->alloc<float>(1024);
  std::vector<float> host(1024, 1.5f), back(1024, 0.0f);
  be->upload(buf.data(), host.data(), host.size());
  be->download(back.data(), buf.data(), back.size());
  EXPECT_EQ(back, host);
}

}  // namespace
}  // namespace dd::kernels
