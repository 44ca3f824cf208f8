// runtime/lr_schedule.cpp — see lr_schedule.hpp.
#include "runtime/lr_schedule.hpp"

#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

namespace dd {

double lr_schedule::at(int64_t step) const {
  if (step < 0) step = 0;
  if (step < warmup) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
  const double floor_lr = min_lr_ratio * lr;
  if (step >= total || total <= warmup) return floor_lr;
  const double progress = static_cast<double>(step - warmup) / static_cast<double>(total - warmup);
  constexpr double pi = 3.14159265358979323846;
  return floor_lr + 0.5 * (lr - floor_lr) * (1.0 + std::cos(pi * progress));
}

void lr_schedule::validate() const {
  if (!(lr > 0.0))
    throw std::invalid_argument(fmt::format("lr schedule: lr must be > 0, got {}", lr));
  if (warmup < 0)
    throw std::invalid_argument(fmt::format("lr schedule: warmup must be >= 0, got {}", warmup));
  if (total < 1)
    throw std::invalid_argument(
        fmt::format("lr schedule: total steps must be >= 1, got {}", total));
  if (!(min_lr_ratio >= 0.0 && min_lr_ratio <= 1.0))
    throw std::invalid_argument(
        fmt::format("lr schedule: min_lr_ratio must be in [0, 1], got {}", min_lr_ratio));
}

}  // namespace dd
