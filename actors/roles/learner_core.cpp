// actors/roles/learner_core.cpp — see learner_core.hpp.
#include "actors/roles/learner_core.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "messages/chunking.hpp"
#include "runtime/quantize.hpp"
#include "runtime/value_digest.hpp"

namespace dd::actors {

namespace {

/// Rebase mode keeps the deltas of at most this many unconfirmed pushes per fragment (the
/// second oldest is dropped first) ...
constexpr size_t max_outstanding = 8;
/// ... and the ids of at most this many dropped ones (the newest dropped first: the oldest bounds
/// contains_from).
constexpr size_t max_forgotten = 4096;
/// A push refused as malformed (a chunk damaged in transit) is sent again at most this often.
constexpr int max_resends = 2;
/// A leave or rejoin the monitor did not answer is tried again after this long.
constexpr double leave_retry_s = 2.0;

using phase = learner_phase;
namespace act = learner_do;

}  // namespace

uint64_t rebase_onto(learner_fragment& f, std::vector<float>& theta, std::vector<float> value,
                     uint64_t version, const std::vector<merged_push>& merged, int32_t learner_id) {
  if (theta.size() != value.size() || f.base.size() != value.size())
    throw std::invalid_argument("rebase_onto: theta has " + std::to_string(theta.size()) +
                                " elements, base " + std::to_string(f.base.size()) +
                                ", the new value " + std::to_string(value.size()));
  // Our newest outstanding transfer that the value contains, and our newest forgotten one.
  outstanding_push* inc = nullptr;
  uint64_t lost = 0;
  for (const auto& m : merged) {
    if (m.learner_id != learner_id) continue;
    for (auto& o : f.outstanding)
      if (o.incarnation == m.incarnation && o.transfer_id <= m.transfer_id &&
          o.delta.size() == value.size() && (inc == nullptr || o.transfer_id > inc->transfer_id))
        inc = &o;
    for (const auto& [id, incarnation] : f.forgotten)
      if (incarnation == m.incarnation && id <= m.transfer_id) lost = std::max(lost, id);
  }
  if (lost != 0 && (inc == nullptr || lost > inc->transfer_id)) {
    // The value holds a push whose delta is gone (and with it everything before it): its share
    // cannot be taken out of θ, so θ is the value, as at an overwrite.
    theta = value;
    f.base = std::move(value);
    f.base_version = version;
    f.outstanding.clear();
    f.forgotten.clear();
    f.steps = 0;
    f.tokens = 0;
    return lost;
  }
  if (inc != nullptr) {
    for (size_t i = 0; i < theta.size(); ++i) theta[i] += (value[i] - f.base[i]) + inc->delta[i];
  } else {
    for (size_t i = 0; i < theta.size(); ++i) theta[i] += value[i] - f.base[i];
  }
  f.base = std::move(value);
  f.base_version = version;
  if (inc == nullptr) return 0;
  // The contained push's progress is now in the value: later pushes and the counters keep
  // only what came after it.
  const uint64_t cut = inc->transfer_id, s = inc->steps, k = inc->tokens;
  const std::vector<float> d = std::move(inc->delta);  // inc is popped below
  while (!f.outstanding.empty() && f.outstanding.front().transfer_id <= cut)
    f.outstanding.pop_front();
  f.forgotten.erase(f.forgotten.begin(), f.forgotten.upper_bound(cut));
  for (auto& o : f.outstanding) {
    o.steps = o.steps > s ? o.steps - s : 0;
    o.tokens = o.tokens > k ? o.tokens - k : 0;
    for (size_t i = 0; i < d.size() && i < o.delta.size(); ++i) o.delta[i] -= d[i];
  }
  f.steps = f.steps > s ? f.steps - s : 0;
  f.tokens = f.tokens > k ? f.tokens - k : 0;
  return cut;
}

std::vector<float> model_params::read(const fragment_layout& layout) const {
  std::vector<float> theta(layout.numel);
  for (const auto& t : layout.tensors)
    model_->read_parameters(t.flat_offset, t.numel, theta.data() + t.fragment_offset);
  return theta;
}

void model_params::write(const fragment_layout& layout, const std::vector<float>& values) {
  for (const auto& t : layout.tensors)
    model_->write_parameters(t.flat_offset, t.numel, values.data() + t.fragment_offset);
}

learner_core::learner_core(learner_options opts, learner_params& params)
    : opts_(std::move(opts)), params_(&params), id_(opts_.learner_id) {
  frags_.resize(opts_.plan.fragments.size());
  has_owner_.assign(opts_.plan.fragments.size(), false);
}

nlohmann::json learner_core::who() const {
  return {{"learner", id_}, {"incarnation", incarnation_}};
}

const inflight_push* learner_core::unacked_push(int32_t p) const {
  auto it = unacked_.find(p);
  return it == unacked_.end() ? nullptr : &it->second;
}

bool learner_core::has_unsettled_push() const {
  for (const auto& [p, t] : last_pushed_)
    if (unsettled(p)) return true;
  return false;
}

bool learner_core::unsettled(int32_t p) const {
  auto sent = last_pushed_.find(p);
  if (sent == last_pushed_.end()) return false;
  auto it = last_settled_.find(p);
  return it == last_settled_.end() || it->second < sent->second;
}

void learner_core::schedule_step(learner_actions& out, double delay_s) {
  if (step_scheduled_) return;
  step_scheduled_ = true;
  out.push_back(act::step{delay_s});
}

// ---- join, rejoin and the owner directory ------------------------------------------------------

wire_bytes learner_core::join_request_bytes() const {
  join_request req;
  req.requested_learner_id = opts_.learner_id;
  req.host = "local";
  return encode(req, {opts_.run_id, 0});
}

result<join_reply> learner_core::on_join_reply(const std::vector<uint8_t>& bytes,
                                               learner_actions& out) {
  auto rep = decode_join_reply(bytes, {}, {opts_.run_id, 0});
  if (!rep) {
    out.push_back(act::refused{"undecodable_join_reply", rep.error()});
    return rep;
  }
  // From now on a message of an older syncer incarnation is refused.
  if (auto h = peek_envelope(bytes)) syncer_incarnation_ = h->sender_incarnation;
  joined_ = true;
  id_ = rep->learner_id;
  incarnation_ = rep->incarnation;
  resume_step_ = rep->resume_step;
  step_ = rep->resume_step;
  tokens_before_ = rep->tokens_before;
  compute_before_s_ = rep->compute_before_s;
  return rep;
}

learner_actions learner_core::on_resumed() {
  learner_actions out;
  out.push_back(
      act::event{"learner_start",
                 {{"learner", id_}, {"incarnation", incarnation_}, {"resume_step", resume_step_}}});
  auto more = start_reload();
  out.insert(out.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
  return out;
}

void learner_core::on_monitor_found(bool present) {
  monitor_present_ = present;
  syncer_lost_ = false;
}

void learner_core::on_monitor_lost() {
  if (opts_.leave == leave_protocol::acked) syncer_lost_ = true;
}

syncer_back learner_core::on_syncer_back() {
  if (phase_ == phase::finished && leave_ == leave_state::none) return syncer_back::ignore;
  if (!joined_) return syncer_back::first_join;  // respawned while the syncer was away
  if (leave_ != leave_state::none) leave_ = leave_state::rejoining;
  return syncer_back::rejoin;
}

learner_actions learner_core::rejoin() {
  join_request again;
  again.requested_learner_id = id_;
  again.host = "rejoin";
  again.live = true;
  again.step = step_;
  again.tokens = tokens_;
  again.incarnation = incarnation_;
  again.compute_s = compute_s_;
  // Its totals over every incarnation: the monitor takes them over a record that may lack an
  // earlier rejoin (a syncer killed before writing it).
  again.tokens_total = tokens_before_ + tokens_;
  again.compute_total_s = compute_before_s_ + compute_s_;
  // The owner directory arrives before the reply: with nothing in flight, every fragment whose
  // owner changed is pulled from its new owner (on_owner_directory).
  unacked_.clear();
  for (const auto& [p, push] : queued_) never_sent(p, push.transfer_id);
  queued_.clear();
  last_pushed_.clear();
  // The same syncer reached again over a new connection (a dropped link that healed): its owners
  // keep their addresses, so the directory that follows compares equal to the handles held now —
  // proxies that died with the old connection. Take every entry.
  owners_stale_ = true;
  last_settled_.clear();
  // Rebase mode keeps the outstanding pushes: an owner may have merged one before it was lost
  // (a restored owner names it in its broadcasts, with the incarnation that sent it), and θ
  // still holds its progress, to be taken out when a value names it.
  for (auto& f : frags_) {
    f.awaiting = false;
    f.first_since_receive = 0;
  }
  // The learner steps on until the reply: the tokens and compute of those steps belong to the
  // new incarnation (the monitor drops the old incarnation's heartbeats once it accepted the
  // join), so only what the request reported is taken off at the reply.
  return {act::rejoin{encode(again, stamp()), tokens_, compute_s_}};
}

bool learner_core::on_rejoin_reply(const std::vector<uint8_t>& bytes, uint64_t reported_tokens,
                                   double reported_compute_s, learner_actions& out) {
  // The syncer may have restarted (a new incarnation): any incarnation at least as new as the
  // one joined before.
  auto rep = decode_join_reply(bytes, {}, expect());
  if (!rep) {
    out.push_back(act::refused{"undecodable_join_reply", rep.error()});
    return false;
  }
  if (auto h = peek_envelope(bytes)) syncer_incarnation_ = h->sender_incarnation;
  const uint64_t before = incarnation_;
  incarnation_ = rep->incarnation;
  tokens_ = tokens_ > reported_tokens ? tokens_ - reported_tokens : 0;
  compute_s_ = std::max(0.0, compute_s_ - reported_compute_s);
  tokens_before_ = rep->tokens_before;
  compute_before_s_ = rep->compute_before_s;
  const bool to_leave = leave_ == leave_state::rejoining;
  out.push_back(act::event{"learner_rejoined",
                           {{"learner", id_},
                            {"incarnation_before", before},
                            {"incarnation", incarnation_},
                            {"step", step_},
                            {"to_leave", to_leave}}});
  return to_leave;
}

learner_actions learner_core::on_rejoin_failed(const std::string& error) {
  learner_actions out;
  out.push_back(act::event{"failure", {{"learner", id_}, {"what", "rejoin"}, {"error", error}}});
  if (leave_ != leave_state::none && !syncer_lost_)
    out.push_back(act::arm{act::timer::leave_retry, leave_retry_s});
  return out;
}

learner_actions learner_core::on_owner_directory(const std::vector<owner_update>& owners) {
  learner_actions out;
  const size_t n = std::min(owners.size(), has_owner_.size());
  if (phase_ == phase::finished) {
    // A pending leave's learner: the owners of its final pushes (final_pushes), no pulls.
    owners_stale_ = false;
    for (size_t p = 0; p < n; ++p) has_owner_[p] = owners[p].present;
    return out;
  }
  // After a reconnect every handle is new even when it compares equal to the old one.
  const bool rejoined = owners_stale_;
  owners_stale_ = false;
  for (size_t p = 0; p < n; ++p) {
    if (!rejoined && !owners[p].changed) continue;
    const bool replaced = rejoined || has_owner_[p];
    has_owner_[p] = owners[p].present;
    auto it = unacked_.find(static_cast<int32_t>(p));
    if (it != unacked_.end()) {
      if (owners[p].present)
        out.push_back(act::push_chunks{it->first, it->second.chunks, it->second.transfer_id});
    } else if (replaced && owners[p].present && phase_ != phase::syncing &&
               phase_ != phase::joining) {
      // A respawned owner lost its pending pushes: resynchronize this fragment with it (barrier
      // mode would otherwise wait for a merge that cannot come).
      frags_[p].awaiting = false;
      out.push_back(act::pull{static_cast<int32_t>(p), pull_bytes(p)});
    }
  }
  if (phase_ == phase::syncing) pull_missing(out);
  return out;
}

wire_bytes learner_core::pull_bytes(size_t p) const {
  pull_request req;
  req.learner_id = id_;
  req.incarnation = incarnation_;
  req.fragment_id = static_cast<int32_t>(p);
  return encode(req, stamp());
}

void learner_core::pull_missing(learner_actions& out) const {
  for (size_t p = 0; p < frags_.size(); ++p)
    if (!frags_[p].have && has_owner_[p])
      out.push_back(act::pull{static_cast<int32_t>(p), pull_bytes(p)});
}

learner_actions learner_core::start_reload() {
  learner_actions out;
  phase_ = phase::syncing;
  out.push_back(act::stepping{false});
  for (auto& f : frags_) f.have = false;
  assembler_.clear();
  pull_missing(out);
  return out;
}

// ---- the step loop ------------------------------------------------------------------------------

bool learner_core::barrier_blocked() const {
  if (opts_.barrier.mode == barrier_policy::kind::off) return false;
  const uint64_t next = step_ + 1;
  for (const auto& f : frags_)
    if (f.awaiting && next > f.pushed_at_step + static_cast<uint64_t>(opts_.barrier.tau))
      return true;
  return false;
}

step_plan learner_core::on_step_timer(double now_s) {
  step_plan plan;
  step_scheduled_ = false;
  if (phase_ != phase::stepping && phase_ != phase::waiting) return plan;
  if (stop_ != stop_origin::none || (opts_.max_steps > 0 && step_ >= opts_.max_steps)) {
    plan.actions = finish();
    return plan;
  }
  if (barrier_blocked()) {
    if (phase_ != phase::waiting) {
      phase_ = phase::waiting;
      wait_started_s_ = now_s;
      plan.actions.push_back(act::stepping{false});
      plan.actions.push_back(act::arm{act::timer::barrier, opts_.barrier.timeout_s});
    }
    return plan;
  }
  phase_ = phase::stepping;
  const auto own = static_cast<int64_t>(step_);
  double lr = opts_.schedule.at(
      opts_.lr_clock == clock_source::global && global_step_ >= 0 ? global_step_ : own);
  if (incarnation_ > 0 && opts_.rewarmup_steps > 0) {
    double k = static_cast<double>(own - static_cast<int64_t>(resume_step_) + 1) /
               static_cast<double>(opts_.rewarmup_steps);
    lr *= std::min(1.0, std::max(k, 0.0));
  }
  plan.train = true;
  plan.lr = lr;
  return plan;
}

learner_actions learner_core::on_step_discarded(double loss) {
  // A discarded step is no step: it counts no tokens either (a learner's tokens are its steps ×
  // batch × context, the invariant `dd-chaos report` checks as tokens_match_steps).
  learner_actions out;
  out.push_back(act::event{"nonfinite",
                           {{"learner", id_},
                            {"incarnation", incarnation_},
                            {"step", step_},
                            {"loss", std::isfinite(loss) ? loss : -1.0}}});
  out.push_back(act::count{act::counter::discarded_step});
  auto more = start_reload();
  out.insert(out.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
  return out;
}

learner_actions learner_core::on_step_done(const step_report& r) {
  learner_actions out;
  tokens_ += opts_.tokens_per_step;
  step_ += 1;
  for (auto& f : frags_) {
    f.steps += 1;
    f.tokens += opts_.tokens_per_step;
  }
  const bool simulated = opts_.timer.clock == step_timer::kind::simulated;
  const double dt = simulated ? opts_.timer.sim_step_s : r.measured_s;
  if (!simulated && r.factor > 1.0) out.push_back(act::sleep{(r.factor - 1.0) * dt});
  const double step_s = dt * r.factor;
  step_time_.update(step_s);
  compute_s_ += step_s;
  last_step_s_ = step_s;
  out.push_back(act::step_stats{step_, opts_.tokens_per_step, r.loss, step_s,
                                step_s > 0 ? 1.0 / step_time_.value() : 0.0, incarnation_,
                                tokens_before_ + tokens_});
  // Heartbeat: step, tokens, step-time EMA, data cursor (what a respawn resumes from).
  heartbeat_msg hb;
  hb.learner_id = id_;
  hb.incarnation = incarnation_;
  hb.step = step_;
  hb.tokens = tokens_;
  hb.step_time_ema_s = step_time_.value();
  hb.data_cursor = r.data_cursor;
  hb.loss = r.loss;
  hb.compute_s = compute_s_;
  hb.lr = r.lr;
  hb.step_end_unix_s = r.end_unix_s;
  check_held_value(hb, out);
  out.push_back(act::heartbeat{step_, encode(hb, stamp())});
  return out;
}

void learner_core::check_held_value(heartbeat_msg& hb, learner_actions& out) {
  const size_t n = frags_.size();
  for (size_t k = 0; k < n; ++k) {
    const size_t p = (next_check_ + k) % n;
    auto& f = frags_[p];
    if (!f.have || f.refetch || f.owner_digest == 0 || f.base.empty()) continue;
    next_check_ = (p + 1) % n;
    hb.held_fragment = static_cast<int32_t>(p);
    hb.held_version = f.base_version;
    hb.held_owner_digest = f.owner_digest;
    hb.held_digest = value_digest(f.base);
    if (hb.held_digest != f.owner_digest) {
      // Corrupted in memory (or by a bug) since it arrived: fetch it again; the monitor reports
      // the heartbeat as a divergence.
      f.refetch = true;
      out.push_back(act::event{"value_refetch",
                               {{"learner", id_},
                                {"incarnation", incarnation_},
                                {"step", step_},
                                {"fragment", static_cast<int32_t>(p)},
                                {"version", f.base_version},
                                {"reason", "the held value's digest differs from the owner's"}}});
      if (p < has_owner_.size() && has_owner_[p])
        out.push_back(act::pull{static_cast<int32_t>(p), pull_bytes(p)});
    }
    return;
  }
}

int32_t learner_core::corrupt_held_value() {
  const size_t n = frags_.size();
  for (size_t k = 0; k < n; ++k) {
    const size_t p = (next_check_ + k) % n;
    auto& f = frags_[p];
    if (!f.have || f.base.empty()) continue;
    uint32_t bits;
    std::memcpy(&bits, &f.base[0], sizeof bits);
    bits ^= 0x00400001u;  // a mantissa bit and the lowest: a finite, different value
    std::memcpy(&f.base[0], &bits, sizeof bits);
    next_check_ = p;
    return static_cast<int32_t>(p);
  }
  return -1;
}

std::vector<due_push> learner_core::push_due(double now_s) {
  // Gives up on pushes unanswered for H steps (dropped in transit; the next push of the fragment
  // carries their tokens, since counters reset only when a global value arrives).
  for (auto it = unacked_.begin(); it != unacked_.end();) {
    if (step_ >= it->second.sent_step + static_cast<uint64_t>(opts_.sync_interval))
      it = unacked_.erase(it);
    else
      ++it;
  }
  const auto H = static_cast<uint64_t>(opts_.sync_interval);
  const auto P = static_cast<uint64_t>(opts_.plan.num_fragments());
  std::vector<uint64_t> due;
  if (opts_.push_clock == clock_source::own) {
    due = policy::fragments_due(step_, H, P);
  } else {
    // The mean step's turns crossed since the previous check, estimated half a step ahead so the
    // push lands at the boundary nearest the crossing (none before the first reading). At most H
    // steps ahead of the newest reading: an overestimate is latched below, and would hold back
    // every push until the real mean step caught up with it.
    const double own = step_time_.value();
    if (auto g = mean_step_clock_.at(now_s + 0.5 * own, 3.0 * own, static_cast<double>(H))) {
      const auto now_clock = static_cast<int64_t>(std::floor(*g));
      if (push_clock_ >= 0)
        due = policy::fragments_due_between(static_cast<uint64_t>(push_clock_),
                                            static_cast<uint64_t>(std::max<int64_t>(0, now_clock)),
                                            H, P);
      push_clock_ = std::max(push_clock_, now_clock);
    }
  }
  std::vector<due_push> out;
  for (auto p : due) {
    const auto fragment = static_cast<int32_t>(p);
    out.push_back({fragment, step_, build_push(fragment, step_)});
  }
  return out;
}

learner_actions learner_core::after_step() {
  if (opts_.max_steps > 0 && step_ >= opts_.max_steps) return finish();
  learner_actions out;
  schedule_step(out, opts_.timer.clock == step_timer::kind::simulated ? last_step_s_ : 0.0);
  return out;
}

// ---- pushes
// ---------------------------------------------------------------------------------------

std::optional<inflight_push> learner_core::build_push(int32_t p, uint64_t step) {
  auto& f = frags_.at(static_cast<size_t>(p));
  if (f.steps == 0 || !f.have) return std::nullopt;
  const auto& layout = opts_.plan.fragments.at(static_cast<size_t>(p));
  std::vector<float> delta = params_->read(layout);
  for (size_t i = 0; i < delta.size(); ++i) delta[i] = f.base[i] - delta[i];
  push_msg m;
  m.learner_id = id_;
  m.incarnation = incarnation_;
  m.fragment_id = p;
  m.base_version = f.base_version;
  m.steps = f.steps;
  m.tokens = f.tokens;
  m.transfer_id = step;
  m.encoding = opts_.wire;
  m.total_elements = layout.numel;
  m.payload = encode_payload(opts_.wire, delta.data(), delta.size());
  m.payload_bytes = m.payload.size();
  if (opts_.apply.how == fragment_apply::kind::rebase) {
    // This push holds the progress of every push not yet seen merged or refused, forgotten
    // ones included.
    m.contains_from = f.outstanding.empty() ? 0 : f.outstanding.front().transfer_id;
    if (!f.forgotten.empty())
      m.contains_from = m.contains_from == 0
                            ? f.forgotten.begin()->first
                            : std::min(m.contains_from, f.forgotten.begin()->first);
    outstanding_push o;
    o.transfer_id = step;
    o.steps = f.steps;
    o.tokens = f.tokens;
    o.incarnation = incarnation_;
    // What the owner will merge (quantization included): rebasing on it keeps the encoding
    // error in the local model, where the next push carries it (error feedback).
    auto sent = decode_payload(m.encoding, m.payload.data(), m.payload.size(), layout.numel);
    o.delta = sent ? std::move(*sent) : std::move(delta);
    f.outstanding.push_back(std::move(o));
    if (f.outstanding.size() > max_outstanding) {
      // Keep the oldest: the first of these pushes an owner merges is the one it gets first,
      // and it refuses every later one holding its progress as superseded. The dropped one's id
      // is kept (rebase_onto, contains_from above).
      auto second = std::next(f.outstanding.begin());
      f.forgotten[second->transfer_id] = second->incarnation;
      f.outstanding.erase(second);
      while (f.forgotten.size() > max_forgotten) f.forgotten.erase(std::prev(f.forgotten.end()));
    }
  } else {
    m.contains_from = f.first_since_receive;
    if (f.first_since_receive == 0) f.first_since_receive = step;
  }
  inflight_push push;
  push.transfer_id = step;
  push.sent_step = step;
  if (m.payload.size() <= opts_.chunk_bytes) {
    push.chunks.push_back(encode(m, stamp()));
  } else {
    // Each chunk's payload copied once, into its message (not first into a split-off copy).
    push.chunks = std::move(*encode_push_chunks(m, opts_.chunk_bytes, stamp()));
  }
  if (opts_.barrier.mode != barrier_policy::kind::off) {
    f.awaiting = true;
    f.pushed_at_step = step;
  }
  return push;
}

learner_actions learner_core::enqueue(int32_t p, inflight_push push) {
  // A newer push replaces an unsent older one of the same fragment.
  for (auto it = queued_.begin(); it != queued_.end(); ++it)
    if (it->first == p) {
      never_sent(it->first, it->second.transfer_id);
      queued_.erase(it);
      break;
    }
  queued_.emplace_back(p, std::move(push));
  // The final pushes are one per fragment and each the only one of its fragment: none is
  // dropped for another.
  const size_t cap = final_push_done_ ? std::max(frags_.size(), size_t{1})
                                      : static_cast<size_t>(std::max(1, opts_.max_inflight));
  while (queued_.size() > cap) {
    never_sent(queued_.front().first, queued_.front().second.transfer_id);
    queued_.pop_front();
  }
  return drain_queue();
}

void learner_core::never_sent(int32_t p, uint64_t transfer_id) {
  // No owner can merge it: it holds no slot among the outstanding pushes (its progress is in θ
  // and rides on the fragment's next push, whose delta holds it).
  auto& outstanding = frags_.at(static_cast<size_t>(p)).outstanding;
  for (auto it = outstanding.begin(); it != outstanding.end(); ++it)
    if (it->transfer_id == transfer_id && it->incarnation == incarnation_) {
      outstanding.erase(it);
      return;
    }
}

learner_actions learner_core::drain_queue() {
  learner_actions out;
  while (!queued_.empty() &&
         unacked_.size() < static_cast<size_t>(std::max(1, opts_.max_inflight))) {
    auto [p, push] = std::move(queued_.front());
    queued_.pop_front();
    if (unacked_.count(p) != 0) {
      // Still waiting on an older push of the same fragment: keep the newest queued.
      queued_.emplace_back(p, std::move(push));
      break;
    }
    // Without an owner it is sent when one appears (on_owner_directory): still outstanding.
    if (has_owner_.at(static_cast<size_t>(p)))
      out.push_back(act::push_chunks{p, push.chunks, push.transfer_id});
    last_pushed_[p] = push.transfer_id;  // sent: the drain waits for its answer
    unacked_[p] = std::move(push);
  }
  return out;
}

learner_actions learner_core::on_ack(const std::vector<uint8_t>& bytes) {
  auto ack = decode_push_ack(bytes, {}, expect());
  if (!ack) return {act::refused{"undecodable_ack", ack.error()}};
  if (ack->learner_id != id_ || ack->incarnation != incarnation_) return {};  // not ours
  auto it = unacked_.find(ack->fragment_id);
  if (it != unacked_.end() && it->second.transfer_id == ack->transfer_id) unacked_.erase(it);
  return drain_queue();
}

learner_actions learner_core::on_reject(const std::vector<uint8_t>& bytes) {
  auto rj = decode_reject(bytes, {}, expect());
  if (!rj) return {act::refused{"undecodable_reject", rj.error()}};
  learner_actions out;
  // Refused as malformed (e.g. a chunk damaged in transit, caught by its CRC-32C): send the same
  // push again; it stays unanswered and unsettled meanwhile.
  if (rj->reason == reject_reason::malformed && rj->fragment_id >= 0 &&
      static_cast<size_t>(rj->fragment_id) < has_owner_.size()) {
    auto it = unacked_.find(rj->fragment_id);
    if (it != unacked_.end() && it->second.transfer_id == rj->transfer_id &&
        has_owner_[static_cast<size_t>(rj->fragment_id)] && it->second.resends < max_resends) {
      it->second.resends += 1;
      out.push_back(act::push_chunks{rj->fragment_id, it->second.chunks, rj->transfer_id});
      out.push_back(act::event{"push_resent",
                               {{"learner", id_},
                                {"fragment", rj->fragment_id},
                                {"transfer_id", rj->transfer_id},
                                {"detail", rj->detail}}});
      return out;
    }
  }
  auto& settled = last_settled_[rj->fragment_id];
  settled = std::max(settled, rj->transfer_id);
  if (phase_ == phase::draining) {
    if (!has_unsettled_push()) return finish();
    return out;
  }
  unacked_.erase(rj->fragment_id);
  if (rj->fragment_id >= 0 && static_cast<size_t>(rj->fragment_id) < frags_.size()) {
    auto& f = frags_[static_cast<size_t>(rj->fragment_id)];
    if (rj->reason != reject_reason::stale) f.awaiting = false;
    // A refused push is never merged: its progress stays in θ and rides on the next push.
    for (auto it = f.outstanding.begin(); it != f.outstanding.end(); ++it)
      if (it->transfer_id == rj->transfer_id) {
        f.outstanding.erase(it);
        break;
      }
    f.forgotten.erase(rj->transfer_id);
  }
  out = drain_queue();
  if (phase_ == phase::waiting && !barrier_blocked()) resume_stepping(out);
  return out;
}

void learner_core::resume_stepping(learner_actions& out) {
  phase_ = phase::stepping;
  out.push_back(act::stepping{true});
  schedule_step(out);
}

// ---- global values ------------------------------------------------------------------------------

bool learner_core::apply_global(const broadcast_msg& b, learner_actions& out) {
  if (b.fragment_id < 0 || static_cast<size_t>(b.fragment_id) >= frags_.size()) {
    out.push_back(act::refused{
        "undecodable_broadcast",
        wire_error{errc::malformed, "broadcast names fragment " + std::to_string(b.fragment_id) +
                                        " of " + std::to_string(frags_.size())}});
    return false;
  }
  const auto& layout = opts_.plan.fragments[static_cast<size_t>(b.fragment_id)];
  auto values = decode_payload(b.encoding, b.payload.data(), b.payload.size(), layout.numel);
  if (!values) {
    out.push_back(act::refused{"undecodable_broadcast", values.error()});
    return false;
  }
  auto& f = frags_[static_cast<size_t>(b.fragment_id)];
  f.owner_digest = b.value_digest;
  if (opts_.apply.how == fragment_apply::kind::rebase && f.have && phase_ != phase::syncing &&
      !f.refetch) {
    std::vector<float> theta = params_->read(layout);
    rebase_onto(f, theta, std::move(*values), b.version, b.merged, id_);
    f.base_merged = b.merged;
    params_->write(layout, theta);
    f.awaiting = false;
    return true;
  }
  const double alpha = opts_.apply.how == fragment_apply::kind::overwrite ? opts_.apply.alpha : 0.0;
  const bool overwrite = alpha <= 0.0 || phase_ == phase::syncing || f.refetch;
  f.refetch = false;
  std::vector<float> theta;
  if (!overwrite) {
    theta = params_->read(layout);
    for (size_t i = 0; i < theta.size(); ++i)
      theta[i] = static_cast<float>(alpha * theta[i] + (1.0 - alpha) * (*values)[i]);
  } else {
    theta = *values;
  }
  params_->write(layout, theta);
  f.base = std::move(*values);
  f.base_version = b.version;
  f.base_merged = b.merged;
  f.steps = 0;
  f.tokens = 0;
  f.have = true;
  f.awaiting = false;
  f.first_since_receive = 0;
  f.outstanding.clear();
  f.forgotten.clear();
  return true;
}

void learner_core::refuse_damaged_broadcast(int32_t fragment, const std::string& detail,
                                            learner_actions& out) const {
  out.push_back(act::event{
      "chunk_refused",
      {{"learner", id_}, {"fragment", fragment}, {"what", "broadcast"}, {"detail", detail}}});
  out.push_back(act::count{act::counter::chunk_refused});
  if (fragment >= 0 && static_cast<size_t>(fragment) < has_owner_.size() &&
      has_owner_[static_cast<size_t>(fragment)])
    out.push_back(act::pull{fragment, pull_bytes(static_cast<size_t>(fragment))});
}

learner_actions learner_core::on_broadcast(const std::vector<uint8_t>& bytes) {
  learner_actions out;
  if (phase_ == phase::joining || phase_ == phase::finished) return out;
  // The payload is left in `bytes`; its share of the trailer's check is done by the assembler
  // while it copies the payload into place (one read of it), before it accepts anything.
  decode_limits limits;
  limits.defer_payload_checksum = true;
  auto chunk = decode_broadcast_ref(bytes, limits, expect());
  if (!chunk && chunk.code() == errc::checksum_mismatch) {
    // Damaged on the way: never applied; its header, read without the checksum, only names the
    // fragment to ask for again.
    out.push_back(act::refused{"undecodable_broadcast", chunk.error()});
    decode_limits unchecked;
    unchecked.verify_checksum = false;
    auto header = decode_broadcast_ref(bytes, unchecked, expect());
    refuse_damaged_broadcast(header ? header->header.fragment_id : -1, chunk.error().message, out);
    return out;
  }
  if (!chunk) return {act::refused{"undecodable_broadcast", chunk.error()}};
  const int32_t fragment = chunk->header.fragment_id;
  auto whole = assembler_.add(*chunk);
  if (!whole) {
    out.push_back(act::refused{"undecodable_broadcast", whole.error()});
    if (whole.code() == errc::checksum_mismatch)
      refuse_damaged_broadcast(fragment, whole.error().message, out);
    return out;
  }
  if (!whole->has_value()) return out;  // more chunks to come
  const bool applied = apply_global(**whole, out);
  // The values are applied (copied out): the next broadcast assembles into this buffer.
  assembler_.recycle(std::move((*whole)->payload));
  if (!applied) return out;
  for (const auto& m : (*whole)->merged)
    if (m.learner_id == id_ && m.incarnation == incarnation_) {
      auto& settled = last_settled_[(*whole)->fragment_id];
      settled = std::max(settled, m.transfer_id);
    }
  if (phase_ == phase::draining) {
    if (!has_unsettled_push()) return finish();
    return out;
  }
  if (phase_ == phase::syncing &&
      std::all_of(frags_.begin(), frags_.end(), [](const learner_fragment& f) { return f.have; }))
    synced(out);
  else if (phase_ == phase::waiting && !barrier_blocked())
    resume_stepping(out);
  return out;
}

void learner_core::synced(learner_actions& out) {
  phase_ = phase::stepping;
  out.push_back(act::stepping{true});
  if (!gate_joined_) {
    out.push_back(act::gate{true});
    gate_joined_ = true;
  }
  out.push_back(act::event{"learner_synced",
                           {{"learner", id_}, {"incarnation", incarnation_}, {"step", step_}}});
  schedule_step(out);
}

learner_actions learner_core::on_progress(const std::vector<uint8_t>& bytes) {
  auto pm = decode_progress(bytes, {}, expect());
  if (!pm) return {act::refused{"undecodable_progress", pm.error()}};
  global_step_ = static_cast<int64_t>(
      pm->total_tokens / (opts_.tokens_per_step * std::max<uint64_t>(1, opts_.learners)));
  // Dated by when the answered heartbeat left (this actor's clock). A reply that cannot be dated
  // so is not used: dated by its arrival, a burst of replies held up by a busy syncer gave the
  // clock a rate of thousands of steps per second (policy::global_clock).
  if (auto sent = heartbeat_dates_.answer(pm->step)) {
    const uint64_t restarts = mean_step_clock_.restarts();
    mean_step_clock_.observe(*sent, pm->mean_step);
    // The clock went backwards (a restarted syncer's monitor): the value latched from the old
    // one would hold back every push until the new one caught up. Start over from it.
    if (mean_step_clock_.restarts() != restarts) push_clock_ = -1;
  }
  return {};
}

query_answer learner_core::on_query(const std::vector<uint8_t>& bytes) {
  query_answer a;
  auto q = decode_fragment_query(bytes, {}, expect());
  if (!q) {
    a.error = q.error();
    return a;
  }
  fragment_held h;
  h.learner_id = id_;
  h.incarnation = incarnation_;
  h.fragment_id = q->fragment_id;
  h.query_id = q->query_id;
  const size_t p = static_cast<size_t>(q->fragment_id);
  if (joined_ && p < frags_.size() && frags_[p].have &&
      frags_[p].base.size() == opts_.plan.fragments[p].numel) {
    h.have = true;
    h.version = frags_[p].base_version;
  }
  a.held = encode(h, stamp());
  if (!h.have || !q->send_value) return a;
  const auto& f = frags_[p];
  broadcast_msg b;
  b.fragment_id = q->fragment_id;
  b.version = f.base_version;
  b.encoding = payload_encoding::fp32;
  b.total_elements = f.base.size();
  b.payload = encode_payload(payload_encoding::fp32, f.base.data(), f.base.size());
  b.payload_bytes = b.payload.size();
  b.merged = f.base_merged;
  if (b.payload.size() <= opts_.chunk_bytes) {
    a.copy.push_back(encode(b, stamp()));
  } else if (auto chunks = encode_broadcast_chunks(b, opts_.chunk_bytes, stamp()); chunks) {
    a.copy = std::move(*chunks);
  }
  a.actions.push_back(
      act::event{"fragment_copy_sent",
                 {{"learner", id_}, {"fragment", q->fragment_id}, {"version", f.base_version}}});
  return a;
}

learner_actions learner_core::on_barrier_timeout(double now_s) {
  learner_actions out;
  if (phase_ != phase::waiting) return out;
  if (now_s - wait_started_s_ + 1e-9 < opts_.barrier.timeout_s) return out;
  for (auto& f : frags_) f.awaiting = false;
  out.push_back(act::event{"barrier_timeout", {{"learner", id_}, {"step", step_}}});
  resume_stepping(out);
  return out;
}

// ---- the end ------------------------------------------------------------------------------------

wire_bytes learner_core::leave_bytes() const {
  leave_msg lm;
  lm.learner_id = id_;
  lm.incarnation = incarnation_;
  lm.interrupted = stop_ == stop_origin::node;
  return encode(lm, stamp());
}

void learner_core::log_leave_pending(const std::string& why, learner_actions& out) const {
  out.push_back(act::event{"leave_pending",
                           {{"learner", id_},
                            {"incarnation", incarnation_},
                            {"error", why},
                            {"syncer_lost", syncer_lost_}}});
}

void learner_core::send_leave(learner_actions& out) {
  out.push_back(act::leave{leave_bytes(), ++leave_attempt_});
}

void learner_core::push_at_finish(learner_actions& out) {
  final_push_done_ = true;
  size_t pushed = 0;
  for (size_t p = 0; p < frags_.size(); ++p) {
    const auto fragment = static_cast<int32_t>(p);
    // A fragment whose previous push is still unsettled keeps it: a second push computed
    // against the same base would carry that delta twice.
    if (!has_owner_[p] || unsettled(fragment)) continue;
    auto push = build_push(fragment, step_);
    if (!push) continue;  // nothing trained since its last global value, or none held
    auto sent = enqueue(fragment, std::move(*push));
    out.insert(out.end(), std::make_move_iterator(sent.begin()),
               std::make_move_iterator(sent.end()));
    ++pushed;
  }
  out.push_back(final_pushes_event(pushed));
}

act::event learner_core::final_pushes_event(size_t fragments) const {
  return act::event{
      "final_pushes",
      {{"learner", id_}, {"incarnation", incarnation_}, {"step", step_}, {"fragments", fragments}}};
}

learner_actions learner_core::finish() {
  learner_actions out;
  if (phase_ == phase::finished) return out;
  if (opts_.final_push && !final_push_done_ && phase_ == phase::stepping) push_at_finish(out);
  if (phase_ != phase::draining && opts_.drain_timeout_s > 0 && has_unsettled_push()) {
    // Stop stepping but stay live until the final pushes are merged (or refused, or timeout).
    phase_ = phase::draining;
    out.push_back(act::gate{false});
    // Its training is over: the uptime window closes with the last learner's last step, not
    // with the end of its drain.
    out.push_back(act::training_over{});
    out.push_back(act::arm{act::timer::drain, opts_.drain_timeout_s});
    return out;
  }
  const bool drained = phase_ == phase::draining;  // gate left, finish logged at drain start
  phase_ = phase::finished;
  if (!drained) {
    out.push_back(act::gate{false});
    // Marks it not stepping too, in one step (no artificial gap in the uptime integral).
    out.push_back(act::training_over{});
  }
  if (!done_logged_)
    out.push_back(act::event{"learner_done",
                             {{"learner", id_}, {"incarnation", incarnation_}, {"step", step_}}});
  done_logged_ = true;
  if (!monitor_present_ || !joined_) {
    out.push_back(act::quit{});
    return out;
  }
  if (opts_.leave == leave_protocol::send_and_exit) {
    // In one process the monitor cannot be lost before its learners: send and exit.
    out.push_back(act::leave{leave_bytes(), 0});
    out.push_back(act::quit{});
    return out;
  }
  if (syncer_lost_ && stop_ == stop_origin::node) {
    // Its node is stopping (a signal, --join-deadline, a refusal) with no syncer to tell.
    out.push_back(act::quit{});
    return out;
  }
  leave_ = leave_state::asking;
  if (syncer_lost_) {
    // The syncer is away (a request to its dead proxy would go unanswered): kept for a syncer.
    log_leave_pending("the syncer is away", out);
    return out;
  }
  send_leave(out);
  return out;
}

learner_actions learner_core::on_stop(const std::vector<uint8_t>& bytes) {
  auto stop = decode_stop(bytes, {}, expect());
  if (!stop) return {act::refused{"undecodable_stop", stop.error()}};
  if (stop_ == stop_origin::none) stop_ = stop_origin::monitor;
  if (phase_ != phase::stepping && phase_ != phase::draining) return finish();
  return {};
}

learner_actions learner_core::on_node_stop() {
  if (leave_ != leave_state::none) {
    // Its node stops while the leave waits for a syncer: no syncer will take it now.
    return {act::event{"leave_abandoned", who()}, act::quit{}};
  }
  stop_ = stop_origin::node;
  if (phase_ != phase::stepping && phase_ != phase::draining) return finish();
  return {};
}

learner_actions learner_core::on_drain_timeout() {
  if (phase_ == phase::draining) return finish();
  return {};
}

learner_actions learner_core::on_leave_answered() {
  if (leave_ == leave_state::none) return {};
  leave_ = leave_state::none;
  return {act::quit{}};
}

learner_actions learner_core::on_leave_failed(uint64_t attempt, const std::string& error) {
  learner_actions out;
  if (leave_ == leave_state::none || attempt != leave_attempt_) return out;  // answered, resent
  if (stop_ == stop_origin::node) return {act::quit{}};  // the node stops: no syncer to wait for
  log_leave_pending(error, out);
  if (!syncer_lost_) out.push_back(act::arm{act::timer::leave_retry, leave_retry_s});
  return out;
}

learner_actions learner_core::on_leave_retry() {
  if (leave_ == leave_state::none || syncer_lost_) return {};
  if (leave_ == leave_state::rejoining) return rejoin();
  learner_actions out;
  send_leave(out);
  return out;
}

std::vector<due_push> learner_core::final_pushes() {
  final_push_done_ = true;     // these are its final pushes: finish() makes no more
  leave_ = leave_state::none;  // finish() asks again, after the drain
  phase_ = phase::stepping;    // for finish(): it drains from here
  std::vector<due_push> out;
  for (size_t p = 0; p < frags_.size(); ++p) {
    const auto& f = frags_[p];
    if (f.steps == 0 || !f.have || !has_owner_[p]) continue;
    const auto fragment = static_cast<int32_t>(p);
    out.push_back({fragment, step_, build_push(fragment, step_)});
  }
  final_pushed_ = out.size();
  return out;
}

learner_actions learner_core::end_final_pushes() {
  learner_actions out;
  out.push_back(final_pushes_event(final_pushed_));
  auto more = finish();
  out.insert(out.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
  return out;
}

}  // namespace dd::actors
