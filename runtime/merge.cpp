// runtime/merge.cpp — Δ from pending pushes (RDA / weighted average) and the outer Nesterov step.
// Only backend ops touch fragment data, so the same code runs on host and device memory.
#include "runtime/merge.hpp"

#include <cmath>
#include <string>

namespace dd {

result<merge_rule> parse_merge_rule(std::string_view s) {
  if (s == "rda") return merge_rule::rda;
  if (s == "weighted_average" || s == "average") return merge_rule::weighted_average;
  return wire_error{errc::invalid_argument, "merge rule '" + std::string(s) +
                                                "' is unknown (expected rda or weighted_average)"};
}

result<merge_anchor> parse_merge_anchor(std::string_view s) {
  if (s == "base") return merge_anchor::base;
  if (s == "current") return merge_anchor::current;
  return wire_error{errc::invalid_argument,
                    "merge anchor '" + std::string(s) + "' is unknown (expected base or current)"};
}

std::string_view to_string(merge_rule r) noexcept {
  return r == merge_rule::rda ? "rda" : "weighted_average";
}

std::string_view to_string(merge_anchor a) noexcept {
  return a == merge_anchor::base ? "base" : "current";
}

double token_weight(uint64_t tokens, uint64_t steps) noexcept {
  if (tokens == 0 || steps == 0) return 0.0;
  const double t = static_cast<double>(tokens);
  return t * t / static_cast<double>(steps);
}

// ---- anchor_ring ------------------------------------------------------------------------------

anchor_ring::anchor_ring(kernels::backend& be, size_t numel, size_t capacity)
    : be_(&be), numel_(numel), capacity_(capacity < 1 ? 1 : capacity) {}

void anchor_ring::record(uint64_t version, const float* theta) {
  for (auto& e : entries_) {
    if (e.version == version) {
      be_->copy(e.value.data(), theta, numel_);
      return;
    }
  }
  entry e;
  e.version = version;
  if (entries_.size() >= capacity_) {
    e.value = std::move(entries_.front().value);  // reuse the oldest entry's memory
    entries_.erase(entries_.begin());
  } else {
    e.value = be_->alloc<float>(numel_);
  }
  be_->copy(e.value.data(), theta, numel_);
  entries_.push_back(std::move(e));
}

void anchor_ring::record_host(uint64_t version, const float* theta_host) {
  kernels::buffer<float> tmp = be_->alloc<float>(numel_);
  be_->upload(tmp.data(), theta_host, numel_);
  record(version, tmp.data());
}

result<const float*> anchor_ring::find(uint64_t version) const {
  for (const auto& e : entries_) {
    if (e.version == version) return static_cast<const float*>(e.value.data());
  }
  std::string held = entries_.empty() ? std::string("none")
                                      : std::to_string(entries_.front().version) + ".." +
                                            std::to_string(entries_.back().version);
  return wire_error{errc::version_gone, "anchor ring: base version " + std::to_string(version) +
                                            " is gone (held: " + held + ")"};
}

std::vector<uint64_t> anchor_ring::versions() const {
  std::vector<uint64_t> out;
  for (const auto& e : entries_) out.push_back(e.version);
  return out;
}

std::vector<std::pair<uint64_t, std::vector<float>>> anchor_ring::download_all() const {
  std::vector<std::pair<uint64_t, std::vector<float>>> out;
  for (const auto& e : entries_) {
    std::vector<float> host(numel_);
    be_->download(host.data(), e.value.data(), numel_);
    out.emplace_back(e.version, std::move(host));
  }
  return out;
}

// ---- merge -----------------------------------------------------------------------------------

namespace {

double norm_of(kernels::backend& be, const float* x, size_t n) {
  return n == 0 ? 0.0 : std::sqrt(be.sum_squares(x, n));
}

void weighted_average(kernels::backend& be, float* out, const std::vector<const float*>& v,
                      const std::vector<double>& c, size_t off, size_t n) {
  std::vector<const float*> ptrs(v.size());
  std::vector<float> w(v.size());
  for (size_t m = 0; m < v.size(); ++m) {
    ptrs[m] = v[m] + off;
    w[m] = static_cast<float>(c[m]);
  }
  be.weighted_sum(out + off, ptrs.data(), w.data(), static_cast<int>(ptrs.size()), n);
}

}  // namespace

result<merge_report> compute_delta(kernels::backend& be, const fragment_layout& layout,
                                   const std::vector<contribution>& contributions,
                                   const merge_options& opts, float* delta, const float* theta,
                                   const anchor_ring* ring) {
  using R = result<merge_report>;
  const size_t numel = layout.numel;
  if (contributions.empty()) return R(errc::invalid_argument, "merge: no contributions");
  if (delta == nullptr) return R(errc::invalid_argument, "merge: delta output is null");
  double wsum = 0.0;
  for (size_t m = 0; m < contributions.size(); ++m) {
    const auto& c = contributions[m];
    if (c.delta == nullptr) {
      return R(errc::invalid_argument, "merge: contribution " + std::to_string(m) + " (learner " +
                                           std::to_string(c.learner_id) + ") has a null delta");
    }
    if (!std::isfinite(c.weight) || c.weight < 0.0) {
      return R(errc::invalid_argument, "merge: contribution " + std::to_string(m) + " (learner " +
                                           std::to_string(c.learner_id) + ") has weight " +
                                           std::to_string(c.weight));
    }
    wsum += c.weight;
  }
  if (!(wsum > 0.0) || !std::isfinite(wsum)) {
    return R(errc::invalid_argument,
             "merge: the contributions' weights sum to " + std::to_string(wsum) + " (need > 0)");
  }

  // v_m: the pseudo-gradients in the chosen anchor (see merge.hpp).
  std::vector<const float*> v(contributions.size());
  std::vector<kernels::buffer<float>> shifted;
  if (opts.anchor == merge_anchor::base) {
    for (size_t m = 0; m < contributions.size(); ++m) v[m] = contributions[m].delta;
  } else {
    if (theta == nullptr || ring == nullptr) {
      return R(errc::invalid_argument, "merge: anchor = current needs theta and an anchor ring");
    }
    if (ring->numel() != numel) {
      return R(errc::invalid_argument, "merge: anchor ring holds " + std::to_string(ring->numel()) +
                                           " elements, fragment has " + std::to_string(numel));
    }
    std::vector<const float*> anchors(contributions.size());
    for (size_t m = 0; m < contributions.size(); ++m) {
      auto a = ring->find(contributions[m].base_version);
      if (!a) {
        return R(errc::version_gone, "merge: learner " +
                                         std::to_string(contributions[m].learner_id) + ": " +
                                         a.error().message);
      }
      anchors[m] = *a;
    }
    shifted.reserve(contributions.size());
    for (size_t m = 0; m < contributions.size(); ++m) {
      // v_m = (θ_now − θ@base) + delta_m = θ_now − θ_learner.
      kernels::buffer<float> buf = be.alloc<float>(numel);
      be.copy(buf.data(), contributions[m].delta, numel);
      be.axpy(buf.data(), 1.0f, theta, numel);
      be.axpy(buf.data(), -1.0f, anchors[m], numel);
      v[m] = buf.data();
      shifted.push_back(std::move(buf));
    }
  }

  merge_report report;
  report.anchor = opts.anchor;
  report.weight_sum = wsum;
  std::vector<double> c(contributions.size());
  for (size_t m = 0; m < contributions.size(); ++m) {
    c[m] = contributions[m].weight / wsum;
    report.learner_ids.push_back(contributions[m].learner_id);
    report.weights.push_back(c[m]);
  }

  double total_sq = 0.0;
  for (const auto& t : layout.tensors) {
    tensor_merge_report tr;
    tr.name = t.name;
    const size_t off = t.fragment_offset;
    const size_t n = t.numel;
    if (t.is_embedding || opts.rule == merge_rule::weighted_average) {
      tr.rule_used = merge_rule::weighted_average;
      weighted_average(be, delta, v, c, off, n);
    } else {
      // RDA (ALGORITHM.md): norm = Σ c_m‖v_m‖; direction = normalize(Σ c_m v_m/‖v_m‖).
      std::vector<const float*> ptrs;
      std::vector<float> coef;
      double target_norm = 0.0;
      double coef_sum = 0.0;
      for (size_t m = 0; m < v.size(); ++m) {
        const double nm = norm_of(be, v[m] + off, n);
        target_norm += c[m] * nm;
        if (nm > opts.zero_norm && c[m] > 0.0) {  // zero vectors contribute no direction
          ptrs.push_back(v[m] + off);
          coef.push_back(static_cast<float>(c[m] / nm));
          coef_sum += c[m];
        }
      }
      bool fallback = ptrs.empty();
      if (!fallback) {
        be.weighted_sum(delta + off, ptrs.data(), coef.data(), static_cast<int>(ptrs.size()), n);
        const double s = norm_of(be, delta + off, n);
        if (s <= opts.cancel_epsilon * coef_sum) {
          fallback = true;  // directions cancel: the sum is rounding noise
        } else {
          be.scale(delta + off, static_cast<float>(target_norm / s), n);
        }
      }
      if (fallback) {
        weighted_average(be, delta, v, c, off, n);
        tr.rule_used = merge_rule::weighted_average;
        tr.fallback = true;
      } else {
        tr.rule_used = merge_rule::rda;
      }
    }
    const double dn = norm_of(be, delta + off, n);
    tr.delta_norm = dn;
    total_sq += dn * dn;
    report.tensors.push_back(std::move(tr));
  }
  report.delta_norm = std::sqrt(total_sq);
  return report;
}

result<merge_report> outer_step(kernels::backend& be, const fragment_layout& layout,
                                const std::vector<contribution>& contributions,
                                const merge_options& opts, float* theta, float* momentum,
                                const anchor_ring* ring, float delta_scale) {
  if (!std::isfinite(delta_scale) || delta_scale <= 0.0f || delta_scale > 1.0f) {
    return wire_error{
        errc::invalid_argument,
        "outer_step: delta_scale " + std::to_string(delta_scale) + " is outside (0, 1]"};
  }
  if (theta == nullptr || momentum == nullptr) {
    return wire_error{errc::invalid_argument, "outer_step: theta or momentum is null"};
  }
  kernels::buffer<float> delta = be.alloc<float>(layout.numel);
  auto report = compute_delta(be, layout, contributions, opts, delta.data(), theta, ring);
  if (!report) return report;
  if (delta_scale != 1.0f) be.scale(delta.data(), delta_scale, layout.numel);
  // b ← μ b + Δ; θ ← θ − lr (Δ + μ b)  (Nesterov; DiLoCo arXiv 2311.08105 Alg. 1).
  be.nesterov_update(theta, momentum, delta.data(), opts.outer_lr, opts.outer_momentum,
                     layout.numel);
  return report;
}

}  // namespace dd
