// runtime/eval.hpp — validation loss of a model on a fixed, deterministic slice of a token split.
// Forward passes only (no gradient is computed or touched). Called by whoever owns the model's
// backend (the train command, the evaluator actor).
#pragma once

#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <vector>

namespace dd {

class model;

/// Mean next-token cross-entropy of a token model in nats per token (= nats/char for the byte
/// tokenizer; model::evaluate's loss, so without moe_gpt's auxiliary loss) over `batches` batches
/// of (B, T). The slice is fixed: row r of batch b is the window starting at token ((b·B + r) mod
/// W)·T of `split`, W = (split.size() − 1) / T windows (wrapping when the split is shorter than
/// batches·B windows); targets are the inputs shifted by one. Every batch has equal weight. Throws
/// std::invalid_argument when batches < 1, B < 1, T < 1 or the split has fewer than T + 1 tokens.
/// `stop`, when given, is read before every batch: once true the evaluation throws
/// evaluation_stopped (a run that must end does not wait for a long evaluation).
double evaluate_loss(model& m, const std::vector<int32_t>& split, int B, int T, int batches,
                     const std::atomic<bool>* stop = nullptr);

/// Thrown by evaluate_loss when its `stop` flag was set.
struct evaluation_stopped : std::runtime_error {
  evaluation_stopped() : std::runtime_error("the evaluation was stopped: the run is ending") {}
};

}  // namespace dd
