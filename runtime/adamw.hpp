// runtime/adamw.hpp — the inner optimizer: AdamW over a model's flat parameter buffer, with
// per-tensor weight decay, plus global gradient-norm clipping.
//
// AdamW: Loshchilov & Hutter 2019, Algorithm 2 (decoupled weight decay), as implemented by
// kernels::backend::adamw_update; defaults β = (0.9, 0.95), eps 1e-8, weight decay 0.1 on
// tensors with decay = true (ALGORITHM.md, inner optimizer). The moments m, v live on the model's
// backend and can be reset (a respawned learner starts with fresh moments). Owned by one learner
// thread, like the model.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/backend.hpp"
#include "runtime/tensor_info.hpp"

namespace dd {

/// AdamW hyperparameters (the learning rate comes per step from the schedule).
struct adamw_config {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;  ///< applied only to tensors with decay = true
};

/// AdamW state and update for one flat parameter buffer.
class adamw {
 public:
  /// Allocates zeroed moments (n floats each) on `be`. `tensors` describes the buffer layout and
  /// decides weight decay per tensor; they must tile [0, n) (checked: throws
  /// std::invalid_argument naming the first tensor out of place).
  adamw(kernels::backend& be, std::vector<tensor_info> tensors, size_t n, adamw_config cfg = {});

  /// One update: t += 1, then for every tensor θ -= lr·(m̂/(√v̂+eps) + wd·θ) with wd =
  /// weight_decay when the tensor decays, else 0, each gradient taken as grad_scale · g (the
  /// factor of clip_factor: the same bits as scaling grads first). params/grads: backend
  /// pointers, (n). One backend call (adamw_update_segments) over all tensors; grads is left
  /// unchanged or, on backends without a fused op and grad_scale != 1, scaled.
  void step(float* params, float* grads, float lr, float grad_scale = 1.0f);

  /// Zeroes m and v and the step count t (a respawned learner's fresh moments).
  void reset();

  /// Steps taken since construction or reset (t of the bias correction).
  int64_t steps() const noexcept { return t_; }
  void set_steps(int64_t t) noexcept { t_ = t; }
  size_t size() const noexcept { return n_; }
  const adamw_config& config() const noexcept { return cfg_; }

  /// Moments in the backend's memory, (n) each.
  float* m() noexcept { return m_.data(); }
  float* v() noexcept { return v_.data(); }
  const float* m() const noexcept { return m_.data(); }
  const float* v() const noexcept { return v_.data(); }

 private:
  kernels::backend* be_;
  std::vector<tensor_info> tensors_;
  /// Runs of consecutive tensors with the same decay flag (weight decay filled in per step).
  std::vector<kernels::adamw_segment> segments_;
  size_t n_;
  adamw_config cfg_;
  kernels::buffer<float> m_, v_;
  int64_t t_ = 0;
};

/// Global gradient-norm clipping (Pascanu et al. 2013; PyTorch clip_grad_norm_ semantics):
/// norm = sqrt(Σ g²) over all n gradients (accumulated in double); when max_norm > 0 and
/// norm > max_norm, g *= max_norm / (norm + 1e-6). Returns the norm before clipping.
double clip_grad_norm(kernels::backend& be, float* grads, size_t n, double max_norm);

/// sqrt(Σ g²) over the n gradients (accumulated in double): clip_grad_norm's norm.
double grad_norm(kernels::backend& be, const float* grads, size_t n);

/// The factor clip_grad_norm multiplies the gradients by at this norm: float(max_norm /
/// (norm + 1e-6)) when max_norm > 0 and norm > max_norm, else 1. The trainer hands it to
/// adamw::step instead of scaling the gradients in a pass of their own.
float clip_factor(double norm, double max_norm);

}  // namespace dd
