// tests/actors/random_faults_test.cpp — chaos.random: the drawn failure schedule.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "actors/services/fault_hooks.hpp"

namespace {

using dd::actors::fault_kind;
using dd::actors::fault_spec;
using dd::actors::random_fault_schedule;
using dd::actors::random_recovery;

/// Recovery times drawn from `dist` with mean `mean_s`.
random_recovery recovery(random_recovery::distribution dist, double mean_s) {
  random_recovery rec;
  rec.dist = dist;
  rec.mean_s = mean_s;
  return rec;
}

/// The mean downtime of the faults of `schedule` (not empty).
double mean_downtime(const std::vector<fault_spec>& schedule) {
  double sum = 0;
  for (const auto& f : schedule) sum += f.downtime_s;
  return sum / static_cast<double>(schedule.size());
}

TEST(RandomFaults, RateMatchesMtbfAndDowntimeMean) {
  // One target over a long horizon: failures per second = 1 / (mtbf + mean downtime) (gaps are
  // measured from the end of the previous downtime). 4 targets × 1e6 s / 105 s ≈ 38,000 faults;
  // the relative standard error of a Poisson count that large is ≈ 0.5%, so 3% is ~6 σ.
  const auto rec = recovery(random_recovery::distribution::exponential, 5.0);
  const auto s = random_fault_schedule(fault_kind::kill_learner, 4, 100.0, rec, 1e6, 42, 100000);
  const double expected = 4 * 1e6 / 105.0;
  EXPECT_NEAR(static_cast<double>(s.size()), expected, 0.03 * expected);
  for (const auto& f : s) {
    EXPECT_EQ(f.what, fault_kind::kill_learner);
    EXPECT_GE(f.target, 0);
    EXPECT_LT(f.target, 4);
    EXPECT_GE(f.at_seconds, 0.0);
    EXPECT_LE(f.at_seconds, 1e6);
  }
  EXPECT_NEAR(mean_downtime(s), 5.0, 0.15);  // mean of ~38k draws, sd 5
}

TEST(RandomFaults, LognormalKeepsTheMeanAndFixedIsExact) {
  auto rec = recovery(random_recovery::distribution::lognormal, 8.0);
  rec.sigma = 0.5;
  const auto s = random_fault_schedule(fault_kind::kill_owner, 2, 10.0, rec, 5e5, 7, 100000);
  EXPECT_NEAR(mean_downtime(s), 8.0, 0.2);
  rec.dist = random_recovery::distribution::fixed;
  for (const auto& f : random_fault_schedule(fault_kind::kill_owner, 1, 10.0, rec, 1e3, 7))
    EXPECT_DOUBLE_EQ(f.downtime_s, 8.0);
}

TEST(RandomFaults, WeibullRecoveryKeepsTheMean) {
  auto rec = recovery(random_recovery::distribution::weibull, 4.0);
  rec.shape = 2.0;
  const auto s = random_fault_schedule(fault_kind::kill_learner, 200, 1.0, rec, 1e9, 12345, 20);
  ASSERT_EQ(s.size(), 4000u);
  EXPECT_NEAR(mean_downtime(s), 4.0, 0.15);  // σ/√n ≈ 2.1/63 ≈ 0.03
  rec.shape = 0;
  EXPECT_THROW(random_fault_schedule(fault_kind::kill_learner, 1, 1.0, rec, 10, 1),
               std::invalid_argument);
}

TEST(RandomFaults, SameSeedSameScheduleAndTimesIncrease) {
  random_recovery rec;
  const auto a = random_fault_schedule(fault_kind::kill_learner, 3, 50.0, rec, 5000, 9);
  const auto b = random_fault_schedule(fault_kind::kill_learner, 3, 50.0, rec, 5000, 9);
  const auto c = random_fault_schedule(fault_kind::kill_learner, 3, 50.0, rec, 5000, 10);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].at_seconds, b[i].at_seconds);
    EXPECT_EQ(a[i].downtime_s, b[i].downtime_s);
    if (i > 0 && a[i].target == a[i - 1].target) {
      // the next failure comes after the previous downtime ended
      EXPECT_GT(a[i].at_seconds, a[i - 1].at_seconds + a[i - 1].downtime_s);
    }
  }
  EXPECT_FALSE(a.size() == c.size() && a.front().at_seconds == c.front().at_seconds);
}

TEST(RandomFaults, BadParametersAreRefused) {
  random_recovery rec;
  EXPECT_THROW(random_fault_schedule(fault_kind::kill_learner, 1, 0.0, rec, 10, 1),
               std::invalid_argument);
  EXPECT_THROW(random_fault_schedule(fault_kind::kill_learner, 1, 10.0, rec, -1, 1),
               std::invalid_argument);
  rec.mean_s = 0.0;
  EXPECT_THROW(random_fault_schedule(fault_kind::kill_learner, 1, 10.0, rec, 10, 1),
               std::invalid_argument);
}

}  // namespace
