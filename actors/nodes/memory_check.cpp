// actors/nodes/memory_check.cpp — see memory_check.hpp.
#include "actors/nodes/memory_check.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>

#include "actors/nodes/experiment_views.hpp"
#include "runtime/fragments.hpp"
#include "runtime/model.hpp"

namespace dd::actors {

namespace {

constexpr uint64_t f32 = 4;

uint64_t file_size_or_zero(const std::string& path) {
  std::error_code ec;
  const auto n = path.empty() ? 0 : std::filesystem::file_size(path, ec);
  return ec ? 0 : static_cast<uint64_t>(n);
}

/// Bytes of one model's activation buffers for a (B, T) batch (everything ensure_activations
/// allocates: kept for backward, the shared backward scratch, logits and their gradient).
uint64_t activation_bytes(const model_config& m, uint64_t B) {
  const bool vit = m.kind == "vit";
  const vit_config v = vit ? m.vit_shape() : vit_config{};
  const uint64_t T = vit ? static_cast<uint64_t>(v.tokens()) : static_cast<uint64_t>(m.context);
  const uint64_t C = static_cast<uint64_t>(m.width), NH = static_cast<uint64_t>(m.heads),
                 L = static_cast<uint64_t>(m.layers);
  const uint64_t V = vit ? static_cast<uint64_t>(v.classes) : static_cast<uint64_t>(m.vocab);
  const uint64_t BT = B * T, att = B * NH * T * T;
  // A mixture of experts runs its MLP on capacity rows: about top_k × capacity_factor per token.
  const double mlp = m.kind == "moe_gpt" ? m.moe.top_k * m.moe.capacity_factor : 1.0;
  const uint64_t mlp_row = static_cast<uint64_t>(std::ceil(8.0 * static_cast<double>(C) * mlp));
  const uint64_t router = m.kind == "moe_gpt" ? 2 * static_cast<uint64_t>(m.moe.experts) + 2 : 0;
  // Per block: ln1, qkv, atty, res2, ln2, res3 (8C), the MLP (8C), norms' statistics (4), the
  // attention matrix; the scratch shared by the blocks: tmp, dln, datty, dqkv (6C), the MLP's
  // gradients (8C) and datt; outside the blocks: encoded, lnf, dres (3C), logits, probs and
  // dlogits (3V), token ids, targets, losses and lnf's statistics (5).
  const uint64_t block = BT * (8 * C + mlp_row + 4 + router) + att;
  const uint64_t scratch = BT * (6 * C + mlp_row) + att;
  const uint64_t outside = BT * (3 * C + 5) + (vit ? B : BT) * 3 * V;
  return f32 * (L * block + scratch + outside);
}

}  // namespace

nlohmann::json memory_part::to_json() const {
  return {{"parameters", parameters},
          {"optimizer", optimizer},
          {"activations", activations},
          {"buffers", buffers},
          {"total", total()}};
}

uint64_t memory_estimate::syncer() const noexcept {
  return static_cast<uint64_t>(owners) * owner.total() + evaluator.total() + data;
}

uint64_t memory_estimate::learner_node(int here) const noexcept {
  return static_cast<uint64_t>(std::max(0, here)) * learner.total() + data;
}

uint64_t memory_estimate::whole_run() const noexcept {
  return static_cast<uint64_t>(learners) * learner.total() +
         static_cast<uint64_t>(owners) * owner.total() + evaluator.total() + data;
}

nlohmann::json memory_estimate::to_json() const {
  return {{"learner", learner.to_json()},
          {"owner", owner.to_json()},
          {"evaluator", evaluator.to_json()},
          {"data", data},
          {"learners", learners},
          {"owners", owners},
          {"syncer_node", syncer()},
          {"learner_node", learner_node(1)},
          {"whole_run", whole_run()}};
}

memory_estimate estimate_memory(const config::experiment& e) {
  memory_estimate est;
  const model_config m = model_of(e);
  const auto tensors = model_tensors(m);
  uint64_t P = 0;
  for (const auto& t : tensors) P += t.numel;
  const uint64_t B = static_cast<uint64_t>(std::max(1, e.learners.batch));
  const uint64_t M = static_cast<uint64_t>(std::max(1, e.learners.count));
  est.learners = static_cast<int>(M);
  est.owners = std::max(1, e.sync.fragments);
  // The largest fragment: the plan's when it can be made (resolve refuses one that cannot).
  uint64_t largest =
      (P + static_cast<uint64_t>(est.owners) - 1) / static_cast<uint64_t>(est.owners);
  auto plan = make_fragment_plan(tensors, est.owners, to_strategy(e.sync.strategy));
  if (plan) {
    largest = 0;
    for (const auto& f : plan->fragments) largest = std::max<uint64_t>(largest, f.numel);
  }
  est.learner.parameters = f32 * P;
  est.learner.optimizer = f32 * 3 * P;  // gradients, AdamW's m and v
  est.learner.activations = activation_bytes(m, B);
  // Per fragment the global value it last received and the delta it pushes, and one push's
  // encoded message in flight per fragment.
  est.learner.buffers = f32 * 3 * P;
  est.owner.parameters = f32 * largest;
  est.owner.optimizer = f32 * largest;  // outer momentum
  // One pending delta per learner, and its chunks being reassembled.
  est.owner.buffers = f32 * 2 * M * largest;
  est.evaluator.parameters = f32 * P;
  est.evaluator.optimizer = f32 * P;  // the model's gradient buffer (allocated, unused)
  est.evaluator.activations = activation_bytes(m, B);
  est.data = e.data.kind == config::data_kind::idx
                 ? file_size_or_zero(e.data.images) + file_size_or_zero(e.data.labels)
                 // The text, its tokens (int32 per byte) and the learners' shards of them.
                 : 9 * file_size_or_zero(e.data.file);
  return est;
}

memory_limits read_memory_limits() {
  memory_limits out;
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t value = 0;
  std::string unit;
  while (in >> key >> value) {
    std::getline(in, unit);
    if (key == "MemAvailable:") {
      out.available = value * 1024;
      break;
    }
  }
  rlimit r{};
  if (::getrlimit(RLIMIT_AS, &r) == 0 && r.rlim_cur != RLIM_INFINITY)
    out.address_space = static_cast<uint64_t>(r.rlim_cur);
  return out;
}

uint64_t address_space_headroom(int threads) {
  return (uint64_t{1} << 30) + static_cast<uint64_t>(std::max(1, threads)) * (uint64_t{64} << 20);
}

std::string format_bytes(uint64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= double(uint64_t{1} << 30))
    return fmt::format("{:.2f} GiB", b / double(uint64_t{1} << 30));
  return fmt::format("{:.1f} MiB", b / double(uint64_t{1} << 20));
}

std::string memory_refusal(const std::string& what, uint64_t need, int threads,
                           const memory_limits& limits) {
  std::string why;
  if (limits.available > 0 && need + memory_headroom > limits.available)
    why = fmt::format("{} needs about {} (+ {} headroom) but {} is available (MemAvailable)", what,
                      format_bytes(need), format_bytes(memory_headroom),
                      format_bytes(limits.available));
  else if (limits.address_space > 0 &&
           need + address_space_headroom(threads) > limits.address_space)
    why = fmt::format(
        "{} needs about {} (+ {} headroom for thread stacks and BLAS buffers) but "
        "the address-space limit (RLIMIT_AS, ulimit -v) is {}",
        what, format_bytes(need), format_bytes(address_space_headroom(threads)),
        format_bytes(limits.address_space));
  if (why.empty()) return "";
  return why +
         "; see the estimate with `dd-node resolve`, shrink the model, batch or context, or "
         "pass --force-memory to start anyway";
}

std::string fragment_plan_error(const config::experiment& e) {
  auto plan = make_fragment_plan(model_tensors(model_of(e)), e.sync.fragments,
                                 to_strategy(e.sync.strategy));
  return plan ? "" : "sync.fragments: " + plan.error().message;
}

std::string check_before_start(const config::experiment& e, start_check_for who, int learners_here,
                               bool force) {
  if (auto why = fragment_plan_error(e); !why.empty()) return why;
  if (force) return "";
  auto est = estimate_memory(e);
  // Learners on a GPU hold their model, optimizer and activations in device memory, which this
  // check does not see: only their host-side buffers count.
  if (e.learners.backend == config::backend_kind::cuda)
    est.learner.parameters = est.learner.optimizer = est.learner.activations = 0;
  const int M = std::max(1, e.learners.count);
  uint64_t need = 0;
  int threads = 1;
  std::string what;
  switch (who) {
    case start_check_for::whole_run:
      need = est.whole_run();
      threads = M * learner_threads_of(e, M);
      what = fmt::format(
          "this run ({} learners, {} fragment owners and the evaluator in one "
          "process)",
          M, est.owners);
      break;
    case start_check_for::launch:
      // The syncer and every learner process on this host, each with its copy of the data.
      need = est.whole_run() + static_cast<uint64_t>(M) * est.data;
      threads = M * learner_threads_of(e, M);
      what = fmt::format("this launch (the syncer and {} learners on this host)", M);
      break;
    case start_check_for::syncer_node:
      need = est.syncer();
      threads = 2;
      what = fmt::format("this syncer ({} fragment owners and the evaluator)", est.owners);
      break;
    case start_check_for::learner_node:
      need = est.learner_node(learners_here);
      threads = learners_here * learner_threads_of(e, learners_here);
      what = fmt::format("this learner node ({} learner{})", learners_here,
                         learners_here == 1 ? "" : "s");
      break;
  }
  return memory_refusal(what, need, threads, read_memory_limits());
}

std::string describe(const memory_estimate& est, const memory_limits& limits, int threads) {
  auto part = [](const memory_part& p) {
    return fmt::format("{} (parameters {}, optimizer {}, activations {}, buffers {})",
                       format_bytes(p.total()), format_bytes(p.parameters),
                       format_bytes(p.optimizer), format_bytes(p.activations),
                       format_bytes(p.buffers));
  };
  std::string out = fmt::format(
      "  memory estimate: per learner {}\n"
      "                   per fragment owner {}\n"
      "                   evaluator {}\n"
      "                   data {}\n"
      "  dd-node run (every role in one process) {}; a syncer node {}; a learner node {} per "
      "learner\n",
      part(est.learner), part(est.owner), part(est.evaluator), format_bytes(est.data),
      format_bytes(est.whole_run()), format_bytes(est.syncer()), format_bytes(est.learner.total()));
  const std::string why = memory_refusal("dd-node run", est.whole_run(), threads, limits);
  out += why.empty()
             ? fmt::format("  fits this machine ({} available{})\n", format_bytes(limits.available),
                           limits.address_space > 0
                               ? ", address space " + format_bytes(limits.address_space)
                               : std::string())
             : "  on this machine: " + why + "\n";
  return out;
}

}  // namespace dd::actors
