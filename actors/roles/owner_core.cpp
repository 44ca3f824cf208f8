// actors/roles/owner_core.cpp — see owner_core.hpp.
//
// Round life cycle of one fragment (ALGORITHM.md, "Fragment owner"):
//
//   idle --first accepted push--> collecting --|pending| >= K--> grace (timer armed)
//     ^                              |   \                          |
//     |                              |    every live learner pending / grace 0
//     |                              v                              v
//     +------------------------- merge: outer step, version += 1, broadcast, checkpoint
#include "actors/roles/owner_core.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <stdexcept>

#include "runtime/quantize.hpp"
#include "runtime/value_digest.hpp"

namespace dd::actors {

namespace {

/// The outcome `what` of the whole push m, with the push's identity.
push_outcome outcome_of(const push_msg& m, push_outcome::status what) {
  push_outcome out;
  out.what = what;
  out.learner_id = m.learner_id;
  out.incarnation = m.incarnation;
  out.transfer_id = m.transfer_id;
  out.payload_bytes = m.payload_bytes;
  out.base_version = m.base_version;
  return out;
}

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

owner_core::owner_core(owner_options opts, kernels::backend& be, const std::vector<float>& initial,
                       clock_fn clock)
    : opts_(std::move(opts)), be_(&be), clock_(std::move(clock)) {
  if (initial.size() != opts_.layout.numel)
    throw std::invalid_argument("fragment owner " + std::to_string(opts_.layout.fragment_id) +
                                ": initial value has " + std::to_string(initial.size()) +
                                " elements, the fragment has " +
                                std::to_string(opts_.layout.numel));
  init_common();
  be_->upload(theta_.data(), initial.data(), initial.size());
  if (ring_) ring_->record(version_, theta_.data());
}

owner_core::owner_core(owner_options opts, kernels::backend& be, const owner_checkpoint& ckpt,
                       clock_fn clock)
    : opts_(std::move(opts)), be_(&be), clock_(std::move(clock)) {
  const size_t n = opts_.layout.numel;
  if (ckpt.fragment_id != opts_.layout.fragment_id)
    throw std::invalid_argument("owner checkpoint is for fragment " +
                                std::to_string(ckpt.fragment_id) + ", expected " +
                                std::to_string(opts_.layout.fragment_id));
  if (ckpt.value.size() != n || ckpt.momentum.size() != n)
    throw std::invalid_argument("owner checkpoint of fragment " + std::to_string(ckpt.fragment_id) +
                                " holds " + std::to_string(ckpt.value.size()) +
                                " elements, expected " + std::to_string(n));
  init_common();
  be_->upload(theta_.data(), ckpt.value.data(), n);
  be_->upload(momentum_.data(), ckpt.momentum.data(), n);
  version_ = ckpt.version;
  if (ckpt.xi_step_s > 0) xi_step_.update(ckpt.xi_step_s);
  if (ckpt.xi_quorum_s > 0) xi_quorum_.update(ckpt.xi_quorum_s);
  if (ckpt.xi_sync_s > 0) xi_sync_.update(ckpt.xi_sync_s);
  if (ring_) {
    for (const auto& a : ckpt.anchors)
      if (a.value.size() == n) ring_->record_host(a.version, a.value.data());
    ring_->record(version_, theta_.data());
  }
  for (const auto& m : ckpt.merged) merged_[m.learner_id] = m;
  restored_ = true;
  restored_version_ = version_;
}

void owner_core::init_common() {
  if (!clock_) clock_ = steady_seconds;
  const size_t n = opts_.layout.numel;
  theta_ = be_->alloc<float>(n);
  momentum_ = be_->alloc<float>(n);
  if (opts_.merge.anchor == merge_anchor::current)
    ring_ = std::make_unique<anchor_ring>(*be_, n, opts_.max_staleness + 1);
}

push_outcome owner_core::reject(const push_msg& m, reject_reason r, std::string detail,
                                bool resync) {
  push_outcome out = outcome_of(m, push_outcome::status::rejected);
  out.detail = detail;
  out.send_current = resync;
  reject_msg rj;
  rj.learner_id = m.learner_id;
  rj.fragment_id = opts_.layout.fragment_id;
  rj.reason = r;
  rj.detail = std::move(detail);
  rj.current_version = version_;
  rj.transfer_id = m.transfer_id;
  out.reject = std::move(rj);
  return out;
}

push_outcome owner_core::on_push(const wire_bytes& bytes, double now_s) {
  auto decoded = decode_push_ref(bytes, {}, envelope_expect{opts_.run_id, 0});
  if (!decoded && decoded.code() == errc::checksum_mismatch) {
    // Damaged on the way: never applied. Its header, read without the checksum, only says whom
    // to ask for the chunk again (a header that was itself damaged names no pending push of its
    // learner, which then takes the refusal as final and sends its progress with the next push).
    decode_limits unchecked;
    unchecked.verify_checksum = false;
    auto header = decode_push_ref(bytes, unchecked, envelope_expect{opts_.run_id, 0});
    push_msg named;
    named.learner_id = -1;
    if (header) {
      named = std::move(header->header);
      named.payload.clear();
    }
    auto out = reject(named, reject_reason::malformed,
                      "fragment " + std::to_string(opts_.layout.fragment_id) + ": push from " +
                          (header ? "learner " + std::to_string(named.learner_id)
                                  : std::string("an unreadable sender")) +
                          " refused: " + decoded.error().message,
                      false);
    out.chunk_refused = true;
    return out;
  }
  if (!decoded) {
    push_msg blank;
    blank.learner_id = -1;
    auto out = reject(blank, reject_reason::malformed,
                      "fragment " + std::to_string(opts_.layout.fragment_id) +
                          ": undecodable push: " + decoded.error().message,
                      false);
    const auto code = decoded.code();
    out.envelope_refused =
        code == errc::other_run || code == errc::stale_incarnation || code == errc::schema_mismatch;
    return out;
  }
  return on_chunk(*decoded, now_s);
}

push_outcome owner_core::on_push(push_msg msg, double now_s) {
  chunk_ref<push_msg> chunk;
  chunk.owned = std::move(msg.payload);
  chunk.payload = chunk.owned.data();
  chunk.payload_size = chunk.owned.size();
  chunk.header = std::move(msg);
  return on_chunk(chunk, now_s);
}

push_outcome owner_core::on_chunk(const chunk_ref<push_msg>& ref, double now_s) {
  const push_msg& chunk = ref.header;  // the payload is ref.payload
  const int32_t frag = opts_.layout.fragment_id;
  const std::string who = "learner " + std::to_string(chunk.learner_id) + " (incarnation " +
                          std::to_string(chunk.incarnation) + ")";
  if (chunk.fragment_id != frag)
    return reject(chunk, reject_reason::malformed,
                  who + " pushed fragment " + std::to_string(chunk.fragment_id) +
                      " to the owner of fragment " + std::to_string(frag),
                  false);
  auto assembled = assembler_.add(ref);
  if (!assembled) {
    auto code = assembled.code();
    if (code == errc::chunk_duplicate || code == errc::chunk_stale) {
      push_outcome out;
      out.what = push_outcome::status::ignored;
      out.detail = assembled.error().message;
      return out;
    }
    auto out = reject(
        chunk,
        code == errc::size_mismatch ? reject_reason::shape_mismatch : reject_reason::malformed,
        who + ": " + assembled.error().message, false);
    out.chunk_refused = code == errc::checksum_mismatch;
    return out;
  }
  if (!assembled->has_value()) {
    push_outcome out;
    out.what = push_outcome::status::incomplete;
    return out;
  }
  push_msg m = std::move(**assembled);

  // Membership: only live learners with their current incarnation contribute.
  auto live = live_.find(m.learner_id);
  if (live == live_.end())
    return reject(m, reject_reason::unknown_learner, who + " is not a live learner", false);
  if (m.incarnation < live->second.incarnation)
    return reject(
        m, reject_reason::stale_incarnation,
        who + " is an old incarnation; current is " + std::to_string(live->second.incarnation),
        false);
  if (m.incarnation > live->second.incarnation)
    return reject(m, reject_reason::unknown_learner,
                  who + ": incarnation not registered yet (have " +
                      std::to_string(live->second.incarnation) + ")",
                  false);
  // Duplicates: (base_version, transfer_id) must advance past the last accepted push.
  policy::push_key key{static_cast<uint64_t>(m.learner_id), m.incarnation, m.base_version,
                       m.transfer_id};
  auto adm = policy::check_push(ledger_, key);
  if (!adm.accepted) {
    auto r = adm.reason == policy::admission_reason::duplicate ? reject_reason::duplicate
             : adm.reason == policy::admission_reason::stale_incarnation
                 ? reject_reason::stale_incarnation
                 : reject_reason::unknown_learner;
    return reject(m, r, who + ": " + adm.message, false);
  }
  // Superseded: the delta still holds a transfer of this learner that we already merged.
  if (auto mp = merged_.find(m.learner_id);
      mp != merged_.end() && m.contains_from != 0 && mp->second.incarnation == m.incarnation &&
      mp->second.transfer_id >= m.contains_from && mp->second.transfer_id < m.transfer_id)
    return reject(m, reject_reason::superseded,
                  who + ": transfer " + std::to_string(m.transfer_id) +
                      " holds the progress of transfer " + std::to_string(mp->second.transfer_id) +
                      ", already merged in version " + std::to_string(mp->second.version) +
                      " (its base is " + std::to_string(m.base_version) +
                      "); dropped so it is not counted twice",
                  false);
  // Shape and counters.
  if (m.total_elements != opts_.layout.numel)
    return reject(m, reject_reason::shape_mismatch,
                  who + ": push has " + std::to_string(m.total_elements) + " elements, fragment " +
                      std::to_string(frag) + " has " + std::to_string(opts_.layout.numel),
                  false);
  if (m.steps == 0 || m.tokens == 0)
    return reject(m, reject_reason::malformed,
                  who + ": steps and tokens must be > 0 (steps " + std::to_string(m.steps) +
                      ", tokens " + std::to_string(m.tokens) + ")",
                  false);
  if (opts_.max_tokens_per_step > 0 &&
      m.tokens / m.steps + (m.tokens % m.steps != 0) > opts_.max_tokens_per_step) {
    const std::string why = std::to_string(m.tokens) + " tokens in " + std::to_string(m.steps) +
                            " steps exceed steps × batch × context (" +
                            std::to_string(opts_.max_tokens_per_step) + " tokens per step)";
    auto out = reject(m, reject_reason::implausible, who + ": " + why, false);
    note_implausible(out, m.learner_id, now_s, why);
    return out;
  }
  // A base from the future: a version published after our checkpoint and lost with the owner
  // that published it (the learner is resynchronized onto the restored value), or a lie.
  if (m.base_version > version_) {
    if (m.base_version < version_ + lost_versions())
      return reject(m, reject_reason::stale,
                    who + ": base version " + std::to_string(m.base_version) +
                        " was lost: this owner was restored from its checkpoint of version " +
                        std::to_string(version_) + "; resynchronizing",
                    true);
    return reject(m, reject_reason::malformed,
                  who + ": base version " + std::to_string(m.base_version) +
                      " is ahead of this owner's version " + std::to_string(version_) +
                      " by more than a restore can explain; resynchronizing",
                  true);
  }
  auto st = policy::check_staleness(version_, m.base_version, opts_.max_staleness);
  if (!st.accepted) return reject(m, reject_reason::stale, who + ": " + st.message, true);
  if (ring_ && !ring_->find(m.base_version))
    return reject(m, reject_reason::stale,
                  who + ": base version " + std::to_string(m.base_version) +
                      " is no longer held for anchor = current",
                  true);
  auto values = decode_payload(m.encoding, m.payload.data(), m.payload.size(), m.total_elements);
  // The values are decoded (copied out): the next push assembles into this buffer.
  assembler_.recycle(std::move(m.payload));
  if (!values)
    return reject(m, reject_reason::shape_mismatch, who + ": " + values.error().message, false);
  // One pass: Σ v² per tensor is finite exactly when the tensor's values are, and RDA takes its
  // norms from it at the merge (anchor = base).
  auto tensor_sq = tensor_sum_squares(opts_.layout, values->data());
  for (size_t t = 0; t < tensor_sq.size(); ++t)
    if (!std::isfinite(tensor_sq[t]))
      return reject(
          m, reject_reason::non_finite,
          who + ": payload holds NaN or Inf in tensor '" + opts_.layout.tensors[t].name + "'",
          false);

  double sq = 0.0;
  for (double t : tensor_sq) sq += t;
  const double norm = std::sqrt(sq);
  // Judged against the other learners' latest norms, then this push becomes its learner's
  // latest whatever the verdict: refusals never freeze the reference.
  const std::string why = implausible(m.learner_id, norm, m.steps, now_s);
  latest_norms_[m.learner_id] = {m.incarnation, norm / counted_steps(m.learner_id, m.steps, now_s),
                                 static_cast<double>(m.steps), ++norm_seq_};
  if (!why.empty()) {
    auto out = reject(m, reject_reason::implausible, who + ": " + why, false);
    note_implausible(out, m.learner_id, now_s, why);
    return out;
  }

  // Accept: the newest push of a learner replaces its older pending one.
  ledger_.record_accepted(key);
  accepted_at_[m.learner_id] = now_s;
  if (opts_.norm_window > 0 && opts_.norm_min_samples > 0) {
    accepted_norms_.push_back(latest_norms_[m.learner_id].per_step);
    accepted_steps_.push_back(static_cast<double>(m.steps));
    while (accepted_norms_.size() > opts_.norm_window) accepted_norms_.pop_front();
    while (accepted_steps_.size() > opts_.norm_window) accepted_steps_.pop_front();
    auto& mine = accepted_by_learner_[m.learner_id];
    mine.push_back(
        {latest_norms_[m.learner_id].per_step, static_cast<double>(m.steps), ++accepted_seq_});
    while (mine.size() > opts_.norm_window) mine.pop_front();
  }
  pending_push p;
  p.who.learner_id = m.learner_id;
  p.who.incarnation = m.incarnation;
  p.who.base_version = m.base_version;
  p.who.transfer_id = m.transfer_id;
  p.who.steps = m.steps;
  p.who.tokens = m.tokens;
  p.delta = be_->alloc<float>(opts_.layout.numel);
  be_->upload(p.delta.data(), values->data(), values->size());
  p.tensor_sq = std::move(tensor_sq);
  p.arrived_s = now_s;
  pending_[m.learner_id] = std::move(p);
  if (!round_open_) {
    round_open_ = true;
    round_start_s_ = now_s;
    quorum_seen_ = false;
  }
  push_outcome out = outcome_of(m, push_outcome::status::accepted);
  out.effects = decide(now_s);
  return out;
}

namespace {
/// The median of `v`; for an even count the upper of the two middle values, so that one low
/// value among two cannot pull the gate's reference down. 0 when empty.
double upper_median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}
}  // namespace

void owner_core::peer_norms(int32_t learner_id, std::vector<double>& per_step,
                            std::vector<double>& steps) const {
  per_step.clear();
  steps.clear();
  for (const auto& [id, n] : latest_norms_) {
    if (id == learner_id) continue;
    if (opts_.norm_window > 0 && norm_seq_ - n.seq >= opts_.norm_window) continue;
    per_step.push_back(n.per_step);
    steps.push_back(n.steps);
  }
}

void owner_core::others_history(int32_t learner_id, std::vector<double>& per_step,
                                std::vector<double>& steps) const {
  per_step.clear();
  steps.clear();
  std::vector<const accepted_norm*> newest;
  for (const auto& [id, accepted] : accepted_by_learner_) {
    if (id == learner_id) continue;
    for (const auto& a : accepted) newest.push_back(&a);
  }
  const size_t keep = std::min(newest.size(), opts_.norm_window);
  std::partial_sort(newest.begin(), newest.begin() + static_cast<std::ptrdiff_t>(keep),
                    newest.end(),
                    [](const accepted_norm* a, const accepted_norm* b) { return a->seq > b->seq; });
  for (size_t i = 0; i < keep; ++i) {
    per_step.push_back(newest[i]->per_step);
    steps.push_back(newest[i]->steps);
  }
}

double owner_core::peer_median_norm(int32_t learner_id) const {
  std::vector<double> per_step, steps;
  peer_norms(learner_id, per_step, steps);
  if (per_step.size() < std::max<size_t>(1, opts_.norm_min_peers)) return 0.0;
  return upper_median(std::move(per_step));
}

double owner_core::latest_norm(int32_t learner_id) const {
  auto it = latest_norms_.find(learner_id);
  return it == latest_norms_.end() ? 0.0 : it->second.per_step;
}

double owner_core::steps_in_time(int32_t learner_id, double now_s) const {
  const double step_s = xi_step_.value();
  if (step_s <= 0) return 0.0;
  auto since = accepted_at_.find(learner_id);
  double from_s = 0.0;
  if (since != accepted_at_.end()) {
    from_s = since->second;
  } else if (auto joined = joined_at_.find(learner_id); joined != joined_at_.end()) {
    from_s = joined->second;
  } else {
    return 0.0;
  }
  return std::max(0.0, now_s - from_s) / step_s;
}

double owner_core::counted_steps(int32_t learner_id, uint64_t steps, double now_s) const {
  const double claimed = static_cast<double>(std::max<uint64_t>(1, steps));
  std::vector<double> per_step, peer_steps;
  peer_norms(learner_id, per_step, peer_steps);
  // With too few peers the history is the other learners' alone: a learner pushing alone
  // cannot raise the steps it may claim by claiming more each time.
  std::vector<double> history_steps;
  if (few_peers(per_step.size())) {
    std::vector<double> history_norms;
    others_history(learner_id, history_norms, history_steps);
  } else {
    history_steps.assign(accepted_steps_.begin(), accepted_steps_.end());
  }
  if (peer_steps.empty() && history_steps.empty()) return claimed;
  const double usual =
      std::max(upper_median(std::move(peer_steps)), upper_median(std::move(history_steps)));
  // The steps the learner can have made since its last accepted push (or since it joined), at
  // max_steps_ratio × the live learners' step rate: a learner whose pushes were refused or held
  // back brings every step since, and the bound grows with the time it waits.
  const double cap =
      std::max({1.0, max_steps_ratio * usual, max_steps_ratio * steps_in_time(learner_id, now_s)});
  return std::min(claimed, cap);
}

std::string owner_core::implausible(int32_t learner_id, double norm, uint64_t steps,
                                    double now_s) const {
  if (opts_.max_norm_ratio <= 0) return {};
  std::vector<double> per_step, peer_steps;
  peer_norms(learner_id, per_step, peer_steps);
  const size_t peers = per_step.size();
  const bool few = few_peers(peers);
  // Too few peers (M <= 2, or a peer quiet for norm_window pushes): the other learners' accepted
  // history judges, raised by the peers' latest norms that are known (so honest norms that grow
  // together are refused at most once each, as with enough peers). The pusher's own accepted
  // norms are left out: a learner pushing alone just under the bound cannot ratchet it up.
  std::vector<double> history_norms, history_steps;
  if (few) {
    if (opts_.norm_min_samples == 0) return {};
    others_history(learner_id, history_norms, history_steps);
  } else {
    history_norms.assign(accepted_norms_.begin(), accepted_norms_.end());
  }
  const size_t samples = history_norms.size();
  if (samples < opts_.norm_min_samples) return {};
  const double peer_median = upper_median(std::move(per_step));
  const double history = history_norms.empty() || opts_.norm_min_samples == 0
                             ? 0.0
                             : upper_median(std::move(history_norms));
  const double median = std::max(peer_median, history);
  const double counted = counted_steps(learner_id, steps, now_s);
  if (norm / counted <= opts_.max_norm_ratio * median) return {};
  char buf[400];
  std::snprintf(buf, sizeof buf,
                "pseudo-gradient norm %.6g over %llu steps (%.6g per step, counting at most %g "
                "steps) exceeds %g × the median %.6g per step of the other %zu learners' latest "
                "pushes of fragment %d (and of its last %zu accepted pushes%s, %.6g)",
                norm, static_cast<unsigned long long>(steps), norm / counted, counted,
                opts_.max_norm_ratio, peer_median, peers,
                static_cast<int>(opts_.layout.fragment_id), samples,
                few ? " by other learners" : "", history);
  return buf;
}

void owner_core::note_implausible(push_outcome& out, int32_t learner_id, double now_s,
                                  const std::string& why) {
  ++unwarned_implausible_;
  ++unwarned_learners_[learner_id];
  if (warned_ && now_s - last_warning_s_ < implausible_warn_every_s) return;
  std::string learners;
  for (const auto& [id, n] : unwarned_learners_)
    learners +=
        (learners.empty() ? "" : ", ") + std::to_string(id) + " (" + std::to_string(n) + ")";
  out.warning =
      "fragment " + std::to_string(opts_.layout.fragment_id) + ": " +
      std::to_string(unwarned_implausible_) + " push" + (unwarned_implausible_ == 1 ? "" : "es") +
      " refused as implausible" +
      (warned_ ? " in the last " + std::to_string(static_cast<int>(now_s - last_warning_s_)) + " s"
               : std::string()) +
      " (learners " + learners + "); the newest, from learner " + std::to_string(learner_id) +
      ": " + why;
  warned_ = true;
  last_warning_s_ = now_s;
  unwarned_implausible_ = 0;
  unwarned_learners_.clear();
}

owner_effects owner_core::on_membership(const std::vector<owner_member>& live, double now_s) {
  std::map<int32_t, owner_member> next;
  std::vector<double> step_times;
  for (const auto& m : live) {
    ledger_.register_learner(static_cast<uint64_t>(m.learner_id), m.incarnation);
    next[m.learner_id] = m;
    step_times.push_back(m.step_time_ema_s);
  }
  for (auto it = pending_.begin(); it != pending_.end();) {
    auto l = next.find(it->first);
    if (l == next.end() || l->second.incarnation != it->second.who.incarnation)
      it = pending_.erase(it);
    else
      ++it;
  }
  for (const auto& [id, m] : live_)
    if (next.find(id) == next.end()) assembler_.drop_learner(id);
  std::map<int32_t, double> joined;
  for (const auto& [id, m] : next) {
    auto prev = live_.find(id);
    auto at = joined_at_.find(id);
    const bool same =
        prev != live_.end() && prev->second.incarnation == m.incarnation && at != joined_at_.end();
    joined[id] = same ? at->second : now_s;
  }
  joined_at_ = std::move(joined);
  live_ = std::move(next);
  // The gate forgets learners that left and earlier incarnations of those that came back.
  for (auto it = latest_norms_.begin(); it != latest_norms_.end();) {
    auto l = live_.find(it->first);
    if (l == live_.end() || l->second.incarnation != it->second.incarnation)
      it = latest_norms_.erase(it);
    else
      ++it;
  }
  for (auto it = accepted_by_learner_.begin(); it != accepted_by_learner_.end();) {
    if (live_.find(it->first) == live_.end())
      it = accepted_by_learner_.erase(it);
    else
      ++it;
  }
  // A learner's last accepted push dates from this incarnation, or its time runs from its join.
  for (auto it = accepted_at_.begin(); it != accepted_at_.end();) {
    auto at = joined_at_.find(it->first);
    if (at == joined_at_.end() || at->second > it->second)
      it = accepted_at_.erase(it);
    else
      ++it;
  }
  // ξ_step follows the live learners' lower median step time: one straggler cannot stretch it.
  if (const double step_s = policy::robust_step_time(std::move(step_times)); step_s > 0)
    xi_step_.update(step_s);
  if (pending_.empty()) {
    round_open_ = false;
    quorum_seen_ = false;
  }
  return decide(now_s);
}

size_t owner_core::eligible_count() const {
  if (!round_open_) return live_.size();
  size_t n = 0;
  for (const auto& [id, m] : live_) {
    auto at = joined_at_.find(id);
    const bool before = at == joined_at_.end() || at->second <= round_start_s_;
    if (before || pending_.count(id) != 0) ++n;
  }
  return n;
}

owner_effects owner_core::on_grace_timer(uint64_t timer_id, double now_s) {
  if (timer_id != timer_id_ || !grace_running_) return {};
  return decide(std::max(now_s, grace_deadline_s_));
}

double owner_core::compute_grace_s() const {
  policy::grace_config g = opts_.grace;
  auto d = policy::compute_grace(g, opts_.tau_steps, xi_step_.value(), xi_quorum_.value(),
                                 xi_sync_.value());
  return d.grace_s;
}

owner_effects owner_core::decide(double now_s) {
  owner_effects fx;
  policy::round_state rs;
  rs.live = eligible_count();
  rs.pending = pending_.size();
  rs.grace_running = grace_running_;
  rs.grace_deadline_s = grace_deadline_s_;
  // ξ_quorum (round start → quorum) takes this round's sample before the window is sized.
  if (round_open_ && !quorum_seen_ &&
      policy::compute_quorum(opts_.quorum, rs.live, rs.pending).reached) {
    xi_quorum_.update(now_s - round_start_s_);
    quorum_seen_ = true;
  }
  double grace_s = compute_grace_s();
  auto d = policy::decide_merge(opts_.quorum, rs, now_s, grace_s);
  switch (d.action) {
    case policy::merge_action::wait: break;
    case policy::merge_action::start_grace_timer:
      grace_running_ = true;
      grace_deadline_s_ = d.grace_deadline_s;
      round_grace_s_ = grace_s;
      ++timer_id_;
      fx.arm_grace_s = std::max(0.0, d.grace_deadline_s - now_s);
      fx.timer_id = timer_id_;
      break;
    case policy::merge_action::merge_now: return merge(now_s, policy::to_string(d.reason));
    case policy::merge_action::cancel_grace_timer:
      grace_running_ = false;
      round_grace_s_ = 0;
      ++timer_id_;
      break;
  }
  return fx;
}

owner_effects owner_core::merge(double now_s, const std::string& reason) {
  owner_effects fx;
  const double t0 = clock_();
  std::vector<contribution> contribs;
  std::vector<merge_contributor> who;
  contribs.reserve(pending_.size());
  for (const auto& [id, p] : pending_) {
    contribution c;
    c.delta = p.delta.data();
    c.weight = opts_.token_weighting ? dd::token_weight(p.who.tokens, p.who.steps) : 1.0;
    c.base_version = p.who.base_version;
    c.learner_id = id;
    c.tensor_sq = &p.tensor_sq;
    contribs.push_back(c);
    who.push_back(p.who);
  }
  merge_record rec;
  rec.fragment_id = opts_.layout.fragment_id;
  rec.live = eligible_count();
  rec.needed = policy::compute_quorum(opts_.quorum, rec.live, pending_.size()).needed;
  rec.grace_s = round_grace_s_;
  rec.reason = reason;
  rec.round_s = now_s - round_start_s_;
  float scale = 1.0f;
  if (opts_.scale_partial_merges && rec.live > contribs.size())
    scale = static_cast<float>(contribs.size()) / static_cast<float>(rec.live);
  if (merge_scratch_.empty()) merge_scratch_ = be_->alloc<float>(opts_.layout.numel);
  auto report = outer_step(*be_, opts_.layout, contribs, opts_.merge, theta_.data(),
                           momentum_.data(), ring_.get(), scale, merge_scratch_.data());
  // The round closes whatever happened: a failed merge drops its contributions.
  pending_.clear();
  round_open_ = false;
  quorum_seen_ = false;
  grace_running_ = false;
  ++timer_id_;
  last_grace_s_ = round_grace_s_;
  round_grace_s_ = 0;
  if (!report) return fx;
  // After a restore, skip the versions that may have been published and lost since the
  // checkpoint: a version number never names two different values.
  version_ = restored_ ? std::max(version_ + 1, restored_version_ + lost_versions()) : version_ + 1;
  version_ = std::max(version_, version_floor_ + 1);
  restored_ = false;
  if (ring_) ring_->record(version_, theta_.data());
  for (size_t i = 0; i < who.size(); ++i) {
    who[i].weight = report->weights.at(i);
    merged_[who[i].learner_id] =
        merged_push{who[i].learner_id, who[i].incarnation, who[i].transfer_id, version_};
  }
  rec.contributors = std::move(who);
  rec.version = version_;
  rec.delta_norm = report->delta_norm;
  // The checkpoint of this version keeps its merge's record: a kill after the checkpoint and
  // before the actor logs the merge loses no merge from events.jsonl (the restore logs it).
  rec.sync_s = clock_() - t0;
  last_merge_record_ =
      merge_event_fields(rec, xi_step_.value(), xi_quorum_.value(), xi_sync_.value()).dump();
  last_merge_version_ = version_;
  if (opts_.checkpoint_every > 0 && !opts_.checkpoint_path.empty() &&
      version_ % opts_.checkpoint_every == 0) {
    auto st = save_checkpoint(opts_.checkpoint_path, make_checkpoint());
    rec.checkpointed = st.ok();
    if (!st) rec.checkpoint_error = st.error().message;
  }
  fx.broadcast = encode_value();
  rec.sync_s = clock_() - t0;
  xi_sync_.update(rec.sync_s);
  fx.merged = std::move(rec);
  return fx;
}

std::vector<wire_bytes> owner_core::encode_value() const {
  std::vector<float> host = value();
  broadcast_msg b;
  b.fragment_id = opts_.layout.fragment_id;
  b.version = version_;
  b.encoding = opts_.broadcast_encoding;
  b.total_elements = host.size();
  b.payload = encode_payload(opts_.broadcast_encoding, host.data(), host.size());
  b.payload_bytes = b.payload.size();
  b.merged = merged_pushes();
  b.value_digest = value_digest_now(host, b.payload);
  std::vector<wire_bytes> out;
  if (b.payload.size() <= opts_.chunk_bytes) {
    out.push_back(encode(b, {opts_.run_id, opts_.syncer_incarnation}));
    return out;
  }
  // Each chunk's payload copied once, into its message (not first into a split-off copy).
  return std::move(
      *encode_broadcast_chunks(b, opts_.chunk_bytes, {opts_.run_id, opts_.syncer_incarnation}));
}

std::vector<wire_bytes> owner_core::current_value() const { return encode_value(); }

uint64_t owner_core::value_digest_now(const std::vector<float>& host,
                                      const std::vector<uint8_t>& payload) const {
  if (digest_ != 0 && digest_version_ == version_) return digest_;
  // Of the value as a learner decodes it: a quantized broadcast is decoded here once.
  if (opts_.broadcast_encoding == payload_encoding::fp32) {
    digest_ = value_digest(host);
  } else {
    auto decoded =
        decode_payload(opts_.broadcast_encoding, payload.data(), payload.size(), host.size());
    digest_ = decoded ? value_digest(*decoded) : 0;  // 0: no digest, never a false alarm
  }
  digest_version_ = version_;
  return digest_;
}

owner_checkpoint owner_core::make_checkpoint() const {
  owner_checkpoint c;
  c.fragment_id = opts_.layout.fragment_id;
  c.version = version_;
  c.value = value();
  c.momentum = momentum();
  c.xi_step_s = xi_step_.value();
  c.xi_quorum_s = xi_quorum_.value();
  c.xi_sync_s = xi_sync_.value();
  if (ring_)
    for (auto& [v, vals] : ring_->download_all()) c.anchors.push_back({v, std::move(vals)});
  c.merged = merged_pushes();
  c.run_id = opts_.run_id;
  c.experiment_digest = opts_.experiment_digest;
  if (last_merge_version_ == version_) c.merge_record = last_merge_record_;
  return c;
}

nlohmann::json merge_event_fields(const merge_record& rec, double xi_step_s, double xi_quorum_s,
                                  double xi_sync_s) {
  nlohmann::json contributors = nlohmann::json::array();
  for (const auto& c : rec.contributors)
    contributors.push_back({{"learner", c.learner_id},
                            {"incarnation", c.incarnation},
                            {"base_version", c.base_version},
                            {"transfer_id", c.transfer_id},
                            {"steps", c.steps},
                            {"tokens", c.tokens},
                            {"weight", c.weight}});
  return {{"fragment", rec.fragment_id},  {"version", rec.version},
          {"contributors", contributors}, {"live", rec.live},
          {"needed", rec.needed},         {"grace_s", rec.grace_s},
          {"reason", rec.reason},         {"round_s", rec.round_s},
          {"sync_s", rec.sync_s},         {"delta_norm", rec.delta_norm},
          {"xi_step_s", xi_step_s},       {"xi_quorum_s", xi_quorum_s},
          {"xi_sync_s", xi_sync_s}};
}

uint64_t owner_core::lost_versions() const {
  // Checkpoints are written at every multiple of checkpoint_every before the broadcast, so at
  // most checkpoint_every − 1 versions were published after the one we restored.
  return restored_ ? std::max<uint64_t>(opts_.checkpoint_every, 1) : 1;
}

std::vector<merged_push> owner_core::merged_pushes() const {
  std::vector<merged_push> out;
  out.reserve(merged_.size());
  for (const auto& [id, m] : merged_) out.push_back(m);
  return out;
}

std::vector<float> owner_core::value() const {
  std::vector<float> out(opts_.layout.numel);
  be_->download(out.data(), theta_.data(), out.size());
  return out;
}

std::vector<float> owner_core::momentum() const {
  std::vector<float> out(opts_.layout.numel);
  be_->download(out.data(), momentum_.data(), out.size());
  return out;
}

std::vector<int32_t> owner_core::pending_learners() const {
  std::vector<int32_t> out;
  for (const auto& [id, p] : pending_) out.push_back(id);
  return out;
}

}  // namespace dd::actors
