// kernels/merge_ops.hpp — the fragment owner's fused merge loops (runtime/merge.cpp), an
// optional capability of a backend: the cpu backend has them; for any other backend
// runtime/merge.cpp composes the same math from the backend's single ops (weighted_sum,
// sum_squares, scale, nesterov_update), with the same float roundings.
//
// Both loops keep the float expressions and order of those single ops; the double Σ d² they
// return is summed in fixed blocks, one partial per block added in block order, so it does not
// depend on the thread count (it may differ from sum_squares in its last bits).
#pragma once

#include <cstddef>

#include "kernels/backend.hpp"

namespace dd::kernels {

class fused_merge_ops {
 public:
  /// weighted_sum into out (n), then returns Σ out² (double). out may alias inputs[0] when k == 1.
  /// k == 0 writes zeros and returns 0.
  virtual double weighted_sum_sq(float* out, const float* const* inputs, const float* weights,
                                 int k, size_t n) = 0;
  /// The outer step straight from the inputs, without storing Δ: d = Σ_k weights[k]·inputs[k]
  /// (weighted_sum's order); returns Σ d² (double, before the scale); then d *= delta_scale
  /// unless it is 1; b = mu·b + d; θ -= lr·(d + mu·b) (nesterov_update). k ≥ 1; no input aliases
  /// θ or b.
  virtual double weighted_sum_nesterov(float* theta, float* momentum, const float* const* inputs,
                                       const float* weights, int k, float delta_scale, float lr,
                                       float mu, size_t n) = 0;

 protected:
  ~fused_merge_ops() = default;
};

/// The backend's fused merge loops, or null when it has none.
inline fused_merge_ops* fused_merge_of(backend& be) { return dynamic_cast<fused_merge_ops*>(&be); }

}  // namespace dd::kernels
