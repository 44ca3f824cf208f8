// tests/actors/test_support.hpp — helpers shared by the actor tests: a CAF actor system on the
// deterministic test coordinator (manual clock, one thread) usable from GoogleTest, a tiny
// fragment layout, push builders (tests/support/wire_msgs.hpp), and the tiny experiment of the
// whole-cluster tests.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include "actors/link/atoms.hpp"
#include "messages/codec.hpp"
#include "runtime/config/experiment.hpp"
#include "runtime/fragments.hpp"
#include "runtime/quantize.hpp"
#include "runtime/tensor_info.hpp"
#include "tests/support/wire_msgs.hpp"

namespace dd::test {

/// An actor system whose scheduler is CAF's test coordinator: nothing runs until the test calls
/// run(); delayed messages fire when the test advances the manual clock.
struct coordinator {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  caf::scheduler::test_coordinator* sched = nullptr;

  coordinator() {
    cfg.set("scheduler.policy", caf::atom("testing"));
    cfg.set("logger.file-verbosity", caf::atom("quiet"));
    cfg.set("logger.console-verbosity", caf::atom("quiet"));
    sys = std::make_unique<caf::actor_system>(cfg);
    sched = &dynamic_cast<caf::scheduler::test_coordinator&>(sys->scheduler());
  }

  /// Runs every job that is ready (no time passes).
  size_t run() { return sched->run(); }

  /// Advances the manual clock by `seconds`, firing due timeouts, then runs.
  size_t advance(double seconds) {
    sched->advance_time(caf::timespan{static_cast<int64_t>(seconds * 1e9)});
    return run();
  }

  /// Seconds on the manual clock (what actors see as now).
  double now() const {
    return std::chrono::duration<double>(sched->clock().now().time_since_epoch()).count();
  }

  /// Kills `actors` and drains the queue (call before the system goes away).
  void shutdown(const std::vector<caf::actor>& actors) {
    for (const auto& a : actors)
      if (a) caf::anon_send_exit(a, caf::exit_reason::kill);
    run();
  }

  /// The same for any mix of handles (typed or not).
  template <class... Handles>
  void shutdown_all(const Handles&... handles) {
    shutdown({caf::actor_cast<caf::actor>(handles)...});
  }
};

/// Tensors of a tiny model: one ordinary 2×2 weight and a 2-element embedding (6 floats).
inline std::vector<tensor_info> tiny_tensors() {
  std::vector<tensor_info> t(2);
  t[0].name = "h.0.w";
  t[0].offset = 0;
  t[0].numel = 4;
  t[0].shape = {2, 2};
  t[0].layer = 0;
  t[1].name = "wte";
  t[1].offset = 4;
  t[1].numel = 2;
  t[1].shape = {1, 2};
  t[1].is_embedding = true;
  return t;
}

/// The single fragment holding both tiny tensors.
inline fragment_layout tiny_layout() {
  auto plan = make_fragment_plan(tiny_tensors(), 1, fragment_strategy::balanced);
  return plan->fragments.at(0);
}

/// An experiment named `name` with seed `seed`, every other value its default.
inline config::experiment named_experiment(const std::string& name, std::uint64_t seed) {
  config::experiment e;
  e.name = name;
  e.seed = seed;
  return e;
}

/// The training shape the tests' in-process jobs share: `learners` learners of batch `batch`, one
/// thread each; inner lr 3e-3 warmed up over `warmup` steps; 2 fragments, H = `interval`; outer
/// momentum 0.5; a budget of `steps` inner steps.
inline void set_small_training(config::experiment& e, int learners, int batch, int warmup,
                               int interval, std::int64_t steps) {
  e.learners.count = learners;
  e.learners.batch = batch;
  e.learners.threads = 1;
  e.inner.lr = 3e-3;
  e.inner.warmup = warmup;
  e.sync.fragments = 2;
  e.sync.interval = interval;
  e.outer.momentum = 0.5;
  e.budget.kind = config::budget_kind::steps;
  e.budget.steps = steps;
}

/// A GPT of `layers` layers, width and context `width` and 2 heads, on Tiny Shakespeare.
inline void set_tiny_gpt(config::experiment& e, int layers, int width) {
  e.data.file = std::string(DD_DATA_DIR) + "/tinyshakespeare/input.txt";
  e.model.layers = layers;
  e.model.width = width;
  e.model.heads = 2;
  e.model.context = width;
}

/// The tiny GPT experiment of the whole-cluster tests (cluster_sim, cluster_mux): 1 layer, width
/// and context 16, `learners` learners of batch 4, 2 fragments, H = 4, τ = 2, 48 steps, seed 7,
/// a checkpoint every version. The pinned digests of those tests depend on every value here.
inline config::experiment tiny_experiment(const std::string& name, int learners) {
  auto e = named_experiment(name, 7);
  set_tiny_gpt(e, 1, 16);
  set_small_training(e, learners, 4, 5, 4, 48);
  e.inner.rewarmup = 5;
  e.sync.overlap = 2;
  e.eval.every_seconds = 1.0;
  e.eval.batches = 2;
  e.checkpoint.every_versions = 1;
  return e;
}

}  // namespace dd::test
