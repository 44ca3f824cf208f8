// runtime/merge.cpp — Δ from pending pushes (RDA / weighted average) and the outer Nesterov step.
// Only backend ops touch fragment data, so the same code runs on host and device memory.
#include "runtime/merge.hpp"

#include "kernels/merge_ops.hpp"

#include <algorithm>
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

std::vector<double> tensor_sum_squares(const fragment_layout& layout, const float* values) {
  std::vector<double> out;
  out.reserve(layout.tensors.size());
  for (const auto& t : layout.tensors) {
    const float* x = values + t.fragment_offset;
    double acc = 0.0;
#pragma omp simd reduction(+ : acc)
    for (size_t i = 0; i < t.numel; ++i) acc += double(x[i]) * double(x[i]);
    out.push_back(acc);
  }
  return out;
}

namespace {

/// What every merge needs before it touches a tensor: the checked inputs, v_m in the chosen
/// anchor, and the normalized weights. Built once per merge; errors leave every output untouched.
struct merge_inputs {
  std::vector<const float*> v;
  /// Σ v_m² per tensor from the contributions (anchor = base), else empty (computed here).
  std::vector<const double*> sq;
  std::vector<double> c;
  std::vector<kernels::buffer<float>> shifted;  // v_m for anchor = current
  merge_report report;
};

result<merge_inputs> prepare(kernels::backend& be, const fragment_layout& layout,
                             const std::vector<contribution>& contributions,
                             const merge_options& opts, const float* theta,
                             const anchor_ring* ring) {
  using R = result<merge_inputs>;
  const size_t numel = layout.numel;
  if (contributions.empty()) return R(errc::invalid_argument, "merge: no contributions");
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
    if (c.tensor_sq != nullptr && c.tensor_sq->size() != layout.tensors.size()) {
      return R(errc::invalid_argument, "merge: contribution " + std::to_string(m) + " (learner " +
                                           std::to_string(c.learner_id) + ") brings " +
                                           std::to_string(c.tensor_sq->size()) +
                                           " tensor norms, the fragment has " +
                                           std::to_string(layout.tensors.size()) + " tensors");
    }
    wsum += c.weight;
  }
  if (!(wsum > 0.0) || !std::isfinite(wsum)) {
    return R(errc::invalid_argument,
             "merge: the contributions' weights sum to " + std::to_string(wsum) + " (need > 0)");
  }

  merge_inputs in;
  // v_m: the pseudo-gradients in the chosen anchor (see merge.hpp).
  in.v.resize(contributions.size());
  if (opts.anchor == merge_anchor::base) {
    bool all_sq = true;
    for (const auto& c : contributions) all_sq = all_sq && c.tensor_sq != nullptr;
    for (size_t m = 0; m < contributions.size(); ++m) {
      in.v[m] = contributions[m].delta;
      if (all_sq) in.sq.push_back(contributions[m].tensor_sq->data());
    }
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
    in.shifted.reserve(contributions.size());
    for (size_t m = 0; m < contributions.size(); ++m) {
      // v_m = (θ_now − θ@base) + delta_m = θ_now − θ_learner.
      kernels::buffer<float> buf = be.alloc<float>(numel);
      be.copy(buf.data(), contributions[m].delta, numel);
      be.axpy(buf.data(), 1.0f, theta, numel);
      be.axpy(buf.data(), -1.0f, anchors[m], numel);
      in.v[m] = buf.data();
      in.shifted.push_back(std::move(buf));
    }
  }

  in.report.anchor = opts.anchor;
  in.report.weight_sum = wsum;
  in.c.resize(contributions.size());
  for (size_t m = 0; m < contributions.size(); ++m) {
    in.c[m] = contributions[m].weight / wsum;
    in.report.learner_ids.push_back(contributions[m].learner_id);
    in.report.weights.push_back(in.c[m]);
  }
  return in;
}

/// The inputs and float weights of one tensor's weighted sum.
struct weighted_terms {
  std::vector<const float*> ptrs;
  std::vector<float> w;
};

weighted_terms average_terms(const merge_inputs& in, size_t off) {
  weighted_terms t;
  for (size_t m = 0; m < in.v.size(); ++m) {
    t.ptrs.push_back(in.v[m] + off);
    t.w.push_back(static_cast<float>(in.c[m]));
  }
  return t;
}

/// RDA's terms for one tensor (ALGORITHM.md): norm = Σ c_m‖v_m‖; direction = normalize(Σ c_m
/// v_m/‖v_m‖); zero vectors contribute no direction.
struct rda_terms {
  weighted_terms dir;
  double target_norm = 0.0;
  double coef_sum = 0.0;
};

rda_terms rda_terms_of(kernels::backend& be, const merge_inputs& in, const merge_options& opts,
                       size_t tensor, size_t off, size_t n) {
  rda_terms r;
  for (size_t m = 0; m < in.v.size(); ++m) {
    const double ss =
        in.sq.empty() ? (n == 0 ? 0.0 : be.sum_squares(in.v[m] + off, n)) : in.sq[m][tensor];
    const double nm = std::sqrt(ss);
    r.target_norm += in.c[m] * nm;
    if (nm > opts.zero_norm && in.c[m] > 0.0) {
      r.dir.ptrs.push_back(in.v[m] + off);
      r.dir.w.push_back(static_cast<float>(in.c[m] / nm));
      r.coef_sum += in.c[m];
    }
  }
  return r;
}

/// Where one tensor's Δ goes: into `delta` (compute_delta), or straight into the outer step
/// (outer_step: θ and b updated, Δ never stored; RDA's direction goes through `scratch`).
struct delta_sink {
  float* delta = nullptr;
  float* theta = nullptr;
  float* momentum = nullptr;
  float* scratch = nullptr;  // ≥ the tensor's numel, used from 0
  float delta_scale = 1.0f;
  float lr = 0.0f;
  float mu = 0.0f;
};

/// kernels::fused_merge_ops::weighted_sum_sq on any backend: the backend's fused loop, or its
/// single ops one after the other (the same float roundings).
double weighted_sum_sq(kernels::backend& be, float* out, const weighted_terms& t, size_t n) {
  const int k = static_cast<int>(t.ptrs.size());
  if (auto* f = kernels::fused_merge_of(be))
    return f->weighted_sum_sq(out, t.ptrs.data(), t.w.data(), k, n);
  if (k == 1 && t.ptrs[0] == out) {
    be.scale(out, t.w[0], n);  // weighted_sum may not alias; one multiply either way
  } else {
    be.weighted_sum(out, t.ptrs.data(), t.w.data(), k, n);
  }
  return n == 0 ? 0.0 : be.sum_squares(out, n);
}

/// Writes Σ w·in for tensor [off, off + n) to the sink and returns Σ (its value)² before the
/// sink's delta_scale: into Δ (compute_delta), or straight into the outer step (outer_step).
double emit(kernels::backend& be, const delta_sink& k, const weighted_terms& t, size_t off,
            size_t n) {
  if (k.delta != nullptr) return weighted_sum_sq(be, k.delta + off, t, n);
  if (auto* f = kernels::fused_merge_of(be))
    return f->weighted_sum_nesterov(k.theta + off, k.momentum + off, t.ptrs.data(), t.w.data(),
                                    static_cast<int>(t.ptrs.size()), k.delta_scale, k.lr, k.mu, n);
  kernels::buffer<float> d = be.alloc<float>(n);
  const double sq = weighted_sum_sq(be, d.data(), t, n);
  if (k.delta_scale != 1.0f) be.scale(d.data(), k.delta_scale, n);
  be.nesterov_update(k.theta + off, k.momentum + off, d.data(), k.lr, k.mu, n);
  return sq;
}

merge_report merge_tensors(kernels::backend& be, const fragment_layout& layout, merge_inputs& in,
                           const merge_options& opts, const delta_sink& sink) {
  merge_report report = std::move(in.report);
  double total_sq = 0.0;
  for (size_t ti = 0; ti < layout.tensors.size(); ++ti) {
    const auto& t = layout.tensors[ti];
    tensor_merge_report tr;
    tr.name = t.name;
    const size_t off = t.fragment_offset;
    const size_t n = t.numel;
    double dn2 = 0.0;
    tr.rule_used = merge_rule::weighted_average;
    if (t.is_embedding || opts.rule == merge_rule::weighted_average) {
      dn2 = emit(be, sink, average_terms(in, off), off, n);
    } else {
      const rda_terms r = rda_terms_of(be, in, opts, ti, off, n);
      bool fallback = r.dir.ptrs.empty();
      if (!fallback) {
        // The unscaled direction: into Δ itself, or the scratch when Δ is not stored.
        float* dir = sink.delta != nullptr ? sink.delta + off : sink.scratch;
        const double s = std::sqrt(weighted_sum_sq(be, dir, r.dir, n));
        if (s <= opts.cancel_epsilon * r.coef_sum) {
          fallback = true;  // directions cancel: the sum is rounding noise
        } else {
          // Δ = direction · (target norm / s), in place or into the outer step.
          weighted_terms scaled;
          scaled.ptrs.push_back(sink.delta != nullptr ? dir : sink.scratch);
          scaled.w.push_back(static_cast<float>(r.target_norm / s));
          if (sink.delta != nullptr) {
            dn2 = weighted_sum_sq(be, dir, scaled, n);
          } else {
            // The scratch holds this tensor from index 0, as `emit` would read it at `off`.
            delta_sink from0 = sink;
            from0.theta += off;
            from0.momentum += off;
            dn2 = emit(be, from0, scaled, 0, n);
          }
          tr.rule_used = merge_rule::rda;
        }
      }
      if (fallback) {
        dn2 = emit(be, sink, average_terms(in, off), off, n);
        tr.fallback = true;
      }
    }
    tr.delta_norm = std::sqrt(dn2);
    total_sq += dn2;
    report.tensors.push_back(std::move(tr));
  }
  report.delta_norm = std::sqrt(total_sq);
  return report;
}

size_t largest_rda_tensor(const fragment_layout& layout, const merge_options& opts) {
  size_t n = 0;
  if (opts.rule != merge_rule::rda) return 0;
  for (const auto& t : layout.tensors)
    if (!t.is_embedding) n = std::max(n, t.numel);
  return n;
}

}  // namespace

result<merge_report> compute_delta(kernels::backend& be, const fragment_layout& layout,
                                   const std::vector<contribution>& contributions,
                                   const merge_options& opts, float* delta, const float* theta,
                                   const anchor_ring* ring) {
  if (delta == nullptr) return wire_error{errc::invalid_argument, "merge: delta output is null"};
  auto in = prepare(be, layout, contributions, opts, theta, ring);
  if (!in) return in.error();
  delta_sink sink;
  sink.delta = delta;
  return merge_tensors(be, layout, *in, opts, sink);
}

result<merge_report> outer_step(kernels::backend& be, const fragment_layout& layout,
                                const std::vector<contribution>& contributions,
                                const merge_options& opts, float* theta, float* momentum,
                                const anchor_ring* ring, float delta_scale, float* scratch) {
  if (!std::isfinite(delta_scale) || delta_scale <= 0.0f || delta_scale > 1.0f) {
    return wire_error{
        errc::invalid_argument,
        "outer_step: delta_scale " + std::to_string(delta_scale) + " is outside (0, 1]"};
  }
  if (theta == nullptr || momentum == nullptr) {
    return wire_error{errc::invalid_argument, "outer_step: theta or momentum is null"};
  }
  auto in = prepare(be, layout, contributions, opts, theta, ring);
  if (!in) return in.error();
  // b ← μ b + sΔ; θ ← θ − lr (sΔ + μ b) (Nesterov; DiLoCo arXiv 2311.08105 Alg. 1), fused per
  // tensor with the weighted sums: Δ is never stored. Every check is done above, so θ and b
  // change only on success. With anchor = current θ is read while forming v_m, all before here.
  kernels::buffer<float> own_scratch;
  const size_t need = largest_rda_tensor(layout, opts);
  if (scratch == nullptr && need > 0) {
    own_scratch = be.alloc<float>(need);
    scratch = own_scratch.data();
  }
  delta_sink sink;
  sink.theta = theta;
  sink.momentum = momentum;
  sink.scratch = scratch;
  sink.delta_scale = delta_scale;
  sink.lr = opts.outer_lr;
  sink.mu = opts.outer_momentum;
  return merge_tensors(be, layout, *in, opts, sink);
}

}  // namespace dd
