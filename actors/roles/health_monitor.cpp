// actors/roles/health_monitor.cpp — see health_monitor.hpp.
//
// Per learner id:
//
//   unknown --join--> alive --heartbeats--> alive
//                      |  \--leave / normal exit--> finished (stopped, when the run is stopping:
//                      |                               a resumed run takes it back)
//                      |--down (crash) / lease expired--> dead --join (respawn)--> alive (inc+1)
#include "actors/roles/health_monitor.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <fstream>

#include <fmt/format.h>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include <caf/all.hpp>

#include "actors/roles/fragment_owner.hpp"
#include "actors/services/run_log.hpp"
#include "actors/roles/supervisor.hpp"
#include "actors/link/wire_refusal.hpp"
#include "messages/codec.hpp"
#include "messages/control.hpp"

namespace dd::actors {

namespace {

double now_s(monitor_actor* self) { return clock_seconds(self->clock().now()); }

double unix_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

/// What the monitor writes into every envelope: the run and the syncer's incarnation.
envelope_stamp stamp_of(const monitor_context& ctx) { return {ctx.run_id, ctx.syncer_incarnation}; }

/// What it accepts: its run. A learner's incarnation is checked against the monitor's record
/// where the message names one (heartbeat, leave), and the codec checks that the body's
/// incarnation is the envelope's.
envelope_expect expect_of(const monitor_context& ctx) { return {ctx.run_id, 0}; }

/// The live view as a wire message (wire.capnp LiveView) and the learners' handles, in order.
std::pair<wire_bytes, std::vector<learner_at_owner_hdl>> make_view(monitor_actor* self,
                                                                   const monitor_context& ctx) {
  live_view_msg v;
  std::vector<learner_at_owner_hdl> handles;
  v.epoch = self->state.epoch;
  for (const auto& [id, r] : self->state.learners)
    if (r.alive) {
      v.learners.push_back({id, r.incarnation, r.step_time_ema_s});
      handles.push_back(r.handle);
    }
  return {encode(v, stamp_of(ctx)), std::move(handles)};
}

void publish(monitor_actor* self, const monitor_context& ctx, bool changed) {
  if (changed) ++self->state.epoch;
  auto [bytes, handles] = make_view(self, ctx);
  for (const auto& o : self->state.owners)
    if (o) self->send(o, atoms::live_atom_v, bytes, handles);
}

/// The owner directory as a wire message (wire.capnp OwnerDirectory) and the owners' handles.
std::pair<wire_bytes, std::vector<owner_hdl>> make_directory(const monitor_state& st,
                                                             const monitor_context& ctx) {
  owner_directory dir;
  std::vector<owner_hdl> handles;
  for (size_t p = 0; p < st.owners.size(); ++p)
    if (st.owners[p]) {
      dir.fragment_ids.push_back(static_cast<int32_t>(p));
      handles.push_back(st.owners[p]);
    }
  return {encode(dir, stamp_of(ctx)), std::move(handles)};
}

void send_owners(monitor_actor* self, const monitor_context& ctx,
                 const learner_at_monitor_hdl& learner) {
  auto [bytes, handles] = make_directory(self->state, ctx);
  self->send(learner, atoms::owners_atom_v, std::move(bytes), std::move(handles));
}

uint64_t total_tokens(const monitor_state& st) {
  uint64_t t = 0;
  for (const auto& [id, r] : st.learners) t += r.tokens_before + r.tokens_this_incarnation;
  return t;
}

/// Hands the monitor's uptime figures (integrated up to now) to the run log.
void push_uptime(monitor_actor* self, const monitor_context& ctx) {
  auto& u = self->state.uptime;
  u.advance(now_s(self));
  const auto& st = self->state;
  if (ctx.log != nullptr)
    ctx.log->set_uptime(st.uptime_before_s + u.uptime_s(), st.observed_before_s + u.observed_s());
}

/// Why learner `id` cannot be drained (dd-node drain): an id outside the run, one that never
/// joined, one that finished, or one whose link is down (since when and why).
std::string drain_refusal(monitor_actor* self, const monitor_context& ctx, int32_t id) {
  const std::string name = "learner:" + std::to_string(id);
  if (id < 0 || id >= ctx.learners)
    return fmt::format("no such learner: {} (the run has learners 0..{})", name, ctx.learners - 1);
  auto it = self->state.learners.find(id);
  if (it == self->state.learners.end()) return name + " has not joined yet";
  const auto& r = it->second;
  if (r.finished) return fmt::format("{} has finished (left at step {})", name, r.step);
  if (r.down_reason.empty())  // restored from the record of a resumed run, not back yet
    return name + " is not connected (not rejoined since this syncer started)";
  return fmt::format(
      "{} is not connected (link down since {:.1f} s ago: {}); drain it once it "
      "rejoins",
      name, now_s(self) - r.down_since_s, r.down_reason);
}

void declare_dead(monitor_actor* self, const monitor_context& ctx, int32_t id,
                  const std::string& why) {
  auto& r = self->state.learners[id];
  if (!r.alive) return;
  r.alive = false;
  r.down_since_s = now_s(self);
  r.down_reason = why;
  self->state.uptime.stop(id, r.down_since_s);
  push_uptime(self, ctx);
  if (ctx.log != nullptr) {
    ctx.log->emit(
        "failure",
        {{"learner", id}, {"incarnation", r.incarnation}, {"reason", why}, {"step", r.step}});
    ctx.log->update([&](run_counters& c) {
      c.learners[id].alive = false;
      c.learners[id].stepping = false;
    });
    ctx.log->set_stepping(id, false);
  }
  publish(self, ctx, true);
}

size_t live_count(const monitor_state& st) {
  size_t live = 0;
  for (const auto& [id, l] : st.learners)
    if (l.alive) ++live;
  return live;
}

/// Remote learners: tells the job once every learner has left, or none is live after a stop.
void check_done(monitor_actor* self, const monitor_context& ctx) {
  auto& st = self->state;
  if (!ctx.remote_learners || st.done_reported || !ctx.job) return;
  size_t finished = 0;
  for (const auto& [id, r] : st.learners)
    if (r.finished) ++finished;
  const bool all_left = finished >= static_cast<size_t>(ctx.learners);
  if (all_left || (st.stopping && live_count(st) == 0)) {
    st.done_reported = true;
    self->send(ctx.job, atoms::children_done_atom_v, child_kind::learner);
  }
}

node_join_reply refuse(const monitor_context& ctx, node_refusal why, std::string reason) {
  node_join_reply rep;
  rep.accepted = false;
  rep.refusal = why;
  rep.reason = std::move(reason);
  rep.run_id = ctx.run_id;
  return rep;
}

/// The node handshake (see health_monitor.hpp).
node_join_reply on_node_join(monitor_actor* self, const monitor_context& ctx,
                             const wire_bytes& bytes) {
  auto& st = self->state;
  // A node's first start does not know the run yet: its envelope (like its body) may name none.
  auto header = peek_envelope(bytes);
  envelope_expect expect = expect_of(ctx);
  if (header && header->run_id.empty()) expect.run_id.clear();
  auto req = decode_node_join(bytes, {}, expect);
  if (!req && req.code() == errc::other_run)  // worded for both sides (both log it)
    return refuse(ctx, node_refusal::other_run,
                  "the node belongs to run '" + (header ? header->run_id : std::string("?")) +
                      "', this syncer runs run '" + ctx.run_id + "'");
  if (!req)
    return refuse(ctx, node_refusal::bad_request, "undecodable node_join: " + req.error().message);
  if (req->protocol_version != dd::protocol_version)
    return refuse(ctx, node_refusal::protocol_version,
                  "node speaks protocol version " + std::to_string(req->protocol_version) +
                      ", this syncer " + std::to_string(dd::protocol_version));
  if (!req->run_id.empty() && req->run_id != ctx.run_id)
    return refuse(
        ctx, node_refusal::other_run,
        "the node belongs to run '" + req->run_id + "', this syncer runs run '" + ctx.run_id + "'");
  node_join_reply rep;
  rep.accepted = true;
  rep.run_id = ctx.run_id;
  rep.experiment_json = ctx.experiment_json;
  rep.experiment_hash = ctx.experiment_hash;
  rep.data_bytes = ctx.data_bytes;
  rep.data_hash = ctx.data_hash;
  rep.steps_per_learner = ctx.steps_per_learner;
  const bool describe_only = req->learner_ids.empty() && req->learner_count == 0;
  if (describe_only) return rep;
  if (st.stopping) return refuse(ctx, node_refusal::run_finished, "the run is stopping");
  if (req->data_bytes != ctx.data_bytes || req->data_hash != ctx.data_hash)
    return refuse(ctx, node_refusal::data_mismatch,
                  "node's data has " + std::to_string(req->data_bytes) +
                      " bytes, training-split hash " + req->data_hash + "; the syncer's " +
                      std::to_string(ctx.data_bytes) + " bytes, hash " + ctx.data_hash);
  const double now = now_s(self);
  for (auto it = st.reserved.begin(); it != st.reserved.end();)
    it = it->second.second < now ? st.reserved.erase(it) : std::next(it);
  // The CAF node asking: a learner process that reconnected after its link dropped (the
  // monitor may not have noticed yet, or never does when CAF moved the node to the new
  // connection) gets its own live ids back; its learners then rejoin as new incarnations.
  const auto sender = self->current_sender();
  const caf::node_id asking = sender ? sender->node() : caf::node_id{};
  size_t finished_ids = 0;
  for (const auto& [id, r] : st.learners)
    if (r.finished) ++finished_ids;
  auto free_for = [&](int32_t id) {
    auto it = st.learners.find(id);
    if (it != st.learners.end() && it->second.alive && asking && it->second.caf_node == asking)
      return true;
    // The same node, by name, whose learner went silent: its link is gone on its side
    // (monitor_context::reclaim_min_s). A node whose learner still sends heartbeats keeps it.
    if (it != st.learners.end() && it->second.alive && !it->second.node.empty() &&
        it->second.node == req->node_name &&
        now - it->second.last_heartbeat_s >
            std::max(ctx.reclaim_min_s, 5.0 * it->second.step_time_ema_s))
      return true;
    // A learner that left (a stop signal to its process: `dd-chaos term`, an operator's
    // SIGTERM) is taken back by its own node started again (the launcher restarts a learner
    // process that exited non-zero) while the run goes on: it rejoins from the monitor's record
    // like a killed one. Its learners finish again at once if their budget was spent.
    if (it != st.learners.end() && it->second.finished && !it->second.alive &&
        !it->second.node.empty() && it->second.node == req->node_name &&
        finished_ids < static_cast<size_t>(ctx.learners))
      return true;
    if (it != st.learners.end() && (it->second.alive || it->second.finished)) return false;
    auto rv = st.reserved.find(id);
    return rv == st.reserved.end() || rv->second.first == req->node_name;
  };
  std::vector<int32_t> ids;
  if (!req->learner_ids.empty()) {
    for (auto id : req->learner_ids)
      if (id < ctx.learners && free_for(id)) ids.push_back(id);
  } else {
    for (int32_t id = 0; id < ctx.learners && ids.size() < req->learner_count; ++id)
      if (free_for(id)) ids.push_back(id);
  }
  if (ids.empty()) {
    size_t finished = 0;
    for (const auto& [id, r] : st.learners)
      if (r.finished) ++finished;
    if (finished >= static_cast<size_t>(ctx.learners))
      return refuse(ctx, node_refusal::run_finished, "every learner of the run has finished");
    return refuse(ctx, node_refusal::no_free_learner,
                  "no free learner id among those asked for (M = " + std::to_string(ctx.learners) +
                      "; live, finished or reserved by another node)");
  }
  for (auto id : ids) st.reserved[id] = {req->node_name, now + ctx.reserve_s};
  rep.learner_ids = ids;
  return rep;
}

std::string to_hex(const std::vector<uint8_t>& b) {
  static const char* d = "0123456789abcdef";
  std::string out;
  out.reserve(b.size() * 2);
  for (auto c : b) {
    out.push_back(d[c >> 4]);
    out.push_back(d[c & 15]);
  }
  return out;
}

std::vector<uint8_t> from_hex(const std::string& s) {
  auto v = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  if (s.size() % 2 != 0) throw std::invalid_argument("monitor record: odd-length data_cursor");
  std::vector<uint8_t> out(s.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    const int hi = v(s[2 * i]), lo = v(s[2 * i + 1]);
    if (hi < 0 || lo < 0) throw std::invalid_argument("monitor record: data_cursor is not hex");
    out[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  return out;
}

void save_record(monitor_actor* self, const monitor_context& ctx) {
  if (ctx.record_path.empty()) return;
  auto& s = self->state;
  const double now = now_s(self);
  s.last_record_s = now;
  const std::string text = monitor_record(s, now).dump() + "\n";
  auto st = write_file_atomic(ctx.record_path, reinterpret_cast<const uint8_t*>(text.data()),
                              text.size());
  if (ctx.log == nullptr) return;
  if (st) {
    if (s.record_failing) ctx.log->write_recovered(ctx.record_path);
    s.record_failing = false;
    return;
  }
  const std::string msg = "health monitor: cannot write its record: " + st.error().message;
  ctx.log->emit("failure", {{"what", "monitor_record"}, {"error", st.error().message}});
  if (!ctx.log->retry_writes()) {  // dd-node run: the run ends, naming the file
    ctx.log->write_failed(msg);
    return;
  }
  // A cluster node goes on, degraded, and tries again with backoff (0.5 s doubling to 10 s).
  s.record_backoff_s = s.record_failing ? std::min(10.0, s.record_backoff_s * 2) : 0.5;
  s.record_failing = true;
  s.record_retry_s = now + s.record_backoff_s;
  ctx.log->write_trouble(ctx.record_path, msg);
}

}  // namespace

nlohmann::json monitor_record(const monitor_state& st, double clock_s) {
  nlohmann::json learners = nlohmann::json::array();
  for (const auto& [id, r] : st.learners)
    learners.push_back({{"learner", id},
                        {"incarnation", r.incarnation},
                        {"finished", r.finished},
                        {"step", r.step},
                        {"tokens_before", r.tokens_before},
                        {"tokens_this_incarnation", r.tokens_this_incarnation},
                        {"compute_before_s", r.compute_before_s},
                        {"compute_this_incarnation_s", r.compute_this_incarnation_s},
                        {"data_cursor", to_hex(r.data_cursor)}});
  return {{"format", 1},
          {"mean_step", st.mean_step},
          {"training_seconds", st.seconds_before + std::max(0.0, clock_s - st.started_s)},
          {"uptime_s", st.uptime_before_s + st.uptime.uptime_s()},
          {"observed_s", st.observed_before_s + st.uptime.observed_s()},
          {"learners", learners}};
}

void restore_monitor_record(monitor_state& st, const nlohmann::json& rec) {
  try {
    if (rec.value("format", 0) != 1) throw std::invalid_argument("monitor record: unknown format");
    st.mean_step = rec.at("mean_step").get<double>();
    st.seconds_before = rec.value("training_seconds", 0.0);
    if (!(st.seconds_before >= 0.0) || !std::isfinite(st.seconds_before))
      throw std::invalid_argument("monitor record: training_seconds is not a finite number >= 0");
    st.uptime_before_s = rec.value("uptime_s", 0.0);
    st.observed_before_s = rec.value("observed_s", 0.0);
    if (!(st.uptime_before_s >= 0.0) || !(st.observed_before_s >= st.uptime_before_s) ||
        !std::isfinite(st.observed_before_s))
      throw std::invalid_argument(
          "monitor record: uptime_s and observed_s are not finite numbers with 0 <= uptime_s <= "
          "observed_s");
    for (const auto& l : rec.at("learners")) {
      auto& r = st.learners[l.at("learner").get<int32_t>()];
      r.incarnation = l.at("incarnation").get<uint64_t>();
      r.finished = l.at("finished").get<bool>();
      r.alive = false;
      r.step = l.at("step").get<uint64_t>();
      r.tokens_before = l.at("tokens_before").get<uint64_t>();
      r.tokens_this_incarnation = l.at("tokens_this_incarnation").get<uint64_t>();
      r.compute_before_s = l.at("compute_before_s").get<double>();
      r.compute_this_incarnation_s = l.at("compute_this_incarnation_s").get<double>();
      r.data_cursor = from_hex(l.at("data_cursor").get<std::string>());
    }
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("monitor record: ") + e.what());
  }
}

monitor_hdl::behavior_type health_monitor(monitor_actor* self,
                                          std::shared_ptr<const monitor_context> ctx) {
  drop_unexpected(self, ctx->log, "health monitor");
  self->state.owners.resize(static_cast<size_t>(std::max(ctx->fragments, 0)));
  if (!ctx->loss_path.empty()) {
    self->state.loss_csv = std::make_shared<retried_lines>(
        ctx->log, ctx->loss_path, "wall_time,learner,incarnation,step,tokens,loss,lr\n");
    self->state.loss_csv->append("");  // the header now (or its failure reported)
  }
  self->state.started_s = now_s(self);
  self->state.uptime = policy::uptime_meter(ctx->uptime_quorum, static_cast<size_t>(ctx->learners));
  if (!ctx->restored_record.is_null()) {
    restore_monitor_record(self->state, ctx->restored_record);
    if (ctx->log != nullptr) {
      uint64_t tokens = 0;
      for (const auto& [id, r] : self->state.learners)
        tokens += r.tokens_before + r.tokens_this_incarnation;
      ctx->log->emit("monitor_restored", {{"learners", self->state.learners.size()},
                                          {"tokens", tokens},
                                          {"training_seconds", self->state.seconds_before},
                                          {"mean_step", self->state.mean_step}});
      ctx->log->update([&](run_counters& c) {
        for (const auto& [id, r] : self->state.learners) {
          auto& ls = c.learners[id];
          ls.tokens = r.tokens_before + r.tokens_this_incarnation;
          ls.step = r.step;
          ls.compute_s = r.compute_before_s + r.compute_this_incarnation_s;
          ls.incarnation = r.incarnation;
        }
      });
      for (const auto& [id, r] : self->state.learners)
        if (r.finished) {
          ctx->log->learner_finished(id);
          self->state.uptime.finished(id, now_s(self));
        }
    }
    // A resumed run whose learners had all finished (stopped by a signal after the last step)
    // is done at once: no learner will join it (each is refused as finished), so waiting for
    // them left the syncer running for ever.
    check_done(self, *ctx);
  }
  self->set_down_handler([=](const caf::down_msg& dm) {
    for (auto& [id, r] : self->state.learners) {
      if (r.handle && r.handle.address() == dm.source) {
        if (!dm.reason || dm.reason == caf::exit_reason::normal) {
          if (r.alive) {
            r.alive = false;
            r.finished = !self->state.stopping;  // as for a leave (below)
            self->state.uptime.finished(id, now_s(self));
            push_uptime(self, *ctx);
            publish(self, *ctx, true);
          }
        } else {
          declare_dead(self, *ctx, id, self->system().render(dm.reason));
        }
        r.handle = nullptr;
        check_done(self, *ctx);
        return;
      }
    }
  });
  self->delayed_send(self, std::chrono::milliseconds(static_cast<int64_t>(ctx->tick_s * 1000)),
                     atoms::lease_atom_v);
  return {
      [=](atoms::join_atom, const std::vector<uint8_t>& bytes,
          const learner_at_syncer_hdl& learner) -> caf::result<std::vector<uint8_t>> {
        auto req = decode_join_request(bytes, {}, expect_of(*ctx));
        if (!req) {
          log_refused_message(ctx->log, "undecodable_join_request", req.error());
          return caf::make_error(caf::sec::invalid_argument, req.error().message);
        }
        auto& st = self->state;
        int32_t id = req->requested_learner_id;
        if (id < 0) {
          id = 0;
          while (st.learners.count(id) != 0) ++id;
        }
        if (id >= ctx->learners)
          return caf::make_error(caf::sec::invalid_argument,
                                 "learner id " + std::to_string(id) +
                                     " out of range (M = " + std::to_string(ctx->learners) + ")");
        if (st.stopping) return caf::make_error(caf::sec::invalid_argument, "the run is stopping");
        // Remote learners join only with an id their node's handshake reserved, or with the id of
        // a dead (not finished) learner from the CAF node it last joined from: a stranger (or a
        // second holder of a live learner id) is refused, and both sides log it.
        if (ctx->remote_learners) {
          auto rv = st.reserved.find(id);
          auto known_it = st.learners.find(id);
          // A learner actor respawned by its node's supervisor in the process that held its id:
          // its earlier incarnation joined from the same CAF node (the same learner process),
          // which the handle's address proves. It needs no new reservation, also when the
          // monitor has not yet seen the earlier incarnation's down message.
          const bool respawned_here = known_it != st.learners.end() && !known_it->second.finished &&
                                      known_it->second.caf_node && learner &&
                                      known_it->second.caf_node == learner.node();
          if ((rv == st.reserved.end() || rv->second.second < now_s(self)) && !respawned_here) {
            const bool live = known_it != st.learners.end() && known_it->second.alive;
            const std::string why =
                "learner " + std::to_string(id) + " joined without a node handshake reserving it" +
                (live ? " (it is live on node '" + known_it->second.node + "')" : "");
            if (ctx->log != nullptr) {
              ctx->log->emit("join_refused", {{"learner", id}, {"reason", why}});
              ctx->log->warn("refused a learner join: " + why);
            }
            return caf::make_error(caf::sec::invalid_argument, why);
          }
        }
        bool known = st.learners.count(id) != 0;
        auto& r = st.learners[id];
        // A live learner's compute seconds of its incarnation (a figure that is not a finite
        // non-negative number counts as none: the heartbeats' stands).
        const double live_compute_s =
            req->live && std::isfinite(req->compute_s) && req->compute_s > 0 ? req->compute_s : 0.0;
        if (known) {
          if (r.alive) declare_dead(self, *ctx, id, "replaced by a new incarnation");
          r.incarnation = std::max(r.incarnation, req->incarnation) + 1;
          // A live learner rejoining knows its tokens and compute seconds better than the last
          // heartbeat we have (those of its steps while the syncer was away never came).
          r.tokens_before += req->live ? std::max(req->tokens, r.tokens_this_incarnation)
                                       : r.tokens_this_incarnation;
          if (req->live) r.step = std::max(r.step, req->step);
          r.tokens_this_incarnation = 0;
          r.compute_before_s += std::max(live_compute_s, r.compute_this_incarnation_s);
          r.compute_this_incarnation_s = 0;
        }
        if (!known && req->live) {  // a syncer restarted without this learner's record
          r.incarnation = req->incarnation + 1;
          r.step = req->step;
          r.tokens_before = req->tokens;
          r.compute_before_s = live_compute_s;
        }
        {
          auto rv = st.reserved.find(id);
          if (rv != st.reserved.end()) {
            r.node = rv->second.first;
            st.reserved.erase(rv);
          }
        }
        r.alive = true;
        r.finished = false;
        r.straggler = false;
        r.handle = learner;
        if (learner) r.caf_node = learner.node();
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
          ctx->log->emit(known || req->live ? "rejoin" : "join", {{"learner", id},
                                                                  {"incarnation", r.incarnation},
                                                                  {"resume_step", r.step},
                                                                  {"live", req->live}});
          ctx->log->update([&](run_counters& c) {
            auto& ls = c.learners[id];
            ls.alive = true;
            ls.incarnation = r.incarnation;
            if (ctx->remote_learners && known && !req->live) {
              ls.restarts += 1;
              c.learner_restarts += 1;
            }
            // A live learner rejoining reports the tokens it trained while the syncer was away:
            // summary.json counts them as the budget does (before its next heartbeat, which may
            // never come when those tokens spent the budget).
            if (ctx->remote_learners && req->live) {
              ls.tokens = std::max(ls.tokens, r.tokens_before + r.tokens_this_incarnation);
              ls.step = std::max(ls.step, r.step);
              ls.compute_s = std::max(ls.compute_s, r.compute_before_s);
            }
          });
        }
        // The view goes to the owners before the reply reaches the learner, so a push can never
        // arrive at an owner ahead of the incarnation it carries.
        publish(self, *ctx, true);
        send_owners(self, *ctx, learner);
        return encode(rep, stamp_of(*ctx));
      },
      [=](atoms::heartbeat_atom, const std::vector<uint8_t>& bytes) {
        auto hb = decode_heartbeat(bytes, {}, expect_of(*ctx));
        if (!hb) {
          log_refused_message(ctx->log, "undecodable_heartbeat", hb.error());
          return;
        }
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
        const uint64_t advanced =
            hb->step > r.step ? std::min<uint64_t>(hb->step - r.step, 1000) : 0;
        st.mean_step +=
            static_cast<double>(advanced) / static_cast<double>(std::max<size_t>(1, live));
        r.step = hb->step;
        r.tokens_this_incarnation = hb->tokens;
        r.step_time_ema_s = hb->step_time_ema_s;
        r.data_cursor = hb->data_cursor;
        r.last_heartbeat_s = now_s(self);
        r.compute_this_incarnation_s = hb->compute_s;
        // It stepped: it counts toward the uptime for a few of its steps from now.
        if (ctx->uptime_last_step > 0 && hb->step >= ctx->uptime_last_step)
          st.uptime.finished(hb->learner_id, r.last_heartbeat_s);  // its training is over
        else
          st.uptime.heartbeat(
              hb->learner_id, r.last_heartbeat_s,
              std::max(ctx->uptime_window_min_s, ctx->uptime_window_steps * hb->step_time_ema_s));
        push_uptime(self, *ctx);
        if (st.loss_csv) {
          const std::string row = fmt::format(
              "{:.3f},{},{},{},{},{:.6f},{:.6g}\n", unix_now(), hb->learner_id, r.incarnation,
              hb->step, r.tokens_before + r.tokens_this_incarnation, hb->loss, hb->lr);
          st.loss_csv->append(row);
        }
        if (ctx->remote_learners && ctx->log != nullptr) {
          const uint64_t toks = r.tokens_before + r.tokens_this_incarnation;
          const double compute = r.compute_before_s + r.compute_this_incarnation_s;
          const int32_t id = hb->learner_id;
          ctx->log->update([&](run_counters& c) {
            auto& ls = c.learners[id];
            ls.step = hb->step;
            ls.tokens = toks;
            ls.loss = hb->loss;
            ls.compute_s = compute;
            ls.steps_per_s = hb->step_time_ema_s > 0 ? 1.0 / hb->step_time_ema_s : 0.0;
            ls.incarnation = r.incarnation;
            ls.alive = true;
          });
          ctx->log->set_stepping(id, true);
        }
        const uint64_t tokens = total_tokens(st);
        // Global progress: the push clock (sync.push_clock = global) and the lr schedule's clock
        // (inner.schedule_clock = global) follow it.
        if (auto sender = caf::actor_cast<learner_at_monitor_hdl>(self->current_sender())) {
          progress_msg pm;
          pm.total_tokens = tokens;
          pm.step = hb->step;
          pm.mean_step = st.mean_step;
          pm.live_learners = static_cast<uint32_t>(live);
          self->send(sender, atoms::progress_atom_v, encode(pm, stamp_of(*ctx)));
        }
        if (ctx->token_budget > 0 && !st.budget_reported && tokens >= ctx->token_budget) {
          st.budget_reported = true;
          st.uptime.freeze(now_s(self));  // the end of training
          push_uptime(self, *ctx);
          if (ctx->log != nullptr) ctx->log->emit("budget_spent", {{"tokens", tokens}});
          if (ctx->job) self->send(ctx->job, atoms::budget_spent_atom_v);
        }
      },
      [=](atoms::node_join_atom, const std::vector<uint8_t>& bytes) -> std::vector<uint8_t> {
        auto rep = on_node_join(self, *ctx, bytes);
        if (ctx->log != nullptr) {
          // For the log only: the node's name, whatever run it named.
          auto header = peek_envelope(bytes);
          auto req = decode_node_join(bytes, {}, {header ? header->run_id : std::string(), 0});
          const std::string node = req ? req->node_name : std::string("?");
          if (rep.accepted) {
            if (!rep.learner_ids.empty())
              ctx->log->emit(
                  "node_join",
                  {{"node", node}, {"host", req ? req->host : ""}, {"learners", rep.learner_ids}});
          } else {
            ctx->log->emit("node_refused", {{"node", node},
                                            {"refusal", std::string(to_string(rep.refusal))},
                                            {"reason", rep.reason}});
            ctx->log->warn("refused learner node '" + node + "': " + rep.reason);
          }
        }
        return encode(rep, stamp_of(*ctx));
      },
      // From the job (the job, in this process): stop every live learner.
      [=](atoms::stop_atom) {
        auto& st = self->state;
        st.stopping = true;
        st.uptime.freeze(now_s(self));
        push_uptime(self, *ctx);
        const auto stop = encode(stop_msg{"the run is stopping"}, stamp_of(*ctx));
        for (const auto& [id, r] : st.learners)
          if (r.alive && r.handle) self->send(r.handle, atoms::stop_atom_v, stop);
        check_done(self, *ctx);
      },
      [=](atoms::events_atom, const std::vector<uint8_t>& bytes) -> bool {
        // The codec checks the node name's alphabet (it names a file) and the 1 MiB cap.
        auto ev = decode_node_events(bytes, {}, expect_of(*ctx));
        if (!ev) {
          log_refused_message(ctx->log, "undecodable_node_events", ev.error());
          return false;
        }
        if (ctx->forward_dir.empty()) return false;
        const std::string& node = ev->node;
        const std::string& lines = ev->lines;
        auto& f = self->state.forwarded[node];
        if (!f)  // (it makes forward_dir when it first writes)
          f = std::make_shared<retried_lines>(ctx->log,
                                              ctx->forward_dir + "/" + node + ".events.jsonl");
        // Whole lines only: a line cut by the sender's cap is dropped with its tail.
        f->append(lines);
        return true;
      },
      // dd-node drain: the operator names the run (it read it from a status reply first).
      [=](atoms::drain_atom,
          const std::vector<uint8_t>& bytes) -> caf::result<std::vector<uint8_t>> {
        auto req = decode_drain(bytes, {}, expect_of(*ctx));
        if (!req) {
          log_refused_message(ctx->log, "undecodable_drain", req.error());
          return caf::make_error(caf::sec::invalid_argument, req.error().message);
        }
        const int32_t id = req->learner_id;
        auto& st = self->state;
        auto it = st.learners.find(id);
        drain_reply rep;
        if (it == st.learners.end() || !it->second.alive || !it->second.handle) {
          rep.detail = drain_refusal(self, *ctx, id);
          return encode(rep, stamp_of(*ctx));
        }
        self->send(it->second.handle, atoms::stop_atom_v,
                   encode(stop_msg{"drained by the operator"}, stamp_of(*ctx)));
        if (ctx->log != nullptr) ctx->log->emit("drain", {{"learner", id}});
        rep.accepted = true;
        rep.detail = "learner " + std::to_string(id) + " (incarnation " +
                     std::to_string(it->second.incarnation) + ", node " + it->second.node +
                     ") stops at its next step and leaves";
        return encode(rep, stamp_of(*ctx));
      },
      // dd-node status: read-only, so an operator that does not know the run yet may ask
      // without naming one (an empty run id); the reply's envelope tells it. A request that
      // names another run is refused.
      [=](atoms::status_atom,
          const std::vector<uint8_t>& bytes) -> caf::result<std::vector<uint8_t>> {
        auto header = peek_envelope(bytes);
        envelope_expect expect = expect_of(*ctx);
        if (header && header->run_id.empty()) expect.run_id.clear();
        if (auto req = decode_status_request(bytes, {}, expect); !req) {
          log_refused_message(ctx->log, "undecodable_status_request", req.error());
          return caf::make_error(caf::sec::invalid_argument, req.error().message);
        }
        const auto& st = self->state;
        const double now = now_s(self);
        nlohmann::json learners = nlohmann::json::array();
        for (const auto& [id, r] : st.learners)
          learners.push_back({{"learner", id},
                              {"incarnation", r.incarnation},
                              {"alive", r.alive},
                              {"finished", r.finished},
                              {"straggler", r.straggler},
                              {"node", r.node},
                              {"step", r.step},
                              {"tokens", r.tokens_before + r.tokens_this_incarnation},
                              {"lease_age_s", r.alive ? now - r.last_heartbeat_s : 0.0}});
        nlohmann::json out = {{"run_id", ctx->run_id},
                              {"epoch", st.epoch},
                              {"learners_expected", ctx->learners},
                              {"learners", learners},
                              {"stopping", st.stopping},
                              {"total_tokens", total_tokens(st)},
                              {"mean_step", st.mean_step}};
        if (ctx->log != nullptr) {
          nlohmann::json versions = nlohmann::json::object();
          for (const auto& [p, v] : ctx->log->snapshot().versions) versions[std::to_string(p)] = v;
          out["fragment_versions"] = versions;
        }
        return encode(
            status_reply{out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)},
            stamp_of(*ctx));
      },
      // Answers true once the leave is recorded, or when there is nothing to record (a repeated
      // leave, or one of an older incarnation): the learner may exit. An undecodable one is an
      // error (the learner retries, then keeps it for the next syncer).
      [=](atoms::leave_atom, const std::vector<uint8_t>& bytes) -> caf::result<bool> {
        auto lm = decode_leave(bytes, {}, expect_of(*ctx));
        if (!lm) {
          log_refused_message(ctx->log, "undecodable_leave", lm.error());
          return caf::make_error(caf::sec::invalid_argument, lm.error().message);
        }
        const int32_t id = lm->learner_id;
        const uint64_t incarnation = lm->incarnation;
        auto& st = self->state;
        auto it = st.learners.find(id);
        if (it == st.learners.end() || it->second.incarnation != incarnation) return true;
        if (it->second.alive) {
          it->second.alive = false;
          // One that leaves because the run was stopped (a signal to the syncer) has not
          // finished its budget: the record keeps it unfinished, so a resumed run takes it back
          // (it was refused as finished, and the resumed run ended at once). Nor has one whose
          // own node was stopped (Ctrl-C on a learner started by hand): its id waits for the
          // next node, and the run goes on (it once ended the run as done at 58 of 300 steps).
          it->second.finished = !st.stopping && !lm->interrupted;
          st.uptime.finished(id, now_s(self));
          push_uptime(self, *ctx);
          if (ctx->log != nullptr)
            ctx->log->emit(
                "leave",
                {{"learner", id}, {"incarnation", incarnation}, {"step", it->second.step}});
          // The progress line shows a finished learner as "left", one whose node was stopped
          // (its id waits for the next node) as away (✗).
          if (ctx->remote_learners && ctx->log != nullptr) {
            if (it->second.finished)
              ctx->log->learner_finished(id);
            else
              ctx->log->update([id](run_counters& c) {
                c.learners[id].alive = false;
                c.learners[id].stepping = false;
              });
          }
          publish(self, *ctx, true);
          save_record(self, *ctx);
        }
        check_done(self, *ctx);
        return true;
      },
      // An owner (the sender) holds this fragment now.
      [=](atoms::subscribe_atom, const std::vector<uint8_t>& bytes) {
        auto sub = decode_subscribe(bytes, {}, expect_of(*ctx));
        if (!sub) {
          log_refused_message(ctx->log, "undecodable_subscribe", sub.error());
          return;
        }
        auto owner = caf::actor_cast<owner_hdl>(self->current_sender());
        auto& st = self->state;
        const int32_t fragment = sub->fragment_id;
        if (!owner || static_cast<size_t>(fragment) >= st.owners.size()) return;
        st.owners[static_cast<size_t>(fragment)] = owner;
        auto [view, handles] = make_view(self, *ctx);
        self->send(owner, atoms::live_atom_v, std::move(view), std::move(handles));
        for (const auto& [id, r] : st.learners)
          if (r.alive && r.handle) send_owners(self, *ctx, r.handle);
      },
      // The owner directory for the evaluator (bytes and the owners' handles, in order).
      [=](caf::get_atom,
          atoms::owners_atom) -> caf::result<std::vector<uint8_t>, std::vector<owner_hdl>> {
        auto [bytes, handles] = make_directory(self->state, *ctx);
        return {std::move(bytes), std::move(handles)};
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
            ctx->log->emit(
                "straggler",
                {{"learner", id}, {"step_time_s", r.step_time_ema_s}, {"median_s", median}});
          r.straggler = slow;
        }
        for (auto id : expired) {
          auto handle = st.learners[id].handle;
          declare_dead(self, *ctx, id, "lease expired");
          if (handle) self->send_exit(handle, caf::exit_reason::kill);
        }
        publish(self, *ctx, false);
        push_uptime(self, *ctx);  // a window that ran out lowers it without a message
        if (!ctx->record_path.empty() &&
            (st.record_failing ? now >= st.record_retry_s
                               : now - st.last_record_s >= ctx->record_every_s))
          save_record(self, *ctx);
        // Lines of a file whose write failed: again once their backoff expired.
        if (st.loss_csv) st.loss_csv->retry();
        for (auto& [node, f] : st.forwarded) f->retry();
        self->delayed_send(self,
                           std::chrono::milliseconds(static_cast<int64_t>(ctx->tick_s * 1000)),
                           atoms::lease_atom_v);
      },
  };
}

}  // namespace dd::actors
