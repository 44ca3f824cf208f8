// runtime/adamw.cpp — see adamw.hpp.
#include "runtime/adamw.hpp"

#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

namespace dd {

adamw::adamw(kernels::backend& be, std::vector<tensor_info> tensors, size_t n, adamw_config cfg)
    : be_(&be), tensors_(std::move(tensors)), n_(n), cfg_(cfg) {
  size_t expect = 0;
  for (const auto& t : tensors_) {
    if (t.offset != expect || t.numel > n - std::min(n, t.offset))
      throw std::invalid_argument(fmt::format(
          "adamw: tensor '{}' at offset {} (numel {}) does not tile the {}-float buffer", t.name,
          t.offset, t.numel, n));
    expect += t.numel;
  }
  if (expect != n)
    throw std::invalid_argument(
        fmt::format("adamw: tensors cover {} floats, buffer has {}", expect, n));
  m_ = be.alloc<float>(n);
  v_ = be.alloc<float>(n);
  // Merge consecutive tensors with the same decay flag into one segment.
  for (size_t i = 0; i < tensors_.size();) {
    size_t j = i, len = 0;
    while (j < tensors_.size() && tensors_[j].decay == tensors_[i].decay)
      len += tensors_[j++].numel;
    segments_.push_back({tensors_[i].offset, len, tensors_[i].decay ? cfg_.weight_decay : 0.0f});
    i = j;
  }
}

void adamw::step(float* params, float* grads, float lr, float grad_scale) {
  ++t_;
  kernels::adamw_params p;
  p.lr = lr;
  p.beta1 = cfg_.beta1;
  p.beta2 = cfg_.beta2;
  p.eps = cfg_.eps;
  p.step = t_;
  be_->adamw_update_segments(params, grads, m_.data(), v_.data(), segments_.data(),
                             segments_.size(), grad_scale, p);
}

void adamw::reset() {
  be_->zero(m_.data(), n_);
  be_->zero(v_.data(), n_);
  t_ = 0;
}

double clip_grad_norm(kernels::backend& be, float* grads, size_t n, double max_norm) {
  const double norm = grad_norm(be, grads, n);
  const float f = clip_factor(norm, max_norm);
  if (f != 1.0f) be.scale(grads, f, n);
  return norm;
}

double grad_norm(kernels::backend& be, const float* grads, size_t n) {
  return std::sqrt(be.sum_squares(grads, n));
}

float clip_factor(double norm, double max_norm) {
  if (max_norm > 0.0 && norm > max_norm) return static_cast<float>(max_norm / (norm + 1e-6));
  return 1.0f;
}

}  // namespace dd
