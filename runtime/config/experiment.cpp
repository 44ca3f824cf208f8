// runtime/config/experiment.cpp — enum spellings and the resolved JSON form (see experiment.hpp).
#include "runtime/config/experiment.hpp"
#include "runtime/config/run_dir_default.hpp"

#include <algorithm>
#include <cmath>

#include "runtime/config/detail/enums.hpp"

namespace dd::config {

namespace {

template <class E>
const char* spell(E v) {
  return detail::enum_names<E>::values[static_cast<std::size_t>(v)];
}

}  // namespace

const char* to_string(model_kind v) { return spell(v); }
const char* to_string(tokenizer_kind v) { return spell(v); }
const char* to_string(backend_kind v) { return spell(v); }
const char* to_string(schedule_kind v) { return spell(v); }
const char* to_string(outer_kind v) { return spell(v); }
const char* to_string(merge_kind v) { return spell(v); }
const char* to_string(anchor_kind v) { return spell(v); }
const char* to_string(apply_kind v) { return spell(v); }
const char* to_string(schedule_clock v) { return spell(v); }
const char* to_string(sharding_kind v) { return spell(v); }
const char* to_string(data_kind v) { return spell(v); }
const char* to_string(fragment_strategy_kind v) { return spell(v); }
const char* to_string(grace_mode v) { return spell(v); }
const char* to_string(budget_kind v) { return spell(v); }
const char* to_string(chaos_trigger v) { return spell(v); }
const char* to_string(chaos_target_kind v) { return spell(v); }
const char* to_string(recovery_dist v) { return spell(v); }

std::string default_run_dir(const std::string& name) { return "runs/" + name; }

std::string run_dir_of(const experiment& e) {
  return e.run_dir.empty() ? default_run_dir(e.name) : e.run_dir;
}

nlohmann::json to_json(const experiment& e) {
  using nlohmann::json;
  json j;
  j["name"] = e.name;
  j["description"] = e.description;
  j["seed"] = e.seed;
  j["run_dir"] = e.run_dir;
  j["model"] = {{"kind", to_string(e.model.kind)}, {"vocab", e.model.vocab},
                {"context", e.model.context},      {"layers", e.model.layers},
                {"heads", e.model.heads},          {"width", e.model.width}};
  if (e.model.kind == model_kind::moe_gpt) {
    j["model"]["experts"] = e.model.experts;
    j["model"]["top_k"] = e.model.top_k;
    j["model"]["capacity_factor"] = e.model.capacity_factor;
    j["model"]["aux_loss"] = e.model.aux_loss;
  }
  if (!e.model.init_from.empty()) j["model"]["init_from"] = e.model.init_from;
  if (e.model.kind == model_kind::vit) {
    j["model"]["rows"] = e.model.rows;
    j["model"]["cols"] = e.model.cols;
    j["model"]["patch"] = e.model.patch;
    j["model"]["classes"] = e.model.classes;
    j["model"]["pooling"] = e.model.pooling;
  }
  if (e.data.kind == data_kind::idx) {  // text configs print as before kinds existed
    j["data"] = {{"kind", to_string(e.data.kind)},
                 {"images", e.data.images},
                 {"labels", e.data.labels},
                 {"train_fraction", e.data.train_fraction},
                 {"sharding", to_string(e.data.sharding)}};
  } else if (e.data.kind == data_kind::tokens) {
    j["data"] = {{"kind", to_string(e.data.kind)},
                 {"files", e.data.files},
                 {"format", e.data.format},
                 {"train_fraction", e.data.train_fraction},
                 {"sharding", to_string(e.data.sharding)},
                 {"tokenizer", e.data.tokenizer}};
    if (!e.data.validation_files.empty()) j["data"]["validation_files"] = e.data.validation_files;
  } else {
    j["data"] = {{"file", e.data.file},
                 {"train_fraction", e.data.train_fraction},
                 {"sharding", to_string(e.data.sharding)},
                 {"tokenizer", e.data.tokenizer}};
  }
  j["learners"] = {{"count", e.learners.count},
                   {"batch", e.learners.batch},
                   {"backend", to_string(e.learners.backend)},
                   {"devices", e.learners.devices},
                   {"threads", e.learners.threads},
                   {"speed", e.learners.speed},
                   {"jitter", e.learners.jitter}};
  j["inner"] = {{"lr", e.inner.lr},
                {"warmup", e.inner.warmup},
                {"schedule", to_string(e.inner.schedule)},
                {"min_lr_ratio", e.inner.min_lr_ratio},
                {"decay_steps", e.inner.decay_steps},
                {"beta1", e.inner.beta1},
                {"beta2", e.inner.beta2},
                {"eps", e.inner.eps},
                {"weight_decay", e.inner.weight_decay},
                {"grad_clip", e.inner.grad_clip},
                {"rewarmup", e.inner.rewarmup},
                {"schedule_clock", to_string(e.inner.clock)}};
  j["outer"] = {{"kind", to_string(e.outer.kind)},
                {"lr", e.outer.lr},
                {"momentum", e.outer.momentum},
                {"merge", to_string(e.outer.merge)},
                {"embedding_merge", to_string(e.outer.embedding_merge)},
                {"anchor", to_string(e.outer.anchor)},
                {"apply", to_string(e.outer.apply)},
                {"mixing_alpha", e.outer.mixing_alpha},
                {"max_staleness", e.outer.max_staleness},
                {"token_weighting", e.outer.token_weighting},
                {"scale_partial_merges", e.outer.scale_partial_merges}};
  json k = e.sync.min_quorum.is_fraction() ? json{{"fraction", e.sync.min_quorum.fraction}}
                                           : json(e.sync.min_quorum.count);
  j["sync"] = {{"fragments", e.sync.fragments},
               {"strategy", to_string(e.sync.strategy)},
               {"interval", e.sync.interval},
               {"overlap", e.sync.overlap},
               {"max_inflight", e.sync.max_inflight},
               {"final_push", e.sync.final_push},
               {"window_chunks", e.sync.window_chunks},
               {"max_norm_ratio", e.sync.max_norm_ratio},
               {"push_clock", to_string(e.push_clock())},
               {"min_quorum", k},
               {"grace",
                {{"mode", to_string(e.sync.grace.mode)},
                 {"gamma", e.sync.grace.gamma},
                 {"max_factor", e.sync.grace.max_factor},
                 {"fixed_seconds", e.sync.grace.fixed_s}}},
               {"ema", e.sync.ema},
               {"wire", std::string(dd::to_string(e.sync.wire))},
               {"broadcast_wire", std::string(dd::to_string(e.sync.broadcast_wire))}};
  j["eval"] = {{"every_seconds", e.eval.every_seconds},
               {"every_steps", e.eval.every_steps},
               {"windows", e.eval.windows},
               {"periodic_windows", e.eval.periodic_windows}};
  if (e.eval.batches > 0) j["eval"]["batches"] = e.eval.batches;
  switch (e.budget.kind) {
    case budget_kind::tokens: j["budget"] = {{"tokens", e.budget.tokens}}; break;
    case budget_kind::steps: j["budget"] = {{"steps", e.budget.steps}}; break;
    case budget_kind::seconds: j["budget"] = {{"seconds", e.budget.seconds}}; break;
  }
  j["checkpoint"] = {{"dir", e.checkpoint.dir},
                     {"every_versions", e.checkpoint.every_versions},
                     {"allow_degraded", e.checkpoint.allow_degraded},
                     {"rebuild_wait_seconds", e.checkpoint.rebuild_wait_seconds},
                     {"max_failing_seconds", e.checkpoint.max_failing_seconds}};
  j["restart"] = {{"max_restarts", e.restart.max_restarts},
                  {"window_seconds", e.restart.window_s},
                  {"backoff_seconds", e.restart.backoff_base_s},
                  {"backoff_cap_seconds", e.restart.backoff_cap_s}};
  json events = json::array();
  for (const auto& ev : e.chaos.events) {
    json x;
    x[to_string(ev.trigger)] =
        ev.trigger == chaos_trigger::at_step ? json(static_cast<std::int64_t>(ev.at)) : json(ev.at);
    x["action"] = dsl_name(ev.action);
    if (ev.target_spec.empty())
      x["target"] = ev.target;
    else
      x["target"] = ev.target_spec;
    for (const auto& [key, v] : ev.params.items()) x[key] = v;
    x["factor"] = ev.factor;
    x["delay"] = ev.delay;
    x["duration"] = ev.duration;
    if (ev.damage_checkpoint) x["damage_checkpoint"] = true;
    events.push_back(std::move(x));
  }
  const auto& r = e.chaos.random;
  j["chaos"] = {{"events", events},
                {"random",
                 {{"mtbf_seconds", r.mtbf_seconds},
                  {"target", to_string(r.target)},
                  {"recovery",
                   {{"dist", to_string(r.recovery.dist)},
                    {"mean", r.recovery.mean},
                    {"sigma", r.recovery.sigma},
                    {"shape", r.recovery.shape}}},
                  {"seed", r.seed},
                  {"cluster_mtbf_seconds", r.cluster_mtbf_seconds}}}};
  if (r.cluster_mtbf_seconds > 0) {
    auto& jr = j["chaos"]["random"];
    json kinds = json::array();
    for (const auto kind : r.kinds) kinds.push_back(dsl_name(kind));
    jr["kinds"] = kinds;
    jr["min_gap_seconds"] = r.min_gap_seconds;
    jr["max_concurrent"] = r.max_concurrent;
    jr["horizon_seconds"] = r.horizon_seconds;
  }
  return j;
}

}  // namespace dd::config
