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

/// Bits per byte of the original text for each nat per token of evaluate_loss over the same
/// windows: (batches·B·T) / (ln 2 · bytes), bytes = the text bytes of every target token of the
/// windows (token_bytes[id]; an empty token_bytes = one byte per token, the byte tokenizer,
/// giving 1 / ln 2). val_bpb = val_loss × this. Throws std::invalid_argument as evaluate_loss,
/// or when a target id has no entry in token_bytes or the targets stand for no bytes.
double bits_per_byte_per_nat(const std::vector<int32_t>& split, int B, int T, int batches,
                             const std::vector<int>& token_bytes);

}  // namespace dd
