// tests/actors/learner_node_core_test.cpp — the learner node's states and transitions
// (actors/nodes/learner_node_core.hpp) without sockets or CAF, on a manual clock: each row of
// the table drives the core from one state by one event and names the state, the actions (in
// order) and the exit status it must come to.
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "actors/nodes/learner_node_core.hpp"

namespace dd::actors {
namespace {

using state = learner_node_state;
using outcome = handshake_outcome;

const char* kind_of(const node_action& a) {
  static const char* const names[] = {
      "backoff",        "retry_at_once", "set_deadline",  "drop_connections",
      "close_channels", "open_channel",  "adopt_monitor", "rejoin_learners",
      "stop_learners",  "emit",          "say",           "flush_events",
      "progress",       "wait",          "exit_node"};
  static_assert(std::variant_size_v<node_action> == std::size(names));
  return names[a.index()];
}

std::vector<std::string> kinds(const node_actions& as) {
  std::vector<std::string> out;
  for (const auto& a : as) out.emplace_back(kind_of(a));
  return out;
}

template <class T>
const T& nth(const node_actions& as, size_t i) {
  EXPECT_LT(i, as.size());
  return std::get<T>(as.at(i));
}

constexpr double t0 = 100.0;

learner_node_core make(double join_deadline_s = 0.0) {
  return learner_node_core({"n1", join_deadline_s, 5.0, t0});
}

/// The core brought to a state by the events a node goes through to get there.
learner_node_core at(state s, double join_deadline_s = 0.0) {
  auto c = make(join_deadline_s);
  if (s == state::connecting) return c;
  c.on_described(outcome::accepted("run1"));
  if (s == state::asking_ids) return c;
  c.on_started(t0 + 1.0);
  if (s == state::running) return c;
  if (s == state::syncer_lost) {
    c.on_monitor_down("remote_link_unreachable", true, t0 + 2.0);
    return c;
  }
  if (s == state::stopping) {
    c.on_interrupt(2);
    return c;
  }
  c.on_children_done();
  return c;
}

struct row {
  std::string name;
  state from;
  double join_deadline_s;
  std::function<node_actions(learner_node_core&)> event;
  state to;
  std::vector<std::string> actions;
  int status;  ///< the exit_node action's status when there is one, else the core's status()
};

TEST(learner_node_core, every_transition_of_the_table) {
  const std::vector<row> rows = {
      // connecting
      {"interrupted before the syncer answers",
       state::connecting,
       0.0,
       [](auto& c) { return c.on_startup_check(t0 + 1, true, ""); },
       state::connecting,
       {"exit_node"},
       node_exit_interrupted},
      {"the startup deadline passes",
       state::connecting,
       10.0,
       [](auto& c) { return c.on_startup_check(t0 + 10.5, false, "refused"); },
       state::connecting,
       {"say", "exit_node"},
       node_exit_deadline},
      {"within the startup deadline",
       state::connecting,
       10.0,
       [](auto& c) { return c.on_startup_check(t0 + 9.5, false, "refused"); },
       state::connecting,
       {},
       node_exit_ok},
      {"a lookup that leaves a stale connection",
       state::connecting,
       0.0,
       [](auto& c) {
         return c.on_startup_lookup_failed("system_error(disconnect_during_handshake)");
       },
       state::connecting,
       {"drop_connections"},
       node_exit_ok},
      {"a lookup refused",
       state::connecting,
       0.0,
       [](auto& c) { return c.on_startup_lookup_failed("Connection refused"); },
       state::connecting,
       {},
       node_exit_ok},
      {"the describe handshake fails",
       state::connecting,
       0.0,
       [](auto& c) { return c.on_described(outcome::failed("undecodable")); },
       state::connecting,
       {"backoff"},
       node_exit_ok},
      {"the describe handshake unanswered: asked again at once on a fresh connection",
       state::connecting,
       0.0,
       [](auto& c) { return c.on_described(outcome::failed("request_timeout", true), 1); },
       state::connecting,
       {"drop_connections", "retry_at_once", "say"},
       node_exit_ok},
      {"no free learner: asked again",
       state::connecting,
       0.0,
       [](auto& c) {
         return c.on_described(outcome::refused(node_refusal::no_free_learner, "full"));
       },
       state::connecting,
       {"say", "backoff"},
       node_exit_ok},
      {"another protocol: final",
       state::connecting,
       0.0,
       [](auto& c) {
         return c.on_described(outcome::refused(node_refusal::protocol_version, "v9"));
       },
       state::connecting,
       {"say", "exit_node"},
       node_exit_protocol},
      {"described",
       state::connecting,
       0.0,
       [](auto& c) { return c.on_described(outcome::accepted("run1")); },
       state::asking_ids,
       {"set_deadline"},
       node_exit_ok},
      // asking_ids
      {"the syncer's experiment does not load here",
       state::asking_ids,
       0.0,
       [](auto& c) { return c.on_experiment(false, "no model", ""); },
       state::asking_ids,
       {"say", "exit_node"},
       node_exit_failure},
      {"the learners do not fit in this host's memory",
       state::asking_ids,
       0.0,
       [](auto& c) { return c.on_experiment(true, "", "needs 9 GiB, 2 GiB available"); },
       state::asking_ids,
       {"say", "exit_node"},
       node_exit_usage},
      {"the experiment loads and fits",
       state::asking_ids,
       0.0,
       [](auto& c) { return c.on_experiment(true, "", ""); },
       state::asking_ids,
       {},
       node_exit_ok},
      {"the data cannot be read",
       state::asking_ids,
       0.0,
       [](auto& c) {
         return c.on_data({"cannot open 'x.txt'", false, "x.txt", 0, 0, "", ""});
       },
       state::asking_ids,
       {"say", "exit_node"},
       node_exit_usage},
      {"the data differs from the syncer's: said, and asked on",
       state::asking_ids,
       0.0,
       [](auto& c) {
         return c.on_data({"", false, "x.txt", 10, 10, "aa", "bb"});
       },
       state::asking_ids,
       {"say"},
       node_exit_ok},
      {"the data matches the syncer's",
       state::asking_ids,
       0.0,
       [](auto& c) {
         return c.on_data({"", true, "x.txt", 10, 10, "aa", "aa"});
       },
       state::asking_ids,
       {},
       node_exit_ok},
      {"interrupted while asking for ids",
       state::asking_ids,
       0.0,
       [](auto& c) { return c.on_startup_check(t0 + 1, true, ""); },
       state::asking_ids,
       {"exit_node"},
       node_exit_interrupted},
      {"the startup deadline is checked after the ask",
       state::asking_ids,
       10.0,
       [](auto& c) { return c.on_startup_check(t0 + 30, false, ""); },
       state::asking_ids,
       {},
       node_exit_ok},
      {"no id free yet: asked again in 2 s",
       state::asking_ids,
       10.0,
       [](auto& c) {
         return c.on_ids(outcome::refused(node_refusal::no_free_learner, "full"), t0 + 5);
       },
       state::asking_ids,
       {"say", "wait"},
       node_exit_ok},
      {"no id free by the deadline",
       state::asking_ids,
       10.0,
       [](auto& c) {
         return c.on_ids(outcome::refused(node_refusal::no_free_learner, "full"), t0 + 11);
       },
       state::asking_ids,
       {"say", "exit_node"},
       node_exit_deadline},
      {"the ask for ids unanswered: asked again at once on a fresh connection",
       state::asking_ids,
       10.0,
       [](auto& c) { return c.on_ids(outcome::failed("request_timeout", true), t0 + 5); },
       state::asking_ids,
       {"drop_connections", "retry_at_once", "say"},
       node_exit_ok},
      {"the ask for ids failed otherwise (a handle already down): asked again in 2 s",
       state::asking_ids,
       10.0,
       [](auto& c) { return c.on_ids(outcome::failed("down", false, true), t0 + 5); },
       state::asking_ids,
       {"say", "wait"},
       node_exit_ok},
      {"the ask for ids unanswered past the deadline",
       state::asking_ids,
       10.0,
       [](auto& c) { return c.on_ids(outcome::failed("request_timeout", true), t0 + 11); },
       state::asking_ids,
       {"say", "exit_node"},
       node_exit_deadline},
      {"the run is over",
       state::asking_ids,
       0.0,
       [](auto& c) { return c.on_ids(outcome::refused(node_refusal::run_finished, "over"), t0); },
       state::asking_ids,
       {"say", "say", "exit_node"},
       node_exit_ok},
      // running
      {"children done",
       state::running,
       0.0,
       [](auto& c) { return c.on_children_done(); },
       state::finished,
       {},
       node_exit_ok},
      {"the link to the syncer lost",
       state::running,
       30.0,
       [](auto& c) { return c.on_monitor_down("remote_link_unreachable", true, t0 + 3); },
       state::syncer_lost,
       {"close_channels", "set_deadline", "emit", "say"},
       node_exit_ok},
      {"the syncer's monitor killed",
       state::running,
       0.0,
       [](auto& c) { return c.on_monitor_down("unknown", false, t0 + 3); },
       state::syncer_lost,
       {"close_channels", "drop_connections", "emit", "say"},
       node_exit_ok},
      {"a tensor channel broke",
       state::running,
       0.0,
       [](auto& c) { return c.on_channel_lost("reset by peer"); },
       state::running,
       {"drop_connections"},
       node_exit_ok},
      {"SIGTERM",
       state::running,
       0.0,
       [](auto& c) { return c.on_interrupt(15); },
       state::stopping,
       {"say", "stop_learners"},
       143},
      {"writes failing past the limit",
       state::running,
       0.0,
       [](auto& c) {
         return c.on_writes_failing(write_policy::retry_and_degrade(30), 31, "events.jsonl");
       },
       state::stopping,
       {"say", "stop_learners"},
       node_exit_failure},
      {"writes failing within the limit",
       state::running,
       0.0,
       [](auto& c) {
         return c.on_writes_failing(write_policy::retry_and_degrade(30), 29, "events.jsonl");
       },
       state::running,
       {},
       node_exit_ok},
      {"a second of running: events forwarded",
       state::running,
       0.0,
       [](auto& c) { return c.on_timers(t0 + 2.0); },
       state::running,
       {"flush_events"},
       node_exit_ok},
      {"the progress period",
       state::running,
       0.0,
       [](auto& c) { return c.on_timers(t0 + 6.0); },
       state::running,
       {"flush_events", "progress"},
       node_exit_ok},
      // syncer_lost
      {"a channel lost while the syncer is away",
       state::syncer_lost,
       0.0,
       [](auto& c) { return c.on_channel_lost("closed"); },
       state::syncer_lost,
       {},
       node_exit_ok},
      {"outage sample, no forwarding",
       state::syncer_lost,
       0.0,
       [](auto& c) { return c.on_timers(t0 + 3.5); },
       state::syncer_lost,
       {"emit"},
       node_exit_ok},
      {"a rejoin lookup refused",
       state::syncer_lost,
       0.0,
       [](auto& c) { return c.on_rejoin_lookup_failed("Connection refused", 0.1); },
       state::syncer_lost,
       {"emit"},
       node_exit_ok},
      {"a rejoin lookup on a stale connection",
       state::syncer_lost,
       0.0,
       [](auto& c) {
         return c.on_rejoin_lookup_failed("unexpected_actor_messaging_interface", 0.1);
       },
       state::syncer_lost,
       {"emit", "drop_connections"},
       node_exit_ok},
      {"an unanswered rejoin handshake is retried at once",
       state::syncer_lost,
       0.0,
       [](auto& c) { return c.on_rejoin(outcome::failed("timeout", true), 3, 1.0); },
       state::syncer_lost,
       {"emit", "drop_connections", "retry_at_once", "say"},
       node_exit_ok},
      {"a second unanswered one in the same step backs off",
       state::syncer_lost,
       0.0,
       [](auto& c) {
         c.on_rejoin(outcome::failed("timeout", true), 3, 1.0);
         return c.on_rejoin(outcome::failed("timeout", true), 3, 1.0);
       },
       state::syncer_lost,
       {"emit", "backoff", "say"},
       node_exit_ok},
      {"a dead handle backs off and drops the connection",
       state::syncer_lost,
       0.0,
       [](auto& c) { return c.on_rejoin(outcome::failed("down", false, true), 0, 0.0); },
       state::syncer_lost,
       {"emit", "drop_connections", "backoff", "say"},
       node_exit_ok},
      {"rejoined",
       state::syncer_lost,
       0.0,
       [](auto& c) { return c.on_rejoin(outcome::accepted("run1"), 2, 0.2); },
       state::running,
       {"adopt_monitor", "open_channel", "set_deadline", "emit", "say", "rejoin_learners"},
       node_exit_ok},
      {"a syncer of another run",
       state::syncer_lost,
       0.0,
       [](auto& c) {
         return c.on_rejoin(outcome::refused(node_refusal::other_run, "run2"), 0, 0.2);
       },
       state::stopping,
       {"say", "stop_learners"},
       node_exit_other_run},
      {"a garbled rejoin request",
       state::syncer_lost,
       0.0,
       [](auto& c) {
         return c.on_rejoin(outcome::refused(node_refusal::bad_request, "bytes"), 0, 0.2);
       },
       state::syncer_lost,
       {"say", "backoff"},
       node_exit_ok},
      {"the lost syncer's deadline passes",
       state::syncer_lost,
       30.0,
       [](auto& c) { return c.on_deadline_check(t0 + 33, "refused"); },
       state::stopping,
       {"say", "stop_learners"},
       node_exit_deadline},
      {"within the lost syncer's deadline",
       state::syncer_lost,
       30.0,
       [](auto& c) { return c.on_deadline_check(t0 + 31, "refused"); },
       state::syncer_lost,
       {},
       node_exit_ok},
      // stopping
      {"a second signal",
       state::stopping,
       0.0,
       [](auto& c) { return c.on_interrupt(15); },
       state::stopping,
       {},
       130},
      {"failing writes while stopping",
       state::stopping,
       0.0,
       [](auto& c) { return c.on_writes_failing(write_policy::retry_and_degrade(30), 99, "x"); },
       state::stopping,
       {},
       130},
      {"the learners done",
       state::stopping,
       0.0,
       [](auto& c) { return c.on_children_done(); },
       state::finished,
       {},
       130},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.name);
    auto c = at(r.from, r.join_deadline_s);
    ASSERT_EQ(c.state(), r.from) << to_string(c.state());
    const auto got = r.event(c);
    EXPECT_EQ(to_string(c.state()), std::string(to_string(r.to)));
    EXPECT_EQ(kinds(got), r.actions);
    int status = c.status();
    for (const auto& a : got)
      if (const auto* e = std::get_if<node_do::exit_node>(&a)) status = e->status;
    EXPECT_EQ(status, r.status);
  }
}

TEST(learner_node_core, the_lost_syncer_is_looked_for_until_the_node_stops) {
  auto c = at(state::running);
  EXPECT_FALSE(c.wants_rejoin());
  c.on_monitor_down("remote_link_unreachable", true, t0 + 2);
  EXPECT_TRUE(c.wants_rejoin());
  c.on_interrupt(2);
  EXPECT_FALSE(c.wants_rejoin());
  EXPECT_EQ(c.status(), 130);
}

TEST(learner_node_core, the_deadline_runs_from_the_loss_and_clears_on_rejoin) {
  auto c = at(state::running, 30.0);
  const auto down = c.on_monitor_down("remote_link_unreachable", true, t0 + 5);
  EXPECT_DOUBLE_EQ(nth<node_do::set_deadline>(down, 1).deadline_at, t0 + 35);
  EXPECT_FALSE(nth<node_do::set_deadline>(down, 1).reset_attempts);
  EXPECT_DOUBLE_EQ(c.deadline_at(), t0 + 35);
  const auto back = c.on_rejoin(outcome::accepted("run1"), 4, 0.1);
  EXPECT_DOUBLE_EQ(nth<node_do::set_deadline>(back, 2).deadline_at, 0.0);
  EXPECT_TRUE(nth<node_do::set_deadline>(back, 2).reset_attempts);
  EXPECT_EQ(nth<node_do::emit>(back, 3).event, "syncer_back");
  EXPECT_TRUE(nth<node_do::emit>(back, 3).with_steps);
  EXPECT_EQ(nth<node_do::emit>(back, 3).fields.at("run_id"), "run1");
  EXPECT_DOUBLE_EQ(c.deadline_at(), 0.0);
  EXPECT_TRUE(c.on_deadline_check(t0 + 100, "").empty());
}

TEST(learner_node_core, an_unanswered_handshake_is_retried_at_once_once_per_backoff_step) {
  auto c = at(state::syncer_lost);
  const auto first = c.on_rejoin(outcome::failed("no answer", true), 1, 1.0);
  EXPECT_EQ(nth<node_do::emit>(first, 0).fields.at("retry_at_once"), true);
  EXPECT_EQ(nth<node_do::say>(first, 3).line,
            "dd-node learner n1: rejoin handshake failed (no answer); retrying at once");
  const auto second = c.on_rejoin(outcome::failed("no answer", true), 1, 1.0);
  EXPECT_EQ(nth<node_do::emit>(second, 0).fields.at("retry_at_once"), false);
  EXPECT_EQ(nth<node_do::backoff>(second, 1).why, "no answer");
  // The next backoff step may retry at once again.
  const auto third = c.on_rejoin(outcome::failed("no answer", true), 2, 1.0);
  EXPECT_EQ(kinds(third),
            (std::vector<std::string>{"emit", "drop_connections", "retry_at_once", "say"}));
}

// Regression: the first rejoin handshake after a SIGCONT went unanswered (its reply lost down the
// syncer's stale route to the node) and waited the whole 3 s connect timeout before the at-once
// retry got through: the paused learner was live again 3.3 s after SIGCONT instead of ~1 s.
TEST(learner_node_core,
     the_first_rejoin_handshake_of_a_step_waits_at_most_1_s_its_retry_the_timeout) {
  auto c = at(state::syncer_lost);
  EXPECT_DOUBLE_EQ(c.rejoin_handshake_timeout_s(1, 3.0), 1.0);
  EXPECT_DOUBLE_EQ(c.rejoin_handshake_timeout_s(1, 0.4), 1.0);  // never under 1 s
  EXPECT_DOUBLE_EQ(c.rejoin_handshake_timeout_s(1, 30.0), 1.0);
  c.on_rejoin(outcome::failed("no answer", true), 1, 1.0);  // retried at once
  EXPECT_DOUBLE_EQ(c.rejoin_handshake_timeout_s(1, 3.0), 3.0);
  EXPECT_DOUBLE_EQ(c.rejoin_handshake_timeout_s(1, 30.0), 30.0);
  EXPECT_DOUBLE_EQ(c.rejoin_handshake_timeout_s(1, 0.4), 1.0);
  // The next backoff step's first handshake is short again.
  EXPECT_DOUBLE_EQ(c.rejoin_handshake_timeout_s(2, 3.0), 1.0);
}

// Regression: a learner node started before its syncer sent its first describe on a connection
// whose replies the syncer's middleman no longer routed (CAF dropped the route to the node while
// the connection stayed open) and waited the whole 10 s request timeout, twice when the next
// lookup got the same connection back, before a fresh connection was answered: the node joined
// 12-23 s after the syncer listened instead of within a second.
TEST(learner_node_core, an_unanswered_describe_is_retried_at_once_once_per_backoff_step) {
  auto c = at(state::connecting);
  EXPECT_DOUBLE_EQ(c.describe_handshake_timeout_s(1), 1.0);
  const auto first = c.on_described(outcome::failed("request_timeout", true), 1);
  EXPECT_EQ(nth<node_do::drop_connections>(first, 0).why, "request_timeout");
  EXPECT_FALSE(nth<node_do::drop_connections>(first, 0).log_event);  // no event log yet
  EXPECT_EQ(nth<node_do::say>(first, 2).line,
            "dd-node learner n1: describe handshake unanswered (request_timeout); retrying at "
            "once on a fresh connection");
  // The at-once retry waits the whole describe timeout: a syncer still starting may be slow.
  EXPECT_DOUBLE_EQ(c.describe_handshake_timeout_s(1), 10.0);
  // A second unanswered one in the same backoff step is a failed attempt.
  EXPECT_EQ(kinds(c.on_described(outcome::failed("request_timeout", true), 1)),
            (std::vector<std::string>{"backoff"}));
  // The next backoff step's first describe is short again, and retried at once again.
  EXPECT_DOUBLE_EQ(c.describe_handshake_timeout_s(2), 1.0);
  EXPECT_EQ(kinds(c.on_described(outcome::failed("request_timeout", true), 2)),
            (std::vector<std::string>{"drop_connections", "retry_at_once", "say"}));
  // A failure that is not a silence (an undecodable reply, an error, a handle already down)
  // waits its backoff step.
  EXPECT_EQ(kinds(c.on_described(outcome::failed("undecodable"), 3)),
            (std::vector<std::string>{"backoff"}));
  EXPECT_EQ(kinds(c.on_described(outcome::failed("down", false, true), 4)),
            (std::vector<std::string>{"backoff"}));
  // Accepted: the node asks for ids; the retry bookkeeping starts over.
  EXPECT_EQ(kinds(c.on_described(outcome::accepted("run1"), 2)),
            (std::vector<std::string>{"set_deadline"}));
  EXPECT_EQ(c.state(), state::asking_ids);
  EXPECT_DOUBLE_EQ(c.describe_handshake_timeout_s(2), 1.0);
}

// Regression: the ask for learner ids, sent on the connection the describe was answered on,
// waited the whole 10 s request timeout when the syncer's middleman no longer routed its reply
// to the node (the connection staying open), and was then asked again on that same connection.
TEST(learner_node_core, an_unanswered_ask_for_ids_is_retried_at_once_once_per_round) {
  auto c = at(state::asking_ids, 30.0);
  EXPECT_DOUBLE_EQ(c.ids_handshake_timeout_s(), 1.0);
  const auto first = c.on_ids(outcome::failed("request_timeout", true), t0 + 3);
  EXPECT_EQ(nth<node_do::drop_connections>(first, 0).why, "request_timeout");
  EXPECT_FALSE(nth<node_do::drop_connections>(first, 0).log_event);  // no event log yet
  EXPECT_EQ(nth<node_do::retry_at_once>(first, 1).why, "request_timeout");
  EXPECT_EQ(nth<node_do::say>(first, 2).line,
            "dd-node learner n1: ask for learner ids unanswered (request_timeout); retrying at "
            "once on a fresh connection");
  // The at-once retry waits the whole 10 s: a syncer under load may be slow to answer.
  EXPECT_DOUBLE_EQ(c.ids_handshake_timeout_s(), 10.0);
  // A second unanswered one in a row ends the round: asked again in 2 s, with a short wait.
  const auto second = c.on_ids(outcome::failed("request_timeout", true), t0 + 14);
  EXPECT_EQ(kinds(second), (std::vector<std::string>{"say", "wait"}));
  EXPECT_DOUBLE_EQ(nth<node_do::wait>(second, 1).seconds, 2.0);
  EXPECT_DOUBLE_EQ(c.ids_handshake_timeout_s(), 1.0);
  // The next round's unanswered ask is retried at once again.
  EXPECT_EQ(kinds(c.on_ids(outcome::failed("request_timeout", true), t0 + 17)),
            (std::vector<std::string>{"drop_connections", "retry_at_once", "say"}));
  // A retried refusal ends the round too; the next unanswered ask is retried at once.
  EXPECT_EQ(kinds(c.on_ids(outcome::refused(node_refusal::no_free_learner, "full"), t0 + 18)),
            (std::vector<std::string>{"say", "wait"}));
  EXPECT_EQ(kinds(c.on_ids(outcome::failed("request_timeout", true), t0 + 20)),
            (std::vector<std::string>{"drop_connections", "retry_at_once", "say"}));
  // A failed round past --join-deadline ends the node (exit 6).
  const auto late = c.on_ids(outcome::failed("request_timeout", true), t0 + 31);
  EXPECT_EQ(kinds(late), (std::vector<std::string>{"say", "exit_node"}));
  EXPECT_EQ(nth<node_do::exit_node>(late, 1).status, node_exit_deadline);
  // The describe's retry bookkeeping is apart: a rejoin's first handshake is short again.
  c.on_started(t0 + 40);
  EXPECT_DOUBLE_EQ(c.rejoin_handshake_timeout_s(0, 10.0), 1.0);
}

TEST(learner_node_core, progress_says_the_syncer_is_lost_and_finished_learners_wait) {
  auto c = at(state::syncer_lost);
  const auto a = c.on_timers(t0 + 7.0);
  ASSERT_EQ(kinds(a), (std::vector<std::string>{"emit", "progress"}));
  EXPECT_EQ(nth<node_do::emit>(a, 0).event, "outage_steps");
  EXPECT_EQ(nth<node_do::progress>(a, 1).suffix, " | syncer lost");
  EXPECT_EQ(nth<node_do::progress>(a, 1).suffix_if_finished,
            " | syncer lost (finished learners leave once it is back)");
  // Within the same second: nothing again.
  EXPECT_TRUE(c.on_timers(t0 + 7.5).empty());
}

TEST(learner_node_core, a_learner_given_up_fails_a_clean_run_but_keeps_another_status) {
  auto ok = at(state::running);
  EXPECT_EQ(ok.finish(true), node_exit_failure);
  auto clean = at(state::running);
  EXPECT_EQ(clean.finish(false), node_exit_ok);
  auto deadline = at(state::syncer_lost, 5.0);
  deadline.on_deadline_check(t0 + 10, "");
  EXPECT_EQ(deadline.finish(true), node_exit_deadline);
}

TEST(learner_node_core, the_data_lines_name_the_file_and_both_copies) {
  auto c = at(state::asking_ids);
  EXPECT_EQ(nth<node_do::say>(c.on_data({"", false, "x.txt", 10, 12, "aa", "bb"}), 0).line,
            "dd-node learner: data file 'x.txt' differs from the syncer's (10 bytes, hash aa here; "
            "12 bytes, hash bb there)");
  EXPECT_EQ(nth<node_do::say>(c.on_data({"cannot open 'y'", true, "y", 0, 0, "", ""}), 0).line,
            "dd-node learner: cannot open 'y' (from --data)");
  EXPECT_EQ(nth<node_do::say>(c.on_data({"cannot open 'y'", false, "y", 0, 0, "", ""}), 0).line,
            "dd-node learner: cannot open 'y' (the path the syncer's experiment names; give "
            "--data FILE)");
}

TEST(learner_node_core, step_gate_plans) {
  using kind = step_gate_plan::kind;
  struct gate_row {
    std::string spec;
    unsigned hw;
    int threads, learners;
    kind what;
    int sysv_id;
    unsigned slots;
    bool error;
  };
  const std::vector<gate_row> rows = {
      {"sysv:42", 8, 1, 4, kind::host, 42, 0, false},  // the launcher's, whatever the cores
      {"posix:42", 8, 1, 4, kind::none, 0, 0, true},   // not sysv:ID: exit 2
      {"", 8, 2, 4, kind::none, 0, 0, false},          // 4 slots for 4 learners: no gate
      {"", 8, 4, 4, kind::local, 0, 2, false},         // 2 slots for 4 learners
      {"", 2, 4, 3, kind::local, 0, 1, false},         // fewer cores than threads: 1 slot
      {"", 0, 0, 2, kind::local, 0, 1, false},         // unknown cores, no threads: 1 slot
      {"", 1, 1, 1, kind::none, 0, 0, false},          // one learner never waits
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.spec + " hw " + std::to_string(r.hw) + " threads " + std::to_string(r.threads) +
                 " learners " + std::to_string(r.learners));
    const auto g = plan_step_gate(r.spec, r.hw, r.threads, r.learners);
    EXPECT_EQ(static_cast<int>(g.what), static_cast<int>(r.what));
    EXPECT_EQ(g.sysv_id, r.sysv_id);
    EXPECT_EQ(g.slots, r.slots);
    EXPECT_EQ(!g.error.empty(), r.error) << g.error;
  }
  EXPECT_EQ(plan_step_gate("posix:42", 8, 1, 4).error,
            "dd-node learner: --step-admission 'posix:42' is not sysv:ID");
}

TEST(learner_node_core, the_faults_a_learner_node_applies_itself) {
  auto spec = [](fault_kind what, bool live_window = false,
                 fault_kind live = fault_kind::drop_push) {
    fault_spec f;
    f.what = what;
    f.live_window = live_window;
    f.live.what = live;
    return f;
  };
  struct fault_row {
    std::string name;
    fault_spec f;
    bool here;               ///< applied by the node itself
    bool here_via_endpoint;  ///< with --message-faults-via-endpoint
  };
  const std::vector<fault_row> rows = {
      {"kill_learner", spec(fault_kind::kill_learner), true, true},
      {"slow_learner", spec(fault_kind::slow_learner), true, true},
      {"kill_owner: the syncer node's", spec(fault_kind::kill_owner), false, false},
      {"drop_push: a message fault", spec(fault_kind::drop_push), true, false},
      {"a live dup_push window", spec(fault_kind::kill_learner, true, fault_kind::dup_push), true,
       false},
      {"a live nan_step window", spec(fault_kind::kill_learner, true, fault_kind::nan_step), true,
       false},
      {"a live broadcast window: the syncer node's",
       spec(fault_kind::kill_learner, true, fault_kind::delay_broadcast), false, false},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.name);
    EXPECT_EQ(acts_in_learner_node(r.f, false), r.here);
    EXPECT_EQ(acts_in_learner_node(r.f, true), r.here_via_endpoint);
  }
}

TEST(learner_node_core, refusals_map_to_exit_statuses) {
  EXPECT_EQ(refusal_status(node_refusal::other_run), node_exit_other_run);
  EXPECT_EQ(refusal_status(node_refusal::protocol_version), node_exit_protocol);
  EXPECT_EQ(refusal_status(node_refusal::data_mismatch), node_exit_data_mismatch);
  EXPECT_EQ(refusal_status(node_refusal::run_finished), node_exit_ok);
  EXPECT_EQ(refusal_status(node_refusal::bad_request), node_exit_usage);
  EXPECT_EQ(refusal_status(node_refusal::no_free_learner), node_exit_failure);
  EXPECT_EQ(refusal_status(node_refusal::unauthorized), node_exit_unauthorized);
}

}  // namespace
}  // namespace dd::actors
