// actors/nodes/experiment_views.cpp — see job_config.hpp.
#include "actors/nodes/experiment_views.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <thread>

#include "runtime/eval.hpp"
#include "runtime/rng.hpp"
#include "util/duration.hpp"

namespace dd::actors {

fragment_strategy to_strategy(config::fragment_strategy_kind k) {
  switch (k) {
    case config::fragment_strategy_kind::balanced: return fragment_strategy::balanced;
    case config::fragment_strategy_kind::layer: return fragment_strategy::layer;
    case config::fragment_strategy_kind::strided: return fragment_strategy::strided;
  }
  return fragment_strategy::balanced;
}

std::string backend_name(config::backend_kind k) {
  switch (k) {
    case config::backend_kind::cpu: return "cpu";
    case config::backend_kind::cuda: return "cuda";
    case config::backend_kind::reference: return "reference";
  }
  return "cpu";
}

model_config model_of(const config::experiment& e) {
  model_config g;
  g.kind = config::to_string(e.model.kind);
  g.vocab = e.model.vocab;
  g.context = e.model.context;
  g.layers = e.model.layers;
  g.heads = e.model.heads;
  g.width = e.model.width;
  g.moe.experts = e.model.experts;
  g.moe.top_k = e.model.top_k;
  g.moe.capacity_factor = e.model.capacity_factor;
  g.moe.aux_loss = e.model.aux_loss;
  g.vit.rows = e.model.rows;
  g.vit.cols = e.model.cols;
  g.vit.patch = e.model.patch;
  g.vit.classes = e.model.classes;
  g.vit.pooling = e.model.pooling == "mean" ? vit_pooling::mean : vit_pooling::cls;
  return g;
}

eval_spec eval_spec_of(const config::experiment& e, const text_dataset& data) {
  eval_spec s;
  s.data_file = e.data.file;
  s.train_fraction = e.data.train_fraction;
  s.validation_offset = data.train().size();
  s.validation_tokens = data.validation().size();
  s.batch = e.learners.batch;
  s.seq_len = e.model.context;
  s.windows = final_eval_windows(e, s.validation_tokens);
  s.backend = e.learners.backend == config::backend_kind::reference ? "reference" : "cpu";
  s.tokenizer = e.data.tokenizer;
  if (e.data.kind == config::data_kind::tokens) {
    s.data_file = e.data.files.empty() ? std::string() : e.data.files.front();
    s.token_files = e.data.files;
    s.token_validation_files = e.data.validation_files;
    s.token_format = e.data.format;
    s.token_vocab = e.model.vocab;
  }
  return s;
}

std::int64_t final_eval_windows(const config::experiment& e, std::size_t validation_tokens) {
  if (e.eval.batches > 0) return static_cast<std::int64_t>(e.eval.batches) * e.learners.batch;
  if (e.eval.windows > 0) return e.eval.windows;
  return std::max<std::int64_t>(1, windows_in_split(validation_tokens, e.model.context));
}

std::int64_t periodic_eval_windows(const config::experiment& e) {
  if (e.eval.batches > 0) return static_cast<std::int64_t>(e.eval.batches) * e.learners.batch;
  return e.eval.periodic_windows;
}

bool synchronous(const config::experiment& e) {
  return e.sync.min_quorum.synchronous(static_cast<size_t>(e.learners.count));
}

caf::timespan span(double s) { return util::to_timespan(s); }

fragment_plan plan_of(const config::experiment& e) {
  auto plan = make_fragment_plan(model_tensors(model_of(e)), e.sync.fragments,
                                 to_strategy(e.sync.strategy));
  if (!plan) throw std::invalid_argument("sync.fragments: " + plan.error().message);
  return std::move(*plan);
}

uint64_t steps_per_learner_of(const config::experiment& e) {
  const int64_t M = std::max(1, e.learners.count);
  const int64_t tps = e.tokens_per_step();
  switch (e.budget.kind) {
    case config::budget_kind::steps:
      return static_cast<uint64_t>(std::max<int64_t>(1, e.budget.steps));
    case config::budget_kind::tokens:
      return static_cast<uint64_t>(
          std::max<int64_t>(1, (e.budget.tokens + M * tps - 1) / (M * tps)));
    case config::budget_kind::seconds:
      return static_cast<uint64_t>(e.inner.decay_steps > 0 ? e.inner.decay_steps : 1000);
  }
  return 1;
}

int learner_threads_of(const config::experiment& e, int learners_here) {
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  return e.learners.threads > 0 ? e.learners.threads
                                : std::max(1, static_cast<int>(hw) / std::max(1, learners_here));
}

std::string fnv1a_hex(const void* data, size_t size) {
  uint64_t h = 1469598103934665603ULL;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) {
    h ^= p[i];
    h *= 1099511628211ULL;
  }
  char buf[17];
  static const char* digits = "0123456789abcdef";
  for (int i = 15; i >= 0; --i) {
    buf[i] = digits[h & 0xF];
    h >>= 4;
  }
  buf[16] = '\0';
  return buf;
}

}  // namespace dd::actors
