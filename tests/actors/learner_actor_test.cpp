// tests/actors/learner_actor_test.cpp — one learner actor with the real health monitor and one
// real fragment owner on CAF's test coordinator (logical time): a broadcast that does not decode,
// names no fragment of the plan, or carries a payload of the wrong size is logged as an
// `undecodable_broadcast` failure and leaves the model untouched; an undecodable rejection is
// logged as `undecodable_reject`; the learner keeps stepping and its next push is accepted.
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "actors/fragment_owner.hpp"
#include "actors/health_monitor.hpp"
#include "actors/learner.hpp"
#include "actors/run_log.hpp"
#include "kernels/backend.hpp"
#include "runtime/gpt.hpp"
#include "tests/actors/test_support.hpp"

namespace dd::actors {
namespace {

/// A text of `n` characters from a small alphabet (deterministic).
std::string synthetic_text(size_t n) {
  std::string s;
  s.reserve(n);
  const std::string words[] = {"the ", "king ", "and ", "queen ", "of ", "verona ", "speak\n"};
  for (size_t i = 0; s.size() < n; ++i) s += words[(i * 7 + i / 3) % 7];
  s.resize(n);
  return s;
}

struct learner_actor_test : ::testing::Test {
  dd::test::coordinator env;
  run_log log{"", /*keep_in_memory=*/true};
  text_dataset data = text_dataset::from_text(synthetic_text(20000), 0.9, "synthetic.txt");
  gpt_config model_cfg;
  fragment_plan plan;
  std::vector<float> initial;
  caf::actor monitor, owner, learner_handle;

  void SetUp() override {
    model_cfg.vocab = 256;
    model_cfg.context = 16;
    model_cfg.layers = 1;
    model_cfg.heads = 2;
    model_cfg.width = 16;
    auto p = make_fragment_plan(gpt_tensors(model_cfg), 1, fragment_strategy::balanced);
    ASSERT_TRUE(p.ok()) << p.error().message;
    plan = std::move(*p);
    auto be = kernels::make_backend("cpu", {});
    gpt model(*be, model_cfg);
    model.init(5);
    initial = model.get_parameters();

    auto mctx = std::make_shared<monitor_context>();
    mctx->learners = 1;
    mctx->fragments = 1;
    mctx->log = &log;
    monitor = env.sys->spawn(health_monitor, std::shared_ptr<const monitor_context>(mctx));

    auto octx = std::make_shared<owner_context>();
    octx->options.layout = plan.fragments.at(0);
    octx->options.quorum = policy::quorum_spec::of_count(1);
    octx->options.grace.mode = policy::grace_mode::off;
    octx->options.checkpoint_every = 0;
    octx->initial.resize(plan.fragments.at(0).numel);
    gather_fragment(plan.fragments.at(0), initial.data(), octx->initial.data());
    octx->backend = "reference";
    octx->monitor = monitor;
    octx->log = &log;
    owner = env.sys->spawn(fragment_owner, std::shared_ptr<const owner_context>(octx));

    auto lctx = std::make_shared<learner_context>();
    lctx->learner_id = 0;
    auto& t = lctx->trainer;
    t.model = model_cfg;
    t.batch = 2;
    t.seq_len = 16;
    t.schedule.lr = 1e-3;
    t.schedule.warmup = 1;
    t.schedule.total = 100;
    t.seed = 5;
    lctx->data = &data;
    lctx->plan = plan;
    lctx->sync_interval = 4;
    lctx->overlap = 1;
    lctx->monitor = monitor;
    lctx->log = &log;
    lctx->simulated_time = true;
    lctx->sim_step_s = 0.1;
    lctx->max_steps = 40;
    learner_handle = env.sys->spawn(learner, std::shared_ptr<const learner_context>(lctx));
    env.run();
  }

  void TearDown() override { env.shutdown({learner_handle, owner, monitor}); }

  learner_actor& actor() {
    auto* ptr = caf::actor_cast<caf::abstract_actor*>(learner_handle);
    return *dynamic_cast<learner_actor*>(ptr);
  }

  size_t failures(const std::string& what) const {
    size_t n = 0;
    for (const auto& ev : log.events())
      if (ev["event"] == "failure" && ev.value("what", "") == what) ++n;
    return n;
  }

  size_t accepted_pushes() const {
    size_t n = 0;
    for (const auto& ev : log.events())
      if (ev["event"] == "push" && ev.value("accepted", false)) ++n;
    return n;
  }

  std::vector<float> model_values() { return actor().state.tr->model().get_parameters(); }
};

TEST_F(learner_actor_test, bad_broadcasts_and_rejects_are_logged_and_change_nothing) {
  // Let the learner join, sync and take a few steps (a push every 4 steps).
  for (int i = 0; i < 10; ++i) env.advance(0.1);
  ASSERT_EQ(actor().state.now, learner_state::phase::stepping);
  ASSERT_GE(actor().state.tr->steps_done(), 5);
  const auto before = model_values();
  const uint64_t version_before = actor().state.frags.at(0).base_version;

  // 1. Bytes that are no Envelope at all.
  caf::anon_send(learner_handle, atoms::broadcast_atom_v, std::vector<uint8_t>{1, 2, 3, 4});
  // 2. A well-formed broadcast of fragment 7 (the plan has one fragment).
  const size_t n = plan.fragments.at(0).numel;
  broadcast_msg b;
  b.fragment_id = 7;
  b.version = version_before + 1;
  b.encoding = payload_encoding::fp32;
  b.total_elements = n;
  b.payload = encode_payload(payload_encoding::fp32, before.data(), n);
  b.payload_bytes = b.payload.size();
  caf::anon_send(learner_handle, atoms::broadcast_atom_v, encode(b));
  // 3. Fragment 0 with a payload of the wrong size (one element short).
  b.fragment_id = 0;
  b.total_elements = n - 1;
  b.payload = encode_payload(payload_encoding::fp32, before.data(), n - 1);
  b.payload_bytes = b.payload.size();
  caf::anon_send(learner_handle, atoms::broadcast_atom_v, encode(b));
  // 4. A rejection that does not decode.
  caf::anon_send(learner_handle, atoms::reject_atom_v, std::vector<uint8_t>{9, 9, 9});
  env.run();  // handled now, before the next step (no time passes)

  EXPECT_EQ(failures("undecodable_broadcast"), 3u);
  EXPECT_EQ(failures("undecodable_reject"), 1u);
  EXPECT_EQ(model_values(), before);  // nothing applied
  EXPECT_EQ(actor().state.frags.at(0).base_version, version_before);

  // The learner goes on: more steps, and its later pushes are merged.
  const size_t accepted = accepted_pushes();
  for (int i = 0; i < 12; ++i) env.advance(0.1);
  EXPECT_GE(actor().state.tr->steps_done(), 15);
  EXPECT_GT(accepted_pushes(), accepted);
}

}  // namespace
}  // namespace dd::actors
