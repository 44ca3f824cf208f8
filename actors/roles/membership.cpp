// actors/roles/membership.cpp — see membership.hpp.
#include "actors/roles/membership.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "util/hex.hpp"

namespace dd::actors {

// ---- monitor_record ------------------------------------------------------------------------

nlohmann::json monitor_record::to_json() const {
  nlohmann::json ls = nlohmann::json::array();
  for (const auto& l : learners) {
    ls.push_back({{"learner", l.id},
                  {"incarnation", l.incarnation},
                  {"finished", l.finished},
                  {"step", l.step},
                  {"tokens_before", l.tokens_before},
                  {"tokens_this_incarnation", l.tokens_this_incarnation},
                  {"compute_before_s", l.compute_before_s},
                  {"compute_this_incarnation_s", l.compute_this_incarnation_s},
                  {"data_cursor", util::to_hex(l.data_cursor)}});
    if (std::isfinite(l.loss)) ls.back()["loss"] = l.loss;
  }
  nlohmann::json j = {
      {"format", 1},          {"mean_step", mean_step},   {"training_seconds", training_seconds},
      {"uptime_s", uptime_s}, {"observed_s", observed_s}, {"learners", ls}};
  if (!run_id.empty()) j["run_id"] = run_id;
  return j;
}

monitor_record monitor_record::from_json(const nlohmann::json& rec) {
  monitor_record r;
  try {
    if (rec.value("format", 0) != 1) throw std::invalid_argument("monitor record: unknown format");
    r.run_id = rec.value("run_id", std::string());
    r.mean_step = rec.at("mean_step").get<double>();
    r.training_seconds = rec.value("training_seconds", 0.0);
    if (!(r.training_seconds >= 0.0) || !std::isfinite(r.training_seconds))
      throw std::invalid_argument("monitor record: training_seconds is not a finite number >= 0");
    r.uptime_s = rec.value("uptime_s", 0.0);
    r.observed_s = rec.value("observed_s", 0.0);
    if (!(r.uptime_s >= 0.0) || !(r.observed_s >= r.uptime_s) || !std::isfinite(r.observed_s))
      throw std::invalid_argument(
          "monitor record: uptime_s and observed_s are not finite numbers with 0 <= uptime_s <= "
          "observed_s");
    for (const auto& l : rec.at("learners")) {
      learner e;
      e.id = l.at("learner").get<int32_t>();
      e.incarnation = l.at("incarnation").get<uint64_t>();
      e.finished = l.at("finished").get<bool>();
      e.step = l.at("step").get<uint64_t>();
      e.tokens_before = l.at("tokens_before").get<uint64_t>();
      e.tokens_this_incarnation = l.at("tokens_this_incarnation").get<uint64_t>();
      e.compute_before_s = l.at("compute_before_s").get<double>();
      e.compute_this_incarnation_s = l.at("compute_this_incarnation_s").get<double>();
      const auto cursor = l.at("data_cursor").get<std::string>();
      if (cursor.size() % 2 != 0)
        throw std::invalid_argument("monitor record: odd-length data_cursor");
      auto bytes = util::from_hex(cursor);
      if (!bytes) throw std::invalid_argument("monitor record: data_cursor is not hex");
      e.data_cursor = std::move(*bytes);
      if (auto loss = l.find("loss"); loss != l.end() && loss->is_number())
        e.loss = loss->get<double>();
      r.learners.push_back(std::move(e));
    }
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("monitor record: ") + e.what());
  }
  return r;
}

// ---- membership ----------------------------------------------------------------------------

membership::membership(membership_options options, double now)
    : opts_(std::move(options)),
      started_s_(now),
      uptime_(opts_.uptime_quorum, static_cast<size_t>(std::max(opts_.learners, 0))) {}

void membership::restore(const monitor_record& rec, double now) {
  mean_step_ = rec.mean_step;
  seconds_before_ = rec.training_seconds;
  uptime_before_s_ = rec.uptime_s;
  observed_before_s_ = rec.observed_s;
  for (const auto& l : rec.learners) {
    auto& r = learners_[l.id];
    r.incarnation = l.incarnation;
    r.finished = l.finished;
    r.alive = false;
    r.step = l.step;
    r.tokens_before = l.tokens_before;
    r.tokens_this_incarnation = l.tokens_this_incarnation;
    r.compute_before_s = l.compute_before_s;
    r.compute_this_incarnation_s = l.compute_this_incarnation_s;
    r.data_cursor = l.data_cursor;
    r.last_loss = l.loss;
    if (r.finished) uptime_.finished(l.id, now);
  }
}

monitor_record membership::record(double now) const {
  monitor_record rec;
  rec.run_id = opts_.run_id;
  rec.mean_step = mean_step_;
  rec.training_seconds = seconds_before_ + std::max(0.0, now - started_s_);
  rec.uptime_s = uptime_before_s_ + uptime_.uptime_s();
  rec.observed_s = observed_before_s_ + uptime_.observed_s();
  for (const auto& [id, r] : learners_)
    rec.learners.push_back({id, r.incarnation, r.finished, r.step, r.tokens_before,
                            r.tokens_this_incarnation, r.compute_before_s,
                            r.compute_this_incarnation_s, r.data_cursor, r.last_loss});
  return rec;
}

void membership::record_verdict(write_verdict verdict) {
  if (record_failing_) record_retries_ = verdict == write_verdict::retry_degraded;
}

bool membership::record_written(bool ok, double now) {
  last_record_s_ = now;
  if (ok) {
    const bool recovered = record_failing_;
    record_failing_ = false;
    record_retries_ = true;
    return recovered;
  }
  // Tried again with backoff: 0.5 s doubling to 10 s.
  record_backoff_s_ = record_failing_ ? std::min(10.0, record_backoff_s_ * 2) : 0.5;
  record_failing_ = true;
  record_retry_s_ = now + record_backoff_s_;
  return false;
}

learner_record* membership::find(int32_t id) {
  auto it = learners_.find(id);
  return it == learners_.end() ? nullptr : &it->second;
}

size_t membership::live_count() const {
  size_t live = 0;
  for (const auto& [id, r] : learners_)
    if (r.alive) ++live;
  return live;
}

uint64_t membership::total_tokens() const {
  uint64_t t = 0;
  for (const auto& [id, r] : learners_) t += r.tokens();
  return t;
}

live_view_msg membership::view() const {
  live_view_msg v;
  v.epoch = epoch_;
  for (const auto& [id, r] : learners_)
    if (r.alive) v.learners.push_back({id, r.incarnation, r.step_time_ema_s});
  return v;
}

std::pair<double, double> membership::uptime(double now) {
  uptime_.advance(now);
  return {uptime_before_s_ + uptime_.uptime_s(), observed_before_s_ + uptime_.observed_s()};
}

learner_down membership::declare_dead(int32_t id, const std::string& why, double now) {
  auto& r = learners_[id];
  r.alive = false;
  r.down_since_s = now;
  r.down_reason = why;
  uptime_.stop(id, now);
  ++epoch_;
  return {id, r.incarnation, r.step, why, view()};
}

// ---- node handshake ------------------------------------------------------------------------

bool membership::free_for(int32_t id, const dd::node_join& req, const std::string& origin,
                          double now) const {
  auto it = learners_.find(id);
  const bool known = it != learners_.end();
  // The CAF node asking: a learner process that reconnected after its link dropped (the monitor
  // may not have noticed yet, or never does when CAF moved the node to the new connection) gets
  // its own live ids back; its learners then rejoin as new incarnations.
  if (known && it->second.alive && !origin.empty() && it->second.origin == origin) return true;
  // The same node, by name, whose learner went silent: its link is gone on its side
  // (reclaim_min_s). A node whose learner still sends heartbeats keeps it.
  if (known && it->second.alive && !it->second.node.empty() && it->second.node == req.node_name &&
      now - it->second.last_heartbeat_s >
          std::max(opts_.reclaim_min_s, 5.0 * it->second.step_time_ema_s))
    return true;
  // A learner that left (a stop signal to its process) is taken back by its own node started
  // again while the run goes on: it rejoins from the record like a killed one.
  size_t finished = 0;
  for (const auto& [other, r] : learners_)
    if (r.finished) ++finished;
  if (known && it->second.finished && !it->second.alive && !it->second.node.empty() &&
      it->second.node == req.node_name && finished < static_cast<size_t>(opts_.learners))
    return true;
  if (known && (it->second.alive || it->second.finished)) return false;
  auto rv = reserved_.find(id);
  return rv == reserved_.end() || rv->second.first == req.node_name;
}

node_join_decision membership::node_join(const dd::node_join& req, const std::string& origin,
                                         double now, const std::set<int32_t>* allowed) {
  node_join_decision d;
  auto refuse = [&](node_refusal why, std::string reason) {
    d.accepted = false;
    d.refusal = why;
    d.reason = std::move(reason);
    return d;
  };
  if (req.protocol_version != dd::protocol_version)
    return refuse(node_refusal::protocol_version,
                  fmt::format("node speaks protocol version {}, this syncer {}",
                              req.protocol_version, dd::protocol_version));
  if (!req.run_id.empty() && req.run_id != opts_.run_id)
    return refuse(node_refusal::other_run,
                  fmt::format("the node belongs to run '{}', this syncer runs run '{}'", req.run_id,
                              opts_.run_id));
  d.accepted = true;
  d.describe_only = req.learner_ids.empty() && req.learner_count == 0;
  if (d.describe_only) return d;
  if (stopping_) return refuse(node_refusal::run_finished, "the run is stopping");
  if (req.data_bytes != opts_.data_bytes || req.data_hash != opts_.data_hash)
    return refuse(node_refusal::data_mismatch,
                  fmt::format("node's data has {} bytes, training-split hash {}; the syncer's {} "
                              "bytes, hash {}",
                              req.data_bytes, req.data_hash, opts_.data_bytes, opts_.data_hash));
  for (auto it = reserved_.begin(); it != reserved_.end();)
    it = it->second.second < now ? reserved_.erase(it) : std::next(it);
  std::vector<int32_t> ids;
  if (allowed != nullptr) {
    std::string not_granted;
    for (auto id : req.learner_ids)
      if (allowed->count(id) == 0)
        not_granted += (not_granted.empty() ? "" : ",") + std::to_string(id);
    if (allowed->empty())
      return refuse(node_refusal::unauthorized,
                    "the node's certificate names no learner id (a name learner-N for each)");
    if (!not_granted.empty())
      return refuse(node_refusal::unauthorized,
                    fmt::format("learner ids {} are not named by the node's certificate (it names "
                                "learner ids {})",
                                not_granted, fmt::join(*allowed, ",")));
  }
  auto granted = [&](int32_t id) { return allowed == nullptr || allowed->count(id) != 0; };
  if (!req.learner_ids.empty()) {
    for (auto id : req.learner_ids)
      if (id < opts_.learners && free_for(id, req, origin, now)) ids.push_back(id);
  } else {
    for (int32_t id = 0; id < opts_.learners && ids.size() < req.learner_count; ++id)
      if (granted(id) && free_for(id, req, origin, now)) ids.push_back(id);
  }
  if (ids.empty()) {
    size_t finished = 0;
    for (const auto& [id, r] : learners_)
      if (r.finished) ++finished;
    if (finished >= static_cast<size_t>(opts_.learners))
      return refuse(node_refusal::run_finished, "every learner of the run has finished");
    return refuse(node_refusal::no_free_learner,
                  fmt::format("no free learner id among those asked for (M = {}; live, finished "
                              "or reserved by another node)",
                              opts_.learners));
  }
  for (auto id : ids) reserved_[id] = {req.node_name, now + opts_.reserve_s};
  d.ids = std::move(ids);
  return d;
}

// ---- join ----------------------------------------------------------------------------------

join_decision membership::join(const join_request& req, const std::string& origin, double now) {
  join_decision d;
  int32_t id = req.requested_learner_id;
  if (id < 0) {
    id = 0;
    while (learners_.count(id) != 0) ++id;
  }
  d.id = id;
  if (id >= opts_.learners) {
    d.what = join_decision::verdict::out_of_range;
    d.reason = fmt::format("learner id {} out of range (M = {})", id, opts_.learners);
    return d;
  }
  if (stopping_) {
    d.what = join_decision::verdict::stopping;
    d.reason = "the run is stopping";
    return d;
  }
  auto known_it = learners_.find(id);
  // Remote learners join only with an id their node's handshake reserved, or with the id of a
  // dead (not finished) learner from the CAF node it last joined from (a learner actor its
  // node's supervisor respawned; the handle's address proves it, also when the monitor has not
  // yet seen the earlier incarnation's down message).
  if (opts_.remote_learners) {
    auto rv = reserved_.find(id);
    const bool respawned_here = known_it != learners_.end() && !known_it->second.finished &&
                                !known_it->second.origin.empty() && !origin.empty() &&
                                known_it->second.origin == origin;
    if ((rv == reserved_.end() || rv->second.second < now) && !respawned_here) {
      const bool live = known_it != learners_.end() && known_it->second.alive;
      d.what = join_decision::verdict::not_reserved;
      d.reason = fmt::format("learner {} joined without a node handshake reserving it{}", id,
                             live ? " (it is live on node '" + known_it->second.node + "')" : "");
      return d;
    }
  }
  d.known = known_it != learners_.end();
  d.live = req.live;
  auto& r = learners_[id];
  if (d.known) {
    if (r.alive) d.replaced = declare_dead(id, "replaced by a new incarnation", now);
    r.incarnation = std::max(r.incarnation, req.incarnation) + 1;
    if (req.live) {
      // A live learner rejoining knows its tokens and compute seconds better than the last
      // heartbeat we have (those of its steps while the syncer was away never came), and its
      // totals over every incarnation better than this record (a syncer that crashed after an
      // earlier rejoin never recorded what that rejoin added).
      r.step = std::max(r.step, req.step);
      const auto t = live_rejoin_totals(r, req, opts_.tokens_per_step);
      r.tokens_before = t.tokens;
      r.compute_before_s = t.compute_s;
    } else {
      r.tokens_before += r.tokens_this_incarnation;
      r.compute_before_s += r.compute_this_incarnation_s;
    }
    r.tokens_this_incarnation = 0;
    r.compute_this_incarnation_s = 0;
  }
  if (!d.known && req.live) {  // a syncer restarted without this learner's record
    r.incarnation = req.incarnation + 1;
    r.step = req.step;
    const auto t = live_rejoin_totals(r, req, opts_.tokens_per_step);
    r.tokens_before = t.tokens;
    r.compute_before_s = t.compute_s;
  }
  if (auto rv = reserved_.find(id); rv != reserved_.end()) {
    r.node = rv->second.first;
    reserved_.erase(rv);
  }
  r.alive = true;
  r.finished = false;
  r.straggler = false;
  if (!origin.empty()) r.origin = origin;
  r.last_heartbeat_s = now;
  ++epoch_;
  d.what = d.known || req.live ? join_decision::verdict::rejoined : join_decision::verdict::joined;
  d.incarnation = r.incarnation;
  d.resume_step = r.step;
  if (d.known && opts_.align_resume_to_group) {
    for (const auto& [other, o] : learners_)
      if (other != id && o.alive) d.resume_step = std::max(d.resume_step, o.step);
    r.step = d.resume_step;
  }
  d.data_cursor = r.data_cursor;
  d.tokens_before = r.tokens_before;
  d.compute_before_s = r.compute_before_s;
  d.restart = opts_.remote_learners && d.known && !req.live;
  return d;
}

rejoin_totals live_rejoin_totals(const learner_record& r, const join_request& req,
                                 uint64_t tokens_per_step) {
  // A figure that is not a finite non-negative number counts as none.
  auto seconds = [](double s) { return std::isfinite(s) && s > 0 ? s : 0.0; };
  rejoin_totals t;
  // The record's own count, with the incarnation's tokens at least as the join reports them.
  t.tokens = r.tokens_before + std::max(req.tokens, r.tokens_this_incarnation);
  t.compute_s = r.compute_before_s + std::max(seconds(req.compute_s), r.compute_this_incarnation_s);
  if (req.tokens_total > 0 || req.compute_total_s > 0) {
    // Protocol 5: the learner's own total. It is the truth unless the record is newer (never
    // backwards): the record may lack an earlier rejoin's addition (a syncer that crashed before
    // writing it), or hold one whose reply never reached the learner (then the record's sum
    // above counts the incarnation twice — the total does not).
    t.tokens = std::max(r.tokens_before + r.tokens_this_incarnation, req.tokens_total);
    t.compute_s =
        std::max(r.compute_before_s + r.compute_this_incarnation_s, seconds(req.compute_total_s));
  }
  // Never more than the steps it reports can have trained.
  if (tokens_per_step > 0) {
    const uint64_t cap = std::max(req.step, r.step) * tokens_per_step;
    t.tokens = std::min(t.tokens, std::max(cap, r.tokens_before + r.tokens_this_incarnation));
  }
  return t;
}

// ---- heartbeats, leaves, downs -------------------------------------------------------------

heartbeat_decision membership::heartbeat(const heartbeat_msg& hb, double now) {
  heartbeat_decision d;
  auto it = learners_.find(hb.learner_id);
  if (it == learners_.end()) {
    d.what = heartbeat_decision::verdict::unknown_learner;
    return d;
  }
  auto& r = it->second;
  if (r.incarnation != hb.incarnation) {
    d.what = heartbeat_decision::verdict::stale_incarnation;
    return d;
  }
  if (!r.alive) {
    d.what = heartbeat_decision::verdict::not_alive;
    return d;
  }
  d.live = live_count();
  // The push clock moves by this learner's new steps over the live learners.
  const uint64_t advanced = hb.step > r.step ? std::min<uint64_t>(hb.step - r.step, 1000) : 0;
  mean_step_ += static_cast<double>(advanced) / static_cast<double>(std::max<size_t>(1, d.live));
  r.step = hb.step;
  r.tokens_this_incarnation = hb.tokens;
  r.step_time_ema_s = hb.step_time_ema_s;
  r.data_cursor = hb.data_cursor;
  r.last_heartbeat_s = now;
  r.last_loss = hb.loss;
  r.compute_this_incarnation_s = hb.compute_s;
  // It stepped: it counts toward the uptime for a few of its steps from now.
  if (opts_.uptime_last_step > 0 && hb.step >= opts_.uptime_last_step)
    uptime_.finished(hb.learner_id, now);  // its training is over
  else
    uptime_.heartbeat(
        hb.learner_id, now,
        std::max(opts_.uptime_window_min_s, opts_.uptime_window_steps * hb.step_time_ema_s));
  d.total_tokens = total_tokens();
  d.mean_step = mean_step_;
  if (hb.held_digest != 0 && hb.held_owner_digest != 0 && hb.held_digest != hb.held_owner_digest) {
    d.diverged = divergence{hb.learner_id,   hb.incarnation,       hb.held_fragment,
                            hb.held_version, hb.held_owner_digest, hb.held_digest};
    ++divergences_;
  }
  if (opts_.token_budget > 0 && !budget_reported_ && d.total_tokens >= opts_.token_budget) {
    budget_reported_ = true;
    d.budget_spent = true;
    uptime_.freeze(now);  // the end of training
  }
  return d;
}

leave_decision membership::leave(int32_t id, uint64_t incarnation, bool interrupted, double now) {
  leave_decision d;
  auto it = learners_.find(id);
  if (it == learners_.end() || it->second.incarnation != incarnation) return d;  // not_current
  auto& r = it->second;
  d.step = r.step;
  if (!r.alive) {
    d.what = leave_decision::verdict::already_gone;
    return d;
  }
  r.alive = false;
  // One that leaves because the run was stopped (a signal to the syncer) has not finished its
  // budget: the record keeps it unfinished, so a resumed run takes it back. Nor has one whose
  // own node was stopped (Ctrl-C on a learner started by hand): its id waits for the next node.
  r.finished = !stopping_ && !interrupted;
  uptime_.finished(id, now);
  ++epoch_;
  d.what = leave_decision::verdict::left;
  d.finished = r.finished;
  d.away = interrupted;
  return d;
}

down_decision membership::down(int32_t id, bool normal_exit, const std::string& reason,
                               double now) {
  down_decision d;
  auto it = learners_.find(id);
  if (it == learners_.end() || !it->second.alive) return d;  // already_gone
  if (normal_exit) {
    it->second.alive = false;
    it->second.finished = !stopping_;  // as for a leave
    uptime_.finished(id, now);
    ++epoch_;
    d.what = down_decision::verdict::left;
    d.finished = it->second.finished;
    return d;
  }
  d.what = down_decision::verdict::dead;
  d.dead = declare_dead(id, reason, now);
  return d;
}

// ---- ticks, drain, stop ----------------------------------------------------------------------

tick_decision membership::tick(double now) {
  tick_decision d;
  std::vector<double> times;
  for (const auto& [id, r] : learners_)
    if (r.alive && r.step_time_ema_s > 0) times.push_back(r.step_time_ema_s);
  double median = 0;
  if (!times.empty()) {
    std::sort(times.begin(), times.end());
    median = times[times.size() / 2];
  }
  std::vector<int32_t> expired;
  for (auto& [id, r] : learners_) {
    if (!r.alive) continue;
    const double lease = std::max(opts_.lease_min_s, opts_.lease_steps * r.step_time_ema_s);
    if (now - r.last_heartbeat_s > lease) expired.push_back(id);
    const bool slow = median > 0 && r.step_time_ema_s > opts_.straggler_factor * median;
    if (slow && !r.straggler) d.stragglers.push_back({id, r.step_time_ema_s, median});
    r.straggler = slow;
  }
  for (auto id : expired) d.expired.push_back(declare_dead(id, "lease expired", now));
  d.save_record = record_failing_ ? record_retries_ && now >= record_retry_s_
                                  : now - last_record_s_ >= opts_.record_every_s;
  return d;
}

drain_decision membership::drain(int32_t id, double now) const {
  drain_decision d;
  const std::string name = "learner:" + std::to_string(id);
  auto it = learners_.find(id);
  if (id < 0 || id >= opts_.learners) {
    d.detail =
        fmt::format("no such learner: {} (the run has learners 0..{})", name, opts_.learners - 1);
  } else if (it == learners_.end()) {
    d.detail = name + " has not joined yet";
  } else if (it->second.finished) {
    d.detail = fmt::format("{} has finished (left at step {})", name, it->second.step);
  } else if (!it->second.alive && it->second.down_reason.empty()) {
    // restored from the record of a resumed run, not back yet
    d.detail = name + " is not connected (not rejoined since this syncer started)";
  } else if (!it->second.alive) {
    d.detail = fmt::format(
        "{} is not connected (link down since {:.1f} s ago: {}); drain it once it rejoins", name,
        now - it->second.down_since_s, it->second.down_reason);
  } else {
    d.accepted = true;
    d.detail = fmt::format("learner {} (incarnation {}, node {}) stops at its next step and leaves",
                           id, it->second.incarnation, it->second.node);
  }
  return d;
}

std::vector<int32_t> membership::stop(double now) {
  stopping_ = true;
  uptime_.freeze(now);
  std::vector<int32_t> live;
  for (const auto& [id, r] : learners_)
    if (r.alive) live.push_back(id);
  return live;
}

bool membership::done_due() {
  if (!opts_.remote_learners || done_reported_) return false;
  size_t finished = 0;
  for (const auto& [id, r] : learners_)
    if (r.finished) ++finished;
  if (finished >= static_cast<size_t>(opts_.learners) || (stopping_ && live_count() == 0)) {
    done_reported_ = true;
    return true;
  }
  return false;
}

double membership::global_step() const {
  if (opts_.learners < 1) return 0.0;
  double sum = 0.0;
  for (const auto& [id, r] : learners_) sum += static_cast<double>(r.step);
  return sum / static_cast<double>(opts_.learners);
}

nlohmann::json membership::status(double now) const {
  nlohmann::json ls = nlohmann::json::array();
  for (const auto& [id, r] : learners_)
    ls.push_back({{"learner", id},
                  {"incarnation", r.incarnation},
                  {"alive", r.alive},
                  {"finished", r.finished},
                  {"straggler", r.straggler},
                  {"node", r.node},
                  {"step", r.step},
                  {"tokens", r.tokens()},
                  // Since its last heartbeat whatever its state: a learner that went down
                  // shows how long it has been silent, as /status and the metrics do.
                  {"lease_age_s", std::max(0.0, now - r.last_heartbeat_s)}});
  return {{"run_id", opts_.run_id}, {"epoch", epoch_},       {"learners_expected", opts_.learners},
          {"learners", ls},         {"stopping", stopping_}, {"total_tokens", total_tokens()},
          {"mean_step", mean_step_}};
}

}  // namespace dd::actors
