// actors/roles/learner.cpp — see learner.hpp. The decisions are learner_core's; the node's fault
// hook at the step is learner_step_faults' (actors/services/step_faults.hpp) and the pushes meet
// their faults on the link (flow_push). This file only does I/O: it turns messages and timers
// into core events, runs the inner step (trainer::step) and carries out the core's actions in
// order.
#include "actors/roles/learner.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <thread>
#include <type_traits>
#include <utility>
#include <variant>

#include <caf/all.hpp>

#include "actors/link/atoms.hpp"
#include "actors/roles/fragment_owner.hpp"
#include "actors/roles/learner_record.hpp"
#include "actors/roles/role_entry.hpp"
#include "actors/roles/supervisor.hpp"
#include "actors/services/compute_gate.hpp"
#include "actors/services/run_log.hpp"
#include "messages/control.hpp"
#include "util/duration.hpp"
#include "util/thread_priority.hpp"

namespace dd::actors {

namespace {

namespace act = learner_do;
/// What an incarnation works with: its configuration and the services its node handed it.
using learner_env = role_env<learner_config, learner_services>;
using ctx_ptr = std::shared_ptr<const learner_env>;

double actor_now(learner_actor* self) { return clock_seconds(self->clock().now()); }

caf::timespan seconds_span(double s) { return util::to_timespan(s); }

void arm_timer(learner_actor* self, const act::arm& x) {
  const auto delay = seconds_span(x.delay_s);
  if (x.which == act::timer::barrier)
    self->delayed_send(self, delay, atoms::barrier_timeout_atom_v);
  if (x.which == act::timer::drain) self->delayed_send(self, delay, atoms::drain_timeout_atom_v);
  if (x.which == act::timer::leave_retry)
    self->delayed_send(self, delay, atoms::leave_retry_atom_v);
}

void request_leave(learner_actor* self, const ctx_ptr& ctx, wire_bytes bytes, uint64_t attempt);
void request_rejoin(learner_actor* self, const ctx_ptr& ctx, const act::rejoin& r);

/// Carries out the core's actions, in order: records into the services (learner_record.hpp),
/// messages, timers, the exit.
// The node's metrics: the version each fragment's held global value has (learner_stats::applied).
void note_applied(event_sink* log, const learner_core& core) {
  if (log == nullptr) return;
  for (size_t p = 0; p < core.fragments(); ++p)
    if (core.fragment(p).have)
      log->note_applied(core.id(), static_cast<int32_t>(p), core.fragment(p).base_version);
}

void perform(learner_actor* self, const ctx_ptr& ctx, learner_actions actions) {
  auto& st = self->state;
  const auto owner = [&](int32_t p) {
    const auto q = static_cast<size_t>(p);
    return q < st.owners.size() ? st.owners[q] : owner_hdl{};
  };
  for (auto& a : actions) {
    if (record(a, st.core->id(), ctx->svc.log, ctx->svc.gate)) continue;
    std::visit(
        [&](auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, act::push_chunks>) {
            // Under credit, through the link's fault filter (actors/link/chunk_flow.hpp).
            flow_push(self, st.flow, owner(x.fragment),
                      outgoing_push{st.core->id(), st.core->incarnation(), x.fragment,
                                    x.transfer_id, std::move(x.chunks)});
          } else if constexpr (std::is_same_v<T, act::pull>) {
            if (auto o = owner(x.fragment)) self->send(o, atoms::pull_atom_v, std::move(x.bytes));
          } else if constexpr (std::is_same_v<T, act::heartbeat>) {
            self->send(st.monitor, atoms::heartbeat_atom_v, std::move(x.bytes));
            st.core->on_heartbeat_sent(x.step, actor_now(self));
          } else if constexpr (std::is_same_v<T, act::leave>) {
            if (x.attempt == 0)
              self->anon_send(st.monitor, atoms::leave_atom_v, std::move(x.bytes));
            else
              request_leave(self, ctx, std::move(x.bytes), x.attempt);
          } else if constexpr (std::is_same_v<T, act::rejoin>) {
            request_rejoin(self, ctx, x);
          } else if constexpr (std::is_same_v<T, act::arm>) {
            arm_timer(self, x);
          } else if constexpr (std::is_same_v<T, act::step>) {
            if (x.delay_s > 0)
              self->delayed_send(self, seconds_span(x.delay_s), atoms::step_atom_v);
            else
              self->send(self, atoms::step_atom_v);
          } else if constexpr (std::is_same_v<T, act::sleep>) {
            std::this_thread::sleep_for(std::chrono::duration<double>(x.seconds));
          } else if constexpr (std::is_same_v<T, act::quit>) {
            self->quit(caf::exit_reason::normal);
          }
        },
        a);
  }
}

// ---- the step -----------------------------------------------------------------------------------

void on_step(learner_actor* self, const ctx_ptr& ctx) {
  auto& st = self->state;
  auto plan = st.core->on_step_timer(actor_now(self));
  perform(self, ctx, std::move(plan.actions));
  if (!plan.train) return;
  // The step's time counts from asking for a core: with M learners on fewer cores that wait is
  // part of an emulated device's step time (compute_gate.hpp).
  const auto t0 = std::chrono::steady_clock::now();
  step_result r;
  {
    gate_pass pass(ctx->svc.gate, st.core->id(),
                   std::max(1.0, ctx->speed) * st.faults->slow_factor());
    r = st.tr->step(plan.lr);
  }
  if (st.faults->take_poison()) {  // the nan fault's step: discarded
    r.applied = false;
    r.loss = std::numeric_limits<double>::quiet_NaN();
  }
  const double measured =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!r.applied) {
    perform(self, ctx, st.core->on_step_discarded(r.loss));
    return;
  }
  const auto step = static_cast<uint64_t>(st.tr->steps_done());
  if (ctx->svc.log != nullptr)
    record_model_stats(st.tr->model(), step, ctx->sync_interval, *st.core, *ctx->svc.log);
  const step_faults sf = st.faults->at_step(st.core->id(), st.core->incarnation(), step);
  // Emulated slower hardware: the step takes factor × its time.
  double factor = std::max(1.0, ctx->speed) * st.faults->slow_factor();
  if (ctx->jitter > 0 && st.jitter_rng) factor *= 1.0 + ctx->jitter * st.jitter_rng->uniform();
  st.faults->before_heartbeat(sf, *st.core, step);
  perform(self, ctx,
          st.core->on_step_done(
              {r.loss, r.lr, measured, factor, st.tr->cursor().to_bytes(),
               std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
                   .count()}));
  if (auto killed = st.faults->after_heartbeat(sf, st.tr->model(), ctx->plan, st.core->id(),
                                               st.core->incarnation(), step, ctx->svc.gate)) {
    self->quit(std::move(killed));
    return;
  }
  for (auto& d : st.core->push_due(actor_now(self)))
    if (d.push) perform(self, ctx, st.core->enqueue(d.fragment, std::move(*d.push)));
  perform(self, ctx, st.core->after_step());
}

// ---- join, rejoin, leave, owners
// ------------------------------------------------------------------

/// The first join of an incarnation (to `monitor`): on its reply the learner starts, resuming the
/// step and data cursor the monitor recorded. A newer attempt (the node reconnected to another
/// monitor before this one was answered) supersedes it.
void initial_join(learner_actor* self, const ctx_ptr& ctx, const monitor_hdl& monitor) {
  const uint64_t attempt = ++self->state.join_attempt;
  self->request(monitor, std::chrono::seconds(60), atoms::join_atom_v,
                self->state.core->join_request_bytes(), learner_at_syncer_hdl{self})
      .then(
          [=](const std::vector<uint8_t>& bytes) {
            auto& s = self->state;
            if (s.core->joined() || s.join_attempt != attempt) return;  // a newer join's
            learner_actions out;
            auto rep = s.core->on_join_reply(bytes, out);
            perform(self, ctx, std::move(out));
            if (!rep) {
              self->quit(caf::make_error(caf::sec::invalid_argument, rep.error().message));
              return;
            }
            s.tr->set_steps_done(static_cast<int64_t>(rep->resume_step));
            if (!rep->data_cursor.empty()) {
              try {
                s.tr->restore_cursor(data_cursor::from_bytes(rep->data_cursor));
              } catch (const std::exception& e) {
                if (ctx->svc.log != nullptr)
                  ctx->svc.log->emit(
                      "failure",
                      {{"learner", s.core->id()}, {"what", "cursor"}, {"error", e.what()}});
              }
            }
            s.tr->reset_optimizer();
            perform(self, ctx, s.core->on_resumed());
          },
          [=](caf::error& err) {
            // A join superseded by a newer one (sent to a monitor that went away) is moot.
            if (self->state.core->joined() || self->state.join_attempt != attempt) return;
            self->quit(std::move(err));
          });
}

/// A finished learner of a learner node (leave_protocol::acked) asks its monitor to record its
/// leave; the core decides on the answer or the failure.
void request_leave(learner_actor* self, const ctx_ptr& ctx, wire_bytes bytes, uint64_t attempt) {
  self->request(self->state.monitor, std::chrono::seconds(10), atoms::leave_atom_v,
                std::move(bytes))
      .then([=](bool) { perform(self, ctx, self->state.core->on_leave_answered()); },
            [=](caf::error& err) {
              perform(self, ctx,
                      self->state.core->on_leave_failed(attempt, self->system().render(err)));
            });
}

/// Rejoins the (new) monitor live with a new incarnation, keeping step and data cursor
/// (learner_core::rejoin). A finished learner rejoined to leave then makes its final pushes.
void request_rejoin(learner_actor* self, const ctx_ptr& ctx, const act::rejoin& r) {
  const uint64_t tokens = r.reported_tokens;
  const double compute_s = r.reported_compute_s;
  self->request(self->state.monitor, std::chrono::seconds(30), atoms::join_atom_v, r.bytes,
                learner_at_syncer_hdl{self})
      .then(
          [=](const std::vector<uint8_t>& bytes) {
            auto& core = *self->state.core;
            learner_actions out;
            const bool leave_now = core.on_rejoin_reply(bytes, tokens, compute_s, out);
            perform(self, ctx, std::move(out));
            if (!leave_now) return;
            for (auto& d : core.final_pushes())
              if (d.push) perform(self, ctx, core.enqueue(d.fragment, std::move(*d.push)));
            perform(self, ctx, core.end_final_pushes());
          },
          [=](caf::error& err) {
            perform(self, ctx, self->state.core->on_rejoin_failed(self->system().render(err)));
          });
}

/// True when `a` and `b` are the same actor object (a local actor, or one proxy). CAF's `==`
/// compares (node, actor id) only: after the connection to the syncer node was lost and made
/// again, the owner directory names the same remote owners through fresh proxies that compare
/// equal to the dead ones, while only the fresh ones reach them.
bool same_handle(const owner_hdl& a, const owner_hdl& b) {
  return caf::actor_cast<caf::strong_actor_ptr>(a).get() ==
         caf::actor_cast<caf::strong_actor_ptr>(b).get();
}

/// Applies the owner directory the monitor sent (bytes: owner_directory; `handles`: the current
/// owner of each fragment it names, in order). An undecodable one is logged and asked for again
/// (get_atom, owners_atom) from the monitor, so a damaged copy never leaves a learner without
/// owners.
void apply_owner_directory(learner_actor* self, const ctx_ptr& ctx,
                           const std::vector<uint8_t>& bytes,
                           const std::vector<owner_hdl>& handles) {
  auto& s = self->state;
  auto dir = decode_owner_directory(bytes, {}, s.core->expect());
  if (dir && dir->fragment_ids.size() != handles.size())
    dir = wire_error{errc::malformed, "ownerDirectory names " +
                                          std::to_string(dir->fragment_ids.size()) +
                                          " fragments but travels with " +
                                          std::to_string(handles.size()) + " handles"};
  if (!dir) {
    perform(self, ctx, {act::refused{"undecodable_owner_directory", dir.error()}});
    if (s.monitor)
      self->request(s.monitor, std::chrono::seconds(10), caf::get_atom_v, atoms::owners_atom_v)
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
  std::vector<learner_core::owner_update> update(owners.size());
  for (size_t p = 0; p < owners.size(); ++p)
    update[p] = {static_cast<bool>(owners[p]), !same_handle(owners[p], s.owners[p])};
  s.owners = std::move(owners);
  perform(self, ctx, s.core->on_owner_directory(update));
}

/// An owner rebuilding its fragment asks which version we hold (and, with send_value, for the
/// value itself): the last broadcast applied, exactly as received.
void answer_query(learner_actor* self, const ctx_ptr& ctx, const std::vector<uint8_t>& bytes) {
  auto& s = self->state;
  auto a = s.core->on_query(bytes);
  if (a.error) {
    perform(self, ctx, {act::refused{"undecodable_query", *a.error}});
    return;
  }
  auto sender = caf::actor_cast<owner_hdl>(self->current_sender());
  if (!sender) return;
  self->send(sender, atoms::held_atom_v, std::move(a.held));
  for (auto& c : a.copy)
    flow_send(self, s.copies, make_chunk(sender, atoms::copy_atom_v, std::move(c)));
  perform(self, ctx, std::move(a.actions));
}

/// Watches `monitor` as the learner's monitor (acked leaves: its down marks the syncer lost).
void watch_monitor(learner_actor* self, const learner_env& ctx, const monitor_hdl& monitor) {
  auto& s = self->state;
  s.monitor = monitor;
  s.core->on_monitor_found(static_cast<bool>(monitor));
  if (ctx.leave == leave_protocol::acked && monitor) self->monitor(monitor);
}

void init_state(learner_actor* self, const learner_env& ctx) {
  auto& st = self->state;
  if (ctx.compute_nice > 0) util::lower_thread_priority(ctx.compute_nice);  // before the pool
  kernels::backend_options bo;
  bo.threads = ctx.threads;
  st.backend = kernels::make_backend(ctx.backend, bo);
  st.tr = ctx.images != nullptr ? std::make_unique<trainer>(*st.backend, *ctx.images, ctx.trainer)
                                : std::make_unique<trainer>(*st.backend, *ctx.data, ctx.trainer);
  st.params = std::make_unique<model_params>(st.tr->model());
  learner_options o = ctx;  // the decisions' part, with the trainer's resolved figures
  const auto& cfg = st.tr->config();
  o.schedule = cfg.schedule;
  o.tokens_per_step = static_cast<uint64_t>(static_cast<int64_t>(cfg.batch) * cfg.seq_len);
  o.learners = static_cast<uint64_t>(std::max(1, cfg.learners));
  st.core = std::make_unique<learner_core>(std::move(o), *st.params);
  st.faults = std::make_unique<learner_step_faults>(ctx.svc.step_faults);
  st.owners.resize(ctx.plan.fragments.size());
  st.jitter_rng =
      std::make_unique<rng>(derive_seed(ctx.trainer.seed, 0x6a6974ULL + ctx.learner_id));
  st.flow = chunk_flow(static_cast<size_t>(std::max(1, ctx.window_chunks)));
  st.copies = chunk_flow(static_cast<size_t>(std::max(1, ctx.window_chunks)), uint64_t{1} << 62);
  st.flow.link = ctx.svc.link;
  st.copies.link = ctx.svc.link;
}

}  // namespace

learner_hdl::behavior_type learner(learner_actor* self,
                                   std::shared_ptr<const learner_config> config,
                                   learner_services services) {
  const auto ctx = enter_role<learner_env>(self, *config, std::move(services),
                                           "learner " + std::to_string(config->learner_id));
  // Owners' broadcast chunks may come on the tensor channel too.
  tensor_channel_hub::allow(self->system(), caf::strong_actor_ptr{self->ctrl()},
                            {channel_kind::broadcast});
  init_state(self, *ctx);
  watch_monitor(self, *ctx, ctx->svc.current_monitor ? ctx->svc.current_monitor() : ctx->monitor);
  // The learner monitors only the peers it sends chunks to (an owner that goes away frees its
  // link; unanswered pushes go to its successor from the owners_atom handler).
  self->set_down_handler([=](caf::down_msg& dm) {
    auto& s = self->state;
    flow_down(s.flow, dm);
    flow_down(s.copies, dm);
    if (s.monitor && dm.source == s.monitor.address()) s.core->on_monitor_lost();
  });
  initial_join(self, ctx, self->state.monitor);
  auto core = [self] { return self->state.core.get(); };
  return {
      [=](atoms::step_atom) { on_step(self, ctx); },
      [=](atoms::credit_atom, uint64_t seq) {
        flow_credit(self, self->state.flow, seq);  // an unknown number changes nothing
        flow_credit(self, self->state.copies, seq);
      },
      [=](atoms::progress_atom, const std::vector<uint8_t>& bytes) {
        perform(self, ctx, core()->on_progress(bytes));
      },
      [=](atoms::barrier_timeout_atom) {
        perform(self, ctx, core()->on_barrier_timeout(actor_now(self)));
      },
      [=](atoms::broadcast_atom, const std::vector<uint8_t>& bytes, uint64_t seq) {
        grant_credit(self, seq);  // taken: the owner may send the next chunk
        perform(self, ctx, core()->on_broadcast(bytes));
        note_applied(ctx->svc.log, *core());
      },
      [=](atoms::query_atom, const std::vector<uint8_t>& bytes) { answer_query(self, ctx, bytes); },
      [=](atoms::ack_atom, const std::vector<uint8_t>& bytes) {
        perform(self, ctx, core()->on_ack(bytes));
      },
      [=](atoms::reject_atom, const std::vector<uint8_t>& bytes) {
        perform(self, ctx, core()->on_reject(bytes));
      },
      [=](atoms::owners_atom, const std::vector<uint8_t>& bytes,
          const std::vector<owner_hdl>& handles) {
        apply_owner_directory(self, ctx, bytes, handles);
      },
      // From the health monitor (dd-node drain, the job's stop), as a wire message.
      [=](atoms::stop_atom, const std::vector<uint8_t>& bytes) {
        perform(self, ctx, core()->on_stop(bytes));
      },
      // From the learner's own node (its supervisor): node-local, not a wire message.
      [=](atoms::stop_atom) { perform(self, ctx, core()->on_node_stop()); },
      // The learner node reconnected to a (restarted) syncer: rejoin its monitor as a live
      // learner with a new incarnation (a finished learner whose leave the lost syncer never
      // answered rejoins too, then leaves), or join it first if it never joined.
      [=](atoms::syncer_atom, const monitor_hdl& monitor) {
        const auto back = core()->on_syncer_back();
        if (back == syncer_back::ignore) return;
        watch_monitor(self, *ctx, monitor);
        if (back == syncer_back::first_join)
          initial_join(self, ctx, monitor);
        else
          perform(self, ctx, core()->rejoin());
      },
      [=](atoms::leave_retry_atom) { perform(self, ctx, core()->on_leave_retry()); },
      [=](atoms::drain_timeout_atom) { perform(self, ctx, core()->on_drain_timeout()); },
  };
}

}  // namespace dd::actors
