// actors/nodes/role_contexts.cpp — see role_contexts.hpp.
#include "actors/nodes/role_contexts.hpp"

#include <algorithm>
#include <utility>

#include "actors/services/fault_hooks.hpp"

namespace dd::actors {

learner_config learner_config_of(const config::experiment& e, int32_t i, uint64_t steps_per_learner,
                                 const fragment_plan& plan, int threads, monitor_hdl monitor,
                                 const text_dataset* data, const image_dataset* images,
                                 bool simulated_time, double sim_step_s) {
  const int M = e.learners.count;
  lr_schedule sched;
  sched.lr = e.inner.lr;
  sched.warmup = e.inner.warmup;
  sched.total =
      e.inner.decay_steps > 0 ? e.inner.decay_steps : static_cast<int64_t>(steps_per_learner);
  sched.total = std::max<int64_t>(sched.total, sched.warmup + 1);
  sched.min_lr_ratio =
      e.inner.schedule == config::schedule_kind::constant ? 1.0 : e.inner.min_lr_ratio;
  learner_config cfg;
  auto* c = &cfg;
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
  c->lr_clock =
      e.inner.clock == config::schedule_clock::global ? clock_source::global : clock_source::own;
  c->push_clock =
      e.push_clock() == config::schedule_clock::global ? clock_source::global : clock_source::own;
  c->data = data;
  c->images = images;
  c->plan = plan;
  c->sync_interval = e.sync.interval;
  c->max_inflight = e.sync.max_inflight;
  c->final_push = e.sync.final_push;
  c->window_chunks = e.sync.window_chunks;
  c->apply = e.outer.apply == config::apply_kind::rebase
                 ? fragment_apply::rebase()
                 : fragment_apply::overwrite(e.outer.mixing_alpha);
  c->wire = e.sync.wire;
  c->barrier =
      synchronous(e) && M > 1 ? barrier_policy::wait(e.sync.overlap, 10.0) : barrier_policy::off();
  c->max_steps =
      e.budget.kind == config::budget_kind::steps ? static_cast<uint64_t>(e.budget.steps) : 0;
  c->speed = static_cast<size_t>(i) < e.learners.speed.size()
                 ? e.learners.speed[static_cast<size_t>(i)]
                 : 1.0;
  c->jitter = e.learners.jitter;
  c->backend = backend_name(e.learners.backend);
  c->threads = threads;
  c->monitor = std::move(monitor);
  c->timer = simulated_time ? step_timer::simulated(sim_step_s) : step_timer::wall();
  return cfg;
}

learner_services learner_services_of(const node_services& node) {
  learner_services s;
  s.log = node.log;
  s.step_faults = learner_step_faults(node.faults, node.log);
  s.gate = node.gate;
  s.link.faults = node.faults;
  s.link.log = node.log;
  s.link.channel = node.channel;
  return s;
}

supervisor_config supervisor_config_of(const config::experiment& e, child_kind kind,
                                       supervisor_report_hdl job) {
  supervisor_config c;
  c.kind = kind;
  c.restart = e.restart;
  c.job = std::move(job);
  return c;
}

supervisor_services supervisor_services_of(const node_services& node) {
  supervisor_services s;
  s.log = node.log;
  return s;
}

monitor_config monitor_config_of(const config::experiment& e, int fragments) {
  const int M = e.learners.count;
  monitor_config m;
  m.learners = M;
  m.fragments = fragments;
  m.token_budget =
      e.budget.kind == config::budget_kind::tokens ? static_cast<uint64_t>(e.budget.tokens) : 0;
  m.experiment_json = config::to_json(e).dump();
  m.tokens_per_step = static_cast<uint64_t>(std::max<int64_t>(0, e.tokens_per_step()));
  m.align_resume_to_group = synchronous(e) && M > 1;
  m.uptime_quorum = e.sync.min_quorum.resolve(static_cast<size_t>(M));
  m.uptime_last_step =
      e.budget.kind == config::budget_kind::steps ? static_cast<uint64_t>(e.budget.steps) : 0;
  return m;
}

owner_options owner_options_of(const config::experiment& e, const fragment_layout& layout,
                               const std::string& checkpoint_path, int checkpoint_every) {
  owner_options o;
  o.layout = layout;
  o.quorum = e.sync.min_quorum;
  o.grace = e.sync.grace;
  o.tau_steps = e.sync.overlap;
  o.ema_smoothing = e.sync.ema;
  o.max_staleness = static_cast<uint64_t>(std::max(0, e.outer.max_staleness));
  o.merge.rule =
      e.outer.merge == config::merge_kind::rda ? merge_rule::rda : merge_rule::weighted_average;
  o.merge.anchor =
      e.outer.anchor == config::anchor_kind::base ? merge_anchor::base : merge_anchor::current;
  o.merge.outer_lr = static_cast<float>(e.outer.lr);
  o.merge.outer_momentum =
      e.outer.kind == config::outer_kind::sgd ? 0.0f : static_cast<float>(e.outer.momentum);
  o.token_weighting = e.outer.token_weighting;
  o.scale_partial_merges = e.outer.scale_partial_merges;
  o.max_norm_ratio = e.sync.max_norm_ratio;
  o.broadcast_encoding = e.sync.broadcast_wire;
  o.max_tokens_per_step = static_cast<uint64_t>(std::max<int64_t>(0, e.tokens_per_step()));
  int every = checkpoint_every >= 0 ? checkpoint_every : e.checkpoint.every_versions;
  o.checkpoint_every = static_cast<uint64_t>(std::max(0, every));
  o.checkpoint_path = checkpoint_path;
  return o;
}

evaluator_config evaluator_config_of(const config::experiment& e, const fragment_plan& plan,
                                     const text_dataset* data, const image_dataset* images) {
  evaluator_config c;
  c.model = model_of(e);
  c.plan = plan;
  c.data = data;
  c.images = images;
  c.batch = e.learners.batch;
  c.seq_len = e.model.context;
  c.windows = periodic_eval_windows(e);
  c.final_windows = data != nullptr ? final_eval_windows(e, data->validation().size()) : 0;
  c.every_seconds = e.eval.every_seconds;
  c.every_steps = e.eval.every_steps;
  c.learners = e.learners.count;
  // The reference backend is the bit-reproducible one (no BLAS kernel chosen per CPU): an
  // experiment on it evaluates on it too, so its losses are the same on every machine.
  c.backend = e.learners.backend == config::backend_kind::reference ? "reference" : "cpu";
  c.threads = 1;
  return c;
}

}  // namespace dd::actors
