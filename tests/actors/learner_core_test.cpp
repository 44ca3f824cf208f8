// tests/actors/learner_core_test.cpp — deterministic tests of the learner's decisions
// (actors/roles/learner_core.hpp) on a manual clock, without CAF: the push schedule on the own
// and the global clock, the queue and the in-flight window, expiry and resends, overwrite and
// rebase, the barrier, the global lr clock, reloads after a non-finite step, owner respawns,
// the drain, and the end of a learner node's learner — a leave while the syncer is away, the
// rejoin with a new incarnation, its final pushes, a node stop while the leave waits.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "actors/roles/learner_core.hpp"
#include "actors/roles/learner_record.hpp"
#include "actors/services/run_log.hpp"
#include "messages/chunking.hpp"
#include "messages/control.hpp"
#include "runtime/quantize.hpp"
#include "runtime/value_digest.hpp"
#include "tests/support/wire_msgs.hpp"

namespace dd::actors {
namespace {

namespace act = learner_do;
using phase = learner_phase;

const std::string run = "0123abcd";

/// Two fragments of two floats each: fragment p holds flat elements 2p and 2p + 1.
fragment_plan two_fragments() {
  fragment_plan plan;
  for (int p = 0; p < 2; ++p) {
    fragment_layout l;
    l.fragment_id = p;
    fragment_tensor t;
    t.tensor_index = static_cast<size_t>(p);
    t.name = "t" + std::to_string(p);
    t.fragment_offset = 0;
    t.flat_offset = static_cast<size_t>(2 * p);
    t.numel = 2;
    l.tensors.push_back(t);
    l.numel = 2;
    plan.fragments.push_back(l);
    plan.fragment_of_tensor.push_back(p);
  }
  plan.total_numel = 4;
  return plan;
}

/// The model's values: a flat vector of four floats.
struct flat_params final : learner_params {
  std::vector<float> v = std::vector<float>(4, 0.0f);
  std::vector<float> read(const fragment_layout& l) const override {
    std::vector<float> out(l.numel);
    for (const auto& t : l.tensors)
      std::copy_n(v.begin() + static_cast<long>(t.flat_offset), t.numel,
                  out.begin() + static_cast<long>(t.fragment_offset));
    return out;
  }
  void write(const fragment_layout& l, const std::vector<float>& x) override {
    for (const auto& t : l.tensors)
      std::copy_n(x.begin() + static_cast<long>(t.fragment_offset), t.numel,
                  v.begin() + static_cast<long>(t.flat_offset));
  }
};

/// H = 4, P = 2 (fragment 0 due at steps 4, 8, ...; fragment 1 at 2, 6, ...), two pushes in
/// flight, B·T = 10 tokens per step, 2 learners, constant lr 0.1, no drain.
learner_options base_options() {
  learner_options o;
  o.learner_id = 0;
  o.run_id = run;
  o.plan = two_fragments();
  o.sync_interval = 4;
  o.max_inflight = 2;
  o.drain_timeout_s = 0.0;
  o.schedule.lr = 0.1;
  o.schedule.warmup = 0;
  o.schedule.total = 1000;
  o.schedule.min_lr_ratio = 1.0;
  o.rewarmup_steps = 4;
  o.tokens_per_step = 10;
  o.learners = 2;
  return o;
}

// ---- messages as the syncer sends them --------------------------------------------------------

envelope_stamp syncer(uint64_t incarnation = 1) { return {run, incarnation}; }

wire_bytes join_reply_bytes(uint64_t incarnation, uint64_t resume_step = 0,
                            uint64_t syncer_incarnation = 1, uint64_t tokens_before = 0) {
  join_reply r;
  r.learner_id = 0;
  r.incarnation = incarnation;
  r.resume_step = resume_step;
  r.tokens_before = tokens_before;
  return encode(r, syncer(syncer_incarnation));
}

wire_bytes broadcast_bytes(int32_t p, uint64_t version, std::vector<float> value,
                           std::vector<merged_push> merged = {}) {
  broadcast_msg b;
  b.fragment_id = p;
  b.version = version;
  test::set_fp32_payload(b, value);
  b.merged = std::move(merged);
  b.value_digest = value_digest(value);  // as the owner sends it
  return encode(b, syncer());
}

wire_bytes ack_bytes(int32_t p, uint64_t transfer_id, uint64_t incarnation = 0) {
  push_ack a;
  a.learner_id = 0;
  a.incarnation = incarnation;
  a.fragment_id = p;
  a.transfer_id = transfer_id;
  return encode(a, syncer());
}

wire_bytes reject_bytes(int32_t p, uint64_t transfer_id, reject_reason why) {
  reject_msg r;
  r.learner_id = 0;
  r.fragment_id = p;
  r.reason = why;
  r.transfer_id = transfer_id;
  r.detail = "test";
  return encode(r, syncer());
}

wire_bytes progress_bytes(uint64_t heartbeat_step, double mean_step, uint64_t total_tokens = 0) {
  progress_msg m;
  m.step = heartbeat_step;
  m.mean_step = mean_step;
  m.total_tokens = total_tokens;
  m.live_learners = 2;
  return encode(m, syncer());
}

// ---- reading actions
// ------------------------------------------------------------------------------

template <class T>
std::vector<T> all_of(const learner_actions& a) {
  std::vector<T> out;
  for (const auto& x : a)
    if (const auto* t = std::get_if<T>(&x)) out.push_back(*t);
  return out;
}

template <class T>
size_t count_of(const learner_actions& a) {
  return all_of<T>(a).size();
}

std::vector<std::string> events(const learner_actions& a) {
  std::vector<std::string> out;
  for (const auto& e : all_of<act::event>(a)) out.push_back(e.name);
  return out;
}

bool has_event(const learner_actions& a, const std::string& name) {
  const auto e = events(a);
  return std::find(e.begin(), e.end(), name) != e.end();
}

std::vector<int32_t> pulled(const learner_actions& a) {
  std::vector<int32_t> out;
  for (const auto& p : all_of<act::pull>(a)) out.push_back(p.fragment);
  return out;
}

std::vector<int32_t> pushed(const learner_actions& a) {
  std::vector<int32_t> out;
  for (const auto& p : all_of<act::push_chunks>(a)) out.push_back(p.fragment);
  return out;
}

push_msg decoded_push(const act::push_chunks& c) {
  auto m = decode_push(c.chunks.at(0), {}, {run, 0});
  EXPECT_TRUE(m.ok());
  return *m;
}

void append(learner_actions& to, learner_actions more) {
  for (auto& x : more) to.push_back(std::move(x));
}

// ---- a learner driven through its events
// ----------------------------------------------------------

struct learner_core_test : ::testing::Test {
  flat_params params;
  std::unique_ptr<learner_core> core;
  double now = 0.0;

  void make(const learner_options& o) { core = std::make_unique<learner_core>(o, params); }

  /// Joins (incarnation `inc`), learns both owners, receives both fragments (value 1 each):
  /// stepping at the resume step.
  learner_actions join_and_sync(uint64_t inc = 0, uint64_t resume = 0, uint64_t tokens_before = 0) {
    learner_actions out;
    core->on_monitor_found(true);
    auto rep = core->join_request_bytes();
    EXPECT_FALSE(rep.empty());
    EXPECT_TRUE(core->on_join_reply(join_reply_bytes(inc, resume, 1, tokens_before), out).ok());
    append(out, core->on_resumed());
    append(out, core->on_owner_directory({{true, true}, {true, true}}));
    append(out, core->on_broadcast(broadcast_bytes(0, 1, {1.0f, 1.0f})));
    append(out, core->on_broadcast(broadcast_bytes(1, 1, {1.0f, 1.0f})));
    return out;
  }

  /// One step boundary at `now` (+0.1 s after it): the timer, the step (θ −= 0.1 everywhere),
  /// the heartbeat, the pushes due (all queued), and what follows. Returns every action.
  learner_actions step(double loss = 2.0) {
    learner_actions out;
    auto plan = core->on_step_timer(now);
    append(out, std::move(plan.actions));
    if (!plan.train) return out;
    last_lr = plan.lr;
    for (auto& x : params.v) x -= 0.1f;
    append(out, core->on_step_done({loss, plan.lr, 0.1, 1.0, {}, 0.0}));
    for (const auto& hb : all_of<act::heartbeat>(out)) core->on_heartbeat_sent(hb.step, now);
    for (auto& d : core->push_due(now))
      if (d.push) append(out, core->enqueue(d.fragment, std::move(*d.push)));
    append(out, core->after_step());
    now += 0.1;
    return out;
  }

  /// Steps until the learner's step counter reaches `n`; every action.
  learner_actions step_to(uint64_t n) {
    learner_actions out;
    for (int guard = 0; core->step() < n && guard < 1000; ++guard) append(out, step());
    return out;
  }

  double last_lr = 0.0;
};

TEST_F(learner_core_test, joins_syncs_and_steps) {
  make(base_options());
  auto out = join_and_sync();
  EXPECT_EQ(core->phase(), phase::stepping);
  EXPECT_EQ(events(out), (std::vector<std::string>{"learner_start", "learner_synced"}));
  EXPECT_EQ(pulled(out), (std::vector<int32_t>{0, 1}));  // the directory came after the reload
  EXPECT_EQ(count_of<act::gate>(out), 1u);
  ASSERT_EQ(count_of<act::step>(out), 1u);
  EXPECT_EQ(params.v, (std::vector<float>{1, 1, 1, 1}));
  // A second broadcast while stepping does not schedule a second step.
  EXPECT_EQ(count_of<act::step>(core->on_broadcast(broadcast_bytes(0, 2, {1.0f, 1.0f}))), 0u);
}

TEST_F(learner_core_test, the_own_clock_pushes_each_fragment_at_its_turn) {
  make(base_options());
  join_and_sync();
  // H = 4, P = 2: offsets 0 and 2.
  const std::vector<std::vector<int32_t>> due = {{}, {1}, {}, {0}, {}, {1}, {}, {0}};
  for (size_t s = 0; s < due.size(); ++s) {
    auto out = step();
    EXPECT_EQ(core->step(), s + 1);
    EXPECT_EQ(pushed(out), due[s]) << "step " << s + 1;
    ASSERT_EQ(count_of<act::heartbeat>(out), 1u);
    for (const auto& c : all_of<act::push_chunks>(out)) {
      core->on_ack(ack_bytes(c.fragment, s + 1));
      auto m = decoded_push(c);
      EXPECT_EQ(m.transfer_id, s + 1);
      EXPECT_EQ(m.steps, s + 1);  // no global value since the sync
      EXPECT_EQ(m.tokens, 10 * (s + 1));
      auto delta = decode_payload(m.encoding, m.payload.data(), m.payload.size(), 2);
      ASSERT_TRUE(delta.ok());
      for (float d : *delta) EXPECT_NEAR(d, 0.1f * static_cast<float>(s + 1), 1e-6f);  // base − θ
    }
  }
  EXPECT_EQ(core->tokens(), 80u);
  EXPECT_NEAR(core->step_time_s(), 0.1, 1e-12);
}

TEST_F(learner_core_test, the_queue_holds_the_newest_push_per_fragment_behind_the_window) {
  auto o = base_options();
  o.max_inflight = 1;
  make(o);
  join_and_sync();
  EXPECT_EQ(pushed(step_to(2)), (std::vector<int32_t>{1}));  // sent: the window is full now
  EXPECT_EQ(pushed(step_to(4)), (std::vector<int32_t>{}));   // fragment 0 waits
  EXPECT_EQ(core->queued(), 1u);
  auto out = core->on_ack(ack_bytes(1, 2));  // the window opens: fragment 0's push leaves
  ASSERT_EQ(pushed(out), (std::vector<int32_t>{0}));
  EXPECT_EQ(decoded_push(all_of<act::push_chunks>(out)[0]).transfer_id, 4u);
  // An ack of another transfer (or another incarnation) changes nothing.
  EXPECT_TRUE(pushed(core->on_ack(ack_bytes(0, 3))).empty());
  EXPECT_TRUE(pushed(core->on_ack(ack_bytes(0, 4, 7))).empty());
  EXPECT_EQ(core->unacked(), 1u);
  // Never answered: step 6's push of fragment 1 queues behind it; at step 8 transfer 4 expires
  // (8 >= 4 + H), fragment 0's new push pushes the older queued one out of the one-push queue
  // and leaves at once.
  EXPECT_TRUE(pushed(step_to(7)).empty());
  EXPECT_EQ(core->queued(), 1u);
  out = step_to(8);
  ASSERT_EQ(pushed(out), (std::vector<int32_t>{0}));
  EXPECT_EQ(decoded_push(all_of<act::push_chunks>(out)[0]).transfer_id, 8u);
  EXPECT_EQ(core->queued(), 0u);
  EXPECT_EQ(core->unacked_push(1), nullptr);
  EXPECT_EQ(core->unacked_push(0)->transfer_id, 8u);
}

TEST_F(learner_core_test, a_push_unanswered_for_H_steps_expires) {
  make(base_options());
  join_and_sync();
  step_to(2);  // fragment 1's push (transfer 2) is never answered
  // Table: step → pushes unanswered after it.
  const std::vector<std::pair<uint64_t, size_t>> table = {{3, 1}, {4, 2}, {5, 2}, {6, 2}};
  for (auto [s, n] : table) {
    step_to(s);
    EXPECT_EQ(core->unacked(), n) << "after step " << s;
  }
  // Step 6 expired transfer 2 (6 >= 2 + H) and pushed transfer 6 in its place.
  ASSERT_NE(core->unacked_push(1), nullptr);
  EXPECT_EQ(core->unacked_push(1)->transfer_id, 6u);
  EXPECT_EQ(core->unacked_push(0)->transfer_id, 4u);
}

TEST_F(learner_core_test, a_malformed_refusal_resends_twice_then_settles) {
  make(base_options());
  join_and_sync();
  auto first = all_of<act::push_chunks>(step_to(2));
  ASSERT_EQ(first.size(), 1u);
  for (int i = 0; i < 2; ++i) {
    auto out = core->on_reject(reject_bytes(1, 2, reject_reason::malformed));
    ASSERT_EQ(pushed(out), (std::vector<int32_t>{1})) << "resend " << i;
    EXPECT_EQ(all_of<act::push_chunks>(out)[0].chunks, first[0].chunks);  // the same bytes
    EXPECT_TRUE(has_event(out, "push_resent"));
  }
  auto out = core->on_reject(reject_bytes(1, 2, reject_reason::malformed));
  EXPECT_TRUE(pushed(out).empty());
  EXPECT_EQ(core->unacked_push(1), nullptr);
  EXPECT_FALSE(core->has_unsettled_push());
  // A refusal of a transfer not in flight is no resend either.
  EXPECT_TRUE(pushed(core->on_reject(reject_bytes(0, 99, reject_reason::malformed))).empty());
}

TEST_F(learner_core_test, overwrite_mixes_with_alpha_and_restarts_the_counters) {
  auto o = base_options();
  o.apply = fragment_apply::overwrite(0.5);
  make(o);
  join_and_sync();
  step_to(3);  // θ = 0.7 everywhere; fragment 1 pushed at step 2
  core->on_broadcast(broadcast_bytes(1, 2, {2.0f, 3.0f}));
  EXPECT_NEAR(params.v[2], 0.5f * 0.7f + 0.5f * 2.0f, 1e-6f);
  EXPECT_NEAR(params.v[3], 0.5f * 0.7f + 0.5f * 3.0f, 1e-6f);
  EXPECT_NEAR(params.v[0], 0.7f, 1e-6f);  // the other fragment untouched
  EXPECT_EQ(core->fragment(1).steps, 0u);
  EXPECT_EQ(core->fragment(1).tokens, 0u);
  EXPECT_EQ(core->fragment(1).base_version, 2u);
  EXPECT_EQ(core->fragment(0).steps, 3u);
  // The next push of fragment 1 (step 6) carries 3 steps since the arrival, and contains no
  // earlier transfer (contains_from restarts with the arrival).
  auto out = step_to(6);
  auto pushes = all_of<act::push_chunks>(out);
  ASSERT_EQ(pushes.size(), 2u);  // fragment 0 at 4, fragment 1 at 6
  auto m = decoded_push(pushes[1]);
  EXPECT_EQ(m.fragment_id, 1);
  EXPECT_EQ(m.steps, 3u);
  EXPECT_EQ(m.contains_from, 0u);  // the first push since the arrival holds no earlier one
}

TEST_F(learner_core_test, rebase_keeps_progress_the_value_does_not_hold) {
  auto o = base_options();
  o.apply = fragment_apply::rebase();
  make(o);
  join_and_sync();
  step_to(3);  // fragment 1 pushed at step 2 (Δ = 0.2); θ = 0.7
  ASSERT_EQ(core->fragment(1).outstanding.size(), 1u);
  // Another learner's merge: θ += v − base, our push still outstanding.
  core->on_broadcast(broadcast_bytes(1, 2, {1.5f, 1.5f}, {{1, 0, 8, 2}}));
  EXPECT_NEAR(params.v[2], 0.7f + 0.5f, 1e-6f);
  EXPECT_EQ(core->fragment(1).outstanding.size(), 1u);
  EXPECT_EQ(core->fragment(1).steps, 3u);
  // A merge that contains our transfer 2: its Δ is taken out of the local delta.
  core->on_broadcast(broadcast_bytes(1, 3, {1.0f, 1.0f}, {{0, 0, 2, 3}}));
  EXPECT_NEAR(params.v[2], 1.2f + (1.0f - 1.5f) + 0.2f, 1e-6f);
  EXPECT_TRUE(core->fragment(1).outstanding.empty());
  EXPECT_EQ(core->fragment(1).steps, 1u);    // the step after the push
  EXPECT_FALSE(core->has_unsettled_push());  // the broadcast named transfer 2: settled
}

// Regression (rebase counted merged progress twice): a learner whose pushes go unanswered keeps
// building them; rebase mode kept the deltas of the newest 8 and dropped the oldest, which is
// the push an owner merges first (it then refuses every later one as superseded). When the
// value that holds it arrived, no outstanding push matched: θ kept that push's progress and the
// value held it too (counted twice), and the step counter kept its steps. Here fragment 1's
// owner is gone from step 3 to 38 (pushes at 2, 6, ..., 38: ten, all waiting to be sent), then
// a new owner sends a value {1.5, 1.5} naming one transfer as merged. θ = 1 − 0.1 × 38 = −2.8
// before it arrives.
TEST_F(learner_core_test, a_merged_push_beyond_the_newest_eight_is_not_counted_twice) {
  struct row {
    const char* what;
    std::vector<merged_push> merged;
    float theta;     // fragment 1's values after the value arrives
    uint64_t steps;  // its step counter
  };
  const std::vector<row> rows = {
      {"the oldest push (2) merged: its share 0.2 is taken out, the 36 steps since kept",
       {{0, 0, 2, 2}},
       1.5f - 3.6f,
       36},
      {"the newest (38) merged: it holds everything", {{0, 0, 38, 2}}, 1.5f, 0},
      {"another learner's merge: every step kept", {{1, 0, 7, 2}}, -2.8f + 0.5f, 38},
      {"a push whose delta was dropped (6) merged: θ is the value, nothing counted twice",
       {{0, 0, 6, 2}},
       1.5f,
       0},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.what);
    auto o = base_options();
    o.apply = fragment_apply::rebase();
    make(o);
    now = 0.0;
    join_and_sync();
    step_to(3);
    core->on_owner_directory({{true, false}, {false, true}});
    step_to(38);
    ASSERT_NEAR(params.v[2], -2.8f, 1e-5f);
    ASSERT_EQ(core->fragment(1).steps, 38u);
    core->on_owner_directory({{true, false}, {true, true}});
    core->on_broadcast(broadcast_bytes(1, 2, {1.5f, 1.5f}, r.merged));
    EXPECT_NEAR(params.v[2], r.theta, 1e-5f);
    EXPECT_NEAR(params.v[3], r.theta, 1e-5f);
    EXPECT_EQ(core->fragment(1).steps, r.steps);
    EXPECT_EQ(core->fragment(1).tokens, r.steps * 10);
  }
}

// Every push names the oldest push whose progress it holds (contains_from), so that an owner
// that merged that one refuses it as superseded: the oldest outstanding push, or an older one
// whose delta was dropped. Pushes replaced in the queue before they were sent hold no place
// among the outstanding ones (no owner can merge them).
TEST_F(learner_core_test,
       contains_from_names_the_oldest_push_held_even_after_its_delta_was_dropped) {
  auto o = base_options();
  o.apply = fragment_apply::rebase();
  make(o);
  join_and_sync();
  step_to(3);
  core->on_owner_directory({{true, false}, {false, true}});
  step_to(38);
  core->on_owner_directory({{true, false}, {true, true}});
  // Transfer 2 refused: the oldest push still held is 6, whose delta was dropped.
  core->on_reject(reject_bytes(1, 2, reject_reason::stale));
  auto out = step_to(42);
  auto pushes = all_of<act::push_chunks>(out);
  ASSERT_EQ(pushed(out), (std::vector<int32_t>{0, 1}));  // fragment 0 at step 40, 1 at 42
  auto m = decoded_push(pushes[1]);
  EXPECT_EQ(m.transfer_id, 42u);
  EXPECT_EQ(m.contains_from, 6u);
  EXPECT_LE(core->fragment(1).outstanding.size(), 8u);

  // A one-push window, never answered: each fragment-1 push expires after H steps and the next
  // leaves, while each fragment-0 push waits in the queue and is pushed out of it unsent by the
  // next fragment-1 push. None of them is outstanding but the one queued now.
  o.max_inflight = 1;
  make(o);
  join_and_sync();
  out = step_to(40);
  EXPECT_EQ(pushed(out), std::vector<int32_t>(10, 1));
  EXPECT_EQ(core->fragment(0).outstanding.size(), 1u);
  EXPECT_EQ(core->fragment(1).outstanding.size(), 8u);
}

// Regression (a live rejoin forgot the pushes in flight in rebase mode): the value a restored
// owner sends after the rejoin may hold a push of the old incarnation (merged before the link
// was lost); θ still held that push's progress, so it was counted twice. The push stays
// outstanding across the rejoin and is matched with the incarnation that sent it.
TEST_F(learner_core_test, a_push_merged_before_a_live_rejoin_is_taken_out_of_the_value_after_it) {
  auto o = base_options();
  o.apply = fragment_apply::rebase();
  make(o);
  join_and_sync();
  step_to(3);  // transfer 2 of fragment 1 (Δ = 0.2) in flight; θ = 0.7
  core->on_monitor_lost();
  core->on_monitor_found(true);
  ASSERT_EQ(core->on_syncer_back(), syncer_back::rejoin);
  core->rejoin();
  core->on_owner_directory({{true, false}, {true, false}});
  step();  // θ = 0.6
  learner_actions reply;
  EXPECT_FALSE(core->on_rejoin_reply(join_reply_bytes(3, 0, 1), 40, 0.4, reply));
  ASSERT_EQ(core->incarnation(), 3u);
  // The pulled value holds transfer 2 of incarnation 0.
  core->on_broadcast(broadcast_bytes(1, 2, {1.5f, 1.5f}, {{0, 0, 2, 2}}));
  EXPECT_NEAR(params.v[2], 1.5f - 0.2f, 1e-5f);  // the 2 steps since transfer 2 kept, once
  EXPECT_EQ(core->fragment(1).steps, 2u);
}

TEST_F(learner_core_test, the_barrier_waits_tau_steps_for_a_merge_and_gives_up_after_its_timeout) {
  auto o = base_options();
  o.barrier = barrier_policy::wait(1, 10.0);
  make(o);
  join_and_sync();
  step_to(2);  // fragment 1 pushed at step 2: step 4 needs its merge (4 > 2 + τ)
  EXPECT_TRUE(step().size() > 0);  // step 3
  auto out = step();               // the boundary before step 4: wait
  EXPECT_EQ(core->step(), 3u);
  EXPECT_EQ(core->phase(), phase::waiting);
  auto arms = all_of<act::arm>(out);
  ASSERT_EQ(arms.size(), 1u);
  EXPECT_EQ(arms[0].which, act::timer::barrier);
  EXPECT_DOUBLE_EQ(arms[0].delay_s, 10.0);
  // The merge arrives: stepping again.
  out = core->on_broadcast(broadcast_bytes(1, 2, {1.0f, 1.0f}));
  EXPECT_EQ(core->phase(), phase::stepping);
  EXPECT_EQ(count_of<act::step>(out), 1u);
  // Step 4 pushes fragment 0; step 6 waits for it; the timeout (early: ignored) releases it.
  step_to(5);
  out = step();
  ASSERT_EQ(core->phase(), phase::waiting);
  const double started = now;  // the waiting boundary (no step, the clock did not move)
  EXPECT_TRUE(core->on_barrier_timeout(started + 9.0).empty());
  out = core->on_barrier_timeout(started + 10.0);
  EXPECT_TRUE(has_event(out, "barrier_timeout"));
  EXPECT_EQ(core->phase(), phase::stepping);
  EXPECT_FALSE(core->fragment(0).awaiting);
}

TEST_F(learner_core_test, the_global_push_clock_pushes_when_the_mean_step_crosses_a_turn) {
  auto o = base_options();
  o.push_clock = clock_source::global;
  make(o);
  join_and_sync();
  // No reading yet: no pushes, whatever the own step.
  EXPECT_TRUE(pushed(step_to(4)).empty());
  // The monitor answers heartbeat 4 with mean step 1 (the group is slower): the first reading
  // sets the clock's baseline; nothing is due until the mean step crosses 2 (fragment 1).
  core->on_progress(progress_bytes(4, 1.0));
  EXPECT_TRUE(pushed(step()).empty());
  // 0.7 mean steps in 0.1 s: at step 6, half a step ahead, the clock reads 1.7 + 7 × 0.15 =
  // 2.75, past fragment 1's turn at 2 (fragment 0's is at 4).
  core->on_progress(progress_bytes(5, 1.7));
  auto out = step();
  EXPECT_EQ(pushed(out), (std::vector<int32_t>{1}));
  // A reading below the latched clock (a restarted monitor) starts it over from the new one.
  core->on_progress(progress_bytes(6, 0.5));
  EXPECT_TRUE(pushed(step()).empty());
  // An undecodable reply is refused and changes nothing.
  auto bad = core->on_progress({1, 2, 3});
  ASSERT_EQ(count_of<act::refused>(bad), 1u);
  EXPECT_EQ(all_of<act::refused>(bad)[0].what, "undecodable_progress");
}

TEST_F(learner_core_test, the_lr_follows_the_chosen_clock_and_rewarms_after_a_respawn) {
  auto o = base_options();
  o.schedule.min_lr_ratio = 0.0;
  o.schedule.total = 100;
  o.lr_clock = clock_source::global;
  make(o);
  join_and_sync();
  step();
  EXPECT_DOUBLE_EQ(last_lr, o.schedule.at(0));  // no reply yet: the own step
  // 800 tokens of the group = step 40 (2 learners × 10 tokens per step).
  core->on_progress(progress_bytes(1, 1.0, 800));
  EXPECT_EQ(core->global_step(), 40);
  step();
  EXPECT_DOUBLE_EQ(last_lr, o.schedule.at(40));

  // A respawned incarnation on its own clock, resumed at step 50: lr × (s − 50 + 1) / 4.
  auto r = base_options();
  r.schedule = o.schedule;
  make(r);
  join_and_sync(/*inc=*/1, /*resume=*/50);
  for (int64_t k = 1; k <= 5; ++k) {
    step();
    EXPECT_DOUBLE_EQ(last_lr, r.schedule.at(49 + k) * std::min(1.0, k / 4.0)) << "step " << k;
  }
}

// A learner node process started again resumed its step from the monitor's record but counted
// its tokens from 0 (dd_learner_tokens_total and /status of the node counted only the new
// process). Each step's stats carry the total over every incarnation, and the node's counters
// take it; in one process, where the sum already holds every incarnation, they keep the sum.
TEST_F(learner_core_test, a_resumed_learner_counts_the_tokens_of_every_incarnation) {
  struct row {
    uint64_t tokens_before;  ///< the join reply's count of the earlier incarnations
    uint64_t counted_here;   ///< the node's counter before the first step (0: a new process)
    uint64_t want_total;     ///< tokens_total of the third step (10 tokens per step)
    uint64_t want_counter;   ///< the node's counter after the third step
  };
  for (const row& r : {row{0, 0, 30, 30},            // a first incarnation
                       row{8400, 0, 8430, 8430},     // a new process: the monitor's count on
                       row{8400, 8410, 8430, 8440},  // a respawn in one process: the sum
                       row{8400, 8000, 8430, 8430}}) {
    SCOPED_TRACE(::testing::Message()
                 << "tokens_before " << r.tokens_before << ", counted " << r.counted_here);
    make(base_options());
    join_and_sync(/*inc=*/r.tokens_before > 0 ? 1 : 0, /*resume=*/840, r.tokens_before);
    run_log log;
    log.update([&](run_counters& c) { c.learners[0].tokens = r.counted_here; });
    uint64_t total = 0;
    for (int k = 0; k < 3; ++k)
      for (auto& a : step()) {
        if (const auto* st = std::get_if<act::step_stats>(&a)) total = st->tokens_total;
        record(a, 0, &log, nullptr);
      }
    EXPECT_EQ(core->step(), 843u);
    EXPECT_EQ(total, r.want_total);
    EXPECT_EQ(log.snapshot().learners[0].tokens, r.want_counter);
    EXPECT_EQ(log.snapshot().learners[0].step, 843u);
  }
}

TEST_F(learner_core_test, a_nonfinite_step_reloads_every_fragment) {
  make(base_options());
  join_and_sync();
  step_to(3);
  auto plan = core->on_step_timer(now);
  ASSERT_TRUE(plan.train);
  auto out = core->on_step_discarded(std::nan(""));
  EXPECT_EQ(core->phase(), phase::syncing);
  EXPECT_EQ(core->step(), 3u);     // not advanced
  EXPECT_EQ(core->tokens(), 30u);  // nor its tokens: tokens = steps × B·T (tokens_match_steps)
  EXPECT_EQ(events(out), (std::vector<std::string>{"nonfinite"}));
  EXPECT_EQ(all_of<act::event>(out)[0].fields["loss"], -1.0);
  EXPECT_EQ(count_of<act::count>(out), 1u);
  EXPECT_EQ(pulled(out), (std::vector<int32_t>{0, 1}));
  // The reloaded values replace the local ones and stepping resumes.
  core->on_broadcast(broadcast_bytes(0, 5, {4.0f, 4.0f}));
  EXPECT_EQ(core->phase(), phase::syncing);
  out = core->on_broadcast(broadcast_bytes(1, 5, {4.0f, 4.0f}));
  EXPECT_EQ(core->phase(), phase::stepping);
  EXPECT_EQ(count_of<act::gate>(out), 0u);  // joined the gate once, at the first sync
  EXPECT_EQ(params.v, (std::vector<float>{4, 4, 4, 4}));
}

TEST_F(learner_core_test, a_respawned_owner_gets_the_push_in_flight_or_is_pulled_from) {
  make(base_options());
  join_and_sync();
  step_to(2);  // fragment 1's push in flight
  auto out = core->on_owner_directory({{true, true}, {true, true}});
  EXPECT_EQ(pushed(out), (std::vector<int32_t>{1}));  // resent to the new owner
  EXPECT_EQ(pulled(out), (std::vector<int32_t>{0}));  // nothing in flight: resynchronize
  // Unchanged handles: nothing.
  EXPECT_TRUE(core->on_owner_directory({{true, false}, {true, false}}).empty());
  // An owner gone: no sends to it.
  out = core->on_owner_directory({{false, true}, {true, false}});
  EXPECT_TRUE(out.empty());
  EXPECT_FALSE(core->has_owner(0));
}

TEST_F(learner_core_test, a_damaged_broadcast_is_refused_and_its_fragment_pulled_again) {
  make(base_options());
  join_and_sync();
  auto bytes = broadcast_bytes(1, 2, {7.0f, 7.0f});
  const std::vector<uint8_t> payload = {0x00, 0x00, 0xe0, 0x40};  // 7.0f, little-endian
  auto at = std::search(bytes.begin(), bytes.end(), payload.begin(), payload.end());
  ASSERT_NE(at, bytes.end());
  *(at + 2) ^= 0x10;  // one bit of the payload flips on the way
  auto out = core->on_broadcast(bytes);
  EXPECT_EQ(count_of<act::refused>(out), 1u);
  EXPECT_TRUE(has_event(out, "chunk_refused"));
  EXPECT_EQ(pulled(out), (std::vector<int32_t>{1}));
  EXPECT_EQ(params.v, (std::vector<float>{1, 1, 1, 1}));
  // A fragment outside the plan is refused, nothing applied.
  out = core->on_broadcast(broadcast_bytes(5, 2, {7.0f, 7.0f}));
  EXPECT_EQ(count_of<act::refused>(out), 1u);
  EXPECT_EQ(params.v, (std::vector<float>{1, 1, 1, 1}));
}

TEST_F(learner_core_test, the_drain_waits_for_the_final_pushes_then_leaves) {
  // Table: how the drain ends → what ends it.
  struct row {
    const char* name;
    int how;  // 0: merged (broadcast), 1: refused, 2: drain timeout
  };
  for (const row r : {row{"merged", 0}, row{"refused", 1}, row{"timeout", 2}}) {
    SCOPED_TRACE(r.name);
    auto o = base_options();
    o.drain_timeout_s = 5.0;
    o.max_steps = 6;
    make(o);
    join_and_sync();
    auto out = step_to(6);  // pushes: fragment 1 at 2 and 6, fragment 0 at 4
    for (int32_t p : {0, 1}) core->on_ack(ack_bytes(p, p == 0 ? 4 : 2));
    EXPECT_EQ(core->phase(), phase::draining);
    auto arms = all_of<act::arm>(out);
    ASSERT_EQ(arms.size(), 1u);
    EXPECT_EQ(arms[0].which, act::timer::drain);
    EXPECT_EQ(count_of<act::training_over>(out), 1u);
    EXPECT_FALSE(has_event(out, "learner_done"));
    // Fragment 0's push (4) merged: fragment 1's (6) still unsettled.
    EXPECT_TRUE(core->on_broadcast(broadcast_bytes(0, 2, {1.0f, 1.0f}, {{0, 0, 4, 2}})).empty());
    ASSERT_EQ(core->phase(), phase::draining);
    if (r.how == 0)
      out = core->on_broadcast(broadcast_bytes(1, 2, {1.0f, 1.0f}, {{0, 0, 6, 2}}));
    else if (r.how == 1)
      out = core->on_reject(reject_bytes(1, 6, reject_reason::stale));
    else
      out = core->on_drain_timeout();
    EXPECT_EQ(core->phase(), phase::finished);
    EXPECT_EQ(events(out), (std::vector<std::string>{"learner_done"}));
    EXPECT_EQ(count_of<act::training_over>(out), 0u);  // said at the drain's start
    auto leaves = all_of<act::leave>(out);
    ASSERT_EQ(leaves.size(), 1u);
    EXPECT_EQ(leaves[0].attempt, 0u);  // send_and_exit
    EXPECT_TRUE(std::holds_alternative<act::quit>(out.back()));
  }
}

TEST_F(learner_core_test, the_final_push_sends_every_settled_fragment_trained_since_its_value) {
  // H = 4, P = 2, the budget at step 7: fragment 1 pushed at 2 and 6, fragment 0 at 4 (transfer
  // ids = steps). Table: sync.final_push, which earlier pushes are merged before the end, how the
  // learner ends → the fragments pushed at the end, the steps each carries.
  struct row {
    const char* name;
    bool final_push;
    bool merge_f0_at_5;  // fragment 0's push (4) merged after step 5: 2 steps trained since
    bool merge_f1_at_6;  // fragment 1's push (6) merged after step 6: 1 step trained since
    bool stop_at_6;      // a monitor stop at step 6 instead of the budget at 7
    std::vector<int32_t> final_fragments;
    std::vector<uint64_t> final_steps;
  };
  const std::vector<row> rows = {
      {"off", false, true, false, false, {}, {}},
      {"nothing_settled", true, false, false, false, {}, {}},
      {"one_settled", true, true, false, false, {0}, {2}},
      {"both_settled", true, true, true, false, {0, 1}, {2, 1}},
      {"stopped", true, true, false, true, {0}, {1}},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.name);
    auto o = base_options();
    o.drain_timeout_s = 5.0;
    o.max_steps = 7;
    o.final_push = r.final_push;
    make(o);
    join_and_sync();
    step_to(5);
    // The owners took both pushes so far (an owner acks a push once it holds all of it).
    for (int32_t p : {1, 0}) core->on_ack(ack_bytes(p, p == 0 ? 4 : 2));
    if (r.merge_f0_at_5) {
      EXPECT_TRUE(
          pushed(core->on_broadcast(broadcast_bytes(0, 2, {1.0f, 1.0f}, {{0, 0, 4, 2}}))).empty());
    }
    step_to(6);
    core->on_ack(ack_bytes(1, 6));
    if (r.merge_f1_at_6) {
      EXPECT_TRUE(
          pushed(core->on_broadcast(broadcast_bytes(1, 2, {1.0f, 1.0f}, {{0, 0, 6, 2}}))).empty());
    }
    learner_actions out;
    if (r.stop_at_6) {
      EXPECT_TRUE(core->on_stop(encode(stop_msg{"budget"}, syncer())).empty());
      auto plan = core->on_step_timer(now);
      EXPECT_FALSE(plan.train);
      out = std::move(plan.actions);
    } else {
      out = step();
      EXPECT_EQ(core->step(), 7u);
    }
    EXPECT_EQ(pushed(out), r.final_fragments);
    std::vector<uint64_t> steps;
    for (const auto& c : all_of<act::push_chunks>(out)) {
      auto m = decoded_push(c);
      steps.push_back(m.steps);
      EXPECT_EQ(m.tokens, 10 * m.steps);
      auto delta = decode_payload(m.encoding, m.payload.data(), m.payload.size(), 2);
      ASSERT_TRUE(delta.ok());
      // θ = 1 − 0.1 per step since the value 1 arrived: base − θ = 0.1 × steps.
      for (float d : *delta) EXPECT_NEAR(d, 0.1f * static_cast<float>(m.steps), 1e-6f);
    }
    EXPECT_EQ(steps, r.final_steps);
    EXPECT_EQ(has_event(out, "final_pushes"), r.final_push);
    for (const auto& e : all_of<act::event>(out)) {
      if (e.name == "final_pushes") {
        EXPECT_EQ(e.fields.at("fragments").get<size_t>(), r.final_fragments.size());
      }
    }
    // A learner with a push unsettled drains; one with none left finishes.
    const bool unsettled = !r.merge_f1_at_6 || !r.final_fragments.empty();
    EXPECT_EQ(core->phase(), unsettled ? phase::draining : phase::finished);
    // The drain's end makes no second round of final pushes.
    if (core->phase() == phase::draining) {
      EXPECT_TRUE(pushed(core->on_drain_timeout()).empty());
      EXPECT_EQ(core->phase(), phase::finished);
    }
  }
}

TEST_F(learner_core_test, a_monitor_stop_finishes_at_the_next_step_boundary) {
  make(base_options());
  join_and_sync();
  step_to(3);
  EXPECT_TRUE(core->on_stop(encode(stop_msg{"drain"}, syncer())).empty());
  auto plan = core->on_step_timer(now);
  EXPECT_FALSE(plan.train);
  EXPECT_EQ(core->phase(), phase::finished);  // no drain configured
  auto leaves = all_of<act::leave>(plan.actions);
  ASSERT_EQ(leaves.size(), 1u);
  auto lm = decode_leave(leaves[0].bytes, {}, {run, 0});
  ASSERT_TRUE(lm.ok());
  EXPECT_FALSE(lm->interrupted);
}

/// A learner node's learner (leave_protocol::acked).
struct acked_leave_test : learner_core_test {
  void SetUp() override {
    auto o = base_options();
    o.leave = leave_protocol::acked;
    o.drain_timeout_s = 5.0;
    o.max_steps = 3;
    make(o);
    join_and_sync();
  }
};

TEST_F(acked_leave_test, an_unanswered_leave_is_sent_again_while_the_monitor_is_reachable) {
  auto out = step_to(3);
  for (int32_t p : {1}) core->on_ack(ack_bytes(p, 2));
  ASSERT_EQ(core->phase(), phase::draining);
  out = core->on_broadcast(broadcast_bytes(1, 2, {1.0f, 1.0f}, {{0, 0, 2, 2}}));
  ASSERT_EQ(core->phase(), phase::finished);
  EXPECT_EQ(core->leaving(), leave_state::asking);
  auto leaves = all_of<act::leave>(out);
  ASSERT_EQ(leaves.size(), 1u);
  EXPECT_EQ(leaves[0].attempt, 1u);
  EXPECT_EQ(count_of<act::quit>(out), 0u);  // alive until answered
  // Failed: logged, tried again in 2 s.
  out = core->on_leave_failed(1, "timeout");
  EXPECT_EQ(events(out), (std::vector<std::string>{"leave_pending"}));
  auto arms = all_of<act::arm>(out);
  ASSERT_EQ(arms.size(), 1u);
  EXPECT_EQ(arms[0].which, act::timer::leave_retry);
  EXPECT_DOUBLE_EQ(arms[0].delay_s, 2.0);
  out = core->on_leave_retry();
  ASSERT_EQ(all_of<act::leave>(out).size(), 1u);
  EXPECT_EQ(all_of<act::leave>(out)[0].attempt, 2u);
  // The first attempt's late failure is moot; the monitor goes away; the second fails: kept.
  EXPECT_TRUE(core->on_leave_failed(1, "late").empty());
  core->on_monitor_lost();
  out = core->on_leave_failed(2, "down");
  ASSERT_EQ(events(out), (std::vector<std::string>{"leave_pending"}));
  EXPECT_EQ(all_of<act::event>(out)[0].fields["syncer_lost"], true);
  EXPECT_EQ(count_of<act::arm>(out), 0u);
  EXPECT_TRUE(core->on_leave_retry().empty());
  // Answered at last: exit.
  out = core->on_leave_answered();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(std::holds_alternative<act::quit>(out[0]));
  EXPECT_TRUE(core->on_leave_answered().empty());
}

TEST_F(acked_leave_test, a_leave_while_the_syncer_is_away_rejoins_pushes_and_then_leaves) {
  step_to(2);
  core->on_ack(ack_bytes(1, 2));
  core->on_broadcast(broadcast_bytes(1, 2, {1.0f, 1.0f}, {{0, 0, 2, 2}}));
  core->on_monitor_lost();  // the syncer goes away before the last step
  auto out = step_to(3);
  // Finished with nothing unsettled: the leave waits for a syncer, nothing is sent.
  ASSERT_EQ(core->phase(), phase::finished);
  EXPECT_EQ(core->leaving(), leave_state::asking);
  EXPECT_EQ(count_of<act::leave>(out), 0u);
  ASSERT_TRUE(has_event(out, "leave_pending"));
  EXPECT_EQ(all_of<act::event>(out).back().fields["error"], "the syncer is away");
  EXPECT_EQ(count_of<act::quit>(out), 0u);
  // A broadcast to a finished learner is not applied.
  EXPECT_TRUE(core->on_broadcast(broadcast_bytes(0, 9, {5.0f, 5.0f})).empty());

  // The node reaches the syncer again (a new connection): rejoin with the steps and tokens
  // trained meanwhile.
  core->on_monitor_found(true);
  ASSERT_EQ(core->on_syncer_back(), syncer_back::rejoin);
  EXPECT_EQ(core->leaving(), leave_state::rejoining);
  out = core->rejoin();
  auto rejoins = all_of<act::rejoin>(out);
  ASSERT_EQ(rejoins.size(), 1u);
  auto req = decode_join_request(rejoins[0].bytes, {}, {run, 0});
  ASSERT_TRUE(req.ok());
  EXPECT_TRUE(req->live);
  EXPECT_EQ(req->step, 3u);
  EXPECT_EQ(req->tokens, 30u);
  EXPECT_EQ(rejoins[0].reported_tokens, 30u);
  // The directory of the new syncer (finished: no pulls), then the reply: incarnation 1.
  EXPECT_TRUE(core->on_owner_directory({{true, false}, {true, false}}).empty());
  learner_actions reply;
  ASSERT_TRUE(core->on_rejoin_reply(join_reply_bytes(1, 0, 1), 30, 0.3, reply));
  EXPECT_EQ(core->incarnation(), 1u);
  EXPECT_EQ(core->tokens(), 0u);
  ASSERT_TRUE(has_event(reply, "learner_rejoined"));
  EXPECT_EQ(all_of<act::event>(reply)[0].fields["to_leave"], true);
  // Final pushes: both fragments carry progress (fragment 0: 3 steps; fragment 1: 1 step).
  auto finals = core->final_pushes();
  ASSERT_EQ(finals.size(), 2u);
  learner_actions sent;
  for (auto& d : finals) {
    ASSERT_TRUE(d.push.has_value());
    append(sent, core->enqueue(d.fragment, std::move(*d.push)));
  }
  auto pushes = all_of<act::push_chunks>(sent);
  ASSERT_EQ(pushes.size(), 2u);
  EXPECT_EQ(decoded_push(pushes[0]).incarnation, 1u);
  EXPECT_EQ(decoded_push(pushes[0]).steps, 3u);
  EXPECT_EQ(decoded_push(pushes[1]).steps, 1u);
  out = core->end_final_pushes();
  ASSERT_TRUE(has_event(out, "final_pushes"));
  EXPECT_EQ(all_of<act::event>(out)[0].fields["fragments"], 2);
  EXPECT_EQ(core->phase(), phase::draining);
  // Both merged (named with the new incarnation): the leave goes to the new monitor.
  core->on_broadcast(broadcast_bytes(0, 3, {1.0f, 1.0f}, {{0, 1, 3, 3}}));
  out = core->on_broadcast(broadcast_bytes(1, 3, {1.0f, 1.0f}, {{0, 1, 3, 3}}));
  EXPECT_EQ(core->phase(), phase::finished);
  EXPECT_FALSE(has_event(out, "learner_done"));  // once, at the last step
  auto leaves = all_of<act::leave>(out);
  ASSERT_EQ(leaves.size(), 1u);
  auto lm = decode_leave(leaves[0].bytes, {}, {run, 0});
  ASSERT_TRUE(lm.ok());
  EXPECT_EQ(lm->incarnation, 1u);
  EXPECT_TRUE(std::holds_alternative<act::quit>(core->on_leave_answered().at(0)));
}

TEST_F(acked_leave_test, a_failed_rejoin_to_leave_is_tried_again) {
  core->on_monitor_lost();
  step_to(3);                // draining: fragment 1's push of step 2 is unsettled
  core->on_drain_timeout();  // finished; the leave waits for a syncer
  ASSERT_EQ(core->phase(), phase::finished);
  core->on_monitor_found(true);
  ASSERT_EQ(core->on_syncer_back(), syncer_back::rejoin);
  core->rejoin();
  auto out = core->on_rejoin_failed("timeout");
  EXPECT_TRUE(has_event(out, "failure"));
  ASSERT_EQ(count_of<act::arm>(out), 1u);
  out = core->on_leave_retry();  // rejoins again, not a bare leave
  EXPECT_EQ(count_of<act::rejoin>(out), 1u);
  EXPECT_EQ(count_of<act::leave>(out), 0u);
}

TEST_F(acked_leave_test, a_node_stop_abandons_a_waiting_leave_or_quits_without_a_syncer) {
  // Table: (syncer lost before the end, node stop before the end) → what the end does.
  core->on_monitor_lost();
  step_to(3);
  core->on_drain_timeout();
  ASSERT_EQ(core->leaving(), leave_state::asking);
  auto out = core->on_node_stop();
  EXPECT_EQ(events(out), (std::vector<std::string>{"leave_abandoned"}));
  EXPECT_TRUE(std::holds_alternative<act::quit>(out.back()));

  // The node stops a running learner while the syncer is away: it quits without a leave.
  auto o = base_options();
  o.leave = leave_protocol::acked;
  make(o);
  join_and_sync();
  step_to(1);
  core->on_monitor_lost();
  EXPECT_TRUE(core->on_node_stop().empty());  // at the next step boundary
  EXPECT_EQ(core->stopped_by(), stop_origin::node);
  auto plan = core->on_step_timer(now);
  EXPECT_EQ(count_of<act::leave>(plan.actions), 0u);
  EXPECT_TRUE(std::holds_alternative<act::quit>(plan.actions.back()));

  // With the syncer there, its leave says `interrupted`.
  make(o);
  join_and_sync();
  step_to(1);
  core->on_node_stop();
  plan = core->on_step_timer(now);
  auto leaves = all_of<act::leave>(plan.actions);
  ASSERT_EQ(leaves.size(), 1u);
  auto lm = decode_leave(leaves[0].bytes, {}, {run, 0});
  ASSERT_TRUE(lm.ok());
  EXPECT_TRUE(lm->interrupted);
  // Its failure ends it (the node stops: no syncer to wait for).
  out = core->on_leave_failed(leaves[0].attempt, "down");
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(std::holds_alternative<act::quit>(out[0]));
}

TEST_F(learner_core_test, a_live_rejoin_forgets_pushes_in_flight_and_resyncs_every_fragment) {
  make(base_options());
  join_and_sync();
  step_to(4);  // pushes of both fragments in flight
  ASSERT_EQ(core->unacked(), 2u);
  core->on_monitor_lost();
  core->on_monitor_found(true);
  ASSERT_EQ(core->on_syncer_back(), syncer_back::rejoin);
  auto out = core->rejoin();
  EXPECT_EQ(core->unacked(), 0u);
  EXPECT_FALSE(core->has_unsettled_push());
  // The same owners over a new connection: every entry is taken, every fragment pulled.
  out = core->on_owner_directory({{true, false}, {true, false}});
  EXPECT_EQ(pulled(out), (std::vector<int32_t>{0, 1}));
  EXPECT_TRUE(core->on_owner_directory({{true, false}, {true, false}}).empty());  // once
  // Steps made before the reply belong to the new incarnation.
  step();
  learner_actions reply;
  EXPECT_FALSE(core->on_rejoin_reply(join_reply_bytes(3, 0, 2), 40, 0.4, reply));
  EXPECT_EQ(core->incarnation(), 3u);
  EXPECT_EQ(core->tokens(), 10u);
  EXPECT_NEAR(core->compute_s(), 0.1, 1e-9);
  // The old syncer incarnation's messages are refused from now on.
  push_ack a;
  a.fragment_id = 0;
  auto refused = core->on_ack(encode(a, syncer(1)));
  ASSERT_EQ(count_of<act::refused>(refused), 1u);
}

TEST_F(learner_core_test, a_query_is_answered_with_the_version_and_the_value_held) {
  make(base_options());
  // Before the join: held, but no copy.
  fragment_query q;
  q.fragment_id = 1;
  q.query_id = 7;
  q.send_value = true;
  auto a = core->on_query(encode(q, syncer()));
  ASSERT_FALSE(a.error.has_value());
  auto h = decode_fragment_held(a.held, {}, {run, 0});
  ASSERT_TRUE(h.ok());
  EXPECT_FALSE(h->have);
  EXPECT_TRUE(a.copy.empty());
  join_and_sync();
  a = core->on_query(encode(q, syncer()));
  h = decode_fragment_held(a.held, {}, {run, 0});
  ASSERT_TRUE(h.ok());
  EXPECT_TRUE(h->have);
  EXPECT_EQ(h->version, 1u);
  EXPECT_EQ(h->query_id, 7u);
  ASSERT_EQ(a.copy.size(), 1u);
  auto b = decode_broadcast(a.copy[0], {}, {run, 0});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->fragment_id, 1);
  EXPECT_TRUE(has_event(a.actions, "fragment_copy_sent"));
  EXPECT_TRUE(core->on_query({9, 9}).error.has_value());
}

// Divergence detection: each heartbeat carries the digest of the global value the learner holds
// for one fragment, in turn, beside the owner's. A stored copy altered after its broadcast (the
// corrupt_held fault) is found by the very next heartbeat, reported in it, and fetched again; the
// value that comes back replaces the copy and the fragment's parameters (no rebase onto the
// damaged copy), and the heartbeats that follow agree again.
TEST_F(learner_core_test, a_held_value_altered_after_its_broadcast_is_found_by_the_next_heartbeat) {
  make(base_options());
  join_and_sync();
  auto held = [](const learner_actions& out) {
    const auto hbs = all_of<act::heartbeat>(out);
    EXPECT_EQ(hbs.size(), 1u);
    auto hb = decode_heartbeat(hbs.at(0).bytes, {}, {run, 0});
    EXPECT_TRUE(hb.ok());
    return *hb;
  };
  // Clean: fragments 0 and 1 in turn, each the owner's digest.
  std::vector<int32_t> checked;
  for (int i = 0; i < 4; ++i) {
    const auto hb = held(step());
    EXPECT_EQ(hb.held_version, 1u);
    EXPECT_EQ(hb.held_digest, value_digest(std::vector<float>{1.0f, 1.0f}));
    EXPECT_EQ(hb.held_digest, hb.held_owner_digest);
    checked.push_back(hb.held_fragment);
  }
  EXPECT_EQ(checked, (std::vector<int32_t>{0, 1, 0, 1}));
  // Altered: the fragment the next heartbeat covers (0), its copy only.
  const auto params_before = params.v;
  ASSERT_EQ(core->corrupt_held_value(), 0);
  EXPECT_EQ(params.v, params_before);
  auto out = step();
  const auto bad = held(out);
  EXPECT_EQ(bad.held_fragment, 0);
  EXPECT_EQ(bad.held_owner_digest, value_digest(std::vector<float>{1.0f, 1.0f}));
  EXPECT_NE(bad.held_digest, bad.held_owner_digest);
  EXPECT_TRUE(has_event(out, "value_refetch"));
  EXPECT_EQ(pulled(out), (std::vector<int32_t>{0}));
  // The owner's value comes back (version 1 again): it replaces θ_0 and the copy.
  core->on_broadcast(broadcast_bytes(0, 1, {1.0f, 1.0f}));
  EXPECT_EQ(params.v[0], 1.0f);
  EXPECT_EQ(params.v[1], 1.0f);
  for (int i = 0; i < 2; ++i) {
    const auto hb = held(step());
    EXPECT_EQ(hb.held_digest, hb.held_owner_digest) << "fragment " << hb.held_fragment;
  }
  // Nothing held yet: nothing to alter, and a heartbeat reports no check.
  make(base_options());
  EXPECT_EQ(core->corrupt_held_value(), -1);
}

}  // namespace
}  // namespace dd::actors
