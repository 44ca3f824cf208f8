// tests/actors/chaos_endpoint_test.cpp — live message faults in fault_hooks (bounded by time or
// count, matched by learner and fragment, cleared at once; scheduled ones started at their step
// or time) and the chaos endpoint's socket protocol (real loopback TCP: fault, status, clear,
// refusals); and the learner node's shutdown of its sockets to one peer.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "actors/link/join_auth.hpp"
#include "actors/nodes/learner_node.hpp"
#include "actors/services/chaos_endpoint.hpp"
#include "actors/services/fault_hooks.hpp"
#include "util/net.hpp"

namespace dd::actors {
namespace {

using nlohmann::json;

/// A hook whose clock the test moves.
struct clocked {
  double t = 0.0;
  fault_hooks hooks{{}, nullptr, [this] { return t; }};
};

TEST(LiveFaults, DropPushForADurationThenReverts) {
  clocked c;
  EXPECT_EQ(c.hooks.add_live({fault_kind::drop_push, /*learner=*/1, /*fragment=*/-1,
                              /*until_s=*/10.0}),
            1u);
  EXPECT_TRUE(c.hooks.on_push(1, 0, 0, 5).drop);
  EXPECT_TRUE(c.hooks.on_push(1, 0, 3, 6).drop);
  EXPECT_FALSE(c.hooks.on_push(0, 0, 0, 6).drop);  // another learner
  c.t = 9.9;
  EXPECT_TRUE(c.hooks.on_push(1, 0, 0, 7).drop);
  c.t = 10.0;
  EXPECT_FALSE(c.hooks.on_push(1, 0, 0, 8).drop);  // expired: reverted by itself
  EXPECT_TRUE(c.hooks.live().empty());
}

TEST(LiveFaults, CountBoundsTheFaultAndFragmentsMatch) {
  clocked c;
  c.hooks.add_live({fault_kind::corrupt_push, /*learner=*/-1, /*fragment=*/2, /*until_s=*/-1.0,
                    /*count=*/2});
  EXPECT_FALSE(c.hooks.on_push(0, 0, 1, 1).corrupt);
  EXPECT_TRUE(c.hooks.on_push(0, 0, 2, 1).corrupt);
  ASSERT_EQ(c.hooks.live().size(), 1u);
  EXPECT_EQ(c.hooks.live()[0].count, 1);
  EXPECT_EQ(c.hooks.live()[0].hits, 1u);
  EXPECT_TRUE(c.hooks.on_push(3, 0, 2, 9).corrupt);
  EXPECT_FALSE(c.hooks.on_push(3, 0, 2, 10).corrupt);  // spent
  EXPECT_TRUE(c.hooks.live().empty());
}

TEST(LiveFaults, EveryKindReachesItsHook) {
  clocked c;
  auto add = [&](fault_kind k, double delay = 0.0) {
    c.hooks.add_live(
        {k, /*learner=*/-1, /*fragment=*/-1, /*until_s=*/-1.0, /*count=*/1, /*delay_s=*/delay});
  };
  add(fault_kind::dup_push);
  add(fault_kind::reorder_push);
  add(fault_kind::delay_push, 0.5);
  auto p = c.hooks.on_push(0, 0, 0, 1);
  EXPECT_TRUE(p.duplicate);
  EXPECT_TRUE(p.reorder);
  EXPECT_DOUBLE_EQ(p.delay_s, 0.5);
  EXPECT_FALSE(p.drop);
  add(fault_kind::drop_broadcast);
  add(fault_kind::dup_broadcast);
  add(fault_kind::reorder_broadcast);
  add(fault_kind::delay_broadcast, 0.25);
  auto b = c.hooks.on_broadcast(1, 3);
  EXPECT_TRUE(b.drop);
  EXPECT_TRUE(b.duplicate);
  EXPECT_TRUE(b.reorder);
  EXPECT_DOUBLE_EQ(b.delay_s, 0.25);
  EXPECT_FALSE(c.hooks.on_broadcast(1, 3).drop);
  add(fault_kind::nan_step);
  add(fault_kind::fail_step);
  auto s = c.hooks.on_learner_step(4, 0, 10);
  EXPECT_TRUE(s.nan);
  EXPECT_TRUE(s.fail);
  s = c.hooks.on_learner_step(4, 0, 11);
  EXPECT_FALSE(s.nan);
  EXPECT_FALSE(s.fail);
}

TEST(LiveFaults, RefusedWithoutABoundAndClearedAtOnce) {
  clocked c;
  live_fault f;
  f.what = fault_kind::drop_broadcast;
  EXPECT_THROW(c.hooks.add_live(f), std::invalid_argument);  // neither time nor count
  f.what = fault_kind::delay_push;
  f.count = 3;
  EXPECT_THROW(c.hooks.add_live(f), std::invalid_argument);  // a delay kind without a delay
  f.what = fault_kind::drop_push;
  f.until_s = 100;
  c.hooks.add_live(f);
  c.hooks.add_live(f);
  EXPECT_EQ(c.hooks.clear_live(), 2u);
  EXPECT_FALSE(c.hooks.on_push(0, 0, 0, 1).drop);
}

/// A scheduled fault that starts a live fault of kind `what` (its start and bounds left to set).
fault_spec scheduled_live(fault_kind what) {
  fault_spec f;
  f.what = what;
  f.live_window = true;
  f.live.what = what;
  return f;
}

TEST(LiveFaults, ScheduledStartAtStepAndTime) {
  clocked c;
  fault_spec at_step = scheduled_live(fault_kind::nan_step);
  at_step.target = 2;
  at_step.at_step = 40;
  at_step.live.learner = 2;
  c.hooks.add(at_step);
  fault_spec at_time = scheduled_live(fault_kind::drop_broadcast);
  at_time.at_seconds = 5.0;
  at_time.duration_s = 3.0;
  c.hooks.add(at_time);
  EXPECT_FALSE(c.hooks.on_learner_step(2, 0, 39).nan);
  EXPECT_FALSE(c.hooks.on_learner_step(1, 0, 40).nan);  // learner 1's step 40: not the target
  EXPECT_TRUE(c.hooks.on_learner_step(2, 0, 40).nan);   // one step (count 1 by default)
  EXPECT_FALSE(c.hooks.on_learner_step(2, 0, 41).nan);
  EXPECT_FALSE(c.hooks.on_broadcast(0, 0).drop);
  c.t = 5.0;
  EXPECT_TRUE(c.hooks.on_broadcast(0, 0).drop);
  c.t = 7.9;
  EXPECT_TRUE(c.hooks.on_broadcast(1, 2).drop);
  c.t = 8.0;
  EXPECT_FALSE(c.hooks.on_broadcast(1, 2).drop);
  EXPECT_EQ(c.hooks.fired().size(), 2u);
}

/// One request line over real TCP; the reply parsed.
/// The endpoint options of learner node `name` hosting `learners`, in a run of `fragments`.
chaos_endpoint_options learner_node(const std::string& name, std::vector<int32_t> learners,
                                    int fragments) {
  chaos_endpoint_options o;
  o.node_name = name;
  o.role = "learner";
  o.learners = std::move(learners);
  o.fragments = fragments;
  return o;
}

json ask(uint16_t port, const json& req) {
  const int fd = dd::util::connect_loopback(port);
  EXPECT_GE(fd, 0) << std::strerror(errno);
  const std::string line = req.dump() + "\n";
  EXPECT_EQ(::send(fd, line.data(), line.size(), MSG_NOSIGNAL), static_cast<ssize_t>(line.size()));
  std::string buf;
  char c = 0;
  pollfd p{fd, POLLIN, 0};
  while (::poll(&p, 1, 5000) == 1 && ::recv(fd, &c, 1, 0) == 1 && c != '\n') buf += c;
  ::close(fd);
  return json::parse(buf);
}

TEST(ChaosEndpoint, FaultStatusClearOverTcp) {
  clocked c;
  chaos_endpoint_options o = learner_node("learner-0", {0, 2}, 4);
  chaos_endpoint ep(o, &c.hooks);
  ASSERT_GT(ep.port(), 0);
  auto rep =
      ask(ep.port(), {{"op", "fault"}, {"kind", "drop_push"}, {"learner", 2}, {"for_s", 10}});
  ASSERT_TRUE(rep.value("ok", false)) << rep.dump();
  EXPECT_EQ(rep["id"], 1);
  EXPECT_TRUE(c.hooks.on_push(2, 0, 1, 5).drop);
  rep = ask(ep.port(), {{"op", "fault"}, {"kind", "nan_step"}, {"learner", 0}});
  ASSERT_TRUE(rep.value("ok", false)) << rep.dump();
  EXPECT_EQ(rep["count"], 1);  // one step by default
  rep = ask(ep.port(), {{"op", "status"}});
  ASSERT_TRUE(rep.value("ok", false));
  EXPECT_EQ(rep["node"], "learner-0");
  ASSERT_EQ(rep["faults"].size(), 2u);
  EXPECT_EQ(rep["faults"][0]["kind"], "drop_push");
  EXPECT_EQ(rep["faults"][0]["hits"], 1);
  EXPECT_DOUBLE_EQ(rep["faults"][0]["expires_in_s"].get<double>(), 10.0);
  rep = ask(ep.port(), {{"op", "clear"}});
  EXPECT_EQ(rep["cleared"], 2);
  EXPECT_FALSE(c.hooks.on_push(2, 0, 1, 6).drop);
  EXPECT_TRUE(c.hooks.live().empty());
}

TEST(ChaosEndpoint, RefusesWhatThisNodeCannotDo) {
  clocked c;
  chaos_endpoint_options o = learner_node("learner-1", {1}, 4);
  chaos_endpoint ep(o, &c.hooks);
  auto error_of = [&](const json& req) {
    const auto rep = ask(ep.port(), req);
    EXPECT_FALSE(rep.value("ok", true)) << rep.dump();
    return rep.value("error", std::string());
  };
  EXPECT_EQ(error_of({{"op", "fault"}, {"kind", "drop_push"}, {"learner", 0}, {"count", 1}}),
            "learner 0 is not hosted by node 'learner-1' (it hosts [1])");
  EXPECT_EQ(error_of({{"op", "fault"}, {"kind", "drop_broadcast"}, {"count", 1}}),
            "drop_broadcast: broadcasts leave the syncer node; this is learner node 'learner-1'");
  EXPECT_EQ(error_of({{"op", "fault"}, {"kind", "dup_push"}}),
            "dup_push: give a duration or a count (a live fault must end by itself)");
  EXPECT_EQ(error_of({{"op", "fault"}, {"kind", "drop_push"}, {"fragment", 4}, {"count", 1}}),
            "fragment 4 does not exist (4 fragments)");
  EXPECT_EQ(error_of({{"op", "reboot"}}), "unknown op 'reboot' (fault, clear, status)");
  EXPECT_NE(error_of({{"op", "fault"}, {"kind", "explode"}}).find("unknown kind 'explode'"),
            std::string::npos);
  // Garbage on the line is answered, not fatal.
  EXPECT_NE(ep.handle("{not json").value("error", std::string()).find("not a JSON request line"),
            std::string::npos);
  EXPECT_TRUE(c.hooks.live().empty());
}

// A step-keyed message event sent through the endpoint (dd-node launch) is armed and starts when
// the learner finishes that step — at_step, or at_fraction of the node's step budget — as the
// node's own schedule would start it; what cannot start that way is refused.
// With the run's join token, a fault or clear needs the token's proof over a challenge of the
// connection (actors/link/join_auth.hpp): none, a wrong one and a replayed one are refused;
// status needs none.
TEST(ChaosEndpoint, AsksForTheJoinTokenBeforeChangingTheNode) {
  clocked c;
  chaos_endpoint_options o = learner_node("learner-1", {1}, 4);
  o.join_token = "the-run-s-join-token-0123456789";
  chaos_endpoint ep(o, &c.hooks);
  const json fault = {{"op", "fault"}, {"kind", "drop_push"}, {"learner", 1}, {"count", 1}};
  std::string challenge;
  auto proven = [&](const json& req, const std::string& token) {
    json r = req;
    r["auth"] =
        to_hex(join_proof(token, operator_purpose, operator_context(challenge, req.dump())));
    return r.dump();
  };
  auto rep = ep.handle(fault.dump(), &challenge);
  EXPECT_FALSE(rep["ok"].get<bool>());
  EXPECT_NE(rep["error"].get<std::string>().find("join token: no proof"), std::string::npos)
      << rep.dump();
  EXPECT_TRUE(ep.handle(R"({"op":"status"})", &challenge)["ok"].get<bool>());
  rep = ep.handle(R"({"op":"challenge"})", &challenge);
  ASSERT_TRUE(rep["ok"].get<bool>());
  EXPECT_EQ(rep["challenge"].get<std::string>(), challenge);
  EXPECT_EQ(challenge.size(), 64u);
  rep = ep.handle(proven(fault, "another-token-of-the-same-size"), &challenge);
  EXPECT_NE(rep.value("error", std::string()).find("wrong join token"), std::string::npos)
      << rep.dump();
  EXPECT_TRUE(c.hooks.live().empty());
  ep.handle(R"({"op":"challenge"})", &challenge);
  const std::string good = proven(fault, o.join_token);
  rep = ep.handle(good, &challenge);
  EXPECT_TRUE(rep["ok"].get<bool>()) << rep.dump();
  EXPECT_EQ(c.hooks.live().size(), 1u);
  rep = ep.handle(good, &challenge);  // the same line again: its challenge is spent
  EXPECT_FALSE(rep["ok"].get<bool>()) << rep.dump();
  EXPECT_EQ(c.hooks.live().size(), 1u);
}

TEST(ChaosEndpoint, ArmsAFaultForALearnersStep) {
  clocked c;
  chaos_endpoint_options o = learner_node("learner-1", {1, 3}, 2);
  o.steps_per_learner = 200;
  chaos_endpoint ep(o, &c.hooks);
  json rep = ep.handle(R"({"op":"fault","kind":"nan_step","learner":1,"at_step":40})");
  ASSERT_TRUE(rep.value("ok", false)) << rep.dump();
  EXPECT_TRUE(rep.value("armed", false));
  EXPECT_EQ(rep["at_step"], 40);
  rep = ep.handle(
      R"({"op":"fault","kind":"delay_push","learner":3,"at_fraction":0.25,"count":1,"delay_s":0.5})");
  ASSERT_TRUE(rep.value("ok", false)) << rep.dump();
  EXPECT_EQ(rep["at_step"], 50);        // 0.25 × 200
  EXPECT_TRUE(c.hooks.live().empty());  // armed, not live yet
  EXPECT_FALSE(c.hooks.on_learner_step(1, 0, 39).nan);
  EXPECT_FALSE(c.hooks.on_learner_step(3, 0, 40).nan);  // another learner's step 40
  EXPECT_TRUE(c.hooks.on_learner_step(1, 0, 40).nan);   // one step (nan's default count)
  EXPECT_FALSE(c.hooks.on_learner_step(1, 0, 41).nan);
  EXPECT_DOUBLE_EQ(c.hooks.on_push(3, 0, 0, 49).delay_s, 0.0);
  EXPECT_DOUBLE_EQ(c.hooks.on_push(3, 0, 1, 50).delay_s, 0.5);  // one push, then spent
  EXPECT_DOUBLE_EQ(c.hooks.on_push(3, 0, 0, 51).delay_s, 0.0);
  // A clear ends live faults; one armed for a later step is not live yet and stays armed.
  rep = ep.handle(R"({"op":"fault","kind":"drop_push","learner":1,"at_step":60,"count":1})");
  ASSERT_TRUE(rep.value("ok", false)) << rep.dump();
  EXPECT_EQ(ep.handle(R"({"op":"clear"})")["cleared"], 0);
  EXPECT_TRUE(c.hooks.on_push(1, 0, 0, 60).drop);
  auto error_of = [&](const std::string& line) {
    const auto r = ep.handle(line);
    EXPECT_FALSE(r.value("ok", true)) << r.dump();
    return r.value("error", std::string());
  };
  EXPECT_EQ(error_of(R"({"op":"fault","kind":"dup_push","at_step":5,"count":1})"),
            "dup_push: at_step needs the learner whose step it is");
  EXPECT_EQ(error_of(R"({"op":"fault","kind":"dup_push","learner":1,"at_step":5})"),
            "dup_push: give a duration or a count (a live fault must end by itself)");
  EXPECT_EQ(error_of(R"({"op":"fault","kind":"nan_step","learner":1,"at_step":-1})"),
            "at_step must be a step number >= 0");
  EXPECT_EQ(error_of(R"({"op":"fault","kind":"nan_step","learner":1,"at_fraction":1.5})"),
            "at_fraction must be a number in [0, 1]");
  o.steps_per_learner = 0;
  o.port = 0;
  chaos_endpoint unknown(o, &c.hooks);
  EXPECT_EQ(unknown.handle(R"({"op":"fault","kind":"nan_step","learner":1,"at_fraction":0.5})")
                .value("error", std::string()),
            "at_fraction: node 'learner-1' does not know its learners' step budget");
}

TEST(ChaosEndpoint, ListensOnLoopbackOnly) {
  clocked c;
  chaos_endpoint_options o;
  o.host = "0.0.0.0";
  try {
    chaos_endpoint ep(o, &c.hooks);
    FAIL() << "a non-loopback endpoint was started";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("not a loopback address"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(chaos_endpoint_loopback("127.0.0.1"));
  EXPECT_TRUE(chaos_endpoint_loopback("127.3.0.9"));
  EXPECT_TRUE(chaos_endpoint_loopback("localhost"));
  EXPECT_FALSE(chaos_endpoint_loopback("10.0.0.1"));
  EXPECT_FALSE(chaos_endpoint_loopback("128.0.0.1"));
}

// Issue 11: a learner node whose connection CAF keeps with dead proxies (a garbled frame) shuts
// its sockets to the syncer down; only those: the other peer's connection stays.
TEST(learner_node_connections, shutdown_ends_only_the_sockets_to_that_peer) {
  auto listen_any = [](uint16_t* port) {
    const int fd = dd::util::listen_loopback(0, port, false, 4);
    EXPECT_GE(fd, 0) << std::strerror(errno);
    return fd;
  };
  auto connect_to = [](uint16_t port) {
    const int fd = dd::util::connect_loopback(port);
    EXPECT_GE(fd, 0) << std::strerror(errno);
    return fd;
  };
  uint16_t syncer_port = 0, other_port = 0;
  const int syncer = listen_any(&syncer_port), other = listen_any(&other_port);
  const int to_syncer = connect_to(syncer_port), to_other = connect_to(other_port);
  const int at_syncer = ::accept(syncer, nullptr, nullptr);
  const int at_other = ::accept(other, nullptr, nullptr);
  EXPECT_EQ(shutdown_connections_to({{"127.0.0.1", syncer_port}}), 1);
  auto readable_eof = [](int fd) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 500) != 1) return false;
    char c;
    return ::recv(fd, &c, 1, 0) == 0;
  };
  EXPECT_TRUE(readable_eof(at_syncer));  // the syncer's side sees the connection end
  pollfd p{at_other, POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 200), 0);  // the other connection is untouched
  EXPECT_EQ(::send(to_other, "x", 1, MSG_NOSIGNAL), 1);
  for (int fd : {syncer, other, to_syncer, to_other, at_syncer, at_other}) ::close(fd);
}

}  // namespace
}  // namespace dd::actors
