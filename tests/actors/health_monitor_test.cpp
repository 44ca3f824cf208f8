// tests/actors/health_monitor_test.cpp — the health monitor answers every heartbeat with the
// global progress (Σ tokens of every learner and incarnation) that learners with
// inner.schedule_clock = "global" follow. Real CAF threads; each wait is bounded.
#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <caf/all.hpp>

#include "actors/atoms.hpp"
#include "actors/health_monitor.hpp"
#include "messages/codec.hpp"
#include "messages/control.hpp"

namespace dd::actors {
namespace {

struct monitor_fixture : ::testing::Test {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  caf::actor monitor;

  void SetUp() override {
    cfg.set("logger.console-verbosity", caf::atom("quiet"));
    cfg.set("logger.file-verbosity", caf::atom("quiet"));
    sys = std::make_unique<caf::actor_system>(cfg);
    auto ctx = std::make_shared<monitor_context>();
    ctx->learners = 2;
    ctx->fragments = 0;
    monitor = sys->spawn(health_monitor, std::shared_ptr<const monitor_context>(ctx));
  }
  void TearDown() override { caf::anon_send_exit(monitor, caf::exit_reason::kill); }

  /// Joins as learner `id` from `self`; returns the incarnation.
  uint64_t join(caf::scoped_actor& self, int32_t id) {
    join_request req;
    req.requested_learner_id = id;
    uint64_t inc = ~uint64_t{0};
    self->request(monitor, std::chrono::seconds(10), atoms::join_atom_v, encode(req),
                  caf::actor{self})
        .receive(
            [&](const std::vector<uint8_t>& bytes) {
              auto rep = decode_join_reply(bytes.data(), bytes.size());
              if (rep) inc = rep->incarnation;
            },
            [&](caf::error&) {});
    return inc;
  }

  /// live_learners and step of the last progress reply.
  uint32_t last_live = 0;
  uint64_t last_step = 0;
  double last_mean_step = -1.0;

  /// Sends a heartbeat from `self`; returns the progress reply, if one came within 2 s.
  std::optional<uint64_t> beat(caf::scoped_actor& self, int32_t id, uint64_t inc, uint64_t tokens) {
    heartbeat_msg hb;
    hb.learner_id = id;
    hb.incarnation = inc;
    hb.step = tokens / 2048;
    hb.tokens = tokens;
    hb.step_time_ema_s = 0.1;
    self->send(monitor, atoms::heartbeat_atom_v, encode(hb, {"", inc}));
    std::optional<uint64_t> out;
    bool done = false;
    while (!done) {
      self->receive(
          [&](atoms::progress_atom, const std::vector<uint8_t>& bytes) {
            // The reply travels as codec bytes (a progress_msg).
            auto pm = decode_progress(bytes);
            EXPECT_TRUE(pm.ok()) << pm.error().message;
            if (pm) {
              out = pm->total_tokens;
              last_live = pm->live_learners;
              last_step = pm->step;
              last_mean_step = pm->mean_step;
            }
            done = true;
          },
          [&](atoms::owners_atom, const std::vector<uint8_t>&, const std::vector<caf::actor>&) {},
          caf::after(std::chrono::seconds(2)) >> [&] { done = true; });
    }
    return out;
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

// The monitor record carries the run's training seconds over all parts (issue 10 item 5: a
// resumed budget.seconds run counts its earlier parts): seconds_before + time since this
// monitor started; a record without the field (an older writer) restores 0; a negative or
// non-finite one is refused naming the field.
TEST(monitor_record, training_seconds_survive_a_resume) {
  monitor_state st;
  st.seconds_before = 12.5;
  st.started_s = 100.0;
  st.mean_step = 3.0;
  st.learners[1].step = 7;
  const auto rec = monitor_record(st, 104.25);
  EXPECT_DOUBLE_EQ(rec["training_seconds"].get<double>(), 16.75);
  monitor_state back;
  restore_monitor_record(back, rec);
  EXPECT_DOUBLE_EQ(back.seconds_before, 16.75);
  EXPECT_EQ(back.learners.at(1).step, 7u);
  auto old = rec;
  old.erase("training_seconds");
  monitor_state older;
  restore_monitor_record(older, old);
  EXPECT_DOUBLE_EQ(older.seconds_before, 0.0);
  auto bad = rec;
  bad["training_seconds"] = -1.0;
  monitor_state refused;
  try {
    restore_monitor_record(refused, bad);
    ADD_FAILURE() << "a negative training_seconds was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("training_seconds"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dd::actors
