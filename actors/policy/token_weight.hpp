// actors/policy/token_weight.hpp — merge weights of contributions (token weighting).
//
// Pure functions. The fragment owner calls them at merge time; any thread may call them.
//
// Source: ALGORITHM.md, "Fragment owner" — w_{m,p} = tokens²/steps (Decoupled DiLoCo,
// arXiv 2604.21428, token-weighted merging).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dd::policy {

/// Why a weight was or was not produced.
enum class weight_reason {
  ok,           ///< weight computed / weights normalized.
  zero_steps,   ///< steps == 0: a push with no inner step is malformed.
  zero_tokens,  ///< tokens == 0 with steps > 0: malformed (a step consumes tokens).
  empty,        ///< normalize: no weights.
  negative,     ///< normalize: a weight is negative or not finite.
  zero_sum,     ///< normalize: every weight is 0.
};

/// Stable machine name of a reason.
const char* to_string(weight_reason r);

/// Result of `token_weight`.
struct weight_decision {
  bool accepted = false;
  double weight = 0.0;  ///< w = tokens² / steps (units: tokens × tokens-per-step).
  weight_reason reason = weight_reason::ok;
  std::string message;
};

/// Token weight of one push: w = tokens² / steps = (tokens since the learner last received the
/// fragment) × (tokens per step). `tokens` and `steps` are the push's counters for the fragment.
/// Rejects steps == 0 and tokens == 0 with a reason. Computed in double (exact up to 2^53).
weight_decision token_weight(std::uint64_t tokens, std::uint64_t steps);

/// Result of `normalize_weights`.
struct normalized_weights {
  bool ok = false;
  std::vector<double> weights;  ///< same order as the input, summing to 1 when ok.
  weight_reason reason = weight_reason::ok;
  std::string message;
};

/// w_m / Σ w_m. Rejects an empty list, negative or non-finite entries, and an all-zero list.
normalized_weights normalize_weights(const std::vector<double>& weights);

}  // namespace dd::policy
