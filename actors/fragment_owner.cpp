// actors/fragment_owner.cpp — see fragment_owner.hpp.
//
// State diagram (one owner incarnation):
//
//   start --checkpoint file?--> restored ---+
//     \------- none ----------> fresh ------+--> serving: push / pull / live / grace
//                                                   |  fault hook or crash
//                                                   v
//                                                 dead --supervisor--> start (new incarnation)
#include "actors/fragment_owner.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include <caf/all.hpp>

#include "actors/atoms.hpp"
#include "actors/fault_hooks.hpp"
#include "actors/run_log.hpp"
#include "actors/supervisor.hpp"

namespace dd::actors {

double clock_seconds(caf::actor_clock::time_point t) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}

namespace {

bool file_exists(const std::string& path) {
  struct stat st {};
  return !path.empty() && ::stat(path.c_str(), &st) == 0;
}

caf::timespan to_timespan(double seconds) {
  auto ns = static_cast<int64_t>(std::ceil(std::max(0.0, seconds) * 1e9));
  return caf::timespan{ns};
}

void apply_effects(owner_actor* self, const owner_context& ctx, owner_effects fx) {
  auto& st = self->state;
  if (fx.arm_grace_s)
    self->delayed_send(self, to_timespan(*fx.arm_grace_s), atoms::grace_atom_v, fx.timer_id);
  if (!fx.merged) return;
  const auto& rec = *fx.merged;
  uint64_t bytes = 0;
  for (const auto& chunk : fx.broadcast) bytes += chunk.size();
  auto held = std::move(st.held_broadcasts);
  st.held_broadcasts.clear();
  for (const auto& [id, handle] : st.learners) {
    broadcast_fault fate;
    if (ctx.faults != nullptr) fate = ctx.faults->on_broadcast(rec.fragment_id, id);
    if (fate.drop) continue;
    if (fate.reorder) {
      st.held_broadcasts.emplace_back(handle, fx.broadcast);
      continue;
    }
    for (int copy = 0; copy < (fate.duplicate ? 2 : 1); ++copy)
      for (const auto& chunk : fx.broadcast) {
        if (fate.delay_s > 0)
          self->delayed_send(handle, to_timespan(fate.delay_s), atoms::broadcast_atom_v, chunk);
        else
          self->send(handle, atoms::broadcast_atom_v, chunk);
      }
  }
  // Broadcasts held back by a reorder fault go out after this newer one.
  for (const auto& [handle, chunks] : held)
    for (const auto& chunk : chunks) self->send(handle, atoms::broadcast_atom_v, chunk);
  if (ctx.log != nullptr) {
    nlohmann::json contributors = nlohmann::json::array();
    uint64_t tokens = 0;
    for (const auto& c : rec.contributors) {
      contributors.push_back({{"learner", c.learner_id},
                              {"incarnation", c.incarnation},
                              {"base_version", c.base_version},
                              {"transfer_id", c.transfer_id},
                              {"steps", c.steps},
                              {"tokens", c.tokens},
                              {"weight", c.weight}});
      tokens += c.tokens;
    }
    ctx.log->emit("merge", {{"fragment", rec.fragment_id},
                            {"version", rec.version},
                            {"contributors", contributors},
                            {"live", rec.live},
                            {"needed", rec.needed},
                            {"grace_s", rec.grace_s},
                            {"reason", rec.reason},
                            {"round_s", rec.round_s},
                            {"sync_s", rec.sync_s},
                            {"delta_norm", rec.delta_norm},
                            {"xi_step_s", st.core->xi_step_s()},
                            {"xi_quorum_s", st.core->xi_quorum_s()},
                            {"xi_sync_s", st.core->xi_sync_s()}});
    ctx.log->emit("broadcast", {{"fragment", rec.fragment_id},
                                {"version", rec.version},
                                {"learners", st.learners.size()},
                                {"bytes", bytes * st.learners.size()}});
    if (rec.checkpointed || !rec.checkpoint_error.empty())
      ctx.log->emit(rec.checkpointed ? "checkpoint" : "failure",
                    {{"fragment", rec.fragment_id},
                     {"version", rec.version},
                     {"error", rec.checkpoint_error}});
    if (!rec.checkpoint_error.empty())  // dd-node run ends the run on it (run_cluster)
      ctx.log->write_failed("fragment owner " + std::to_string(rec.fragment_id) +
                            ": checkpoint of version " + std::to_string(rec.version) + ": " +
                            rec.checkpoint_error);
    const size_t n_learners = st.learners.size();
    ctx.log->update([&](run_counters& c) {
      c.merges += 1;
      c.contributors += rec.contributors.size();
      c.tokens_merged += tokens;
      c.bytes_broadcast += bytes * n_learners;
      c.grace_s[rec.fragment_id] = rec.grace_s;
      c.versions[rec.fragment_id] = rec.version;
    });
  }
  if (ctx.faults != nullptr && ctx.faults->on_owner(rec.fragment_id, rec.version))
    self->quit(caf::exit_reason::kill);
}

}  // namespace

caf::behavior fragment_owner(owner_actor* self, std::shared_ptr<const owner_context> ctx) {
  name_crashes(self);
  auto& st = self->state;
  kernels::backend_options bo;
  bo.threads = ctx->threads;
  st.backend = kernels::make_backend(ctx->backend, bo);
  auto now_fn = [self] { return clock_seconds(self->clock().now()); };
  const auto& opts = ctx->options;
  const int32_t frag = opts.layout.fragment_id;
  const bool respawn = ctx->starts.fetch_add(1) > 0;
  std::string reset;  // why this owner restarts from the initial weights (empty: it does not)
  if (file_exists(opts.checkpoint_path)) {
    auto ck = load_checkpoint(opts.checkpoint_path);
    if (ck) {
      st.core = std::make_unique<fragment_owner_state>(opts, *st.backend, *ck, now_fn);
      st.restored = true;
    } else {
      reset = "its checkpoint '" + opts.checkpoint_path + "' is unreadable (" +
              ck.error().message + ")";
      if (ctx->log != nullptr)
        ctx->log->emit("failure", {{"fragment", frag},
                                   {"what", "checkpoint_unreadable"},
                                   {"error", ck.error().message}});
    }
  } else if (respawn) {
    reset = opts.checkpoint_every == 0 || opts.checkpoint_path.empty()
                ? "it was respawned and checkpoints are off (checkpoint.every_versions = 0)"
                : "it was respawned before its first checkpoint ('" + opts.checkpoint_path +
                      "' does not exist yet)";
  }
  if (!st.core)
    st.core = std::make_unique<fragment_owner_state>(opts, *st.backend, ctx->initial, now_fn);
  if (ctx->log != nullptr) {
    nlohmann::json ev = {{"fragment", frag}, {"version", st.core->version()}};
    if (!reset.empty()) ev["reset"] = reset;
    ctx->log->emit(st.restored ? "owner_restored" : "owner_start", ev);
    ctx->log->update([&](run_counters& c) { c.versions[frag] = st.core->version(); });
    if (!reset.empty())
      ctx->log->warn("fragment owner " + std::to_string(frag) + ": " + reset +
                     "; its value restarts from the initial weights (version " +
                     std::to_string(st.core->version()) +
                     "), losing the merges made so far for this fragment");
  }
  if (ctx->monitor) self->send(ctx->monitor, atoms::subscribe_atom_v, frag, caf::actor{self});
  // Time-keyed kill faults (tests, chaos): a timer each, so they fire on time.
  if (ctx->faults != nullptr)
    for (double d : ctx->faults->owner_kill_delays(frag))
      self->delayed_send(self,
                         caf::timespan{static_cast<int64_t>(std::ceil(std::max(0.0, d) * 1e9))},
                         atoms::kill_atom_v);
  return {
    [=](atoms::kill_atom) {
      if (ctx->faults != nullptr && ctx->faults->on_owner(frag, self->state.core->version()))
        self->quit(caf::exit_reason::kill);
    },
    [=](atoms::push_atom, const std::vector<uint8_t>& bytes) {
      auto& s = self->state;
      auto sender = caf::actor_cast<caf::actor>(self->current_sender());
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
          self->send(sender, atoms::ack_atom_v, encode(ack));
        }
      } else if (out.what == status::rejected && sender) {
        self->send(sender, atoms::reject_atom_v, encode(*out.reject));
        if (out.send_current)
          for (auto& chunk : s.core->current_value())
            self->send(sender, atoms::broadcast_atom_v, std::move(chunk));
      }
      if (ctx->log != nullptr &&
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
        ctx->log->emit("push", j);
        ctx->log->update([&](run_counters& c) {
          c.pushes += 1;
          c.bytes_pushed += bytes.size();
          if (out.what == status::rejected) c.pushes_rejected += 1;
          if (out.chunk_refused) c.chunks_refused += 1;
        });
        if (out.chunk_refused)
          ctx->log->emit("chunk_refused", {{"fragment", frag},
                                           {"learner", out.learner_id},
                                           {"transfer_id", out.transfer_id},
                                           {"what", "push"},
                                           {"detail", out.detail}});
      }
      if (ctx->log != nullptr && out.what == status::ignored)
        ctx->log->emit("push_ignored", {{"fragment", frag}, {"detail", out.detail}});
      apply_effects(self, *ctx, std::move(out.effects));
    },
    [=](atoms::pull_atom, const std::vector<uint8_t>& bytes) {
      auto req = decode_pull_request(bytes);
      std::string bad;
      if (!req)
        bad = req.error().message;
      else if (req->fragment_id != frag)
        bad = "pull.fragmentId " + std::to_string(req->fragment_id) + " is not this owner's " +
              std::to_string(frag);
      if (!bad.empty()) {
        if (ctx->log != nullptr)
          ctx->log->emit("failure",
                         {{"fragment", frag}, {"what", "undecodable_pull"}, {"error", bad}});
        return;
      }
      auto sender = caf::actor_cast<caf::actor>(self->current_sender());
      if (!sender) return;
      for (auto& chunk : self->state.core->current_value())
        self->send(sender, atoms::broadcast_atom_v, std::move(chunk));
    },
    [=](atoms::live_atom, const live_view& view) {
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
      apply_effects(self, *ctx,
                    self->state.core->on_grace_timer(timer_id, clock_seconds(self->clock().now())));
    },
    [=](atoms::status_atom) {
      auto& c = *self->state.core;
      return caf::make_message(c.version(), c.pending_count(), c.last_grace_s());
    },
  };
}

}  // namespace dd::actors
