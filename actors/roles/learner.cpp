// actors/roles/learner.cpp — see learner.hpp.
//
// State diagram (one incarnation):
//
//   joining --join reply + owners--> syncing (pull every fragment)
//   syncing --all fragments in--> stepping --step--> stepping
//   stepping --barrier: merge of a fragment pushed τ steps ago missing--> waiting
//   waiting --broadcast / timeout--> stepping
//   stepping --non-finite step--> syncing (reload from the owners)
//   stepping --budget / stop--> finished (leave, exit normal)
//   any --fault hook kill--> exit with error (the supervisor respawns a new incarnation)
#include "actors/roles/learner.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <thread>

#include <caf/all.hpp>

#include "actors/link/atoms.hpp"
#include "actors/services/compute_gate.hpp"
#include "actors/services/fault_hooks.hpp"
#include "actors/roles/fragment_owner.hpp"
#include "actors/policy/push_schedule.hpp"
#include "actors/services/run_log.hpp"
#include "actors/roles/supervisor.hpp"
#include "actors/link/wire_refusal.hpp"
#include "messages/control.hpp"
#include "runtime/adamw.hpp"
#include "runtime/quantize.hpp"
#include "util/thread_priority.hpp"

namespace dd::actors {

namespace {

/// What this learner writes into every envelope: its run and incarnation.
envelope_stamp stamp_of(const learner_actor* self, const learner_context& ctx) {
  return {ctx.run_id, self->state.incarnation};
}

/// What it accepts from the syncer: its run, and the syncer incarnation it last joined (an older
/// syncer's message still in flight is refused).
envelope_expect expect_of(const learner_actor* self, const learner_context& ctx) {
  return {ctx.run_id, self->state.syncer_incarnation};
}

using phase = learner_state::phase;

/// Rebase mode keeps at most this many unconfirmed pushes per fragment (oldest dropped).
constexpr size_t max_outstanding = 8;
/// A push refused as malformed (a chunk damaged in transit) is sent again at most this often.
constexpr int max_resends = 2;

double actor_now(learner_actor* self) { return clock_seconds(self->clock().now()); }

caf::timespan seconds_span(double s) {
  return caf::timespan{static_cast<int64_t>(std::ceil(std::max(0.0, s) * 1e9))};
}

void set_stepping(learner_actor* self, const learner_context& ctx, bool on) {
  if (ctx.log != nullptr) ctx.log->set_stepping(self->state.id, on);
}

void schedule_step(learner_actor* self, double delay_s = 0.0) {
  auto& st = self->state;
  if (st.step_scheduled) return;
  st.step_scheduled = true;
  if (delay_s > 0)
    self->delayed_send(self, seconds_span(delay_s), atoms::step_atom_v);
  else
    self->send(self, atoms::step_atom_v);
}

/// Fragments whose newest push is neither merged nor refused yet.
bool has_unsettled_push(const learner_state& st) {
  for (const auto& [p, t] : st.last_pushed) {
    auto it = st.last_settled.find(p);
    if (it == st.last_settled.end() || it->second < t) return true;
  }
  return false;
}

wire_bytes encode_leave(learner_actor* self, const learner_context& ctx) {
  const auto& st = self->state;
  leave_msg lm;
  lm.learner_id = st.id;
  lm.incarnation = st.incarnation;
  lm.interrupted = st.stopped_by_node;
  return encode(lm, stamp_of(self, ctx));
}

/// The `leave_pending` event: the leave of this learner waits (`why`; `syncer_lost`: for the
/// node to reach a syncer again, else it is sent again in 2 s).
void log_leave_pending(learner_actor* self, const learner_context& ctx, const std::string& why) {
  const auto& st = self->state;
  if (ctx.log != nullptr)
    ctx.log->emit("leave_pending", {{"learner", st.id},
                                    {"incarnation", st.incarnation},
                                    {"error", why},
                                    {"syncer_lost", st.monitor_lost}});
}

/// A finished learner of a learner node (learner_context::leave_acked) asks its monitor to
/// record its leave and exits once it is answered. Unanswered: sent again in 2 s while the
/// monitor is reachable; kept for the next syncer (syncer_atom) once it is lost; given up when
/// the node stops its learners.
void send_leave(learner_actor* self, const learner_context& ctx) {
  auto& st = self->state;
  const uint64_t attempt = ++st.leave_attempt;
  const learner_context* c = &ctx;  // owned by the behavior, alive as long as the actor
  self->request(st.monitor, std::chrono::seconds(10), atoms::leave_atom_v, encode_leave(self, ctx))
      .then(
          [=](bool) {
            auto& s = self->state;
            if (!s.leave_pending) return;
            s.leave_pending = false;
            self->quit(caf::exit_reason::normal);
          },
          [=](caf::error& err) {
            auto& s = self->state;
            if (!s.leave_pending || attempt != s.leave_attempt) return;  // answered, or resent
            if (s.stopped_by_node) {
              self->quit(caf::exit_reason::normal);  // the node stops: no syncer to wait for
              return;
            }
            log_leave_pending(self, *c, self->system().render(err));
            if (!s.monitor_lost)
              self->delayed_send(self, std::chrono::seconds(2), atoms::leave_retry_atom_v);
          });
}

void finish(learner_actor* self, const learner_context& ctx) {
  auto& st = self->state;
  if (st.current_phase == phase::finished) return;
  if (st.current_phase != phase::draining && ctx.drain_timeout_s > 0 && has_unsettled_push(st)) {
    // Stop stepping but stay live until the final pushes are merged (or refused, or timeout).
    st.current_phase = phase::draining;
    if (ctx.gate != nullptr) ctx.gate->leave(st.id);
    // Its training is over: the uptime window closes with the last learner's last step, not
    // with the end of its drain.
    if (ctx.log != nullptr) ctx.log->learner_finished(st.id);
    self->delayed_send(self, seconds_span(ctx.drain_timeout_s), atoms::drain_timeout_atom_v);
    return;
  }
  const bool drained = st.current_phase == phase::draining;  // gate left, finish logged at drain start
  st.current_phase = phase::finished;
  if (ctx.gate != nullptr && !drained) ctx.gate->leave(st.id);
  // Marks it not stepping too, in one step (no artificial gap in the uptime integral); a
  // draining learner was marked when its drain began.
  if (ctx.log != nullptr && !drained) ctx.log->learner_finished(st.id);
  if (ctx.log != nullptr && !st.done_logged)
    ctx.log->emit("learner_done", {{"learner", st.id},
                                   {"incarnation", st.incarnation},
                                   {"step", st.tr ? st.tr->steps_done() : 0}});
  st.done_logged = true;
  if (!st.monitor || !st.joined) {
    self->quit(caf::exit_reason::normal);
    return;
  }
  if (!ctx.leave_acked) {
    // In one process the monitor cannot be lost before its learners: send and exit.
    self->anon_send(st.monitor, atoms::leave_atom_v, encode_leave(self, ctx));
    self->quit(caf::exit_reason::normal);
    return;
  }
  if (st.monitor_lost && st.stopped_by_node) {
    // Its node is stopping (a signal, --join-deadline, a refusal) with no syncer to tell.
    self->quit(caf::exit_reason::normal);
    return;
  }
  st.leave_pending = true;
  if (st.monitor_lost) {
    // The syncer is away (a request to its dead proxy would go unanswered): kept for syncer_atom.
    log_leave_pending(self, ctx, "the syncer is away");
    return;
  }
  send_leave(self, ctx);
}

/// Sends push chunks to `owner` under credit (actors/link/chunk_flow.hpp); `delay_s` > 0: late
/// (fault injection).
void send_chunks(learner_actor* self, const owner_hdl& owner, const std::vector<wire_bytes>& chunks,
                 double delay_s) {
  if (!owner) return;
  for (const auto& c : chunks)
    flow_send(self, self->state.flow, make_chunk(owner, atoms::push_atom_v, c, delay_s));
}

/// True when `a` and `b` are the same actor object (a local actor, or one proxy). CAF's `==`
/// compares (node, actor id) only: after the connection to the syncer node was lost and made
/// again, the owner directory names the same remote owners through fresh proxies that compare
/// equal to the dead ones, while only the fresh ones reach them.
bool same_handle(const owner_hdl& a, const owner_hdl& b) {
  return caf::actor_cast<caf::strong_actor_ptr>(a).get() ==
         caf::actor_cast<caf::strong_actor_ptr>(b).get();
}

/// Asks the owner of fragment `p` for its current value (a pull_request through the codec).
void send_pull(learner_actor* self, const learner_context& ctx, const owner_hdl& owner, size_t p) {
  if (!owner) return;
  auto& st = self->state;
  pull_request req;
  req.learner_id = st.id;
  req.incarnation = st.incarnation;
  req.fragment_id = static_cast<int32_t>(p);
  self->send(owner, atoms::pull_atom_v, encode(req, {ctx.run_id, st.incarnation}));
}

/// Logs a message from a syncer that did not decode (it is dropped, never applied); one of
/// another run or a stale syncer incarnation is also counted (log_refused_message).
void log_undecodable(learner_actor* self, const learner_context& ctx, const char* what,
                     const wire_error& err) {
  log_refused_message(ctx.log, what, err, {{"learner", self->state.id}});
}

/// The model's values of one fragment, in fragment order (layout.numel floats).
std::vector<float> read_fragment(const model& model, const fragment_layout& layout) {
  std::vector<float> theta(layout.numel);
  for (const auto& t : layout.tensors)
    model.read_parameters(t.flat_offset, t.numel, theta.data() + t.fragment_offset);
  return theta;
}

/// Writes one fragment's values (fragment order) into the model.
void write_fragment(model& model, const fragment_layout& layout, const std::vector<float>& theta) {
  for (const auto& t : layout.tensors)
    model.write_parameters(t.flat_offset, t.numel, theta.data() + t.fragment_offset);
}

/// Pull every fragment not yet received in this (re)load.
void pull_missing(learner_actor* self, const learner_context& ctx) {
  auto& st = self->state;
  for (size_t p = 0; p < st.frags.size(); ++p)
    if (!st.frags[p].have && p < st.owners.size() && st.owners[p])
      send_pull(self, ctx, st.owners[p], p);
}

void start_reload(learner_actor* self, const learner_context& ctx) {
  auto& st = self->state;
  st.current_phase = phase::syncing;
  set_stepping(self, ctx, false);
  for (auto& f : st.frags) f.have = false;
  st.assembler.clear();
  pull_missing(self, ctx);
}

/// Sends queued pushes while fewer than max_inflight are unanswered.
void drain_queue(learner_actor* self, const learner_context& ctx) {
  auto& st = self->state;
  while (!st.queued.empty() &&
         st.unacked.size() < static_cast<size_t>(std::max(1, ctx.max_inflight))) {
    auto [p, push] = std::move(st.queued.front());
    st.queued.pop_front();
    if (st.unacked.count(p) != 0) {
      // Still waiting on an older push of the same fragment: keep the newest queued.
      st.queued.emplace_back(p, std::move(push));
      break;
    }
    send_chunks(self, st.owners.at(static_cast<size_t>(p)), push.chunks, 0.0);
    st.last_pushed[p] = push.transfer_id;  // sent: the drain waits for its answer
    st.unacked[p] = std::move(push);
  }
}

/// A copy of encoded push chunk `chunk` with one bit of its payload flipped (fault injection:
/// damage in transit that the owner's CRC-32C check must catch).
wire_bytes damaged_copy(const wire_bytes& chunk) {
  wire_bytes out = chunk;
  // Our own chunk: decoded against the run it was stamped with.
  auto header = peek_envelope(chunk);
  auto m = header ? decode_push(chunk, {}, envelope_expect{header->run_id, 0}) : decode_push(chunk);
  if (!m || m->payload.empty()) {
    if (!out.empty()) out.back() ^= 0x01;
    return out;
  }
  auto at = std::search(out.begin(), out.end(), m->payload.begin(), m->payload.end());
  if (at == out.end()) return out;
  *(at + static_cast<std::ptrdiff_t>(m->payload.size() / 2)) ^= 0x10;
  return out;
}

/// Gives up on pushes unanswered for H steps (dropped in transit; the next push of the fragment
/// carries their tokens, since counters reset only when a global value arrives).
void expire_unacked(learner_actor* self, const learner_context& ctx, uint64_t step) {
  auto& st = self->state;
  for (auto it = st.unacked.begin(); it != st.unacked.end();) {
    if (step >= it->second.sent_step + static_cast<uint64_t>(ctx.sync_interval))
      it = st.unacked.erase(it);
    else
      ++it;
  }
}

void push_fragment_now(learner_actor* self, const learner_context& ctx, int32_t p,
                       const std::vector<float>& params, uint64_t step) {
  auto& st = self->state;
  auto& f = st.frags.at(static_cast<size_t>(p));
  if (f.steps == 0 || !f.have) return;
  const auto& layout = ctx.plan.fragments.at(static_cast<size_t>(p));
  std::vector<float> delta(layout.numel);
  gather_fragment(layout, params.data(), delta.data());
  for (size_t i = 0; i < delta.size(); ++i) delta[i] = f.base[i] - delta[i];
  push_msg m;
  m.learner_id = st.id;
  m.incarnation = st.incarnation;
  m.fragment_id = p;
  m.base_version = f.base_version;
  m.steps = f.steps;
  m.tokens = f.tokens;
  m.transfer_id = step;
  m.encoding = ctx.wire;
  m.total_elements = layout.numel;
  m.payload = encode_payload(ctx.wire, delta.data(), delta.size());
  m.payload_bytes = m.payload.size();
  if (ctx.rebase) {
    m.contains_from = f.outstanding.empty() ? 0 : f.outstanding.front().transfer_id;
    outstanding_push o;
    o.transfer_id = step;
    o.steps = f.steps;
    o.tokens = f.tokens;
    // What the owner will merge (quantization included): rebasing on it keeps the encoding
    // error in the local model, where the next push carries it (error feedback).
    auto sent = decode_payload(m.encoding, m.payload.data(), m.payload.size(), layout.numel);
    o.delta = sent ? std::move(*sent) : std::move(delta);
    f.outstanding.push_back(std::move(o));
    while (f.outstanding.size() > max_outstanding) f.outstanding.pop_front();
  } else {
    m.contains_from = f.first_since_receive;
    if (f.first_since_receive == 0) f.first_since_receive = step;
  }
  inflight_push push;
  push.transfer_id = step;
  push.sent_step = step;
  if (m.payload.size() <= ctx.chunk_bytes) {
    push.chunks.push_back(encode(m, stamp_of(self, ctx)));
  } else {
    // Each chunk's payload copied once, into its message (not first into a split-off copy).
    push.chunks = std::move(*encode_push_chunks(m, ctx.chunk_bytes, stamp_of(self, ctx)));
  }
  if (ctx.barrier) {
    f.awaiting = true;
    f.pushed_at_step = step;
  }
  push_fault fate;
  if (ctx.faults != nullptr) fate = ctx.faults->on_push(st.id, st.incarnation, p, step);
  if (fate.drop) {
    // Lost in transit: it occupies its in-flight slot until it expires.
    if (ctx.log != nullptr) {
      ctx.log->emit("push_dropped", {{"learner", st.id}, {"fragment", p}, {"step", step}});
      ctx.log->update([](run_counters& c) { c.pushes_dropped += 1; });
    }
    st.last_pushed[p] = step;  // "sent" and lost on the way: the learner cannot tell
    st.unacked[p] = std::move(push);
    return;
  }
  if (fate.delay_s > 0 || fate.reorder || fate.duplicate || fate.corrupt) {
    // Faults compose: the bytes sent are damaged (corrupt: one bit of the first chunk flips on
    // this first sending; a resend after the owner's refusal carries the intact chunks), sent
    // twice (duplicate: the owner refuses the copy), late (delay), or held back and sent after
    // the learner's next push (reorder). The push waits for its answer as any other.
    std::vector<wire_bytes> bytes = push.chunks;
    if (fate.corrupt) bytes.front() = damaged_copy(bytes.front());
    if (fate.reorder) {
      if (ctx.log != nullptr)
        ctx.log->emit("push_held", {{"learner", st.id}, {"fragment", p}, {"step", step}});
      if (fate.duplicate) bytes.insert(bytes.end(), bytes.begin(), bytes.end());
      st.held_push.emplace(p, std::move(bytes));
      st.unacked[p] = std::move(push);
      return;
    }
    for (int copy = 0; copy < (fate.duplicate ? 2 : 1); ++copy)
      send_chunks(self, st.owners.at(static_cast<size_t>(p)), bytes, fate.delay_s);
    st.last_pushed[p] = step;
    st.unacked[p] = std::move(push);
    return;
  }
  // A newer push replaces an unsent older one of the same fragment.
  for (auto it = st.queued.begin(); it != st.queued.end(); ++it)
    if (it->first == p) {
      st.queued.erase(it);
      break;
    }
  st.queued.emplace_back(p, std::move(push));
  while (st.queued.size() > static_cast<size_t>(std::max(1, ctx.max_inflight)))
    st.queued.pop_front();
  drain_queue(self, ctx);
}

/// Pushes fragment `p`; a push held back by a `reorder_push` fault before this one is sent
/// right after it.
void push_fragment(learner_actor* self, const learner_context& ctx, int32_t p,
                   const std::vector<float>& params, uint64_t step) {
  auto& st = self->state;
  auto held = std::move(st.held_push);
  st.held_push.reset();
  push_fragment_now(self, ctx, p, params, step);
  if (held) {
    const auto q = static_cast<size_t>(held->first);
    if (q < st.owners.size()) send_chunks(self, st.owners[q], held->second, 0.0);
    auto it = st.unacked.find(held->first);
    if (it != st.unacked.end()) st.last_pushed[held->first] = it->second.transfer_id;
  }
}

/// Barrier mode: is the merge of a fragment pushed more than τ steps ago still missing?
bool barrier_blocked(learner_actor* self, const learner_context& ctx) {
  if (!ctx.barrier) return false;
  auto& st = self->state;
  const uint64_t next = static_cast<uint64_t>(st.tr->steps_done()) + 1;
  for (const auto& f : st.frags)
    if (f.awaiting && next > f.pushed_at_step + static_cast<uint64_t>(ctx.overlap)) return true;
  return false;
}

/// Applies one whole broadcast; false (and a `failure` event) when it names no fragment of the
/// plan or its payload does not decode to the fragment's size — the model is then untouched.
bool apply_global(learner_actor* self, const learner_context& ctx, const broadcast_msg& b) {
  auto& st = self->state;
  if (b.fragment_id < 0 || static_cast<size_t>(b.fragment_id) >= st.frags.size()) {
    log_undecodable(
        self, ctx, "undecodable_broadcast",
        wire_error{errc::malformed, "broadcast names fragment " + std::to_string(b.fragment_id) +
                                        " of " + std::to_string(st.frags.size())});
    return false;
  }
  const auto& layout = ctx.plan.fragments[static_cast<size_t>(b.fragment_id)];
  auto values = decode_payload(b.encoding, b.payload.data(), b.payload.size(), layout.numel);
  if (!values) {
    log_undecodable(self, ctx, "undecodable_broadcast", values.error());
    return false;
  }
  auto& f = st.frags[static_cast<size_t>(b.fragment_id)];
  auto& model = st.tr->model();
  if (ctx.rebase && f.have && st.current_phase != phase::syncing) {
    std::vector<float> theta = read_fragment(model, layout);
    rebase_onto(f, theta, std::move(*values), b.version, b.merged, st.id, st.incarnation);
    f.base_merged = b.merged;
    write_fragment(model, layout, theta);
    f.awaiting = false;
    return true;
  }
  const double alpha = ctx.mixing_alpha;
  const bool overwrite = alpha <= 0.0 || st.current_phase == phase::syncing;
  std::vector<float> theta;
  if (!overwrite) {
    theta = read_fragment(model, layout);
    for (size_t i = 0; i < theta.size(); ++i)
      theta[i] = static_cast<float>(alpha * theta[i] + (1.0 - alpha) * (*values)[i]);
  } else {
    theta = *values;
  }
  write_fragment(model, layout, theta);
  f.base = std::move(*values);
  f.base_version = b.version;
  f.base_merged = b.merged;
  f.steps = 0;
  f.tokens = 0;
  f.have = true;
  f.awaiting = false;
  f.first_since_receive = 0;
  f.outstanding.clear();
  return true;
}

/// A broadcast chunk damaged in transit (its message checksum or its payload's CRC-32C): counted
/// (chunk_refused) and the owner of `fragment` (−1: unreadable, none) asked for the value again.
void refuse_damaged_broadcast(learner_actor* self, const learner_context& ctx, int32_t fragment,
                              const std::string& detail) {
  auto& st = self->state;
  if (ctx.log != nullptr) {
    ctx.log->emit(
        "chunk_refused",
        {{"learner", st.id}, {"fragment", fragment}, {"what", "broadcast"}, {"detail", detail}});
    ctx.log->update([](run_counters& c) { c.chunks_refused += 1; });
  }
  if (fragment >= 0 && static_cast<size_t>(fragment) < st.owners.size())
    send_pull(self, ctx, st.owners[static_cast<size_t>(fragment)], static_cast<size_t>(fragment));
}

void on_broadcast(learner_actor* self, const learner_context& ctx, const wire_bytes& bytes) {
  auto& st = self->state;
  if (st.current_phase == phase::joining || st.current_phase == phase::finished) return;
  auto chunk = decode_broadcast_ref(bytes, {}, expect_of(self, ctx));  // payload left in `bytes`
  if (!chunk && chunk.code() == errc::checksum_mismatch) {
    // Damaged on the way: never applied; its header, read without the checksum, only names the
    // fragment to ask for again.
    log_undecodable(self, ctx, "undecodable_broadcast", chunk.error());
    decode_limits unchecked;
    unchecked.verify_checksum = false;
    auto header = decode_broadcast_ref(bytes, unchecked, expect_of(self, ctx));
    refuse_damaged_broadcast(self, ctx, header ? header->header.fragment_id : -1,
                             chunk.error().message);
    return;
  }
  if (!chunk) {
    log_undecodable(self, ctx, "undecodable_broadcast", chunk.error());
    return;
  }
  const int32_t fragment = chunk->header.fragment_id;
  auto whole = st.assembler.add(*chunk);
  if (!whole) {
    log_undecodable(self, ctx, "undecodable_broadcast", whole.error());
    if (whole.code() == errc::checksum_mismatch)
      refuse_damaged_broadcast(self, ctx, fragment, whole.error().message);
    return;
  }
  if (!whole->has_value()) return;  // more chunks to come
  if (!apply_global(self, ctx, **whole)) return;
  for (const auto& m : (*whole)->merged)
    if (m.learner_id == st.id && m.incarnation == st.incarnation) {
      auto& settled = st.last_settled[(*whole)->fragment_id];
      settled = std::max(settled, m.transfer_id);
    }
  if (st.current_phase == phase::draining) {
    if (!has_unsettled_push(st)) finish(self, ctx);
    return;
  }
  if (st.current_phase == phase::syncing) {
    for (const auto& f : st.frags)
      if (!f.have) return;
    st.current_phase = phase::stepping;
    set_stepping(self, ctx, true);
    if (ctx.gate != nullptr && !st.gate_joined) {
      ctx.gate->join(st.id);
      st.gate_joined = true;
    }
    if (ctx.log != nullptr)
      ctx.log->emit(
          "learner_synced",
          {{"learner", st.id}, {"incarnation", st.incarnation}, {"step", st.tr->steps_done()}});
    schedule_step(self);
  } else if (st.current_phase == phase::waiting && !barrier_blocked(self, ctx)) {
    st.current_phase = phase::stepping;
    set_stepping(self, ctx, true);
    schedule_step(self);
  }
}

struct inner_result {
  bool applied = false;
  double loss = 0.0;
  double lr = 0.0;  ///< the learning rate applied
};

/// One inner AdamW step (trainer's components, with the re-warmup factor on the lr).
inner_result inner_step(learner_actor* self, const learner_context& ctx) {
  auto& st = self->state;
  auto& tr = *st.tr;
  const auto& cfg = tr.config();
  tr.next_batch(st.batch);
  auto& model = tr.model();
  model.zero_grad();
  inner_result r;
  r.loss = model.forward(st.batch);
  if (!std::isfinite(r.loss)) return r;
  model.backward();
  double norm = clip_grad_norm(model.backend(), model.grads(), model.num_params(), cfg.grad_clip);
  if (!std::isfinite(norm)) return r;
  const int64_t step = tr.steps_done();
  double lr = cfg.schedule.at(ctx.global_schedule && st.global_step >= 0 ? st.global_step : step);
  if (st.incarnation > 0 && ctx.rewarmup_steps > 0) {
    double k = static_cast<double>(step - static_cast<int64_t>(st.resume_step) + 1) /
               static_cast<double>(ctx.rewarmup_steps);
    lr *= std::min(1.0, std::max(k, 0.0));
  }
  tr.optimizer().step(model.params(), model.grads(), static_cast<float>(lr));
  tr.set_steps_done(step + 1);
  r.applied = true;
  r.lr = lr;
  return r;
}

void on_step(learner_actor* self, const learner_context& ctx) {
  auto& st = self->state;
  st.step_scheduled = false;
  if (st.current_phase != phase::stepping && st.current_phase != phase::waiting) return;
  if (st.stop_requested ||
      (ctx.max_steps > 0 && static_cast<uint64_t>(st.tr->steps_done()) >= ctx.max_steps)) {
    finish(self, ctx);
    return;
  }
  if (barrier_blocked(self, ctx)) {
    if (st.current_phase != phase::waiting) {
      st.current_phase = phase::waiting;
      st.wait_started_s = actor_now(self);
      set_stepping(self, ctx, false);
      self->delayed_send(self, seconds_span(ctx.barrier_timeout_s), atoms::barrier_timeout_atom_v);
    }
    return;
  }
  st.current_phase = phase::stepping;
  const int64_t tokens_per_step =
      static_cast<int64_t>(st.tr->config().batch) * st.tr->config().seq_len;
  // The step's time counts from asking for a core: with M learners on fewer cores that wait is
  // part of an emulated device's step time (compute_gate.hpp).
  auto t0 = std::chrono::steady_clock::now();
  inner_result r;
  {
    gate_pass pass(ctx.gate, st.id, std::max(1.0, ctx.speed) * st.slow_factor);
    r = inner_step(self, ctx);
  }
  if (st.poison_next_step) {  // the nan fault's step: discarded even if a broadcast cleaned it
    st.poison_next_step = false;
    r.applied = false;
    r.loss = std::numeric_limits<double>::quiet_NaN();
  }
  double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (ctx.simulated_time) dt = ctx.sim_step_s;
  st.tokens += static_cast<uint64_t>(tokens_per_step);
  if (!r.applied) {
    if (ctx.log != nullptr) {
      ctx.log->emit("nonfinite", {{"learner", st.id},
                                  {"incarnation", st.incarnation},
                                  {"step", st.tr->steps_done()},
                                  {"loss", std::isfinite(r.loss) ? r.loss : -1.0}});
      ctx.log->update([&](run_counters& c) { c.learners[st.id].discarded_steps += 1; });
    }
    start_reload(self, ctx);
    return;
  }
  const uint64_t step = static_cast<uint64_t>(st.tr->steps_done());
  // Model statistics (moe_gpt: the router's per-expert load) once per sync interval H.
  if (ctx.log != nullptr && ctx.sync_interval > 0 &&
      step % static_cast<uint64_t>(ctx.sync_interval) == 0) {
    auto stats = st.tr->model().take_stats();
    if (stats.is_object() && stats.contains("event")) {
      const std::string kind = stats["event"].get<std::string>();
      stats.erase("event");
      stats["learner"] = st.id;
      stats["incarnation"] = st.incarnation;
      stats["step"] = step;
      ctx.log->emit(kind, std::move(stats));
    }
  }
  for (auto& f : st.frags) {
    f.steps += 1;
    f.tokens += static_cast<uint64_t>(tokens_per_step);
  }
  // Emulated slower hardware: the step takes factor × its measured time.
  double factor = std::max(1.0, ctx.speed);
  step_faults sf;
  if (ctx.faults != nullptr) sf = ctx.faults->on_learner_step(st.id, st.incarnation, step);
  factor *= std::max(1.0, sf.slow_factor);
  st.slow_factor = std::max(1.0, sf.slow_factor);
  if (ctx.jitter > 0 && st.jitter_rng) factor *= 1.0 + ctx.jitter * st.jitter_rng->uniform();
  if (!ctx.simulated_time && factor > 1.0)
    std::this_thread::sleep_for(std::chrono::duration<double>((factor - 1.0) * dt));
  const double step_s = dt * factor;
  st.step_time.update(step_s);
  st.compute_s += step_s;
  if (ctx.log != nullptr) {
    const double loss = r.loss;
    const uint64_t toks = static_cast<uint64_t>(tokens_per_step);
    ctx.log->update([&](run_counters& c) {
      auto& ls = c.learners[st.id];
      ls.step = step;
      ls.tokens += toks;
      ls.loss = loss;
      ls.compute_s += step_s;
      ls.steps_per_s = step_s > 0 ? 1.0 / st.step_time.value() : 0.0;
      ls.incarnation = st.incarnation;
      ls.alive = true;
    });
  }
  // Heartbeat: step, tokens, step-time EMA, data cursor (what a respawn resumes from).
  heartbeat_msg hb;
  hb.learner_id = st.id;
  hb.incarnation = st.incarnation;
  hb.step = step;
  hb.tokens = st.tokens;
  hb.step_time_ema_s = st.step_time.value();
  hb.data_cursor = st.tr->cursor().to_bytes();
  hb.loss = r.loss;
  hb.compute_s = st.compute_s;
  hb.lr = r.lr;
  self->send(st.monitor, atoms::heartbeat_atom_v, encode(hb, stamp_of(self, ctx)));
  st.heartbeat_dates.sent(step, actor_now(self));
  if (sf.nan) {
    // A live nan_step fault: one NaN in every fragment of the local model. A push due now
    // carries it (its owner refuses it as non-finite); the next step's loss is NaN, so the
    // learner discards that step and reloads the global model.
    const float bad = std::numeric_limits<float>::quiet_NaN();
    for (const auto& layout : ctx.plan.fragments)
      if (!layout.tensors.empty())
        st.tr->model().write_parameters(layout.tensors.front().flat_offset, 1, &bad);
    st.poison_next_step = true;
    if (ctx.log != nullptr)
      ctx.log->emit("nan_injected",
                    {{"learner", st.id}, {"incarnation", st.incarnation}, {"step", step}});
  }
  if (sf.fail) {
    if (ctx.log != nullptr)
      ctx.log->emit("crash", {{"learner", st.id},
                              {"incarnation", st.incarnation},
                              {"step", step},
                              {"reason", "fail_step"}});
    set_stepping(self, ctx, false);
    if (ctx.gate != nullptr) ctx.gate->leave(st.id);
    throw std::runtime_error("fault injected: learner " + std::to_string(st.id) +
                             " fails at step " + std::to_string(step));
  }
  if (sf.kill) {
    if (ctx.log != nullptr)
      ctx.log->emit("crash", {{"learner", st.id}, {"incarnation", st.incarnation}, {"step", step}});
    set_stepping(self, ctx, false);
    if (ctx.gate != nullptr) ctx.gate->leave(st.id);
    self->quit(caf::make_error(caf::sec::runtime_error, "fault injected: kill learner"));
    return;
  }
  // Pushes of the fragments whose turn it is: (step − offset_p) mod H == 0.
  expire_unacked(self, ctx, step);
  std::vector<uint64_t> due;
  if (!ctx.global_push_clock) {
    due = policy::fragments_due(step, static_cast<uint64_t>(ctx.sync_interval),
                                static_cast<uint64_t>(ctx.plan.num_fragments()));
  } else {
    // The mean step's turns crossed since the previous check, estimated half a step ahead so
    // the push lands at the boundary nearest the crossing (none before the first reading).
    // At most H steps ahead of the newest reading: an overestimate is latched below, and would
    // hold back every push until the real mean step caught up with it.
    const double own = st.step_time.value();
    if (auto g = st.mean_step_clock.at(actor_now(self) + 0.5 * own, 3.0 * own,
                                       static_cast<double>(ctx.sync_interval))) {
      const auto now_clock = static_cast<int64_t>(std::floor(*g));
      if (st.push_clock >= 0)
        due = policy::fragments_due_between(static_cast<uint64_t>(st.push_clock),
                                            static_cast<uint64_t>(std::max<int64_t>(0, now_clock)),
                                            static_cast<uint64_t>(ctx.sync_interval),
                                            static_cast<uint64_t>(ctx.plan.num_fragments()));
      st.push_clock = std::max(st.push_clock, now_clock);
    }
  }
  if (!due.empty()) {
    auto params = st.tr->model().get_parameters();
    for (auto p : due) push_fragment(self, ctx, static_cast<int32_t>(p), params, step);
  }
  if (ctx.max_steps > 0 && step >= ctx.max_steps) {
    finish(self, ctx);
    return;
  }
  schedule_step(self, ctx.simulated_time ? step_s : 0.0);
}

/// The first join of an incarnation (to `monitor`): on its reply the learner starts, resuming the
/// step and data cursor the monitor recorded. A newer attempt (the node reconnected to another
/// monitor before this one was answered) supersedes it.
void initial_join(learner_actor* self, std::shared_ptr<const learner_context> ctx,
                  const monitor_hdl& monitor) {
  const uint64_t attempt = ++self->state.join_attempt;
  join_request req;
  req.requested_learner_id = ctx->learner_id;
  req.host = "local";
  self->request(monitor, std::chrono::seconds(60), atoms::join_atom_v,
                encode(req, {ctx->run_id, 0}), learner_at_syncer_hdl{self})
      .then(
          [=](const std::vector<uint8_t>& bytes) {
            auto& s = self->state;
            if (s.joined || s.join_attempt != attempt) return;  // answered by a newer join
            auto rep = decode_join_reply(bytes, {}, {ctx->run_id, 0});
            if (!rep) {
              log_undecodable(self, *ctx, "undecodable_join_reply", rep.error());
              self->quit(caf::make_error(caf::sec::invalid_argument, rep.error().message));
              return;
            }
            // From now on a message of an older syncer incarnation is refused.
            if (auto h = peek_envelope(bytes)) s.syncer_incarnation = h->sender_incarnation;
            s.joined = true;
            s.id = rep->learner_id;
            s.incarnation = rep->incarnation;
            s.resume_step = rep->resume_step;
            s.tr->set_steps_done(static_cast<int64_t>(rep->resume_step));
            if (!rep->data_cursor.empty()) {
              try {
                s.tr->restore_cursor(data_cursor::from_bytes(rep->data_cursor));
              } catch (const std::exception& e) {
                if (ctx->log != nullptr)
                  ctx->log->emit("failure",
                                 {{"learner", s.id}, {"what", "cursor"}, {"error", e.what()}});
              }
            }
            s.tr->reset_optimizer();
            if (ctx->log != nullptr)
              ctx->log->emit("learner_start", {{"learner", s.id},
                                               {"incarnation", s.incarnation},
                                               {"resume_step", s.resume_step}});
            start_reload(self, *ctx);
          },
          [=](caf::error& err) {
            // A join superseded by a newer one (sent to a monitor that went away) is moot.
            if (self->state.joined || self->state.join_attempt != attempt) return;
            self->quit(std::move(err));
          });
}

/// Applies the owner directory the monitor sent (bytes: owner_directory; `handles`: the current
/// owner of each fragment it names, in order). An undecodable one is logged and asked for again
/// (get_atom, owners_atom) from the monitor.
void apply_owner_directory(learner_actor* self, const std::shared_ptr<const learner_context>& ctx,
                           const std::vector<uint8_t>& bytes,
                           const std::vector<owner_hdl>& handles) {
  auto& s = self->state;
  auto dir = decode_owner_directory(bytes, {}, expect_of(self, *ctx));
  if (dir && dir->fragment_ids.size() != handles.size())
    dir = wire_error{errc::malformed, "ownerDirectory names " +
                                          std::to_string(dir->fragment_ids.size()) +
                                          " fragments but travels with " +
                                          std::to_string(handles.size()) + " handles"};
  if (!dir) {
    log_undecodable(self, *ctx, "undecodable_owner_directory", dir.error());
    // Ask the monitor for the current directory: a damaged copy (a link that corrupts)
    // once left a learner without owners, so it never pushed again. Applied in reply
    // order; a failed request changes nothing (the next change of owners resends it).
    if (self->state.monitor)
      self->request(self->state.monitor, std::chrono::seconds(10), caf::get_atom_v,
                    atoms::owners_atom_v)
          .then([=](const std::vector<uint8_t>& b,
                    const std::vector<owner_hdl>& h) { apply_owner_directory(self, ctx, b, h); },
                [](const caf::error&) {});
    return;
  }
  // Indexed by fragment (a fragment outside the plan is ignored; one not named: no owner).
  std::vector<owner_hdl> owners(s.owners.size());
  for (size_t i = 0; i < handles.size(); ++i) {
    const auto p = static_cast<size_t>(dir->fragment_ids[i]);
    if (p < owners.size()) owners[p] = handles[i];
  }
  if (s.current_phase == phase::finished) {
    // A pending leave's learner: the owners of its final pushes (final_pushes), no pulls.
    s.owners_stale = false;
    for (size_t p = 0; p < owners.size() && p < s.owners.size(); ++p) s.owners[p] = owners[p];
    return;
  }
  // After a reconnect every handle is new even when it compares equal to the old one.
  const bool rejoined = s.owners_stale;
  s.owners_stale = false;
  for (size_t p = 0; p < owners.size() && p < s.owners.size(); ++p) {
    if (!rejoined && same_handle(owners[p], s.owners[p])) continue;
    const bool replaced = rejoined || static_cast<bool>(s.owners[p]);
    s.owners[p] = owners[p];
    auto it = s.unacked.find(static_cast<int32_t>(p));
    if (it != s.unacked.end()) {
      send_chunks(self, owners[p], it->second.chunks, 0.0);
    } else if (replaced && owners[p] && s.current_phase != phase::syncing && s.current_phase != phase::joining) {
      // A respawned owner lost its pending pushes: resynchronize this fragment with it
      // (barrier mode would otherwise wait for a merge that cannot come).
      s.frags[p].awaiting = false;
      send_pull(self, *ctx, owners[p], p);
    }
  }
  if (s.current_phase == phase::syncing) pull_missing(self, *ctx);
}

}  // namespace

uint64_t rebase_onto(learner_fragment& f, std::vector<float>& theta, std::vector<float> value,
                     uint64_t version, const std::vector<merged_push>& merged, int32_t learner_id,
                     uint64_t incarnation) {
  if (theta.size() != value.size() || f.base.size() != value.size())
    throw std::invalid_argument("rebase_onto: theta has " + std::to_string(theta.size()) +
                                " elements, base " + std::to_string(f.base.size()) +
                                ", the new value " + std::to_string(value.size()));
  // This incarnation's newest outstanding transfer that the value contains.
  outstanding_push* inc = nullptr;
  for (const auto& m : merged) {
    if (m.learner_id != learner_id || m.incarnation != incarnation) continue;
    for (auto& o : f.outstanding)
      if (o.transfer_id <= m.transfer_id && o.delta.size() == value.size()) inc = &o;
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
  for (auto& o : f.outstanding) {
    o.steps = o.steps > s ? o.steps - s : 0;
    o.tokens = o.tokens > k ? o.tokens - k : 0;
    for (size_t i = 0; i < d.size() && i < o.delta.size(); ++i) o.delta[i] -= d[i];
  }
  f.steps = f.steps > s ? f.steps - s : 0;
  f.tokens = f.tokens > k ? f.tokens - k : 0;
  return cut;
}

namespace {

/// Watches `monitor` as the learner's monitor (a learner node's learner: its down marks the
/// syncer lost for a pending leave).
void watch_monitor(learner_actor* self, const learner_context& ctx, const monitor_hdl& monitor) {
  auto& s = self->state;
  s.monitor = monitor;
  s.monitor_lost = false;
  if (ctx.leave_acked && monitor) self->monitor(monitor);
}

/// A learner that finished while the syncer was away, rejoined to leave: its training since the
/// last global value it received (the outage's steps, over many sync intervals) is still only in
/// its own model. Each fragment with such progress is pushed once, as its delta to the last
/// base; the learner then drains (finish: stays until they are merged or refused, at most
/// learner_context::drain_timeout_s) and leaves. Without progress it leaves at once.
void final_pushes(learner_actor* self, const learner_context& ctx) {
  auto& st = self->state;
  st.leave_pending = false;  // finish() asks again, after the drain
  st.current_phase = phase::stepping;  // for finish(): it drains from here
  const auto params = st.tr->model().get_parameters();
  const auto step = static_cast<uint64_t>(st.tr->steps_done());
  size_t pushed = 0;
  for (size_t p = 0; p < st.frags.size(); ++p) {
    const auto& f = st.frags[p];
    if (f.steps == 0 || !f.have || p >= st.owners.size() || !st.owners[p]) continue;
    push_fragment(self, ctx, static_cast<int32_t>(p), params, step);
    ++pushed;
  }
  if (ctx.log != nullptr)
    ctx.log->emit("final_pushes", {{"learner", st.id},
                                   {"incarnation", st.incarnation},
                                   {"step", step},
                                   {"fragments", pushed}});
  finish(self, ctx);
}

/// Rejoins the learner's (new) monitor as a live learner with a new incarnation, keeping step
/// and data cursor. Pushes in flight went to owners that are gone: forgotten; the owner
/// directory that follows the join makes every fragment resynchronize with its new owner. A
/// finished learner with a pending leave (leave_needs_rejoin) reports its steps and tokens this
/// way, then makes its final pushes and leaves (final_pushes); a failed join of one is tried
/// again in 2 s (leave_retry_atom).
void rejoin_live(learner_actor* self, const std::shared_ptr<const learner_context>& ctx) {
  auto& s = self->state;
  join_request again;
  again.requested_learner_id = s.id;
  again.host = "rejoin";
  again.live = true;
  again.step = static_cast<uint64_t>(s.tr->steps_done());
  again.tokens = s.tokens;
  again.incarnation = s.incarnation;
  again.compute_s = s.compute_s;
  // The learner steps on until the reply: the tokens and compute of those steps belong to
  // the new incarnation (the monitor drops the old incarnation's heartbeats once it
  // accepted the join), so only what the request reported is taken off at the reply.
  const uint64_t reported_tokens = s.tokens;
  const double reported_compute_s = s.compute_s;
  // The owner directory arrives before the reply: with nothing in flight, every fragment
  // whose owner changed is pulled from its new owner (the owners_atom handler).
  s.unacked.clear();
  s.queued.clear();
  s.last_pushed.clear();
  // The same syncer reached again over a new connection (a dropped link that healed): its
  // owners keep their addresses, so the directory that follows compares equal to the
  // handles held now — proxies that died with the old connection. Take every entry.
  s.owners_stale = true;
  s.last_settled.clear();
  for (auto& f : s.frags) {
    f.awaiting = false;
    f.first_since_receive = 0;
    f.outstanding.clear();
  }
  self->request(s.monitor, std::chrono::seconds(30), atoms::join_atom_v,
                encode(again, stamp_of(self, *ctx)), learner_at_syncer_hdl{self})
      .then(
          [=](const std::vector<uint8_t>& bytes) {
            auto& s2 = self->state;
            // The syncer may have restarted (a new incarnation): any incarnation at least
            // as new as the one joined before.
            auto rep = decode_join_reply(bytes, {}, expect_of(self, *ctx));
            if (!rep) {
              log_undecodable(self, *ctx, "undecodable_join_reply", rep.error());
              return;
            }
            if (auto h = peek_envelope(bytes)) s2.syncer_incarnation = h->sender_incarnation;
            const uint64_t before = s2.incarnation;
            s2.incarnation = rep->incarnation;
            s2.tokens = s2.tokens > reported_tokens ? s2.tokens - reported_tokens : 0;
            s2.compute_s = std::max(0.0, s2.compute_s - reported_compute_s);
            if (ctx->log != nullptr)
              ctx->log->emit("learner_rejoined", {{"learner", s2.id},
                                                  {"incarnation_before", before},
                                                  {"incarnation", s2.incarnation},
                                                  {"step", s2.tr->steps_done()},
                                                  {"to_leave", s2.leave_needs_rejoin}});
            if (s2.leave_pending && s2.leave_needs_rejoin) {
              s2.leave_needs_rejoin = false;
              final_pushes(self, *ctx);
            }
          },
          [=](caf::error& err) {
            auto& s2 = self->state;
            if (ctx->log != nullptr)
              ctx->log->emit(
                  "failure",
                  {{"learner", s2.id}, {"what", "rejoin"}, {"error", self->system().render(err)}});
            if (s2.leave_pending && !s2.monitor_lost)
              self->delayed_send(self, std::chrono::seconds(2), atoms::leave_retry_atom_v);
          });
}

}  // namespace

learner_hdl::behavior_type learner(learner_actor* self,
                                   std::shared_ptr<const learner_context> ctx) {
  name_crashes(self);
  drop_unexpected(self, ctx->log, "learner " + std::to_string(ctx->learner_id));
  // Owners' broadcast chunks may come on the tensor channel too.
  tensor_channel_hub::allow(self->system(), caf::strong_actor_ptr{self->ctrl()},
                            {channel_kind::broadcast});
  auto& st = self->state;
  st.id = ctx->learner_id;
  if (ctx->compute_nice > 0) util::lower_thread_priority(ctx->compute_nice);  // before the pool
  kernels::backend_options bo;
  bo.threads = ctx->threads;
  st.backend = kernels::make_backend(ctx->backend, bo);
  st.tr = ctx->images != nullptr
              ? std::make_unique<trainer>(*st.backend, *ctx->images, ctx->trainer)
              : std::make_unique<trainer>(*st.backend, *ctx->data, ctx->trainer);
  st.frags.resize(ctx->plan.fragments.size());
  st.owners.resize(ctx->plan.fragments.size());
  st.jitter_rng = std::make_unique<rng>(derive_seed(ctx->trainer.seed, 0x6a6974ULL + st.id));
  watch_monitor(self, *ctx, ctx->current_monitor ? ctx->current_monitor() : ctx->monitor);
  st.flow = chunk_flow(static_cast<size_t>(std::max(1, ctx->window_chunks)));
  st.copies = chunk_flow(static_cast<size_t>(std::max(1, ctx->window_chunks)), uint64_t{1} << 62);
  // The learner monitors only the peers it sends chunks to (an owner that goes away frees its
  // link; unanswered pushes go to its successor from the owners_atom handler).
  self->set_down_handler([=](caf::down_msg& dm) {
    flow_down(self->state.flow, dm);
    flow_down(self->state.copies, dm);
    if (ctx->leave_acked && self->state.monitor && dm.source == self->state.monitor.address())
      self->state.monitor_lost = true;  // a pending leave waits for syncer_atom
  });
  initial_join(self, ctx, st.monitor);
  return {
      [=](atoms::step_atom) { on_step(self, *ctx); },
      [=](atoms::credit_atom, uint64_t seq) {
        flow_credit(self, self->state.flow, seq);  // an unknown number changes nothing
        flow_credit(self, self->state.copies, seq);
      },
      [=](atoms::progress_atom, const std::vector<uint8_t>& bytes) {
        auto& s = self->state;
        auto pm = decode_progress(bytes, {}, expect_of(self, *ctx));
        if (!pm) {
          log_undecodable(self, *ctx, "undecodable_progress", pm.error());
          return;
        }
        const uint64_t total_tokens = pm->total_tokens;
        const auto& cfg = s.tr->config();
        const uint64_t per_round = static_cast<uint64_t>(std::max(1, cfg.batch)) *
                                   static_cast<uint64_t>(std::max(1, cfg.seq_len)) *
                                   static_cast<uint64_t>(std::max(1, cfg.learners));
        s.global_step = static_cast<int64_t>(total_tokens / per_round);
        // Dated by when the answered heartbeat left (this actor's clock). A reply that cannot be
        // dated so is not used: dated by its arrival, a burst of replies held up by a busy syncer
        // gave the clock a rate of thousands of steps per second (policy::global_clock).
        if (auto sent = s.heartbeat_dates.answer(pm->step)) {
          const uint64_t restarts = s.mean_step_clock.restarts();
          s.mean_step_clock.observe(*sent, pm->mean_step);
          // The clock went backwards (a restarted syncer's monitor): the value latched from the
          // old one would hold back every push until the new one caught up. Start over from it.
          if (s.mean_step_clock.restarts() != restarts) s.push_clock = -1;
        }
      },
      [=](atoms::barrier_timeout_atom) {
        auto& s = self->state;
        if (s.current_phase != phase::waiting) return;
        if (actor_now(self) - s.wait_started_s + 1e-9 < ctx->barrier_timeout_s) return;
        for (auto& f : s.frags) f.awaiting = false;
        if (ctx->log != nullptr)
          ctx->log->emit("barrier_timeout", {{"learner", s.id}, {"step", s.tr->steps_done()}});
        s.current_phase = phase::stepping;
        set_stepping(self, *ctx, true);
        schedule_step(self);
      },
      [=](atoms::broadcast_atom, const std::vector<uint8_t>& bytes, uint64_t seq) {
        grant_credit(self, seq);  // taken: the owner may send the next chunk
        on_broadcast(self, *ctx, bytes);
      },
      // An owner rebuilding its fragment asks which version we hold (and, with send_value, for
      // the value itself): the last broadcast applied, exactly as received.
      [=](atoms::query_atom, const std::vector<uint8_t>& bytes) {
        auto& s = self->state;
        auto q = decode_fragment_query(bytes, {}, expect_of(self, *ctx));
        if (!q) {
          log_undecodable(self, *ctx, "undecodable_query", q.error());
          return;
        }
        auto sender = caf::actor_cast<owner_hdl>(self->current_sender());
        if (!sender) return;
        fragment_held h;
        h.learner_id = s.id;
        h.incarnation = s.incarnation;
        h.fragment_id = q->fragment_id;
        h.query_id = q->query_id;
        const size_t p = static_cast<size_t>(q->fragment_id);
        if (s.joined && p < s.frags.size() && s.frags[p].have &&
            s.frags[p].base.size() == ctx->plan.fragments[p].numel) {
          h.have = true;
          h.version = s.frags[p].base_version;
        }
        self->send(sender, atoms::held_atom_v, encode(h, stamp_of(self, *ctx)));
        if (!h.have || !q->send_value) return;
        const auto& f = s.frags[p];
        broadcast_msg b;
        b.fragment_id = q->fragment_id;
        b.version = f.base_version;
        b.encoding = payload_encoding::fp32;
        b.total_elements = f.base.size();
        b.payload = encode_payload(payload_encoding::fp32, f.base.data(), f.base.size());
        b.payload_bytes = b.payload.size();
        b.merged = f.base_merged;
        std::vector<wire_bytes> copy;
        if (b.payload.size() <= ctx->chunk_bytes) {
          copy.push_back(encode(b, stamp_of(self, *ctx)));
        } else if (auto chunks = encode_broadcast_chunks(b, ctx->chunk_bytes, stamp_of(self, *ctx));
                   chunks) {
          copy = std::move(*chunks);
        }
        for (auto& c : copy)
          flow_send(self, s.copies, make_chunk(sender, atoms::copy_atom_v, std::move(c)));
        if (ctx->log != nullptr)
          ctx->log->emit(
              "fragment_copy_sent",
              {{"learner", s.id}, {"fragment", q->fragment_id}, {"version", f.base_version}});
      },
      [=](atoms::ack_atom, const std::vector<uint8_t>& bytes) {
        auto& s = self->state;
        auto ack = decode_push_ack(bytes, {}, expect_of(self, *ctx));
        if (!ack) {
          log_undecodable(self, *ctx, "undecodable_ack", ack.error());
          return;
        }
        if (ack->learner_id != s.id || ack->incarnation != s.incarnation) return;  // not ours
        auto it = s.unacked.find(ack->fragment_id);
        if (it != s.unacked.end() && it->second.transfer_id == ack->transfer_id)
          s.unacked.erase(it);
        drain_queue(self, *ctx);
      },
      [=](atoms::reject_atom, const std::vector<uint8_t>& bytes) {
        auto& s = self->state;
        auto rj = decode_reject(bytes, {}, expect_of(self, *ctx));
        if (!rj) {
          log_undecodable(self, *ctx, "undecodable_reject", rj.error());
          return;
        }
        // Refused as malformed (e.g. a chunk damaged in transit, caught by its CRC-32C): send the
        // same push again; it stays unanswered and unsettled meanwhile.
        if (rj->reason == reject_reason::malformed && rj->fragment_id >= 0 &&
            static_cast<size_t>(rj->fragment_id) < s.owners.size()) {
          auto it = s.unacked.find(rj->fragment_id);
          const auto& owner = s.owners[static_cast<size_t>(rj->fragment_id)];
          if (it != s.unacked.end() && it->second.transfer_id == rj->transfer_id && owner &&
              it->second.resends < max_resends) {
            it->second.resends += 1;
            send_chunks(self, owner, it->second.chunks, 0.0);
            if (ctx->log != nullptr)
              ctx->log->emit("push_resent", {{"learner", s.id},
                                             {"fragment", rj->fragment_id},
                                             {"transfer_id", rj->transfer_id},
                                             {"detail", rj->detail}});
            return;
          }
        }
        {
          auto& settled = s.last_settled[rj->fragment_id];
          settled = std::max(settled, rj->transfer_id);
        }
        if (s.current_phase == phase::draining) {
          if (!has_unsettled_push(s)) finish(self, *ctx);
          return;
        }
        s.unacked.erase(rj->fragment_id);
        if (rj->fragment_id >= 0 && static_cast<size_t>(rj->fragment_id) < s.frags.size()) {
          auto& f = s.frags[static_cast<size_t>(rj->fragment_id)];
          if (rj->reason != reject_reason::stale) f.awaiting = false;
          // A refused push is never merged: its progress stays in θ and rides on the next push.
          for (auto it = f.outstanding.begin(); it != f.outstanding.end(); ++it)
            if (it->transfer_id == rj->transfer_id) {
              f.outstanding.erase(it);
              break;
            }
        }
        drain_queue(self, *ctx);
        if (s.current_phase == phase::waiting && !barrier_blocked(self, *ctx)) {
          s.current_phase = phase::stepping;
          set_stepping(self, *ctx, true);
          schedule_step(self);
        }
      },
      [=](atoms::owners_atom, const std::vector<uint8_t>& bytes,
          const std::vector<owner_hdl>& handles) {
        apply_owner_directory(self, ctx, bytes, handles);
      },
      // From the health monitor (dd-node drain, the job's stop), as a wire message.
      [=](atoms::stop_atom, const std::vector<uint8_t>& bytes) {
        auto stop = decode_stop(bytes, {}, expect_of(self, *ctx));
        if (!stop) {
          log_undecodable(self, *ctx, "undecodable_stop", stop.error());
          return;
        }
        auto& s = self->state;
        s.stop_requested = true;
        if (s.current_phase != phase::stepping && s.current_phase != phase::draining) finish(self, *ctx);
      },
      // From the learner's own node (its supervisor): node-local, not a wire message.
      [=](atoms::stop_atom) {
        auto& s = self->state;
        if (s.leave_pending) {
          // Its node stops while the leave waits for a syncer: no syncer will take it now.
          if (ctx->log != nullptr)
            ctx->log->emit("leave_abandoned", {{"learner", s.id}, {"incarnation", s.incarnation}});
          self->quit(caf::exit_reason::normal);
          return;
        }
        s.stop_requested = true;
        s.stopped_by_node = true;
        if (s.current_phase != phase::stepping && s.current_phase != phase::draining) finish(self, *ctx);
      },
      // The learner node reconnected to a (restarted) syncer: rejoin its monitor as a live
      // learner with a new incarnation, keeping step and data cursor (rejoin_live). A finished
      // learner whose leave the lost syncer never answered rejoins too, then leaves.
      [=](atoms::syncer_atom, const monitor_hdl& monitor) {
        auto& s = self->state;
        if (s.current_phase == phase::finished && !s.leave_pending) return;
        watch_monitor(self, *ctx, monitor);
        if (!s.joined) {
          // Respawned while the syncer was away: its first join went to the lost monitor.
          initial_join(self, ctx, monitor);
          return;
        }
        if (s.leave_pending) s.leave_needs_rejoin = true;
        rejoin_live(self, ctx);
      },
      // A pending leave's timer (send_leave): once more, unless the monitor was lost meanwhile.
      [=](atoms::leave_retry_atom) {
        auto& s = self->state;
        if (!s.leave_pending || s.monitor_lost) return;
        if (s.leave_needs_rejoin)
          rejoin_live(self, ctx);
        else
          send_leave(self, *ctx);
      },
      // The drain timeout: leave even though a final push was not seen merged.
      [=](atoms::drain_timeout_atom) {
        if (self->state.current_phase == phase::draining) finish(self, *ctx);
      },
  };
}

}  // namespace dd::actors
