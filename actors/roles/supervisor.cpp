// actors/roles/supervisor.cpp — see supervisor.hpp.
//
// Per child:
//
//   running --exit normal / stop--> done
//   running --crash--> backoff (delayed respawn_atom) --> running (new incarnation)
//                  \--budget spent--> done ("give_up")
#include "actors/roles/supervisor.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>

#include <caf/all.hpp>

#include "actors/link/atoms.hpp"
#include "actors/roles/fragment_owner.hpp"
#include "actors/roles/role_entry.hpp"
#include "actors/services/run_log.hpp"
#include "util/duration.hpp"

namespace dd::actors {

namespace {

/// What the supervisor works with: its configuration and the services its node handed it.
using supervisor_env = role_env<supervisor_config, supervisor_services>;

void start_child(supervisor_actor* self, const supervisor_env& ctx, size_t i) {
  auto child = ctx.children[i].spawn(self->system());
  self->monitor(child);
  self->state.current[i] = child;
}

void maybe_report(supervisor_actor* self, const supervisor_env& ctx) {
  auto& st = self->state;
  if (st.reported) return;
  for (bool d : st.done)
    if (!d) return;
  st.reported = true;
  if (ctx.job) self->send(ctx.job, atoms::children_done_atom_v, ctx.kind);
}

}  // namespace

std::string to_string(child_kind k) { return k == child_kind::owner ? "owner" : "learner"; }

namespace {
// Marks the two context elements with_downtime appends: this text, then the seconds.
const char* const k_downtime_tag = "respawn no sooner than (s)";
}  // namespace

caf::error with_downtime(const caf::error& reason, double downtime_s) {
  if (!reason || !(downtime_s > 0)) return reason;
  return caf::error(reason.code(), reason.category(),
                    reason.context() + caf::make_message(std::string(k_downtime_tag), downtime_s));
}

down_reason read_down_reason(const caf::error& reason) {
  if (!reason) return {reason, 0.0};  // no error: it has no context either
  const caf::message& ctx = reason.context();
  const size_t n = ctx.size();
  if (n >= 2 && ctx.match_element<std::string>(n - 2) && ctx.match_element<double>(n - 1) &&
      ctx.get_as<std::string>(n - 2) == k_downtime_tag)
    return {caf::error(reason.code(), reason.category(), ctx.drop_right(2)),
            ctx.get_as<double>(n - 1)};
  return {reason, 0.0};
}

supervisor_hdl::behavior_type supervisor(supervisor_actor* self,
                                         std::shared_ptr<const supervisor_config> config,
                                         supervisor_services services) {
  const auto ctx = enter_role<supervisor_env>(self, *config, std::move(services),
                                              "supervisor of " + to_string(config->kind) + "s",
                                              role_crashes::caf_default);
  auto& st = self->state;
  const size_t n = ctx->children.size();
  st.current.resize(n);
  st.done.assign(n, false);
  st.history.resize(n);
  for (size_t i = 0; i < n; ++i) start_child(self, *ctx, i);
  self->set_down_handler([=](const caf::down_msg& dm) {
    auto& s = self->state;
    for (size_t i = 0; i < s.current.size(); ++i) {
      if (!s.current[i] || s.current[i].address() != dm.source) continue;
      s.current[i] = nullptr;
      const auto& spec = ctx->children[i];
      const auto [reason, downtime_s] = read_down_reason(dm.reason);
      const bool normal = !reason || reason == caf::exit_reason::normal;
      if (normal || s.stopping) {
        s.done[i] = true;
        maybe_report(self, *ctx);
        return;
      }
      const double now = clock_seconds(self->clock().now());
      auto d = policy::decide_restart(ctx->restart, s.history[i], now);
      if (d.action == policy::restart_action::give_up) {
        const std::string crash = self->system().render(reason);
        if (ctx->svc.log != nullptr)
          ctx->svc.log->emit("give_up", {{"kind", to_string(ctx->kind)},
                                         {"id", spec.id},
                                         {"reason", d.message},
                                         {"error", crash}});
        if (ctx->svc.log != nullptr && ctx->kind == child_kind::learner) {
          ctx->svc.log->learner_finished(spec.id);
          ctx->svc.log->update([&](run_counters& c) { c.learners_given_up[spec.id] = crash; });
        }
        if (ctx->kind == child_kind::owner && ctx->svc.log != nullptr)
          ctx->svc.log->update([&](run_counters& c) { c.owners_given_up[spec.id] = crash; });
        // A lost owner: the fragment's global copy and outer state are gone for good, so the
        // job must stop; a lost learner: the quorum absorbs it.
        if (ctx->job) self->send(ctx->job, atoms::child_given_up_atom_v, ctx->kind, spec.id, crash);
        s.done[i] = true;
        maybe_report(self, *ctx);
        return;
      }
      const double delay = std::max(d.delay_s, downtime_s);
      if (ctx->svc.log != nullptr)
        ctx->svc.log->emit("respawn_scheduled", {{"kind", to_string(ctx->kind)},
                                                 {"id", spec.id},
                                                 {"delay_s", delay},
                                                 {"reason", self->system().render(reason)}});
      policy::record_restart(s.history[i], now);
      self->delayed_send(self, util::to_timespan(delay), atoms::respawn_atom_v,
                         static_cast<uint64_t>(i));
      return;
    }
  });
  self->set_exit_handler([=](const caf::exit_msg& em) {
    auto& s = self->state;
    for (const auto& c : s.current)
      if (c && c.address() == em.source) return;  // a child: handled by the down handler
    s.stopping = true;
    for (const auto& c : s.current)
      if (c) self->send_exit(c, em.reason);
    self->quit(em.reason);
  });
  return {
      [=](atoms::respawn_atom, uint64_t index) {
        auto& s = self->state;
        const size_t i = static_cast<size_t>(index);
        if (i >= s.current.size() || s.current[i]) return;
        const auto& spec = ctx->children[i];
        if (s.stopping) {
          s.done[i] = true;
          maybe_report(self, *ctx);
          return;
        }
        start_child(self, *ctx, i);
        if (ctx->svc.log != nullptr) {
          ctx->svc.log->emit("respawn", {{"kind", to_string(ctx->kind)},
                                         {"id", spec.id},
                                         {"restarts", s.history[i].restart_times_s.size()}});
          ctx->svc.log->update([&](run_counters& c) {
            if (ctx->kind == child_kind::learner) {
              c.learner_restarts += 1;
              c.learners[spec.id].restarts += 1;
            } else {
              c.owner_restarts += 1;
            }
          });
        }
      },
      [=](atoms::stop_atom) {
        auto& s = self->state;
        s.stopping = true;
        for (size_t i = 0; i < s.current.size(); ++i) {
          if (s.current[i])
            send_untyped(self, s.current[i], atoms::stop_atom_v);
          else
            s.done[i] = true;
        }
        maybe_report(self, *ctx);
      },
      // Learner node: the syncer came back at a new address; every live child rejoins it.
      [=](atoms::syncer_atom, const monitor_hdl& monitor) {
        for (const auto& c : self->state.current)
          if (c) send_untyped(self, c, atoms::syncer_atom_v, monitor);
      },
      [=](atoms::kill_atom, int32_t id) {
        auto& s = self->state;
        for (size_t i = 0; i < s.current.size(); ++i)
          if (ctx->children[i].id == id && s.current[i])
            self->send_exit(s.current[i], caf::exit_reason::kill);
      },
  };
}

void name_crashes(caf::scheduled_actor* self) {
  self->set_exception_handler([](caf::scheduled_actor*, std::exception_ptr& eptr) -> caf::error {
    try {
      std::rethrow_exception(eptr);
    } catch (const std::exception& e) {
      return caf::make_error(caf::sec::runtime_error, std::string(e.what()));
    } catch (...) {
      return caf::make_error(caf::sec::runtime_error, std::string("unknown exception"));
    }
  });
}

namespace {

/// Logs the first few garbled messages or stray errors of one actor (see drop_unexpected).
void log_unexpected(event_sink* log, const std::string& who, const char* what,
                    const std::string& content, std::atomic<uint64_t>& count) {
  const uint64_t n = count.fetch_add(1) + 1;
  if (log == nullptr || n > 5) return;
  const std::string shown = content.size() > 200 ? content.substr(0, 200) + "..." : content;
  log->emit("unexpected_message", {{"who", who}, {"what", what}, {"content", shown}, {"count", n}});
  log->warn(who + ": dropped an unexpected " + what + " (" + shown + ")" +
            (n == 5 ? "; further ones are not logged" : ""));
}

}  // namespace

caf::scheduled_actor::default_handler unexpected_handler(event_sink* log, const std::string& who) {
  auto count = std::make_shared<std::atomic<uint64_t>>(0);
  return [log, who, count](caf::scheduled_actor* self,
                           caf::message_view& x) -> caf::result<caf::message> {
    log_unexpected(log, who, "message", x.content().stringify(), *count);
    // A request gets its error as a response (its requester's handler takes it); anything else
    // gets no answer: an asynchronous error would end a sender on CAF's default error handler.
    const auto* e = self->current_mailbox_element();
    if (e != nullptr && e->mid.is_request()) return caf::sec::unexpected_message;
    return caf::delegated<caf::message>{};
  };
}

void drop_unexpected(caf::scheduled_actor* self, event_sink* log, const std::string& who) {
  self->set_default_handler(unexpected_handler(log, who));
  auto count = std::make_shared<std::atomic<uint64_t>>(0);
  self->set_error_handler([log, who, count](caf::scheduled_actor* s, caf::error& err) {
    log_unexpected(log, who, "error", s->system().render(err), *count);
  });
}

}  // namespace dd::actors
