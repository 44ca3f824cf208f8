// actors/roles/fragment_owner.cpp — see fragment_owner.hpp.
//
// State diagram (one owner incarnation):
//
//   start --checkpoint file?--> restored ---+
//     \------- none ----------> fresh ------+--> serving: push / pull / live / grace
//                                                   |  the node's fault hook or crash
//                                                   v
//                                                 dead --supervisor--> start (new incarnation)
#include "actors/roles/fragment_owner.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <utility>

#include <fmt/format.h>
#include <caf/all.hpp>

#include "actors/link/atoms.hpp"
#include "actors/link/wire_refusal.hpp"
#include "actors/roles/role_entry.hpp"
#include "actors/roles/supervisor.hpp"
#include "actors/services/owner_faults.hpp"
#include "actors/services/run_log.hpp"
#include "messages/control.hpp"
#include "runtime/quantize.hpp"
#include "util/duration.hpp"

namespace dd::actors {

double clock_seconds(caf::actor_clock::time_point t) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}

namespace {

/// What an incarnation works with: its configuration and the services its node handed it.
using owner_env = role_env<owner_config, owner_services>;

/// What the owner writes into every envelope: the run and the syncer's incarnation.
envelope_stamp stamp_of(const owner_env& ctx) {
  return {ctx.options.run_id, ctx.options.syncer_incarnation};
}

/// What it accepts: its run (a learner's incarnation is checked by owner_core against
/// the live view; the codec checks that a push's body names its envelope's incarnation).
envelope_expect expect_of(const owner_env& ctx) { return {ctx.options.run_id, 0}; }

/// The live view from its wire message and the handles that travel with it (one per learner, in
/// list order).
result<live_view> decode_view(const owner_env& ctx, const wire_bytes& bytes,
                              const std::vector<learner_at_owner_hdl>& handles) {
  auto v = decode_live_view(bytes, {}, expect_of(ctx));
  if (!v) return v.error();
  if (v->learners.size() != handles.size())
    return wire_error{errc::malformed, "liveView names " + std::to_string(v->learners.size()) +
                                           " learners but travels with " +
                                           std::to_string(handles.size()) + " handles"};
  live_view out;
  out.epoch = v->epoch;
  for (size_t i = 0; i < handles.size(); ++i) {
    const auto& l = v->learners[i];
    out.learners.push_back({l.learner_id, l.incarnation, l.step_time_ema_s, handles[i]});
  }
  return out;
}

/// The live view of a live_atom message; none when it does not decode, then logged as refused
/// (undecodable_live_view) and dropped: the owner keeps the view it has.
std::optional<live_view> read_view(const owner_env& ctx, const wire_bytes& bytes,
                                   const std::vector<learner_at_owner_hdl>& handles) {
  auto read = decode_view(ctx, bytes, handles);
  if (!read) {
    log_refused_message(ctx.svc.log, "undecodable_live_view", read.error(),
                        {{"fragment", ctx.options.layout.fragment_id}});
    return std::nullopt;
  }
  return std::move(*read);
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return !path.empty() && ::stat(path.c_str(), &st) == 0;
}

caf::timespan to_timespan(double seconds) { return util::to_timespan(seconds); }

/// A checkpoint of a version newer than every version events.jsonl names (the history's
/// highest_version before this owner's first start): the run was killed after the checkpoint was
/// written and before its `merge` line. The line is written now from the checkpoint's record (with
/// "from_checkpoint": true) and counted, so events.jsonl holds every merged version once.
void log_merge_of_checkpoint(const owner_env& ctx, const owner_checkpoint& ck) {
  if (ctx.svc.log == nullptr || ck.merge_record.empty() ||
      ck.version <= ctx.svc.history->highest_version())
    return;
  auto fields = nlohmann::json::parse(ck.merge_record, nullptr, false);
  if (!fields.is_object() || fields.value("version", uint64_t{0}) != ck.version) return;
  fields["from_checkpoint"] = true;
  uint64_t contributors = 0, tokens = 0;
  if (fields.contains("contributors") && fields["contributors"].is_array())
    for (const auto& c : fields["contributors"]) {
      contributors += 1;
      tokens += c.value("tokens", uint64_t{0});
    }
  ctx.svc.log->emit("merge", fields);
  ctx.svc.log->update([&](run_counters& c) {
    c.merges += 1;
    c.contributors += contributors;
    c.tokens_merged += tokens;
    c.versions[ck.fragment_id] = ck.version;
  });
}

/// Records the version this incarnation started at or published (floor for later numbering).
void note_version(const owner_env& ctx, uint64_t v) { ctx.svc.history->note_version(v); }

/// A checkpoint write failed: the owner reports it to its node (write_trouble_atom), whose
/// write-failure policy answers with a verdict (write_verdict_atom: `serving` handles it). When no
/// retry is armed yet, one waits for that verdict, due `in_s` seconds after it with `next_s` as
/// its next backoff. Without a node the failure stays a `failure` event.
void report_checkpoint_failure(owner_actor* self, const owner_env& ctx, const std::string& message,
                               double in_s, double next_s) {
  if (!ctx.svc.node) return;
  auto& st = self->state;
  if (!st.checkpoint_retry_armed) {
    st.checkpoint_retry_armed = true;
    st.checkpoint_verdict_due = true;
    st.checkpoint_retry_in_s = in_s;
    st.checkpoint_retry_next_s = next_s;
  }
  self->send(ctx.svc.node, atoms::write_trouble_atom_v, ctx.options.checkpoint_path, message);
}

void apply_effects(owner_actor* self, const owner_env& ctx, owner_effects fx) {
  auto& st = self->state;
  if (fx.arm_grace_s)
    self->delayed_send(self, to_timespan(*fx.arm_grace_s), atoms::grace_atom_v, fx.timer_id);
  if (!fx.merged) return;
  const auto& rec = *fx.merged;
  note_version(ctx, rec.version);
  uint64_t bytes = 0;
  for (const auto& chunk : fx.broadcast) bytes += chunk.size();
  // One shared message per chunk for every learner; each link sends under its own credit.
  flow_publish(self, st.flow, st.learners, share_chunks(std::move(fx.broadcast)), rec.version,
               rec.fragment_id);
  if (ctx.svc.log != nullptr) {
    uint64_t tokens = 0;
    for (const auto& c : rec.contributors) tokens += c.tokens;
    ctx.svc.log->emit("merge", merge_event_fields(rec, st.core->xi_step_s(), st.core->xi_quorum_s(),
                                                  st.core->xi_sync_s()));
    ctx.svc.log->emit("broadcast", {{"fragment", rec.fragment_id},
                                    {"version", rec.version},
                                    {"learners", st.learners.size()},
                                    {"bytes", bytes * st.learners.size()}});
    if (rec.checkpointed || !rec.checkpoint_error.empty())
      ctx.svc.log->emit(rec.checkpointed ? "checkpoint" : "failure",
                        {{"fragment", rec.fragment_id},
                         {"version", rec.version},
                         {"error", rec.checkpoint_error}});
    const std::string msg = "fragment owner " + std::to_string(rec.fragment_id) +
                            ": checkpoint of version " + std::to_string(rec.version) + ": " +
                            rec.checkpoint_error;
    // What a failed write means (the run's end, or a degraded node) is the node's policy:
    // the owner reports it and does what the node answers (write it again, or not).
    if (!rec.checkpoint_error.empty())
      report_checkpoint_failure(self, ctx, msg, 0.5, 0.5);
    else if (rec.checkpointed)
      ctx.svc.log->write_recovered(ctx.options.checkpoint_path);
    const size_t n_learners = st.learners.size();
    ctx.svc.log->update([&](run_counters& c) {
      c.merges += 1;
      c.contributors += rec.contributors.size();
      c.tokens_merged += tokens;
      c.bytes_broadcast += bytes * n_learners;
      c.grace_s[rec.fragment_id] = rec.grace_s;
      c.versions[rec.fragment_id] = rec.version;
    });
  }
  // The node's fault hook (owner_faults.hpp) may kill this owner at its new version.
  if (ctx.svc.faults)
    if (auto killed = ctx.svc.faults->at_version(rec.version)) self->quit(std::move(killed));
}

}  // namespace

namespace {

owner_hdl::behavior_type serving(owner_actor* self, std::shared_ptr<const owner_env> ctx);

/// The owner starts serving `core` (restored, rebuilt or fresh): events, counters, the newest
/// live view, and the behavior that handles pushes and pulls.
void start_serving(owner_actor* self, const std::shared_ptr<const owner_env>& ctx,
                   const std::string& reset) {
  auto& st = self->state;
  const int32_t frag = ctx->options.layout.fragment_id;
  note_version(*ctx, st.core->version());
  if (ctx->svc.log != nullptr) {
    nlohmann::json ev = {{"fragment", frag}, {"version", st.core->version()}};
    if (!reset.empty()) ev["reset"] = reset;
    ctx->svc.log->emit(st.restored ? "owner_restored" : "owner_start", ev);
    ctx->svc.log->update([&](run_counters& c) { c.versions[frag] = st.core->version(); });
  }
  if (st.rebuild) {
    auto view = std::move(st.rebuild->view);
    auto vm = std::move(st.rebuild->view_message);
    st.rebuild.reset();
    self->set_default_handler(unexpected_handler(ctx->svc.log, "owner " + std::to_string(frag)));
    self->become(serving(self, ctx));
    if (view) self->send(self, atoms::live_atom_v, vm.first, vm.second);
  }
}

/// Starts from the initial weights (no usable checkpoint, no learner's copy). A reset of a
/// fragment the run had trained is `degraded`.
void start_from_initial(owner_actor* self, const std::shared_ptr<const owner_env>& ctx,
                        const std::string& why, bool degraded) {
  auto& st = self->state;
  const int32_t frag = ctx->options.layout.fragment_id;
  auto now_fn = [self] { return clock_seconds(self->clock().now()); };
  const uint64_t floor = ctx->svc.history->highest_version();
  if (floor == 0) {
    st.core = std::make_unique<owner_core>(ctx->options, *st.backend, ctx->initial, now_fn);
  } else {
    owner_checkpoint c;
    c.fragment_id = frag;
    c.version = floor + 1;
    c.value = ctx->initial;
    c.momentum.assign(ctx->initial.size(), 0.0f);
    st.core = std::make_unique<owner_core>(ctx->options, *st.backend, c, now_fn);
    st.core->forget_restore();
  }
  st.restored = false;
  if (!why.empty() && ctx->svc.log != nullptr && floor == 0) {
    // No merge of this fragment was ever recorded (events.jsonl of the earlier part, or this
    // run): its initial weights are its current value, so nothing is lost and nothing degraded.
    ctx->svc.log->warn(
        "fragment owner " + std::to_string(frag) + ": " + why +
        "; no merge of this fragment is recorded, so its value restarts from the initial "
        "weights (version 0) and nothing is lost");
  } else if (!why.empty() && ctx->svc.log != nullptr) {
    ctx->svc.log->warn("fragment owner " + std::to_string(frag) + ": " + why +
                       "; its value restarts from the initial weights (version " +
                       std::to_string(st.core->version()) +
                       "), losing the merges made so far for this fragment");
    if (degraded) {
      ctx->svc.log->emit("degraded", {{"fragment", frag}, {"reason", why}});
      ctx->svc.log->update([&](run_counters& c) {
        c.degraded["fragment " + std::to_string(frag)] =
            why + "; restarted from the initial weights";
      });
    }
  }
  start_serving(self, ctx, why);
}

/// Takes a learner's copy: momentum reset, a new version above everything known, a checkpoint
/// written, a broadcast to every live learner, a `fragment_rebuilt` event.
void start_from_copy(owner_actor* self, const std::shared_ptr<const owner_env>& ctx,
                     const broadcast_msg& whole, std::vector<float> value, int32_t learner,
                     uint64_t incarnation) {
  auto& st = self->state;
  auto& rb = *st.rebuild;
  const int32_t frag = ctx->options.layout.fragment_id;
  uint64_t v = std::max(whole.version, ctx->svc.history->highest_version());
  if (rb.ckpt) v = std::max(v, rb.ckpt->version);
  owner_checkpoint c;
  c.fragment_id = frag;
  c.version = v + 1;
  c.value = std::move(value);
  c.momentum.assign(c.value.size(), 0.0f);
  if (rb.ckpt) {
    c.xi_step_s = rb.ckpt->xi_step_s;
    c.xi_quorum_s = rb.ckpt->xi_quorum_s;
    c.xi_sync_s = rb.ckpt->xi_sync_s;
  }
  c.merged = whole.merged;
  auto now_fn = [self] { return clock_seconds(self->clock().now()); };
  st.core = std::make_unique<owner_core>(ctx->options, *st.backend, c, now_fn);
  st.core->forget_restore();
  st.restored = false;
  const std::string why = rb.ckpt ? "learner " + std::to_string(learner) + " holds version " +
                                        std::to_string(whole.version) +
                                        ", newer than the checkpoint's " +
                                        std::to_string(rb.ckpt->version)
                                  : rb.unusable;
  std::string ck_error;
  const auto& o = ctx->options;
  if (o.checkpoint_every > 0 && !o.checkpoint_path.empty())
    if (auto w = save_checkpoint(o.checkpoint_path, st.core->make_checkpoint()); !w)
      ck_error = w.error().message;
  if (ctx->svc.log != nullptr) {
    ctx->svc.log->emit("fragment_rebuilt",
                       {{"fragment", frag},
                        {"learner", learner},
                        {"incarnation", incarnation},
                        {"learner_version", whole.version},
                        {"version", st.core->version()},
                        {"checkpoint_version",
                         rb.ckpt ? nlohmann::json(rb.ckpt->version) : nlohmann::json(nullptr)},
                        {"reason", why},
                        {"waited_s", clock_seconds(self->clock().now()) - rb.started_s}});
    if (!ck_error.empty()) {
      ctx->svc.log->emit(
          "failure", {{"fragment", frag}, {"version", st.core->version()}, {"error", ck_error}});
      ctx->svc.log->write_failed("fragment owner " + std::to_string(frag) +
                                 ": checkpoint of version " + std::to_string(st.core->version()) +
                                 ": " + ck_error);
    }
    if (rb.ckpt == std::nullopt)
      ctx->svc.log->warn("fragment owner " + std::to_string(frag) + ": " + why +
                         "; rebuilt from learner " + std::to_string(learner) +
                         "'s copy of version " + std::to_string(whole.version) + " as version " +
                         std::to_string(st.core->version()) + " (momentum reset)");
  }
  // Every live learner gets the rebuilt value (a learner holding it already applies nothing).
  const auto chunks = share_chunks(st.core->current_value());
  if (rb.view)
    for (const auto& l : rb.view->learners)
      flow_broadcast(self, st.flow, l.handle, chunks, st.core->version());
  start_serving(self, ctx, "");
}

void decide_rebuild(owner_actor* self, const std::shared_ptr<const owner_env>& ctx);

/// Asks `learner` for its value of the fragment (the newest copy found).
void fetch_from(owner_actor* self, const std::shared_ptr<const owner_env>& ctx, int32_t learner) {
  auto& rb = *self->state.rebuild;
  const auto& a = rb.answers.at(learner);
  rb.fetching = learner;
  rb.fetch_version = a.version;
  rb.query_id += 1;
  rb.assembler.clear();
  fragment_query q{ctx->options.layout.fragment_id, rb.query_id, true};
  self->send(a.handle, atoms::query_atom_v, encode(q, stamp_of(*ctx)));
  self->delayed_send(self, to_timespan(std::max(1.0, ctx->rebuild_wait_s)), atoms::rebuild_atom_v,
                     rb.query_id);
}

/// Done asking: fetch the newest copy that beats the checkpoint, or restore, or reset.
void decide_rebuild(owner_actor* self, const std::shared_ptr<const owner_env>& ctx) {
  auto& st = self->state;
  auto& rb = *st.rebuild;
  int32_t best = -1;
  uint64_t best_version = 0;
  for (const auto& [id, a] : rb.answers)
    if (a.have && a.handle && rb.failed.count(id) == 0 && (best < 0 || a.version > best_version)) {
      best = id;
      best_version = a.version;
    }
  if (best >= 0 && (!rb.ckpt || best_version > rb.ckpt->version)) {
    fetch_from(self, ctx, best);
    return;
  }
  auto now_fn = [self] { return clock_seconds(self->clock().now()); };
  if (rb.ckpt) {
    st.core = std::make_unique<owner_core>(ctx->options, *st.backend, *rb.ckpt, now_fn);
    st.restored = true;
    if (st.core->version() < ctx->svc.history->highest_version()) {
      // Versions were published after this checkpoint (checkpoint.every_versions > 1) and no
      // live learner holds one of them: number the next merge above them.
      st.core->skip_versions_to(ctx->svc.history->highest_version());
    }
    start_serving(self, ctx, "");
    return;
  }
  std::string lost;  // learners that had a copy that never arrived
  for (int32_t id : rb.failed) lost += (lost.empty() ? "" : ", ") + std::to_string(id);
  start_from_initial(
      self, ctx,
      rb.unusable + (rb.answers.empty() ? "; no learner answered within " +
                                              fmt::format("{:g}", ctx->rebuild_wait_s) + " s"
                     : lost.empty() ? "; no live learner holds a copy"
                                    : "; the copies of learner(s) " + lost +
                                          " did not arrive (gone or too slow)"),
      true);
}

/// Every learner the owner is waiting for has answered?
bool all_answered(owner_actor* self, const owner_env& ctx) {
  auto& rb = *self->state.rebuild;
  if (!rb.view) return false;
  if (ctx.resumed && ctx.svc.history->starts() == 1 && ctx.learners > 0)
    return rb.answers.size() >= ctx.learners;
  if (rb.view->learners.empty()) return false;
  for (const auto& l : rb.view->learners)
    if (rb.answers.count(l.learner_id) == 0) return false;
  return true;
}

owner_hdl::behavior_type rebuilding(owner_actor* self, std::shared_ptr<const owner_env> ctx) {
  const int32_t frag = ctx->options.layout.fragment_id;
  auto& rb = *self->state.rebuild;
  rb.started_s = clock_seconds(self->clock().now());
  rb.query_id = 1;
  // Pushes, pulls, grace and snapshot timers wait in the mailbox until it serves (the handlers
  // below skip them); so does a message outside the interface (then dropped by the serving
  // behavior's default handler).
  self->set_default_handler(caf::skip);
  self->delayed_send(self, to_timespan(ctx->rebuild_wait_s), atoms::rebuild_atom_v, rb.query_id);
  if (ctx->svc.log != nullptr)
    ctx->svc.log->emit("rebuild_start",
                       {{"fragment", frag},
                        {"checkpoint_version",
                         rb.ckpt ? nlohmann::json(rb.ckpt->version) : nlohmann::json(nullptr)},
                        {"reason", rb.ckpt ? "looking for a newer copy" : rb.unusable},
                        {"wait_s", ctx->rebuild_wait_s}});
  return {
      [=](atoms::live_atom, const std::vector<uint8_t>& bytes,
          const std::vector<learner_at_owner_hdl>& handles) {
        const auto read = read_view(*ctx, bytes, handles);
        if (!read) return;
        const live_view& view = *read;
        auto& r = *self->state.rebuild;
        r.view = view;
        r.view_message = {bytes, handles};
        if (r.fetching >= 0) {
          // The learner whose copy is on its way left: do not wait for it, ask the next newest.
          bool there = false;
          for (const auto& l : view.learners) there = there || l.learner_id == r.fetching;
          if (there) return;
          r.failed.insert(r.fetching);
          r.fetching = -1;
          r.query_id += 1;  // its timer is void
          decide_rebuild(self, ctx);
          return;
        }
        for (const auto& l : view.learners) {
          auto it = r.asked.find(l.learner_id);
          if (!l.handle || (it != r.asked.end() && it->second == l.incarnation)) continue;
          r.asked[l.learner_id] = l.incarnation;
          r.answers.erase(l.learner_id);
          self->send(l.handle, atoms::query_atom_v,
                     encode(fragment_query{frag, 1, false}, stamp_of(*ctx)));
        }
        if (all_answered(self, *ctx)) decide_rebuild(self, ctx);
      },
      [=](atoms::held_atom, const std::vector<uint8_t>& bytes) {
        auto& r = *self->state.rebuild;
        auto h = decode_fragment_held(bytes, {}, expect_of(*ctx));
        if (h && h->fragment_id != frag)
          h = wire_error{errc::malformed, "names fragment " + std::to_string(h->fragment_id)};
        if (!h) {
          log_refused_message(ctx->svc.log, "undecodable_held", h.error(), {{"fragment", frag}});
          return;
        }
        if (h->query_id != 1) return;  // the answer to a fetch: the copy's chunks follow
        auto sender = caf::actor_cast<learner_at_owner_hdl>(self->current_sender());
        r.answers[h->learner_id] = {sender, h->incarnation, h->have, h->version};
        if (r.fetching < 0 && all_answered(self, *ctx)) decide_rebuild(self, ctx);
      },
      [=](atoms::credit_atom, uint64_t seq) { flow_credit(self, self->state.flow, seq); },
      [=](atoms::copy_atom, const std::vector<uint8_t>& bytes, uint64_t seq) {
        grant_credit(self, seq);
        auto& r = *self->state.rebuild;
        if (r.fetching < 0) return;
        auto chunk = decode_broadcast_ref(bytes, {}, expect_of(*ctx));
        if (!chunk)
          log_refused_message(ctx->svc.log, "undecodable_copy", chunk.error(),
                              {{"fragment", frag}});
        if (!chunk || chunk->header.fragment_id != frag) return;
        auto whole = r.assembler.add(*chunk);
        if (!whole) {
          if (ctx->svc.log != nullptr)
            ctx->svc.log->emit("failure", {{"fragment", frag},
                                           {"what", "undecodable_copy"},
                                           {"learner", r.fetching},
                                           {"error", whole.error().message}});
          r.failed.insert(r.fetching);
          r.fetching = -1;
          decide_rebuild(self, ctx);
          return;
        }
        if (!whole->has_value()) return;
        const broadcast_msg& b = **whole;
        auto values = decode_payload(b.encoding, b.payload.data(), b.payload.size(),
                                     ctx->options.layout.numel);
        if (!values || b.version != r.fetch_version) {
          r.failed.insert(r.fetching);
          r.fetching = -1;
          decide_rebuild(self, ctx);
          return;
        }
        const int32_t learner = r.fetching;
        const uint64_t inc = r.answers[learner].incarnation;
        start_from_copy(self, ctx, b, std::move(*values), learner, inc);
      },
      [=](atoms::rebuild_atom, uint64_t id) {
        auto& r = *self->state.rebuild;
        if (id != r.query_id) return;
        if (r.fetching >= 0) {  // the copy did not arrive in time: next best
          if (ctx->svc.log != nullptr)
            ctx->svc.log->emit(
                "failure", {{"fragment", frag}, {"what", "copy_timeout"}, {"learner", r.fetching}});
          r.failed.insert(r.fetching);
          r.fetching = -1;
        }
        decide_rebuild(self, ctx);
      },
      [=](atoms::kill_atom) {
        if (ctx->svc.faults)
          if (auto killed = ctx->svc.faults->at_version(0)) self->quit(std::move(killed));
      },
      [=](atoms::owner_status_atom) -> caf::result<uint64_t, size_t, double> {
        return {uint64_t{0}, size_t{0}, 0.0};
      },
      // Handled once it serves (caf::skip leaves them in the mailbox, in order).
      [=](atoms::push_atom, const std::vector<uint8_t>&, uint64_t) -> caf::result<void> {
        return caf::skip;
      },
      [=](atoms::pull_atom, const std::vector<uint8_t>&) -> caf::result<void> { return caf::skip; },
      [=](atoms::grace_atom, uint64_t) -> caf::result<void> { return caf::skip; },
      [=](atoms::snapshot_atom, double) -> caf::result<void> { return caf::skip; },
      [=](atoms::write_verdict_atom, const std::string&, write_verdict) -> caf::result<void> {
        return caf::skip;
      },
      [=](atoms::checkpoint_atom) -> caf::result<bool> { return caf::skip; },
  };
}

}  // namespace

owner_hdl::behavior_type fragment_owner(owner_actor* self,
                                        std::shared_ptr<const owner_config> config,
                                        owner_services services) {
  const auto ctx =
      enter_role<owner_env>(self, *config, std::move(services),
                            "owner " + std::to_string(config->options.layout.fragment_id));
  // Learners' push and copy chunks may come on the tensor channel too.
  tensor_channel_hub::allow(self->system(), caf::strong_actor_ptr{self->ctrl()},
                            {channel_kind::push, channel_kind::copy});
  auto& st = self->state;
  kernels::backend_options bo;
  bo.threads = ctx->threads;
  st.backend = kernels::make_backend(ctx->backend, bo);
  st.flow = chunk_flow(static_cast<size_t>(std::max(1, ctx->window_chunks)));
  st.flow.link = ctx->svc.link;
  // The owner monitors only the peers it sends chunks to: a learner (or evaluator) that goes
  // away frees its link.
  self->set_down_handler([=](caf::down_msg& dm) { flow_down(self->state.flow, dm); });
  auto now_fn = [self] { return clock_seconds(self->clock().now()); };
  const auto& opts = ctx->options;
  const int32_t frag = opts.layout.fragment_id;
  const bool respawn = ctx->svc.history->start() > 0;
  std::string reset;  // why this owner cannot use its checkpoint (empty: it can, or none needed)
  std::optional<owner_checkpoint> ckpt;
  if (file_exists(opts.checkpoint_path)) {
    auto ck = load_checkpoint(opts.checkpoint_path);
    if (ck && (ck->fragment_id != frag || ck->value.size() != opts.layout.numel)) {
      reset = "its checkpoint '" + opts.checkpoint_path + "' holds fragment " +
              std::to_string(ck->fragment_id) + " of " + std::to_string(ck->value.size()) +
              " values, not fragment " + std::to_string(frag) + " of " +
              std::to_string(opts.layout.numel) + " (another run's?)";
      if (ctx->svc.log != nullptr)
        ctx->svc.log->emit(
            "failure", {{"fragment", frag}, {"what", "checkpoint_unreadable"}, {"error", reset}});
    } else if (ck && ((!ck->run_id.empty() && !opts.run_id.empty() && ck->run_id != opts.run_id) ||
                      (!ck->experiment_digest.empty() && !opts.experiment_digest.empty() &&
                       ck->experiment_digest != opts.experiment_digest))) {
      // Whose state (runtime/run_dir.hpp): never another run's or experiment's values.
      const bool other_run =
          !ck->run_id.empty() && !opts.run_id.empty() && ck->run_id != opts.run_id;
      reset = other_run ? "its checkpoint '" + opts.checkpoint_path + "' belongs to run " +
                              ck->run_id + ", not to this run " + opts.run_id
                        : "its checkpoint '" + opts.checkpoint_path + "' was written for another " +
                              "experiment (state digest " + ck->experiment_digest +
                              ", this run's " + opts.experiment_digest + ")";
      if (ctx->svc.log != nullptr)
        ctx->svc.log->emit(
            "failure",
            {{"fragment", frag}, {"what", "checkpoint_of_another_run"}, {"error", reset}});
    } else if (ck) {
      ckpt = std::move(*ck);
      log_merge_of_checkpoint(*ctx, *ckpt);
    } else {
      reset = "its checkpoint '" + opts.checkpoint_path + "' is unreadable (" + ck.error().message +
              ")";
      if (ctx->svc.log != nullptr)
        ctx->svc.log->emit(
            "failure",
            {{"fragment", frag}, {"what", "checkpoint_unreadable"}, {"error", ck.error().message}});
    }
  } else if (respawn || ctx->resumed) {
    reset = opts.checkpoint_every == 0 || opts.checkpoint_path.empty()
                ? "it was respawned and checkpoints are off (checkpoint.every_versions = 0)"
                : (ctx->resumed && !respawn ? "it was resumed without a checkpoint ('"
                                            : "it was respawned before its first checkpoint ('") +
                      opts.checkpoint_path + "' does not exist)";
  }
  if (ctx->monitor)
    self->send(ctx->monitor, atoms::subscribe_atom_v, encode(subscribe_msg{frag}, stamp_of(*ctx)));
  // The node's time-keyed kills (tests, chaos): a timer each, so they fire on time.
  if (ctx->svc.faults)
    for (double d : ctx->svc.faults->kill_delays())
      self->delayed_send(self, to_timespan(d), atoms::kill_atom_v);
  // A respawned or resumed owner asks the learners first (their copies may be newer than the
  // checkpoint, or the only trained copies left).
  // With checkpoint.every_versions = 1 a readable checkpoint is the newest version: it is
  // written before its broadcast leaves, so no learner can hold a newer one (no need to ask).
  const bool newest_on_disk = ckpt && opts.checkpoint_every == 1;
  if ((respawn || ctx->resumed) && ctx->monitor && ctx->rebuild_wait_s > 0 && !newest_on_disk) {
    st.rebuild = std::make_unique<owner_actor_state::rebuild_state>();
    st.rebuild->ckpt = std::move(ckpt);
    st.rebuild->unusable = reset;
    return rebuilding(self, ctx);
  }
  if (ckpt) {
    st.core = std::make_unique<owner_core>(opts, *st.backend, *ckpt, now_fn);
    st.restored = true;
    start_serving(self, ctx, "");
  } else if (!reset.empty()) {
    start_from_initial(self, ctx, reset, respawn || ctx->resumed);
  } else {
    st.core = std::make_unique<owner_core>(opts, *st.backend, ctx->initial, now_fn);
    start_serving(self, ctx, "");
  }
  return serving(self, ctx);
}

namespace {

owner_hdl::behavior_type serving(owner_actor* self, std::shared_ptr<const owner_env> ctx) {
  const int32_t frag = ctx->options.layout.fragment_id;
  return {
      [=](atoms::kill_atom) {
        if (ctx->svc.faults)
          if (auto killed = ctx->svc.faults->at_version(self->state.core->version()))
            self->quit(std::move(killed));
      },
      [=](atoms::credit_atom, uint64_t seq) { flow_credit(self, self->state.flow, seq); },
      [=](atoms::push_atom, const std::vector<uint8_t>& bytes, uint64_t seq) {
        grant_credit(self, seq);  // taken: the learner may send its next chunk
        auto& s = self->state;
        auto sender = caf::actor_cast<learner_at_owner_hdl>(self->current_sender());
        auto out = s.core->on_push(bytes, clock_seconds(self->clock().now()));
        using status = push_outcome::status;
        if (out.what == status::accepted) {
          if (sender) {
            push_ack ack;
            ack.learner_id = out.learner_id;
            ack.incarnation = out.incarnation;
            ack.fragment_id = frag;
            ack.transfer_id = out.transfer_id;
            ack.version = s.core->version();
            self->send(sender, atoms::ack_atom_v, encode(ack, stamp_of(*ctx)));
          }
        } else if (out.what == status::rejected && sender) {
          self->send(sender, atoms::reject_atom_v, encode(*out.reject, stamp_of(*ctx)));
          if (out.send_current)
            flow_broadcast(self, s.flow, sender, share_chunks(s.core->current_value()),
                           s.core->version());
        }
        if (ctx->svc.log != nullptr &&
            (out.what == status::accepted || out.what == status::rejected)) {
          nlohmann::json j = {{"fragment", frag},
                              {"learner", out.learner_id},
                              {"incarnation", out.incarnation},
                              {"transfer_id", out.transfer_id},
                              {"base_version", out.base_version},
                              {"version", s.core->version()},
                              {"bytes", out.payload_bytes},
                              {"accepted", out.what == status::accepted}};
          if (out.reject) j["reason"] = std::string(to_string(out.reject->reason));
          if (!out.detail.empty()) j["detail"] = out.detail;
          ctx->svc.log->emit("push", j);
          ctx->svc.log->update([&](run_counters& c) {
            c.pushes += 1;
            c.bytes_pushed += bytes.size();
            if (out.what == status::rejected) c.pushes_rejected += 1;
            if (out.reject && out.reject->reason == reject_reason::implausible)
              c.pushes_implausible += 1;
            if (out.chunk_refused) c.chunks_refused += 1;
          });
          if (out.chunk_refused)
            ctx->svc.log->emit("chunk_refused", {{"fragment", frag},
                                                 {"learner", out.learner_id},
                                                 {"transfer_id", out.transfer_id},
                                                 {"what", "push"},
                                                 {"detail", out.detail}});
        }
        if (ctx->svc.log != nullptr && !out.warning.empty()) ctx->svc.log->warn(out.warning);
        if (ctx->svc.log != nullptr && out.envelope_refused) {
          ctx->svc.log->update([](run_counters& c) { c.envelopes_refused += 1; });
          ctx->svc.log->emit("envelope_refused",
                             {{"fragment", frag}, {"what", "push"}, {"error", out.detail}});
        }
        if (ctx->svc.log != nullptr && out.what == status::ignored)
          ctx->svc.log->emit("push_ignored", {{"fragment", frag}, {"detail", out.detail}});
        apply_effects(self, *ctx, std::move(out.effects));
      },
      [=](atoms::pull_atom, const std::vector<uint8_t>& bytes) {
        auto req = decode_pull_request(bytes, {}, expect_of(*ctx));
        if (req && req->fragment_id != frag)
          req = wire_error{errc::malformed, "pull.fragmentId " + std::to_string(req->fragment_id) +
                                                " is not this owner's " + std::to_string(frag)};
        if (!req) {
          log_refused_message(ctx->svc.log, "undecodable_pull", req.error(), {{"fragment", frag}});
          return;
        }
        // A learner or the evaluator (learner −1): either takes broadcast chunks, all it gets.
        auto sender = caf::actor_cast<caf::actor>(self->current_sender());
        if (!sender) return;
        auto& s = self->state;
        flow_broadcast(self, s.flow, sender, share_chunks(s.core->current_value()),
                       s.core->version());
      },
      [=](atoms::live_atom, const std::vector<uint8_t>& bytes,
          const std::vector<learner_at_owner_hdl>& handles) {
        const auto read = read_view(*ctx, bytes, handles);
        if (!read) return;
        const live_view& view = *read;
        auto& s = self->state;
        s.learners.clear();
        std::vector<owner_member> members;
        for (const auto& l : view.learners) {
          members.push_back({l.learner_id, l.incarnation, l.step_time_ema_s});
          s.learners[l.learner_id] = l.handle;
        }
        apply_effects(self, *ctx,
                      s.core->on_membership(members, clock_seconds(self->clock().now())));
      },
      [=](atoms::grace_atom, uint64_t timer_id) {
        apply_effects(
            self, *ctx,
            self->state.core->on_grace_timer(timer_id, clock_seconds(self->clock().now())));
      },
      // Late answers of a rebuild that is over (a learner answered after the decision, or a
      // wait timer of the rebuild): nothing to do.
      [=](atoms::rebuild_atom, uint64_t) {},
      [=](atoms::held_atom, const std::vector<uint8_t>&) {},
      [=](atoms::copy_atom, const std::vector<uint8_t>&, uint64_t seq) { grant_credit(self, seq); },
      // Retry of a checkpoint that failed (cluster nodes): the current state, with backoff.
      [=](atoms::snapshot_atom, double backoff_s) {
        auto& s = self->state;
        s.checkpoint_retry_armed = false;
        const auto& o = ctx->options;
        if (o.checkpoint_path.empty() || ctx->svc.log == nullptr) return;
        if (auto w = save_checkpoint(o.checkpoint_path, s.core->make_checkpoint()); w) {
          ctx->svc.log->emit("checkpoint", {{"fragment", frag},
                                            {"version", s.core->version()},
                                            {"error", ""},
                                            {"retried", true}});
          ctx->svc.log->write_recovered(o.checkpoint_path);
        } else {
          report_checkpoint_failure(
              self, *ctx,
              "fragment owner " + std::to_string(frag) + ": checkpoint of version " +
                  std::to_string(s.core->version()) + ": " + w.error().message,
              backoff_s, std::min(10.0, backoff_s * 2));
        }
      },
      // The node's verdict on a failed checkpoint write this owner reported: write it again
      // with backoff (the run goes on, degraded), or not (the node ends the run).
      [=](atoms::write_verdict_atom, const std::string&, write_verdict verdict) {
        auto& s = self->state;
        if (!s.checkpoint_verdict_due) return;  // a retry is due already
        s.checkpoint_verdict_due = false;
        if (verdict != write_verdict::retry_degraded) {
          s.checkpoint_retry_armed = false;
          return;
        }
        self->delayed_send(self, to_timespan(s.checkpoint_retry_in_s), atoms::snapshot_atom_v,
                           s.checkpoint_retry_next_s);
      },
      // The run is over (budget spent, every learner done, or interrupted): the current state,
      // so that a resumed run continues from it and not from the last periodic checkpoint (a
      // run interrupted before its first one once restarted every fragment from the initial
      // weights). Off when checkpoints are off.
      [=](atoms::checkpoint_atom) -> bool {
        auto& s = self->state;
        const auto& o = ctx->options;
        if (o.checkpoint_every == 0 || o.checkpoint_path.empty()) return false;
        auto w = save_checkpoint(o.checkpoint_path, s.core->make_checkpoint());
        if (ctx->svc.log != nullptr && w)
          ctx->svc.log->emit(
              "checkpoint",
              {{"fragment", frag}, {"version", s.core->version()}, {"error", ""}, {"final", true}});
        else if (ctx->svc.log != nullptr)
          ctx->svc.log->emit("failure", {{"fragment", frag},
                                         {"what", "final_checkpoint"},
                                         {"version", s.core->version()},
                                         {"error", w.error().message}});
        return static_cast<bool>(w);
      },
      [=](atoms::owner_status_atom) -> caf::result<uint64_t, size_t, double> {
        auto& c = *self->state.core;
        return {c.version(), c.pending_count(), c.last_grace_s()};
      },
  };
}

}  // namespace

}  // namespace dd::actors
