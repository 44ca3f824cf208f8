// actors/policy/grace.hpp — the grace window ξ_grace and the EMAs it is computed from.
//
// Pure functions and one small value type (`ema`). The fragment owner actor keeps three `ema`
// values (ξ_step, ξ_quorum, ξ_sync) in its state and calls `compute_grace` when quorum is newly
// reached; the goodput simulator does the same. Any thread may call them.
//
// Source: ALGORITHM.md, "Fragment owner" and "Defaults" (γ = 0.8, grace_max = 2 × ξ_step, EMA
// smoothing 0.2 are our choices; the paper, arXiv 2604.21428, bounds the grace window by the slack
// the overlap τ leaves).
#pragma once

#include <string>
#include <vector>

namespace dd::policy {

/// Exponential moving average: ema = (1 − a) · ema + a · x; the first sample initializes it.
/// Units are the caller's (seconds for the grace EMAs). Default smoothing a = 0.2 (ALGORITHM.md,
/// "Defaults"; not in the paper).
class ema {
 public:
  /// `smoothing` is a in (0, 1]; values outside are clamped into (0, 1].
  explicit ema(double smoothing = 0.2);

  /// Folds in one sample; non-finite samples are ignored (returns false), else returns true.
  bool update(double x);

  /// True once a sample has been folded in.
  bool has_value() const { return initialized_; }

  /// Current average; 0 before the first sample.
  double value() const { return value_; }

  /// Smoothing a.
  double smoothing() const { return smoothing_; }

 private:
  double smoothing_;
  double value_ = 0.0;
  bool initialized_ = false;
};

/// How the grace window is chosen.
enum class grace_mode {
  adaptive,  ///< clamp(γ · (τ · ξ_step − ξ_quorum − ξ_sync), 0, grace_max).
  fixed,     ///< a constant `fixed_s` seconds.
  off,       ///< no grace: merge as soon as quorum is reached.
};

/// Grace-window configuration; also the experiment's `sync.grace` (runtime/config/experiment.hpp).
struct grace_config {
  grace_mode mode = grace_mode::adaptive;
  double gamma = 0.8;         ///< γ, safety margin in [0, 1] (ours; default 0.8).
  double fixed_s = 0.0;       ///< window for mode == fixed (seconds, >= 0).
  double grace_max_s = -1.0;  ///< upper bound (seconds); < 0 means max_factor × ξ_step.
  double max_factor = 2.0;    ///< cap relative to ξ_step when grace_max_s < 0 (default 2).
};

/// Why `compute_grace` returned its window.
enum class grace_reason {
  off,               ///< mode off: 0 s.
  fixed,             ///< mode fixed: fixed_s.
  adaptive,          ///< adaptive, inside [0, grace_max].
  clamped_to_zero,   ///< adaptive, τ · ξ_step − ξ_quorum − ξ_sync <= 0: no slack left.
  clamped_to_max,    ///< adaptive, capped at grace_max.
  no_step_estimate,  ///< adaptive but ξ_step is unknown (<= 0 or not finite): 0 s.
  invalid_config,    ///< negative fixed_s, γ outside [0, 1], τ < 0 or non-finite input: 0 s.
};

/// Stable machine name of a reason.
const char* to_string(grace_reason r);

/// Result of `compute_grace`.
struct grace_decision {
  double grace_s = 0.0;  ///< the window in seconds (>= 0).
  grace_reason reason = grace_reason::off;
  std::string message;  ///< human-readable, with the numbers used.
};

/// The step time ξ_step is sized from, given the live learners' step-time EMAs (seconds): their
/// lower median, the ⌈n/2⌉-th smallest, so that fewer than half of the learners — one
/// straggler, whatever M ≥ 2 — cannot stretch the window (the mean once let one learner 60×
/// slower than three others raise every window about 13× and halve their merge rate).
/// Non-finite and non-positive samples are ignored; 0 when none is left.
double robust_step_time(std::vector<double> step_times_s);

/// The grace window (ALGORITHM.md, "Fragment owner"):
///   ξ_grace = clamp(γ · (τ · ξ_step − ξ_quorum − ξ_sync), 0, grace_max),
/// grace_max defaulting to 2 · ξ_step. Inputs: `tau_steps` = τ, the overlap in inner steps
/// (paper default 2); `xi_step_s` = ξ_step, EMA of a learner's inner-step time (s);
/// `xi_quorum_s` = ξ_quorum, EMA of round start → quorum (s); `xi_sync_s` = ξ_sync, EMA of merge +
/// broadcast (s). Never returns a negative or non-finite window.
grace_decision compute_grace(const grace_config& config, double tau_steps, double xi_step_s,
                             double xi_quorum_s, double xi_sync_s);

}  // namespace dd::policy
