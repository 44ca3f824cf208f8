// tests/actors/learner_rebase_test.cpp — the learner's rebase apply (actors/roles/learner_core.hpp,
// rebase_onto): no local progress is lost when another learner's merge arrives, and progress the
// global value already holds is not kept twice.
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

#include "actors/roles/learner_core.hpp"

namespace dd::actors {
namespace {

void expect_near(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6f) << "element " << i;
}

/// A learner fragment received at base {1, 1}, with push A (transfer 24: 24 steps, 2400 tokens,
/// delta {0.1, 0.2}) outstanding and 6 more steps of progress made since.
struct rebase_test : ::testing::Test {
  learner_fragment f;
  std::vector<float> theta;
  void SetUp() override {
    f.base = {1.0f, 1.0f};
    f.base_version = 3;
    f.have = true;
    f.outstanding.push_back({24, 24, 2400, {0.1f, 0.2f}});
    f.steps = 30;
    f.tokens = 3000;
    theta = {0.85f, 0.75f};  // base − A's delta − {0.05, 0.05} since A
  }
};

TEST_F(rebase_test, another_learners_merge_keeps_all_local_progress) {
  // Version 4 holds learner 1's push only (and transfer 99 of another incarnation of ours, not
  // the one that sent A: ignored).
  const std::vector<merged_push> merged = {{0, 7, 99, 4}, {1, 0, 48, 4}};
  EXPECT_EQ(rebase_onto(f, theta, {0.9f, 0.9f}, 4, merged, 0), 0u);
  expect_near(theta, {0.75f, 0.65f});  // θ + (v − base): every step of ours kept
  expect_near(f.base, {0.9f, 0.9f});
  EXPECT_EQ(f.base_version, 4u);
  ASSERT_EQ(f.outstanding.size(), 1u);  // A may still be merged
  EXPECT_EQ(f.steps, 30u);
  EXPECT_EQ(f.tokens, 3000u);
}

TEST_F(rebase_test, a_merge_holding_our_push_keeps_only_the_progress_after_it) {
  // First another learner's merge (version 4), then push B (transfer 48) holding A's progress
  // too, then version 5 that merged A.
  rebase_onto(f, theta, {0.9f, 0.9f}, 4, {{1, 0, 48, 4}}, 0);
  std::vector<float> delta_b = {f.base[0] - theta[0], f.base[1] - theta[1]};
  expect_near(delta_b, {0.15f, 0.25f});  // A's 0.1/0.2 + 0.05 since
  f.outstanding.push_back({48, 30, 3000, delta_b});
  const std::vector<merged_push> merged = {{0, 0, 24, 5}, {1, 0, 48, 4}};
  EXPECT_EQ(rebase_onto(f, theta, {0.8f, 0.8f}, 5, merged, 0), 24u);
  // θ = v + (progress since A) = {0.8, 0.8} − {0.05, 0.05}.
  expect_near(theta, {0.75f, 0.75f});
  // B is still outstanding, holding only what came after A; the counters likewise.
  ASSERT_EQ(f.outstanding.size(), 1u);
  EXPECT_EQ(f.outstanding[0].transfer_id, 48u);
  expect_near(f.outstanding[0].delta, {0.05f, 0.05f});
  EXPECT_EQ(f.outstanding[0].steps, 6u);
  EXPECT_EQ(f.outstanding[0].tokens, 600u);
  EXPECT_EQ(f.steps, 6u);
  EXPECT_EQ(f.tokens, 600u);
  // The same value again (a resync) changes nothing: A is no longer outstanding.
  EXPECT_EQ(rebase_onto(f, theta, {0.8f, 0.8f}, 5, merged, 0), 0u);
  expect_near(theta, {0.75f, 0.75f});
  EXPECT_EQ(f.steps, 6u);
}

TEST_F(rebase_test, a_merge_of_a_newer_push_covers_every_older_one) {
  f.outstanding.push_back({48, 30, 3000, {0.15f, 0.25f}});  // B replaced A at the owner
  const std::vector<merged_push> merged = {{0, 0, 48, 4}};
  EXPECT_EQ(rebase_onto(f, theta, {0.9f, 0.9f}, 4, merged, 0), 48u);
  // θ = v + (θ − (base − Δ_B)) = {0.9, 0.9} + ({0.85, 0.75} − {0.85, 0.75}).
  expect_near(theta, {0.9f, 0.9f});
  EXPECT_TRUE(f.outstanding.empty());
  EXPECT_EQ(f.steps, 0u);
  EXPECT_EQ(f.tokens, 0u);
}

TEST_F(rebase_test, length_mismatch_is_refused_and_nothing_changes) {
  EXPECT_THROW(rebase_onto(f, theta, {0.9f, 0.9f, 0.9f}, 4, {}, 0), std::invalid_argument);
  expect_near(theta, {0.85f, 0.75f});
  expect_near(f.base, {1.0f, 1.0f});
  EXPECT_EQ(f.base_version, 3u);
}

}  // namespace
}  // namespace dd::actors
