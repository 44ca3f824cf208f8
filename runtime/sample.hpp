// runtime/sample.hpp — autoregressive text generation from a trained GPT (`dd-node sample`).
//
// Each new token: one forward pass over the last min(len, context) tokens (B = 1), the logits
// of the last position divided by the temperature, restricted to the top-k, softmax in double,
// then one draw from a dd::rng stream seeded with `seed` (u = rng::uniform() ∈ (0, 1]; the first
// token whose cumulative probability reaches u·Σp). Same model, prompt and options: same text,
// on any backend whose logits agree to the last bit (the reference backend; the cpu backend
// on one machine). Called by the thread that owns the model's backend.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/gpt.hpp"
#include "runtime/rng.hpp"

namespace dd {

/// How to sample.
struct sample_options {
  int tokens = 256;          ///< new tokens to generate (>= 0)
  double temperature = 1.0;  ///< > 0 divides the logits; 0 = greedy (argmax, lowest id on ties)
  int top_k = 0;             ///< keep the k highest logits (ties: lower id first); 0 = all
  uint64_t seed = 1337;      ///< seed of the draws
};

/// The next-token choice from one row of logits (vocab values) under `opt` (temperature,
/// top_k), drawing from `r` (one uniform() per call unless greedy). Throws
/// std::invalid_argument when logits is empty, temperature < 0 or not finite, or top_k < 0.
int32_t sample_next(const std::vector<float>& logits, const sample_options& opt, rng& r);

/// Generates opt.tokens tokens after `prompt` (token ids in [0, vocab); at least one) and
/// returns only the new ones. Throws std::invalid_argument for an empty prompt, an id out of
/// range (naming its position) or bad options (see sample_next).
std::vector<int32_t> sample_tokens(gpt& model, const std::vector<int32_t>& prompt,
                                   const sample_options& opt);

}  // namespace dd
