// tests/actors/policy_test.cpp — table tests of the pure decision code in actors/policy/.
//
// Every case states its inputs and the expected decision and reason; the numbers are computed by
// hand from the formulas in ALGORITHM.md (cited in each header).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "actors/policy/policy.hpp"
#include "actors/policy/run_uptime.hpp"
#include "tests/support/fresh_dir.hpp"

namespace dd::policy {
namespace {

// ---------------------------------------------------------------------------------------------
// quorum

struct quorum_case {
  quorum_spec spec;
  std::size_t live, have;
  bool reached;
  std::size_t needed;
  quorum_reason reason;
};

TEST(Quorum, Table) {
  using qs = quorum_spec;
  const std::vector<quorum_case> cases = {
      {qs::of_count(1), 4, 0, false, 1, quorum_reason::not_reached},
      {qs::of_count(1), 4, 1, true, 1, quorum_reason::reached},
      {qs::of_count(3), 4, 2, false, 3, quorum_reason::not_reached},
      {qs::of_count(3), 4, 3, true, 3, quorum_reason::reached},
      {qs::of_count(8), 4, 4, true, 4, quorum_reason::reached},  // K > live → all live
      {qs::of_count(8), 4, 3, false, 4, quorum_reason::not_reached},
      {qs::of_count(1), 0, 0, false, 0, quorum_reason::no_live_learners},
      {qs::of_count(0), 4, 4, false, 0, quorum_reason::invalid_spec},
      {qs::of_fraction(0.5), 4, 2, true, 2, quorum_reason::reached},       // ceil(2) = 2 exactly
      {qs::of_fraction(0.5), 5, 2, false, 3, quorum_reason::not_reached},  // ceil(2.5) = 3
      {qs::of_fraction(0.01), 8, 1, true, 1, quorum_reason::reached},      // ceil(0.08) = 1
      {qs::of_fraction(1.0), 8, 7, false, 8, quorum_reason::not_reached},
      {qs::of_fraction(0.3), 10, 3, true, 3,
       quorum_reason::reached},  // 0.3·10 = 3.0000000000000004
      {qs::of_fraction(0.0), 4, 4, false, 0, quorum_reason::invalid_spec},
      {qs::of_fraction(1.5), 4, 4, false, 0, quorum_reason::invalid_spec},
      {qs::of_fraction(NAN), 4, 4, false, 0, quorum_reason::invalid_spec},
      {qs::of_count(2), 3, 9, true, 2, quorum_reason::reached},  // have clamped to live
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    const auto d = compute_quorum(c.spec, c.live, c.have);
    EXPECT_EQ(d.reached, c.reached) << "case " << i << ": " << d.message;
    EXPECT_EQ(d.needed, c.needed) << "case " << i << ": " << d.message;
    EXPECT_EQ(d.reason, c.reason) << "case " << i << ": " << d.message;
    EXPECT_FALSE(d.message.empty());
  }
  EXPECT_EQ(compute_quorum(qs::of_count(2), 3, 9).have, 3u);
}

struct merge_case {
  quorum_spec spec;
  round_state state;
  double now, grace;
  merge_action action;
  merge_reason reason;
  double deadline;
};

TEST(Merge, Table) {
  using qs = quorum_spec;
  const std::vector<merge_case> cases = {
      // live, pending, timer, deadline
      {qs::of_count(1), {4, 0, false, 0}, 10, 1.0, merge_action::wait, merge_reason::no_pending, 0},
      {qs::of_count(2),
       {4, 1, false, 0},
       10,
       1.0,
       merge_action::wait,
       merge_reason::quorum_not_reached,
       0},
      {qs::of_count(1),
       {4, 1, false, 0},
       10,
       1.5,
       merge_action::start_grace_timer,
       merge_reason::grace_started,
       11.5},
      {qs::of_count(1),
       {4, 1, false, 0},
       10,
       0.0,
       merge_action::merge_now,
       merge_reason::quorum_reached_no_grace,
       0},
      {qs::of_count(1),
       {4, 2, true, 11.5},
       11.0,
       1.5,
       merge_action::wait,
       merge_reason::grace_running,
       11.5},
      {qs::of_count(1),
       {4, 2, true, 11.5},
       11.5,
       1.5,
       merge_action::merge_now,
       merge_reason::grace_expired,
       0},
      {qs::of_count(1),
       {4, 4, true, 11.5},
       10.5,
       1.5,
       merge_action::merge_now,
       merge_reason::all_live_pending,
       0},
      {qs::of_count(1),
       {4, 4, false, 0},
       10,
       1.5,
       merge_action::merge_now,
       merge_reason::all_live_pending,
       0},
      {qs::of_count(3),
       {4, 2, true, 11.5},
       12,
       1.5,
       merge_action::cancel_grace_timer,
       merge_reason::quorum_lost,
       0},
      // the last missing learner died: now every live learner is pending.
      {qs::of_count(4),
       {3, 3, false, 0},
       10,
       1.5,
       merge_action::merge_now,
       merge_reason::all_live_pending,
       0},
      {qs::of_count(1),
       {0, 0, true, 11},
       10,
       1.5,
       merge_action::cancel_grace_timer,
       merge_reason::no_live_learners,
       0},
      {qs::of_fraction(2.0),
       {4, 4, false, 0},
       10,
       1.5,
       merge_action::wait,
       merge_reason::invalid_spec,
       0},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    const auto d = decide_merge(c.spec, c.state, c.now, c.grace);
    EXPECT_EQ(d.action, c.action) << "case " << i << ": " << d.message;
    EXPECT_EQ(d.reason, c.reason) << "case " << i << ": " << d.message;
    if (c.action != merge_action::merge_now && c.deadline > 0) {
      EXPECT_DOUBLE_EQ(d.grace_deadline_s, c.deadline) << "case " << i;
    }
  }
}

TEST(Merge, ReasonNamesAreStable) {
  EXPECT_STREQ(to_string(merge_reason::grace_expired), "grace_expired");
  EXPECT_STREQ(to_string(merge_action::start_grace_timer), "start_grace_timer");
  EXPECT_STREQ(to_string(quorum_reason::no_live_learners), "no_live_learners");
}

// ---------------------------------------------------------------------------------------------
// EMA and grace window

TEST(Ema, FirstSampleInitializesThenSmooths) {
  ema e;  // a = 0.2
  EXPECT_FALSE(e.has_value());
  EXPECT_EQ(e.value(), 0.0);
  EXPECT_TRUE(e.update(10.0));
  EXPECT_DOUBLE_EQ(e.value(), 10.0);
  EXPECT_TRUE(e.update(20.0));
  EXPECT_DOUBLE_EQ(e.value(), 12.0);  // 0.8·10 + 0.2·20
  EXPECT_TRUE(e.update(2.0));
  EXPECT_DOUBLE_EQ(e.value(), 10.0);  // 0.8·12 + 0.2·2
  EXPECT_FALSE(e.update(NAN));
  EXPECT_DOUBLE_EQ(e.value(), 10.0);
  ema one(1.0);
  one.update(3);
  one.update(7);
  EXPECT_DOUBLE_EQ(one.value(), 7.0);
}

struct grace_case {
  grace_config cfg;
  double tau, xi_step, xi_quorum, xi_sync;
  double grace;
  grace_reason reason;
};

TEST(Grace, Table) {
  const grace_config adaptive{grace_mode::adaptive, 0.8, 0.0, -1.0, 2.0};
  const grace_config capped{grace_mode::adaptive, 0.8, 0.0, 0.5, 2.0};
  const grace_config fixed{grace_mode::fixed, 0.8, 0.25, -1.0, 2.0};
  const grace_config off{grace_mode::off, 0.8, 0.25, -1.0, 2.0};
  const grace_config bad_fixed{grace_mode::fixed, 0.8, -1.0, -1.0, 2.0};
  const grace_config bad_gamma{grace_mode::adaptive, 1.5, 0.0, -1.0, 2.0};
  const grace_config wide_cap{grace_mode::adaptive, 0.8, 0.0, -1.0, 3.0};
  const std::vector<grace_case> cases = {
      // 0.8 · (2·1.0 − 0.3 − 0.2) = 1.2 <= 2·1.0
      {adaptive, 2, 1.0, 0.3, 0.2, 1.2, grace_reason::adaptive},
      // 0.8 · (2·1.0 − 1.5 − 0.6) < 0 → 0
      {adaptive, 2, 1.0, 1.5, 0.6, 0.0, grace_reason::clamped_to_zero},
      // 0.8 · (10·1.0 − 0 − 0) = 8 > 2·1.0 → 2
      {adaptive, 10, 1.0, 0.0, 0.0, 2.0, grace_reason::clamped_to_max},
      // sync.grace.max_factor = 3: 0.8 · (10·1.0) = 8 > 3·1.0 → 3
      {wide_cap, 10, 1.0, 0.0, 0.0, 3.0, grace_reason::clamped_to_max},
      // explicit cap 0.5
      {capped, 2, 1.0, 0.3, 0.2, 0.5, grace_reason::clamped_to_max},
      {adaptive, 2, 0.0, 0.3, 0.2, 0.0, grace_reason::no_step_estimate},
      {fixed, 2, 1.0, 5.0, 5.0, 0.25, grace_reason::fixed},
      {off, 2, 1.0, 0.0, 0.0, 0.0, grace_reason::off},
      {bad_fixed, 2, 1.0, 0.0, 0.0, 0.0, grace_reason::invalid_config},
      {bad_gamma, 2, 1.0, 0.0, 0.0, 0.0, grace_reason::invalid_config},
      {adaptive, -1, 1.0, 0.0, 0.0, 0.0, grace_reason::invalid_config},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    const auto d = compute_grace(c.cfg, c.tau, c.xi_step, c.xi_quorum, c.xi_sync);
    EXPECT_NEAR(d.grace_s, c.grace, 1e-12) << "case " << i << ": " << d.message;
    EXPECT_EQ(d.reason, c.reason) << "case " << i << ": " << d.message;
  }
}

// The step time ξ_step is sized from: the lower median of the live learners' step times.
TEST(Grace, RobustStepTimeIsTheLowerMedian) {
  struct row {
    std::vector<double> in;
    double out;
  };
  const std::vector<row> rows = {
      {{}, 0.0},
      {{2.0}, 2.0},
      {{1.0, 60.0}, 1.0},                  // one straggler of two
      {{1.0, 1.0, 1.0, 60.0}, 1.0},        // the mean would be 15.75
      {{60.0, 1.0, 2.0}, 2.0},             // odd: the median
      {{1.0, 2.0, 3.0, 4.0}, 2.0},         // even: the lower of the middle two
      {{60.0, 60.0, 1.0, 1.0, 1.0}, 1.0},  // two stragglers of five
      {{0.0, -1.0, NAN, INFINITY, 3.0}, 3.0},
      {{0.0, NAN}, 0.0},
  };
  for (size_t i = 0; i < rows.size(); ++i)
    EXPECT_DOUBLE_EQ(robust_step_time(rows[i].in), rows[i].out) << "row " << i;
}

// ---------------------------------------------------------------------------------------------
// staleness and duplicates

TEST(Staleness, Table) {
  struct row {
    std::uint64_t version, base, max;
    bool ok;
    admission_reason reason;
  };
  const std::vector<row> rows = {
      {10, 10, 4, true, admission_reason::accepted},
      {10, 6, 4, true, admission_reason::accepted},  // staleness 4 == max
      {10, 5, 4, false, admission_reason::stale},    // staleness 5 > 4
      {10, 11, 4, false, admission_reason::from_the_future},
      {0, 0, 0, true, admission_reason::accepted},
      {1, 0, 0, false, admission_reason::stale},
  };
  for (const auto& r : rows) {
    const auto d = check_staleness(r.version, r.base, r.max);
    EXPECT_EQ(d.accepted, r.ok) << d.message;
    EXPECT_EQ(d.reason, r.reason) << d.message;
  }
  EXPECT_EQ(check_staleness(10, 6, 4).staleness, 4u);
}

TEST(Duplicates, SequenceOfPushes) {
  push_ledger ledger;
  ASSERT_TRUE(ledger.register_learner(1, 0));
  struct row {
    push_key key;
    admission_reason reason;
  };
  // Applied in order; accepted pushes are recorded.
  const std::vector<row> rows = {
      {{7, 0, 0, 24}, admission_reason::unknown_learner},
      {{1, 0, 0, 24}, admission_reason::accepted},
      {{1, 0, 0, 24}, admission_reason::duplicate},  // exact resend
      {{1, 0, 0, 20}, admission_reason::duplicate},  // older step, same base
      {{1, 0, 0, 48}, admission_reason::accepted},   // same base, later step
      {{1, 0, 1, 30}, admission_reason::accepted},   // newer base (step order within base only)
      {{1, 0, 0, 72}, admission_reason::duplicate},  // older base: does not advance
      {{1, 1, 1, 72}, admission_reason::unknown_incarnation},
  };
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto d = check_push(ledger, rows[i].key);
    EXPECT_EQ(d.reason, rows[i].reason) << "row " << i << ": " << d.message;
    EXPECT_EQ(d.accepted, rows[i].reason == admission_reason::accepted);
    if (d.accepted) ledger.record_accepted(rows[i].key);
  }
  // Respawn: incarnation 1 registers; its first push is accepted even with a low step; the old
  // incarnation is now stale.
  ASSERT_TRUE(ledger.register_learner(1, 1));
  EXPECT_FALSE(ledger.register_learner(1, 0));
  EXPECT_EQ(check_push(ledger, {1, 1, 1, 5}).reason, admission_reason::accepted);
  EXPECT_EQ(check_push(ledger, {1, 0, 9, 999}).reason, admission_reason::stale_incarnation);
  EXPECT_TRUE(ledger.forget_learner(1));
  EXPECT_EQ(check_push(ledger, {1, 1, 1, 6}).reason, admission_reason::unknown_learner);
}

// ---------------------------------------------------------------------------------------------
// restart budget

/// At most `max_restarts` restarts in any window of `window_s`; the backoff starts at `base_s` and
/// doubles up to `cap_s`.
restart_config restart_budget(std::size_t max_restarts, double window_s, double base_s,
                              double cap_s) {
  restart_config cfg;
  cfg.max_restarts = max_restarts;
  cfg.window_s = window_s;
  cfg.backoff_base_s = base_s;
  cfg.backoff_cap_s = cap_s;
  return cfg;
}

TEST(RestartBudget, BackoffDoublesAndCaps) {
  restart_config cfg = restart_budget(10, 100, 1, 5);
  cfg.stable_after_s = 20;
  restart_history h;
  struct row {
    double now;
    restart_action action;
    double delay;
    restart_reason reason;
  };
  // Each restart is recorded at `now`; gaps < 20 s chain the backoff: 1, 2, 4, 5 (cap), then a
  // 30 s quiet gap resets it to 1.
  const std::vector<row> rows = {
      {0, restart_action::restart, 1, restart_reason::first_restart},
      {5, restart_action::restart, 2, restart_reason::backoff},
      {10, restart_action::restart, 4, restart_reason::backoff},
      {15, restart_action::restart, 5, restart_reason::backoff},
      {45, restart_action::restart, 1, restart_reason::first_restart},
      {50, restart_action::restart, 2, restart_reason::backoff},
  };
  for (const auto& r : rows) {
    const auto d = decide_restart(cfg, h, r.now);
    EXPECT_EQ(d.action, r.action) << d.message;
    EXPECT_DOUBLE_EQ(d.delay_s, r.delay) << d.message;
    EXPECT_EQ(d.reason, r.reason) << d.message;
    record_restart(h, r.now);
  }
}

TEST(RestartBudget, GivesUpWhenWindowIsFullAndRecovers) {
  const restart_config cfg = restart_budget(3, 60, 0.5, 30);
  restart_history h;
  for (double t : {0.0, 10.0, 20.0}) {
    const auto d = decide_restart(cfg, h, t);
    ASSERT_EQ(d.action, restart_action::restart) << d.message;
    record_restart(h, t);
  }
  auto d = decide_restart(cfg, h, 30.0);
  EXPECT_EQ(d.action, restart_action::give_up);
  EXPECT_EQ(d.reason, restart_reason::budget_exhausted);
  EXPECT_EQ(d.in_window, 3u);
  // At t = 60.5 the restart at t = 0 has left the window (60.5 − 60 = 0.5 > 0).
  d = decide_restart(cfg, h, 60.5);
  EXPECT_EQ(d.action, restart_action::restart) << d.message;
  EXPECT_EQ(d.in_window, 2u);
  // Chain: 0,10,20 are each < 60 s apart and 20 is 40.5 s before now → k = 3 → 0.5·8 = 4 s.
  EXPECT_DOUBLE_EQ(d.delay_s, 4.0);
}

TEST(RestartBudget, ZeroRestartsMeansTheFirstCrashGivesUp) {
  restart_config cfg;
  cfg.max_restarts = 0;  // documented as "never respawn", not a configuration error
  const auto d = decide_restart(cfg, {}, 0);
  EXPECT_EQ(d.action, restart_action::give_up);
  EXPECT_EQ(d.reason, restart_reason::budget_exhausted) << d.message;
  EXPECT_NE(d.message.find("max 0"), std::string::npos) << d.message;
}

TEST(RestartBudget, InvalidConfigGivesUp) {
  restart_config cfg;
  cfg.window_s = -1;
  EXPECT_EQ(decide_restart(cfg, {}, 0).action, restart_action::give_up);
  cfg = restart_config{};
  cfg.backoff_cap_s = 0.1;  // below base 0.5
  EXPECT_EQ(decide_restart(cfg, {}, 0).reason, restart_reason::invalid_config);
}

// ---------------------------------------------------------------------------------------------
// push schedule

TEST(PushSchedule, OffsetsAndDueSteps) {
  // H = 6, P = 3 → offsets 0, 2, 4.
  EXPECT_EQ(fragment_offset(0, 6, 3), 0u);
  EXPECT_EQ(fragment_offset(1, 6, 3), 2u);
  EXPECT_EQ(fragment_offset(2, 6, 3), 4u);
  // H = 5, P = 3 → floor(5/3) = 1, floor(10/3) = 3.
  EXPECT_EQ(fragment_offset(1, 5, 3), 1u);
  EXPECT_EQ(fragment_offset(2, 5, 3), 3u);
  struct row {
    std::uint64_t step, p, h, n;
    bool due;
    schedule_reason reason;
  };
  const std::vector<row> rows = {
      {0, 0, 6, 3, false, schedule_reason::step_zero},
      {6, 0, 6, 3, true, schedule_reason::due},
      {12, 0, 6, 3, true, schedule_reason::due},
      {3, 0, 6, 3, false, schedule_reason::not_due},
      {2, 1, 6, 3, true, schedule_reason::due},
      {8, 1, 6, 3, true, schedule_reason::due},
      {1, 1, 6, 3, false, schedule_reason::before_offset},
      {4, 2, 6, 3, true, schedule_reason::due},
      {1, 0, 6, 7, false, schedule_reason::invalid_config},  // P > H
      {1, 3, 6, 3, false, schedule_reason::invalid_config},  // p >= P
      {1, 0, 0, 1, false, schedule_reason::invalid_config},  // H = 0
  };
  for (const auto& r : rows) {
    const auto d = fragment_due(r.step, r.p, r.h, r.n);
    EXPECT_EQ(d.due, r.due) << d.message;
    EXPECT_EQ(d.reason, r.reason) << d.message;
  }
}

TEST(PushSchedule, PEqualsHPushesExactlyOneFragmentPerStep) {
  for (std::uint64_t s = 1; s <= 100; ++s) {
    const auto due = fragments_due(s, 24, 24);
    ASSERT_EQ(due.size(), 1u) << "step " << s;
    EXPECT_EQ(due[0], s % 24);
  }
  // Every fragment is pushed exactly once per H steps for P < H too.
  std::vector<int> count(5, 0);
  for (std::uint64_t s = 1; s <= 24; ++s)
    for (auto p : fragments_due(s, 24, 5)) ++count[p];
  for (int c : count) EXPECT_EQ(c, 1);
  EXPECT_TRUE(fragments_due(3, 2, 3).empty());  // P > H: invalid
}

TEST(PushSchedule, DueBetweenAdvancingByOneMatchesTheStepSchedule) {
  // A clock that moves one per step gives exactly the per-step schedule.
  for (std::uint64_t s = 1; s <= 60; ++s)
    EXPECT_EQ(fragments_due_between(s - 1, s, 24, 4), fragments_due(s, 24, 4)) << "step " << s;
}

TEST(PushSchedule, DueBetweenCollectsEveryTurnCrossedOnce) {
  // H = 24, P = 4: offsets 0, 6, 12, 18 (fragment 0 first due at 24).
  EXPECT_EQ(fragments_due_between(5, 7, 24, 4), (std::vector<std::uint64_t>{1}));
  EXPECT_EQ(fragments_due_between(5, 12, 24, 4), (std::vector<std::uint64_t>{1, 2}));
  EXPECT_EQ(fragments_due_between(17, 24, 24, 4), (std::vector<std::uint64_t>{0, 3}));
  EXPECT_TRUE(fragments_due_between(19, 23, 24, 4).empty());
  // A clock that stands still or goes back (a late progress reply) pushes nothing.
  EXPECT_TRUE(fragments_due_between(30, 30, 24, 4).empty());
  EXPECT_TRUE(fragments_due_between(30, 12, 24, 4).empty());
  // A jump of H or more crosses every fragment's turn, and each is pushed once.
  EXPECT_EQ(fragments_due_between(1, 25, 24, 4), (std::vector<std::uint64_t>{0, 1, 2, 3}));
  EXPECT_EQ(fragments_due_between(0, 1000, 24, 4), (std::vector<std::uint64_t>{0, 1, 2, 3}));
  // Nothing before the first turn: fragment 3 (offset 18) is not due in (0, 17].
  EXPECT_EQ(fragments_due_between(0, 17, 24, 4), (std::vector<std::uint64_t>{1, 2}));
  EXPECT_TRUE(fragments_due_between(0, 10, 2, 3).empty());  // P > H: invalid
}

TEST(GlobalClock, ExtrapolatesTheNewestReadingWithTheWindowRate) {
  global_clock c(3);
  EXPECT_FALSE(c.at(0.0, 1.0).has_value());  // no reading yet
  c.observe(10.0, 100.0);
  EXPECT_DOUBLE_EQ(c.rate(), 0.0);  // one reading: no rate, no extrapolation
  EXPECT_DOUBLE_EQ(*c.at(11.0, 5.0), 100.0);
  c.observe(12.0, 104.0);  // 2 steps/s
  EXPECT_DOUBLE_EQ(c.rate(), 2.0);
  EXPECT_DOUBLE_EQ(*c.at(13.5, 5.0), 107.0);   // 104 + 2 × 1.5
  EXPECT_DOUBLE_EQ(*c.at(100.0, 3.0), 110.0);  // at most 3 s ahead
  EXPECT_DOUBLE_EQ(*c.at(11.0, 3.0), 104.0);   // never behind the newest reading
  c.observe(11.5, 999.0);                      // older than the newest: ignored
  EXPECT_DOUBLE_EQ(*c.at(12.0, 3.0), 104.0);
  c.observe(14.0, 105.0);
  c.observe(16.0, 106.0);  // window 3: (12, 104) … (16, 106) → 0.5 steps/s
  EXPECT_DOUBLE_EQ(c.rate(), 0.5);
  c.reset();
  EXPECT_FALSE(c.at(20.0, 1.0).has_value());
}

TEST(GlobalClock, ABurstOfReadingsDoesNotRunTheEstimateMoreThanItsCapAhead) {
  // Readings 0.1 s apart at 10 steps/s, then nine dated 1 ms apart (replies held up by a busy
  // syncer and dated by their arrival): the window's rate is
  // 1000 steps/s. Uncapped, 0.13 s later the estimate is ~130 steps ahead of the newest reading;
  // the cap (the learner passes H) bounds how far an estimate it latches can run ahead.
  global_clock c;
  for (int k = 0; k <= 10; ++k) c.observe(0.1 * k, 10.0 + k);
  for (int k = 1; k <= 9; ++k) c.observe(1.0 + 0.001 * k, 20.0 + k);
  EXPECT_NEAR(c.rate(), 1000.0, 1e-6);
  EXPECT_GT(*c.at(1.139, 0.3), 29.0 + 100.0);       // no cap: the overestimate
  EXPECT_DOUBLE_EQ(*c.at(1.139, 0.3, 4.0), 33.0);   // at most 4 steps ahead of (1.009, 29)
  EXPECT_DOUBLE_EQ(*c.at(1.009, 0.3, 4.0), 29.0);   // never behind the newest reading
  EXPECT_DOUBLE_EQ(*c.at(1.139, 0.3, -1.0), 29.0);  // a negative cap is 0
}

TEST(GlobalClock, AValueBelowTheNewestStartsTheClockOver) {
  // A restarted health monitor restores an older mean step: the readings of the old one would
  // make the rate 0 and keep the estimate at the new value while the learner's latched value
  // stayed ahead; the clock starts over and says so.
  global_clock c(3);
  c.observe(1.0, 500.0);
  c.observe(2.0, 510.0);
  EXPECT_EQ(c.restarts(), 0u);
  c.observe(3.0, 450.0);
  EXPECT_EQ(c.restarts(), 1u);
  EXPECT_DOUBLE_EQ(c.rate(), 0.0);  // one reading since the restart
  EXPECT_DOUBLE_EQ(*c.at(4.0, 5.0), 450.0);
  c.observe(4.0, 460.0);
  EXPECT_DOUBLE_EQ(c.rate(), 10.0);
  EXPECT_DOUBLE_EQ(*c.at(4.5, 5.0), 465.0);
  c.observe(5.0, 460.0);  // equal is not backwards
  EXPECT_EQ(c.restarts(), 1u);
}

TEST(HeartbeatDates, RepliesAreDatedByTheirHeartbeatsSendTimeHoweverLate) {
  heartbeat_dates d(100);
  for (std::uint64_t s = 1; s <= 40; ++s) d.sent(s, 0.1 * static_cast<double>(s));
  EXPECT_EQ(d.size(), 40u);
  // 30 steps late (the learner kept 16 and dated the rest by arrival): still its send time.
  EXPECT_DOUBLE_EQ(d.answer(10).value_or(-1.0), 1.0);
  EXPECT_DOUBLE_EQ(*d.answer(11), 1.1);
  // The entries before an answered one were never answered (lost): dropped with it.
  EXPECT_EQ(d.size(), 29u);  // 12 … 40
  EXPECT_DOUBLE_EQ(*d.answer(20), 2.0);
  EXPECT_EQ(d.size(), 20u);                // 21 … 40
  EXPECT_FALSE(d.answer(20).has_value());  // a duplicate or stray reply: nothing changes
  EXPECT_FALSE(d.answer(3).has_value());
  EXPECT_EQ(d.size(), 20u);
  EXPECT_FALSE(d.answer(1000).has_value());  // a step never sent: all older ones are gone
  EXPECT_EQ(d.size(), 0u);
  // At most `capacity` entries: a reply older than every one held cannot be dated.
  heartbeat_dates small(4);
  for (std::uint64_t s = 1; s <= 10; ++s) small.sent(s, static_cast<double>(s));
  EXPECT_EQ(small.size(), 4u);
  EXPECT_FALSE(small.answer(6).has_value());
  EXPECT_DOUBLE_EQ(*small.answer(7), 7.0);
  heartbeat_dates zero(0);  // capacity 0 is taken as 1
  zero.sent(1, 1.0);
  zero.sent(2, 2.0);
  EXPECT_EQ(zero.size(), 1u);
  EXPECT_DOUBLE_EQ(*zero.answer(2), 2.0);
}

// ---------------------------------------------------------------------------------------------
// uptime (actors/policy/uptime.hpp): the share of the observed time with >= K learners stepping,
// a learner stepping for `window` seconds after each heartbeat. Numbers by hand.

TEST(Uptime, KOfTwoLearnersCountsOnlyWhileBothStep) {
  uptime_meter u(2, 2);
  u.heartbeat(0, 10.0, 1.0);  // observation starts at 10
  u.heartbeat(1, 10.5, 1.0);  // both stepping from 10.5
  u.heartbeat(0, 10.9, 1.0);  // 0 until 11.9
  u.heartbeat(1, 11.4, 1.0);  // 1 until 12.4
  u.advance(14.0);
  // Both stepping from 10.5 to 11.9 (1.4 s) of 4 s observed.
  EXPECT_NEAR(u.uptime_s(), 1.4, 1e-12);
  EXPECT_NEAR(u.observed_s(), 4.0, 1e-12);
  EXPECT_NEAR(u.ratio(), 0.35, 1e-12);
}

TEST(Uptime, ADeadLearnerStopsCountingAtOnceAndAHeartbeatBringsItBack) {
  uptime_meter u(1, 0);
  u.heartbeat(0, 0.0, 2.0);
  u.stop(0, 0.5);  // declared dead at 0.5: its window no longer counts
  u.advance(1.5);
  EXPECT_NEAR(u.uptime_s(), 0.5, 1e-12);
  u.heartbeat(0, 1.5, 2.0);  // a new incarnation steps
  u.advance(2.5);
  EXPECT_NEAR(u.uptime_s(), 1.5, 1e-12);
  EXPECT_NEAR(u.observed_s(), 2.5, 1e-12);
}

TEST(Uptime, NothingIsObservedBeforeTheFirstHeartbeatOrAfterTheFreeze) {
  uptime_meter u(1, 0);
  u.advance(100.0);
  EXPECT_EQ(u.observed_s(), 0.0);
  EXPECT_EQ(u.ratio(), 0.0);
  u.heartbeat(3, 100.0, 10.0);
  u.freeze(104.0);
  u.heartbeat(3, 105.0, 10.0);  // after the end of training: ignored
  u.advance(200.0);
  EXPECT_TRUE(u.frozen());
  EXPECT_NEAR(u.uptime_s(), 4.0, 1e-12);
  EXPECT_NEAR(u.observed_s(), 4.0, 1e-12);
  EXPECT_DOUBLE_EQ(u.ratio(), 1.0);
}

TEST(Uptime, TheObservationEndsWhenEveryExpectedLearnerHasFinished) {
  uptime_meter u(1, 2);
  u.heartbeat(0, 0.0, 1.0);
  u.heartbeat(1, 0.0, 1.0);
  u.finished(0, 0.6);  // its last step
  u.advance(3.0);      // learner 1's window ends at 1.0: down from 1.0 to 3.0
  EXPECT_NEAR(u.uptime_s(), 1.0, 1e-12);
  EXPECT_NEAR(u.observed_s(), 3.0, 1e-12);
  u.finished(1, 3.0);  // both finished: frozen
  u.advance(10.0);
  EXPECT_TRUE(u.frozen());
  EXPECT_NEAR(u.observed_s(), 3.0, 1e-12);
  // K = 0 is taken as 1; an earlier time than the last is taken as the last.
  uptime_meter k0(0, 0);
  k0.heartbeat(0, 5.0, 1.0);
  k0.advance(4.0);
  k0.advance(5.5);
  EXPECT_NEAR(k0.uptime_s(), 0.5, 1e-12);
}

// One uptime rule for summary.json (a cluster run) and dd-chaos report. Two
// learners stepping every 0.1 s for 10 s; the syncer is away from t = 3 to 6 (no rows), but
// learner 0's node sampled its steps through the outage (a sample a second), learner 1's did
// not (it was paused): with K = 1 the outage is up (learner 0 stepped), with K = 2 it is down
// until learner 1's rows come back.
namespace {

/// A run directory's steps as read_run_steps would give them: `points` per learner, every point a
/// learner_loss.csv row, the run's first and last row times.
run_steps steps_of(const std::map<long long, std::vector<step_point>>& points) {
  run_steps steps;
  steps.have_csv = true;
  steps.points = points;
  steps.lo = 1e300;
  steps.hi = -1e300;
  for (const auto& [id, pts] : points)
    for (const auto& p : pts) {
      ++steps.rows;
      steps.lo = std::min(steps.lo, p.t);
      steps.hi = std::max(steps.hi, p.t);
    }
  return steps;
}

}  // namespace

TEST(run_uptime, learners_stepping_through_a_syncer_outage_are_up) {
  std::vector<step_point> l0, l1;
  long long s0 = 0, s1 = 0;
  for (int i = 0; i <= 100; ++i) {
    const double t = 1000.0 + 0.1 * i;
    const bool outage = t > 1003.0 + 1e-9 && t < 1006.0 - 1e-9;
    ++s0;
    ++s1;
    if (!outage) {
      l0.push_back({t, 0, s0});
      l1.push_back({t, 0, s1});
    } else if (i % 10 == 0) {
      l0.push_back({t, -1, s0});  // learner 0's node: a sample a second
    }
  }
  // Learner 1 was paused through the outage: its steps resume where they stopped.
  for (auto& p : l1)
    if (p.t >= 1006.0 - 1e-9) p.step -= 30;
  std::map<long long, std::vector<time_span>> spans = {{0, stepping_spans(l0)},
                                                       {1, stepping_spans(l1)}};
  const auto k1 = downtime_of(spans, 1000.0, 1010.0, 1);
  EXPECT_NEAR(k1.observed_s, 10.0, 1e-9);
  EXPECT_NEAR(k1.down_s, 0.0, 1e-9);
  EXPECT_DOUBLE_EQ(k1.uptime(), 1.0);
  const auto k2 = downtime_of(spans, 1000.0, 1010.0, 2);
  EXPECT_NEAR(k2.down_s, 3.0, 0.11);  // learner 1's 3 s without a step
  ASSERT_EQ(k2.gaps.size(), 1u);
  EXPECT_NEAR(k2.gaps[0].from, 1003.0, 0.11);
  EXPECT_NEAR(k2.uptime(), 0.7, 0.011);
}

// A start-up stall is not downtime: when every learner's first steps are slow (10 s between the
// first and second rows against a pace of 0.5 s, as under load), the observed time starts when
// training began (the first stepping advance of any learner, and not before every learner the
// run started with made its first step), so `zero_global_downtime` holds; a stall of every
// learner after that still counts, and a run that never stepped at its pace is all down.
TEST(run_uptime, a_start_up_stall_is_not_downtime) {
  // Rows of one learner: step 1 at `from`, then one step every `pace` s until `to`; the first
  // step due after `stall_at` comes `stall_s` late (the steps after it keep the pace).
  auto rows = [](double from, double to, double pace, double stall_at = 1e300, double stall_s = 0) {
    std::vector<step_point> v;
    long long step = 1;
    v.push_back({from, 0, step});
    for (double t = from + pace; t <= to + 1e-9; t += pace) {
      if (t > stall_at && stall_s > 0) {
        t += stall_s;
        stall_s = 0;
      }
      v.push_back({t, 0, ++step});
    }
    return v;
  };
  auto startup = [&](double first) {  // step 1 at `first`, step 2 ten seconds later, then 0.5 s
    auto v = rows(first + 10.0, 120.0, 0.5);
    for (auto& p : v) p.step += 1;
    v.insert(v.begin(), {first, 0, 1});
    return v;
  };
  struct row {
    const char* what;
    std::map<long long, std::vector<step_point>> points;
    std::size_t needed;
    double began, observed_s, down_s;
  };
  const auto stalled = [&] { return rows(100.0, 120.0, 0.5, 105.0, 10.0); };
  std::vector<row> table;
  table.push_back({"every learner's first step stalls 10 s",
                   {{0, startup(100.0)}, {1, startup(100.1)}},
                   1,
                   110.0,
                   10.0,
                   0.0});
  // The step due at 105.5 s comes at 115.5 s.
  table.push_back({"a stall of every learner after training began",
                   {{0, stalled()}, {1, stalled()}},
                   1,
                   100.0,
                   20.0,
                   10.5});
  table.push_back({"one learner steps while the other starts up",
                   {{0, rows(100.0, 120.0, 0.5)}, {1, startup(100.0)}},
                   1,
                   100.0,
                   20.0,
                   0.0});
  table.push_back({"K = 2: the quorum is short until the second learner steps",
                   {{0, rows(100.0, 120.0, 0.5)}, {1, startup(100.0)}},
                   2,
                   100.0,
                   20.0,
                   10.0});
  // A learner's early step is slow (1.04 s from step 2 to 3 while the first broadcasts arrive,
  // against a pace of 0.065 s) before the other learner made its first step: still start-up.
  auto early = [&](double stall_at = 1e300, double stall_s = 0) {
    auto v = rows(101.117, 130.0, 0.065, stall_at, stall_s);
    for (auto& p : v) p.step += 2;
    v.insert(v.begin(), {{100.0, 0, 1}, {100.074, 0, 2}});
    return v;
  };
  table.push_back({"one learner's early step is slow before the other's first step",
                   {{0, rows(100.19, 130.0, 0.065)}, {1, early()}},
                   1,
                   100.19,
                   29.81,
                   0.0});
  // Every learner stalls 5 s once both have started: the step due after 110 s comes 5 s late.
  table.push_back({"an outage after every learner started is down",
                   {{0, rows(100.19, 130.0, 0.065, 110.0, 5.0)}, {1, early(110.0, 5.0)}},
                   1,
                   100.19,
                   29.81,
                   5.03});
  // A learner that first steps more than 60 s after the first row joined the running run: it
  // does not extend the start-up, and the stall before it joined is down.
  table.push_back({"a learner that joins later does not extend the start-up",
                   {{0, rows(100.0, 200.0, 0.5, 150.0, 10.0)}, {1, rows(170.0, 200.0, 0.5)}},
                   1,
                   100.0,
                   100.0,
                   10.5});
  table.push_back({"no learner ever steps at its pace",
                   {{0, {{100.0, 0, 1}, {200.0, 0, 2}}}},
                   1,
                   100.0,
                   100.0,
                   100.0});
  for (const auto& r : table) {
    const run_steps steps = steps_of(r.points);
    const auto u = run_uptime(steps, r.needed);
    ASSERT_TRUE(u.known) << r.what;
    EXPECT_NEAR(u.began, r.began, 1e-9) << r.what;
    EXPECT_NEAR(u.figures.observed_s, r.observed_s, 0.11) << r.what;
    EXPECT_NEAR(u.figures.down_s, r.down_s, 0.11) << r.what;
  }
}

// A loaded host's single slow steps are not downtime (kMinStepBoundSeconds): on two cores at
// load 7–8 learners with a pace of 0.05–0.1 s took single steps of 1.0–1.4 s (their own step-end
// times, no event in them), once while the last learner ran alone and once on every learner at
// the same moment; a floor of 1 s made each of them global downtime. Every learner stopping for
// longer than the floor (or for several of its step times when its pace is slower) stays down.
TEST(run_uptime, a_loaded_hosts_single_slow_steps_are_not_downtime) {
  // One learner's rows: a step every `pace` s from `from` to `to`; the step due after `slow_at`
  // takes `slow_s` instead.
  auto rows = [](double from, double to, double pace, double slow_at = 1e300, double slow_s = 0) {
    std::vector<step_point> v;
    long long step = 1;
    v.push_back({from, 0, step});
    for (double t = from; t + pace <= to + 1e-9;) {
      const bool slow = t > slow_at && slow_s > 0;
      t += slow ? slow_s : pace;
      if (slow) slow_s = 0;
      v.push_back({t, 0, ++step});
    }
    return v;
  };
  struct row {
    const char* what;
    std::map<long long, std::vector<step_point>> points;
    double down_s;
  };
  const std::vector<row> table = {
      {"the last learner alone: one 1.41 s step against a pace of 0.05 s",
       {{0, rows(100.0, 130.0, 0.05, 120.0, 1.41)}},
       0.0},
      {"every learner at once: 1.02, 1.33 and 1.24 s steps against 0.1 s",
       {{0, rows(100.0, 130.0, 0.1, 115.0, 1.02)},
        {1, rows(100.03, 130.0, 0.1, 114.5, 1.33)},
        {2, rows(100.06, 130.0, 0.1, 114.8, 1.24)}},
       0.0},
      // The first step after 115 s takes 3 s on both: learner 0's from 115.1 to 118.1, learner
      // 1's from 115.03 to 118.03; no learner steps from 115.1 to 118.03.
      {"every learner stops for 3 s: down",
       {{0, rows(100.0, 130.0, 0.1, 115.0, 3.0)}, {1, rows(100.03, 130.0, 0.1, 115.0, 3.0)}},
       118.03 - 115.1},
      {"the last learner alone stops for 2.5 s: down",
       {{0, rows(100.0, 130.0, 0.05, 120.0, 2.5)}},
       2.5},
  };
  for (const auto& r : table) {
    const run_steps steps = steps_of(r.points);
    const auto u = run_uptime(steps, 1);
    ASSERT_TRUE(u.known) << r.what;
    EXPECT_NEAR(u.figures.down_s, r.down_s, 0.02) << r.what;
    EXPECT_EQ(u.figures.gaps.size(), r.down_s > 0 ? 1u : 0u) << r.what;
  }
}

// A resumed run is observed part by part (actors/policy/run_uptime.hpp): the time from a part's
// planned stop (`stop`/`finished`) to the next part's `resume` is outside the observed time, and
// the resumed part's start-up is judged as the run's first one is; a killed part's outage up to
// the resume stays observed (the learners' samples decide it), and so does a stop inside which
// the learner nodes sampled their steps (the syncer alone stopped). Two learners step every
// 0.5 s from 100 to 150 s (steps 1 to 101); the resume comes at 170 s.
TEST(run_uptime, the_time_between_a_stopped_part_and_its_resume_is_not_observed) {
  auto part1 = [](double stall_at = 1e300, double stall_s = 0) {
    std::vector<step_point> v = {{100.0, 0, 1}};
    long long step = 1;
    for (double t = 100.5; t <= 150.0 + 1e-9; t += 0.5) {
      if (t > stall_at && stall_s > 0) {
        t += stall_s;
        stall_s = 0;
      }
      v.push_back({t, 0, ++step});
    }
    return v;
  };
  // Resumed at 170 s from the record: the first row at 171 s, a slow first step (3 s against a
  // pace of 0.5 s: the resumed part's start-up), then every 0.5 s up to 200 s.
  auto resumed = [](std::vector<step_point> v) {
    long long step = v.back().step;
    v.push_back({171.0, 1, ++step});
    v.push_back({174.0, 1, ++step});
    for (double t = 174.5; t <= 200.0 + 1e-9; t += 0.5) v.push_back({t, 1, ++step});
    return v;
  };
  // The syncer away from 150 to 170 s while the learners' nodes sample their steps a second (two
  // steps a second, their pace), then rows again from 170.5 s.
  // Rows every 0.5 s from 100 to 150 s, then `more` (from `at`, `every` apart, `per` steps each,
  // as node `node`), then rows again every 0.5 s from `again` to 200 s.
  auto around_150 = [](double at, double every, int node, long long per, double again) {
    std::vector<step_point> v;
    long long step = 0;
    for (double t = 100.0; t <= 150.0 + 1e-9; t += 0.5) v.push_back({t, 0, ++step});
    for (double t = at; t <= 170.0 + 1e-9; t += every) v.push_back({t, node, step += per});
    for (double t = again; t <= 200.0 + 1e-9; t += 0.5) v.push_back({t, 1, ++step});
    return v;
  };
  auto through = [&] { return around_150(151.0, 1.0, -1, 2, 170.5); };
  // Killed, every learner stopped with it: rows up to 150 s, then from 171 s on.
  auto stalled = [&] { return around_150(171.0, 1.0, 0, 0, 171.0); };
  const std::vector<run_part> stopped = {{99.9, 150.05}, {170.0, 200.2}};
  const std::vector<run_part> killed = {{99.9, std::nullopt}, {170.0, 200.2}};
  struct row {
    const char* what;
    std::vector<step_point> learner;  // both learners step alike
    std::vector<run_part> parts;
    double observed_s, down_s;
    std::vector<time_span> between;
  };
  // Stopped: observed 100 -> 150.05 (the stop; the last step was cut by it) and 174 (both
  // learners' first stepping advance after the resume) -> 200.
  const std::vector<row> table = {
      {"a clean stop and resume", resumed(part1()), stopped, 50.05 + 26.0, 0.0, {{150.05, 170.0}}},
      {"a stall of every learner inside a stopped part still counts",
       resumed(part1(120.0, 10.0)),
       stopped,
       50.05 + 26.0,
       10.5,
       {{150.05, 170.0}}},
      {"the same rows without the parts (no events.jsonl)", resumed(part1()), {}, 100.0, 24.0, {}},
      {"a killed syncer, learners stepping through its outage", through(), killed, 100.0, 0.0, {}},
      {"a killed syncer, every learner stopped with it", stalled(), killed, 100.0, 21.0, {}},
      {"a stop the learners' nodes sampled through: the syncer alone stopped",
       through(),
       stopped,
       100.0,
       0.0,
       {}},
  };
  for (const auto& r : table) {
    run_steps steps;
    steps.have_csv = true;
    steps.points = {{0, r.learner}, {1, r.learner}};
    steps.parts = r.parts;
    steps.lo = 1e300;
    steps.hi = -1e300;
    for (const auto& [id, pts] : steps.points)
      for (const auto& p : pts) {
        if (p.incarnation < 0) continue;
        ++steps.rows;
        steps.lo = std::min(steps.lo, p.t);
        steps.hi = std::max(steps.hi, p.t);
      }
    for (const std::size_t k : {1, 2}) {
      const auto u = run_uptime(steps, k);
      ASSERT_TRUE(u.known) << r.what;
      EXPECT_NEAR(u.began, 100.0, 1e-9) << r.what;
      EXPECT_NEAR(u.figures.observed_s, r.observed_s, 1e-6) << r.what << " K " << k;
      EXPECT_NEAR(u.figures.down_s, r.down_s, 1e-6) << r.what << " K " << k;
      EXPECT_EQ(u.between, r.between) << r.what;
    }
  }
}

// The parts of a run from the syncer's events, the spans between them, and the planned stop of
// the part a time falls in.
TEST(run_uptime, parts_from_the_syncers_events) {
  const std::vector<std::pair<std::string, double>> events = {
      {"start", 10.0},    {"merge", 11.0},  {"stop", 20.0},    {"finished", 21.0},
      {"resume", 40.0},   {"merge", 41.0},  {"resume", 60.0},  {"stop", 70.0},
      {"finished", 71.0}, {"resume", 80.0}, {"finished", 90.0}};
  const auto parts = run_parts(events);
  ASSERT_EQ(parts.size(), 4u);
  EXPECT_EQ(parts[0].from, 10.0);
  EXPECT_EQ(parts[0].stopped, std::optional<double>(20.0));  // the first of stop and finished
  EXPECT_EQ(parts[1].from, 40.0);
  EXPECT_FALSE(parts[1].stopped.has_value());  // killed
  EXPECT_EQ(parts[2].stopped, std::optional<double>(70.0));
  EXPECT_EQ(parts[3].stopped, std::optional<double>(90.0));
  const std::vector<time_span> want = {{20.0, 40.0}, {70.0, 80.0}};
  EXPECT_EQ(between_parts(parts), want);
  EXPECT_EQ(part_stopped_after(parts, 15.0), std::optional<double>(20.0));
  EXPECT_EQ(part_stopped_after(parts, 25.0), std::optional<double>(20.0));  // still shutting down
  EXPECT_FALSE(part_stopped_after(parts, 50.0).has_value());                // the killed part
  EXPECT_EQ(part_stopped_after(parts, 65.0), std::optional<double>(70.0));
  EXPECT_FALSE(part_stopped_after(parts, 85.0).has_value());  // the last part
  EXPECT_FALSE(part_stopped_after(parts, 5.0).has_value());   // before the run
  EXPECT_TRUE(run_parts({{"stop", 1.0}, {"finished", 2.0}}).empty());
  EXPECT_TRUE(between_parts({{10.0, 50.0}, {40.0, std::nullopt}}).empty());  // stop after resume
}

// summary.json `uptime` of a cluster run stopped with Ctrl-C and continued with --resume 20 s
// later (job_runner: read_run_steps + run_uptime with K = sync.min_quorum): the two learners
// stepped at their pace in both parts, so the uptime is 1 (the gap between the parts counted as
// downtime gave 0.853 on a run of 134 s observed, 0.092 on one of 35 s over 6 minutes).
TEST(run_uptime, a_run_resumed_after_ctrl_c_has_the_uptime_of_its_parts) {
  const auto dir = dd::test::fresh_dir("run_uptime_resumed");
  {
    std::ofstream ev(dir / "events.jsonl");
    for (const char* line : {
             R"j({"event":"start","time":999.9})j",
             R"j({"event":"merge","fragment":0,"time":1005.0})j",
             R"j({"event":"stop","reason":"interrupted (SIGINT)","time":1010.05})j",
             R"j({"digest":1,"event":"finished","time":1010.6})j",
             R"j({"event":"resume","time":1030.0})j",
             R"j({"event":"stop","reason":"every learner finished","time":1040.2})j",
             R"j({"digest":2,"event":"finished","time":1040.5})j",
         })
      ev << line << "\n";
    std::ofstream csv(dir / "learner_loss.csv");
    csv << "time,learner,incarnation,step,tokens,loss\n";
    char line[128];
    int step = 0;
    for (int i = 0; i <= 20; ++i, ++step)
      for (int l = 0; l < 2; ++l) {
        std::snprintf(line, sizeof line, "%.3f,%d,0,%d,%d,2.5\n", 1000.0 + 0.5 * i + 0.1 * l, l,
                      step + 1, 10 * (step + 1));
        csv << line;
      }
    for (int i = 0; i <= 18; ++i, ++step)
      for (int l = 0; l < 2; ++l) {
        std::snprintf(line, sizeof line, "%.3f,%d,1,%d,%d,2.0\n", 1031.0 + 0.5 * i, l, step + 1,
                      10 * (step + 1));
        csv << line;
      }
  }
  const auto steps = read_run_steps(dir.string());
  ASSERT_EQ(steps.rows, 80u);
  ASSERT_EQ(steps.parts.size(), 2u);
  for (const std::size_t k : {1, 2}) {
    const auto u = run_uptime(steps, k);
    ASSERT_TRUE(u.known);
    // Observed from training began (both learners' first rows) to the stop (learner 0's last
    // step, 0.05 s before it, was cut by it), and from the resumed part's first stepping advance
    // to the last row.
    EXPECT_NEAR(u.figures.observed_s, (1010.05 - 1000.1) + (1040.0 - 1031.0), 1e-6) << "K " << k;
    EXPECT_EQ(u.figures.down_s, 0.0) << "K " << k;
    EXPECT_DOUBLE_EQ(u.figures.uptime(), 1.0) << "K " << k;
    ASSERT_EQ(u.between.size(), 1u);
    EXPECT_EQ(u.between[0], (time_span{1010.05, 1030.0}));
  }
}

// The rule of stepping_spans written the direct way (every advance's two neighbourhoods
// collected and sorted afresh, O(n²) per learner): the reference the fast version must match
// exactly.
std::vector<time_span> reference_stepping_spans(std::vector<step_point> rs) {
  auto median = [](std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  };
  std::stable_sort(rs.begin(), rs.end(),
                   [](const step_point& a, const step_point& b) { return a.t < b.t; });
  struct advance {
    double from, to;
    long long steps;
  };
  std::vector<advance> adv;
  for (std::size_t i = 1, start = 0; i < rs.size(); ++i) {
    const long long cur = rs[start].step;
    if (rs[i].step == cur || (rs[i].step < cur && rs[i].incarnation < 0)) continue;
    if (rs[i].step > cur) adv.push_back({rs[start].t, rs[i].t, rs[i].step - cur});
    start = i;
  }
  std::vector<double> per_step(adv.size());
  for (std::size_t j = 0; j < adv.size(); ++j)
    per_step[j] = (adv[j].to - adv[j].from) / static_cast<double>(adv[j].steps);
  std::vector<time_span> out;
  for (std::size_t k = 0; k < adv.size(); ++k) {
    std::vector<double> around_steps, around_time;
    for (std::size_t j = 0; j < adv.size(); ++j) {
      if (j == k) continue;
      if (j + 5 >= k && j <= k + 5) around_steps.push_back(per_step[j]);
      if (std::abs(adv[j].to - adv[k].to) <= 60.0) around_time.push_back(per_step[j]);
    }
    const double pace = std::max(median(around_steps), median(around_time));
    const double bound = std::max(4 * pace, kMinStepBoundSeconds);
    if (adv[k].to - adv[k].from <= bound * static_cast<double>(adv[k].steps))
      out.push_back({adv[k].from, adv[k].to});
  }
  return out;
}

/// A random learner series: steady steps at a pace of its own with jitter, stalls (short and
/// long), repeated times (ties), restarts from a lower step, node samples (some stale), and
/// paces that change along the run — the shapes the rule distinguishes.
std::vector<step_point> random_series(std::mt19937_64& rng, std::size_t n) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<step_point> v;
  double t = 1000.0 + 100.0 * u(rng), pace = 0.01 + 2.0 * u(rng);
  long long step = 1 + static_cast<long long>(10 * u(rng)), inc = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double r = u(rng);
    if (r < 0.02) pace = 0.01 + 2.0 * u(rng);  // the host's pace changes
    if (r < 0.05)
      t += 5.0 + 200.0 * u(rng);  // a stall
    else if (r > 0.97)
      t += 0.0;  // same time as the last point
    else
      t += pace * (0.5 + u(rng));
    if (u(rng) < 0.01) {  // a restart from a checkpoint
      step = std::max<long long>(0, step - static_cast<long long>(20 * u(rng)));
      ++inc;
    } else if (u(rng) < 0.9) {
      step += 1 + static_cast<long long>(u(rng) < 0.1 ? 5 * u(rng) : 0);
    }
    if (u(rng) < 0.08)  // a node's sample, stale now and then
      v.push_back({t, -1, u(rng) < 0.2 ? std::max<long long>(0, step - 3) : step});
    else
      v.push_back({t, inc, step});
  }
  std::shuffle(v.begin(), v.end(), rng);  // any order in
  return v;
}

TEST(run_uptime, stepping_spans_matches_the_direct_rule_on_random_series) {
  const auto seed = std::random_device{}();
  std::printf("seed %u (set DD_TEST_SEED to replay)\n", seed);
  std::mt19937_64 rng(std::getenv("DD_TEST_SEED") ? std::stoull(std::getenv("DD_TEST_SEED"))
                                                  : seed);
  // Table: sizes from the edge cases (0, 1, 2 points) to series longer than both windows.
  for (const std::size_t n : {0, 1, 2, 3, 7, 12, 13, 50, 200, 1000, 3000}) {
    for (int rep = 0; rep < (n < 100 ? 40 : 4); ++rep) {
      const auto pts = random_series(rng, n);
      const auto fast = stepping_spans(pts);
      const auto direct = reference_stepping_spans(pts);
      ASSERT_EQ(fast.size(), direct.size()) << "n " << n << " rep " << rep << " seed " << seed;
      for (std::size_t i = 0; i < fast.size(); ++i)
        ASSERT_EQ(fast[i], direct[i]) << "n " << n << " rep " << rep << " span " << i;
    }
  }
}

// 200,000 points of one learner (a long run's learner_loss.csv): the rule gives every advance's
// verdict — the steady steps stepping, the one 30 s stall not. Results only: its time is in the
// report of the change, not a pass/fail bound.
TEST(run_uptime, stepping_spans_of_200k_points) {
  std::vector<step_point> v;
  double t = 0.0;
  for (long long s = 1; s <= 200000; ++s) {
    t += s == 100000 ? 30.0 : 0.005 * (1 + s % 3);
    v.push_back({t, 0, s});
  }
  const auto spans = stepping_spans(v);
  ASSERT_EQ(spans.size(), 199999u - 1);
  // The stall (from step 99,999 to 100,000) is the one advance missing.
  const auto stall = std::find_if(spans.begin(), spans.end(),
                                  [&](const time_span& s) { return s.to == v[99999].t; });
  EXPECT_EQ(stall, spans.end());
  EXPECT_EQ(spans.front().from, v[0].t);
  EXPECT_EQ(spans.back().to, v.back().t);
}

}  // namespace
}  // namespace dd::policy
