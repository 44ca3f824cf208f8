// tools/chaos/dsl.cpp — see dsl.hpp.
#include "tools/chaos/dsl.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "runtime/config/loader.hpp"
#include "tools/chaos/actions.hpp"
#include "tools/chaos/common.hpp"
#include "tools/chaos/msg.hpp"
#include "tools/chaos/schedule.hpp"
#include "tools/chaos/targets.hpp"

namespace dd::chaos {

using nlohmann::json;

std::string msg_kind_of(config::fault_kind k) {
  return config::is_live_fault(k) ? config::to_string(k) : std::string();
}

std::string chaos_kind_of(config::fault_kind k) {
  if (k == config::fault_kind::partition) return "blackhole";  // with dir = both
  return config::fault_layer_of(k) != config::fault_layer::in_process ? config::to_string(k)
                                                                      : std::string();
}

std::string msg_kind_of_action(const std::string& action) {
  const auto k = config::dsl_fault_kind(action);
  return k ? msg_kind_of(*k) : std::string();
}

std::string chaos_kind_of_action(const std::string& action) {
  // The DSL's old `kill` and `slow` are in-process (kill_learner, slow_learner): the nodes
  // apply them; its kill_process and slow_process are dd-chaos's kill and slow.
  const auto k = config::dsl_fault_kind(action);
  return k ? chaos_kind_of(*k) : std::string();
}

dsl_session read_experiment_chaos(const std::string& path,
                                  const std::vector<std::string>& overrides,
                                  const std::vector<std::string>& names, const nodes_file& nodes,
                                  double script_timeout_s) {
  config::load_options lo;
  lo.script_timeout = script_timeout_s;
  lo.overrides = overrides;
  lo.names = names;
  lo.check_files = false;  // the nodes read the data; dd-chaos only needs the chaos section
  const auto loaded = config::load_file(path, lo);
  if (!loaded.ok()) throw chaos_error(loaded.error_text());
  std::fprintf(stderr, "%s", loaded.warning_text().c_str());
  if (loaded.experiments.size() != 1)
    throw chaos_error(fmt::format("{}: defines {} experiments; select one with --name", path,
                                  loaded.experiments.size()));
  const auto& exp = loaded.experiments.front();
  dsl_session out;
  size_t messages = 0;
  for (const auto& ev : exp.chaos.events) {
    const std::string msg_kind = msg_kind_of(ev.action);
    if (!msg_kind.empty() && nodes.message_faults_via_endpoint) {
      // The nodes leave it to us (dd-node launch): one endpoint request, at its time, or at
      // once armed with the step the node starts it at.
      timed_fault tf;
      tf.spec.kind = msg_kind;
      tf.spec.target = fmt::format("learner:{}", ev.target);
      const bool one_shot = !config::starts_live_window(ev.action);
      if (!one_shot) tf.spec.duration = ev.duration;
      if (ev.params.contains("count") && !one_shot)
        tf.spec.net["count"] = ev.params["count"];
      else if (one_shot || ev.duration <= 0)
        tf.spec.net["count"] = 1;  // the DSL's default: one push, broadcast or step
      if (msg_kind == "delay_push" || msg_kind == "delay_broadcast")
        tf.spec.net["ms"] = ev.delay * 1000.0;
      if (ev.action == config::fault_kind::scale_push) tf.spec.net["factor"] = ev.factor;
      if (ev.action == config::fault_kind::random_push)
        tf.spec.net["seed"] = ev.params.contains("seed") ? ev.params["seed"].get<uint64_t>()
                                                         : static_cast<uint64_t>(exp.seed);
      const bool seconds_budget = exp.budget.kind == config::budget_kind::seconds;
      switch (ev.trigger) {
        case config::chaos_trigger::at_time: tf.at = ev.at; break;
        case config::chaos_trigger::at_step: tf.spec.net["at_step"] = ev.at; break;
        case config::chaos_trigger::at_fraction:
          if (seconds_budget)
            tf.at = ev.at * exp.budget.seconds;
          else
            tf.spec.net["at_fraction"] = ev.at;  // the node knows its step budget
          break;
      }
      out.faults.push_back(tf);
      ++messages;
      continue;
    }
    const std::string kind = chaos_kind_of(ev.action);
    if (kind.empty()) continue;  // in-process: the nodes apply it
    timed_fault tf;
    tf.at = ev.trigger == config::chaos_trigger::at_fraction ? ev.at * exp.budget.seconds : ev.at;
    tf.spec.kind = kind;
    tf.spec.target = ev.target_spec.empty() ? fmt::format("learner:{}", ev.target) : ev.target_spec;
    tf.spec.duration = ev.duration;
    for (const auto& [k, v] : ev.params.items()) {
      if (k == "duty")
        tf.spec.duty = v.get<double>();
      else if (k == "period")
        tf.spec.period = v.get<double>();
      else if (k == "count" && is_disk_kind(kind))
        tf.spec.count = v.get<int>();
      else if (k == "seed" && is_disk_kind(kind))
        tf.spec.picks.seed = v.get<uint64_t>();
      else
        tf.spec.net[k] = v;
    }
    if (ev.action == config::fault_kind::partition) tf.spec.net["dir"] = "both";
    out.faults.push_back(tf);
  }
  const auto& rf = exp.chaos.random;
  out.info = {{"file", path},
              {"experiment", exp.name},
              {"events", out.faults.size()},
              {"message_events", messages}};
  if (rf.cluster_mtbf_seconds > 0) {
    schedule_config cfg;
    cfg.mtbf = rf.cluster_mtbf_seconds;
    cfg.recovery.mean = rf.recovery.mean;
    switch (rf.recovery.dist) {
      case config::recovery_dist::fixed: cfg.recovery.k = recovery_dist::kind::fixed; break;
      case config::recovery_dist::exponential:
        cfg.recovery.k = recovery_dist::kind::exponential;
        break;
      case config::recovery_dist::lognormal:
        cfg.recovery.k = recovery_dist::kind::lognormal;
        cfg.recovery.shape = rf.recovery.sigma;
        break;
      case config::recovery_dist::weibull:
        cfg.recovery.k = recovery_dist::kind::weibull;
        cfg.recovery.shape = rf.recovery.shape;
        break;
    }
    cfg.seed = rf.seed;
    cfg.duration = rf.horizon_seconds > 0                            ? rf.horizon_seconds
                   : exp.budget.kind == config::budget_kind::seconds ? exp.budget.seconds
                                                                     : 3600.0;
    for (const auto k : rf.kinds) cfg.kinds.push_back(chaos_kind_of(k));
    cfg.max_concurrent = rf.max_concurrent;
    cfg.min_gap = rf.min_gap_seconds;
    const std::string spec = rf.target == config::chaos_target_kind::learners ? "learners"
                             : rf.target == config::chaos_target_kind::owners
                                 ? "node:syncer"
                                 : "learners,node:syncer";
    target_options topt;
    topt.pick = pick_mode::all;
    topt.pick_given = true;
    for (const auto& h : resolve_targets(nodes, parse_targets(spec), topt).hits)
      cfg.targets.push_back(h.node);
    fault_spec knobs;
    knobs.kind = "kill";
    const auto schedule = make_schedule(cfg);
    for (auto& tf : from_schedule(schedule, knobs)) out.faults.push_back(tf);
    out.info["seed"] = cfg.seed;
    out.info["cluster_mtbf"] = cfg.mtbf;
    out.info["recovery"] = cfg.recovery.str();
    out.info["kinds"] = cfg.kinds;
    out.info["targets"] = cfg.targets;
    out.info["drawn"] = schedule.size();
    std::printf(
        "%s: chaos.random: seed %llu, cluster mtbf %s, recovery %s, %zu faults drawn over %s "
        "(targets %s)\n",
        path.c_str(), static_cast<unsigned long long>(cfg.seed), format_duration(cfg.mtbf).c_str(),
        cfg.recovery.str().c_str(), schedule.size(), format_duration(cfg.duration).c_str(),
        fmt::format("{}", fmt::join(cfg.targets, ",")).c_str());
  }
  return out;
}

}  // namespace dd::chaos
