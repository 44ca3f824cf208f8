// tests/actors/membership_test.cpp — table tests of the health monitor's membership core
// (actors/roles/membership.hpp) on a manual clock: joins and reservations, incarnations, lease
// expiry, stragglers, the push clock and the token budget, leaves, a returning node, live-rejoin
// accounting, drains and the monitor record. Every time below is the monitor's clock, seconds.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "actors/roles/membership.hpp"
#include "actors/roles/monitor_log.hpp"
#include "actors/services/run_log.hpp"
#include "actors/services/run_report.hpp"
#include "tests/support/wire_msgs.hpp"

namespace dd::actors {
namespace {

membership_options options(int learners, bool remote = false) {
  membership_options o;
  o.learners = learners;
  o.lease_min_s = 2.0;
  o.lease_steps = 50.0;
  o.reclaim_min_s = 1.0;
  o.reserve_s = 30.0;
  o.remote_learners = remote;
  o.run_id = "00000000000000ab";
  o.data_bytes = 100;
  o.data_hash = "d";
  return o;
}

join_request join_as(int32_t id) {
  join_request r;
  r.requested_learner_id = id;
  return r;
}

using test::heartbeat;

dd::node_join node_asking(const std::string& name, std::vector<int32_t> ids) {
  dd::node_join j;
  j.run_id = "00000000000000ab";
  j.node_name = name;
  j.learner_ids = std::move(ids);
  j.learner_count = static_cast<uint32_t>(j.learner_ids.size());
  j.data_bytes = 100;
  j.data_hash = "d";
  return j;
}

TEST(membership, a_lease_expires_after_max_of_its_minimum_and_50_step_times_without_a_heartbeat) {
  // lease = max(lease_min_s = 2, 50 × EMA): EMA 0 → 2 s, 0.01 → 2 s, 0.1 → 5 s. Expired when
  // strictly more than the lease has passed since the last heartbeat (at t = 10).
  struct row {
    double ema, tick_at;
    bool expired;
  };
  const std::vector<row> rows = {
      {0.0, 12.0, false}, {0.0, 12.01, true}, {0.01, 11.9, false}, {0.01, 12.5, true},
      {0.1, 14.9, false}, {0.1, 15.0, false}, {0.1, 15.01, true},
  };
  for (const auto& r : rows) {
    membership m(options(1), 0.0);
    ASSERT_TRUE(m.join(join_as(0), "", 0.0).accepted());
    ASSERT_TRUE(m.heartbeat(heartbeat(0, 0, 1, 10, r.ema), 10.0).accepted());
    const uint64_t epoch = m.view().epoch;
    const auto d = m.tick(r.tick_at);
    ASSERT_EQ(d.expired.size(), r.expired ? 1u : 0u) << "EMA " << r.ema << " at " << r.tick_at;
    if (!r.expired) continue;
    EXPECT_EQ(d.expired[0].id, 0);
    EXPECT_EQ(d.expired[0].reason, "lease expired");
    EXPECT_EQ(d.expired[0].step, 1u);
    EXPECT_TRUE(d.expired[0].view.learners.empty());  // the view to publish: without it
    EXPECT_EQ(d.expired[0].view.epoch, epoch + 1);
    EXPECT_FALSE(m.learners().at(0).alive);
    EXPECT_FALSE(m.learners().at(0).finished);  // dead, not finished: a respawn may rejoin
    EXPECT_EQ(m.live_count(), 0u);
    EXPECT_TRUE(m.tick(r.tick_at + 100).expired.empty());  // declared once
  }
}

TEST(membership, a_straggler_is_flagged_once_above_1_5_times_the_median_step_time) {
  membership m(options(3), 0.0);
  for (int32_t id = 0; id < 3; ++id) ASSERT_TRUE(m.join(join_as(id), "", 0.0).accepted());
  struct row {
    double ema2;         // learner 2's EMA (learners 0 and 1: 0.1 s, so the median is 0.1)
    bool newly_flagged;  // reported by this tick
    bool straggler;      // its flag after the tick
  };
  const std::vector<row> rows = {
      {0.15, false, false},  // exactly 1.5 × median: not above
      {0.2, true, true},     // above: flagged
      {0.3, false, true},    // still slow: flagged, not reported again
      {0.12, false, false},  // caught up: unflagged
      {0.25, true, true},    // slow again: reported again
  };
  double t = 1.0;
  for (const auto& r : rows) {
    for (int32_t id = 0; id < 3; ++id)
      ASSERT_TRUE(
          m.heartbeat(heartbeat(id, 0, static_cast<uint64_t>(t), 1, id == 2 ? r.ema2 : 0.1), t)
              .accepted());
    const auto d = m.tick(t);
    EXPECT_TRUE(d.expired.empty());
    ASSERT_EQ(d.stragglers.size(), r.newly_flagged ? 1u : 0u) << "EMA " << r.ema2;
    if (r.newly_flagged) {
      EXPECT_EQ(d.stragglers[0].id, 2);
      EXPECT_DOUBLE_EQ(d.stragglers[0].step_time_s, r.ema2);
      EXPECT_DOUBLE_EQ(d.stragglers[0].median_s, 0.1);
    }
    EXPECT_EQ(m.learners().at(2).straggler, r.straggler) << "EMA " << r.ema2;
    t += 1.0;
  }
}

TEST(membership, a_reservation_holds_an_id_for_its_node_until_it_expires) {
  membership m(options(1, /*remote=*/true), 0.0);
  auto a = m.node_join(node_asking("node-a", {0}), "caf-a", 0.0);
  ASSERT_TRUE(a.accepted) << a.reason;
  EXPECT_EQ(a.ids, std::vector<int32_t>{0});
  // Another node is refused while node-a's reservation holds (30 s), granted after.
  auto b = m.node_join(node_asking("node-b", {0}), "caf-b", 29.0);
  EXPECT_FALSE(b.accepted);
  EXPECT_EQ(b.refusal, node_refusal::no_free_learner);
  // node-a asking again keeps its own reservation.
  EXPECT_TRUE(m.node_join(node_asking("node-a", {0}), "caf-a", 10.0).accepted);
  // A learner joins only with a reservation in force (node-a's, renewed at t = 10: until 40).
  auto late = m.join(join_as(0), "caf-a", 40.5);
  EXPECT_EQ(late.what, join_decision::verdict::not_reserved);
  EXPECT_EQ(late.reason, "learner 0 joined without a node handshake reserving it");
  auto b2 = m.node_join(node_asking("node-b", {0}), "caf-b", 41.0);
  ASSERT_TRUE(b2.accepted) << b2.reason;
  auto j = m.join(join_as(0), "caf-b", 42.0);
  ASSERT_TRUE(j.accepted()) << j.reason;
  EXPECT_EQ(j.what, join_decision::verdict::joined);
  EXPECT_EQ(m.learners().at(0).node, "node-b");  // the reservation names its node
  // Live on node-b: another node is refused, and a join without a reservation says where it is.
  EXPECT_EQ(m.node_join(node_asking("node-c", {0}), "caf-c", 43.0).refusal,
            node_refusal::no_free_learner);
  EXPECT_EQ(m.join(join_as(0), "caf-c", 43.0).reason,
            "learner 0 joined without a node handshake reserving it (it is live on node "
            "'node-b')");
}

// A learner node whose ask for ids went unanswered asks again at once on a fresh connection
// (learner_node_core::on_ids); the syncer may have granted the lost ask. The same node asking
// again, by count, gets the ids it holds back and reserves no other: the rest stay free.
TEST(membership, a_repeated_ask_for_ids_from_the_same_node_is_granted_the_same_ids) {
  membership m(options(2, /*remote=*/true), 0.0);
  auto ask = node_asking("node-a", {});
  ask.learner_count = 1;
  const auto first = m.node_join(ask, "caf-a", 0.0);
  ASSERT_TRUE(first.accepted) << first.reason;
  EXPECT_EQ(first.ids, std::vector<int32_t>{0});
  const auto again = m.node_join(ask, "caf-a", 1.0);
  ASSERT_TRUE(again.accepted) << again.reason;
  EXPECT_EQ(again.ids, std::vector<int32_t>{0});
  // Learner 1 is still free for another node; learner 0 is not.
  auto other = node_asking("node-b", {});
  other.learner_count = 2;
  const auto b = m.node_join(other, "caf-b", 2.0);
  ASSERT_TRUE(b.accepted) << b.reason;
  EXPECT_EQ(b.ids, std::vector<int32_t>{1});
  // The learner joins on node-a's reservation.
  const auto j = m.join(join_as(0), "caf-a", 3.0);
  ASSERT_TRUE(j.accepted()) << j.reason;
  EXPECT_EQ(m.learners().at(0).node, "node-a");
}

TEST(membership, node_handshakes_are_refused_with_a_reason) {
  struct row {
    std::string what;
    std::function<void(dd::node_join&)> edit;
    bool stopping;
    node_refusal refusal;
  };
  const std::vector<row> rows = {
      {"protocol", [](dd::node_join& j) { j.protocol_version = 1; }, false,
       node_refusal::protocol_version},
      {"run", [](dd::node_join& j) { j.run_id = "00000000000000cd"; }, false,
       node_refusal::other_run},
      {"data size", [](dd::node_join& j) { j.data_bytes = 99; }, false,
       node_refusal::data_mismatch},
      {"data hash", [](dd::node_join& j) { j.data_hash = "e"; }, false,
       node_refusal::data_mismatch},
      {"stopping", [](dd::node_join&) {}, true, node_refusal::run_finished},
      {"id out of range", [](dd::node_join& j) { j.learner_ids = {5}; }, false,
       node_refusal::no_free_learner},
  };
  for (const auto& r : rows) {
    membership m(options(2, true), 0.0);
    if (r.stopping) m.stop(0.0);
    auto j = node_asking("node-a", {0});
    r.edit(j);
    auto d = m.node_join(j, "caf-a", 1.0);
    EXPECT_FALSE(d.accepted) << r.what;
    EXPECT_EQ(d.refusal, r.refusal) << r.what << ": " << d.reason;
    EXPECT_FALSE(d.reason.empty()) << r.what;
  }
  // Asking for no learner only asks for the run's description: accepted, even when stopping.
  membership m(options(2, true), 0.0);
  m.stop(0.0);
  auto describe = node_asking("node-a", {});
  describe.learner_count = 0;
  auto d = m.node_join(describe, "caf-a", 1.0);
  EXPECT_TRUE(d.accepted);
  EXPECT_TRUE(d.describe_only);
  EXPECT_TRUE(d.ids.empty());
}

// Mutual TLS: a node gets only the learner ids its certificate names (learner-N); asking for
// another is unauthorized, and a count is filled from the named ids only.
TEST(membership, a_node_takes_only_the_learner_ids_its_certificate_names) {
  struct row {
    const char* what;
    std::vector<int32_t> ask;  // empty: a count of `count`
    uint32_t count;
    std::set<int32_t> granted;
    bool accepted;
    std::vector<int32_t> ids;
    const char* reason;  // a part of the refusal's reason
  };
  const row rows[] = {
      {"its own id", {1}, 1, {1}, true, {1}, ""},
      {"its own ids", {0, 2}, 2, {0, 2}, true, {0, 2}, ""},
      {"another's id", {0}, 1, {1}, false, {}, "learner ids 0 are not named"},
      {"one of its own and one not", {1, 3}, 2, {1}, false, {}, "learner ids 3 are not named"},
      {"a count: filled from its own", {}, 2, {2, 3}, true, {2, 3}, ""},
      {"a count larger than its own", {}, 3, {3}, true, {3}, ""},
      {"a certificate naming no id", {}, 1, {}, false, {}, "names no learner id"},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.what);
    membership m(options(4, true), 0.0);
    auto j = node_asking("node-a", r.ask);
    j.learner_count = r.count;
    auto d = m.node_join(j, "caf-a", 1.0, &r.granted);
    EXPECT_EQ(d.accepted, r.accepted) << d.reason;
    EXPECT_EQ(d.ids, r.ids);
    if (!r.accepted) {
      EXPECT_EQ(d.refusal, node_refusal::unauthorized);
      EXPECT_NE(d.reason.find(r.reason), std::string::npos) << d.reason;
    }
  }
  // Without a certificate constraint (no TLS) the same request for another's id is granted.
  membership m(options(4, true), 0.0);
  EXPECT_TRUE(m.node_join(node_asking("node-a", {0}), "caf-a", 1.0).accepted);
}

TEST(membership, a_respawned_learner_rejoins_with_the_next_incarnation_from_its_own_record) {
  membership m(options(2, true), 0.0);
  ASSERT_TRUE(m.node_join(node_asking("node-a", {0, 1}), "caf-a", 0.0).accepted);
  ASSERT_TRUE(m.join(join_as(0), "caf-a", 0.0).accepted());
  ASSERT_TRUE(m.heartbeat(heartbeat(0, 0, 12, 1200, 0.1), 1.0).accepted());
  auto down = m.down(0, /*normal_exit=*/false, "killed", 2.0);
  ASSERT_EQ(down.what, down_decision::verdict::dead);
  ASSERT_TRUE(down.dead.has_value());
  EXPECT_EQ(down.dead->reason, "killed");
  // Its node's supervisor respawns the actor in the same process (the same CAF node): no new
  // handshake needed. A stranger's join of the id is refused.
  EXPECT_EQ(m.join(join_as(0), "caf-other", 2.5).what, join_decision::verdict::not_reserved);
  auto j = m.join(join_as(0), "caf-a", 3.0);
  ASSERT_TRUE(j.accepted()) << j.reason;
  EXPECT_EQ(j.what, join_decision::verdict::rejoined);
  EXPECT_TRUE(j.known);
  EXPECT_TRUE(j.restart);
  EXPECT_FALSE(j.replaced.has_value());
  EXPECT_EQ(j.incarnation, 1u);
  EXPECT_EQ(j.resume_step, 12u);
  EXPECT_EQ(m.learners().at(0).tokens_before, 1200u);
  EXPECT_EQ(m.learners().at(0).tokens_this_incarnation, 0u);
  // A heartbeat of the old incarnation is refused; the new one's counts on top.
  EXPECT_EQ(m.heartbeat(heartbeat(0, 0, 13, 1300, 0.1), 3.1).what,
            heartbeat_decision::verdict::stale_incarnation);
  auto hb = m.heartbeat(heartbeat(0, 1, 13, 100, 0.1), 3.2);
  ASSERT_TRUE(hb.accepted());
  EXPECT_EQ(hb.total_tokens, 1300u);
  EXPECT_EQ(m.heartbeat(heartbeat(7, 0, 1, 1, 0.1), 3.3).what,
            heartbeat_decision::verdict::unknown_learner);
}

TEST(membership, a_join_of_a_live_id_replaces_its_incarnation_and_says_so) {
  membership m(options(1), 0.0);
  ASSERT_TRUE(m.join(join_as(0), "p", 0.0).accepted());
  const uint64_t epoch = m.view().epoch;
  auto j = m.join(join_as(0), "p", 1.0);
  ASSERT_TRUE(j.accepted());
  ASSERT_TRUE(j.replaced.has_value());
  EXPECT_EQ(j.replaced->reason, "replaced by a new incarnation");
  EXPECT_EQ(j.replaced->incarnation, 0u);
  // The view between the two (to publish first) has no learner; the one after, the new
  // incarnation: two changes.
  EXPECT_TRUE(j.replaced->view.learners.empty());
  EXPECT_EQ(j.replaced->view.epoch, epoch + 1);
  ASSERT_EQ(m.view().learners.size(), 1u);
  EXPECT_EQ(m.view().learners[0].incarnation, 1u);
  EXPECT_EQ(m.view().epoch, epoch + 2);
}

TEST(membership, a_live_rejoin_counts_what_the_learner_trained_while_the_syncer_was_away) {
  // The record has tokens_before 500 and this incarnation's 100 tokens, 2 s of compute at step
  // 20; the learner rejoins live (the syncer came back) saying where it is.
  struct row {
    uint64_t step, tokens, incarnation;
    double compute_s;
    uint64_t want_step, want_tokens_before, want_incarnation;
    double want_compute_before_s;
  };
  const std::vector<row> rows = {
      // Trained on: its own figures are newer than the last heartbeat.
      {30, 250, 0, 3.0, 30, 750, 1, 5.0},
      // Reports less than the record (a heartbeat got through later): the record stands.
      {18, 60, 0, 1.0, 20, 600, 1, 4.0},
      // A non-finite compute figure counts as none.
      {30, 250, 0, std::nan(""), 30, 750, 1, 4.0},
      // It carries a newer incarnation than the record: the next after it.
      {30, 250, 4, 3.0, 30, 750, 5, 5.0},
  };
  for (const auto& r : rows) {
    membership m(options(1), 0.0);
    monitor_record rec;
    rec.learners.push_back({0, 0, false, 20, 500, 100, 2.0, 2.0, {}});
    m.restore(rec, 0.0);
    join_request req = test::live_rejoin(0, r.incarnation, r.step, r.tokens);
    req.compute_s = r.compute_s;
    auto j = m.join(req, "", 1.0);
    ASSERT_TRUE(j.accepted());
    EXPECT_EQ(j.what, join_decision::verdict::rejoined);
    EXPECT_TRUE(j.live);
    EXPECT_FALSE(j.restart);  // a live rejoin is no restart
    const auto& l = m.learners().at(0);
    EXPECT_EQ(l.step, r.want_step) << "step " << r.step;
    EXPECT_EQ(j.resume_step, r.want_step);
    EXPECT_EQ(l.tokens_before, r.want_tokens_before) << "tokens " << r.tokens;
    EXPECT_EQ(l.tokens_this_incarnation, 0u);
    EXPECT_EQ(l.incarnation, r.want_incarnation);
    EXPECT_DOUBLE_EQ(l.compute_before_s, r.want_compute_before_s) << "compute " << r.compute_s;
  }
  // A syncer that never knew it (no record): it starts from what the learner says.
  membership fresh(options(1), 0.0);
  join_request req = test::live_rejoin(0, 2, 40, 4000);
  req.compute_s = 8.0;
  auto j = fresh.join(req, "", 0.0);
  ASSERT_TRUE(j.accepted());
  EXPECT_EQ(j.what, join_decision::verdict::rejoined);
  EXPECT_EQ(j.incarnation, 3u);
  EXPECT_EQ(j.resume_step, 40u);
  EXPECT_EQ(fresh.learners().at(0).tokens_before, 4000u);
  EXPECT_DOUBLE_EQ(fresh.learners().at(0).compute_before_s, 8.0);
}

TEST(membership, a_node_that_comes_back_gets_its_learners_back) {
  membership m(options(2, true), 0.0);
  ASSERT_TRUE(m.node_join(node_asking("node-a", {0}), "caf-a", 0.0).accepted);
  ASSERT_TRUE(m.join(join_as(0), "caf-a", 0.0).accepted());
  ASSERT_TRUE(m.heartbeat(heartbeat(0, 0, 5, 50, 0.1), 1.0).accepted());
  // The same CAF node asks again (its link dropped, the monitor saw no down): its live id back.
  auto same = m.node_join(node_asking("node-a", {0}), "caf-a", 1.1);
  EXPECT_TRUE(same.accepted) << same.reason;
  // Another CAF node by the same name while the learner still beats: refused; once its
  // heartbeats stopped max(reclaim_min_s = 1, 5 × EMA = 0.5) s ago: granted.
  EXPECT_FALSE(m.node_join(node_asking("node-a", {0}), "caf-a2", 1.9).accepted);
  EXPECT_TRUE(m.node_join(node_asking("node-a", {0}), "caf-a2", 2.1).accepted);
  EXPECT_FALSE(m.node_join(node_asking("node-b", {0}), "caf-b", 2.2).accepted);
  // Its node was stopped (an interrupted leave): unfinished, and taken back by that node.
  auto l = m.leave(0, 0, /*interrupted=*/true, 3.0);
  ASSERT_EQ(l.what, leave_decision::verdict::left);
  EXPECT_FALSE(l.finished);
  EXPECT_FALSE(m.learners().at(0).finished);
  auto back = m.node_join(node_asking("node-a", {0}), "caf-a3", 40.0);
  EXPECT_TRUE(back.accepted) << back.reason;
  auto j = m.join(join_as(0), "caf-a3", 40.5);
  ASSERT_TRUE(j.accepted()) << j.reason;
  EXPECT_EQ(j.incarnation, 1u);
  EXPECT_EQ(j.resume_step, 5u);
  EXPECT_TRUE(j.restart);
  // It finished (a leave of its budget): its own node takes it back while another learner
  // has not finished; nobody else does.
  ASSERT_TRUE(m.leave(0, 1, false, 41.0).finished);
  EXPECT_FALSE(m.node_join(node_asking("node-b", {0}), "caf-b", 42.0).accepted);
  EXPECT_TRUE(m.node_join(node_asking("node-a", {0}), "caf-a4", 42.0).accepted);
}

TEST(membership, leaves_and_downs_are_recorded_once) {
  struct row {
    bool stopping, interrupted, finished, away;
  };
  for (const auto& r : std::vector<row>{{false, false, true, false},
                                        {true, false, false, false},
                                        {false, true, false, true},
                                        {true, true, false, true}}) {
    membership m(options(1), 0.0);
    ASSERT_TRUE(m.join(join_as(0), "", 0.0).accepted());
    if (r.stopping) {
      EXPECT_EQ(m.stop(0.5), std::vector<int32_t>{0});
    }
    EXPECT_EQ(m.leave(0, 7, false, 1.0).what, leave_decision::verdict::not_current);
    auto l = m.leave(0, 0, r.interrupted, 1.0);
    EXPECT_EQ(l.what, leave_decision::verdict::left);
    EXPECT_EQ(l.finished, r.finished);
    EXPECT_EQ(l.away, r.away);
    EXPECT_EQ(m.leave(0, 0, r.interrupted, 1.5).what, leave_decision::verdict::already_gone);
    EXPECT_EQ(m.down(0, true, "normal", 2.0).what, down_decision::verdict::already_gone);
  }
  // An actor that exits normally without a leave: as a leave.
  membership m(options(1), 0.0);
  ASSERT_TRUE(m.join(join_as(0), "", 0.0).accepted());
  auto d = m.down(0, true, "normal", 1.0);
  EXPECT_EQ(d.what, down_decision::verdict::left);
  EXPECT_TRUE(d.finished);
}

// Regression: `dd-node status` showed lease age 0.00 s for a learner that was down (paused with
// SIGSTOP 30 s) while /status and the metrics gave ~25 s. The status's lease_age_s is the time
// since the learner's last heartbeat in every state: live, down (lease expired), left.
TEST(membership, the_status_lease_age_counts_since_the_last_heartbeat_also_when_down) {
  membership m(options(2), 0.0);
  ASSERT_TRUE(m.join(join_as(0), "", 0.0).accepted());
  ASSERT_TRUE(m.join(join_as(1), "", 0.0).accepted());
  ASSERT_TRUE(m.heartbeat(heartbeat(1, 0, 1, 10, 0.0), 4.0).accepted());
  ASSERT_TRUE(m.heartbeat(heartbeat(0, 0, 1, 10, 0.0), 10.0).accepted());
  ASSERT_EQ(m.tick(11.5).expired.size(), 1u);  // learner 1: lease 2 s, silent since 4.0
  ASSERT_FALSE(m.learners().at(1).alive);
  const auto s = m.status(35.0);
  ASSERT_EQ(s["learners"].size(), 2u);
  for (const auto& l : s["learners"]) {
    const double expected = l["learner"] == 0 ? 25.0 : 31.0;
    EXPECT_DOUBLE_EQ(l["lease_age_s"].get<double>(), expected) << l.dump();
  }
  EXPECT_FALSE(s["learners"][1]["alive"].get<bool>());
}

// The evaluator's every_steps clock: Σ step_m / M over the M learners of the run. A learner not
// yet joined counts 0, a respawned one resumes its recorded step, one that left keeps its last
// step; M < 1 gives 0.
TEST(membership, the_global_step_is_every_learner_s_own_step_summed_over_m) {
  membership m(options(4), 0.0);
  EXPECT_EQ(m.global_step(), 0.0);
  for (int32_t id : {0, 1, 2}) ASSERT_TRUE(m.join(join_as(id), "", 0.0).accepted());
  struct row {
    const char* what;
    std::function<void()> act;
    double global_step;
  };
  const std::vector<row> rows = {
      {"joined, no step yet", [] {}, 0.0},
      {"learner 0 at 10",
       [&] { ASSERT_TRUE(m.heartbeat(heartbeat(0, 0, 10, 0, 0.1), 1.0).accepted()); }, 10.0 / 4},
      {"learner 1 at 6",
       [&] { ASSERT_TRUE(m.heartbeat(heartbeat(1, 0, 6, 0, 0.1), 1.1).accepted()); }, 16.0 / 4},
      {"learner 2 at 4",
       [&] { ASSERT_TRUE(m.heartbeat(heartbeat(2, 0, 4, 0, 0.1), 1.2).accepted()); }, 20.0 / 4},
      {"learner 1 dies: its step stays",
       [&] { ASSERT_EQ(m.down(1, false, "crash", 2.0).what, down_decision::verdict::dead); },
       20.0 / 4},
      {"learner 1 respawned resumes at 6",
       [&] { ASSERT_TRUE(m.join(join_as(1), "", 2.5).accepted()); }, 20.0 / 4},
      {"learner 1's new incarnation at 8",
       [&] { ASSERT_TRUE(m.heartbeat(heartbeat(1, 1, 8, 0, 0.1), 3.0).accepted()); }, 22.0 / 4},
      {"learner 0 leaves at 10",
       [&] { ASSERT_EQ(m.leave(0, 0, false, 4.0).what, leave_decision::verdict::left); }, 22.0 / 4},
  };
  for (const auto& r : rows) {
    r.act();
    EXPECT_DOUBLE_EQ(m.global_step(), r.global_step) << r.what;
  }
  EXPECT_EQ(membership(options(0), 0.0).global_step(), 0.0);
}

TEST(membership, the_push_clock_moves_by_new_steps_over_the_live_learners) {
  membership m(options(2), 0.0);
  ASSERT_TRUE(m.join(join_as(0), "", 0.0).accepted());
  ASSERT_TRUE(m.join(join_as(1), "", 0.0).accepted());
  struct row {
    int32_t id;
    uint64_t step;
    double mean_step;
  };
  // Each of two live learners' steps moves it by 1/2; a step back or a repeat by nothing; a
  // jump is capped at 1000 steps.
  const std::vector<row> rows = {
      {0, 4, 2.0}, {1, 2, 3.0}, {0, 4, 3.0}, {0, 3, 3.0}, {1, 2002, 503.0}};
  double t = 1.0;
  for (const auto& r : rows) {
    auto hb = m.heartbeat(heartbeat(r.id, 0, r.step, 1, 0.1), t += 0.1);
    ASSERT_TRUE(hb.accepted());
    EXPECT_EQ(hb.live, 2u);
    EXPECT_DOUBLE_EQ(hb.mean_step, r.mean_step) << "learner " << r.id << " step " << r.step;
  }
}

TEST(membership, the_token_budget_is_reported_once_when_spent) {
  auto o = options(2);
  o.token_budget = 1000;
  membership m(o, 0.0);
  ASSERT_TRUE(m.join(join_as(0), "", 0.0).accepted());
  ASSERT_TRUE(m.join(join_as(1), "", 0.0).accepted());
  EXPECT_FALSE(m.heartbeat(heartbeat(0, 0, 1, 600, 0.1), 1.0).budget_spent);
  auto spent = m.heartbeat(heartbeat(1, 0, 1, 400, 0.1), 1.1);
  EXPECT_TRUE(spent.budget_spent);
  EXPECT_EQ(spent.total_tokens, 1000u);
  EXPECT_FALSE(m.heartbeat(heartbeat(1, 0, 2, 500, 0.1), 1.2).budget_spent);
}

TEST(membership, remote_learners_are_done_when_all_left_or_none_is_live_after_a_stop) {
  membership m(options(2, true), 0.0);
  ASSERT_TRUE(m.node_join(node_asking("n", {0, 1}), "c", 0.0).accepted);
  ASSERT_TRUE(m.join(join_as(0), "c", 0.0).accepted());
  ASSERT_TRUE(m.join(join_as(1), "c", 0.0).accepted());
  ASSERT_TRUE(m.leave(0, 0, false, 1.0).finished);
  EXPECT_FALSE(m.done_due());
  ASSERT_TRUE(m.leave(1, 0, false, 2.0).finished);
  EXPECT_TRUE(m.done_due());
  EXPECT_FALSE(m.done_due());  // once
  membership s(options(2, true), 0.0);
  ASSERT_TRUE(s.node_join(node_asking("n", {0}), "c", 0.0).accepted);
  ASSERT_TRUE(s.join(join_as(0), "c", 0.0).accepted());
  EXPECT_EQ(s.stop(1.0), std::vector<int32_t>{0});
  EXPECT_FALSE(s.done_due());
  EXPECT_EQ(s.join(join_as(1), "c", 1.5).what, join_decision::verdict::stopping);
  s.leave(0, 0, false, 2.0);
  EXPECT_FALSE(s.learners().at(0).finished);  // stopped, not finished: a resume takes it back
  EXPECT_TRUE(s.done_due());
}

TEST(membership, a_drain_names_why_it_cannot_be_done) {
  membership m(options(3, true), 0.0);
  ASSERT_TRUE(m.node_join(node_asking("node-a", {0, 1, 2}), "c", 0.0).accepted);
  ASSERT_TRUE(m.join(join_as(0), "c", 0.0).accepted());
  ASSERT_TRUE(m.join(join_as(1), "c", 0.0).accepted());
  m.leave(1, 0, false, 1.0);
  m.tick(40.0);  // learner 0's lease (2 s) ran out
  struct row {
    int32_t id;
    bool accepted;
    std::string detail;
  };
  const std::vector<row> rows = {
      {5, false, "no such learner: learner:5 (the run has learners 0..2)"},
      {2, false, "learner:2 has not joined yet"},
      {1, false, "learner:1 has finished (left at step 0)"},
      {0, false,
       "learner:0 is not connected (link down since 2.0 s ago: lease expired); drain it once it "
       "rejoins"},
  };
  for (const auto& r : rows) {
    auto d = m.drain(r.id, 42.0);
    EXPECT_EQ(d.accepted, r.accepted) << r.id;
    EXPECT_EQ(d.detail, r.detail);
  }
  ASSERT_TRUE(m.node_join(node_asking("node-a", {0}), "c2", 50.0).accepted);
  ASSERT_TRUE(m.join(join_as(0), "c2", 50.0).accepted());
  auto ok = m.drain(0, 51.0);
  EXPECT_TRUE(ok.accepted);
  EXPECT_EQ(ok.detail, "learner 0 (incarnation 1, node node-a) stops at its next step and leaves");
}

TEST(monitor_record, round_trips_and_names_what_is_wrong) {
  monitor_record rec;
  rec.mean_step = 3.5;
  rec.training_seconds = 12.0;
  rec.uptime_s = 4.0;
  rec.observed_s = 10.0;
  rec.learners.push_back({2, 1, true, 48, 100, 20, 1.5, 0.5, {0x01, 0xab}});
  const auto j = rec.to_json();
  EXPECT_EQ(j["learners"][0]["data_cursor"], "01ab");
  const auto back = monitor_record::from_json(j);
  EXPECT_DOUBLE_EQ(back.mean_step, 3.5);
  EXPECT_DOUBLE_EQ(back.training_seconds, 12.0);
  ASSERT_EQ(back.learners.size(), 1u);
  EXPECT_EQ(back.learners[0].id, 2);
  EXPECT_EQ(back.learners[0].step, 48u);
  EXPECT_EQ(back.learners[0].data_cursor, (std::vector<uint8_t>{0x01, 0xab}));
  struct bad {
    std::function<void(nlohmann::json&)> edit;
    std::string names;
  };
  const std::vector<bad> bads = {
      {[](nlohmann::json& r) { r["format"] = 2; }, "format"},
      {[](nlohmann::json& r) { r["learners"][0]["data_cursor"] = "abc"; }, "odd-length"},
      {[](nlohmann::json& r) { r["learners"][0]["data_cursor"] = "zz"; }, "not hex"},
      {[](nlohmann::json& r) { r["uptime_s"] = 11.0; }, "uptime_s"},
      {[](nlohmann::json& r) { r["learners"][0].erase("step"); }, "step"},
  };
  for (const auto& b : bads) {
    auto r = j;
    b.edit(r);
    try {
      monitor_record::from_json(r);
      ADD_FAILURE() << "accepted: " << r.dump();
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(b.names), std::string::npos) << e.what();
    }
  }
}

TEST(membership, a_record_carries_the_learners_and_the_run_s_seconds_across_a_resume) {
  membership m(options(2), 100.0);
  monitor_record before;
  before.training_seconds = 12.5;
  before.mean_step = 3.0;
  before.learners.push_back({1, 2, false, 7, 70, 0, 1.0, 0.0, {0x05}});
  before.learners.push_back({0, 0, true, 9, 90, 0, 1.0, 0.0, {}});
  m.restore(before, 100.0);
  EXPECT_FALSE(m.learners().at(1).alive);
  const auto rec = m.record(104.25);
  EXPECT_DOUBLE_EQ(rec.training_seconds, 16.75);
  EXPECT_DOUBLE_EQ(rec.mean_step, 3.0);
  ASSERT_EQ(rec.learners.size(), 2u);
  EXPECT_EQ(rec.learners[1].step, 7u);
  EXPECT_TRUE(rec.learners[0].finished);
  // A respawn of learner 1 resumes at its recorded step and cursor, incarnation 3.
  auto j = m.join(join_as(1), "", 105.0);
  ASSERT_TRUE(j.accepted());
  EXPECT_EQ(j.incarnation, 3u);
  EXPECT_EQ(j.resume_step, 7u);
  EXPECT_EQ(j.data_cursor, std::vector<uint8_t>{0x05});
  EXPECT_EQ(m.total_tokens(), 160u);
  // The record is written every record_every_s (2 s), failures retried with backoff.
  EXPECT_TRUE(m.tick(105.0).save_record);
  EXPECT_FALSE(m.record_written(true, 105.0));
  EXPECT_FALSE(m.tick(106.0).save_record);
  EXPECT_TRUE(m.tick(107.0).save_record);
  EXPECT_FALSE(m.record_written(false, 107.0));  // retry at 107.5
  EXPECT_FALSE(m.tick(107.4).save_record);
  EXPECT_TRUE(m.tick(107.5).save_record);
  EXPECT_FALSE(m.record_written(false, 107.5));  // backoff 1 s: retry at 108.5
  EXPECT_FALSE(m.tick(108.4).save_record);
  EXPECT_TRUE(m.tick(108.5).save_record);
  EXPECT_TRUE(m.record_written(true, 108.5));  // recovered
}

// The node's verdict on a failed write of the record (write_verdict_atom, handled by the monitor)
// decides whether the record is retried: retry_degraded keeps the backoff (0.5 s, then 1 s),
// end_the_run stops the retries (the node ends the run) until a write succeeds again; a verdict
// that comes while the record is not failing changes nothing.
// Regression: after a syncer resume, a learner not rejoined yet showed "L0 ✗ down 0.000", a
// loss it never had. The record carries each learner's last heartbeat loss; a resumed syncer
// shows it, and "—" for a learner whose record holds none (an older writer, no heartbeat).
TEST(membership, a_resumed_syncer_shows_a_learners_recorded_loss_or_a_dash_never_zero) {
  membership before(options(2), 0.0);
  ASSERT_TRUE(before.join(join_as(0), "", 0.0).accepted());
  ASSERT_TRUE(before.join(join_as(1), "", 0.0).accepted());
  auto hb = heartbeat(1, 0, 40, 4000, 0.1);
  hb.loss = 2.316;
  ASSERT_TRUE(before.heartbeat(hb, 1.0).accepted());
  const auto j = before.record(2.0).to_json();
  EXPECT_FALSE(j["learners"][0].contains("loss"));  // learner 0 sent no heartbeat
  EXPECT_DOUBLE_EQ(j["learners"][1]["loss"].get<double>(), 2.316);
  membership after(options(2), 10.0);
  after.restore(monitor_record::from_json(j), 10.0);
  EXPECT_TRUE(std::isnan(after.learners().at(0).last_loss));
  EXPECT_DOUBLE_EQ(after.learners().at(1).last_loss, 2.316);
  EXPECT_DOUBLE_EQ(after.record(11.0).learners[1].loss, 2.316);  // kept to the next resume
  run_log log;
  monitor_log::restored(&log, after);
  EXPECT_EQ(node_progress_line(log.snapshot(), 12.0),
            "[   12.0s] L0 ✗ down — L1 ✗ down 2.316 | restarts 0");
}

TEST(membership, the_nodes_verdict_decides_whether_a_failed_record_is_retried) {
  using v = write_verdict;
  struct row {
    const char* name;
    std::optional<write_verdict> verdict;  ///< none: no verdict came (yet)
    bool retried_at_half_s, retried_at_1_5_s;
  };
  const row rows[] = {
      {"no verdict yet: the backoff", std::nullopt, true, true},
      {"retry_degraded: the backoff", v::retry_degraded, true, true},
      {"end_the_run: no retries", v::end_the_run, false, false},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.name);
    membership m(options(1), 0.0);
    EXPECT_FALSE(m.record_written(false, 10.0));  // failing: retry due at 10.5
    if (r.verdict) m.record_verdict(*r.verdict);
    EXPECT_FALSE(m.tick(10.4).save_record);
    EXPECT_EQ(m.tick(10.5).save_record, r.retried_at_half_s);
    if (r.retried_at_half_s) {
      EXPECT_FALSE(m.record_written(false, 10.5));  // next at 11.5
    }
    EXPECT_FALSE(m.tick(11.4).save_record);
    EXPECT_EQ(m.tick(11.5).save_record, r.retried_at_1_5_s);
    EXPECT_EQ(m.tick(60.0).save_record, r.retried_at_1_5_s);  // never, once told to stop
    // A write that succeeds (a join or a leave writes the record at once) ends the failure:
    // the record is written every record_every_s (2 s) again.
    EXPECT_EQ(m.record_written(true, 60.0), true);
    EXPECT_FALSE(m.tick(61.9).save_record);
    EXPECT_TRUE(m.tick(62.0).save_record);
  }
  // A verdict on a record that is written again by now changes nothing.
  membership m(options(1), 0.0);
  EXPECT_FALSE(m.record_written(false, 10.0));
  EXPECT_TRUE(m.record_written(true, 10.5));
  m.record_verdict(v::end_the_run);
  EXPECT_TRUE(m.tick(12.5).save_record);
}

// Divergence detection, as a table: a heartbeat whose held digest differs from the owner's
// digest it reports is a divergence (learner, incarnation, fragment, version, both digests);
// equal digests, no check (held digest 0) and an older learner (no owner digest) are none.
TEST(membership, a_heartbeat_holding_another_value_than_the_owner_s_is_a_divergence) {
  membership m(options(1), 0.0);
  ASSERT_TRUE(m.join(join_as(0), "", 0.0).accepted());
  struct row {
    uint64_t owner, held;
    bool diverged;
  };
  const row rows[] = {{0xabc, 0xabc, false}, {0xabc, 0xabd, true}, {0xabc, 0, false},
                      {0, 0xabd, false},     {7, 7, false},        {7, 8, true}};
  uint64_t step = 1, found = 0;
  for (const auto& r : rows) {
    ++step;
    auto hb = heartbeat(0, 0, step, 10 * step, 0.1);
    hb.held_fragment = 1;
    hb.held_version = 42;
    hb.held_owner_digest = r.owner;
    hb.held_digest = r.held;
    const auto d = m.heartbeat(hb, 0.1 * static_cast<double>(step));
    ASSERT_TRUE(d.accepted());
    EXPECT_EQ(d.diverged.has_value(), r.diverged) << std::hex << r.owner << " " << r.held;
    if (!d.diverged) continue;
    ++found;
    EXPECT_EQ(d.diverged->learner, 0);
    EXPECT_EQ(d.diverged->incarnation, 0u);
    EXPECT_EQ(d.diverged->fragment, 1);
    EXPECT_EQ(d.diverged->version, 42u);
    EXPECT_EQ(d.diverged->owner_digest, r.owner);
    EXPECT_EQ(d.diverged->held_digest, r.held);
  }
  EXPECT_EQ(m.divergences(), found);
  EXPECT_EQ(found, 2u);
}

}  // namespace
}  // namespace dd::actors
