// actors/roles/monitor_log.cpp — see monitor_log.hpp.
#include "actors/roles/monitor_log.hpp"

#include <algorithm>

#include "actors/services/run_log.hpp"

namespace dd::actors::monitor_log {

void dead(event_sink* log, const learner_down& d) {
  if (log == nullptr) return;
  log->emit(
      "failure",
      {{"learner", d.id}, {"incarnation", d.incarnation}, {"reason", d.reason}, {"step", d.step}});
  log->update([&](run_counters& c) {
    c.learners[d.id].alive = false;
    c.learners[d.id].stepping = false;
  });
  log->set_stepping(d.id, false);
}

void joined(event_sink* log, bool remote, const join_decision& d, const learner_record& r) {
  if (log == nullptr) return;
  log->emit(d.what == join_decision::verdict::rejoined ? "rejoin" : "join",
            {{"learner", d.id},
             {"incarnation", d.incarnation},
             {"resume_step", r.step},
             {"live", d.live}});
  log->update([&](run_counters& c) {
    auto& ls = c.learners[d.id];
    ls.alive = true;
    ls.incarnation = d.incarnation;
    if (d.restart) {
      ls.restarts += 1;
      c.learner_restarts += 1;
    }
    // A live learner rejoining reports the tokens it trained while the syncer was away:
    // summary.json counts them as the budget does (before its next heartbeat, which may never
    // come when those tokens spent the budget).
    if (remote && d.live) {
      ls.tokens = std::max(ls.tokens, r.tokens());
      ls.step = std::max(ls.step, r.step);
      ls.compute_s = std::max(ls.compute_s, r.compute_before_s);
    }
  });
}

void join_refused(event_sink* log, int32_t id, const std::string& why) {
  if (log == nullptr) return;
  log->emit("join_refused", {{"learner", id}, {"reason", why}});
  log->warn("refused a learner join: " + why);
}

void heartbeat(event_sink* log, bool remote, const heartbeat_msg& hb, const learner_record& r) {
  if (!remote || log == nullptr) return;
  log->update([&](run_counters& c) {
    auto& ls = c.learners[hb.learner_id];
    ls.step = hb.step;
    ls.tokens = r.tokens();
    ls.loss = hb.loss;
    ls.compute_s = r.compute_s();
    ls.steps_per_s = hb.step_time_ema_s > 0 ? 1.0 / hb.step_time_ema_s : 0.0;
    ls.incarnation = r.incarnation;
    ls.alive = true;
    ls.last_report_s = log->now();
  });
  log->set_stepping(hb.learner_id, true);
}

void left(event_sink* log, bool remote, int32_t id, uint64_t incarnation, const leave_decision& d) {
  if (log == nullptr) return;
  log->emit("leave", {{"learner", id}, {"incarnation", incarnation}, {"step", d.step}});
  if (!remote) return;
  // A learner stopped with the run (its leave arrives after the job's stop) is done like one
  // that finished its budget, though the record keeps it unfinished for a resumed run.
  if (!d.away)
    log->learner_finished(id);
  else
    log->update([id](run_counters& c) {
      c.learners[id].alive = false;
      c.learners[id].stepping = false;
    });
}

void node_join(event_sink* log, const wire_bytes& bytes, const node_join_reply& rep) {
  if (log == nullptr) return;
  auto header = peek_envelope(bytes);
  auto req = decode_node_join(bytes, {}, {header ? header->run_id : std::string(), 0});
  const std::string node = req ? req->node_name : std::string("?");
  if (rep.refusal == node_refusal::auth_challenge) return;  // the handshake's first step
  if (rep.accepted) {
    if (!rep.learner_ids.empty())
      log->emit("node_join",
                {{"node", node}, {"host", req ? req->host : ""}, {"learners", rep.learner_ids}});
    return;
  }
  log->emit(
      "node_refused",
      {{"node", node}, {"refusal", std::string(to_string(rep.refusal))}, {"reason", rep.reason}});
  log->warn("refused learner node '" + node + "': " + rep.reason);
}

void restored(event_sink* log, const membership& m) {
  if (log == nullptr) return;
  const auto& learners = m.learners();
  log->emit("monitor_restored", {{"learners", learners.size()},
                                 {"tokens", m.total_tokens()},
                                 {"training_seconds", m.seconds_before()},
                                 {"mean_step", m.mean_step()}});
  log->update([&](run_counters& c) {
    for (const auto& [id, r] : learners) {
      auto& ls = c.learners[id];
      ls.tokens = r.tokens();
      ls.step = r.step;
      ls.compute_s = r.compute_s();
      ls.incarnation = r.incarnation;
      ls.loss = r.last_loss;  // NaN when the record has none: the progress line shows "—"
    }
  });
  for (const auto& [id, r] : learners)
    if (r.finished) log->learner_finished(id);
}

void record_written(event_sink* log, const status& st, const std::string& recovered) {
  if (log == nullptr) return;
  if (st) {
    if (!recovered.empty()) log->write_recovered(recovered);
    return;
  }
  log->emit("failure", {{"what", "monitor_record"}, {"error", st.error().message}});
}

void stragglers(event_sink* log, const std::vector<straggler_flag>& flags) {
  if (log == nullptr) return;
  for (const auto& s : flags)
    log->emit("straggler",
              {{"learner", s.id}, {"step_time_s", s.step_time_s}, {"median_s", s.median_s}});
}

}  // namespace dd::actors::monitor_log
