// actors/job_config.cpp — see job_config.hpp.
#include "actors/job_config.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <thread>

#include "runtime/rng.hpp"

namespace dd::actors {

payload_encoding to_encoding(config::wire_format w) {
  switch (w) {
    case config::wire_format::fp32: return payload_encoding::fp32;
    case config::wire_format::bf16: return payload_encoding::bf16;
    case config::wire_format::int8: return payload_encoding::int8;
    case config::wire_format::int4: return payload_encoding::int4;
  }
  return payload_encoding::fp32;
}

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

bool synchronous(const config::experiment& e) {
  return e.sync.min_quorum.synchronous(e.learners.count);
}

policy::quorum_spec quorum_of(const config::experiment& e) {
  const auto& q = e.sync.min_quorum;
  if (q.is_fraction) return policy::quorum_spec::of_fraction(q.fraction);
  return policy::quorum_spec::of_count(static_cast<size_t>(std::max(1, q.count)));
}

policy::grace_config grace_of(const config::experiment& e) {
  policy::grace_config g;
  switch (e.sync.grace.mode) {
    case config::grace_mode::adaptive: g.mode = policy::grace_mode::adaptive; break;
    case config::grace_mode::fixed: g.mode = policy::grace_mode::fixed; break;
    case config::grace_mode::off: g.mode = policy::grace_mode::off; break;
  }
  g.gamma = e.sync.grace.gamma;
  g.fixed_s = e.sync.grace.fixed_seconds;
  // The cap is relative to ξ_step: grace_max = sync.grace.max_factor × ξ_step.
  g.grace_max_s = -1.0;
  g.max_factor = e.sync.grace.max_factor;
  return g;
}

policy::restart_config restart_of(const config::experiment& e) {
  policy::restart_config r;
  r.max_restarts = static_cast<size_t>(std::max(0, e.restart.max_restarts));
  r.window_s = e.restart.window_seconds;
  r.backoff_base_s = e.restart.backoff_seconds;
  r.backoff_cap_s = e.restart.backoff_cap_seconds;
  return r;
}

caf::timespan span(double s) {
  return caf::timespan{static_cast<int64_t>(std::ceil(std::max(0.0, s) * 1e9))};
}

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

std::shared_ptr<const learner_context> make_learner_context(
    const config::experiment& e, int32_t i, uint64_t steps_per_learner, const fragment_plan& plan,
    int threads, caf::actor monitor, const learner_services& services, bool simulated_time,
    double sim_step_s) {
  const int M = e.learners.count;
  lr_schedule sched;
  sched.lr = e.inner.lr;
  sched.warmup = e.inner.warmup;
  sched.total =
      e.inner.decay_steps > 0 ? e.inner.decay_steps : static_cast<int64_t>(steps_per_learner);
  sched.total = std::max<int64_t>(sched.total, sched.warmup + 1);
  sched.min_lr_ratio =
      e.inner.schedule == config::schedule_kind::constant ? 1.0 : e.inner.min_lr_ratio;
  auto c = std::make_shared<learner_context>();
  c->learner_id = i;
  auto& t = c->trainer;
  t.model = model_of(e);
  t.batch = e.learners.batch;
  t.seq_len = e.model.context;
  t.schedule = sched;
  t.optimizer.beta1 = static_cast<float>(e.inner.beta1);
  t.optimizer.beta2 = static_cast<float>(e.inner.beta2);
  t.optimizer.eps = static_cast<float>(e.inner.eps);
  t.optimizer.weight_decay = static_cast<float>(e.inner.weight_decay);
  t.grad_clip = e.inner.grad_clip;
  t.seed = e.seed;
  t.learner = i;
  t.learners = M;
  t.sharding = e.data.sharding == config::sharding_kind::interleaved ? shard_layout::interleaved
                                                                     : shard_layout::contiguous;
  c->rewarmup_steps = e.inner.rewarmup;
  c->global_schedule = e.inner.clock == config::schedule_clock::global;
  c->global_push_clock = e.push_clock() == config::schedule_clock::global;
  c->data = services.data;
  c->plan = plan;
  c->sync_interval = e.sync.interval;
  c->overlap = e.sync.overlap;
  c->max_inflight = e.sync.max_inflight;
  c->mixing_alpha = e.outer.mixing_alpha;
  c->rebase = e.outer.apply == config::apply_kind::rebase;
  c->wire = to_encoding(e.sync.wire);
  c->barrier = synchronous(e) && M > 1;
  c->barrier_timeout_s = 10.0;
  c->max_steps =
      e.budget.kind == config::budget_kind::steps ? static_cast<uint64_t>(e.budget.steps) : 0;
  c->speed = static_cast<size_t>(i) < e.learners.speed.size()
                 ? e.learners.speed[static_cast<size_t>(i)]
                 : 1.0;
  c->jitter = e.learners.jitter;
  c->backend = backend_name(e.learners.backend);
  c->threads = threads;
  c->monitor = std::move(monitor);
  c->log = services.log;
  c->faults = services.faults;
  c->gate = services.gate;
  c->simulated_time = simulated_time;
  c->sim_step_s = sim_step_s;
  return c;
}

namespace {

fault_spec::kind fault_kind(config::chaos_action a) {
  switch (a) {
    case config::chaos_action::kill: return fault_spec::kind::kill_learner;
    case config::chaos_action::slow: return fault_spec::kind::slow_learner;
    case config::chaos_action::drop_push: return fault_spec::kind::drop_push;
    case config::chaos_action::delay_push: return fault_spec::kind::delay_push;
    case config::chaos_action::kill_owner: return fault_spec::kind::kill_owner;
    default: return fault_spec::kind::start_live;  // the message kinds (is_live_message_action)
  }
}

/// The live fault a DSL message kind starts.
live_fault::kind live_kind(config::chaos_action a) {
  switch (a) {
    case config::chaos_action::dup_push: return live_fault::kind::dup_push;
    case config::chaos_action::reorder_push: return live_fault::kind::reorder_push;
    case config::chaos_action::corrupt_push: return live_fault::kind::corrupt_push;
    case config::chaos_action::drop_broadcast: return live_fault::kind::drop_broadcast;
    case config::chaos_action::dup_broadcast: return live_fault::kind::dup_broadcast;
    case config::chaos_action::delay_broadcast: return live_fault::kind::delay_broadcast;
    case config::chaos_action::reorder_broadcast: return live_fault::kind::reorder_broadcast;
    case config::chaos_action::nan: return live_fault::kind::nan_step;
    default: return live_fault::kind::fail_step;
  }
}

}  // namespace

std::vector<fault_spec> fault_specs_of(const config::experiment& exp, uint64_t steps_per_learner,
                                       int fragments) {
  std::vector<fault_spec> faults;
  for (const auto& ev : exp.chaos.events) {
    // Process and network kinds are fired from outside by dd-chaos (dd-node launch starts it).
    if (config::chaos_layer_of(ev.action) != config::chaos_layer::in_process) continue;
    fault_spec f;
    f.what = fault_kind(ev.action);
    if (config::is_live_message_action(ev.action)) {
      f.live.what = live_kind(ev.action);
      f.live.learner = ev.target;
      if (ev.params.contains("count")) f.live.count = ev.params["count"].get<int64_t>();
      if (f.live.what == live_fault::kind::delay_broadcast) f.live.delay_s = ev.delay;
      f.duration_s = ev.duration;
    }
    f.target = ev.target;
    f.factor = ev.factor;
    f.delay_s = ev.delay;
    f.downtime_s =
        f.what == fault_spec::kind::kill_learner || f.what == fault_spec::kind::kill_owner
            ? ev.duration
            : 0.0;
    if (f.what == fault_spec::kind::slow_learner) f.duration_s = ev.duration;
    f.damage_checkpoint = ev.damage_checkpoint;
    double step = 0;
    switch (ev.trigger) {
      case config::chaos_trigger::at_step: step = ev.at; break;
      case config::chaos_trigger::at_time: f.at_seconds = ev.at; break;
      case config::chaos_trigger::at_fraction:
        if (exp.budget.kind == config::budget_kind::seconds)
          f.at_seconds = ev.at * exp.budget.seconds;
        else
          step = ev.at * static_cast<double>(steps_per_learner);
        break;
    }
    if (f.what == fault_spec::kind::kill_owner)
      step = std::max(1.0, step / std::max(1, exp.sync.interval));
    f.at_step = static_cast<uint64_t>(std::llround(std::max(0.0, step)));
    faults.push_back(f);
  }
  if (exp.chaos.random.mtbf_seconds > 0.0) {
    const auto& rc = exp.chaos.random;
    random_recovery rec;
    rec.mean_s = rc.recovery.mean;
    rec.sigma = rc.recovery.sigma;
    rec.shape = rc.recovery.shape;
    switch (rc.recovery.dist) {
      case config::recovery_dist::fixed: rec.dist = random_recovery::distribution::fixed; break;
      case config::recovery_dist::lognormal:
        rec.dist = random_recovery::distribution::lognormal;
        break;
      case config::recovery_dist::weibull: rec.dist = random_recovery::distribution::weibull; break;
      case config::recovery_dist::exponential:
        rec.dist = random_recovery::distribution::exponential;
        break;
    }
    const double horizon =
        exp.budget.kind == config::budget_kind::seconds ? exp.budget.seconds : 86400.0;
    const uint64_t seed = rc.seed != 0 ? rc.seed : exp.seed;
    if (rc.target != config::chaos_target_kind::owners)
      for (const auto& f : random_fault_schedule(fault_spec::kind::kill_learner, exp.learners.count,
                                                 rc.mtbf_seconds, rec, horizon, seed))
        faults.push_back(f);
    if (rc.target != config::chaos_target_kind::learners)
      for (const auto& f :
           random_fault_schedule(fault_spec::kind::kill_owner, fragments, rc.mtbf_seconds, rec,
                                 horizon, derive_seed(seed, 1000)))
        faults.push_back(f);
  }
  return faults;
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
