// runtime/lr_schedule.hpp — the inner learning-rate schedule: linear warmup, then cosine decay to
// min_lr_ratio · lr (Loshchilov & Hutter 2017, SGDR eq. 5, one cycle; GPT-2/nanoGPT recipe).
// Evaluated on the learner's OWN step counter (ALGORITHM.md, inner optimizer). Pure; any thread.
#pragma once

#include <cstdint>

namespace dd {

/// Warmup + cosine schedule. Steps are 0-based inner steps.
struct lr_schedule {
  double lr = 2e-3;           ///< peak learning rate
  int64_t warmup = 0;         ///< warmup steps (0 = none)
  int64_t total = 1;          ///< step at which the cosine reaches its floor
  double min_lr_ratio = 0.1;  ///< floor = min_lr_ratio · lr

  /// lr(step): for step < warmup, lr·(step+1)/warmup; for warmup <= step < total,
  /// floor + ½(lr − floor)(1 + cos(π·(step − warmup)/(total − warmup))); afterwards the floor.
  double at(int64_t step) const;
  /// Throws std::invalid_argument naming the field when lr <= 0, warmup < 0, total < 1, or
  /// min_lr_ratio outside [0, 1].
  void validate() const;
};

}  // namespace dd
