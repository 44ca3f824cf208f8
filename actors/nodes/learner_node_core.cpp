// actors/nodes/learner_node_core.cpp — see learner_node_core.hpp.
#include "actors/nodes/learner_node_core.hpp"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include <fmt/format.h>

namespace dd::actors {

bool refusal_is_retried(node_refusal r) {
  return r == node_refusal::no_free_learner || r == node_refusal::bad_request;
}

int refusal_status(node_refusal r) {
  switch (r) {
    case node_refusal::other_run: return node_exit_other_run;
    case node_refusal::protocol_version: return node_exit_protocol;
    case node_refusal::data_mismatch: return node_exit_data_mismatch;
    case node_refusal::run_finished: return node_exit_ok;
    case node_refusal::bad_request: return node_exit_usage;
    case node_refusal::unauthorized: return node_exit_unauthorized;
    case node_refusal::auth_challenge:
    case node_refusal::none:
    case node_refusal::no_free_learner: return node_exit_failure;
  }
  return node_exit_failure;
}

bool lookup_error_leaves_stale_connection(const std::string& error) {
  return error.find("disconnect_during_handshake") != std::string::npos ||
         error.find("unexpected_actor_messaging_interface") != std::string::npos;
}

step_gate_plan plan_step_gate(const std::string& spec, unsigned hw, int threads, int learners) {
  step_gate_plan g;
  if (!spec.empty()) {
    if (spec.rfind("sysv:", 0) != 0) {
      g.error = fmt::format("dd-node learner: --step-admission '{}' is not sysv:ID", spec);
      return g;
    }
    g.what = step_gate_plan::kind::host;
    g.sysv_id = std::atoi(spec.c_str() + 5);
    return g;
  }
  const unsigned slots =
      std::max(1u, std::max(1u, hw) / static_cast<unsigned>(std::max(1, threads)));
  if (learners > 1 && slots < static_cast<unsigned>(learners)) {
    g.what = step_gate_plan::kind::local;
    g.slots = slots;
  }
  return g;
}

bool acts_in_learner_node(const fault_spec& f, bool message_faults_via_endpoint) {
  return f.what != fault_kind::kill_owner &&
         !(f.live_window && config::is_broadcast_fault(f.live.what)) &&
         !(message_faults_via_endpoint && is_message_fault(f));
}

const char* to_string(learner_node_state s) {
  switch (s) {
    case learner_node_state::connecting: return "connecting";
    case learner_node_state::asking_ids: return "asking_ids";
    case learner_node_state::running: return "running";
    case learner_node_state::syncer_lost: return "syncer_lost";
    case learner_node_state::stopping: return "stopping";
    case learner_node_state::finished: return "finished";
  }
  return "?";
}

handshake_outcome handshake_outcome::accepted(std::string run_id) {
  handshake_outcome r;
  r.what = kind::accepted;
  r.run_id = std::move(run_id);
  return r;
}

handshake_outcome handshake_outcome::refused(node_refusal ref, std::string why) {
  handshake_outcome r;
  r.what = kind::refused;
  r.refusal = ref;
  r.why = std::move(why);
  return r;
}

handshake_outcome handshake_outcome::failed(std::string why, bool unanswered, bool dead_handle) {
  handshake_outcome r;
  r.what = kind::failed;
  r.why = std::move(why);
  r.unanswered = unanswered;
  r.dead_handle = dead_handle;
  return r;
}

learner_node_core::learner_node_core(learner_node_core_options o) : o_(std::move(o)) {}

learner_node_state learner_node_core::state() const {
  if (done_) return learner_node_state::finished;
  if (!described_) return learner_node_state::connecting;
  if (!started_) return learner_node_state::asking_ids;
  if (stopping_) return learner_node_state::stopping;
  if (lost_) return learner_node_state::syncer_lost;
  return learner_node_state::running;
}

namespace {

std::string refused_line(const std::string& who, const handshake_outcome& r) {
  return fmt::format("dd-node learner{}: refused by the syncer ({}): {}", who, to_string(r.refusal),
                     r.why);
}

}  // namespace

node_actions learner_node_core::on_startup_check(double now_s, bool interrupted,
                                                 const std::string& last_error) {
  if (interrupted) return {node_do::exit_node{node_exit_interrupted}};
  if (state() == learner_node_state::connecting && o_.join_deadline_s > 0 &&
      now_s - o_.started_at_s > o_.join_deadline_s)
    return {node_do::say{fmt::format("dd-node learner: no syncer reached within --join-deadline "
                                     "{:.0f} s (last: {})",
                                     o_.join_deadline_s, last_error)},
            node_do::exit_node{node_exit_deadline}};
  return {};
}

node_actions learner_node_core::on_startup_lookup_failed(const std::string& error) {
  if (!lookup_error_leaves_stale_connection(error)) return {};
  return {node_do::drop_connections{error, false}};
}

node_actions learner_node_core::on_described(const handshake_outcome& r, int attempt) {
  switch (r.what) {
    case handshake_outcome::kind::failed: {
      // An unanswered describe was sent to a syncer just reached, which answers in
      // milliseconds: its reply was lost, e.g. sent by the syncer's middleman down a route to
      // this node that CAF dropped while the connection stayed open (CAF 0.17 cleans a closed
      // connection's route up after the fact, keyed by its socket descriptor, which a connection
      // accepted in between may already have: that cleanup then drops the new connection's
      // route). Nothing comes back on such a connection until CAF's connection timeout closes
      // it, so the node shuts its sockets to the syncer down and asks again at once on a fresh
      // connection, once per backoff step (docs/nodes.md "The node handshake"). Any other
      // failure (a dead handle, an error, an undecodable reply), and a second unanswered one in
      // a row, is a failed attempt: the next one waits its backoff step.
      if (r.unanswered && handshake_retried_at_ != attempt) {
        handshake_retried_at_ = attempt;
        return {node_do::drop_connections{r.why, false}, node_do::retry_at_once{r.why},
                node_do::say{fmt::format(
                    "dd-node learner {}: describe handshake unanswered ({}); retrying at once "
                    "on a fresh connection",
                    o_.name, r.why)}};
      }
      return {node_do::backoff{r.why}};
    }
    case handshake_outcome::kind::refused:
      if (refusal_is_retried(r.refusal))
        return {node_do::say{refused_line("", r)}, node_do::backoff{r.why}};
      return {node_do::say{refused_line("", r)}, node_do::exit_node{refusal_status(r.refusal)}};
    case handshake_outcome::kind::accepted: break;
  }
  described_ = true;
  handshake_retried_at_ = -1;
  return {node_do::set_deadline{0.0, true}};
}

node_actions learner_node_core::on_experiment(bool loads, const std::string& load_error,
                                              const std::string& memory_refusal) {
  if (!loads)
    return {node_do::say{fmt::format(
                "dd-node learner: the syncer's experiment does not load here: {}", load_error)},
            node_do::exit_node{node_exit_failure}};
  if (!memory_refusal.empty())
    return {node_do::say{fmt::format("dd-node learner {}: {}", o_.name, memory_refusal)},
            node_do::exit_node{node_exit_usage}};
  return {};
}

node_actions learner_node_core::on_data(const node_data_check& d) {
  if (!d.error.empty())
    return {node_do::say{fmt::format(
                "dd-node learner: {} ({})", d.error,
                d.from_flag ? "from --data"
                            : "the path the syncer's experiment names; give --data FILE")},
            node_do::exit_node{node_exit_usage}};
  if (d.bytes_here == d.bytes_there && d.hash_here == d.hash_there) return {};
  return {node_do::say{fmt::format(
      "dd-node learner: data file '{}' differs from the syncer's ({} bytes, hash {} here; {} "
      "bytes, hash {} there)",
      d.name, d.bytes_here, d.hash_here, d.bytes_there, d.hash_there)}};
}

node_actions learner_node_core::on_ids(const handshake_outcome& r, double now_s) {
  if (r.what == handshake_outcome::kind::accepted) return {};
  if (r.what == handshake_outcome::kind::refused && !refusal_is_retried(r.refusal)) {
    node_actions out{node_do::say{refused_line("", r)}};
    if (r.refusal == node_refusal::run_finished)
      out.push_back(node_do::say{
          fmt::format("dd-node learner {}: nothing to do, the run is over", o_.name), false});
    out.push_back(node_do::exit_node{refusal_status(r.refusal)});
    return out;
  }
  if (o_.join_deadline_s > 0 && now_s - o_.started_at_s > o_.join_deadline_s)
    return {node_do::say{fmt::format(
                "dd-node learner: no learner id given within --join-deadline {:.0f} s (last: {})",
                o_.join_deadline_s, r.why)},
            node_do::exit_node{node_exit_deadline}};
  // An unanswered ask for ids was lost as an unanswered describe is (on_described): the syncer's
  // middleman may route nothing to this node on that connection though it stays open, so the
  // node shuts its sockets to the syncer down and asks again at once on a fresh connection, once
  // per round of asks. The syncer may have granted the lost ask: it grants a node's own
  // reservations to that node again (membership::node_join), so the repeated ask reserves no
  // other id.
  if (r.what == handshake_outcome::kind::failed && r.unanswered &&
      ids_retried_round_ != ids_round_) {
    ids_retried_round_ = ids_round_;
    return {node_do::drop_connections{r.why, false}, node_do::retry_at_once{r.why},
            node_do::say{fmt::format("dd-node learner {}: ask for learner ids unanswered ({}); "
                                     "retrying at once on a fresh connection",
                                     o_.name, r.why)}};
  }
  ++ids_round_;
  return {node_do::say{fmt::format("dd-node learner: {}; asking again in 2 s", r.why)},
          node_do::wait{2.0}};
}

void learner_node_core::on_started(double now_s) {
  started_ = true;
  last_progress_ = now_s;
  last_flush_ = now_s;
  last_outage_sample_ = 0.0;
}

node_actions learner_node_core::on_children_done() {
  done_ = true;
  return {};
}

node_actions learner_node_core::on_monitor_down(const std::string& reason, bool link_unreachable,
                                                double now_s) {
  lost_ = true;
  node_actions out{node_do::close_channels{"the syncer was lost"}};
  last_outage_sample_ = now_s;  // syncer_lost is the first sample
  if (!link_unreachable) out.push_back(node_do::drop_connections{reason});
  if (o_.join_deadline_s > 0) {
    deadline_at_ = now_s + o_.join_deadline_s;
    out.push_back(node_do::set_deadline{deadline_at_, false});
  }
  out.push_back(node_do::emit{"syncer_lost", {{"reason", reason}}, true});
  out.push_back(node_do::say{
      fmt::format("dd-node learner {}: lost the syncer ({}); learners keep stepping, reconnecting",
                  o_.name, reason)});
  return out;
}

node_actions learner_node_core::on_channel_lost(const std::string& why) {
  if (why.empty() || lost_) return {};
  return {node_do::drop_connections{why}};
}

void learner_node_core::stop(int status, node_actions& out) {
  status_ = status;
  stopping_ = true;
  out.push_back(node_do::stop_learners{});
}

node_actions learner_node_core::on_interrupt(int signal) {
  if (stopping_) return {};
  node_actions out{node_do::say{fmt::format(
      "dd-node learner {}: signal received, learners stop at their next step", o_.name)}};
  stop(128 + signal, out);
  return out;
}

node_actions learner_node_core::on_deadline_check(double now_s, const std::string& last_error) {
  if (!lost_ || stopping_ || deadline_at_ <= 0 || now_s <= deadline_at_) return {};
  node_actions out{node_do::say{
      fmt::format("dd-node learner {}: the syncer stayed unreachable for --join-deadline {:.0f} s "
                  "(last: {}); stopping the learners",
                  o_.name, o_.join_deadline_s, last_error)}};
  stop(node_exit_deadline, out);
  return out;
}

node_actions learner_node_core::on_rejoin_lookup_failed(const std::string& error, double took_s) {
  node_actions out{node_do::emit{"rejoin_attempt",
                                 {{"stage", "connect"}, {"error", error}, {"took_s", took_s}}}};
  if (lookup_error_leaves_stale_connection(error)) out.push_back(node_do::drop_connections{error});
  return out;
}

double learner_node_core::rejoin_handshake_timeout_s(int attempt, double connect_timeout_s) const {
  const double full = std::max(1.0, connect_timeout_s);
  return handshake_retried_at_ == attempt ? full : std::min(full, first_handshake_s);
}

double learner_node_core::describe_handshake_timeout_s(int attempt) const {
  return handshake_retried_at_ == attempt ? describe_handshake_s : first_handshake_s;
}

double learner_node_core::ids_handshake_timeout_s() const {
  return ids_retried_round_ == ids_round_ ? describe_handshake_s : first_handshake_s;
}

node_actions learner_node_core::on_rejoin(const handshake_outcome& r, int attempt, double took_s) {
  node_actions out;
  switch (r.what) {
    case handshake_outcome::kind::failed: {
      // CAF drops a message to a dead proxy without an answer, and a live syncer answers in
      // milliseconds: a dead handle or an unanswered handshake is a failed attempt (backoff),
      // and a dead handle makes the node shut its sockets to the syncer down. An unanswered one
      // was sent to a syncer just reached, so it is first retried at once on a fresh connection
      // (sockets shut down): its reply may have been lost with a connection that dropped again
      // under load, or sent by the syncer's middleman down a stale route to this node. Once per
      // backoff step: a second one in a row is a failed attempt.
      const bool at_once = r.unanswered && handshake_retried_at_ != attempt;
      out.push_back(node_do::emit{"rejoin_attempt",
                                  {{"stage", "handshake"},
                                   {"error", r.why},
                                   {"took_s", took_s},
                                   {"retry_at_once", at_once}}});
      if (r.dead_handle || at_once) out.push_back(node_do::drop_connections{r.why});
      if (at_once) {
        handshake_retried_at_ = attempt;
        out.push_back(node_do::retry_at_once{r.why});
      } else {
        out.push_back(node_do::backoff{r.why});
      }
      out.push_back(node_do::say{fmt::format("dd-node learner {}: rejoin handshake failed ({}){}",
                                             o_.name, r.why, at_once ? "; retrying at once" : "")});
      return out;
    }
    case handshake_outcome::kind::refused:
      out.push_back(node_do::say{refused_line(" " + o_.name, r)});
      if (refusal_is_retried(r.refusal))
        out.push_back(node_do::backoff{r.why});  // the next attempt after a backoff step
      else
        stop(refusal_status(r.refusal), out);
      return out;
    case handshake_outcome::kind::accepted: break;
  }
  lost_ = false;
  deadline_at_ = 0.0;
  handshake_retried_at_ = -1;
  out.push_back(node_do::adopt_monitor{});
  out.push_back(node_do::open_channel{});
  out.push_back(node_do::set_deadline{0.0, true});
  out.push_back(node_do::emit{"syncer_back", {{"run_id", r.run_id}}, true});
  out.push_back(node_do::say{
      fmt::format("dd-node learner {}: syncer back; learners rejoin", o_.name), false});
  out.push_back(node_do::rejoin_learners{});
  return out;
}

node_actions learner_node_core::on_writes_failing(const write_policy& writes, double failing_s,
                                                  const std::string& files) {
  if (stopping_ || writes.on_failing(failing_s) != write_verdict::end_the_run) return {};
  node_actions out{node_do::say{fmt::format("dd-node learner {}: {}; stopping the learners",
                                            o_.name, writes.limit_message(failing_s, files))}};
  stop(node_exit_failure, out);
  return out;
}

node_actions learner_node_core::on_timers(double now_s) {
  node_actions out;
  if (!lost_ && now_s - last_flush_ >= 1.0) {
    out.push_back(node_do::flush_events{});
    last_flush_ = now_s;
  }
  // While the syncer is away it records no heartbeat rows: the node samples its learners' steps
  // once a second (forwarded with the other buffered events after the rejoin), so `dd-chaos
  // report` sees who stepped during the outage.
  if (lost_ && !stopping_ && now_s - last_outage_sample_ >= 1.0) {
    out.push_back(node_do::emit{"outage_steps", nlohmann::json::object(), true});
    last_outage_sample_ = now_s;
  }
  if (o_.progress_every_s > 0 && now_s - last_progress_ >= o_.progress_every_s) {
    // A learner shown "left" while the syncer is away has not left yet: its leave waits.
    if (lost_)
      out.push_back(node_do::progress{" | syncer lost",
                                      " | syncer lost (finished learners leave once it is back)"});
    else
      out.push_back(node_do::progress{});
    last_progress_ = now_s;
  }
  return out;
}

int learner_node_core::finish(bool learners_given_up) {
  done_ = true;
  if (learners_given_up && status_ == node_exit_ok) status_ = node_exit_failure;
  return status_;
}

}  // namespace dd::actors
