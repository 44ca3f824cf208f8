// tests/actors/health_monitor_test.cpp — the health monitor answers every heartbeat with the
// global progress (Σ tokens of every learner and incarnation) that learners with
// inner.schedule_clock = "global" follow. Real CAF threads; each wait is bounded.
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <caf/all.hpp>
#include <nlohmann/json.hpp>

#include "actors/link/atoms.hpp"
#include "actors/roles/health_monitor.hpp"
#include "actors/services/run_log.hpp"
#include "actors/services/run_report.hpp"
#include "messages/codec.hpp"
#include "messages/control.hpp"
#include "tests/actors/test_support.hpp"
#include "tests/support/fresh_dir.hpp"

namespace dd::actors {
namespace {

/// A node's handshake from `self` reserving `ids` of `count` learners; whether it was granted
/// (a refusal or an error fails the test).
bool node_join_as(caf::scoped_actor& self, const monitor_hdl& monitor, std::vector<int32_t> ids,
                  int32_t count) {
  node_join nj;
  nj.node_name = "host-a";
  nj.learner_ids = std::move(ids);
  nj.learner_count = count;
  bool granted = false;
  self->request(monitor, std::chrono::seconds(10), atoms::node_join_atom_v, encode(nj, {"", 0}))
      .receive(
          [&](const std::vector<uint8_t>& bytes) {
            auto rep = decode_node_join_reply(bytes, {}, {"", 0});
            granted = rep && rep->accepted;
            if (rep && !rep->accepted) ADD_FAILURE() << "node refused: " << rep->reason;
          },
          [&](caf::error& e) { ADD_FAILURE() << caf::to_string(e); });
  return granted;
}

/// A CAF actor system on real threads, its logs quiet.
struct quiet_system {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  quiet_system() {
    cfg.set("logger.console-verbosity", caf::atom("quiet"));
    cfg.set("logger.file-verbosity", caf::atom("quiet"));
    sys = std::make_unique<caf::actor_system>(cfg);
  }
};

/// A monitor's configuration for `learners` learners and `fragments` owners; the rest its
/// defaults.
std::shared_ptr<monitor_config> monitor_ctx(int32_t learners, int fragments = 0) {
  auto ctx = std::make_shared<monitor_config>();
  ctx->learners = learners;
  ctx->fragments = fragments;
  return ctx;
}

/// A health monitor spawned on `sys` with `ctx`, writing its events to `log` (null: nowhere).
monitor_hdl spawn_monitor(caf::actor_system& sys, const std::shared_ptr<monitor_config>& ctx,
                          event_sink* log = nullptr) {
  monitor_services services;
  services.log = log;
  return sys.spawn(health_monitor, std::shared_ptr<const monitor_config>(ctx), services);
}

/// An actor that drops every message: a learner stand-in whose death the monitor sees.
caf::actor spawn_silent(caf::actor_system& sys) {
  return sys.spawn(
      // The unused int: CAF 0.17 spawns an argument-less function actor through a null
      // shared_ptr<tuple<>> dereference, which UBSan reports.
      [](caf::event_based_actor* self, int) -> caf::behavior {
        self->set_default_handler(caf::drop);
        return {[](int) {}};
      },
      0);
}

/// A job stand-in that calls `on_learners_done` when the monitor reports every learner done, and
/// takes every other message a monitor sends its job.
job_hdl spawn_job(caf::actor_system& sys, std::function<void()> on_learners_done) {
  return sys.spawn(
      // The unused int: as in spawn_silent.
      [on_learners_done](job_hdl::pointer, int) -> job_hdl::behavior_type {
        return {[on_learners_done](atoms::children_done_atom, child_kind k) {
                  if (k == child_kind::learner) on_learners_done();
                },
                [](atoms::child_given_up_atom, child_kind, int32_t, const std::string&) {},
                [](atoms::budget_spent_atom) {},
                [](atoms::stop_atom, const std::string&) {},
                [](atoms::eval_atom, double) {},
                [](atoms::interrupt_timeout_atom) {},
                [](atoms::write_trouble_atom, const std::string&, const std::string&) {}};
      },
      0);
}

/// The monitor's reply to `req` sent from `self` for the learner actor `as` (`self` when null),
/// stamped with `sender_incarnation`; none when no reply decoded (an error fails the test).
std::optional<join_reply> join_reply_to(caf::scoped_actor& self, const monitor_hdl& monitor,
                                        const join_request& req, uint64_t sender_incarnation = 0,
                                        caf::actor as = nullptr) {
  std::optional<join_reply> out;
  const auto learner = as ? caf::actor_cast<learner_at_syncer_hdl>(as)
                          : caf::actor_cast<learner_at_syncer_hdl>(self);
  self->request(monitor, std::chrono::seconds(10), atoms::join_atom_v,
                encode(req, {"", sender_incarnation}), learner)
      .receive(
          [&](const std::vector<uint8_t>& bytes) {
            auto rep = decode_join_reply(bytes.data(), bytes.size());
            if (rep) out = *rep;
          },
          [&](caf::error& e) { ADD_FAILURE() << caf::to_string(e); });
  return out;
}

/// The incarnation a join reply grants, ~0 when none came.
uint64_t incarnation_of(const std::optional<join_reply>& rep) {
  return rep ? rep->incarnation : ~uint64_t{0};
}

/// Learner `id`'s join from `self` (its node reserved it); its incarnation, ~0 on an error (which
/// fails the test).
uint64_t learner_join_as(caf::scoped_actor& self, const monitor_hdl& monitor, int32_t id) {
  join_request req;
  req.requested_learner_id = id;
  return incarnation_of(join_reply_to(self, monitor, req));
}

/// Sends `hb` from `self` (stamped with its incarnation) and waits up to `wait` for the progress
/// reply (skipping the owner directory a monitor may send first); the reply, none when none came.
std::optional<progress_msg> beat_and_wait(caf::scoped_actor& self, const monitor_hdl& monitor,
                                          const heartbeat_msg& hb,
                                          std::chrono::seconds wait = std::chrono::seconds(2)) {
  self->send(monitor, atoms::heartbeat_atom_v, encode(hb, {"", hb.incarnation}));
  std::optional<progress_msg> out;
  bool done = false;
  while (!done) {
    self->receive(
        [&](atoms::progress_atom, const std::vector<uint8_t>& bytes) {
          // The reply travels as codec bytes (a progress_msg).
          auto pm = decode_progress(bytes);
          EXPECT_TRUE(pm.ok()) << pm.error().message;
          if (pm) out = *pm;
          done = true;
        },
        [&](atoms::owners_atom, const std::vector<uint8_t>&, const std::vector<owner_hdl>&) {},
        caf::after(wait) >> [&] { done = true; });
  }
  return out;
}

/// Learner 0's entry in the monitor record `record` once `pred` holds for it, reading the file
/// every 20 ms for up to `wait_ms`; null when it never did.
nlohmann::json wait_for_learner0(const std::filesystem::path& record,
                                 const std::function<bool(const nlohmann::json&)>& pred,
                                 int wait_ms) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  while (std::chrono::steady_clock::now() < end) {
    std::ifstream in(record);
    nlohmann::json rec;
    try {
      if (in) rec = nlohmann::json::parse(in);
    } catch (const std::exception&) {}
    if (rec.is_object() && !rec["learners"].empty() && pred(rec["learners"][0]))
      return rec["learners"][0];
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return nullptr;
}

/// Sends `lm` from `self`; whether the monitor answered it (an error fails the test).
bool leave_answered(caf::scoped_actor& self, const monitor_hdl& monitor, const leave_msg& lm) {
  bool answered = false;
  self->request(monitor, std::chrono::seconds(10), atoms::leave_atom_v,
                encode(lm, {"", lm.incarnation}))
      .receive([&](bool ok) { answered = ok; },
               [&](caf::error& e) { ADD_FAILURE() << caf::to_string(e); });
  return answered;
}

/// Node `j`'s handshake with `monitor` on the test coordinator `env` (expecting replies of j's
/// run); the reply, none when none came.
std::optional<node_join_reply> ask_node_join(dd::test::coordinator& env, const monitor_hdl& monitor,
                                             const node_join& j) {
  std::optional<node_join_reply> out;
  auto probe = env.sys->spawn(
      [&](caf::event_based_actor* p, int) -> caf::behavior {
        p->request(monitor, caf::infinite, atoms::node_join_atom_v, encode(j, {j.run_id, 0}))
            .then([&](const std::vector<uint8_t>& bytes) {
              auto rep = decode_node_join_reply(bytes, {}, {j.run_id, 0});
              EXPECT_TRUE(rep.ok());
              if (rep) out = *rep;
            });
        return {[](int) {}};
      },
      0);
  env.run();
  caf::anon_send_exit(probe, caf::exit_reason::kill);
  env.run();
  return out;
}

struct monitor_fixture : ::testing::Test {
  quiet_system q;
  std::unique_ptr<caf::actor_system>& sys = q.sys;
  monitor_hdl monitor;

  void SetUp() override { monitor = spawn_monitor(*sys, monitor_ctx(2)); }
  void TearDown() override { caf::anon_send_exit(monitor, caf::exit_reason::kill); }

  /// Joins as learner `id` from `self`; returns the incarnation.
  uint64_t join(caf::scoped_actor& self, int32_t id) { return learner_join_as(self, monitor, id); }

  /// live_learners and step of the last progress reply.
  uint32_t last_live = 0;
  uint64_t last_step = 0;
  double last_mean_step = -1.0;

  /// Sends a heartbeat from `self`; returns the progress reply, if one came within 2 s.
  std::optional<uint64_t> beat(caf::scoped_actor& self, int32_t id, uint64_t inc, uint64_t tokens) {
    const auto pm =
        beat_and_wait(self, monitor, test::heartbeat(id, inc, tokens / 2048, tokens, 0.1));
    if (!pm) return std::nullopt;
    last_live = pm->live_learners;
    last_step = pm->step;
    last_mean_step = pm->mean_step;
    return pm->total_tokens;
  }
};

TEST_F(monitor_fixture, every_heartbeat_is_answered_with_the_tokens_of_all_learners) {
  caf::scoped_actor a{*sys}, b{*sys};
  ASSERT_EQ(join(a, 0), 0u);
  ASSERT_EQ(join(b, 1), 0u);
  EXPECT_EQ(beat(a, 0, 0, 6144), std::optional<uint64_t>(6144));
  EXPECT_EQ(last_live, 2u);
  EXPECT_EQ(last_step, 3u);  // the answered heartbeat's step (6144 / 2048), echoed
  EXPECT_EQ(beat(b, 1, 0, 2048), std::optional<uint64_t>(8192));
  EXPECT_EQ(beat(a, 0, 0, 8192), std::optional<uint64_t>(10240));
  // A respawn: learner 1's new incarnation starts its own count; the old tokens still count.
  caf::scoped_actor b2{*sys};
  ASSERT_EQ(join(b2, 1), 1u);
  EXPECT_EQ(beat(b2, 1, 1, 4096), std::optional<uint64_t>(14336));
  // The old incarnation's heartbeat is neither answered nor counted.
  EXPECT_EQ(beat(b, 1, 0, 99999), std::nullopt);
  EXPECT_EQ(beat(a, 0, 0, 10240), std::optional<uint64_t>(16384));
  EXPECT_EQ(last_live, 2u);  // learner 1's new incarnation replaced the old one
}

// The evaluator's every_steps clock and its eval events come from the monitor by message, not
// from the run log: (get_atom, progress_atom) answers Σ step / M over the M learners of the run
// and the tokens of every learner.
TEST_F(monitor_fixture, answers_the_evaluator_the_global_step_and_the_tokens) {
  caf::scoped_actor a{*sys}, b{*sys}, evaluator{*sys};
  auto progress = [&] {
    std::pair<double, uint64_t> out{-1.0, 0};
    evaluator->request(monitor, std::chrono::seconds(10), caf::get_atom_v, atoms::progress_atom_v)
        .receive(
            [&](double step, uint64_t tokens) {
              out = {step, tokens};
            },
            [&](caf::error& e) { ADD_FAILURE() << sys->render(e); });
    return out;
  };
  EXPECT_EQ(progress(), (std::pair<double, uint64_t>{0.0, 0}));
  ASSERT_EQ(join(a, 0), 0u);
  ASSERT_EQ(join(b, 1), 0u);
  ASSERT_TRUE(beat(a, 0, 0, 6144).has_value());  // step 3 (beat: step = tokens / 2048)
  EXPECT_EQ(progress(), (std::pair<double, uint64_t>{1.5, 6144}));
  ASSERT_TRUE(beat(b, 1, 0, 2048).has_value());  // step 1
  EXPECT_EQ(progress(), (std::pair<double, uint64_t>{2.0, 8192}));
}

TEST_F(monitor_fixture, the_push_clock_runs_at_the_live_learners_mean_step_rate) {
  caf::scoped_actor a{*sys}, b{*sys};
  ASSERT_EQ(join(a, 0), 0u);
  ASSERT_EQ(join(b, 1), 0u);
  // Two live learners: each step adds 1/2.
  ASSERT_TRUE(beat(a, 0, 0, 2048));  // step 1
  EXPECT_DOUBLE_EQ(last_mean_step, 0.5);
  ASSERT_TRUE(beat(b, 1, 0, 2048));  // step 1
  EXPECT_DOUBLE_EQ(last_mean_step, 1.0);
  ASSERT_TRUE(beat(a, 0, 0, 4096));  // step 2
  EXPECT_DOUBLE_EQ(last_mean_step, 1.5);
  // A repeated step adds nothing.
  ASSERT_TRUE(beat(a, 0, 0, 4096));
  EXPECT_DOUBLE_EQ(last_mean_step, 1.5);
  // Learner 1 finishes early: learner 0 alone now moves the clock one step per step, where the
  // token count (total / (M × tokens per step)) would move half a step.
  b->send(monitor, atoms::leave_atom_v, encode(dd::leave_msg{1, 0}));
  ASSERT_TRUE(beat(a, 0, 0, 6144));  // step 3
  EXPECT_DOUBLE_EQ(last_mean_step, 2.5);
  ASSERT_TRUE(beat(a, 0, 0, 8192));  // step 4
  EXPECT_DOUBLE_EQ(last_mean_step, 3.5);
}

// a drain says what is true of a learner it cannot drain — no such id, not
// joined, or not connected (its link down: since when and why) — instead of "not live".
TEST_F(monitor_fixture, a_drain_that_cannot_be_done_says_why) {
  caf::scoped_actor op{*sys};
  auto drain = [&](int32_t id) {
    std::string detail = "(no reply)";
    bool accepted = true;
    op->request(monitor, std::chrono::seconds(10), atoms::drain_atom_v,
                encode(drain_msg{id}, {"", 0}))
        .receive(
            [&](const std::vector<uint8_t>& bytes) {
              auto rep = decode_drain_reply(bytes);
              ASSERT_TRUE(rep.ok()) << rep.error().message;
              detail = rep->detail;
              accepted = rep->accepted;
            },
            [&](caf::error&) {});
    EXPECT_FALSE(accepted) << detail;
    return detail;
  };
  EXPECT_EQ(drain(7), "no such learner: learner:7 (the run has learners 0..1)");
  EXPECT_EQ(drain(1), "learner:1 has not joined yet");
  // Learner 0 joins, then its actor dies abnormally (as when its link drops): the monitor's
  // down handler declares it dead.
  auto victim = spawn_silent(*sys);
  join_request req;
  req.requested_learner_id = 0;
  ASSERT_TRUE(join_reply_to(op, monitor, req, 0, victim).has_value());
  caf::anon_send_exit(victim, caf::exit_reason::kill);
  // Wait (read-only: a status request) until the monitor has declared it dead, then drain.
  for (int i = 0; i < 200; ++i) {
    bool down = false;
    op->request(monitor, std::chrono::seconds(10), atoms::status_atom_v,
                encode(status_request{}, {"", 0}))
        .receive(
            [&](const std::vector<uint8_t>& bytes) {
              auto rep = decode_status_reply(bytes);
              if (!rep) return;
              // A named value: a range-for over parse(...)["learners"] would outlive the parsed
              // document (heap-use-after-free, found by ASan).
              const auto view = nlohmann::json::parse(rep->json);
              for (const auto& l : view.at("learners"))
                if (l["learner"] == 0 && !l["alive"].get<bool>()) down = true;
            },
            [&](caf::error&) {});
    if (down) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const std::string detail = drain(0);
  EXPECT_EQ(detail.rfind("learner:0 is not connected (link down since ", 0), 0u) << detail;
  EXPECT_NE(detail.find(" s ago: exit_reason(kill)"), std::string::npos) << detail;
  EXPECT_NE(detail.find("); drain it once it rejoins"), std::string::npos) << detail;
}

// The uptime is computed by the monitor from the heartbeats (who is live and
// stepping), on the logical clock here so the figures are exact: K = 2 of 2 learners; both
// step every 0.2 s for 1 s, then only learner 0 for 1 s. A learner counts as stepping for
// max(0.5 s, 3 × 0.1 s) = 0.5 s after each heartbeat, so learner 1's last heartbeat (t = 0.8)
// covers it until 1.3: both stepping from 0 to 1.3 of the 2 s observed.
TEST(monitor_uptime, counts_the_time_with_k_learners_stepping_from_their_heartbeats) {
  dd::test::coordinator env;
  run_log log{"", /*keep_in_memory=*/true};
  auto ctx = monitor_ctx(2);
  ctx->uptime_quorum = 2;
  auto monitor = spawn_monitor(*env.sys, ctx, &log);
  const caf::actor learners[] = {spawn_silent(*env.sys), spawn_silent(*env.sys)};
  for (int32_t id = 0; id < 2; ++id) {
    join_request req;
    req.requested_learner_id = id;
    caf::anon_send(monitor, atoms::join_atom_v, encode(req),
                   caf::actor_cast<learner_at_syncer_hdl>(learners[id]));
  }
  env.run();
  auto beat = [&](int32_t id, uint64_t step) {
    caf::anon_send(monitor, atoms::heartbeat_atom_v,
                   encode(test::heartbeat(id, 0, step, step * 64, 0.1), {"", 0}));
  };
  for (uint64_t k = 1; k <= 5; ++k) {  // t = 0, 0.2, ..., 0.8: both step
    beat(0, k);
    beat(1, k);
    env.run();
    env.advance(0.2);
  }
  for (uint64_t k = 6; k <= 10; ++k) {  // t = 1.0, ..., 1.8: learner 0 only
    beat(0, k);
    env.run();
    env.advance(0.2);
  }
  // t = 2.0: one more heartbeat of learner 0 makes the monitor report (its ticks fall between).
  beat(0, 11);
  env.run();
  auto c = log.snapshot();
  EXPECT_NEAR(c.uptime_s, 1.3, 1e-9);
  EXPECT_NEAR(c.observed_s, 2.0, 1e-9);
  // Learner 0 dies: from now on nobody counts; the figures keep growing only in observed time.
  caf::anon_send_exit(learners[0], caf::exit_reason::kill);
  env.run();
  env.advance(1.0);
  c = log.snapshot();
  EXPECT_NEAR(c.uptime_s, 1.3, 1e-9);
  EXPECT_NEAR(c.observed_s, 3.0, 1e-9);
  // The end of training: the run log keeps what it has.
  log.freeze_uptime();
  env.advance(1.0);
  EXPECT_NEAR(log.snapshot().observed_s, 3.0, 1e-9);
  env.shutdown_all(monitor, learners[0], learners[1]);
}

// A live rejoin (the learner's link dropped and healed; it stepped on meanwhile) carries the
// compute seconds of its incarnation as it carries its tokens, and the monitor counts them.
// The join request had no compute seconds, the monitor kept only its last
// heartbeat's figure, and the learner's compute since that heartbeat was lost (the learner
// takes what its request reported off its own count at the reply).
TEST(monitor_live_rejoin, counts_the_compute_seconds_its_join_request_reports) {
  const auto dir = dd::test::fresh_dir("dd_monitor_live_rejoin");
  quiet_system q;
  auto ctx = monitor_ctx(1);
  ctx->record_path = (dir / "monitor.json").string();
  auto monitor = spawn_monitor(*q.sys, ctx);
  caf::scoped_actor self{*q.sys};
  auto join = [&](const join_request& req, uint64_t sender_incarnation) {
    return incarnation_of(join_reply_to(self, monitor, req, sender_incarnation));
  };
  join_request first;
  first.requested_learner_id = 0;
  ASSERT_EQ(join(first, 0), 0u);
  // Its last heartbeat before the link dropped: step 1, 128 tokens, 1 s of compute.
  heartbeat_msg hb = test::heartbeat(0, 0, 1, 128, 1.0);
  hb.compute_s = 1.0;
  ASSERT_TRUE(beat_and_wait(self, monitor, hb, std::chrono::seconds(5)).has_value());
  // Back live after stepping on alone: step 3, 384 tokens, 3.25 s of compute.
  join_request live = test::live_rejoin(0, 0, 3, 384);
  live.compute_s = 3.25;
  ASSERT_EQ(join(live, 0), 1u);
  self->send(monitor, atoms::leave_atom_v, encode(dd::leave_msg{0, 1}, {"", 1}));
  // The leave writes the record.
  const nlohmann::json learner = wait_for_learner0(
      dir / "monitor.json", [](const nlohmann::json& l) { return l.value("finished", false); },
      5000);
  ASSERT_TRUE(learner.is_object()) << "no record with the learner finished";
  EXPECT_EQ(learner["incarnation"].get<uint64_t>(), 1u);
  EXPECT_EQ(learner["tokens_before"].get<uint64_t>(), 384u);
  EXPECT_DOUBLE_EQ(learner["compute_before_s"].get<double>(), 3.25);
  EXPECT_DOUBLE_EQ(learner["compute_this_incarnation_s"].get<double>(), 0.0);
  caf::anon_send_exit(monitor, caf::exit_reason::kill);
}

// Tokens survive any crash pattern, the rule as a table. One learner, 128 tokens
// per step. Syncer A recorded it at step 10 (1280 tokens, incarnation 0); it stepped on to step 20
// during A's outage and rejoined syncer B live (B counted 2560 and answered tokens_before = 2560,
// incarnation 1), stepped to 25 and B was killed before it wrote its record; syncer C restarts
// from A's record. Regression: C counted 1280 + max(640, 1280) = 2560 — the 640 tokens of steps
// 20-25 were lost (summary.json short of steps × batch × context, learner_loss.csv going
// backwards). The learner's own total (2560 + 640) is the truth.
TEST(monitor_live_rejoin, totals_survive_a_syncer_killed_before_recording_a_rejoin) {
  learner_record a;  // syncer A's record
  a.incarnation = 0;
  a.step = 10;
  a.tokens_this_incarnation = 1280;
  a.compute_this_incarnation_s = 1.0;
  join_request at_c = test::live_rejoin(0, 1, 25, 640);  // the rejoin that reaches syncer C
  at_c.compute_s = 0.5;
  at_c.tokens_total = 2560 + 640;
  at_c.compute_total_s = 2.5;
  auto t = live_rejoin_totals(a, at_c, 128);
  EXPECT_EQ(t.tokens, 25u * 128u);
  EXPECT_DOUBLE_EQ(t.compute_s, 2.5);

  // B wrote its record (2560 before, incarnation 1) but its reply never reached the learner,
  // which rejoins C with its old incarnation at step 22: 2816 tokens in it and in total. The
  // record's sum (2560 + 2816) would count the incarnation twice; the total does not.
  learner_record b;
  b.incarnation = 1;
  b.step = 20;
  b.tokens_before = 2560;
  join_request unanswered = test::live_rejoin(0, 0, 22, 2816);
  unanswered.tokens_total = 2816;
  EXPECT_EQ(live_rejoin_totals(b, unanswered, 128).tokens, 22u * 128u);

  // Never backwards (a total below the record keeps the record), and never more than the steps
  // reported can have trained (a total above step × 128 is cut there).
  join_request low = at_c;
  low.tokens_total = 100;
  low.tokens = 0;
  low.step = 10;
  EXPECT_EQ(live_rejoin_totals(a, low, 128).tokens, 1280u);
  join_request high = at_c;
  high.tokens_total = 1u << 30;
  EXPECT_EQ(live_rejoin_totals(a, high, 128).tokens, 25u * 128u);
  EXPECT_EQ(live_rejoin_totals(a, high, 0).tokens, uint64_t{1} << 30);  // no bound given
  // An older learner (no totals) keeps the record's count with its incarnation's tokens.
  join_request old = at_c;
  old.tokens_total = 0;
  old.compute_total_s = 0;
  EXPECT_EQ(live_rejoin_totals(a, old, 128).tokens, 1280u);
}

// The same through the actor: a monitor restored from syncer A's record answers the rejoin with
// the learner's total as tokens_before, writes it to its record before answering, and the next
// heartbeat's global token count includes it.
TEST(monitor_live_rejoin, a_monitor_restored_from_an_older_record_takes_the_learner_s_total) {
  const auto dir = dd::test::fresh_dir("dd_monitor_rejoin_total");
  monitor_record a;  // syncer A's record: learner 0 at step 10 with 1280 tokens
  a.mean_step = 10;
  monitor_record::learner l0;
  l0.id = 0;
  l0.step = 10;
  l0.tokens_this_incarnation = 1280;
  a.learners.push_back(l0);
  quiet_system q;
  auto ctx = monitor_ctx(1);
  ctx->tokens_per_step = 128;
  ctx->record_path = (dir / "monitor.json").string();
  ctx->restored_record = a.to_json();
  auto monitor = spawn_monitor(*q.sys, ctx);
  caf::scoped_actor self{*q.sys};
  join_request live = test::live_rejoin(0, 1, 25, 640);
  live.tokens_total = 3200;
  const auto rep = join_reply_to(self, monitor, live, 1);
  ASSERT_TRUE(rep.has_value());
  EXPECT_EQ(rep->incarnation, 2u);
  EXPECT_EQ(rep->tokens_before, 3200u);
  // On disk before the reply came.
  const auto rec = nlohmann::json::parse(std::ifstream(dir / "monitor.json"));
  EXPECT_EQ(rec["learners"][0]["tokens_before"].get<uint64_t>(), 3200u);
  EXPECT_EQ(rec["learners"][0]["step"].get<uint64_t>(), 25u);
  const auto pm =
      beat_and_wait(self, monitor, test::heartbeat(0, 2, 26, 128, 0.1), std::chrono::seconds(5));
  ASSERT_TRUE(pm.has_value());
  EXPECT_EQ(pm->total_tokens, 26u * 128u);
  caf::anon_send_exit(monitor, caf::exit_reason::kill);
}

// Ctrl-C on a learner node started by hand made its learners
// leave, the monitor recorded them finished, and with no learner left the syncer ended the run as
// done at 58 of 300 steps (exit 0). A leave that says its own node was stopped keeps the id
// unfinished: the run goes on, and the id is given to the next join; that learner's own finish
// ends the run.
TEST(monitor_leave, a_learner_whose_node_was_stopped_stays_unfinished_and_its_id_is_taken_again) {
  const auto dir = dd::test::fresh_dir("dd_monitor_interrupted_leave");
  quiet_system q;
  auto told = std::make_shared<std::atomic<int>>(0);
  auto job = spawn_job(*q.sys, [told] { ++*told; });
  auto ctx = monitor_ctx(1);
  ctx->remote_learners = true;
  ctx->job = job;
  ctx->record_path = (dir / "monitor.json").string();
  run_log log{"", /*keep_in_memory=*/true};
  auto monitor = spawn_monitor(*q.sys, ctx, &log);
  caf::scoped_actor self{*q.sys};
  // A node's handshake reserving learner 0, then that learner's join; its incarnation.
  auto join = [&] {
    if (!node_join_as(self, monitor, {0}, 1)) return ~uint64_t{0};
    return learner_join_as(self, monitor, 0);
  };
  // Whether the record shows learner 0 of `incarnation` finished within `wait_ms`.
  auto recorded_finished = [&](uint64_t incarnation, int wait_ms) {
    return wait_for_learner0(
               dir / "monitor.json",
               [&](const nlohmann::json& l) {
                 return l.value("incarnation", ~uint64_t{0}) == incarnation &&
                        l.value("finished", false);
               },
               wait_ms)
        .is_object();
  };
  const uint64_t first = join();
  ASSERT_NE(first, ~uint64_t{0});
  dd::leave_msg stopped{0, first};
  stopped.interrupted = true;
  // A leave is answered (a learner node's learner exits only then), a repeated one too.
  for (int k = 0; k < 2; ++k) EXPECT_TRUE(leave_answered(self, monitor, stopped)) << "leave " << k;
  EXPECT_FALSE(recorded_finished(first, 1000)) << "recorded finished";
  EXPECT_EQ(told->load(), 0) << "the run was ended by a learner whose node was stopped";
  // The progress line shows it away (✗), not "left".
  EXPECT_FALSE(log.snapshot().learners[0].finished);
  EXPECT_FALSE(log.snapshot().learners[0].alive);
  // The next node's learner takes the id, finishes, and that ends the run.
  const uint64_t second = join();
  ASSERT_NE(second, ~uint64_t{0}) << "the id was not given again";
  EXPECT_GT(second, first);
  self->send(monitor, atoms::leave_atom_v, encode(dd::leave_msg{0, second}, {"", second}));
  ASSERT_TRUE(recorded_finished(second, 5000));
  EXPECT_TRUE(log.snapshot().learners[0].finished);
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (told->load() == 0 && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(told->load(), 1);
  caf::anon_send_exit(monitor, caf::exit_reason::kill);
  caf::anon_send_exit(job, caf::exit_reason::kill);
}

/// An owner stand-in that subscribes to `monitor` for `fragment` and answers owner_status with
/// `version`.
owner_hdl::behavior_type version_owner(owner_hdl::pointer self, monitor_hdl monitor,
                                       int32_t fragment, uint64_t version) {
  self->send(monitor, atoms::subscribe_atom_v, encode(subscribe_msg{fragment}));
  return {
      [](atoms::push_atom, const std::vector<uint8_t>&, uint64_t) {},
      [](atoms::pull_atom, const std::vector<uint8_t>&) {},
      [](atoms::live_atom, const std::vector<uint8_t>&, const std::vector<learner_at_owner_hdl>&) {
      },
      [](atoms::credit_atom, uint64_t) {},
      [](atoms::held_atom, const std::vector<uint8_t>&) {},
      [](atoms::copy_atom, const std::vector<uint8_t>&, uint64_t) {},
      [=](atoms::owner_status_atom) -> caf::result<uint64_t, size_t, double> {
        return {version, size_t{0}, 0.0};
      },
      [](atoms::checkpoint_atom) -> bool { return true; },
      [](atoms::grace_atom, uint64_t) {},
      [](atoms::rebuild_atom, uint64_t) {},
      [](atoms::snapshot_atom, double) {},
      [](atoms::kill_atom) {},
      [](atoms::write_verdict_atom, const std::string&, write_verdict) {},
  };
}

// dd-node status shows each fragment's version as its owner answers it now (the run log, which
// says nothing here, is not read back); an owner that is gone is left out.
TEST(monitor_status, fragment_versions_are_what_each_owner_answers) {
  quiet_system q;
  caf::actor_system& sys = *q.sys;
  auto ctx = monitor_ctx(1, 3);
  run_log log{"", /*keep_in_memory=*/true};
  auto monitor = spawn_monitor(sys, ctx, &log);
  auto o0 = sys.spawn(version_owner, monitor, 0, uint64_t{7});
  auto o2 = sys.spawn(version_owner, monitor, 2, uint64_t{42});
  auto gone = sys.spawn(version_owner, monitor, 1, uint64_t{9});
  caf::scoped_actor self{sys};
  auto status = [&] {
    nlohmann::json out;
    self->request(monitor, std::chrono::seconds(10), atoms::status_atom_v,
                  encode(status_request{}, {"", 0}))
        .receive(
            [&](const std::vector<uint8_t>& bytes) {
              auto rep = decode_status_reply(bytes, {}, {"", 0});
              ASSERT_TRUE(rep.ok()) << rep.error().message;
              out = nlohmann::json::parse(rep->json);
            },
            [&](caf::error& e) { ADD_FAILURE() << sys.render(e); });
    return out;
  };
  // The three subscriptions reach the monitor before the request (each owner sends first).
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  nlohmann::json s;
  while (std::chrono::steady_clock::now() < end) {
    s = status();
    if (s["fragment_versions"].size() == 3) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(s["fragment_versions"], (nlohmann::json{{"0", 7}, {"1", 9}, {"2", 42}}));
  caf::anon_send_exit(gone, caf::exit_reason::kill);
  caf::scoped_actor waiter{sys};
  waiter->wait_for(gone);
  EXPECT_EQ(status()["fragment_versions"], (nlohmann::json{{"0", 7}, {"2", 42}}));
  for (const auto& a : {caf::actor_cast<caf::actor>(o0), caf::actor_cast<caf::actor>(o2),
                        caf::actor_cast<caf::actor>(monitor)})
    caf::anon_send_exit(a, caf::exit_reason::kill);
}

// Under dd-node launch the job stops the run when the budget is spent; a learner that has just
// finished its budget leaves after that stop. Its leave is recorded unfinished (a resumed run
// would take the id back) but the progress line shows it "left", not away (✗): only a learner
// whose own node was stopped waits for another node.
TEST(monitor_leave, a_learner_leaving_after_the_run_s_stop_shows_left_not_away) {
  quiet_system q;
  auto ctx = monitor_ctx(2);
  ctx->remote_learners = true;
  run_log log{"", /*keep_in_memory=*/true};
  auto monitor = spawn_monitor(*q.sys, ctx, &log);
  caf::scoped_actor node{*q.sys}, l0{*q.sys}, l1{*q.sys};
  ASSERT_TRUE(node_join_as(node, monitor, {0, 1}, 2));
  auto join = [&](caf::scoped_actor& self, int32_t id) {
    return learner_join_as(self, monitor, id);
  };
  const uint64_t i0 = join(l0, 0), i1 = join(l1, 1);
  ASSERT_NE(i0, ~uint64_t{0});
  ASSERT_NE(i1, ~uint64_t{0});
  // Joined, no step yet: the loss is not known ("—"), not 0.
  const std::string joined = node_progress_line(log.snapshot(), 0.5);
  EXPECT_EQ(joined.find("0.000"), std::string::npos) << joined;
  EXPECT_NE(joined.find(" L0 0.00st/s —"), std::string::npos) << joined;
  auto leave = [&](caf::scoped_actor& self, int32_t id, uint64_t inc, bool interrupted) {
    dd::leave_msg lm{id, inc};
    lm.interrupted = interrupted;
    return leave_answered(self, monitor, lm);
  };
  // The run stops (the job: budget spent); learner 0 leaves as done, learner 1's node is stopped.
  node->send(monitor, atoms::stop_atom_v);
  ASSERT_TRUE(leave(l0, 0, i0, false));
  ASSERT_TRUE(leave(l1, 1, i1, true));
  const auto c = log.snapshot();
  EXPECT_TRUE(c.learners.at(0).finished);
  EXPECT_FALSE(c.learners.at(0).stepping);
  EXPECT_FALSE(c.learners.at(1).finished);
  EXPECT_FALSE(c.learners.at(1).alive);
  const std::string line = node_progress_line(c, 1.0);
  EXPECT_NE(line.find(" L0 left"), std::string::npos) << line;
  EXPECT_NE(line.find(" L1 ✗"), std::string::npos) << line;
  caf::anon_send_exit(monitor, caf::exit_reason::kill);
}

// The monitor record carries the run's training seconds over all parts (a
// resumed budget.seconds run counts its earlier parts): seconds_before + time since this
// monitor started; a record without the field (an older writer) restores 0; a negative or
// non-finite one is refused naming the field.
// The monitor learns what a failed write of its record means by message: a monitor.json that
// cannot be written is reported to its node (write_trouble_atom: the file and the error), and the
// node's answer (write_verdict_atom) decides — retry_degraded: written again with backoff (0.5 s,
// 1 s, 2 s, 4 s after the first failure at the 2 s record cadence); end_the_run: never again.
TEST(monitor_record, a_failed_record_is_retried_or_not_as_the_nodes_verdict_message_says) {
  struct row {
    write_verdict verdict;
    std::vector<int64_t> reports_at_ms;  ///< after the monitor's start
  };
  const row rows[] = {{write_verdict::retry_degraded, {2000, 2500, 3500, 5500, 9500}},
                      {write_verdict::end_the_run, {2000}}};
  for (const auto& r : rows) {
    SCOPED_TRACE(to_string(r.verdict));
    const auto dir = dd::test::fresh_dir("dd_monitor_record_verdict");
    std::ofstream(dir / "blocker") << "not a directory\n";  // monitor.json's folder: a file
    dd::test::coordinator env;
    const double start = env.now();
    auto heard = std::make_shared<std::vector<std::pair<std::string, std::string>>>();
    auto at = std::make_shared<std::vector<int64_t>>();
    const write_verdict verdict = r.verdict;
    // The node stand-in: notes each report and answers it with `verdict`, as the job does.
    // (The unused int: as in spawn_silent.)
    write_report_hdl node = env.sys->spawn(
        [=, &env](write_report_hdl::pointer self, int) -> write_report_hdl::behavior_type {
          return {[=, &env](atoms::write_trouble_atom, const std::string& file,
                            const std::string& error) {
            heard->emplace_back(file, error);
            at->push_back(std::llround((env.now() - start) * 1000));
            send_untyped(self, caf::actor_cast<caf::actor>(self->current_sender()),
                         atoms::write_verdict_atom_v, file, verdict);
          }};
        },
        0);
    auto ctx = monitor_ctx(1);
    ctx->record_path = (dir / "blocker" / "monitor.json").string();
    monitor_services services;
    services.node = node;
    monitor_hdl monitor =
        env.sys->spawn(health_monitor, std::shared_ptr<const monitor_config>(ctx), services);
    env.run();
    for (int i = 0; i < 24; ++i) env.advance(0.5);  // 12 s
    EXPECT_EQ(*at, r.reports_at_ms);
    for (const auto& [file, error] : *heard) {
      EXPECT_EQ(file, ctx->record_path);
      EXPECT_NE(error.find("health monitor: cannot write its record: "), std::string::npos)
          << error;
    }
    env.shutdown_all(monitor, node);
  }
}

TEST(monitor_record, training_seconds_survive_a_resume) {
  membership_options o;
  membership st(o, 100.0);
  monitor_record before;
  before.training_seconds = 12.5;
  before.mean_step = 3.0;
  before.learners.push_back({1, 0, false, 7, 0, 0, 0.0, 0.0, {}});
  st.restore(before, 100.0);
  const auto rec = st.record(104.25).to_json();
  EXPECT_DOUBLE_EQ(rec["training_seconds"].get<double>(), 16.75);
  membership back(o, 0.0);
  back.restore(monitor_record::from_json(rec), 0.0);
  EXPECT_DOUBLE_EQ(back.seconds_before(), 16.75);
  EXPECT_EQ(back.learners().at(1).step, 7u);
  auto old = rec;
  old.erase("training_seconds");
  membership older(o, 0.0);
  older.restore(monitor_record::from_json(old), 0.0);
  EXPECT_DOUBLE_EQ(older.seconds_before(), 0.0);
  auto bad = rec;
  bad["training_seconds"] = -1.0;
  try {
    monitor_record::from_json(bad);
    ADD_FAILURE() << "a negative training_seconds was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("training_seconds"), std::string::npos) << e.what();
  }
}

// A syncer resumed on a record in which every learner had finished (the
// run was stopped by a signal after the last step) waited for ever — every learner node was
// refused as finished, so nobody ever left. The monitor now tells the job at once; with one
// learner still unfinished it waits.
TEST(monitor_record, a_resumed_run_whose_learners_all_finished_is_done_at_once) {
  for (const bool all_finished : {true, false}) {
    dd::test::coordinator env;
    std::shared_ptr<bool> told = std::make_shared<bool>(false);
    auto job = spawn_job(*env.sys, [told] { *told = true; });
    monitor_record before;
    before.learners.push_back({0, 0, true, 50, 0, 0, 0.0, 0.0, {}});
    before.learners.push_back({1, 0, all_finished, all_finished ? 50u : 20u, 0, 0, 0.0, 0.0, {}});
    auto ctx = monitor_ctx(2);
    ctx->remote_learners = true;
    ctx->job = job;
    ctx->restored_record = before.to_json();
    auto monitor = spawn_monitor(*env.sys, ctx);
    env.run();
    EXPECT_EQ(*told, all_finished) << (all_finished ? "all finished" : "one unfinished");
    env.shutdown_all(monitor, job);
  }
}

// A learner's join that
// came over a connection whose CAF handshake was garbled recorded another CAF node id for it; the
// node lost that link, asked again for its id, and was refused "no free learner id" until the
// 30 s lease ran out — past the end of the run. The node that holds the id, by name, gets it back
// once the learner's heartbeats stopped reclaim_min_s ago; a fresh heartbeat or another name
// keeps the refusal.
TEST(monitor_node_join, a_silent_learner_s_own_node_gets_its_id_back) {
  dd::test::coordinator env;
  auto ctx = monitor_ctx(1);
  ctx->remote_learners = true;
  ctx->run_id = "00000000000000ab";
  auto monitor = spawn_monitor(*env.sys, ctx);
  auto fake_learner = spawn_silent(*env.sys);
  // Asks for learner 0 as node `name`; the refusal, or none when granted.
  auto ask = [&](const std::string& name) {
    node_join j;
    j.run_id = ctx->run_id;
    j.node_name = name;
    j.learner_ids = {0};
    j.learner_count = 1;
    const auto rep = ask_node_join(env, monitor, j);
    EXPECT_TRUE(rep.has_value());
    std::optional<node_refusal> out;
    if (rep && !rep->accepted) out = rep->refusal;
    return out;
  };
  EXPECT_FALSE(ask("host-a").has_value());  // granted and reserved
  join_request req;
  req.requested_learner_id = 0;
  caf::anon_send(monitor, atoms::join_atom_v, encode(req, {ctx->run_id, 0}),
                 caf::actor_cast<learner_at_syncer_hdl>(fake_learner));
  env.run();
  // The join was recorded under another CAF node id (a garbled handshake).
  auto* m = dynamic_cast<monitor_actor*>(caf::actor_cast<caf::abstract_actor*>(monitor));
  ASSERT_NE(m, nullptr);
  ASSERT_TRUE(m->state.core->learners().at(0).alive);
  auto other = caf::make_node_id(4242, std::string(40, 'a'));
  ASSERT_TRUE(other);
  m->state.core->find(0)->origin = caf::to_string(*other);
  // Heartbeats stop. Another node is refused; so is host-a while the learner is fresh.
  EXPECT_EQ(ask("host-b"), node_refusal::no_free_learner);
  EXPECT_EQ(ask("host-a"), node_refusal::no_free_learner);
  env.advance(1.5);
  EXPECT_EQ(ask("host-b"), node_refusal::no_free_learner);
  EXPECT_FALSE(ask("host-a").has_value()) << "the id's own node was refused";
  env.shutdown_all(monitor, fake_learner);
}

// The join token (actors/link/join_auth.hpp): a node's first request is answered with a
// challenge; the proof over it is accepted once. The same proven request sent again (a recorded
// handshake replayed) is refused, and so is a proof made with another token: each an
// auth_refused event and counted. Regression test for a node handshake anyone could complete.
TEST(monitor_node_join, a_replayed_or_wrongly_proven_handshake_is_refused_and_counted) {
  dd::test::coordinator env;
  run_log log{"", /*keep_in_memory=*/true};
  auto ctx = monitor_ctx(2);
  ctx->remote_learners = true;
  ctx->run_id = "00000000000000cd";
  ctx->join_token = "the-join-token-of-this-run-0123";
  auto monitor = spawn_monitor(*env.sys, ctx, &log);
  auto ask = [&](const node_join& j) { return ask_node_join(env, monitor, j); };
  node_join j;
  j.run_id = ctx->run_id;
  j.node_name = "host-a";
  j.learner_ids = {1};
  j.learner_count = 1;
  const auto first = ask(j);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->refusal, node_refusal::auth_challenge);
  ASSERT_EQ(first->challenge.size(), join_nonce_bytes);
  // The monitor's name for the sender's CAF node (empty: a system without a node id, as here).
  const std::string origin = env.sys->node() ? caf::to_string(env.sys->node()) : std::string();
  auto prove = [&](node_join r, const std::vector<uint8_t>& challenge, const std::string& token) {
    r.challenge = challenge;
    r.proof = join_proof(token, node_join_purpose,
                         node_join_context(ctx->run_id, r.node_name, origin, r.learner_ids,
                                           r.learner_count, challenge));
    return r;
  };
  const node_join proven = prove(j, first->challenge, ctx->join_token);
  const auto granted = ask(proven);
  ASSERT_TRUE(granted.has_value());
  EXPECT_TRUE(granted->accepted) << granted->reason;
  EXPECT_EQ(granted->learner_ids, std::vector<int32_t>{1});

  const auto replayed = ask(proven);
  ASSERT_TRUE(replayed.has_value());
  EXPECT_FALSE(replayed->accepted);
  EXPECT_EQ(replayed->refusal, node_refusal::unauthorized);
  EXPECT_NE(replayed->reason.find("already used (a replay)"), std::string::npos)
      << replayed->reason;

  const auto second = ask(j);
  ASSERT_TRUE(second.has_value());
  ASSERT_EQ(second->refusal, node_refusal::auth_challenge);
  EXPECT_NE(second->challenge, first->challenge);
  const auto forged = ask(prove(j, second->challenge, "another-token-of-32-bytes-000000"));
  ASSERT_TRUE(forged.has_value());
  EXPECT_EQ(forged->refusal, node_refusal::unauthorized);
  EXPECT_NE(forged->reason.find("wrong join token"), std::string::npos) << forged->reason;
  // Another node's ids asked with a proof of host-a's request: the proof binds the request.
  const auto third = ask(j);
  ASSERT_TRUE(third.has_value());
  node_join other = prove(j, third->challenge, ctx->join_token);
  other.learner_ids = {0};
  const auto rebound = ask(other);
  ASSERT_TRUE(rebound.has_value());
  EXPECT_EQ(rebound->refusal, node_refusal::unauthorized);

  size_t refused = 0;
  for (const auto& e : log.events())
    if (e["event"] == "auth_refused") ++refused;
  EXPECT_EQ(refused, 3u);
  EXPECT_EQ(log.snapshot().auth_refused, 3u);
  caf::anon_send_exit(monitor, caf::exit_reason::kill);
  env.run();
}

}  // namespace
}  // namespace dd::actors
