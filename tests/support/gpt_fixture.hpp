// tests/support/gpt_fixture.hpp — a test fixture holding a small GPT (vocabulary 256, context 16,
// 2 layers, 2 heads, width 16) initialised on a named backend, and scratch names unique to the
// test and the process.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include <gtest/gtest.h>
#include <unistd.h>

#include "kernels/backend.hpp"
#include "runtime/gpt.hpp"

namespace dd::test {

class gpt_fixture : public ::testing::Test {
 protected:
  /// The model lives on backend `backend` and is initialised with `seed`.
  gpt_fixture(std::string backend, uint64_t seed) : backend_(std::move(backend)), seed_(seed) {}

  void SetUp() override {
    be_ = kernels::make_backend(backend_, {1, 0});
    model_ = std::make_unique<gpt>(*be_, cfg_);
    model_->init(seed_);
  }

  /// `prefix` followed by this test's name and the process id: one scratch file or directory per
  /// test and per process (ctest runs tests in parallel, and other checkouts on the machine share
  /// the temp dir: parallel tests overwrote one shared file).
  static std::string per_test_name(const std::string& prefix) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    return prefix + info->name() + "_" + std::to_string(::getpid());
  }

  gpt_config cfg_{256, 16, 2, 2, 16};
  std::unique_ptr<kernels::backend> be_;
  std::unique_ptr<gpt> model_;

 private:
  std::string backend_;
  uint64_t seed_;
};

}  // namespace dd::test
