// runtime/merge.hpp — a fragment owner's outer step: merge the pending pseudo-gradients into Δ
// (RDA or weighted average, token weights) and apply outer Nesterov (ALGORITHM.md "Fragment
// owner", merge). Runs on any kernels::backend through its ops only (weighted_sum, sum_squares,
// scale, nesterov_update, axpy, copy, and the fused loops of kernels/merge_ops.hpp where the
// backend has them), so the same code runs on the CPU and on CUDA.
//
// Signs. A learner pushes delta_m = base_p − θ_learner (ALGORITHM.md learner loop), so Δ is a
// descent direction that the owner SUBTRACTS: θ_p ← θ_p − lr·(Δ + μ·b_p).
//   anchor = base    (default): v_m = delta_m.
//   anchor = current (paper):   v_m = (θ_now − θ@base_version) + delta_m = θ_now − θ_learner,
//                               i.e. the learner's change measured from the owner's current θ;
//                               with lr = 1, μ = 0 and one contributor, θ becomes θ_learner.
// Who calls it: the fragment owner actor (one thread at a time, like its backend).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "messages/error.hpp"
#include "runtime/fragments.hpp"

namespace dd {

/// How non-embedding tensors are merged. Embedding tensors always use the weighted average.
enum class merge_rule : uint8_t {
  /// Radial-directional averaging per tensor (ALGORITHM.md "Fragment owner"):
  /// norm = Σ w_m‖v_m‖ / Σ w_m; direction = normalize(Σ w_m v_m/‖v_m‖); Δ = norm · direction.
  rda,
  /// Δ = Σ w_m v_m / Σ w_m.
  weighted_average,
};

/// What v_m is measured against (see the file comment).
enum class merge_anchor : uint8_t { base, current };

/// "rda" | "weighted_average"/"average"; "base" | "current". errc::invalid_argument otherwise.
result<merge_rule> parse_merge_rule(std::string_view s);
result<merge_anchor> parse_merge_anchor(std::string_view s);
std::string_view to_string(merge_rule r) noexcept;
std::string_view to_string(merge_anchor a) noexcept;

/// Token weight w = tokens² / steps (ALGORITHM.md: tokens since the learner last received the
/// fragment × tokens per step). 0 when steps == 0 or tokens == 0. Computed in double.
double token_weight(uint64_t tokens, uint64_t steps) noexcept;

/// Outer-step configuration (defaults: ALGORITHM.md "Defaults").
struct merge_options {
  merge_rule rule = merge_rule::rda;
  merge_anchor anchor = merge_anchor::base;
  /// Outer Nesterov learning rate and momentum μ.
  float outer_lr = 0.7f;
  float outer_momentum = 0.9f;
  /// RDA falls back to the weighted average when ‖Σ_m c_m v_m/‖v_m‖‖ ≤ cancel_epsilon · Σ_m c_m
  /// (c_m the normalized weights of the non-zero contributors): the directions cancel, so their
  /// sum is dominated by rounding. Relative, so independent of M and of the weights' scale.
  double cancel_epsilon = 1e-5;
  /// A tensor slice with ‖v‖ ≤ zero_norm counts as a zero vector (contributes no direction).
  double zero_norm = 1e-30;
};

/// One pending push, already decoded and uploaded to the backend.
struct contribution {
  /// delta_m, backend memory, (fragment numel) floats.
  const float* delta = nullptr;
  /// Merge weight w_m ≥ 0 (usually token_weight(tokens, steps)); finite.
  double weight = 0.0;
  /// Version of the global fragment delta_m was taken against (used with anchor = current).
  uint64_t base_version = 0;
  /// For the report only.
  int32_t learner_id = -1;
  /// Σ delta² per tensor of the layout (tensor_sum_squares), taken when the push was checked on
  /// arrival, so that RDA need not read every contribution once more for its norms. Used with
  /// anchor = base when every contribution has it; null: the merge computes the norms.
  const std::vector<double>* tensor_sq = nullptr;
};

/// Σ x² (double) of each tensor of `layout` over host memory `values` (layout.numel floats),
/// in layout order. Not finite exactly when the tensor holds an Inf or NaN (x² of a finite
/// float never overflows a double), so one pass both checks a push and gives RDA its norms.
std::vector<double> tensor_sum_squares(const fragment_layout& layout, const float* values);

/// Per-tensor outcome of a merge.
struct tensor_merge_report {
  std::string name;
  /// The rule that produced this tensor's Δ (weighted_average for embeddings and fallbacks).
  merge_rule rule_used = merge_rule::rda;
  /// True when RDA was asked for but fell back to the weighted average (directions cancelled,
  /// or every contributor's slice was a zero vector).
  bool fallback = false;
  /// ‖Δ‖ over this tensor.
  double delta_norm = 0.0;
};

/// Outcome of compute_delta / outer_step.
struct merge_report {
  std::vector<tensor_merge_report> tensors;
  /// Contributors' learner ids and normalized weights w_m / Σ w (same order as the input).
  std::vector<int32_t> learner_ids;
  std::vector<double> weights;
  /// Σ w_m before normalization.
  double weight_sum = 0.0;
  merge_anchor anchor = merge_anchor::base;
  /// ‖Δ‖ over the whole fragment.
  double delta_norm = 0.0;
};

/// The last R versions of a fragment's θ, kept in backend memory for anchor = current. The owner
/// records θ after every outer step (and the initial/restored θ); the oldest is dropped.
class anchor_ring {
 public:
  /// `numel` elements per entry, `capacity` R ≥ 1 entries (R = max_staleness + 1 covers every
  /// push that is not stale). Allocates R·numel floats on `be` lazily.
  anchor_ring(kernels::backend& be, size_t numel, size_t capacity);

  /// Stores a copy of θ (backend memory, numel) as `version`; replaces an entry with the same
  /// version; evicts the oldest when full.
  void record(uint64_t version, const float* theta);
  /// Same from host memory (checkpoint restore).
  void record_host(uint64_t version, const float* theta_host);
  /// θ at `version` (backend memory), or errc::version_gone naming the version and the held range.
  result<const float*> find(uint64_t version) const;
  /// Versions held, oldest first.
  std::vector<uint64_t> versions() const;
  /// Host copy of every entry, oldest first (for owner_checkpoint::anchors).
  std::vector<std::pair<uint64_t, std::vector<float>>> download_all() const;

  size_t numel() const noexcept { return numel_; }
  size_t capacity() const noexcept { return capacity_; }
  size_t size() const noexcept { return entries_.size(); }

 private:
  struct entry {
    uint64_t version = 0;
    kernels::buffer<float> value;
  };
  kernels::backend* be_;
  size_t numel_;
  size_t capacity_;
  std::vector<entry> entries_;  // oldest first
};

/// Δ (backend memory, layout.numel) from the contributions. `theta` is the owner's current θ
/// (backend, layout.numel) and `ring` its anchor ring; both are read only with anchor = current
/// (ring may be null with anchor = base). Errors: errc::invalid_argument (no contributions, a
/// null delta, a negative/non-finite weight, Σ w = 0, anchor = current without ring/theta, ring
/// numel ≠ layout.numel); errc::version_gone when a contribution's base_version is not in the
/// ring (the owner rejects that push as stale). Δ is written only on success.
result<merge_report> compute_delta(kernels::backend& be, const fragment_layout& layout,
                                   const std::vector<contribution>& contributions,
                                   const merge_options& opts, float* delta,
                                   const float* theta = nullptr, const anchor_ring* ring = nullptr);

/// compute_delta, then the outer Nesterov step (Sutskever et al. 2013; DiLoCo arXiv 2311.08105
/// Alg. 1): b ← μ b + Δ; θ ← θ − lr (Δ + μ b). θ and momentum are backend memory (layout.numel).
/// The caller bumps its version and records θ in the ring afterwards. On error θ and b are
/// untouched.
///
/// `delta_scale` s ∈ (0, 1] multiplies Δ before the step (b ← μ b + sΔ): a fragment owner that
/// merges the pushes of n of L live learners passes s = n / L so that a merge moves the global
/// model by its share of all learners' progress (owner_options::scale_partial_merges). Errors:
/// errc::invalid_argument when s is outside (0, 1] or not finite.
///
/// `scratch` (backend memory, at least the largest non-embedding tensor's numel floats, not
/// aliasing any input) holds an RDA tensor's direction between its two passes; null: the merge
/// allocates one. Same results as compute_delta followed by the step, up to the order of the
/// double sums (the norms), see tests/messages/merge_test.cpp "FusedOuterStepMatchesTheOldMath".
result<merge_report> outer_step(kernels::backend& be, const fragment_layout& layout,
                                const std::vector<contribution>& contributions,
                                const merge_options& opts, float* theta, float* momentum,
                                const anchor_ring* ring = nullptr, float delta_scale = 1.0f,
                                float* scratch = nullptr);

}  // namespace dd
