// actors/roles/health_monitor.cpp — see health_monitor.hpp. The decisions are the membership
// core's (membership.hpp); each handler decodes, asks the core, and sends, logs and writes what
// the decision says.
#include "actors/roles/health_monitor.hpp"

#include <algorithm>
#include <chrono>
#include <set>

#include <fmt/format.h>
#include <caf/all.hpp>
#include <nlohmann/json.hpp>

#include "actors/link/tls.hpp"
#include "actors/link/wire_refusal.hpp"
#include "actors/roles/fragment_owner.hpp"
#include "actors/roles/monitor_log.hpp"
#include "actors/roles/role_entry.hpp"
#include "actors/roles/supervisor.hpp"
#include "actors/services/recorder.hpp"
#include "actors/services/run_log.hpp"
#include "messages/checkpoint_file.hpp"
#include "messages/codec.hpp"
#include "messages/control.hpp"

namespace dd::actors {

namespace {

/// What the monitor works with: its configuration and the services its node handed it.
using monitor_env = role_env<monitor_config, monitor_services>;
using ctx_ptr = std::shared_ptr<const monitor_env>;

double now_s(monitor_actor* self) { return clock_seconds(self->clock().now()); }

membership& core(monitor_actor* self) { return *self->state.core; }

/// What the monitor writes into every envelope: the run and the syncer's incarnation.
envelope_stamp stamp_of(const monitor_env& ctx) { return {ctx.run_id, ctx.syncer_incarnation}; }

/// What it accepts: its run. A learner's incarnation is checked against the core's record where
/// the message names one (heartbeat, leave); the codec checks that the body's incarnation is
/// the envelope's.
envelope_expect expect_of(const monitor_env& ctx) { return {ctx.run_id, 0}; }

/// The CAF node an actor lives on, as the core compares it ("" = unknown).
std::string origin_of(const caf::node_id& n) { return n ? caf::to_string(n) : std::string(); }

/// `r`; an undecodable message is logged as `what` (link/wire_refusal.hpp).
template <class R>
R logged(const monitor_env& ctx, const char* what, R r) {
  if (!r) log_refused_message(ctx.svc.log, what, r.error());
  return r;
}

/// How a request is refused for a message that did not decode.
template <class R>
caf::error refused(const R& r) {
  return caf::make_error(caf::sec::invalid_argument, r.error().message);
}

/// The handles of the learners of `view`, in its order.
std::vector<learner_at_owner_hdl> handles_of(monitor_actor* self, const live_view_msg& view) {
  std::vector<learner_at_owner_hdl> handles;
  for (const auto& l : view.learners) handles.push_back(self->state.handles[l.learner_id]);
  return handles;
}

/// Sends `view` (wire.capnp LiveView) with the learners' handles to every owner.
void publish(monitor_actor* self, const monitor_env& ctx, const live_view_msg& view) {
  const auto bytes = encode(view, stamp_of(ctx));
  const auto handles = handles_of(self, view);
  for (const auto& o : self->state.owners)
    if (o) self->send(o, atoms::live_atom_v, bytes, handles);
}

/// The owner directory as a wire message (wire.capnp OwnerDirectory) and the owners' handles.
std::pair<wire_bytes, std::vector<owner_hdl>> make_directory(const monitor_state& st,
                                                             const monitor_env& ctx) {
  owner_directory dir;
  std::vector<owner_hdl> handles;
  for (size_t p = 0; p < st.owners.size(); ++p)
    if (st.owners[p]) {
      dir.fragment_ids.push_back(static_cast<int32_t>(p));
      handles.push_back(st.owners[p]);
    }
  return {encode(dir, stamp_of(ctx)), std::move(handles)};
}

void send_owners(monitor_actor* self, const monitor_env& ctx,
                 const learner_at_monitor_hdl& learner) {
  auto [bytes, handles] = make_directory(self->state, ctx);
  self->send(learner, atoms::owners_atom_v, std::move(bytes), std::move(handles));
}

/// Hands the run's uptime figures (integrated up to now) to the run log.
void push_uptime(monitor_actor* self, const monitor_env& ctx) {
  const auto [uptime_s, observed_s] = core(self).uptime(now_s(self));
  if (ctx.svc.log != nullptr) ctx.svc.log->set_uptime(uptime_s, observed_s);
}

/// A learner declared dead: logged, its progress-line entry down, the view without it published.
void on_dead(monitor_actor* self, const monitor_env& ctx, const learner_down& d) {
  push_uptime(self, ctx);
  monitor_log::dead(ctx.svc.log, d);
  publish(self, ctx, d.view);
}

/// Remote learners: tells the job once every learner has left, or none is live after a stop.
void check_done(monitor_actor* self, const monitor_env& ctx) {
  if (ctx.job && core(self).done_due())
    self->send(ctx.job, atoms::children_done_atom_v, child_kind::learner);
}

/// Writes monitor.json now. A failure is reported to the node (write_trouble_atom), whose
/// write-failure policy answers with a verdict (write_verdict_atom, handled by the behavior).
void save_record(monitor_actor* self, const monitor_env& ctx) {
  if (ctx.record_path.empty()) return;
  const double now = now_s(self);
  const std::string text = core(self).record(now).to_json().dump() + "\n";
  auto st = write_file_atomic(ctx.record_path, reinterpret_cast<const uint8_t*>(text.data()),
                              text.size());
  const bool recovered = core(self).record_written(static_cast<bool>(st), now);
  monitor_log::record_written(ctx.svc.log, st, recovered ? ctx.record_path : std::string());
  if (!st && ctx.svc.node)
    self->send(ctx.svc.node, atoms::write_trouble_atom_v, ctx.record_path,
               "health monitor: cannot write its record: " + st.error().message);
}

node_join_reply refusal(const monitor_env& ctx, node_refusal why, std::string reason) {
  return {false, why, std::move(reason), ctx.run_id, {}, {}, {}, 0, {}, 0, {}};
}

/// A fresh challenge, remembered by the monitor (join_auth.hpp); empty without a token.
std::vector<uint8_t> issue_challenge(monitor_actor* self, const monitor_env& ctx) {
  if (ctx.join_token.empty()) return {};
  auto nonce = random_nonce();
  self->state.challenges.issue(nonce, now_s(self));
  return nonce;
}

/// A proof refused: an auth_refused event, the counter (summary.json auth_refused) and a
/// warning line; never the token.
void log_auth_refused(const monitor_env& ctx, const std::string& what, const std::string& who,
                      const std::string& reason) {
  if (ctx.svc.log == nullptr) return;
  ctx.svc.log->emit("auth_refused", {{"what", what}, {"who", who}, {"reason", reason}});
  ctx.svc.log->update([](run_counters& c) { c.auth_refused += 1; });
  ctx.svc.log->warn(fmt::format("refused {} from {}: {}", what, who, reason));
}
void log_auth_refused(const monitor_env& ctx, const std::string& what, const std::string& who,
                      auth_verdict v) {
  log_auth_refused(ctx, what, who, "join token: " + std::string(to_string(v)));
}

/// The node handshake (health_monitor.hpp). A node's first start does not know the run yet: its
/// envelope (like its body) may name none.
node_join_reply answer_node_join(monitor_actor* self, const monitor_env& ctx,
                                 const wire_bytes& bytes) {
  auto header = peek_envelope(bytes);
  envelope_expect expect = expect_of(ctx);
  if (header && header->run_id.empty()) expect.run_id.clear();
  auto req = decode_node_join(bytes, {}, expect);
  if (!req && req.code() == errc::other_run)  // worded for both sides (both log it)
    return refusal(ctx, node_refusal::other_run,
                   "the node belongs to run '" + (header ? header->run_id : std::string("?")) +
                       "', this syncer runs run '" + ctx.run_id + "'");
  if (!req)
    return refusal(ctx, node_refusal::bad_request, "undecodable node_join: " + req.error().message);
  const auto sender = self->current_sender();
  const std::string origin = origin_of(sender ? sender->node() : caf::node_id{});
  if (!ctx.join_token.empty()) {
    // A first request carries no challenge: it is answered with one to prove the token over
    // (a node without a token sends it back unproven, so that its refusal is logged here). A proof
    // binds the run, the node's name and CAF node, the ids it asks for and the challenge, which is
    // good once: a recorded handshake replayed is refused.
    if (req->proof.empty() && req->challenge.empty()) {
      auto rep = refusal(ctx, node_refusal::auth_challenge,
                         "this syncer asks for the join token: prove it over the challenge");
      rep.challenge = issue_challenge(self, ctx);
      return rep;
    }
    const auto v =
        judge(self->state.challenges, ctx.join_token, req->challenge, req->proof, node_join_purpose,
              node_join_context(ctx.run_id, req->node_name, origin, req->learner_ids,
                                req->learner_count, req->challenge),
              now_s(self));
    if (v != auth_verdict::accepted) {
      log_auth_refused(ctx, "node_join", fmt::format("node '{}' ({})", req->node_name, origin), v);
      return refusal(ctx, node_refusal::unauthorized,
                     fmt::format("join token: {} (the node needs the run's token: "
                                 "--join-token-file FILE or DD_JOIN_TOKEN)",
                                 to_string(v)));
    }
  }
  std::set<int32_t> granted;
  if (ctx.svc.identities != nullptr) {
    // Mutual TLS: the ids this node may take are those its certificate names.
    const auto names = ctx.svc.identities->names_of(origin);
    if (!names) {
      log_auth_refused(ctx, "node_join", fmt::format("node '{}' ({})", req->node_name, origin),
                       "no TLS certificate is bound to this CAF node");
      return refusal(ctx, node_refusal::unauthorized,
                     "this node's connection carries no verified certificate");
    }
    granted = learner_ids_of(*names);
  }
  auto d = core(self).node_join(*req, origin, now_s(self),
                                ctx.svc.identities != nullptr ? &granted : nullptr);
  if (d.refusal == node_refusal::unauthorized)
    log_auth_refused(ctx, "node_join", fmt::format("node '{}' ({})", req->node_name, origin),
                     d.reason);
  if (!d.accepted) return refusal(ctx, d.refusal, std::move(d.reason));
  node_join_reply rep = refusal(ctx, node_refusal::none, {});
  rep.accepted = true;
  rep.experiment_json = ctx.experiment_json;
  rep.experiment_hash = ctx.experiment_hash;
  rep.learner_ids = std::move(d.ids);
  rep.data_bytes = ctx.data_bytes;
  rep.data_hash = ctx.data_hash;
  rep.steps_per_learner = ctx.steps_per_learner;
  return rep;
}

/// A resumed syncer: the record's learners, tokens and training seconds. A resumed run whose
/// learners had all finished (stopped by a signal after the last step) is done at once: no
/// learner will join it (each is refused as finished).
void restore(monitor_actor* self, const monitor_env& ctx) {
  core(self).restore(monitor_record::from_json(ctx.restored_record), now_s(self));
  monitor_log::restored(ctx.svc.log, core(self));
  check_done(self, ctx);
}

/// A learner actor went down: a normal exit is a leave, anything else a death.
void on_down(monitor_actor* self, const monitor_env& ctx, const caf::down_msg& dm) {
  auto& handles = self->state.handles;
  for (auto it = handles.begin(); it != handles.end(); ++it) {
    if (!it->second || it->second.address() != dm.source) continue;
    const caf::error reason = read_down_reason(dm.reason).reason;  // without a respawn downtime
    const bool normal = !reason || reason == caf::exit_reason::normal;
    auto d = core(self).down(it->first, normal, self->system().render(reason), now_s(self));
    if (d.what == down_decision::verdict::left) {
      push_uptime(self, ctx);
      publish(self, ctx, core(self).view());
    } else if (d.dead) {
      on_dead(self, ctx, *d.dead);
    }
    handles.erase(it);
    check_done(self, ctx);
    return;
  }
}

/// The lease tick: expired leases, stragglers, the record, the recorder's retries.
void on_tick(monitor_actor* self, const monitor_env& ctx) {
  auto d = core(self).tick(now_s(self));
  monitor_log::stragglers(ctx.svc.log, d.stragglers);
  for (const auto& dead : d.expired) {
    auto handle = self->state.handles[dead.id];
    on_dead(self, ctx, dead);
    if (handle) self->send_exit(handle, caf::exit_reason::kill);
  }
  publish(self, ctx, core(self).view());
  push_uptime(self, ctx);  // a window that ran out lowers it without a message
  if (d.save_record) save_record(self, ctx);
  if (ctx.svc.recorder) ctx.svc.recorder->retry();
  self->delayed_send(self, std::chrono::milliseconds(static_cast<int64_t>(ctx.tick_s * 1000)),
                     atoms::lease_atom_v);
}

caf::result<std::vector<uint8_t>> on_join(monitor_actor* self, const monitor_env& ctx,
                                          const std::vector<uint8_t>& bytes,
                                          const learner_at_syncer_hdl& learner) {
  auto req =
      logged(ctx, "undecodable_join_request", decode_join_request(bytes, {}, expect_of(ctx)));
  if (!req) return refused(req);
  auto d = core(self).join(*req, origin_of(learner ? learner.node() : caf::node_id{}), now_s(self));
  if (d.what == join_decision::verdict::not_reserved)
    monitor_log::join_refused(ctx.svc.log, d.id, d.reason);
  if (!d.accepted()) return caf::make_error(caf::sec::invalid_argument, d.reason);
  if (d.replaced) on_dead(self, ctx, *d.replaced);
  self->state.handles[d.id] = learner;
  self->monitor(learner);
  join_reply rep;
  rep.learner_id = d.id;
  rep.incarnation = d.incarnation;
  rep.experiment_config_json = ctx.experiment_json;
  rep.shard_index = static_cast<uint32_t>(d.id);
  rep.shard_count = static_cast<uint32_t>(ctx.learners);
  rep.resume_step = d.resume_step;
  rep.data_cursor = d.data_cursor;
  rep.tokens_before = d.tokens_before;
  rep.compute_before_s = d.compute_before_s;
  // The join is on disk before it is answered (and before its event): a syncer killed after
  // this reply restarts from a record that holds it.
  save_record(self, ctx);
  monitor_log::joined(ctx.svc.log, ctx.remote_learners, d, *core(self).find(d.id));
  // The view goes to the owners before the reply reaches the learner, so a push can never
  // arrive at an owner ahead of the incarnation it carries.
  publish(self, ctx, core(self).view());
  send_owners(self, ctx, learner);
  return encode(rep, stamp_of(ctx));
}

void on_heartbeat(monitor_actor* self, const monitor_env& ctx, const std::vector<uint8_t>& bytes) {
  auto hb = logged(ctx, "undecodable_heartbeat", decode_heartbeat(bytes, {}, expect_of(ctx)));
  if (!hb) return;
  auto d = core(self).heartbeat(*hb, now_s(self));
  if (!d.accepted()) return;
  const learner_record& r = *core(self).find(hb->learner_id);
  push_uptime(self, ctx);
  if (ctx.svc.recorder)
    ctx.svc.recorder->loss_row(hb->step_end_unix_s, hb->learner_id, r.incarnation, hb->step,
                               r.tokens(), hb->loss, hb->lr);
  monitor_log::heartbeat(ctx.svc.log, ctx.remote_learners, *hb, r);
  if (d.diverged && ctx.svc.log != nullptr) {
    const auto& v = *d.diverged;
    ctx.svc.log->update([](run_counters& c) { c.divergences += 1; });
    ctx.svc.log->emit("divergence", {{"learner", v.learner},
                                     {"incarnation", v.incarnation},
                                     {"fragment", v.fragment},
                                     {"version", v.version},
                                     {"owner_digest", fmt::format("{:016x}", v.owner_digest)},
                                     {"held_digest", fmt::format("{:016x}", v.held_digest)}});
  }
  // Global progress: the push clock (sync.push_clock = global) and the lr schedule's clock
  // (inner.schedule_clock = global) follow it.
  if (auto sender = caf::actor_cast<learner_at_monitor_hdl>(self->current_sender())) {
    progress_msg pm;
    pm.total_tokens = d.total_tokens;
    pm.step = hb->step;
    pm.mean_step = d.mean_step;
    pm.live_learners = static_cast<uint32_t>(d.live);
    self->send(sender, atoms::progress_atom_v, encode(pm, stamp_of(ctx)));
  }
  if (d.budget_spent) {
    if (ctx.svc.log != nullptr) ctx.svc.log->emit("budget_spent", {{"tokens", d.total_tokens}});
    if (ctx.job) self->send(ctx.job, atoms::budget_spent_atom_v);
  }
}

caf::result<bool> on_leave(monitor_actor* self, const monitor_env& ctx,
                           const std::vector<uint8_t>& bytes) {
  auto lm = logged(ctx, "undecodable_leave", decode_leave(bytes, {}, expect_of(ctx)));
  if (!lm) return refused(lm);
  auto d = core(self).leave(lm->learner_id, lm->incarnation, lm->interrupted, now_s(self));
  if (d.what == leave_decision::verdict::left) {
    push_uptime(self, ctx);
    monitor_log::left(ctx.svc.log, ctx.remote_learners, lm->learner_id, lm->incarnation, d);
    publish(self, ctx, core(self).view());
    save_record(self, ctx);
  }
  if (d.what != leave_decision::verdict::not_current) check_done(self, ctx);
  return true;
}

std::vector<uint8_t> on_drain(monitor_actor* self, const monitor_env& ctx, const drain_msg& req) {
  drain_reply rep;
  if (ctx.svc.identities != nullptr) {
    // Mutual TLS: draining is the operator's; a node's certificate (learner-N, syncer) may not,
    // not even for its own learner (it leaves by stopping).
    const auto sender = self->current_sender();
    const std::string origin = origin_of(sender ? sender->node() : caf::node_id{});
    const auto names = ctx.svc.identities->names_of(origin);
    const std::string why = names ? operator_refusal(*names)
                                  : std::string("this connection carries no verified certificate");
    if (!why.empty()) {
      log_auth_refused(ctx, fmt::format("drain learner:{}", req.learner_id),
                       fmt::format("node {} (certificate names {})", origin,
                                   names ? join_names(*names) : std::string("nothing")),
                       why);
      rep.detail = "refused: " + why;
      return encode(rep, stamp_of(ctx));
    }
  }
  if (const auto v =
          judge(self->state.challenges, ctx.join_token, req.challenge, req.proof, drain_purpose,
                drain_context(ctx.run_id, req.learner_id, req.challenge), now_s(self));
      v != auth_verdict::accepted) {
    const auto sender = self->current_sender();
    log_auth_refused(ctx, fmt::format("drain learner:{}", req.learner_id),
                     "operator (" + origin_of(sender ? sender->node() : caf::node_id{}) + ")", v);
    rep.detail = fmt::format(
        "join token: {} (draining needs the run's token: --join-token-file FILE or "
        "DD_JOIN_TOKEN)",
        to_string(v));
    return encode(rep, stamp_of(ctx));
  }
  auto d = core(self).drain(req.learner_id, now_s(self));
  rep.detail = d.detail;
  auto handle = self->state.handles[req.learner_id];
  if (d.accepted && !handle)  // live in the record, but its actor is gone
    rep.detail = fmt::format("learner:{} is not connected (not rejoined since this syncer started)",
                             req.learner_id);
  if (d.accepted && handle) {
    self->send(handle, atoms::stop_atom_v,
               encode(stop_msg{"drained by the operator"}, stamp_of(ctx)));
    if (ctx.svc.log != nullptr) ctx.svc.log->emit("drain", {{"learner", req.learner_id}});
    rep.accepted = true;
  }
  return encode(rep, stamp_of(ctx));
}

/// The status reply: the membership core's status and each fragment's version as its owner
/// answers it now (owner_status_atom; an owner that does not answer within 2 s, dead or busy,
/// is left out of `fragment_versions`).
caf::result<std::vector<uint8_t>> status_of(monitor_actor* self, const ctx_ptr& ctx) {
  struct gathering {
    nlohmann::json out;
    nlohmann::json versions = nlohmann::json::object();
    size_t left = 0;
  };
  auto g = std::make_shared<gathering>();
  g->out = core(self).status(now_s(self));
  auto rp = self->make_response_promise<std::vector<uint8_t>>();
  auto answer = [self, ctx, g, rp]() mutable {
    g->out["fragment_versions"] = g->versions;
    rp.deliver(
        encode(status_reply{g->out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                            issue_challenge(self, *ctx)},
               stamp_of(*ctx)));
  };
  const auto& owners = self->state.owners;
  for (const auto& o : owners)
    if (o) ++g->left;
  if (g->left == 0) {
    answer();
    return rp;
  }
  for (size_t p = 0; p < owners.size(); ++p) {
    if (!owners[p]) continue;
    auto one = [g, answer]() mutable {
      if (--g->left == 0) answer();
    };
    self->request(owners[p], std::chrono::seconds(2), atoms::owner_status_atom_v)
        .then(
            [g, p, one](uint64_t version, size_t, double) mutable {
              g->versions[std::to_string(p)] = version;
              one();
            },
            [one](caf::error&) mutable { one(); });
  }
  return rp;
}

/// An owner (the sender) holds this fragment now: it gets the view, the learners the directory.
void on_subscribe(monitor_actor* self, const monitor_env& ctx, const subscribe_msg& sub) {
  auto owner = caf::actor_cast<owner_hdl>(self->current_sender());
  auto& st = self->state;
  if (!owner || static_cast<size_t>(sub.fragment_id) >= st.owners.size()) return;
  st.owners[static_cast<size_t>(sub.fragment_id)] = owner;
  const auto view = core(self).view();
  self->send(owner, atoms::live_atom_v, encode(view, stamp_of(ctx)), handles_of(self, view));
  for (const auto& l : view.learners)
    if (auto h = st.handles[l.learner_id]) send_owners(self, ctx, h);
}

}  // namespace

monitor_hdl::behavior_type health_monitor(monitor_actor* self,
                                          std::shared_ptr<const monitor_config> config,
                                          monitor_services services) {
  const auto ctx = enter_role<monitor_env>(self, *config, std::move(services), "health monitor",
                                           role_crashes::caf_default);
  self->state.owners.resize(static_cast<size_t>(std::max(ctx->fragments, 0)));
  self->state.core.emplace(static_cast<const membership_options&>(*ctx), now_s(self));
  if (!ctx->restored_record.is_null()) restore(self, *ctx);
  self->set_down_handler([=](const caf::down_msg& dm) { on_down(self, *ctx, dm); });
  self->delayed_send(self, std::chrono::milliseconds(static_cast<int64_t>(ctx->tick_s * 1000)),
                     atoms::lease_atom_v);
  return {
      [=](atoms::join_atom, const std::vector<uint8_t>& bytes,
          const learner_at_syncer_hdl& learner) { return on_join(self, *ctx, bytes, learner); },
      [=](atoms::heartbeat_atom, const std::vector<uint8_t>& bytes) {
        on_heartbeat(self, *ctx, bytes);
      },
      [=](atoms::node_join_atom, const std::vector<uint8_t>& bytes) -> std::vector<uint8_t> {
        auto rep = answer_node_join(self, *ctx, bytes);
        monitor_log::node_join(ctx->svc.log, bytes, rep);
        return encode(rep, stamp_of(*ctx));
      },
      // From the job (the job, in this process): stop every live learner.
      [=](atoms::stop_atom) {
        const auto stop = encode(stop_msg{"the run is stopping"}, stamp_of(*ctx));
        const auto live = core(self).stop(now_s(self));
        push_uptime(self, *ctx);
        for (auto id : live)
          if (auto h = self->state.handles[id]) self->send(h, atoms::stop_atom_v, stop);
        check_done(self, *ctx);
      },
      // A learner node's event lines, for its forwarded file (the codec checks the node name's
      // alphabet, it names a file, and the 1 MiB cap).
      [=](atoms::events_atom, const std::vector<uint8_t>& bytes) -> bool {
        auto ev =
            logged(*ctx, "undecodable_node_events", decode_node_events(bytes, {}, expect_of(*ctx)));
        return ev && ctx->svc.recorder &&
               ctx->svc.recorder->forward(ev->node, ev->lines, ev->stream, ev->offset);
      },
      // dd-node drain: the operator names the run (it read it from a status reply first).
      [=](atoms::drain_atom,
          const std::vector<uint8_t>& bytes) -> caf::result<std::vector<uint8_t>> {
        auto req = logged(*ctx, "undecodable_drain", decode_drain(bytes, {}, expect_of(*ctx)));
        if (!req) return refused(req);
        return on_drain(self, *ctx, *req);
      },
      // dd-node status: read-only, so an operator that does not know the run yet may ask
      // without naming one (an empty run id); the reply's envelope tells it. A request that
      // names another run is refused.
      [=](atoms::status_atom,
          const std::vector<uint8_t>& bytes) -> caf::result<std::vector<uint8_t>> {
        auto header = peek_envelope(bytes);
        envelope_expect expect = expect_of(*ctx);
        if (header && header->run_id.empty()) expect.run_id.clear();
        auto req =
            logged(*ctx, "undecodable_status_request", decode_status_request(bytes, {}, expect));
        if (!req) return refused(req);
        return status_of(self, ctx);
      },
      // Answers true once the leave is recorded, or when there is nothing to record (a repeated
      // leave, or one of an older incarnation): the learner may exit. An undecodable one is an
      // error (the learner retries, then keeps it for the next syncer).
      [=](atoms::leave_atom, const std::vector<uint8_t>& bytes) -> caf::result<bool> {
        return on_leave(self, *ctx, bytes);
      },
      [=](atoms::subscribe_atom, const std::vector<uint8_t>& bytes) {
        auto sub =
            logged(*ctx, "undecodable_subscribe", decode_subscribe(bytes, {}, expect_of(*ctx)));
        if (sub) on_subscribe(self, *ctx, *sub);
      },
      // The run's progress for the evaluator's every_steps clock and its eval events: the
      // global step (Σ step / M) and the tokens of every learner and incarnation.
      [=](caf::get_atom, atoms::progress_atom) -> caf::result<double, uint64_t> {
        return {core(self).global_step(), core(self).total_tokens()};
      },
      // The owner directory for the evaluator (bytes and the owners' handles, in order).
      [=](caf::get_atom,
          atoms::owners_atom) -> caf::result<std::vector<uint8_t>, std::vector<owner_hdl>> {
        auto [bytes, handles] = make_directory(self->state, *ctx);
        return {std::move(bytes), std::move(handles)};
      },
      [=](atoms::lease_atom) { on_tick(self, *ctx); },
      // The node's verdict on a failed write of the record: retried with backoff, or not (the
      // node ends the run).
      [=](atoms::write_verdict_atom, const std::string&, write_verdict verdict) {
        core(self).record_verdict(verdict);
      },
  };
}

}  // namespace dd::actors
