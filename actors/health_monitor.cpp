// actors/health_monitor.cpp — see health_monitor.hpp.
//
// Per learner id:
//
//   unknown --join--> alive --heartbeats--> alive
//                      |  \--leave / normal exit--> finished
//                      |--down (crash) / lease expired--> dead --join (respawn)--> alive (inc+1)
#include "actors/health_monitor.hpp"

#include <algorithm>
#include <cmath>

#include <caf/all.hpp>

#include "actors/fragment_owner.hpp"
#include "actors/run_log.hpp"
#include "messages/codec.hpp"

namespace dd::actors {

namespace {

double now_s(monitor_actor* self) { return clock_seconds(self->clock().now()); }

live_view make_view(monitor_actor* self) {
  live_view v;
  v.epoch = self->state.epoch;
  for (const auto& [id, r] : self->state.learners)
    if (r.alive) v.learners.push_back({id, r.incarnation, r.step_time_ema_s, r.handle});
  return v;
}

void publish(monitor_actor* self, bool changed) {
  if (changed) ++self->state.epoch;
  auto v = make_view(self);
  for (const auto& o : self->state.owners)
    if (o) self->send(o, atoms::live_atom_v, v);
}

void send_owners(monitor_actor* self, const caf::actor& learner) {
  self->send(learner, atoms::owners_atom_v, self->state.owners);
}

uint64_t total_tokens(const monitor_state& st) {
  uint64_t t = 0;
  for (const auto& [id, r] : st.learners) t += r.tokens_before + r.tokens_this_incarnation;
  return t;
}

void declare_dead(monitor_actor* self, const monitor_context& ctx, int32_t id,
                  const std::string& why) {
  auto& r = self->state.learners[id];
  if (!r.alive) return;
  r.alive = false;
  if (ctx.log != nullptr) {
    ctx.log->emit("failure", {{"learner", id}, {"incarnation", r.incarnation}, {"reason", why},
                              {"step", r.step}});
    ctx.log->update([&](run_counters& c) {
      c.learners[id].alive = false;
      c.learners[id].stepping = false;
    });
    ctx.log->set_stepping(id, false);
  }
  publish(self, true);
}

}  // namespace

caf::behavior health_monitor(monitor_actor* self, std::shared_ptr<const monitor_context> ctx) {
  self->state.owners.resize(static_cast<size_t>(std::max(ctx->fragments, 0)));
  self->set_down_handler([=](const caf::down_msg& dm) {
    for (auto& [id, r] : self->state.learners) {
      if (r.handle && r.handle.address() == dm.source) {
        if (!dm.reason || dm.reason == caf::exit_reason::normal) {
          if (r.alive) {
            r.alive = false;
            r.finished = true;
            publish(self, true);
          }
        } else {
          declare_dead(self, *ctx, id, self->system().render(dm.reason));
        }
        r.handle = nullptr;
        return;
      }
    }
  });
  self->delayed_send(self, std::chrono::milliseconds(static_cast<int64_t>(ctx->tick_s * 1000)),
                     atoms::lease_atom_v);
  return {
    [=](atoms::join_atom, const std::vector<uint8_t>& bytes,
        const caf::actor& learner) -> caf::result<std::vector<uint8_t>> {
      auto req = decode_join_request(bytes.data(), bytes.size());
      if (!req) return caf::make_error(caf::sec::invalid_argument, req.error().message);
      auto& st = self->state;
      int32_t id = req->requested_learner_id;
      if (id < 0) {
        id = 0;
        while (st.learners.count(id) != 0) ++id;
      }
      if (id >= ctx->learners)
        return caf::make_error(caf::sec::invalid_argument,
                               "learner id " + std::to_string(id) + " out of range (M = " +
                                   std::to_string(ctx->learners) + ")");
      bool known = st.learners.count(id) != 0;
      auto& r = st.learners[id];
      if (known) {
        if (r.alive) declare_dead(self, *ctx, id, "replaced by a new incarnation");
        r.incarnation += 1;
        r.tokens_before += r.tokens_this_incarnation;
        r.tokens_this_incarnation = 0;
      }
      r.alive = true;
      r.finished = false;
      r.straggler = false;
      r.handle = learner;
      r.last_heartbeat_s = now_s(self);
      self->monitor(learner);
      join_reply rep;
      rep.learner_id = id;
      rep.incarnation = r.incarnation;
      rep.experiment_config_json = ctx->experiment_json;
      rep.shard_index = static_cast<uint32_t>(id);
      rep.shard_count = static_cast<uint32_t>(ctx->learners);
      rep.resume_step = r.step;
      if (known && ctx->align_resume_to_group) {
        for (const auto& [other, o] : st.learners)
          if (other != id && o.alive) rep.resume_step = std::max(rep.resume_step, o.step);
        r.step = rep.resume_step;
      }
      rep.data_cursor = r.data_cursor;
      if (ctx->log != nullptr) {
        ctx->log->emit(known ? "rejoin" : "join", {{"learner", id},
                                                   {"incarnation", r.incarnation},
                                                   {"resume_step", r.step}});
        ctx->log->update([&](run_counters& c) {
          auto& ls = c.learners[id];
          ls.alive = true;
          ls.incarnation = r.incarnation;
        });
      }
      // The view goes to the owners before the reply reaches the learner, so a push can never
      // arrive at an owner ahead of the incarnation it carries.
      publish(self, true);
      send_owners(self, learner);
      return encode(rep);
    },
    [=](atoms::heartbeat_atom, const std::vector<uint8_t>& bytes) {
      auto hb = decode_heartbeat(bytes.data(), bytes.size());
      if (!hb) return;
      auto& st = self->state;
      auto it = st.learners.find(hb->learner_id);
      if (it == st.learners.end() || it->second.incarnation != hb->incarnation ||
          !it->second.alive)
        return;
      auto& r = it->second;
      // Learners alive now (a finished or dead learner is not alive).
      size_t live = 0;
      for (const auto& [id, l] : st.learners)
        if (l.alive) ++live;
      // The push clock moves by this learner's new steps over the live learners.
      const uint64_t advanced = hb->step > r.step ? std::min<uint64_t>(hb->step - r.step, 1000) : 0;
      st.mean_step += static_cast<double>(advanced) / static_cast<double>(std::max<size_t>(1, live));
      r.step = hb->step;
      r.tokens_this_incarnation = hb->tokens;
      r.step_time_ema_s = hb->step_time_ema_s;
      r.data_cursor = hb->data_cursor;
      r.last_heartbeat_s = now_s(self);
      const uint64_t tokens = total_tokens(st);
      // Global progress: the push clock (sync.push_clock = global) and the lr schedule's clock
      // (inner.schedule_clock = global) follow it.
      if (auto sender = caf::actor_cast<caf::actor>(self->current_sender())) {
        progress_msg pm;
        pm.total_tokens = tokens;
        pm.step = hb->step;
        pm.mean_step = st.mean_step;
        pm.live_learners = static_cast<uint32_t>(live);
        self->send(sender, atoms::progress_atom_v, encode(pm));
      }
      if (ctx->token_budget > 0 && !st.budget_reported && tokens >= ctx->token_budget) {
        st.budget_reported = true;
        if (ctx->log != nullptr)
          ctx->log->emit("budget_spent", {{"tokens", tokens}});
        if (ctx->job) self->send(ctx->job, atoms::done_atom_v);
      }
    },
    [=](atoms::leave_atom, int32_t id, uint64_t incarnation) {
      auto& st = self->state;
      auto it = st.learners.find(id);
      if (it == st.learners.end() || it->second.incarnation != incarnation) return;
      if (it->second.alive) {
        it->second.alive = false;
        it->second.finished = true;
        if (ctx->log != nullptr)
          ctx->log->emit("leave", {{"learner", id}, {"incarnation", incarnation},
                                   {"step", it->second.step}});
        publish(self, true);
      }
    },
    [=](atoms::subscribe_atom, int32_t fragment, const caf::actor& owner) {
      auto& st = self->state;
      if (fragment < 0 || static_cast<size_t>(fragment) >= st.owners.size()) return;
      st.owners[static_cast<size_t>(fragment)] = owner;
      self->send(owner, atoms::live_atom_v, make_view(self));
      for (const auto& [id, r] : st.learners)
        if (r.alive && r.handle) send_owners(self, r.handle);
    },
    [=](caf::get_atom, atoms::owners_atom) { return self->state.owners; },
    [=](caf::get_atom, atoms::status_atom) {
      return static_cast<uint64_t>(total_tokens(self->state));
    },
    [=](atoms::lease_atom) {
      auto& st = self->state;
      double now = now_s(self);
      std::vector<double> times;
      for (const auto& [id, r] : st.learners)
        if (r.alive && r.step_time_ema_s > 0) times.push_back(r.step_time_ema_s);
      double median = 0;
      if (!times.empty()) {
        std::sort(times.begin(), times.end());
        median = times[times.size() / 2];
      }
      std::vector<int32_t> expired;
      for (auto& [id, r] : st.learners) {
        if (!r.alive) continue;
        double lease = std::max(ctx->lease_min_s, ctx->lease_steps * r.step_time_ema_s);
        if (now - r.last_heartbeat_s > lease) expired.push_back(id);
        bool slow = median > 0 && r.step_time_ema_s > ctx->straggler_factor * median;
        if (slow && !r.straggler && ctx->log != nullptr)
          ctx->log->emit("straggler", {{"learner", id},
                                       {"step_time_s", r.step_time_ema_s},
                                       {"median_s", median}});
        r.straggler = slow;
      }
      for (auto id : expired) {
        auto handle = st.learners[id].handle;
        declare_dead(self, *ctx, id, "lease expired");
        if (handle) self->send_exit(handle, caf::exit_reason::kill);
      }
      publish(self, false);
      self->delayed_send(self,
                         std::chrono::milliseconds(static_cast<int64_t>(ctx->tick_s * 1000)),
                         atoms::lease_atom_v);
    },
  };
}

}  // namespace dd::actors
