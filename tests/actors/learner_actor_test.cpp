// tests/actors/learner_actor_test.cpp — one learner actor with the real health monitor and one
// real fragment owner on CAF's test coordinator (logical time): a broadcast that does not decode,
// names no fragment of the plan, or carries a payload of the wrong size is logged as an
// `undecodable_broadcast` failure and leaves the model untouched; an undecodable rejection is
// logged as `undecodable_reject`; the learner keeps stepping and its next push is accepted.
// On the global push clock, progress replies held up and then delivered in a burst (a busy
// syncer) leave the push cadence intact. Every role is configured
// from one experiment through actors/nodes/role_contexts.hpp, as in the job.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "actors/nodes/role_contexts.hpp"
#include "actors/roles/fragment_owner.hpp"
#include "actors/roles/health_monitor.hpp"
#include "actors/roles/learner.hpp"
#include "actors/services/run_log.hpp"
#include "kernels/backend.hpp"
#include "runtime/gpt.hpp"
#include "runtime/moe_gpt.hpp"
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
  model_config model_cfg;
  fragment_plan plan;
  std::vector<float> initial;
  monitor_hdl monitor;
  caf::actor owner, learner_handle;

  /// The experiment every role is configured from, through actors/nodes/role_contexts.hpp as the
  /// job and the learner node configure theirs: one learner, one fragment, H = 4, τ = 1, K = 1, no
  /// grace window, 40 inner steps.
  config::experiment exp;

  void SetUp() override {
    exp.seed = 5;
    exp.model.vocab = 256;
    exp.model.context = 16;
    exp.model.layers = 1;
    exp.model.heads = 2;
    exp.model.width = 16;
    configure_experiment(exp);
    exp.learners.count = 1;
    exp.learners.batch = 2;
    exp.learners.threads = 1;
    exp.inner.lr = 1e-3;
    exp.inner.warmup = 1;
    exp.inner.decay_steps = 100;
    exp.sync.fragments = 1;
    exp.sync.interval = 4;
    exp.sync.overlap = 1;
    exp.sync.grace.mode = config::grace_mode::off;
    exp.budget.kind = config::budget_kind::steps;
    exp.budget.steps = 40;
    exp.checkpoint.every_versions = 0;
    model_cfg = model_of(exp);
    auto p = make_fragment_plan(model_tensors(model_cfg), 1, fragment_strategy::balanced);
    ASSERT_TRUE(p.ok()) << p.error().message;
    plan = std::move(*p);
    auto be = kernels::make_backend("cpu", {});
    auto model = make_model(*be, model_cfg);
    model->init(5);
    initial = model->get_parameters();

    auto mctx = std::make_shared<monitor_config>(monitor_config_of(exp, 1));
    monitor_services msvc;
    msvc.log = &log;
    monitor = env.sys->spawn(health_monitor, std::shared_ptr<const monitor_config>(mctx), msvc);

    auto octx = std::make_shared<owner_config>();
    octx->options = owner_options_of(exp, plan.fragments.at(0), "", 0);
    octx->initial.resize(plan.fragments.at(0).numel);
    gather_fragment(plan.fragments.at(0), initial.data(), octx->initial.data());
    octx->backend = "reference";
    octx->monitor = monitor;
    owner_services osvc;
    osvc.log = &log;
    owner = caf::actor_cast<caf::actor>(
        env.sys->spawn(fragment_owner, std::shared_ptr<const owner_config>(octx), osvc));

    node_services node;
    node.log = &log;
    auto lctx = std::make_shared<learner_config>(
        learner_config_of(exp, 0, static_cast<uint64_t>(exp.budget.steps), plan, 1,
                          learner_monitor(), &data, nullptr, /*simulated_time=*/true, 0.1));
    adjust(*lctx);
    learner_handle = caf::actor_cast<caf::actor>(env.sys->spawn(
        learner, std::shared_ptr<const learner_config>(lctx), learner_services_of(node)));
    env.run();
  }

  void TearDown() override { env.shutdown_all(learner_handle, owner, monitor); }

  /// The actor the learner takes for its health monitor (the monitor itself by default).
  virtual monitor_hdl learner_monitor() { return monitor; }
  /// Changes to the learner's configuration before it is spawned.
  virtual void adjust(learner_config&) {}
  /// Changes to the experiment's model (a dense GPT by default) before anything is built.
  virtual void configure_experiment(config::experiment&) {}

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
  ASSERT_EQ(actor().state.core->phase(), learner_state::phase::stepping);
  ASSERT_GE(actor().state.tr->steps_done(), 5);
  const auto before = model_values();
  const uint64_t version_before = actor().state.core->fragment(0).base_version;

  // 1. Bytes that are no Envelope at all.
  caf::anon_send(learner_handle, atoms::broadcast_atom_v, std::vector<uint8_t>{1, 2, 3, 4},
                 uint64_t{0});
  // 2. A well-formed broadcast of fragment 7 (the plan has one fragment).
  const size_t n = plan.fragments.at(0).numel;
  broadcast_msg b;
  b.fragment_id = 7;
  b.version = version_before + 1;
  b.encoding = payload_encoding::fp32;
  b.total_elements = n;
  b.payload = encode_payload(payload_encoding::fp32, before.data(), n);
  b.payload_bytes = b.payload.size();
  caf::anon_send(learner_handle, atoms::broadcast_atom_v, encode(b), uint64_t{0});
  // 3. Fragment 0 with a payload of the wrong size (one element short).
  b.fragment_id = 0;
  b.total_elements = n - 1;
  b.payload = encode_payload(payload_encoding::fp32, before.data(), n - 1);
  b.payload_bytes = b.payload.size();
  caf::anon_send(learner_handle, atoms::broadcast_atom_v, encode(b), uint64_t{0});
  // 4. A rejection that does not decode.
  caf::anon_send(learner_handle, atoms::reject_atom_v, std::vector<uint8_t>{9, 9, 9});
  env.run();  // handled now, before the next step (no time passes)

  EXPECT_EQ(failures("undecodable_broadcast"), 3u);
  EXPECT_EQ(failures("undecodable_reject"), 1u);
  EXPECT_EQ(model_values(), before);  // nothing applied
  EXPECT_EQ(actor().state.core->fragment(0).base_version, version_before);

  // The learner goes on: more steps, and its later pushes are merged.
  const size_t accepted = accepted_pushes();
  for (int i = 0; i < 12; ++i) env.advance(0.1);
  EXPECT_GE(actor().state.tr->steps_done(), 15);
  EXPECT_GT(accepted_pushes(), accepted);
}

// An owner directory damaged on the way
// was dropped, and a learner that had lost its owners (here: cleared by hand, as by a rejoin)
// never learned them again, so it never pushed again. It now asks the monitor for the current
// directory.
TEST_F(learner_actor_test, a_damaged_owner_directory_is_asked_for_again) {
  for (int i = 0; i < 10; ++i) env.advance(0.1);
  ASSERT_EQ(actor().state.core->phase(), learner_state::phase::stepping);
  ASSERT_EQ(actor().state.owners.size(), 1u);
  ASSERT_TRUE(actor().state.owners[0]);
  actor().state.owners[0] = owner_hdl{};
  caf::anon_send(learner_handle, atoms::owners_atom_v, std::vector<uint8_t>{7, 7, 7},
                 std::vector<owner_hdl>{});
  env.run();
  EXPECT_EQ(failures("undecodable_owner_directory"), 1u);
  ASSERT_TRUE(actor().state.owners[0]) << "the directory was not asked for again";
  EXPECT_EQ(actor().state.owners[0].address(), owner.address());
  const size_t accepted = accepted_pushes();
  for (int i = 0; i < 12; ++i) env.advance(0.1);
  EXPECT_GT(accepted_pushes(), accepted);
}

/// A stand-in for the path between the learner and its health monitor that can hold the
/// monitor's progress replies (a syncer too busy to answer for a while): heartbeats reach the
/// monitor at once; its replies come back to the relay, which passes them on or keeps them.
struct progress_relay_state {
  monitor_hdl monitor;
  learner_at_syncer_hdl learner;
  bool hold = false;
  std::vector<std::vector<uint8_t>> held;
  static inline const char* name = "progress_relay";
};
using progress_relay = caf::stateful_actor<progress_relay_state>;

caf::behavior progress_relay_fn(progress_relay* self, monitor_hdl monitor) {
  self->state.monitor = monitor;
  return {
      [=](atoms::join_atom a, const std::vector<uint8_t>& bytes,
          const learner_at_syncer_hdl& learner) {
        self->state.learner = learner;
        return self->delegate(self->state.monitor, a, bytes, learner);
      },
      [=](atoms::heartbeat_atom a, const std::vector<uint8_t>& bytes) {
        self->send(self->state.monitor, a, bytes);  // the reply comes back here
      },
      [=](atoms::leave_atom a, const std::vector<uint8_t>& bytes) {
        self->send(self->state.monitor, a, bytes);
      },
      [=](atoms::progress_atom a, const std::vector<uint8_t>& bytes) {
        auto& st = self->state;
        if (st.hold)
          st.held.push_back(bytes);
        else
          self->send(st.learner, a, bytes);
      },
  };
}

struct learner_push_clock_test : learner_actor_test {
  caf::actor relay;
  monitor_hdl learner_monitor() override {
    relay = env.sys->spawn(progress_relay_fn, monitor);
    return caf::actor_cast<monitor_hdl>(relay);  // it answers what the learner sends a monitor
  }
  void adjust(learner_config& c) override {
    c.push_clock = clock_source::global;  // one learner: the mean step is its own step
    // Past the last step the test waits for (120): a learner that has finished leaves and its
    // state is gone, so the test must not read it then (it read a destroyed trainer before).
    c.max_steps = 124;
  }
  void TearDown() override {
    env.shutdown({relay});
    learner_actor_test::TearDown();
  }
  progress_relay_state& relay_state() {
    return dynamic_cast<progress_relay&>(*caf::actor_cast<caf::abstract_actor*>(relay)).state;
  }
  /// Steps done so far; 0 before the learner has built its trainer (it does so on its join).
  int64_t steps() {
    const auto& tr = actor().state.tr;
    return tr ? tr->steps_done() : 0;
  }
  /// Advances the manual clock 1 ms at a time until the learner has done `n` steps.
  void run_until_step(int64_t n) {
    for (int guard = 0; steps() < n && guard < 200000; ++guard) env.advance(0.001);
    ASSERT_GE(steps(), n);
  }
  /// The steps at which the learner pushed (the owner's push events, transfer id = step).
  std::vector<uint64_t> push_steps() const {
    std::vector<uint64_t> out;
    for (const auto& ev : log.events())
      if (ev["event"] == "push" && ev["learner"] == 0) out.push_back(ev["transfer_id"]);
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }
};

TEST_F(learner_push_clock_test, progress_replies_delivered_in_a_burst_keep_the_push_cadence) {
  // H = 4, one fragment, one learner stepping every 0.1 s: a push every 4 steps. The monitor's
  // replies are held from step 10 to step 45 (a syncer busy for 3.5 s) and then arrive 1 ms
  // apart. Dated by their arrival, the burst would give the clock a rate of ~1000 steps/s, the
  // estimate would run ~130 steps ahead, and the learner would latch it and push nothing more
  // until the end of the run (in the cluster every learner would stop pushing at once, for
  // 6-10 s).
  constexpr uint64_t H = 4;
  run_until_step(10);
  relay_state().hold = true;
  run_until_step(45);
  auto& rs = relay_state();
  rs.hold = false;
  ASSERT_GE(rs.held.size(), 30u);
  const std::vector<std::vector<uint8_t>> burst = std::move(rs.held);
  rs.held.clear();
  for (const auto& reply : burst) {
    caf::anon_send(learner_handle, atoms::progress_atom_v, reply);
    env.advance(0.001);
  }
  const auto at_release = static_cast<uint64_t>(steps());
  run_until_step(120);
  const auto pushed = push_steps();
  ASSERT_FALSE(pushed.empty());
  // Before the hold: every 4 steps.
  EXPECT_GE(std::count_if(pushed.begin(), pushed.end(), [](uint64_t s) { return s <= 10; }), 2);
  // After it: the first push within a turn of the release, then one per turn to the end.
  std::vector<uint64_t> after;
  for (auto s : pushed)
    if (s > at_release) after.push_back(s);
  ASSERT_FALSE(after.empty()) << "no push after the burst (released at step " << at_release << ")";
  EXPECT_LE(after.front(), at_release + H);
  uint64_t max_gap = 0;
  for (size_t i = 1; i < after.size(); ++i) max_gap = std::max(max_gap, after[i] - after[i - 1]);
  max_gap = std::max<uint64_t>(max_gap, 120 - after.back());  // to the end of the run
  EXPECT_LE(max_gap, H) << "pushes after the burst at steps " << ::testing::PrintToString(after);
  EXPECT_GE(after.size(), (120 - at_release) / H - 1);
}

}  // namespace
}  // namespace dd::actors

namespace dd::actors {
namespace {

// model.kind = "moe_gpt": the learner trains through the model interface and emits the router's
// per-expert load once per sync interval (H = 4 over 40 steps: steps 4, 8, ..., 40).
struct moe_learner_test : learner_actor_test {
  void configure_experiment(config::experiment& e) override {
    e.model.kind = config::model_kind::moe_gpt;
    e.model.experts = 3;
    e.model.top_k = 2;
    e.model.capacity_factor = 1.0;
  }
};

TEST_F(moe_learner_test, learner_emits_expert_load_every_sync_interval) {
  for (int i = 0; i < 10; ++i) env.advance(0.1);
  ASSERT_EQ(actor().state.core->phase(), learner_state::phase::stepping);
  EXPECT_EQ(actor().state.tr->model().config().kind, "moe_gpt");
  // 40 steps of 0.1 s of simulated time, plus the syncs: run until the learner is done.
  auto done = [&] {
    for (const auto& ev : log.events())
      if (ev["event"] == "learner_done") return true;
    return false;
  };
  for (int i = 0; i < 400 && !done(); ++i) env.advance(0.1);
  ASSERT_TRUE(done());
  std::vector<nlohmann::json> loads;
  for (const auto& ev : log.events())
    if (ev["event"] == "expert_load") loads.push_back(ev);
  ASSERT_EQ(loads.size(), 10u);
  for (size_t i = 0; i < loads.size(); ++i) {
    const auto& ev = loads[i];
    EXPECT_EQ(ev["learner"], 0);
    EXPECT_EQ(ev["step"], 4 * (i + 1));
    EXPECT_EQ(ev["k"], 2);
    EXPECT_EQ(ev["tokens"], 4 * 2 * 16);   // 4 steps of B·T = 2·16 tokens since the last event
    ASSERT_EQ(ev["share"].size(), 1u);     // one block
    ASSERT_EQ(ev["share"][0].size(), 3u);  // three experts
    double sum = 0;
    for (const auto& x : ev["share"][0]) sum += x.get<double>();
    EXPECT_NEAR(sum, 1.0, 1e-12);
    EXPECT_NEAR(ev["mean_share"].get<double>(), 1.0 / 3.0, 1e-12);
    EXPECT_GE(ev["dropped"][0].get<int64_t>(), 0);
  }
  EXPECT_GT(accepted_pushes(), 0u);
}

}  // namespace
}  // namespace dd::actors
