// runtime/eval.hpp — validation loss of a model on a fixed, deterministic slice of a token split.
// Forward passes only (no gradient is computed or touched). Called by whoever owns the model's
// backend (the train command, the evaluator actor).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <vector>

namespace dd {

class model;

/// Mean next-token cross-entropy of a token model in nats per token (= nats/char for the byte
/// tokenizer; model::evaluate's loss, so without moe_gpt's auxiliary loss) over the first
/// `windows` windows of `split`: window w is the T + 1 tokens starting at token (w mod W)·T,
/// W = (split.size() − 1) / T (wrapping when `windows` > W); targets are the inputs shifted by
/// one. `windows` = 0 scores all W windows, the whole split. The windows depend on T and the split
/// only, never on B: B is how many windows one forward pass takes, so experiments with different
/// training batches are scored on the same windows. Every window has equal weight (the batches'
/// means weighted by their rows; when every batch is full, the plain mean of the batch means).
/// Throws std::invalid_argument when windows < 0, B < 1, T < 1 or the split has fewer than T + 1
/// tokens. `stop`, when given, is read before every batch: once true the evaluation throws
/// evaluation_stopped (a run that must end does not wait for a long evaluation).
double evaluate_windows(model& m, const std::vector<int32_t>& split, int B, int T,
                        std::int64_t windows, const std::atomic<bool>* stop = nullptr);

/// evaluate_windows over `batches`·B windows: `batches` full batches of (B, T). Throws
/// std::invalid_argument when batches < 1 (and as evaluate_windows).
double evaluate_loss(model& m, const std::vector<int32_t>& split, int B, int T, int batches,
                     const std::atomic<bool>* stop = nullptr);

/// The W of evaluate_windows: how many windows of T + 1 tokens `split_tokens` tokens hold
/// (0 when fewer than T + 1).
std::int64_t windows_in_split(std::size_t split_tokens, int T);

/// Thrown by evaluate_loss when its `stop` flag was set.
struct evaluation_stopped : std::runtime_error {
  evaluation_stopped() : std::runtime_error("the evaluation was stopped: the run is ending") {}
};

/// Bits per byte of the original text for each nat per token of evaluate_windows over the same
/// windows: (windows·T) / (ln 2 · bytes), bytes = the text bytes of every target token of the
/// windows (token_bytes[id]; an empty token_bytes = one byte per token, the byte tokenizer,
/// giving 1 / ln 2). val_bpb = val_loss × this. `windows` = 0: all W. Throws
/// std::invalid_argument as evaluate_windows, or when a target id has no entry in token_bytes or
/// the targets stand for no bytes.
double bits_per_byte_per_nat(const std::vector<int32_t>& split, int T, std::int64_t windows,
                             const std::vector<int>& token_bytes);

}  // namespace dd
