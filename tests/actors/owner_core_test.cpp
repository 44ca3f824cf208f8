// tests/actors/owner_core_test.cpp — deterministic tests of the fragment owner's state machine
// (actors/roles/owner_core.hpp) on a manual clock: quorum, grace window, merge contributors
// and weights, staleness, duplicates, incarnations, membership changes, checkpoint/restore.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "actors/nodes/role_contexts.hpp"
#include "actors/roles/owner_core.hpp"
#include "kernels/backend.hpp"
#include "runtime/quantize.hpp"
#include "runtime/value_digest.hpp"
#include "tests/actors/test_support.hpp"

namespace dd::actors {
namespace {

using dd::test::make_push;
using dd::test::tiny_layout;
using status = push_outcome::status;

/// Expects the push outcome `r` to be a rejection for `reason`.
void expect_rejected(const push_outcome& r, reject_reason reason) {
  ASSERT_EQ(r.what, status::rejected);
  ASSERT_TRUE(r.reject.has_value());
  EXPECT_EQ(r.reject->reason, reason);
}

/// Options for the tests: weighted average, lr 1, momentum 0 (so θ' = θ − Δ exactly), K = 2,
/// adaptive grace γ 0.8, τ 2.
owner_options base_options() {
  owner_options o;
  o.layout = tiny_layout();
  o.quorum = policy::quorum_spec::of_count(2);
  o.grace.mode = policy::grace_mode::adaptive;
  o.grace.gamma = 0.8;
  o.tau_steps = 2.0;
  o.max_staleness = 4;
  o.merge.rule = merge_rule::weighted_average;
  o.merge.anchor = merge_anchor::base;
  o.merge.outer_lr = 1.0f;
  o.merge.outer_momentum = 0.0f;
  return o;
}

/// base_options() merging every single push at once: K = 1, no grace window.
owner_options single_push_options() {
  auto opts = base_options();
  opts.quorum = policy::quorum_spec::of_count(1);
  opts.grace.mode = policy::grace_mode::off;
  return opts;
}

std::vector<owner_member> members(int n, uint64_t incarnation = 0, double step_s = 1.0) {
  std::vector<owner_member> out;
  for (int i = 0; i < n; ++i) out.push_back({i, incarnation, step_s});
  return out;
}

std::vector<float> filled(float v) { return std::vector<float>(6, v); }

struct owner_core_test : ::testing::Test {
  std::unique_ptr<kernels::backend> be = kernels::make_backend("reference");
  // The merge's own duration (ξ_sync) is measured with this clock: frozen, so ξ_sync = 0.
  owner_core::clock_fn frozen = [] { return 0.0; };
};

// Regression: ξ_step is the live learners' lower median step time, not their mean, so one learner
// 60× slower than three others (1 s) leaves it at 1 s and the window the same as without the
// straggler (the mean, 15.75 s, would make every grace window about 13× longer).
TEST_F(owner_core_test, one_straggler_does_not_stretch_the_grace_window) {
  owner_core owner(base_options(), *be, filled(1.0f), frozen);
  owner.on_membership({{0, 0, 1.0}, {1, 0, 1.0}, {2, 0, 1.0}, {3, 0, 60.0}}, 0.0);
  EXPECT_DOUBLE_EQ(owner.xi_step_s(), 1.0);
  owner.on_push(make_push(0, 0, 0, 2, 200, 2, filled(0.1f)), 10.0);
  auto b = owner.on_push(make_push(1, 0, 0, 2, 200, 2, filled(0.4f)), 10.5);
  ASSERT_TRUE(b.effects.arm_grace_s.has_value());
  EXPECT_NEAR(*b.effects.arm_grace_s, 1.2, 1e-9);  // 0.8 · (2·1 − 0.5 − 0), as with four fast
  // Two learners, one 60× slower: the faster one's step time still sizes the window.
  owner_core pair(base_options(), *be, filled(1.0f), frozen);
  pair.on_membership({{0, 0, 60.0}, {1, 0, 1.0}}, 0.0);
  EXPECT_DOUBLE_EQ(pair.xi_step_s(), 1.0);
}

TEST_F(owner_core_test, quorum_then_grace_then_merge_with_token_weights) {
  owner_core owner(base_options(), *be, filled(1.0f), frozen);
  owner.on_membership(members(4), 0.0);  // ξ_step = 1 s
  EXPECT_DOUBLE_EQ(owner.xi_step_s(), 1.0);

  // L0: tokens 200 over 2 steps → w = 200²/2 = 20000. One pending < K = 2: wait.
  auto a = owner.on_push(make_push(0, 0, 0, 2, 200, 2, filled(0.1f)), 10.0);
  EXPECT_EQ(a.what, status::accepted);
  EXPECT_FALSE(a.effects.arm_grace_s.has_value());
  EXPECT_FALSE(a.effects.merged.has_value());

  // L1 reaches quorum at t = 10.5: ξ_quorum = 0.5, grace = 0.8 · (2·1 − 0.5 − 0) = 1.2 s.
  auto b = owner.on_push(make_push(1, 0, 0, 4, 200, 4, filled(0.4f)), 10.5);
  ASSERT_EQ(b.what, status::accepted);
  ASSERT_TRUE(b.effects.arm_grace_s.has_value());
  EXPECT_NEAR(*b.effects.arm_grace_s, 1.2, 1e-9);
  EXPECT_TRUE(owner.grace_running());
  EXPECT_NEAR(owner.xi_quorum_s(), 0.5, 1e-12);

  // L2 arrives inside the window (3 of 4 live): still waiting for the timer.
  auto c = owner.on_push(make_push(2, 0, 0, 1, 100, 1, filled(0.7f)), 11.0);
  ASSERT_EQ(c.what, status::accepted);
  EXPECT_FALSE(c.effects.merged.has_value());
  EXPECT_EQ(owner.pending_count(), 3u);

  // The timer fires at the deadline: merge L0, L1, L2 with weights 20000 : 10000 : 10000.
  auto fx = owner.on_grace_timer(b.effects.timer_id, 11.7);
  ASSERT_TRUE(fx.merged.has_value());
  const auto& rec = *fx.merged;
  EXPECT_EQ(rec.version, 1u);
  EXPECT_EQ(rec.reason, "grace_expired");
  EXPECT_NEAR(rec.grace_s, 1.2, 1e-9);
  EXPECT_NEAR(rec.round_s, 1.7, 1e-9);
  EXPECT_EQ(rec.live, 4u);
  EXPECT_EQ(rec.needed, 2u);
  ASSERT_EQ(rec.contributors.size(), 3u);
  const double expected_w[3] = {0.5, 0.25, 0.25};
  double sum = 0;
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(rec.contributors[i].learner_id, static_cast<int32_t>(i));
    EXPECT_NEAR(rec.contributors[i].weight, expected_w[i], 1e-12);
    sum += rec.contributors[i].weight;
  }
  EXPECT_NEAR(sum, 1.0, 1e-12);
  // Δ = 0.5·0.1 + 0.25·0.4 + 0.25·0.7 = 0.325; θ = 1 − Δ; b = Δ (μ = 0).
  for (float v : owner.value()) EXPECT_NEAR(v, 0.675f, 1e-6);
  for (float v : owner.momentum()) EXPECT_NEAR(v, 0.325f, 1e-6);
  EXPECT_EQ(owner.version(), 1u);
  EXPECT_EQ(owner.pending_count(), 0u);
  EXPECT_FALSE(owner.grace_running());
  ASSERT_FALSE(fx.broadcast.empty());
  auto bc = decode_broadcast(fx.broadcast.front());
  ASSERT_TRUE(bc.ok());
  EXPECT_EQ(bc->version, 1u);
  // A late duplicate of the fired timer changes nothing.
  EXPECT_FALSE(owner.on_grace_timer(b.effects.timer_id, 12.0).merged.has_value());
}

TEST_F(owner_core_test, every_live_learner_pending_merges_at_once) {
  auto opts = base_options();
  opts.quorum = policy::quorum_spec::of_count(1);
  opts.grace.mode = policy::grace_mode::fixed;
  opts.grace.fixed_s = 5.0;
  owner_core owner(opts, *be, filled(1.0f), frozen);
  owner.on_membership(members(2), 0.0);
  auto a = owner.on_push(make_push(0, 0, 0, 1, 10, 1, filled(0.5f)), 1.0);
  ASSERT_TRUE(a.effects.arm_grace_s.has_value());  // K = 1 reached: 5 s window armed
  EXPECT_NEAR(*a.effects.arm_grace_s, 5.0, 1e-12);
  auto b = owner.on_push(make_push(1, 0, 0, 1, 10, 1, filled(0.25f)), 1.5);
  ASSERT_TRUE(b.effects.merged.has_value());  // both live learners pending: no waiting
  EXPECT_EQ(b.effects.merged->reason, "all_live_pending");
  EXPECT_EQ(b.effects.merged->contributors.size(), 2u);
  EXPECT_NEAR(b.effects.merged->round_s, 0.5, 1e-12);
  for (float v : owner.value()) EXPECT_NEAR(v, 1.0f - 0.375f, 1e-6);
  // The window armed for that round is stale now.
  EXPECT_FALSE(owner.on_grace_timer(a.effects.timer_id, 6.0).merged.has_value());
  EXPECT_EQ(owner.version(), 1u);
}

TEST_F(owner_core_test, stale_push_is_rejected_and_the_learner_resynced) {
  auto opts = single_push_options();
  opts.max_staleness = 1;
  owner_core owner(opts, *be, filled(1.0f), frozen);
  owner.on_membership(members(2), 0.0);
  ASSERT_TRUE(owner.on_push(make_push(0, 0, 0, 1, 10, 1, filled(0.1f)), 1.0).effects.merged);
  ASSERT_TRUE(owner.on_push(make_push(0, 0, 1, 1, 10, 2, filled(0.1f)), 2.0).effects.merged);
  EXPECT_EQ(owner.version(), 2u);
  // Learner 1 still works against version 0: 2 − 0 > max_staleness = 1.
  auto r = owner.on_push(make_push(1, 0, 0, 5, 50, 5, filled(0.3f)), 3.0);
  EXPECT_EQ(r.what, status::rejected);
  ASSERT_TRUE(r.reject.has_value());
  EXPECT_EQ(r.reject->reason, reject_reason::stale);
  EXPECT_EQ(r.reject->current_version, 2u);
  EXPECT_TRUE(r.send_current);
  auto chunks = owner.current_value();
  ASSERT_EQ(chunks.size(), 1u);
  auto b = decode_broadcast(chunks.front());
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->version, 2u);
  auto values = decode_payload(b->encoding, b->payload.data(), b->payload.size(), 6);
  ASSERT_TRUE(values.ok());
  for (float v : *values) EXPECT_NEAR(v, 0.8f, 1e-6);
  // Within the staleness bound it is accepted.
  EXPECT_EQ(owner.on_push(make_push(1, 0, 1, 5, 50, 6, filled(0.3f)), 4.0).what, status::accepted);
}

TEST_F(owner_core_test, duplicate_push_is_rejected) {
  owner_core owner(base_options(), *be, filled(1.0f), frozen);
  owner.on_membership(members(4), 0.0);
  EXPECT_EQ(owner.on_push(make_push(0, 0, 0, 5, 50, 5, filled(0.1f)), 1.0).what, status::accepted);
  expect_rejected(owner.on_push(make_push(0, 0, 0, 5, 50, 5, filled(0.1f)), 1.1),
                  reject_reason::duplicate);
  expect_rejected(owner.on_push(make_push(0, 0, 0, 4, 40, 4, filled(0.1f)), 1.2),
                  reject_reason::duplicate);
  // A newer push replaces the pending one: still one contribution from learner 0.
  EXPECT_EQ(owner.on_push(make_push(0, 0, 0, 6, 60, 6, filled(0.2f)), 1.3).what, status::accepted);
  EXPECT_EQ(owner.pending_count(), 1u);
}

TEST_F(owner_core_test, respawned_learner_counts_only_with_its_new_incarnation) {
  owner_core owner(base_options(), *be, filled(1.0f), frozen);
  owner.on_membership(members(2), 0.0);
  EXPECT_EQ(owner.on_push(make_push(1, 0, 0, 3, 30, 3, filled(0.1f)), 1.0).what, status::accepted);
  // Learner 1 died and came back as incarnation 1: its old pending push is dropped.
  owner.on_membership({{0, 0, 1.0}, {1, 1, 1.0}}, 2.0);
  EXPECT_EQ(owner.pending_count(), 0u);
  auto old = owner.on_push(make_push(1, 0, 0, 4, 40, 4, filled(0.1f)), 2.5);
  ASSERT_EQ(old.what, status::rejected);
  EXPECT_EQ(old.reject->reason, reject_reason::stale_incarnation);
  expect_rejected(owner.on_push(make_push(1, 2, 0, 1, 10, 1, filled(0.1f)), 2.6),
                  reject_reason::unknown_learner);
  // The new incarnation's counters restart (lower transfer id than the old one's) and count.
  EXPECT_EQ(owner.on_push(make_push(1, 1, 0, 1, 10, 1, filled(0.1f)), 3.0).what, status::accepted);
  expect_rejected(owner.on_push(make_push(7, 0, 0, 1, 10, 1, filled(0.1f)), 3.1),
                  reject_reason::unknown_learner);
}

TEST_F(owner_core_test, a_dead_learner_leaves_the_round_and_quorum_lost_disarms_the_timer) {
  owner_core owner(base_options(), *be, filled(1.0f), frozen);
  owner.on_membership(members(3), 0.0);
  owner.on_push(make_push(0, 0, 0, 1, 10, 1, filled(0.1f)), 1.0);
  auto b = owner.on_push(make_push(1, 0, 0, 1, 10, 1, filled(0.1f)), 1.2);
  ASSERT_TRUE(b.effects.arm_grace_s.has_value());
  owner.on_membership({{0, 0, 1.0}, {2, 0, 1.0}}, 1.3);  // learner 1 declared dead
  EXPECT_EQ(owner.pending_count(), 1u);
  EXPECT_FALSE(owner.grace_running());
  EXPECT_FALSE(owner.on_grace_timer(b.effects.timer_id, 5.0).merged.has_value());
  EXPECT_EQ(owner.version(), 0u);
  // Learner 2 completes the (now 2-learner) round: all live pending → merge.
  auto c = owner.on_push(make_push(2, 0, 0, 1, 10, 1, filled(0.3f)), 6.0);
  ASSERT_TRUE(c.effects.merged.has_value());
  EXPECT_EQ(c.effects.merged->contributors.size(), 2u);
}

TEST_F(owner_core_test, bad_payloads_are_rejected_with_a_reason) {
  owner_core owner(base_options(), *be, filled(1.0f), frozen);
  owner.on_membership(members(2), 0.0);
  auto nan = filled(0.1f);
  nan[3] = std::nanf("");
  auto r1 = owner.on_push(make_push(0, 0, 0, 1, 10, 1, nan), 1.0);
  ASSERT_EQ(r1.what, status::rejected);
  EXPECT_EQ(r1.reject->reason, reject_reason::non_finite);
  // The finiteness check is the per-tensor Σ v² taken on arrival: it names the tensor.
  EXPECT_NE(r1.reject->detail.find("NaN or Inf in tensor '"), std::string::npos)
      << r1.reject->detail;
  auto inf = filled(0.1f);
  inf[0] = -std::numeric_limits<float>::infinity();
  expect_rejected(owner.on_push(make_push(0, 0, 0, 1, 10, 4, inf), 1.0), reject_reason::non_finite);
  expect_rejected(owner.on_push(make_push(0, 0, 0, 1, 10, 2, std::vector<float>(5, 0.1f)), 1.0),
                  reject_reason::shape_mismatch);
  expect_rejected(owner.on_push(make_push(0, 0, 0, 0, 0, 3, filled(0.1f)), 1.0),
                  reject_reason::malformed);
  expect_rejected(owner.on_push(wire_bytes{1, 2, 3}, 1.0), reject_reason::malformed);
  EXPECT_EQ(owner.pending_count(), 0u);
}

TEST_F(owner_core_test, a_push_damaged_in_transit_is_refused_and_its_resent_copy_merges) {
  auto opts = single_push_options();
  owner_core owner(opts, *be, filled(1.0f), frozen);
  owner.on_membership(members(1), 0.0);
  const push_msg m = make_push(0, 0, 0, 1, 10, 7, filled(0.25f));
  const wire_bytes clean = encode(m);
  wire_bytes damaged = clean;
  auto at = std::search(damaged.begin(), damaged.end(), m.payload.begin(), m.payload.end());
  ASSERT_NE(at, damaged.end());
  *(at + 5) ^= 0x40;  // one bit of a float, in transit
  auto r1 = owner.on_push(damaged, 1.0);
  ASSERT_EQ(r1.what, status::rejected);
  EXPECT_EQ(r1.reject->reason, reject_reason::malformed);
  EXPECT_EQ(r1.reject->transfer_id, 7u);  // the learner knows which push to send again
  EXPECT_TRUE(r1.chunk_refused);
  // Refused by the message's checksum trailer; its header, read unchecked, named the transfer.
  EXPECT_NE(r1.detail.find("message checksum"), std::string::npos) << r1.detail;
  EXPECT_EQ(owner.version(), 0u);
  EXPECT_EQ(owner.value(), filled(1.0f));  // nothing corrupt reached the fragment
  auto r2 = owner.on_push(clean, 1.5);
  ASSERT_EQ(r2.what, status::accepted);
  EXPECT_FALSE(r2.chunk_refused);
  EXPECT_EQ(owner.version(), 1u);
  EXPECT_EQ(owner.value(), filled(0.75f));  // θ − Δ with lr 1, momentum 0
}

TEST_F(owner_core_test, respawn_restores_value_momentum_and_version_from_the_checkpoint) {
  auto dir = std::filesystem::temp_directory_path() / "dd_owner_core_test";
  std::filesystem::create_directories(dir);
  auto opts = single_push_options();
  opts.merge.outer_momentum = 0.9f;
  opts.merge.outer_lr = 0.7f;
  opts.merge.rule = merge_rule::rda;
  opts.checkpoint_every = 2;
  opts.checkpoint_path = (dir / "owner_0.ddck").string();
  std::filesystem::remove(opts.checkpoint_path);
  owner_core owner(opts, *be, filled(1.0f), frozen);
  owner.on_membership(members(1, 0, 0.5), 0.0);
  auto fx1 =
      owner.on_push(make_push(0, 0, 0, 2, 20, 2, {0.1f, -0.2f, 0.3f, 0.0f, 0.5f, 0.1f}), 1.0);
  ASSERT_TRUE(fx1.effects.merged.has_value());
  EXPECT_FALSE(fx1.effects.merged->checkpointed);
  auto fx2 =
      owner.on_push(make_push(0, 0, 1, 2, 20, 4, {0.2f, 0.1f, -0.1f, 0.3f, 0.2f, 0.0f}), 2.0);
  ASSERT_TRUE(fx2.effects.merged.has_value());
  EXPECT_TRUE(fx2.effects.merged->checkpointed);  // every 2 versions
  ASSERT_TRUE(std::filesystem::exists(opts.checkpoint_path));

  auto ck = load_checkpoint(opts.checkpoint_path);
  ASSERT_TRUE(ck.ok());
  owner_core restored(opts, *be, *ck, frozen);
  EXPECT_EQ(restored.version(), 2u);
  EXPECT_EQ(restored.value(), owner.value());        // bit-equal
  EXPECT_EQ(restored.momentum(), owner.momentum());  // bit-equal
  EXPECT_DOUBLE_EQ(restored.xi_step_s(), owner.xi_step_s());
  // The restored owner continues exactly like the original.
  restored.on_membership(members(1, 0, 0.5), 3.0);
  const std::vector<float> d3 = {0.05f, 0.05f, -0.3f, 0.1f, 0.0f, 0.2f};
  owner.on_push(make_push(0, 0, 2, 1, 10, 5, d3), 3.0);
  restored.on_push(make_push(0, 0, 2, 1, 10, 5, d3), 3.0);
  // Restored from version 2 with checkpoint_every 2: version 3 may have been published and lost
  // with the old owner, so the first merge after the restore is numbered 4, never 3 again.
  EXPECT_EQ(owner.version(), 3u);
  EXPECT_EQ(restored.version(), 4u);
  EXPECT_EQ(restored.value(), owner.value());
  EXPECT_EQ(restored.momentum(), owner.momentum());
  std::filesystem::remove_all(dir);
}

TEST_F(owner_core_test, anchor_current_rebases_a_lagging_push) {
  auto opts = single_push_options();
  opts.merge.anchor = merge_anchor::current;
  owner_core owner(opts, *be, filled(1.0f), frozen);
  owner.on_membership(members(2), 0.0);
  owner.on_push(make_push(0, 0, 0, 1, 10, 1, filled(0.25f)), 1.0);  // θ: 1 → 0.75, version 1
  // Learner 1's delta is against version 0: v = (θ_now − θ@0) + δ = −0.25 + 0.5 = 0.25.
  auto fx = owner.on_push(make_push(1, 0, 0, 1, 10, 1, filled(0.5f)), 2.0);
  ASSERT_TRUE(fx.effects.merged.has_value());
  for (float v : owner.value()) EXPECT_NEAR(v, 0.5f, 1e-6);
}

TEST_F(owner_core_test, broadcasts_carry_each_learners_newest_merged_push) {
  auto opts = single_push_options();
  owner_core owner(opts, *be, filled(1.0f), frozen);
  owner.on_membership(members(2), 0.0);
  owner.on_push(make_push(0, 0, 0, 1, 10, 7, filled(0.1f)), 1.0);  // version 1: learner 0, t7
  auto fx = owner.on_push(make_push(1, 0, 1, 1, 10, 3, filled(0.1f)), 2.0);  // version 2: l1, t3
  ASSERT_TRUE(fx.effects.merged.has_value());
  ASSERT_EQ(fx.effects.broadcast.size(), 1u);
  auto b = decode_broadcast(fx.effects.broadcast[0]);
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(b->merged.size(), 2u);
  EXPECT_EQ(b->merged[0], (merged_push{0, 0, 7, 1}));
  EXPECT_EQ(b->merged[1], (merged_push{1, 0, 3, 2}));
  // A pull (current value) carries the same list, and so does a checkpoint.
  auto cur = decode_broadcast(owner.current_value().at(0));
  ASSERT_TRUE(cur.ok());
  EXPECT_EQ(cur->merged, b->merged);
  EXPECT_EQ(owner.make_checkpoint().merged, b->merged);
}

// sync.broadcast_wire: a bf16 broadcast carries half the bytes and every value rounded to bf16
// (error at most 2^-8 of the value, docs/wire.md); the owner's own value stays exact, and the
// broadcast's digest is of the value as a learner decodes it.
TEST_F(owner_core_test, a_bf16_broadcast_rounds_the_value_the_owner_keeps_exact) {
  auto opts = single_push_options();
  opts.broadcast_encoding = payload_encoding::bf16;
  owner_core owner(opts, *be, filled(1.0f), frozen);
  owner.on_membership(members(1), 0.0);
  auto fx = owner.on_push(make_push(0, 0, 0, 1, 10, 1, filled(0.123456f)), 1.0);
  ASSERT_TRUE(fx.effects.merged.has_value());
  for (float v : owner.value()) EXPECT_FLOAT_EQ(v, 1.0f - 0.123456f);  // θ − Δ, exact
  ASSERT_EQ(fx.effects.broadcast.size(), 1u);
  auto b = decode_broadcast(fx.effects.broadcast[0]);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->encoding, payload_encoding::bf16);
  EXPECT_EQ(b->payload.size(), 6u * 2u);
  auto got = decode_payload(b->encoding, b->payload.data(), b->payload.size(), 6);
  ASSERT_TRUE(got.ok());
  const float exact = 1.0f - 0.123456f;
  for (float v : *got) {
    EXPECT_NE(v, exact);  // 0.876544 is not a bf16 value
    EXPECT_NEAR(v, exact, exact / 256.0f);
  }
  EXPECT_EQ(b->value_digest, value_digest(*got));
}

TEST(owner_options_of_test, sync_broadcast_wire_sets_the_owners_broadcast_encoding) {
  config::experiment e;
  EXPECT_EQ(owner_options_of(e, tiny_layout(), "", 0).broadcast_encoding, payload_encoding::fp32);
  e.sync.broadcast_wire = payload_encoding::int4;
  EXPECT_EQ(owner_options_of(e, tiny_layout(), "", 0).broadcast_encoding, payload_encoding::int4);
}

TEST_F(owner_core_test, a_push_holding_an_already_merged_transfer_is_rejected_as_superseded) {
  auto opts = single_push_options();
  owner_core owner(opts, *be, filled(1.0f), frozen);
  owner.on_membership(members(2), 0.0);
  // Learner 0's transfer 24 (base 0) is merged into version 1.
  ASSERT_TRUE(owner.on_push(make_push(0, 0, 0, 24, 240, 24, filled(0.2f)), 1.0).effects.merged);
  const auto before = owner.value();
  // Transfer 48 was made before learner 0 heard of version 1: base 0, and its delta still holds
  // transfer 24's progress (contains_from = 24). Merging it would count that progress twice.
  auto twice = make_push(0, 0, 0, 48, 480, 48, filled(0.5f));
  twice.contains_from = 24;
  auto r = owner.on_push(twice, 2.0);
  ASSERT_EQ(r.what, status::rejected);
  EXPECT_EQ(r.reject->reason, reject_reason::superseded);
  EXPECT_EQ(r.reject->transfer_id, 48u);
  EXPECT_NE(r.reject->detail.find("transfer 24"), std::string::npos) << r.reject->detail;
  EXPECT_FALSE(r.send_current);
  EXPECT_EQ(owner.value(), before);
  EXPECT_EQ(owner.pending_count(), 0u);
  // The same push without the overlap (contains_from 0: e.g. the learner overwrote its values
  // when version 1 arrived) is accepted, and so is one that starts after transfer 24.
  auto fresh = make_push(0, 0, 1, 24, 240, 49, filled(0.1f));
  EXPECT_EQ(owner.on_push(fresh, 3.0).what, status::accepted);
  auto later = make_push(1, 0, 1, 24, 240, 50, filled(0.1f));
  later.contains_from = 30;  // another learner: learner 1 has nothing merged yet
  EXPECT_EQ(owner.on_push(later, 4.0).what, status::accepted);
}

TEST_F(owner_core_test, a_newer_push_holding_a_pending_one_replaces_it) {
  auto opts = base_options();  // K = 2: learner 0's pushes stay pending
  owner_core owner(opts, *be, filled(1.0f), frozen);
  owner.on_membership(members(3), 0.0);
  ASSERT_EQ(owner.on_push(make_push(0, 0, 0, 24, 240, 24, filled(0.2f)), 1.0).what,
            status::accepted);
  auto newer = make_push(0, 0, 0, 48, 480, 48, filled(0.5f));
  newer.contains_from = 24;  // 24 is pending, not merged: no overlap with anything merged
  ASSERT_EQ(owner.on_push(newer, 2.0).what, status::accepted);
  EXPECT_EQ(owner.pending_count(), 1u);
  // Learner 1 completes the quorum 2 s into the round: grace 0.8 · (2·1 − 2 − 0) = 0, merge.
  auto fx = owner.on_push(make_push(1, 0, 0, 24, 240, 24, filled(0.1f)), 3.0);
  ASSERT_TRUE(fx.effects.merged.has_value());
  ASSERT_EQ(fx.effects.merged->contributors.size(), 2u);
  EXPECT_EQ(fx.effects.merged->contributors[0].transfer_id, 48u);  // only learner 0's newer one
}

TEST_F(owner_core_test, a_restored_owner_resyncs_bases_it_lost_and_never_reuses_a_version) {
  auto dir = std::filesystem::temp_directory_path() / "dd_owner_state_restore_test";
  std::filesystem::create_directories(dir);
  auto opts = single_push_options();
  opts.checkpoint_every = 3;
  opts.checkpoint_path = (dir / "owner_0.ddck").string();
  std::filesystem::remove(opts.checkpoint_path);
  owner_core owner(opts, *be, filled(1.0f), frozen);
  owner.on_membership(members(1), 0.0);
  for (uint64_t v = 0; v < 4; ++v)  // versions 1..4; checkpoint at 3
    ASSERT_TRUE(
        owner.on_push(make_push(0, 0, v, 1, 10, v + 1, filled(0.1f)), 1.0 + v).effects.merged);
  ASSERT_EQ(owner.version(), 4u);
  auto ck = load_checkpoint(opts.checkpoint_path);
  ASSERT_TRUE(ck.ok());
  ASSERT_EQ(ck->version, 3u);
  owner_core restored(opts, *be, *ck, frozen);
  restored.on_membership(members(1), 10.0);
  // The learner saw version 4, which died with the old owner: stale, resynchronized.
  auto lost = restored.on_push(make_push(0, 0, 4, 1, 10, 5, filled(0.1f)), 11.0);
  ASSERT_EQ(lost.what, status::rejected);
  EXPECT_EQ(lost.reject->reason, reject_reason::stale);
  EXPECT_NE(lost.reject->detail.find("was lost"), std::string::npos) << lost.reject->detail;
  EXPECT_TRUE(lost.send_current);
  // A base no restore can explain is malformed (and resynchronized too).
  auto lie = restored.on_push(make_push(0, 0, 90, 1, 10, 6, filled(0.1f)), 12.0);
  ASSERT_EQ(lie.what, status::rejected);
  EXPECT_EQ(lie.reject->reason, reject_reason::malformed);
  EXPECT_NE(lie.reject->detail.find("ahead of this owner's version 3"), std::string::npos)
      << lie.reject->detail;
  // The learner resynced onto version 3; its next merge skips 4 (published by the old owner
  // with another value) and 5 (it might have been): version 6.
  auto ok = restored.on_push(make_push(0, 0, 3, 1, 10, 7, filled(0.1f)), 13.0);
  ASSERT_TRUE(ok.effects.merged.has_value());
  EXPECT_EQ(restored.version(), 6u);
  std::filesystem::remove_all(dir);
}

/// K = 1, no grace: every accepted push merges at once (base = the version before).
owner_options gate_options(double k) {
  owner_options o = base_options();
  o.quorum = policy::quorum_spec::of_count(1);
  o.grace.mode = policy::grace_mode::off;
  o.max_norm_ratio = k;
  o.norm_window = 16;
  o.norm_min_peers = 2;
  o.norm_min_samples = 0;       // the peers' median alone (the accepted history: its own test)
  o.max_tokens_per_step = 100;  // B·T
  return o;
}

/// Pushes of several learners to one gated owner: each learner's transfers count up, every push
/// is based on the owner's current version.
struct gate_pusher {
  owner_core& owner;
  std::map<int32_t, uint64_t> transfers;
  double now_s = 1.0;
  push_outcome push(int32_t learner, float v, uint64_t steps = 1, uint64_t incarnation = 0) {
    return owner.on_push(make_push(learner, incarnation, owner.version(), steps, steps * 100,
                                   ++transfers[learner], filled(v)),
                         now_s);
  }
};

/// `rounds` rounds in which each of learners 0-3 pushes `v`, every push accepted.
void push_accepted_rounds(gate_pusher& g, int rounds, float v) {
  for (int round = 0; round < rounds; ++round)
    for (int32_t l = 0; l < 4; ++l) ASSERT_EQ(g.push(l, v).what, status::accepted);
}

/// Expects `out` to be an implausible-push refusal that changed nothing.
void expect_implausible(const push_outcome& out, const owner_core& owner, uint64_t version,
                        const std::vector<float>& value) {
  ASSERT_EQ(out.what, status::rejected) << out.detail;
  ASSERT_TRUE(out.reject.has_value());
  EXPECT_EQ(out.reject->reason, reject_reason::implausible);
  EXPECT_NE(out.reject->detail.find("pseudo-gradient norm"), std::string::npos)
      << out.reject->detail;
  EXPECT_NE(out.reject->detail.find("the median"), std::string::npos) << out.reject->detail;
  EXPECT_NE(out.reject->detail.find("other"), std::string::npos) << out.reject->detail;
  EXPECT_FALSE(out.send_current);
  EXPECT_FALSE(out.effects.merged.has_value());
  EXPECT_EQ(owner.pending_count(), 0u);
  EXPECT_EQ(owner.version(), version);
  EXPECT_EQ(owner.value(), value);
}

/// Learner 0 pushes `v` over `steps`: accepted and merged (one version more), or refused as
/// implausible with nothing changed. The outcome, for further checks.
push_outcome push_expecting(gate_pusher& g, float v, uint64_t steps, bool accepted) {
  const uint64_t version = g.owner.version();
  const auto value = g.owner.value();
  auto out = g.push(0, v, steps);
  if (accepted) {
    EXPECT_EQ(out.what, status::accepted) << out.detail;
    EXPECT_EQ(g.owner.version(), version + 1);
  } else {
    expect_implausible(out, g.owner, version, value);
  }
  return out;
}

// The plausibility gate: a push whose ‖Δ‖ per step exceeds k × the median of the OTHER
// learners' latest norms per step is refused as implausible and never merged; the median (the
// upper one for an even count) ignores one outlier either way; with fewer than 2 other learners'
// norms the gate is open; k = 0 turns it off.
TEST_F(owner_core_test, implausible_pushes_are_refused_against_the_other_learners_latest_norms) {
  struct row {
    const char* what;
    double k;
    std::vector<float> peers;  // learners 1, 2, ... push one each first (a value per push)
    float push;                // learner 0's push under test, filled
    bool accepted;
  };
  const std::vector<row> rows = {
      {"gate open with no other learner", 10, {}, 100.0f, true},
      {"gate open with one other learner's norm", 10, {0.1f}, 100.0f, true},
      {"two other learners suffice: 11x is refused", 10, {0.1f, 0.1f}, 1.1f, false},
      {"9x the median passes", 10, {0.1f, 0.1f, 0.1f}, 0.9f, true},
      {"11x the median is refused", 10, {0.1f, 0.1f, 0.1f}, 1.1f, false},
      {"1000x the median is refused", 10, {0.1f, 0.2f, 0.1f, 0.3f}, 100.0f, false},
      {"median, not mean: one large peer norm does not lift it",
       10,
       {0.1f, 0.9f, 0.1f},
       2.0f,
       false},
      {"upper median: one peer pushing zeros cannot pull it down", 10, {0.0f, 0.1f}, 0.5f, true},
      {"k = 0 is off", 0, {0.1f, 0.1f, 0.1f}, 1000.0f, true},
      {"k = 2 refuses 3x", 2, {0.1f, 0.1f, 0.1f}, 0.3f, false},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.what);
    owner_core owner(gate_options(r.k), *be, filled(1.0f), frozen);
    owner.on_membership(members(static_cast<int>(r.peers.size()) + 1), 0.0);
    gate_pusher g{owner, {}};
    for (size_t i = 0; i < r.peers.size(); ++i) {
      auto a = g.push(static_cast<int32_t>(i + 1), r.peers[i]);
      ASSERT_EQ(a.what, status::accepted) << a.detail;
      ASSERT_TRUE(a.effects.merged.has_value());
    }
    const auto out = push_expecting(g, r.push, 1, r.accepted);
    if (!r.accepted && out.reject) {
      EXPECT_EQ(out.reject->transfer_id, 1u);
    }
  }
}

// The gate compares norms per inner step: an honest learner that ran more steps between two
// pushes (descheduled under load, behind on the global push clock) brings a larger ‖Δ‖ and
// passes; the steps a push may claim count at most 4x the median of the other learners' latest
// steps, so a peer claiming a huge step count cannot dilute an absurd norm below the gate.
TEST_F(owner_core_test, the_gate_compares_norms_per_step_with_the_claimed_steps_bounded) {
  struct row {
    const char* what;
    uint64_t steps;  // the push under test; learners 1-3 pushed 2 steps each, value 0.1
    float push;
    bool accepted;
  };
  const std::vector<row> rows = {
      {"3x the steps, 15x the norm: 5x per step passes", 6, 1.5f, true},
      {"same steps, 15x the norm is refused", 2, 1.5f, false},
      {"4x the steps, 36x the norm: 9x per step passes", 8, 3.6f, true},
      {"a huge claimed step count counts as 4x the median: 1000x is refused", 1000000, 100.0f,
       false},
      {"8x the steps count as 4x: 44x the norm is 11x per step, refused", 16, 4.4f, false},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.what);
    owner_core owner(gate_options(10), *be, filled(1.0f), frozen);
    owner.on_membership(members(4), 0.0);
    gate_pusher g{owner, {}};
    for (int32_t l = 1; l <= 3; ++l) ASSERT_EQ(g.push(l, 0.1f, 2).what, status::accepted);
    const auto out = push_expecting(g, r.push, r.steps, r.accepted);
    if (!r.accepted && out.reject) {
      EXPECT_NE(out.reject->detail.find("per step"), std::string::npos) << out.reject->detail;
    }
  }
}

// Regression (honest pushes refused as implausible in the chaos matrix): the claimed steps were
// capped at 4x the median of the other learners' latest claimed steps, which is 1 when the
// global push clock has every learner push every step. A learner whose pushes were held back for
// 13 steps (or refused: its steps grow with each refusal while that cap stays, a lock-out
// spiral) was judged over 4 steps and refused. The cap is now at least 4x the steps the live
// learners' step time (1 ms here) fits into the time since the learner's last accepted push.
// Learners 1-3 push 1 step of norm per step 0.01·√6; learner 0's previous push (1 step,
// accepted) arrived at t = 1.
TEST_F(owner_core_test,
       steps_a_learner_made_while_its_pushes_waited_count_against_the_time_waited) {
  struct row {
    const char* what;
    double dt;       // after learner 0's last accepted push
    uint64_t steps;  // claimed by the push under test
    float push;      // its value, filled
    bool accepted;
  };
  const std::vector<row> rows = {
      {"13 steps 10 ms later at 4.3x the peers' norm per step (a higher lr): accepted", 0.0103, 13,
       13 * 0.043f, true},
      {"the same push 1 ms later: the time allows 4 steps, 14x per step is refused", 0.001, 13,
       13 * 0.043f, false},
      {"scale_push (1000x, the steps it made) is refused however long it waited", 5.0, 1, 10.0f,
       false},
      {"1000x claiming 10^6 steps 10 ms later counts 40 steps: 25x per step is refused", 0.01,
       1000000, 10.0f, false},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.what);
    owner_core owner(gate_options(10), *be, filled(1.0f), frozen);
    owner.on_membership(members(4, 0, 0.001), 0.0);
    gate_pusher g{owner, {}};
    for (int32_t l = 1; l <= 3; ++l) ASSERT_EQ(g.push(l, 0.01f).what, status::accepted);
    ASSERT_EQ(g.push(0, 0.03f).what, status::accepted);
    g.now_s += r.dt;
    // The premise: the old bound (4x the others' 1 step) refused the honest row.
    if (r.accepted) {
      EXPECT_GT(r.push / 4.0f, 10 * 0.01f);
    }
    const auto out = push_expecting(g, r.push, r.steps, r.accepted);
    if (!r.accepted && out.reject) {
      EXPECT_NE(out.reject->detail.find("per step"), std::string::npos) << out.reject->detail;
    }
  }
}

// The lock-out spiral the header promises cannot happen: an honest learner (5x its peers' norm
// per step, every push holding every step since its last accepted one) pushes 40 steps 2 ms
// after it joined, which the owner's clock cannot explain (refused); its steps go on growing
// while the others push 1 step each, and as soon as the time since it joined covers its steps
// it is accepted — with the old bound (4 steps) every one of its pushes was refused.
TEST_F(owner_core_test,
       an_honest_learner_refused_while_its_steps_grow_is_accepted_once_time_covers_them) {
  owner_core owner(gate_options(10), *be, filled(1.0f), frozen);
  owner.on_membership(members(4, 0, 0.001), 0.0);
  gate_pusher g{owner, {}};
  g.now_s = 0.001;
  for (int32_t l = 1; l <= 3; ++l) ASSERT_EQ(g.push(l, 0.01f).what, status::accepted);
  g.now_s = 0.002;
  const std::vector<std::pair<uint64_t, status>> pushes = {
      {40, status::rejected}, {50, status::accepted}, {60, status::accepted}};
  for (const auto& [steps, verdict] : pushes) {
    SCOPED_TRACE(std::to_string(steps) + " steps at " + std::to_string(g.now_s) + " s");
    const float v = static_cast<float>(steps) * 0.05f;
    EXPECT_GT(v / 4.0f, 10 * 0.01f);  // the old bound refused it
    EXPECT_EQ(g.push(0, v, steps).what, verdict);
    for (int32_t l = 1; l <= 3; ++l) ASSERT_EQ(g.push(l, 0.01f).what, status::accepted);
    g.now_s += 0.01;
  }
}

/// Per-step norm of a learner's push over inner steps (from, to] under a linear inner-lr warmup
/// from 0 to 1 over `warmup` steps: the mean lr over those steps, times the learner's own scale.
double warmup_norm_per_step(uint64_t from, uint64_t to, double warmup, double scale) {
  double sum = 0;
  for (uint64_t t = from + 1; t <= to; ++t) sum += std::min(1.0, static_cast<double>(t) / warmup);
  return scale * sum / static_cast<double>(to - from);
}

// Regression: with inner.warmup, a fragment's first pushes come after a few steps at a tiny lr,
// and every learner's norm per step then grows 33x as the lr ramps up. The gate that compared a
// push with the median of the fragment's own accepted history refused every honest push from
// the third round on (the refused norms never entered the median): the fragment stopped merging
// for good. Judged against the other learners' latest norms, the honest pushes, which grow
// together, are never refused.
TEST_F(owner_core_test, an_inner_lr_warmup_that_grows_every_norm_30x_never_locks_the_gate) {
  owner_core owner(gate_options(10), *be, filled(1.0f), frozen);
  owner.on_membership(members(4), 0.0);
  gate_pusher g{owner, {}};
  const double scale[] = {1.0, 1.25, 0.8, 1.1};  // learners differ a little
  // The fragment is pushed after 6 steps, then every 24 (the push clock of 4 fragments, H = 24);
  // the lr ramps up over 120 steps.
  std::map<int32_t, double> first, last;
  uint64_t from = 0;
  for (int round = 0; round < 10; ++round) {
    const uint64_t to = round == 0 ? 6 : from + 24;
    for (int i = 0; i < 4; ++i) {
      const int32_t l = (round + i) % 4;  // each learner is sometimes the first of its round
      const double per_step = 1e-3 * warmup_norm_per_step(from, to, 120.0, scale[l]);
      const auto v = static_cast<float>(per_step * static_cast<double>(to - from) / std::sqrt(6.0));
      SCOPED_TRACE("round " + std::to_string(round) + ", learner " + std::to_string(l));
      auto out = g.push(l, v, to - from);
      EXPECT_EQ(out.what, status::accepted) << out.detail;
      if (round == 0) first[l] = per_step;
      last[l] = per_step;
    }
    from = to;
  }
  EXPECT_EQ(owner.version(), 40u);
  // The premise: every learner's norm per step grew more than 30x, and the late ones exceed 10x
  // the median of the first round's (the old gate's reference: it refused them all).
  std::vector<double> early;
  for (const auto& [l, n] : first) early.push_back(n);
  std::sort(early.begin(), early.end());
  const double old_median = 0.5 * (early[1] + early[2]);
  for (const auto& [l, n] : last) {
    EXPECT_GT(n / first[l], 30.0) << "learner " << l;
    EXPECT_GT(n, 10.0 * old_median) << "learner " << l;
  }
}

// Regression: a syncer killed and resumed restores its owners from their checkpoints; the
// learners' norms per step were 14x the early pushes' (their lr had ramped up), and the gate's
// history-based median refused every honest push after the resume. The restored owner holds no
// norms (they are not checkpointed) and judges each push against the other learners' latest
// ones, all at the new scale: every push is accepted.
TEST_F(owner_core_test, honest_norms_14x_the_pre_restart_median_pass_after_a_syncer_restart) {
  owner_core owner(gate_options(10), *be, filled(1.0f), frozen);
  owner.on_membership(members(4), 0.0);
  gate_pusher g{owner, {}};
  ASSERT_NO_FATAL_FAILURE(push_accepted_rounds(g, 3, 0.01f));
  const auto ckpt = owner.make_checkpoint();
  owner_core restored(gate_options(10), *be, ckpt, frozen);
  restored.on_membership(members(4), 0.0);
  gate_pusher r{restored, g.transfers};
  for (int round = 0; round < 3; ++round)
    for (int32_t l = 0; l < 4; ++l) {
      SCOPED_TRACE("round " + std::to_string(round) + ", learner " + std::to_string(l));
      auto out = r.push(l, 0.14f);
      EXPECT_EQ(out.what, status::accepted) << out.detail;
    }
  EXPECT_NEAR(restored.peer_median_norm(0), 0.14 * std::sqrt(6.0), 1e-6);
  // A liar among them is still refused after the restart.
  const uint64_t version = restored.version();
  const auto value = restored.value();
  expect_implausible(r.push(1, 14.0f), restored, version, value);
}

// Without a restart, honest norms that jump 14x at once for every learner are refused only
// until the other learners' latest norms are at the new scale: at most the first pushes of one
// round; a refused push still becomes its learner's latest norm, so no learner is locked out.
TEST_F(owner_core_test, honest_norms_that_jump_together_are_refused_at_most_for_one_round) {
  owner_core owner(gate_options(10), *be, filled(1.0f), frozen);
  owner.on_membership(members(4), 0.0);
  gate_pusher g{owner, {}};
  ASSERT_NO_FATAL_FAILURE(push_accepted_rounds(g, 2, 0.01f));
  std::vector<status> jump;
  for (int32_t l = 0; l < 4; ++l) jump.push_back(g.push(l, 0.14f).what);
  // Learners 0 and 1 were judged against a majority still at the old scale; 2 and 3 were not.
  EXPECT_EQ(jump, (std::vector<status>{status::rejected, status::rejected, status::accepted,
                                       status::accepted}));
  EXPECT_NEAR(owner.latest_norm(0), 0.14 * std::sqrt(6.0), 1e-6);  // refused, yet recorded
  for (int round = 0; round < 3; ++round)
    for (int32_t l = 0; l < 4; ++l) {
      SCOPED_TRACE("round " + std::to_string(round) + ", learner " + std::to_string(l));
      auto out = g.push(l, 0.14f);
      EXPECT_EQ(out.what, status::accepted) << out.detail;
    }
}

// The liars the gate exists for stay refused: one learner pushing 1000x (scale_push) or random
// values of 100x the scale is refused every time, however often it pushes (its own refused
// norms never judge its next push), while the honest learners beside it keep merging; a liar
// pushing zeros cannot lower the reference of the honest ones.
TEST_F(owner_core_test, a_lying_learner_is_refused_every_time_and_cannot_move_the_others_gate) {
  owner_core owner(gate_options(10), *be, filled(1.0f), frozen);
  owner.on_membership(members(4), 0.0);
  gate_pusher g{owner, {}};
  ASSERT_NO_FATAL_FAILURE(push_accepted_rounds(g, 1, 0.1f));
  for (int round = 0; round < 5; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const uint64_t version = owner.version();
    const auto value = owner.value();
    expect_implausible(g.push(1, round % 2 == 0 ? 100.0f : 10.0f), owner, version, value);
    for (int32_t l : {0, 2, 3}) EXPECT_EQ(g.push(l, 0.1f).what, status::accepted);
  }
  // The same liar pushing zeros: honest learners judged against {0, 0.1, 0.1} still pass 9x.
  ASSERT_EQ(g.push(1, 0.0f).what, status::accepted);
  EXPECT_EQ(g.push(0, 0.9f).what, status::accepted);
  // Learner 3 pushing 1000x is judged against {0.9, 0, 0.1}: the median 0.1 still refuses it.
  const uint64_t version = owner.version();
  expect_implausible(g.push(3, 100.0f), owner, version, owner.value());
}

// With norm_min_samples (default 4) the reference is the larger of the peers' median and the
// median of the fragment's newest accepted norms, and the gate waits for 4 accepted pushes: a
// learner respawned with fresh optimizer moments and a short lr re-warmup honestly pushes 10x
// the norm of peers whose lr has decayed (seen in the seeded cluster simulation), which the
// accepted history still covers. The history only raises the reference: the liar stays refused.
TEST_F(owner_core_test, the_accepted_history_raises_the_reference_for_a_respawned_learner) {
  for (size_t min_samples : {size_t{4}, size_t{0}}) {
    SCOPED_TRACE("norm_min_samples " + std::to_string(min_samples));
    owner_options o = gate_options(10);
    o.norm_min_samples = min_samples;
    owner_core owner(o, *be, filled(1.0f), frozen);
    owner.on_membership(members(4), 0.0);
    gate_pusher g{owner, {}};
    // Gate open until 4 pushes were accepted (with min_samples 4): a 3rd push 100x passes.
    ASSERT_EQ(g.push(0, 0.1f).what, status::accepted);
    ASSERT_EQ(g.push(1, 0.1f).what, status::accepted);
    EXPECT_EQ(g.push(2, 10.0f).what, min_samples == 4 ? status::accepted : status::rejected);
    ASSERT_NO_FATAL_FAILURE(push_accepted_rounds(g, 1, 0.1f));
    for (int32_t l : {0, 1, 3}) ASSERT_EQ(g.push(l, 0.01f).what, status::accepted);
    // Learner 2 at 30x its peers' decayed norms, 3x the accepted history's median.
    auto out = g.push(2, 0.3f);
    EXPECT_EQ(out.what, min_samples == 4 ? status::accepted : status::rejected) << out.detail;
    // 1000x is refused either way.
    EXPECT_EQ(g.push(1, 100.0f).what, status::rejected);
  }
}

/// gate_options(k) with the accepted history on (norm_min_samples 4, the default).
owner_options history_gate_options(double k) {
  owner_options o = gate_options(k);
  o.norm_min_samples = 4;
  return o;
}

// Regression (a x1000 push merged into the global model): with 3 learners and one paused (not
// declared down), its latest norm left the newest 16 pushes after 16 pushes of the other two,
// one peer was left, and the gate opened: `dd-chaos msg scale-push learner:0 --factor 1000` was
// accepted. Now too few peers fall back on the other learners' accepted history.
TEST_F(owner_core_test, a_paused_peer_does_not_open_the_gate) {
  owner_core owner(history_gate_options(10), *be, filled(1.0f), frozen);
  owner.on_membership(members(3), 0.0);
  gate_pusher g{owner, {}};
  for (int round = 0; round < 2; ++round)
    for (int32_t l = 0; l < 3; ++l) ASSERT_EQ(g.push(l, 0.1f).what, status::accepted);
  // Learner 2 pauses; learners 0 and 1 push 9 times each.
  for (int i = 0; i < 9; ++i)
    for (int32_t l = 0; l < 2; ++l) ASSERT_EQ(g.push(l, 0.1f).what, status::accepted);
  // The premise: one peer is known to learner 0, too few for the peers' median.
  EXPECT_DOUBLE_EQ(owner.peer_median_norm(0), 0.0);
  const uint64_t version = owner.version();
  const auto value = owner.value();
  auto out = g.push(0, 100.0f);
  expect_implausible(out, owner, version, value);
  EXPECT_NE(out.reject->detail.find("by other learners"), std::string::npos) << out.reject->detail;
  // Honest pushes of both go on merging; learner 2 is accepted when it comes back.
  EXPECT_EQ(g.push(0, 0.1f).what, status::accepted);
  EXPECT_EQ(g.push(1, 0.12f).what, status::accepted);
  EXPECT_EQ(g.push(2, 0.1f).what, status::accepted);
}

// With M = 2 the peers' median never judges (one peer: either could be the liar), and the gate
// was open for good. Once the other learner has 4 accepted pushes its history judges: x1000 and
// 11x are refused, 9x passes; norms that jump 14x together are refused at most once each (the
// other's latest norm, refused or not, raises the reference); a gone learner's history is
// forgotten (one live learner: the gate is open).
TEST_F(owner_core_test, a_two_learner_fragment_refuses_a_x1000_push_once_it_has_history) {
  struct row {
    const char* what;
    int rounds;  // rounds of honest pushes (learner 1, then 0) of 0.1 first
    float push;  // learner 0's push under test
    bool accepted;
  };
  const std::vector<row> rows = {
      {"3 accepted pushes of the other learner: the gate is still open", 3, 100.0f, true},
      {"4 of them: x1000 is refused", 4, 100.0f, false},
      {"11x is refused", 6, 1.1f, false},
      {"9x passes", 6, 0.9f, true},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.what);
    owner_core owner(history_gate_options(10), *be, filled(1.0f), frozen);
    owner.on_membership(members(2), 0.0);
    gate_pusher g{owner, {}};
    for (int round = 0; round < r.rounds; ++round) {
      ASSERT_EQ(g.push(1, 0.1f).what, status::accepted);
      if (round + 1 < r.rounds) {
        ASSERT_EQ(g.push(0, 0.1f).what, status::accepted);
      }
    }
    push_expecting(g, r.push, 1, r.accepted);
  }
  // Honest norms that jump 14x together: each learner refused once, then both accepted.
  owner_core owner(history_gate_options(10), *be, filled(1.0f), frozen);
  owner.on_membership(members(2), 0.0);
  gate_pusher g{owner, {}};
  for (int round = 0; round < 4; ++round)
    for (int32_t l = 0; l < 2; ++l) ASSERT_EQ(g.push(l, 0.1f).what, status::accepted);
  EXPECT_EQ(g.push(0, 1.4f).what, status::rejected);
  EXPECT_EQ(g.push(1, 1.4f).what, status::accepted);  // learner 0's refused 1.4 raises it
  for (int round = 0; round < 3; ++round)
    for (int32_t l = 0; l < 2; ++l) {
      SCOPED_TRACE("round " + std::to_string(round) + ", learner " + std::to_string(l));
      EXPECT_EQ(g.push(l, 1.4f).what, status::accepted);
    }
  // Learner 1 leaves the live view: its history goes with it, the lone learner's gate is open.
  owner.on_membership({{0, 0, 1.0}}, 1.0);
  EXPECT_EQ(g.push(0, 1000.0f).what, status::accepted);
}

// A liar pushing alone (its peers paused) just under the bound each time cannot ratchet the
// reference up: its own accepted norms never judge it, so after 40 pushes of 9.9x the others'
// history 11x is still refused (a history of the newest 16 accepted norms of anyone would be at
// 9.9x after 8 of them, and at 98x after 16 more); neither can it raise the steps it may claim
// by claiming 4x more each time.
TEST_F(owner_core_test, a_learner_pushing_alone_cannot_ratchet_its_reference_up) {
  owner_core owner(history_gate_options(10), *be, filled(1.0f), frozen);
  owner.on_membership(members(3), 0.0);
  gate_pusher g{owner, {}};
  for (int round = 0; round < 3; ++round)
    for (int32_t l = 0; l < 3; ++l) ASSERT_EQ(g.push(l, 0.1f).what, status::accepted);
  for (int i = 0; i < 40; ++i) {
    SCOPED_TRACE("push " + std::to_string(i));
    ASSERT_EQ(g.push(0, 0.99f).what, status::accepted);
  }
  EXPECT_DOUBLE_EQ(owner.peer_median_norm(0), 0.0);  // both peers out of the window
  EXPECT_EQ(g.push(0, 1.1f).what, status::rejected);
  // Claimed steps count at most 4x the others' 1 step, however many it claimed before.
  for (uint64_t steps : {4, 16, 64, 256}) {
    SCOPED_TRACE(std::to_string(steps) + " steps");
    EXPECT_EQ(g.push(0, 0.99f * 4, steps).what, status::accepted);
  }
  EXPECT_EQ(g.push(0, 1.1f * 4, 1024).what, status::rejected);  // counts 4 steps: 11x per step
  // The paused learners come back at their old scale and are accepted.
  EXPECT_EQ(g.push(1, 0.1f).what, status::accepted);
  EXPECT_EQ(g.push(2, 0.1f).what, status::accepted);
}

// The gate's memory: a learner that left the live view, or came back as a new incarnation, no
// longer counts among the peers, and neither does a norm older than the newest norm_window
// pushes that reached the gate.
TEST_F(owner_core_test, the_gate_forgets_learners_that_left_and_norms_older_than_its_window) {
  owner_options o = gate_options(10);
  o.norm_window = 6;
  owner_core owner(o, *be, filled(1.0f), frozen);
  owner.on_membership(members(3), 0.0);
  gate_pusher g{owner, {}};
  ASSERT_EQ(g.push(1, 0.1f).what, status::accepted);
  ASSERT_EQ(g.push(2, 0.1f).what, status::accepted);
  EXPECT_EQ(g.push(0, 100.0f).what, status::rejected);
  // Learner 2 comes back as incarnation 1: its old norm is forgotten, one peer is left.
  owner.on_membership({{0, 0, 1.0}, {1, 0, 1.0}, {2, 1, 1.0}}, 2.0);
  EXPECT_DOUBLE_EQ(owner.latest_norm(2), 0.0);
  EXPECT_DOUBLE_EQ(owner.peer_median_norm(0), 0.0);
  EXPECT_EQ(g.push(0, 100.0f).what, status::accepted);
  // Learner 1 leaves: forgotten too.
  ASSERT_EQ(g.push(2, 0.1f, 1, 1).what, status::accepted);
  owner.on_membership({{0, 0, 1.0}, {2, 1, 1.0}}, 3.0);
  EXPECT_DOUBLE_EQ(owner.latest_norm(1), 0.0);
  // Window 6: learners 0 and 2 push 6 times between them; learner 3 (joined now) pushed once
  // before, its norm drops out of the window.
  owner.on_membership({{0, 0, 1.0}, {2, 1, 1.0}, {3, 0, 1.0}}, 4.0);
  ASSERT_EQ(g.push(3, 0.1f).what, status::accepted);
  EXPECT_GT(owner.peer_median_norm(0), 0.0);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(g.push(0, 0.1f).what, status::accepted);
    ASSERT_EQ(g.push(2, 0.1f, 1, 1).what, status::accepted);
  }
  EXPECT_DOUBLE_EQ(owner.peer_median_norm(0), 0.0);  // only learner 2 left in the window
  EXPECT_NEAR(owner.latest_norm(3), 0.1 * std::sqrt(6.0), 1e-6);
}

// Refusals are never silent: the first implausible refusal carries a console warning naming
// the fragment, the learner and why; later ones are summed up at most once every 30 s (count and
// learners since the last line); accepted pushes carry none.
TEST_F(owner_core_test, implausible_refusals_carry_a_rate_limited_console_warning) {
  owner_core owner(gate_options(10), *be, filled(1.0f), frozen);
  owner.on_membership(members(4), 0.0);
  gate_pusher g{owner, {}};
  for (int32_t l = 0; l < 4; ++l) EXPECT_EQ(g.push(l, 0.1f).warning, "");
  struct row {
    double t;
    int32_t learner;
    std::string warning;  // a substring of the expected warning; "" = none
  };
  const std::vector<row> rows = {
      {1.0, 1,
       "fragment 0: 1 push refused as implausible (learners 1 (1)); the newest, from "
       "learner 1: pseudo-gradient norm"},
      {10.0, 1, ""},
      {20.0, 2, ""},
      {31.5, 1,
       "fragment 0: 3 pushes refused as implausible in the last 30 s (learners 1 (2), "
       "2 (1)); the newest, from learner 1"},
      {40.0, 1, ""},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE("t = " + std::to_string(r.t));
    g.now_s = r.t;
    auto out = g.push(r.learner, 100.0f);
    ASSERT_EQ(out.what, status::rejected);
    if (r.warning.empty())
      EXPECT_EQ(out.warning, "");
    else
      EXPECT_NE(out.warning.find(r.warning), std::string::npos) << out.warning;
  }
  EXPECT_EQ(g.push(0, 0.1f).warning, "");  // accepted: nothing to say
}

TEST_F(owner_core_test, tokens_beyond_steps_times_batch_times_context_are_refused) {
  struct row {
    const char* what;
    uint64_t steps, tokens, per_step;
    bool accepted;
  };
  const std::vector<row> rows = {
      {"exactly steps x B x T", 3, 300, 100, true},
      {"fewer tokens (a rebased push) pass", 3, 120, 100, true},
      {"one token too many", 3, 301, 100, false},
      {"a huge token count for its weight", 1, 1000000000, 100, false},
      {"unbounded when B x T is 0", 1, 1000000000, 0, true},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.what);
    owner_options o = gate_options(10);
    o.max_tokens_per_step = r.per_step;
    owner_core owner(o, *be, filled(1.0f), frozen);
    owner.on_membership(members(1), 0.0);
    auto out = owner.on_push(make_push(0, 0, 0, r.steps, r.tokens, 1, filled(0.1f)), 1.0);
    if (r.accepted) {
      EXPECT_EQ(out.what, status::accepted) << out.detail;
      continue;
    }
    ASSERT_EQ(out.what, status::rejected);
    EXPECT_EQ(out.reject->reason, reject_reason::implausible);
    EXPECT_NE(out.reject->detail.find("exceed steps × batch × context"), std::string::npos)
        << out.reject->detail;
    EXPECT_EQ(owner.version(), 0u);
  }
}

}  // namespace
}  // namespace dd::actors
