// tests/kernels/factory_test.cpp — make_backend() names and errors, and the CUDA registration
// hook (kernels/registry.hpp) exercised with a fake factory, so it is tested without a GPU.
#include <gtest/gtest.h>

#include <string>

#include "kernels/backend.hpp"
#include "kernels/reference/reference_backend.hpp"
#include "kernels/registry.hpp"

namespace dd::kernels {
namespace {

std::string error_of(const std::string& name) {
  try {
    make_backend(name);
  } catch (const backend_error& e) {
    return e.what();
  }
  return "";
}

TEST(factory, makes_the_host_backends_by_name) {
  EXPECT_EQ(make_backend("reference")->name(), "reference");
  EXPECT_EQ(make_backend("cpu")->name(), "cpu");
  backend_options one;
  one.threads = 1;
  EXPECT_EQ(make_backend("cpu", one)->name(), "cpu");
}

TEST(factory, unknown_name_throws_naming_it) {
  const std::string msg = error_of("nope");
  EXPECT_NE(msg.find("unknown backend \"nope\""), std::string::npos) << msg;
}

TEST(factory, negative_thread_count_throws) {
  backend_options bad;
  bad.threads = -1;
  EXPECT_THROW(make_backend("cpu", bad), backend_error);
}

TEST(factory, cuda_without_registration_throws_clearly) {
  register_cuda_factory(nullptr, nullptr);
  EXPECT_FALSE(cuda_available());
  const std::string msg = error_of("cuda");
  EXPECT_NE(msg.find("make_backend(\"cuda\")"), std::string::npos) << msg;
  EXPECT_NE(msg.find("init_all_backends"), std::string::npos) << msg;
}

std::unique_ptr<backend> fake_cuda(const backend_options&) { return make_reference_backend(); }
bool no_device() { return false; }
bool has_device() { return true; }
bool throwing_probe() { throw backend_error("driver version is insufficient"); }

TEST(factory, registered_cuda_without_device_throws_clearly) {
  register_cuda_factory(&fake_cuda, &no_device);
  EXPECT_TRUE(cuda_factory_registered());
  EXPECT_FALSE(cuda_available());
  const std::string msg = error_of("cuda");
  EXPECT_NE(msg.find("no usable CUDA device"), std::string::npos) << msg;

  // A probe that throws (e.g. "driver version is insufficient") means "no device".
  register_cuda_factory(&fake_cuda, &throwing_probe);
  EXPECT_FALSE(cuda_available());
  EXPECT_NE(error_of("cuda").find("no usable CUDA device"), std::string::npos);

  register_cuda_factory(&fake_cuda, &has_device);
  EXPECT_TRUE(cuda_available());
  EXPECT_EQ(make_backend("cuda")->name(), "reference");  // the fake factory was called

  register_cuda_factory(nullptr, nullptr);
  EXPECT_FALSE(cuda_factory_registered());
  EXPECT_THROW(make_backend("cuda"), backend_error);
}

std::string module_missing() {
  return "CUDA backend not available: /x/libdd_backend_cuda.so: gone";
}
std::string empty_reason() { return ""; }
std::string throwing_reason() { throw backend_error("reason failed"); }

// The lazy loader (kernels/cuda_loader.hpp) registers a reason hook; make_backend puts its
// clause into the error, and falls back to the generic one when the hook has nothing to say.
TEST(factory, unavailable_reason_is_named_in_the_error) {
  register_cuda_factory(&fake_cuda, &no_device, &module_missing);
  EXPECT_EQ(error_of("cuda"),
            "make_backend(\"cuda\"): CUDA backend not available: /x/libdd_backend_cuda.so: gone; "
            "use \"cpu\"");

  register_cuda_factory(&fake_cuda, &no_device, &empty_reason);
  EXPECT_NE(error_of("cuda").find("no usable CUDA device"), std::string::npos);
  register_cuda_factory(&fake_cuda, &no_device, &throwing_reason);
  EXPECT_NE(error_of("cuda").find("no usable CUDA device"), std::string::npos);

  register_cuda_factory(&fake_cuda, &has_device, &module_missing);  // reason unused with a device
  EXPECT_EQ(make_backend("cuda")->name(), "reference");
  register_cuda_factory(nullptr, nullptr);
}

}  // namespace
}  // namespace dd::kernels
