// tests/kernels/cuda_lazy_test.cpp — the process-wide, on-demand path: init_all_backends()
// registers the lazy loader, nothing CUDA is mapped until "cuda" is first asked for, and then
// make_backend("cuda") / cuda_available() answer through the module.
//
// The module is loaded at most once per process, so this file is built twice with a different
// DD_CUDA_MODULE value, DD_LAZY_MODULE (tests/kernels/CMakeLists.txt): the built module
// (dd_cuda_lazy_test, suite cuda_lazy) and a missing path (dd_cuda_lazy_missing_test, suite
// cuda_lazy_missing; DD_LAZY_SUITE keeps the ctest names apart). Each test sets it before
// the first use, so running a binary directly (all tests in one process) gives the same results
// as ctest (one process per test). Declaration order matters only for
// nothing_is_mapped_before_first_use, which must run before anything loads (gtest runs tests in
// declaration order unless shuffled).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "kernels/all_backends.hpp"
#include "kernels/backend.hpp"
#include "kernels/cuda_loader.hpp"

namespace dd::kernels {
namespace {

const std::string module_path = DD_LAZY_MODULE;
const bool module_exists = module_path != "/nonexistent";

void use_module_under_test() {
  ::setenv("DD_CUDA_MODULE", module_path.c_str(), 1);
  init_all_backends();
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// True when a mapped file of this process has `name` in its path.
bool mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (contains(line, name)) return true;
  }
  return false;
}

std::string cuda_error() {
  try {
    (void)make_backend("cuda");
  } catch (const backend_error& e) {
    return e.what();
  }
  return "";
}

TEST(DD_LAZY_SUITE, nothing_is_mapped_before_first_use) {
  use_module_under_test();
  // The host backends work without touching CUDA.
  EXPECT_EQ(make_backend("cpu")->name(), "cpu");
  EXPECT_FALSE(mapped("libdd_backend_cuda")) << "the module was loaded before first use";
  EXPECT_FALSE(mapped("libcublas")) << "cuBLAS was loaded before first use";
  EXPECT_FALSE(mapped("libcudart")) << "the CUDA runtime was loaded before first use";
  // The first question about "cuda" loads the module (when it exists).
  (void)cuda_available();
  EXPECT_EQ(mapped("libdd_backend_cuda"), module_exists);
  EXPECT_EQ(mapped("libcublas"), module_exists);
}

TEST(DD_LAZY_SUITE, make_backend_names_why_cuda_cannot_be_used) {
  use_module_under_test();
  if (cuda_available()) GTEST_SKIP() << "a CUDA device is present";
  const std::string msg = cuda_error();
  EXPECT_TRUE(contains(msg, "make_backend(\"cuda\"): ")) << msg;
  EXPECT_TRUE(contains(msg, "use \"cpu\"")) << msg;
  if (module_exists) {
    // The module loaded; the driver says why there is no device.
    EXPECT_TRUE(contains(msg, "no usable CUDA device (")) << msg;
    EXPECT_TRUE(contains(msg, "cudaGetDeviceCount")) << msg;
    EXPECT_EQ(loaded_cuda_module().path, module_path);
  } else {
    EXPECT_TRUE(contains(msg, "CUDA backend not available: DD_CUDA_MODULE=/nonexistent")) << msg;
    EXPECT_TRUE(contains(msg, "cannot open shared object file")) << msg;
    EXPECT_EQ(loaded_cuda_module().entry, nullptr);
  }
}

TEST(DD_LAZY_SUITE, lazy_factory_without_a_module_throws_backend_error) {
  use_module_under_test();
  if (module_exists) GTEST_SKIP() << "the module is present";
  EXPECT_FALSE(lazy_cuda_present());
  try {
    (void)lazy_cuda_make(backend_options{});
    FAIL() << "lazy_cuda_make succeeded without a module";
  } catch (const backend_error& e) {
    EXPECT_TRUE(contains(e.what(), "CUDA backend not available")) << e.what();
  }
}

TEST(DD_LAZY_SUITE, with_a_device_make_backend_gives_a_working_cuda_backend) {
  use_module_under_test();
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  auto be = make_backend("cuda");
  EXPECT_EQ(be->name(), "cuda");
  auto buf = be->alloc<float>(7);
  float host[7] = {1, 2, 3, 4, 5, 6, 7};
  be->upload(buf.data(), host, 7);
  EXPECT_EQ(be->sum_squares(buf.data(), 7), 140.0);
}

}  // namespace
}  // namespace dd::kernels
