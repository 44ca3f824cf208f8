// tests/support/backend_pair.hpp — what the host backends' op tests share (moe_ops_test,
// vit_ops_test): a parameterized fixture holding the cpu backend (2 threads, so the parallel
// partitions run) next to the reference backend it is compared with, and a backend that
// implements only the abstract ops, so every optional op (MoE, ViT) is the base class's refusal
// — what the cuda backend inherits for an op it does not have.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "kernels/backend.hpp"
#include "kernels/reference/reference_backend.hpp"

namespace dd::kernels::test {

/// Parameterized fixture: `cpu_` is make_backend("cpu") with 2 threads, `ref_` the reference
/// backend, both made fresh for every test (a test runs one op sequence on each and compares).
template <class Param>
class backend_pair_test : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    backend_options opts;
    opts.threads = 2;  // exercise the parallel partitions
    cpu_ = make_backend("cpu", opts);
    ref_ = make_reference_backend();
  }
  std::unique_ptr<backend> cpu_, ref_;
};

/// A backend whose abstract ops do nothing (allocate_bytes returns nullptr): only for calling
/// the base class's optional ops, which throw backend_error naming the op and "bare".
class bare_backend final : public backend {
 public:
  std::string name() const override { return "bare"; }
  void* allocate_bytes(size_t) override { return nullptr; }
  void free_bytes(void*) noexcept override {}
  void upload_bytes(void*, const void*, size_t) override {}
  void download_bytes(void*, const void*, size_t) override {}
  void copy_bytes(void*, const void*, size_t) override {}
  void zero_bytes(void*, size_t) override {}
  void encoder_forward(float*, const int32_t*, const float*, const float*, int, int, int) override {
  }
  void encoder_backward(float*, float*, const float*, const int32_t*, int, int, int) override {}
  void layernorm_forward(float*, float*, float*, const float*, const float*, const float*, int,
                         int) override {}
  void layernorm_backward(float*, float*, float*, const float*, const float*, const float*,
                          const float*, const float*, int, int) override {}
  void matmul_forward(float*, const float*, const float*, const float*, int, int, int) override {}
  void matmul_backward(float*, float*, float*, const float*, const float*, const float*, int, int,
                       int) override {}
  void attention_forward(float*, float*, const float*, int, int, int, int) override {}
  void attention_backward(float*, float*, const float*, const float*, const float*, int, int, int,
                          int) override {}
  void gelu_forward(float*, const float*, size_t) override {}
  void gelu_backward(float*, const float*, const float*, size_t) override {}
  void residual_forward(float*, const float*, const float*, size_t) override {}
  void softmax_crossentropy_forward(float*, float*, const float*, const int32_t*, int,
                                    int) override {}
  void softmax_crossentropy_backward(float*, const float*, const int32_t*, float, int,
                                     int) override {}
  void adamw_update(float*, const float*, float*, float*, size_t, const adamw_params&) override {}
  double sum_squares(const float*, size_t) override { return 0; }
  void scale(float*, float, size_t) override {}
  bool all_finite(const float*, size_t) override { return true; }
  void weighted_sum(float*, const float* const*, const float*, int, size_t) override {}
  void axpy(float*, float, const float*, size_t) override {}
  void nesterov_update(float*, float*, const float*, float, float, size_t) override {}
};

}  // namespace dd::kernels::test
