// actors/services/fault_hooks.cpp — see fault_hooks.hpp.
#include "actors/services/fault_hooks.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "runtime/rng.hpp"

#include <nlohmann/json.hpp>

#include "actors/services/run_log.hpp"

namespace dd::actors {

std::optional<fault_kind> live_kind_from(const std::string& name) {
  const auto k = config::fault_kind_from(name);
  if (k && config::is_live_fault(*k)) return k;
  return std::nullopt;
}

fault_hooks::fault_hooks(std::vector<fault_spec> faults, run_log* log,
                         std::function<double()> clock)
    : faults_(std::move(faults)), log_(log), clock_(std::move(clock)) {
  if (!clock_) {
    if (log_ != nullptr)
      clock_ = [log = log_] { return log->now(); };
    else
      clock_ = [] { return 0.0; };
  }
  done_.assign(faults_.size(), false);
  fired_at_.assign(faults_.size(), 0.0);
}

void fault_hooks::add(const fault_spec& f) {
  std::lock_guard<std::mutex> guard(mutex_);
  faults_.push_back(f);
  done_.push_back(false);
  fired_at_.push_back(0.0);
}

bool fault_hooks::due_locked(const fault_spec& f, uint64_t logical, double now) const {
  if (f.at_seconds >= 0) return now >= f.at_seconds;
  return logical >= f.at_step;
}

void fault_hooks::fire_locked(size_t i, uint64_t logical, uint64_t inc, double now) {
  done_[i] = true;
  fired_at_[i] = now;
  fired_fault rec{faults_[i], logical, inc, now};
  fired_.push_back(rec);
  const auto& f = faults_[i];
  if (f.what == fault_kind::kill_owner && f.damage_checkpoint) damage_.push_back(f.target);
  if (log_ != nullptr) {
    // What the fault was keyed on when it fired: the learner's step, or the owner's version.
    nlohmann::json j = {{"fault", f.live_window ? "start_live" : config::to_string(f.what)},
                        {"target", f.target},
                        {f.what == fault_kind::kill_owner ? "at_version" : "at_step", logical},
                        {"incarnation", inc}};
    if (f.what == fault_kind::slow_learner) j["factor"] = f.factor;
    if (f.what == fault_kind::delay_push) j["delay_s"] = f.delay_s;
    if (f.damage_checkpoint) j["damage_checkpoint"] = true;
    log_->emit("fault", j);
  }
}

step_faults fault_hooks::on_learner_step(int32_t id, uint64_t inc, uint64_t step) {
  std::lock_guard<std::mutex> guard(mutex_);
  double now = clock_();
  step_faults out;
  for (size_t i = 0; i < faults_.size(); ++i) {
    const auto& f = faults_[i];
    if (f.target != id || f.live_window) continue;
    if (f.what == fault_kind::kill_learner) {
      if (!done_[i] && due_locked(f, step, now)) {
        fire_locked(i, step, inc, now);
        out.kill = true;
        out.kill_downtime_s = std::max(out.kill_downtime_s, f.downtime_s);
      }
    } else if (f.what == fault_kind::slow_learner) {
      if (!done_[i] && due_locked(f, step, now)) fire_locked(i, step, inc, now);
      if (done_[i] && (f.duration_s <= 0 || now < fired_at_[i] + f.duration_s) && f.factor > 1)
        out.slow_factor *= f.factor;
    }
  }
  promote_locked(now, id, step);
  if (!take_live_locked(fault_kind::nan_step, id, -1, now).empty()) out.nan = true;
  if (!take_live_locked(fault_kind::fail_step, id, -1, now).empty()) out.fail = true;
  if (!take_live_locked(fault_kind::corrupt_held, id, -1, now).empty()) out.corrupt_held = true;
  return out;
}

push_fault fault_hooks::on_push(int32_t id, uint64_t inc, int32_t fragment, uint64_t step) {
  std::lock_guard<std::mutex> guard(mutex_);
  double now = clock_();
  push_fault out;
  for (size_t i = 0; i < faults_.size(); ++i) {
    const auto& f = faults_[i];
    if (f.target != id || done_[i] || f.live_window) continue;
    if (f.what != fault_kind::drop_push && f.what != fault_kind::delay_push &&
        f.what != fault_kind::corrupt_push)
      continue;
    if (!due_locked(f, step, now)) continue;
    fire_locked(i, step, inc, now);
    if (f.what == fault_kind::drop_push)
      out.drop = true;
    else if (f.what == fault_kind::corrupt_push)
      out.corrupt = true;
    else
      out.delay_s += f.delay_s;
  }
  promote_locked(now, id, step);
  if (!take_live_locked(fault_kind::drop_push, id, fragment, now).empty()) out.drop = true;
  if (!take_live_locked(fault_kind::dup_push, id, fragment, now).empty()) out.duplicate = true;
  if (!take_live_locked(fault_kind::reorder_push, id, fragment, now).empty()) out.reorder = true;
  if (!take_live_locked(fault_kind::corrupt_push, id, fragment, now).empty()) out.corrupt = true;
  for (const auto& f : take_live_locked(fault_kind::delay_push, id, fragment, now))
    out.delay_s += f.delay_s;
  for (const auto& f : take_live_locked(fault_kind::scale_push, id, fragment, now))
    out.scale *= f.factor;
  for (const auto& f : take_live_locked(fault_kind::random_push, id, fragment, now)) {
    out.random = true;
    out.seed = f.seed;
  }
  return out;
}

broadcast_fault fault_hooks::on_broadcast(int32_t fragment, int32_t learner) {
  std::lock_guard<std::mutex> guard(mutex_);
  const double now = clock_();
  broadcast_fault out;
  promote_locked(now, -1, 0);
  if (live_.empty()) return out;
  if (!take_live_locked(fault_kind::drop_broadcast, learner, fragment, now).empty())
    out.drop = true;
  if (!take_live_locked(fault_kind::dup_broadcast, learner, fragment, now).empty())
    out.duplicate = true;
  if (!take_live_locked(fault_kind::reorder_broadcast, learner, fragment, now).empty())
    out.reorder = true;
  for (const auto& f : take_live_locked(fault_kind::delay_broadcast, learner, fragment, now))
    out.delay_s += f.delay_s;
  return out;
}

namespace {

nlohmann::json live_json(const live_fault& f, double now) {
  nlohmann::json j = {{"id", f.id},           {"kind", config::to_string(f.what)},
                      {"learner", f.learner}, {"fragment", f.fragment},
                      {"hits", f.hits},       {"source", f.origin}};
  if (f.until_s >= 0) j["expires_in_s"] = std::max(0.0, f.until_s - now);
  if (f.count >= 0) j["count_left"] = f.count;
  if (f.delay_s > 0) j["delay_s"] = f.delay_s;
  if (f.what == fault_kind::scale_push) j["factor"] = f.factor;
  if (f.what == fault_kind::random_push) j["seed"] = f.seed;
  return j;
}

/// Checks the knobs only some live kinds take (delay, factor); throws std::invalid_argument
/// naming the kind.
void check_live_knobs(const live_fault& f) {
  const std::string name = config::to_string(f.what);
  const bool delay = f.what == fault_kind::delay_push || f.what == fault_kind::delay_broadcast;
  if (delay && !(f.delay_s > 0)) throw std::invalid_argument(name + ": needs a delay > 0");
  if (!delay && f.delay_s != 0) throw std::invalid_argument(name + ": takes no delay");
  const bool scale = f.what == fault_kind::scale_push;
  if (scale && !(std::isfinite(f.factor) && f.factor != 0))
    throw std::invalid_argument(name + ": needs a finite factor other than 0");
  if (!scale && f.factor != 0) throw std::invalid_argument(name + ": takes no factor");
}

}  // namespace

void fault_hooks::prune_live_locked(double now) {
  for (auto it = live_.begin(); it != live_.end();) {
    const bool expired = it->until_s >= 0 && now >= it->until_s;
    if (expired || it->count == 0) {
      if (log_ != nullptr) {
        auto j = live_json(*it, now);
        j["action"] = expired ? "expired" : "spent";
        log_->emit("chaos_fault", j);
      }
      it = live_.erase(it);
    } else {
      ++it;
    }
  }
}

std::vector<live_fault> fault_hooks::take_live_locked(fault_kind k, int32_t learner,
                                                      int32_t fragment, double now) {
  std::vector<live_fault> out;
  if (live_.empty()) return out;
  prune_live_locked(now);
  for (auto& f : live_) {
    if (f.what != k) continue;
    if (f.learner >= 0 && f.learner != learner) continue;
    if (f.fragment >= 0 && fragment >= 0 && f.fragment != fragment) continue;
    f.hits += 1;
    if (f.count > 0) f.count -= 1;
    out.push_back(f);
    if (log_ != nullptr)
      log_->emit("fault", {{"fault", config::to_string(k)},
                           {"source", f.origin},
                           {"id", f.id},
                           {"learner", learner},
                           {"fragment", fragment},
                           {"hits", f.hits}});
  }
  prune_live_locked(now);
  return out;
}

void fault_hooks::arm_live(live_fault f, uint64_t at_step, double duration_s) {
  const std::string name = config::to_string(f.what);
  if (config::is_broadcast_fault(f.what))
    throw std::invalid_argument(name + ": broadcast kinds are keyed on time, not on a step");
  if (f.learner < 0)
    throw std::invalid_argument(name + ": at_step needs the learner whose step it is");
  if (!(duration_s >= 0)) throw std::invalid_argument(name + ": for_s must be >= 0");
  const bool step_kind = config::is_step_message_fault(f.what);
  if (duration_s <= 0 && f.count < 0 && !step_kind)
    throw std::invalid_argument(name +
                                ": give a duration or a count (a live fault must end by itself)");
  if (f.count == 0) throw std::invalid_argument(name + ": count must be > 0");
  check_live_knobs(f);
  fault_spec s;
  s.what = f.what;
  s.live_window = true;
  s.target = f.learner;
  s.at_step = at_step;
  s.duration_s = duration_s;
  f.until_s = -1.0;  // set from duration_s when it starts
  s.live = f;
  std::lock_guard<std::mutex> guard(mutex_);
  faults_.push_back(s);
  done_.push_back(false);
  fired_at_.push_back(0.0);
  if (log_ != nullptr) {
    nlohmann::json j = {{"action", "armed"},      {"kind", name},       {"learner", f.learner},
                        {"fragment", f.fragment}, {"at_step", at_step}, {"source", f.origin}};
    if (duration_s > 0) j["for_s"] = duration_s;
    if (f.count >= 0) j["count"] = f.count;
    if (f.delay_s > 0) j["delay_s"] = f.delay_s;
    if (f.what == fault_kind::scale_push) j["factor"] = f.factor;
    if (f.what == fault_kind::random_push) j["seed"] = f.seed;
    log_->emit("chaos_fault", j);
  }
}

bool is_message_fault(const fault_spec& f) {
  return f.live_window || config::is_push_fault(f.what);
}

uint64_t fault_hooks::add_live(live_fault f) {
  if (!(f.until_s >= 0) && f.count < 0)
    throw std::invalid_argument(std::string(config::to_string(f.what)) +
                                ": give a duration or a count (a live fault must end by itself)");
  if (f.count == 0)
    throw std::invalid_argument(std::string(config::to_string(f.what)) + ": count must be > 0");
  check_live_knobs(f);
  std::lock_guard<std::mutex> guard(mutex_);
  add_live_locked(f, clock_());
  return live_.back().id;
}

void fault_hooks::add_live_locked(live_fault f, double now) {
  f.id = next_live_id_++;
  f.hits = 0;
  live_.push_back(f);
  if (log_ != nullptr) {
    auto j = live_json(f, now);
    j["action"] = "start";
    log_->emit("chaos_fault", j);
  }
}

void fault_hooks::promote_locked(double now, int32_t learner, uint64_t step) {
  for (size_t i = 0; i < faults_.size(); ++i) {
    const auto& f = faults_[i];
    if (!f.live_window || done_[i]) continue;
    const bool due = f.at_seconds >= 0 ? now >= f.at_seconds
                                       : learner >= 0 && f.target == learner && step >= f.at_step;
    if (!due) continue;
    fire_locked(i, f.at_seconds >= 0 ? 0 : step, 0, now);
    live_fault l = f.live;  // its origin: "schedule" (fault_specs_of) or "endpoint" (arm_live)
    if (f.duration_s > 0) l.until_s = now + f.duration_s;
    if (l.until_s < 0 && l.count < 0) l.count = 1;
    add_live_locked(l, now);
  }
}

size_t fault_hooks::clear_live() {
  std::lock_guard<std::mutex> guard(mutex_);
  prune_live_locked(clock_());
  const size_t n = live_.size();
  live_.clear();
  if (log_ != nullptr) log_->emit("chaos_fault", {{"action", "clear"}, {"cleared", n}});
  return n;
}

std::vector<live_fault> fault_hooks::live() const {
  std::lock_guard<std::mutex> guard(mutex_);
  const double now = clock_();
  std::vector<live_fault> out;
  for (const auto& f : live_)
    if (!(f.until_s >= 0 && now >= f.until_s) && f.count != 0) out.push_back(f);
  return out;
}

std::optional<double> fault_hooks::on_owner(int32_t fragment, uint64_t version) {
  std::lock_guard<std::mutex> guard(mutex_);
  double now = clock_();
  std::optional<double> kill;
  for (size_t i = 0; i < faults_.size(); ++i) {
    const auto& f = faults_[i];
    if (f.what != fault_kind::kill_owner || f.target != fragment || done_[i]) continue;
    if (!due_locked(f, version, now)) continue;
    fire_locked(i, version, 0, now);
    kill = std::max(kill.value_or(0.0), f.downtime_s);
  }
  return kill;
}

std::vector<double> fault_hooks::owner_kill_delays(int32_t fragment) const {
  std::lock_guard<std::mutex> guard(mutex_);
  const double now = clock_();
  std::vector<double> out;
  for (size_t i = 0; i < faults_.size(); ++i) {
    const auto& f = faults_[i];
    if (f.what == fault_kind::kill_owner && f.target == fragment && !done_[i] && f.at_seconds >= 0)
      out.push_back(f.at_seconds - now);
  }
  return out;
}

bool fault_hooks::take_damage(int32_t fragment) {
  std::lock_guard<std::mutex> guard(mutex_);
  auto it = std::find(damage_.begin(), damage_.end(), fragment);
  if (it == damage_.end()) return false;
  damage_.erase(it);
  return true;
}

std::vector<fired_fault> fault_hooks::fired() const {
  std::lock_guard<std::mutex> guard(mutex_);
  return fired_;
}

std::vector<fault_spec> fault_hooks::scheduled() const {
  std::lock_guard<std::mutex> guard(mutex_);
  return faults_;
}

std::vector<fault_spec> random_fault_schedule(fault_kind kind, int targets, double mtbf_s,
                                              const random_recovery& recovery, double horizon_s,
                                              uint64_t seed, int max_per_target) {
  if (!(mtbf_s > 0.0)) throw std::invalid_argument("chaos.random.mtbf_seconds must be > 0");
  if (!(horizon_s >= 0.0)) throw std::invalid_argument("random fault horizon must be >= 0");
  if (!(recovery.mean_s > 0.0))
    throw std::invalid_argument("chaos.random.recovery.mean must be > 0");
  if (recovery.dist == random_recovery::distribution::weibull && !(recovery.shape > 0.0))
    throw std::invalid_argument("chaos.random.recovery.shape must be > 0");
  std::vector<fault_spec> out;
  for (int t = 0; t < targets; ++t) {
    dd::rng r(dd::derive_seed(seed, static_cast<uint64_t>(t)));
    double now = 0.0;
    for (int k = 0; k < max_per_target; ++k) {
      now += -mtbf_s * std::log(r.uniform());  // exponential gap, mean mtbf_s
      if (now > horizon_s) break;
      double down = recovery.mean_s;
      switch (recovery.dist) {
        case random_recovery::distribution::fixed: break;
        case random_recovery::distribution::exponential:
          down = -recovery.mean_s * std::log(r.uniform());
          break;
        case random_recovery::distribution::lognormal:
          // mean of exp(N(mu, σ²)) is exp(mu + σ²/2): choose mu so the mean is mean_s.
          down = std::exp(std::log(recovery.mean_s) - 0.5 * recovery.sigma * recovery.sigma +
                          recovery.sigma * r.normal());
          break;
        case random_recovery::distribution::weibull: {
          // Mean of Weibull(λ, k) is λ Γ(1 + 1/k): choose λ so the mean is mean_s.
          const double shape = recovery.shape;
          const double scale = recovery.mean_s / std::tgamma(1.0 + 1.0 / shape);
          down = scale * std::pow(-std::log(r.uniform()), 1.0 / shape);
          break;
        }
      }
      fault_spec f;
      f.what = kind;
      f.target = t;
      f.at_seconds = now;
      f.downtime_s = down;
      out.push_back(f);
      now += down;
    }
  }
  return out;
}

std::vector<fault_spec> fault_specs_of(const config::experiment& exp, uint64_t steps_per_learner,
                                       int fragments) {
  std::vector<fault_spec> faults;
  for (const auto& ev : exp.chaos.events) {
    // Process and network kinds are fired from outside by dd-chaos (dd-node launch starts it).
    if (config::fault_layer_of(ev.action) != config::fault_layer::in_process) continue;
    fault_spec f;
    f.what = ev.action;
    if (config::starts_live_window(ev.action)) {
      f.live_window = true;
      f.live.what = ev.action;
      f.live.origin = "schedule";
      f.live.learner = ev.target;
      if (ev.params.contains("count")) f.live.count = ev.params["count"].get<int64_t>();
      if (f.live.what == fault_kind::delay_broadcast) f.live.delay_s = ev.delay;
      if (f.live.what == fault_kind::scale_push) f.live.factor = ev.factor;
      if (f.live.what == fault_kind::random_push)
        f.live.seed = ev.params.contains("seed") ? ev.params["seed"].get<uint64_t>()
                                                 : static_cast<uint64_t>(exp.seed);
      f.duration_s = ev.duration;
    }
    f.target = ev.target;
    f.factor = ev.factor;
    f.delay_s = ev.delay;
    f.downtime_s =
        f.what == fault_kind::kill_learner || f.what == fault_kind::kill_owner ? ev.duration : 0.0;
    if (f.what == fault_kind::slow_learner) f.duration_s = ev.duration;
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
    if (f.what == fault_kind::kill_owner)
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
      for (const auto& f : random_fault_schedule(fault_kind::kill_learner, exp.learners.count,
                                                 rc.mtbf_seconds, rec, horizon, seed))
        faults.push_back(f);
    if (rc.target != config::chaos_target_kind::learners)
      for (const auto& f : random_fault_schedule(fault_kind::kill_owner, fragments, rc.mtbf_seconds,
                                                 rec, horizon, derive_seed(seed, 1000)))
        faults.push_back(f);
  }
  return faults;
}

}  // namespace dd::actors
