// tools/goodput/sim.cpp — the discrete-event engine behind dd-goodput (see sim.hpp).
//
// State per group (one synchronous job: the whole cluster for DP, one learner for DiLoCo):
//
//   stepping ──failure──▶ paused (elastic: downscale)      ──pause end──▶ stepping
//   stepping ──failure──▶ waiting for slices (non-elastic) ──all back──▶ restarting ──▶ stepping
//     (the restart is warm when the failure came within the warm window of the last one's end)
//   stepping ──round work done──▶ pending at barrier (DiLoCo) ──merge_now──▶ outer sync ──▶ ...
//
// Useful chip-time is integrated lazily per group between events; the state of a group is
// constant between two events that touch it (pause ends and round completions are events).
#include "tools/goodput/sim.hpp"

#include <algorithm>
#include <cmath>
#include <queue>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "actors/policy/admission.hpp"
#include "actors/policy/grace.hpp"
#include "actors/policy/quorum.hpp"

namespace dd::goodput {

const char* to_string(strategy s) {
  switch (s) {
    case strategy::data_parallel: return "data_parallel";
    case strategy::elastic_dp: return "elastic_dp";
    case strategy::diloco: return "diloco";
    case strategy::decoupled_diloco: return "decoupled_diloco";
  }
  return "unknown";
}

std::optional<strategy> parse_strategy(const std::string& name) {
  for (auto s : {strategy::data_parallel, strategy::elastic_dp, strategy::diloco,
                 strategy::decoupled_diloco}) {
    if (name == to_string(s)) return s;
  }
  if (name == "dp") return strategy::data_parallel;
  if (name == "edp") return strategy::elastic_dp;
  if (name == "dd") return strategy::decoupled_diloco;
  return std::nullopt;
}

const std::vector<std::pair<const char*, recovery_dist>> recovery_dist_names = {
    {"fixed", recovery_dist::fixed},
    {"exponential", recovery_dist::exponential},
    {"lognormal", recovery_dist::lognormal}};

const char* to_string(recovery_dist d) {
  for (const auto& [name, value] : recovery_dist_names)
    if (value == d) return name;
  return "unknown";
}

std::uint64_t slice_count(const sim_config& c) {
  return c.slice_chips == 0 ? 0 : (c.chips + c.slice_chips - 1) / c.slice_chips;
}

namespace {

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

bool uses_learners(strategy s) { return s == strategy::diloco || s == strategy::decoupled_diloco; }

}  // namespace

std::string validate(const sim_config& c, strategy s) {
  auto bad = [](const std::string& flag, const std::string& rule, double v) {
    return flag + " must be " + rule + ", got " + num(v);
  };
  auto finite_nonneg = [](double v) { return std::isfinite(v) && v >= 0.0; };
  if (c.chips == 0) return "--chips must be > 0, got 0";
  if (c.slice_chips == 0) return "--slice-chips must be > 0, got 0";
  const std::uint64_t slices = slice_count(c);
  if (slices > (1ull << 31)) return "too many slices (" + std::to_string(slices) + ")";
  if (!(std::isfinite(c.mtbi_days) && c.mtbi_days > 0)) {
    return bad("--mtbi-days", "> 0", c.mtbi_days);
  }
  if (!(std::isfinite(c.days) && c.days > 0)) return bad("--days", "> 0", c.days);
  if (!(std::isfinite(c.recovery_mean_s) && c.recovery_mean_s > 0)) {
    return bad("--recovery-mean", "> 0 s", c.recovery_mean_s);
  }
  if (!finite_nonneg(c.recovery_cv)) return bad("--recovery-cv", ">= 0", c.recovery_cv);
  if (!finite_nonneg(c.restart_s)) return bad("--restart", ">= 0 s", c.restart_s);
  if (!finite_nonneg(c.restart_cold_s)) return bad("--restart-cold", ">= 0 s", c.restart_cold_s);
  if (c.restart_cold_s < c.restart_s) {
    return "--restart-cold must be >= --restart (" + num(c.restart_s) +
           " s, the warm relaunch), got " + num(c.restart_cold_s);
  }
  if (!finite_nonneg(c.restart_warm_window_s)) {
    return bad("--restart-warm-window", ">= 0 s", c.restart_warm_window_s);
  }
  if (!std::isfinite(c.checkpoint_interval_s)) {
    return bad("--checkpoint-interval", "finite (< 0 = Young's optimum)", c.checkpoint_interval_s);
  }
  if (!finite_nonneg(c.checkpoint_write_s)) {
    return bad("--checkpoint-write", ">= 0 s", c.checkpoint_write_s);
  }
  if (!finite_nonneg(c.downscale_pause_s)) {
    return bad("--downscale-pause", ">= 0 s", c.downscale_pause_s);
  }
  if (!finite_nonneg(c.upscale_pause_s)) return bad("--upscale-pause", ">= 0 s", c.upscale_pause_s);
  if (!finite_nonneg(c.upscale_batch_s)) return bad("--upscale-batch", ">= 0 s", c.upscale_batch_s);
  if (!(std::isfinite(c.step_s) && c.step_s > 0)) return bad("--step", "> 0 s", c.step_s);
  if (!finite_nonneg(c.chip_speed_cv)) return bad("--speed-cv", ">= 0", c.chip_speed_cv);
  if (c.sync_interval == 0) return "--sync-interval must be >= 1, got 0";
  if (!finite_nonneg(c.outer_sync_s)) return bad("--outer-sync", ">= 0 s", c.outer_sync_s);
  if (!(std::isfinite(c.quorum_fraction) && c.quorum_fraction >= 0 && c.quorum_fraction <= 1)) {
    return bad("--quorum-fraction", "in [0, 1]", c.quorum_fraction);
  }
  if (c.quorum_fraction == 0 && c.quorum_count == 0) return "--quorum must be >= 1, got 0";
  if (!finite_nonneg(c.overlap_tau)) return bad("--tau", ">= 0", c.overlap_tau);
  if (!(std::isfinite(c.grace_gamma) && c.grace_gamma >= 0 && c.grace_gamma <= 1)) {
    return bad("--grace-gamma", "in [0, 1]", c.grace_gamma);
  }
  if (uses_learners(s)) {
    if (c.learners == 0) return "--learners must be >= 1, got 0";
    if (c.learners > slices) {
      return "--learners (" + std::to_string(c.learners) +
             ") must not exceed the number of slices (" + std::to_string(slices) + " = " +
             std::to_string(c.chips) + " chips / " + std::to_string(c.slice_chips) +
             " per slice, rounded up)";
    }
  }
  return {};
}

namespace {

constexpr double seconds_per_day = 86400.0;

/// One synchronous job: the whole cluster (DP) or one learner (DiLoCo variants).
struct group {
  std::uint32_t n = 0;              // slices assigned
  std::uint32_t up = 0;             // slices currently up
  double paused_until = 0;          // end of the current pause / restart (s)
  bool waiting = false;             // non-elastic: stalled until every slice is back
  double resume_t = 0;              // non-elastic: when training last (re)started
  double relaunch_end = -INFINITY;  // non-elastic: end of the last relaunch (none yet: -inf)
  bool warm = false;                // non-elastic: the pending relaunch is warm
  double last_t = 0;                // lazy integration point
  double remaining = 0;             // DiLoCo: work (s at speed 1) left in this round
  bool pending = false;             // DiLoCo: finished the round, waiting at the barrier
  std::uint64_t gen = 0;            // invalidates timers scheduled before a state change
  bool was_stepping = false;
  double stopped_at_progress = 0;     // DD: global progress (s) when it stopped stepping
  std::multiset<double> speeds;       // slice speeds (only with chip_speed_cv > 0)
  std::vector<std::uint32_t> slices;  // its slices; the first `up` entries are the up ones
  std::vector<std::uint32_t> held;    // returned slices waiting to join (upscale batching)
  std::uint64_t upscale_gen = 0;      // invalidates a scheduled batched upscale
};

enum class ev_kind { recovery, pause_end, work_done, scripted_failure, upscale };

struct event {
  double t;
  std::uint64_t seq;
  ev_kind kind;
  std::uint32_t target;  // slice (recovery, scripted_failure) or group
  std::uint64_t gen;
  bool operator>(const event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
};

class engine {
 public:
  engine(const sim_config& c, strategy s, std::uint64_t seed, bool poisson)
      : c_(c), s_(s), rng_(seed), poisson_(poisson) {
    result_.which = s;
    result_.seed = seed;
    end_t_ = c.days * seconds_per_day;
    slice_chips_ = static_cast<double>(c.slice_chips);
    const auto slices = static_cast<std::uint32_t>(slice_count(c));
    const std::uint32_t m = uses_learners(s) ? static_cast<std::uint32_t>(c.learners) : 1u;
    groups_.resize(m);
    slice_group_.resize(slices);
    slice_speed_.assign(slices, 1.0);
    pos_in_group_.resize(slices);
    for (std::uint32_t i = 0; i < slices; ++i) {
      const auto g = static_cast<std::uint32_t>(static_cast<std::uint64_t>(i) * m / slices);
      slice_group_[i] = g;
      groups_[g].n++;
      groups_[g].up++;
      pos_in_group_[i] = static_cast<std::uint32_t>(groups_[g].slices.size());
      groups_[g].slices.push_back(i);
      if (c.chip_speed_cv > 0) {
        slice_speed_[i] = draw_slice_speed();
        groups_[g].speeds.insert(slice_speed_[i]);
      }
    }
    if (s == strategy::data_parallel) {
      // Non-elastic DP checkpoints every C seconds of training, each write blocking δ seconds.
      // C < 0: Young's optimum C = sqrt(2 δ · MTBF) (Young 1974), MTBF = MTBI / N under load.
      checkpoint_s_ = c.checkpoint_interval_s;
      if (checkpoint_s_ < 0) {
        const double mtbf =
            c.mtbi_days * seconds_per_day / static_cast<double>(slices * c.slice_chips);
        checkpoint_s_ = std::sqrt(2.0 * c.checkpoint_write_s * mtbf);
      }
      write_s_ = checkpoint_s_ > 0 ? c.checkpoint_write_s : 0.0;
      result_.checkpoint_interval_s = checkpoint_s_;
    }
    round_work_ = static_cast<double>(c.sync_interval) * c.step_s;
    for (auto& g : groups_) g.remaining = round_work_;
    if (s == strategy::diloco) {
      quorum_ = policy::quorum_spec::of_fraction(1.0);  // K = M: wait for every live learner
    } else if (s == strategy::decoupled_diloco) {
      quorum_ = c.quorum_fraction > 0 ? policy::quorum_spec::of_fraction(c.quorum_fraction)
                                      : policy::quorum_spec::of_count(c.quorum_count);
    } else {
      quorum_ = policy::quorum_spec::of_count(1);  // one job: progress iff it steps
    }
    if (s == strategy::decoupled_diloco) {
      // The fragment owners' grace window, from the same function the owners call. ξ_quorum ≈ 0
      // with K = 1 (the first push completes the quorum); ξ_sync ≈ outer_sync_s.
      policy::grace_config gc;
      gc.gamma = c.grace_gamma;
      result_.grace_s =
          policy::compute_grace(gc, c.overlap_tau, c.step_s, 0.0, c.outer_sync_s).grace_s;
    }
  }

  /// `script`: the failures to inject when not poisson_ (gen = index into it).
  sim_result run(const std::vector<scripted_failure>& script) {
    script_ = &script;
    if (!poisson_) {
      for (std::size_t k = 0; k < script.size(); ++k) {
        push({script[k].at_s, 0, ev_kind::scripted_failure,
              static_cast<std::uint32_t>(script[k].slice), k});
      }
    }
    for (std::uint32_t g = 0; g < groups_.size(); ++g) schedule_timers(g, 0.0);
    recount(0.0);
    while (true) {
      const double tq = queue_.empty() ? INFINITY : queue_.top().t;
      const double t = std::min(tq, next_failure_t_);
      if (t > end_t_) break;
      ++result_.events;
      advance_global(t);
      if (next_failure_t_ <= tq) {
        fail_slice(pick_loaded_slice(), t);
      } else {
        const event e = queue_.top();
        queue_.pop();
        handle(e);
      }
      recount(t);
      if (s_ == strategy::diloco) barrier_check(t);
    }
    advance_global(end_t_);
    for (auto& g : groups_) advance(g, end_t_);
    result_.sim_seconds = end_t_;
    result_.useful_chip_s = useful_;
    result_.lost_work_chip_s = lost_;
    const double chips = static_cast<double>(slice_count(c_) * c_.slice_chips);
    result_.chips_simulated = slice_count(c_) * c_.slice_chips;
    result_.goodput = useful_ / (chips * end_t_);
    result_.uptime = progress_s_ / end_t_;
    return result_;
  }

 private:
  // ---- randomness (one seeded generator; our own transforms so output is libstdc++-proof) ----
  double uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }  // [0, 1)
  double exponential(double mean) { return -std::log1p(-uniform()) * mean; }
  double normal() {
    const double u1 = 1.0 - uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  }
  double lognormal(double mean, double cv) {
    if (cv <= 0) return mean;
    const double s2 = std::log1p(cv * cv);
    return mean * std::exp(std::sqrt(s2) * normal() - 0.5 * s2);
  }
  double draw_recovery() {
    switch (c_.recovery) {
      case recovery_dist::fixed: return c_.recovery_mean_s;
      case recovery_dist::exponential: return exponential(c_.recovery_mean_s);
      case recovery_dist::lognormal: return lognormal(c_.recovery_mean_s, c_.recovery_cv);
    }
    return c_.recovery_mean_s;
  }
  /// A slice steps at the pace of its slowest chip.
  double draw_slice_speed() {
    double v = INFINITY;
    for (std::uint64_t k = 0; k < c_.slice_chips; ++k)
      v = std::min(v, lognormal(1.0, c_.chip_speed_cv));
    return v;
  }

  // ---- failure process: superposition of per-chip Poisson processes over up slices ----
  // Interruptions strike chips under load: the up slices of groups that are stepping (with
  // idle_failures: every up slice). Rate = exposed chips / MTBI; memoryless, so it is resampled
  // after every event.
  void resample_failure(double t) {
    if (!poisson_ || loaded_slices_ == 0) {
      next_failure_t_ = INFINITY;
      return;
    }
    const double rate = static_cast<double>(loaded_slices_) * slice_chips_ /
                        (c_.mtbi_days * seconds_per_day);  // failures per second
    next_failure_t_ = t + exponential(1.0 / rate);
  }
  /// A uniformly random loaded slice: a stepping group weighted by its up slices, then one of
  /// its up slices.
  std::uint32_t pick_loaded_slice() {
    auto k = static_cast<std::uint64_t>(uniform() * static_cast<double>(loaded_slices_));
    k = std::min<std::uint64_t>(k, loaded_slices_ - 1);
    for (const auto& g : groups_) {
      if (!g.was_stepping && !c_.idle_failures) continue;
      if (k < g.up) return g.slices[k];
      k -= g.up;
    }
    return groups_.back().slices[0];  // unreachable when loaded_slices_ is consistent
  }
  void mark_down(group& g, std::uint32_t i) {  // move slice i behind the up prefix
    const std::uint32_t p = pos_in_group_[i], last = g.slices[g.up - 1];
    g.slices[p] = last;
    pos_in_group_[last] = p;
    g.slices[g.up - 1] = i;
    pos_in_group_[i] = g.up - 1;
    --g.up;
  }
  void mark_up(group& g, std::uint32_t i) {
    const std::uint32_t p = pos_in_group_[i], first_down = g.slices[g.up];
    g.slices[p] = first_down;
    pos_in_group_[first_down] = p;
    g.slices[g.up] = i;
    pos_in_group_[i] = g.up;
    ++g.up;
  }

  // ---- group state ----
  bool elastic() const { return s_ != strategy::data_parallel; }
  double speed(const group& g) const { return g.speeds.empty() ? 1.0 : *g.speeds.begin(); }
  double rate(const group& g) const { return g.up * slice_chips_ * speed(g); }
  bool can_step(const group& g) const {  // everything but the clock
    if (!elastic()) return !g.waiting && g.up == g.n;
    if (g.up == 0) return false;
    if (s_ == strategy::diloco) return !g.pending && g.remaining > 0;
    return true;
  }
  bool stepping(const group& g, double t) const { return can_step(g) && t >= g.paused_until; }

  void advance(group& g, double t) {
    if (can_step(g)) {
      const double start = std::max(g.last_t, g.paused_until);
      if (t > start) {
        double dur = t - start;
        const double v = speed(g);
        if (s_ == strategy::diloco) {
          dur = std::min(dur, g.remaining / v);
          g.remaining -= dur * v;
          if (g.remaining <= 1e-9 * round_work_) {  // round finished exactly now
            g.remaining = 0;
            g.pending = true;
          }
        }
        useful_ += dur * rate(g) * work_fraction();
      }
    }
    g.last_t = t;
  }
  /// Share of running time that trains (the rest writes checkpoints): C / (C + δ).
  double work_fraction() const {
    return write_s_ > 0 ? checkpoint_s_ / (checkpoint_s_ + write_s_) : 1.0;
  }
  void lose(double chip_s) {
    useful_ -= chip_s;
    lost_ += chip_s;
  }

  void advance_global(double t) {
    if (advancing_) progress_s_ += t - global_t_;
    result_.loaded_chip_s += (t - global_t_) * static_cast<double>(loaded_slices_) * slice_chips_;
    global_t_ = t;
  }

  /// Recomputes who steps and whether the quorum holds (policy::compute_quorum).
  void recount(double t) {
    std::size_t live = 0, step = 0;
    loaded_slices_ = 0;
    for (auto& g : groups_) {
      const bool now_stepping = stepping(g, t);
      if (g.up > 0) ++live;
      if (now_stepping) ++step;
      if (now_stepping || c_.idle_failures) loaded_slices_ += g.up;
      if (s_ == strategy::decoupled_diloco && now_stepping != g.was_stepping) {
        if (!now_stepping) {
          g.stopped_at_progress = progress_s_;
        } else {
          // Versions merged while this learner was not stepping: owners merge each fragment
          // about once per H steps while the quorum holds. Its un-pushed work (on average half a
          // sync interval) is rejected if it became too stale (policy::check_staleness).
          const auto missed =
              static_cast<std::uint64_t>((progress_s_ - g.stopped_at_progress) / round_work_);
          const auto d = policy::check_staleness(missed, 0, c_.max_staleness);
          if (!d.accepted) {
            ++result_.stale_rejections;
            lose(0.5 * round_work_ * rate(g));
          }
        }
      }
      g.was_stepping = now_stepping;
    }
    if (live != last_live_ || step != last_step_ || first_count_) {
      first_count_ = false;
      last_live_ = live;
      last_step_ = step;
      advancing_ = policy::compute_quorum(quorum_, live, step).reached;
    }
    resample_failure(t);
  }

  void push(event e) {
    e.seq = seq_++;
    queue_.push(e);
  }

  /// After any change of group g at time t: schedule its pause end and (DiLoCo) round end.
  void schedule_timers(std::uint32_t gi, double t) {
    group& g = groups_[gi];
    ++g.gen;
    if (g.paused_until > t) push({g.paused_until, 0, ev_kind::pause_end, gi, g.gen});
    if (s_ == strategy::diloco && can_step(g)) {
      const double start = std::max(t, g.paused_until);
      push({start + g.remaining / speed(g), 0, ev_kind::work_done, gi, g.gen});
    }
  }

  void pause(group& g, double t, double length) {
    if (c_.overlap == pause_overlap::coalesce) {
      g.paused_until = std::max(g.paused_until, t + length);
    } else {
      g.paused_until = std::max(g.paused_until, t) + length;
    }
  }

  void fail_slice(std::uint32_t i, double t) {
    const std::uint32_t gi = slice_group_[i];
    group& g = groups_[gi];
    advance(g, t);
    const bool was = stepping(g, t);
    const double r = rate(g);
    if (!elastic()) {
      if (!g.waiting) {
        // Warm or cold relaunch, decided when the job stops: warm if this failure comes within
        // the warm window of the end of the previous relaunch (or aborts a relaunch in
        // progress, which only idle failures can do): the incident is still open, the
        // surviving hosts keep their processes, program and staged checkpoint and wait for
        // the replacement slice. Otherwise the job is torn down and relaunched cold. A window
        // of 0 means always cold.
        g.warm = c_.restart_warm_window_s > 0 &&
                 (t < g.paused_until || t - g.relaunch_end < c_.restart_warm_window_s);
      }
      if (was) {
        // Roll back to the last checkpoint (taken every checkpoint_interval_s of training since
        // the last resume), or lose the step in flight when checkpointing every step.
        const double since = t - g.resume_t;
        double lost_s = std::min(since, 0.5 * c_.step_s);  // checkpoint every step
        if (checkpoint_s_ > 0) {
          // Credited so far: since · C/(C+δ); kept: the k completed checkpoints' k · C.
          const double cycle = checkpoint_s_ + write_s_;
          const double kept = std::floor(since / cycle) * checkpoint_s_;
          lost_s = since * work_fraction() - kept;
        }
        lose(lost_s * r);
      }
      g.waiting = true;
    } else if (was) {
      lose(0.5 * c_.step_s * r);  // the step in flight
    }
    mark_down(g, i);
    if (!g.speeds.empty()) g.speeds.erase(g.speeds.find(slice_speed_[i]));
    if (elastic() && g.up > 0) {
      pause(g, t, c_.downscale_pause_s);
      join_held(g);  // returned slices join within this reconfiguration, at no extra pause
    }
    ++result_.failures;
    const double recovery = poisson_ ? draw_recovery() : scripted_recovery_s_;
    if (c_.record_trace) result_.trace.push_back({i, gi, t, recovery});
    push({t + recovery, 0, ev_kind::recovery, i, 0});
    schedule_timers(gi, t);
  }

  /// Slice i (back from repair) joins group g's mesh.
  void join(group& g, std::uint32_t i) {
    mark_up(g, i);
    if (c_.chip_speed_cv > 0) {
      slice_speed_[i] = draw_slice_speed();
      g.speeds.insert(slice_speed_[i]);
    }
  }
  void join_held(group& g) {
    for (std::uint32_t h : g.held) join(g, h);
    g.held.clear();
    ++g.upscale_gen;  // the batched upscale is no longer needed
  }

  void recover_slice(std::uint32_t i, double t) {
    const std::uint32_t gi = slice_group_[i];
    group& g = groups_[gi];
    advance(g, t);
    ++result_.recoveries;
    if (elastic() && g.up > 0 && c_.upscale_batch_s > 0) {
      // Hold the slice: it joins at the next downscale, or by a dedicated upscale pause when
      // none happens within upscale_batch_s.
      g.held.push_back(i);
      if (g.held.size() == 1) {
        ++g.upscale_gen;
        push({t + c_.upscale_batch_s, 0, ev_kind::upscale, gi, g.upscale_gen});
      }
      return;
    }
    join(g, i);
    if (!elastic()) {
      if (g.waiting && g.up == g.n) {
        g.waiting = false;
        g.paused_until = t + (g.warm ? c_.restart_s : c_.restart_cold_s);
        ++(g.warm ? result_.warm_restarts : result_.cold_restarts);
        g.resume_t = g.paused_until;
        g.relaunch_end = g.paused_until;
      }
    } else if (g.up == 1) {
      // The learner had lost every slice: it is respawned (relaunch, reload from the owners).
      // Always cold: none of its hosts survived to keep processes, program or state warm.
      g.paused_until = std::max(g.paused_until, t) + c_.restart_cold_s;
      ++result_.cold_restarts;
      if (s_ == strategy::diloco) g.pending = true;  // joins at the next outer step
    } else {
      pause(g, t, c_.upscale_pause_s);
    }
    schedule_timers(gi, t);
  }

  void handle(const event& e) {
    switch (e.kind) {
      case ev_kind::recovery: recover_slice(e.target, e.t); break;
      case ev_kind::scripted_failure: {
        const group& g = groups_[slice_group_[e.target]];
        if (pos_in_group_[e.target] >= g.up) break;  // already down: ignored
        scripted_recovery_s_ = (*script_)[e.gen].recovery_s;
        fail_slice(e.target, e.t);
        break;
      }
      case ev_kind::pause_end: break;  // a recount point
      case ev_kind::upscale: {
        group& g = groups_[e.target];
        if (e.gen != g.upscale_gen || g.held.empty()) break;  // joined at a downscale
        advance(g, e.t);
        join_held(g);
        if (g.up > 0) pause(g, e.t, c_.upscale_pause_s);
        schedule_timers(e.target, e.t);
        break;
      }
      case ev_kind::work_done: {
        group& g = groups_[e.target];
        if (e.gen != g.gen) break;  // superseded
        advance(g, e.t);
        g.remaining = 0;
        g.pending = true;
        ++g.gen;
        break;
      }
    }
  }

  /// DiLoCo: the outer step happens when every live learner is pending (policy::decide_merge
  /// with K = all live learners, no grace).
  void barrier_check(double t) {
    std::size_t live = 0, pending = 0;
    for (auto& g : groups_) {
      if (g.up > 0) {
        ++live;
        if (g.pending) ++pending;
      }
    }
    // The policy is consulted when the set of pending learners could complete the round (its
    // messages cost microseconds; a round has M arrivals): K = all live learners.
    if (live == 0 || pending < live) return;
    policy::round_state st;
    st.live = live;
    st.pending = pending;
    const auto d = policy::decide_merge(quorum_, st, t, 0.0);
    if (d.action != policy::merge_action::merge_now) return;
    for (std::uint32_t gi = 0; gi < groups_.size(); ++gi) {
      group& g = groups_[gi];
      advance(g, t);
      g.pending = false;
      g.remaining = round_work_;
      g.paused_until = std::max(g.paused_until, t + c_.outer_sync_s);  // blocking all-reduce
      schedule_timers(gi, t);
    }
    recount(t);
  }

  const sim_config& c_;
  strategy s_;
  std::mt19937_64 rng_;
  bool poisson_;
  sim_result result_;
  double end_t_ = 0, slice_chips_ = 0, round_work_ = 0, scripted_recovery_s_ = 0;
  const std::vector<scripted_failure>* script_ = nullptr;
  std::vector<group> groups_;
  std::vector<std::uint32_t> slice_group_, pos_in_group_;
  std::vector<double> slice_speed_;
  std::uint64_t loaded_slices_ = 0;
  double checkpoint_s_ = 0, write_s_ = 0;
  double next_failure_t_ = INFINITY;
  std::priority_queue<event, std::vector<event>, std::greater<event>> queue_;
  std::uint64_t seq_ = 0;
  policy::quorum_spec quorum_;
  double useful_ = 0, lost_ = 0, progress_s_ = 0, global_t_ = 0;
  bool advancing_ = false, first_count_ = true;
  std::size_t last_live_ = 0, last_step_ = 0;
};

}  // namespace

sim_result simulate(const sim_config& config, strategy s, std::uint64_t seed) {
  const std::string err = validate(config, s);
  if (!err.empty()) throw std::invalid_argument(err);
  engine e(config, s, seed, true);
  return e.run({});
}

sim_result simulate_scripted(const sim_config& config, strategy s,
                             const std::vector<scripted_failure>& failures) {
  const std::string err = validate(config, s);
  if (!err.empty()) throw std::invalid_argument(err);
  for (const auto& f : failures) {
    if (f.slice >= slice_count(config)) {
      throw std::invalid_argument("scripted failure: slice " + std::to_string(f.slice) +
                                  " out of range");
    }
    if (!(std::isfinite(f.at_s) && f.at_s >= 0 && std::isfinite(f.recovery_s) &&
          f.recovery_s >= 0)) {
      throw std::invalid_argument("scripted failure: time and recovery must be finite and >= 0");
    }
  }
  engine e(config, s, 0, false);
  return e.run(failures);
}

sim_result simulate_single_failure(const sim_config& config, strategy s, std::uint64_t slice,
                                   double fail_at_s, double recovery_s) {
  return simulate_scripted(config, s, {{slice, fail_at_s, recovery_s}});
}

}  // namespace dd::goodput
