// actors/policy/token_weight.cpp — token weights (see token_weight.hpp).
#include "actors/policy/token_weight.hpp"

#include <cmath>
#include <string>

namespace dd::policy {

const char* to_string(weight_reason r) {
  switch (r) {
    case weight_reason::ok: return "ok";
    case weight_reason::zero_steps: return "zero_steps";
    case weight_reason::zero_tokens: return "zero_tokens";
    case weight_reason::empty: return "empty";
    case weight_reason::negative: return "negative";
    case weight_reason::zero_sum: return "zero_sum";
  }
  return "unknown";
}

weight_decision token_weight(std::uint64_t tokens, std::uint64_t steps) {
  weight_decision d;
  if (steps == 0) {
    d.reason = weight_reason::zero_steps;
    d.message = "rejected: push reports 0 inner steps (" + std::to_string(tokens) + " tokens)";
    return d;
  }
  if (tokens == 0) {
    d.reason = weight_reason::zero_tokens;
    d.message = "rejected: push reports 0 tokens over " + std::to_string(steps) + " steps";
    return d;
  }
  const double t = static_cast<double>(tokens);
  d.weight = t * t / static_cast<double>(steps);
  d.accepted = true;
  d.reason = weight_reason::ok;
  d.message = "token weight " + std::to_string(tokens) + "^2/" + std::to_string(steps);
  return d;
}

normalized_weights normalize_weights(const std::vector<double>& weights) {
  normalized_weights r;
  if (weights.empty()) {
    r.reason = weight_reason::empty;
    r.message = "cannot normalize an empty weight list";
    return r;
  }
  double sum = 0.0;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    if (!std::isfinite(weights[i]) || weights[i] < 0.0) {
      r.reason = weight_reason::negative;
      r.message = "weight " + std::to_string(i) + " is negative or not finite";
      return r;
    }
    sum += weights[i];
  }
  if (!(sum > 0.0) || !std::isfinite(sum)) {
    r.reason = weight_reason::zero_sum;
    r.message = "weights sum to 0 (or overflow)";
    return r;
  }
  r.weights.reserve(weights.size());
  for (double w : weights) r.weights.push_back(w / sum);
  r.ok = true;
  r.reason = weight_reason::ok;
  r.message = "normalized " + std::to_string(weights.size()) + " weights";
  return r;
}

}  // namespace dd::policy
