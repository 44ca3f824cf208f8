// runtime/eval.cpp — see eval.hpp.
#include "runtime/eval.hpp"

#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "runtime/model.hpp"

namespace dd {

double evaluate_loss(model& m, const std::vector<int32_t>& split, int B, int T, int batches,
                     const std::atomic<bool>* stop) {
  if (batches < 1 || B < 1 || T < 1)
    throw std::invalid_argument(
        fmt::format("evaluate_loss: batches {}, B {}, T {} must all be >= 1", batches, B, T));
  if (split.size() < static_cast<size_t>(T) + 1)
    throw std::invalid_argument(fmt::format(
        "evaluate_loss: split has {} tokens, needs at least T+1 = {}", split.size(), T + 1));
  const size_t W = (split.size() - 1) / static_cast<size_t>(T);
  const size_t BT = static_cast<size_t>(B) * T;
  model_batch batch;
  batch.B = B;
  batch.T = T;
  batch.inputs.resize(BT);
  batch.targets.resize(BT);
  auto& in = batch.inputs;
  auto& tg = batch.targets;
  double sum = 0.0;
  for (int b = 0; b < batches; ++b) {
    if (stop != nullptr && stop->load(std::memory_order_relaxed)) throw evaluation_stopped();
    for (int r = 0; r < B; ++r) {
      const size_t start = ((static_cast<size_t>(b) * B + r) % W) * static_cast<size_t>(T);
      for (int t = 0; t < T; ++t) {
        in[static_cast<size_t>(r) * T + t] = split[start + t];
        tg[static_cast<size_t>(r) * T + t] = split[start + t + 1];
      }
    }
    sum += m.evaluate(batch).loss;
  }
  return sum / batches;
}

double bits_per_byte_per_nat(const std::vector<int32_t>& split, int B, int T, int batches,
                             const std::vector<int>& token_bytes) {
  if (batches < 1 || B < 1 || T < 1)
    throw std::invalid_argument(fmt::format(
        "bits_per_byte_per_nat: batches {}, B {}, T {} must all be >= 1", batches, B, T));
  if (split.size() < static_cast<size_t>(T) + 1)
    throw std::invalid_argument(
        fmt::format("bits_per_byte_per_nat: split has {} tokens, needs at least T+1 = {}",
                    split.size(), T + 1));
  const size_t W = (split.size() - 1) / static_cast<size_t>(T);
  double bytes = 0.0;
  const double tokens = static_cast<double>(batches) * B * T;
  if (token_bytes.empty()) {
    bytes = tokens;
  } else {
    for (int b = 0; b < batches; ++b)
      for (int r = 0; r < B; ++r) {
        const size_t start = ((static_cast<size_t>(b) * B + r) % W) * static_cast<size_t>(T);
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
