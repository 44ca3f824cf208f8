// runtime/sample.cpp — see sample.hpp.
#include "runtime/sample.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include <fmt/format.h>

#include "runtime/rng.hpp"

namespace dd {

namespace {

void check_options(const sample_options& opt) {
  if (!std::isfinite(opt.temperature) || opt.temperature < 0.0)
    throw std::invalid_argument(
        fmt::format("sample: temperature must be a finite number >= 0, got {}", opt.temperature));
  if (opt.top_k < 0)
    throw std::invalid_argument(fmt::format("sample: top-k must be >= 0, got {}", opt.top_k));
  if (opt.tokens < 0)
    throw std::invalid_argument(fmt::format("sample: tokens must be >= 0, got {}", opt.tokens));
}

}  // namespace

int32_t sample_next(const std::vector<float>& logits, const sample_options& opt, rng& r) {
  check_options(opt);
  if (logits.empty()) throw std::invalid_argument("sample: empty logits");
  const size_t V = logits.size();
  // Candidate ids by descending logit, lower id first on ties.
  std::vector<int32_t> ids(V);
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)];
  });
  if (opt.temperature == 0.0) return ids.front();
  const size_t k = opt.top_k > 0 ? std::min(V, static_cast<size_t>(opt.top_k)) : V;
  const double top = static_cast<double>(logits[static_cast<size_t>(ids.front())]);
  std::vector<double> p(k);
  double sum = 0.0;
  for (size_t i = 0; i < k; ++i) {
    p[i] = std::exp((static_cast<double>(logits[static_cast<size_t>(ids[i])]) - top) /
                    opt.temperature);
    sum += p[i];
  }
  const double u = r.uniform() * sum;
  double acc = 0.0;
  for (size_t i = 0; i < k; ++i) {
    acc += p[i];
    if (acc >= u) return ids[i];
  }
  return ids[k - 1];  // rounding: u·Σp a hair above the running sum
}

std::vector<int32_t> sample_tokens(gpt& model, const std::vector<int32_t>& prompt,
                                   const sample_options& opt) {
  check_options(opt);
  if (prompt.empty()) throw std::invalid_argument("sample: the prompt is empty");
  const int V = model.config().vocab;
  for (size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || prompt[i] >= V)
      throw std::invalid_argument(fmt::format(
          "sample: prompt token {} at position {} is outside [0, {})", prompt[i], i, V));
  rng r(opt.seed);
  std::vector<int32_t> seq = prompt, out;
  const size_t ctx = static_cast<size_t>(model.config().context);
  for (int n = 0; n < opt.tokens; ++n) {
    const size_t T = std::min(seq.size(), ctx);
    std::vector<int32_t> in(seq.end() - static_cast<std::ptrdiff_t>(T), seq.end());
    // Targets are required by forward(); their loss is not used.
    const std::vector<int32_t> dummy(T, 0);
    model.forward(in, dummy, 1, static_cast<int>(T));
    const int32_t next = sample_next(model.logits(T - 1), opt, r);
    seq.push_back(next);
    out.push_back(next);
  }
  return out;
}

}  // namespace dd
