// runtime/eval.cpp — see eval.hpp.
#include "runtime/eval.hpp"

#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "runtime/model.hpp"

namespace dd {

namespace {

/// The checks evaluate_windows and bits_per_byte_per_nat share; returns W.
size_t check_windows(const char* who, size_t split_tokens, int T, std::int64_t windows) {
  if (windows < 0 || T < 1)
    throw std::invalid_argument(
        fmt::format("{}: windows {} must be >= 0 and T {} >= 1", who, windows, T));
  if (split_tokens < static_cast<size_t>(T) + 1)
    throw std::invalid_argument(
        fmt::format("{}: split has {} tokens, needs at least T+1 = {}", who, split_tokens, T + 1));
  return (split_tokens - 1) / static_cast<size_t>(T);
}

}  // namespace

std::int64_t windows_in_split(std::size_t split_tokens, int T) {
  if (T < 1 || split_tokens < static_cast<size_t>(T) + 1) return 0;
  return static_cast<std::int64_t>((split_tokens - 1) / static_cast<size_t>(T));
}

double evaluate_windows(model& m, const std::vector<int32_t>& split, int B, int T,
                        std::int64_t windows, const std::atomic<bool>* stop) {
  if (B < 1) throw std::invalid_argument(fmt::format("evaluate_windows: B {} must be >= 1", B));
  const size_t W = check_windows("evaluate_windows", split.size(), T, windows);
  const size_t N = windows == 0 ? W : static_cast<size_t>(windows);
  model_batch batch;
  batch.T = T;
  double sum = 0.0;           // batch means, weighted by rows
  double sum_of_means = 0.0;  // batch means, unweighted (every batch full: the same mean)
  size_t batches = 0;
  for (size_t first = 0; first < N; first += static_cast<size_t>(B)) {
    if (stop != nullptr && stop->load(std::memory_order_relaxed)) throw evaluation_stopped();
    const size_t rows = std::min(static_cast<size_t>(B), N - first);
    batch.B = static_cast<int>(rows);
    batch.inputs.resize(rows * static_cast<size_t>(T));
    batch.targets.resize(rows * static_cast<size_t>(T));
    for (size_t r = 0; r < rows; ++r) {
      const size_t start = ((first + r) % W) * static_cast<size_t>(T);
      for (int t = 0; t < T; ++t) {
        batch.inputs[r * T + t] = split[start + t];
        batch.targets[r * T + t] = split[start + t + 1];
      }
    }
    const double loss = m.evaluate(batch).loss;
    sum += loss * static_cast<double>(rows);
    sum_of_means += loss;
    ++batches;
  }
  if (N % static_cast<size_t>(B) == 0) return sum_of_means / static_cast<double>(batches);
  return sum / static_cast<double>(N);
}

double evaluate_loss(model& m, const std::vector<int32_t>& split, int B, int T, int batches,
                     const std::atomic<bool>* stop) {
  if (batches < 1 || B < 1 || T < 1)
    throw std::invalid_argument(
        fmt::format("evaluate_loss: batches {}, B {}, T {} must all be >= 1", batches, B, T));
  return evaluate_windows(m, split, B, T, static_cast<std::int64_t>(batches) * B, stop);
}

double bits_per_byte_per_nat(const std::vector<int32_t>& split, int T, std::int64_t windows,
                             const std::vector<int>& token_bytes) {
  const size_t W = check_windows("bits_per_byte_per_nat", split.size(), T, windows);
  const size_t N = windows == 0 ? W : static_cast<size_t>(windows);
  double bytes = 0.0;
  const double tokens = static_cast<double>(N) * T;
  if (token_bytes.empty()) {
    bytes = tokens;
  } else {
    for (size_t w = 0; w < N; ++w) {
      const size_t start = (w % W) * static_cast<size_t>(T);
      for (int t = 0; t < T; ++t) {
        const int32_t id = split[start + t + 1];
        if (id < 0 || static_cast<size_t>(id) >= token_bytes.size())
          throw std::invalid_argument(fmt::format(
              "bits_per_byte_per_nat: token {} has no byte length (tokenizer of {} ids)", id,
              token_bytes.size()));
        bytes += token_bytes[static_cast<size_t>(id)];
      }
    }
  }
  if (!(bytes > 0))
    throw std::invalid_argument("bits_per_byte_per_nat: the windows' targets stand for no bytes");
  return tokens / (std::log(2.0) * bytes);
}

}  // namespace dd
