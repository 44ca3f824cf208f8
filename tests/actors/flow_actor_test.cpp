// tests/actors/flow_actor_test.cpp — credit-based flow control between real actors
// (actors/link/chunk_flow.hpp) on CAF's test coordinator:
//   - a fragment owner answering pulls never has more than W broadcast chunks uncredited on a
//     link, whatever the receiver does: a silent receiver gets exactly W chunks, each credit
//     releases exactly one more, a duplicate or unknown credit releases nothing, and another
//     receiver on its own link is served in full meanwhile;
//   - a receiver that goes down frees its link at the owner (queue and in-flight numbers);
//   - the owner credits every push chunk it takes out of its mailbox, once, and merges the push;
//   - a real learner pushing multi-chunk fragments to a real owner (and receiving multi-chunk
//     broadcasts) keeps at most W chunks in flight on each link at every message, both ways.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "actors/link/chunk_flow.hpp"
#include "actors/roles/fragment_owner.hpp"
#include "actors/roles/health_monitor.hpp"
#include "actors/roles/learner.hpp"
#include "actors/services/run_log.hpp"
#include "kernels/backend.hpp"
#include "messages/control.hpp"
#include "runtime/gpt.hpp"
#include "tests/actors/test_support.hpp"

namespace dd::actors {
namespace {

/// What a stub chunk receiver saw.
struct stub_log {
  std::vector<uint64_t> seqs;          ///< sequence numbers received, in order
  std::vector<broadcast_msg> chunks;   ///< the decoded broadcast chunks, in order
  std::vector<uint64_t> credits_seen;  ///< credits received (as a push sender)
  std::vector<push_ack> acks;
  bool auto_credit = false;  ///< credit every chunk at once (else only when the test says)
};

/// A stand-in learner: receives broadcast chunks under credit and records them; forwards pulls
/// and pushes the test hands it, so the owner answers it.
caf::behavior stub(caf::event_based_actor* self, std::shared_ptr<stub_log> log) {
  return {
      [=](atoms::broadcast_atom, const std::vector<uint8_t>& bytes, uint64_t seq) {
        log->seqs.push_back(seq);
        auto b = decode_broadcast(bytes);
        if (b) log->chunks.push_back(*b);
        if (log->auto_credit) grant_credit(self, seq);
      },
      [=](caf::forward_atom, const caf::actor& owner, atoms::pull_atom,
          const std::vector<uint8_t>& bytes) { self->send(owner, atoms::pull_atom_v, bytes); },
      [=](caf::forward_atom, const caf::actor& owner, const std::vector<uint8_t>& bytes,
          uint64_t seq) { self->send(owner, atoms::push_atom_v, bytes, seq); },
      [=](atoms::credit_atom, uint64_t seq) { log->credits_seen.push_back(seq); },
      [=](atoms::ack_atom, const std::vector<uint8_t>& bytes) {
        if (auto a = decode_push_ack(bytes)) log->acks.push_back(*a);
      },
  };
}

/// One tensor of `n` floats in one fragment.
fragment_layout layout_of(size_t n) {
  std::vector<tensor_info> t(1);
  t[0].name = "h.0.w";
  t[0].offset = 0;
  t[0].numel = n;
  t[0].shape = {static_cast<int64_t>(n)};
  t[0].layer = 0;
  auto plan = make_fragment_plan(t, 1, fragment_strategy::balanced);
  return plan->fragments.at(0);
}

/// Reassembles chunks (any order) and returns the floats, or an empty vector.
std::vector<float> assemble(const std::vector<broadcast_msg>& chunks) {
  chunk_assembler a;
  for (const auto& c : chunks) {
    auto r = a.add(c);
    if (!r) return {};
    if (r->has_value()) {
      const auto& b = **r;
      auto v = decode_payload(b.encoding, b.payload.data(), b.payload.size(), b.total_elements);
      return v ? *v : std::vector<float>{};
    }
  }
  return {};
}

struct flow_actor_test : ::testing::Test {
  static constexpr size_t numel = 64;        // 256 payload bytes
  static constexpr size_t chunk_bytes = 32;  // 8 chunks per transfer
  static constexpr size_t chunks = 8;
  static constexpr int window = 3;
  dd::test::coordinator env;
  std::shared_ptr<stub_log> a_log = std::make_shared<stub_log>();
  std::shared_ptr<stub_log> b_log = std::make_shared<stub_log>();
  std::vector<float> initial;
  caf::actor a, b, owner;

  void SetUp() override {
    a = env.sys->spawn(stub, a_log);
    b = env.sys->spawn(stub, b_log);
    b_log->auto_credit = true;
    auto c = std::make_shared<owner_config>();
    c->options.layout = layout_of(numel);
    c->options.quorum = policy::quorum_spec::of_count(1);
    c->options.grace.mode = policy::grace_mode::off;
    c->options.merge.rule = merge_rule::weighted_average;
    c->options.merge.outer_lr = 1.0f;
    c->options.merge.outer_momentum = 0.0f;
    c->options.chunk_bytes = chunk_bytes;
    c->options.checkpoint_every = 0;
    for (size_t i = 0; i < numel; ++i) initial.push_back(0.5f + static_cast<float>(i));
    c->initial = initial;
    c->backend = "reference";
    c->window_chunks = window;
    owner = caf::actor_cast<caf::actor>(
        env.sys->spawn(fragment_owner, std::shared_ptr<const owner_config>(c), owner_services{}));
    env.run();
  }
  void TearDown() override { env.shutdown({a, b, owner}); }

  owner_actor& owner_state() {
    return *dynamic_cast<owner_actor*>(caf::actor_cast<caf::abstract_actor*>(owner));
  }
  void pull(const caf::actor& who) {
    caf::anon_send(who, caf::forward_atom_v, owner, atoms::pull_atom_v,
                   encode(pull_request{0, 0, 0}));
    env.run();
  }
};

TEST_F(flow_actor_test, a_silent_receiver_gets_exactly_the_window_and_one_chunk_per_credit) {
  pull(a);
  ASSERT_EQ(a_log->seqs.size(), static_cast<size_t>(window));
  EXPECT_EQ(owner_state().state.flow.win.in_flight(flow_key(a)), static_cast<size_t>(window));
  EXPECT_EQ(owner_state().state.flow.win.queued(flow_key(a)), chunks - window);
  // Another link is not held up by the silent one.
  pull(b);
  ASSERT_EQ(b_log->chunks.size(), chunks);
  EXPECT_EQ(assemble(b_log->chunks), initial);
  EXPECT_EQ(a_log->seqs.size(), static_cast<size_t>(window));
  // The same credit twice: exactly one chunk more. A number never sent: nothing.
  const uint64_t first = a_log->seqs[0];
  caf::anon_send(owner, atoms::credit_atom_v, first);
  caf::anon_send(owner, atoms::credit_atom_v, first);
  caf::anon_send(owner, atoms::credit_atom_v, uint64_t{999999});
  env.run();
  ASSERT_EQ(a_log->seqs.size(), static_cast<size_t>(window) + 1);
  // Credit the rest one at a time: never more than W uncredited.
  size_t credited = 1;
  while (credited < a_log->seqs.size()) {
    caf::anon_send(owner, atoms::credit_atom_v, a_log->seqs[credited]);
    credited += 1;
    env.run();
    ASSERT_LE(a_log->seqs.size() - credited, static_cast<size_t>(window));
  }
  ASSERT_EQ(a_log->chunks.size(), chunks);
  for (size_t i = 0; i < chunks; ++i) EXPECT_EQ(a_log->chunks[i].chunk_index, i);  // in order
  EXPECT_EQ(assemble(a_log->chunks), initial);
  // All credited: no link state left at the owner.
  EXPECT_EQ(owner_state().state.flow.win.links(), 0u);
  EXPECT_EQ(owner_state().state.flow.chunks_sent, 2 * chunks);
}

TEST_F(flow_actor_test, a_receiver_that_goes_down_frees_its_link) {
  pull(a);
  pull(a);  // two answers queued: 2 × 8 chunks, W in flight
  ASSERT_EQ(a_log->seqs.size(), static_cast<size_t>(window));
  EXPECT_EQ(owner_state().state.flow.win.queued(flow_key(a)), 2 * chunks - window);
  const auto seqs = a_log->seqs;
  caf::anon_send_exit(a, caf::exit_reason::kill);
  env.run();
  EXPECT_EQ(owner_state().state.flow.win.links(), 0u);
  EXPECT_EQ(owner_state().state.flow.win.in_flight_total(), 0u);
  EXPECT_TRUE(owner_state().state.flow.watched.empty());
  // Its late credits change nothing; the other link works.
  for (uint64_t s : seqs) caf::anon_send(owner, atoms::credit_atom_v, s);
  env.run();
  pull(b);
  EXPECT_EQ(b_log->chunks.size(), chunks);
  EXPECT_EQ(assemble(b_log->chunks), initial);
}

TEST_F(flow_actor_test, the_owner_credits_each_push_chunk_once_and_merges_it) {
  // Learner 0's push of Δ in 8 chunks, each under its own number.
  std::vector<float> delta(numel, 0.25f);
  auto m = dd::test::make_push(0, 0, 0, 4, 64, 1, delta);
  live_view_msg v{1, {{0, 0, 1.0}}};
  caf::anon_send(owner, atoms::live_atom_v, encode(v),
                 std::vector<learner_at_owner_hdl>{caf::actor_cast<learner_at_owner_hdl>(a)});
  env.run();
  auto parts = split_push(m, chunk_bytes);
  ASSERT_TRUE(parts.ok());
  ASSERT_EQ(parts->size(), chunks);
  a_log->auto_credit = true;  // take the broadcast that follows the merge
  for (size_t i = 0; i < parts->size(); ++i)
    caf::anon_send(a, caf::forward_atom_v, owner, encode((*parts)[i]), uint64_t{100 + i});
  env.run();
  std::vector<uint64_t> want;
  for (size_t i = 0; i < chunks; ++i) want.push_back(100 + i);
  EXPECT_EQ(a_log->credits_seen, want);
  ASSERT_EQ(a_log->acks.size(), 1u);
  EXPECT_EQ(a_log->acks[0].transfer_id, 1u);
  // Quorum 1, no grace: merged at once (outer lr 1, no momentum: θ ← θ − Δ) and broadcast.
  ASSERT_EQ(a_log->chunks.size(), chunks);
  auto got = assemble(a_log->chunks);
  ASSERT_EQ(got.size(), numel);
  for (size_t i = 0; i < numel; ++i) EXPECT_FLOAT_EQ(got[i], initial[i] - 0.25f) << i;
  EXPECT_EQ(a_log->chunks[0].version, 1u);
}

/// A text of `n` characters from a small alphabet (deterministic).
std::string synthetic_text(size_t n) {
  std::string s;
  const std::string words[] = {"the ", "king ", "and ", "queen ", "of ", "verona ", "speak\n"};
  for (size_t i = 0; s.size() < n; ++i) s += words[(i * 7 + i / 3) % 7];
  s.resize(n);
  return s;
}

// A real learner and a real owner, with 4 KiB chunks (a push and a broadcast are about 10
// chunks each) and W = 2 on both sides; the coordinator runs one message at a time and the
// window is checked after each.
TEST(flow_cluster_test, a_learner_and_an_owner_keep_at_most_w_chunks_in_flight_both_ways) {
  constexpr int W = 2;
  dd::test::coordinator env;
  run_log log{"", /*keep_in_memory=*/true};
  auto data = text_dataset::from_text(synthetic_text(20000), 0.9, "synthetic.txt");
  gpt_config mc;
  mc.vocab = 256;
  mc.context = 16;
  mc.layers = 1;
  mc.heads = 2;
  mc.width = 16;
  auto plan = make_fragment_plan(gpt_tensors(mc), 1, fragment_strategy::balanced);
  ASSERT_TRUE(plan.ok());
  auto be = kernels::make_backend("cpu", {});
  gpt model(*be, mc);
  model.init(5);
  const auto params = model.get_parameters();
  const size_t chunk = 4096;
  const size_t n_chunks = (plan->fragments.at(0).numel * 4 + chunk - 1) / chunk;
  ASSERT_GE(n_chunks, 5u);  // several windows per transfer

  auto mctx = std::make_shared<monitor_config>();
  mctx->learners = 1;
  mctx->fragments = 1;
  monitor_services msvc;
  msvc.log = &log;
  auto monitor = env.sys->spawn(health_monitor, std::shared_ptr<const monitor_config>(mctx), msvc);
  auto octx = std::make_shared<owner_config>();
  octx->options.layout = plan->fragments.at(0);
  octx->options.quorum = policy::quorum_spec::of_count(1);
  octx->options.grace.mode = policy::grace_mode::off;
  octx->options.checkpoint_every = 0;
  octx->options.chunk_bytes = chunk;
  octx->initial.resize(plan->fragments.at(0).numel);
  gather_fragment(plan->fragments.at(0), params.data(), octx->initial.data());
  octx->backend = "reference";
  octx->monitor = monitor;
  owner_services osvc;
  osvc.log = &log;
  octx->window_chunks = W;
  auto owner = caf::actor_cast<caf::actor>(
      env.sys->spawn(fragment_owner, std::shared_ptr<const owner_config>(octx), osvc));
  auto lctx = std::make_shared<learner_config>();
  lctx->learner_id = 0;
  auto& t = lctx->trainer;
  t.model = mc;
  t.batch = 2;
  t.seq_len = 16;
  t.schedule.lr = 1e-3;
  t.schedule.warmup = 1;
  t.schedule.total = 100;
  t.seed = 5;
  lctx->data = &data;
  lctx->plan = *plan;
  lctx->sync_interval = 4;
  lctx->monitor = monitor;
  learner_services lsvc;
  lsvc.log = &log;
  lctx->timer = step_timer::simulated(0.1);
  lctx->max_steps = 30;
  lctx->chunk_bytes = chunk;
  lctx->window_chunks = W;
  auto learner_h = env.sys->spawn(learner, std::shared_ptr<const learner_config>(lctx), lsvc);
  auto& la = *dynamic_cast<learner_actor*>(caf::actor_cast<caf::abstract_actor*>(learner_h));
  auto& oa = *dynamic_cast<owner_actor*>(caf::actor_cast<caf::abstract_actor*>(owner));

  size_t max_learner = 0, max_owner = 0, messages = 0;
  // The learner's steps, read while it has its trainer (a finished learner releases it).
  uint64_t steps = 0;
  for (int tick = 0; tick < 40; ++tick) {
    while (env.sched->try_run_once()) {
      messages += 1;
      if (la.state.tr) steps = la.state.tr->steps_done();
      max_learner = std::max(max_learner, la.state.flow.win.in_flight(flow_key(owner)));
      max_owner = std::max(max_owner, oa.state.flow.win.in_flight(flow_key(learner_h)));
      ASSERT_LE(la.state.flow.win.in_flight_total(), static_cast<size_t>(W));
      ASSERT_LE(oa.state.flow.win.in_flight_total(), static_cast<size_t>(W));
    }
    env.sched->advance_time(caf::timespan{100'000'000});
  }
  std::printf(
      "flow_cluster_test: %zu messages, %zu chunks per transfer, learner sent %llu chunks, "
      "owner sent %llu, steps %llu\n",
      messages, n_chunks, static_cast<unsigned long long>(la.state.flow.chunks_sent),
      static_cast<unsigned long long>(oa.state.flow.chunks_sent),
      static_cast<unsigned long long>(steps));
  // Both directions carried several full windows, and the run made progress.
  EXPECT_EQ(max_learner, static_cast<size_t>(W));
  EXPECT_EQ(max_owner, static_cast<size_t>(W));
  EXPECT_GE(la.state.flow.chunks_sent, 3 * n_chunks);  // >= 3 multi-chunk pushes
  EXPECT_GE(oa.state.flow.chunks_sent, 3 * n_chunks);  // the first value + >= 2 merges
  size_t accepted = 0;
  for (const auto& ev : log.events())
    if (ev["event"] == "push" && ev.value("accepted", false)) ++accepted;
  EXPECT_GE(accepted, 3u);
  EXPECT_GE(steps, 20u);
  EXPECT_GT(messages, 0u);
  env.shutdown_all(learner_h, owner, monitor);
}

}  // namespace
}  // namespace dd::actors
