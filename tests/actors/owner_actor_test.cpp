// tests/actors/owner_actor_test.cpp — the fragment owner and supervisor actors on CAF's test
// coordinator with a manual clock: acks, the grace timer, broadcasts to every live learner, a
// stale push answered with a rejection plus the current value, and an owner killed and respawned
// by its supervisor that restores value, momentum and version from its checkpoint; an owner
// respawned before its first checkpoint, or with an unreadable one, restarts from the initial
// value with an event and one warning line on the run log's console hook.
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>

#include "actors/link/protocol.hpp"
#include "actors/roles/fragment_owner.hpp"
#include "actors/roles/supervisor.hpp"
#include "actors/services/run_log.hpp"
#include "messages/control.hpp"
#include "runtime/quantize.hpp"
#include "tests/actors/test_support.hpp"
#include "tests/support/fresh_dir.hpp"

namespace dd::actors {
namespace {

using dd::test::make_push;
using dd::test::tiny_layout;

/// What a probe (a stand-in learner or monitor) saw.
struct probe_log {
  std::vector<uint64_t> acked;
  std::vector<push_ack> acks;  ///< the decoded acks (acked holds their transfer ids)
  int undecodable_acks = 0;
  std::vector<broadcast_msg> broadcasts;
  std::vector<reject_msg> rejects;
  std::vector<caf::actor> subscribed;  ///< owners that subscribed (as a monitor probe)
  /// As a learner: the copy of the fragment it holds (rebuild queries), none when unset.
  std::optional<std::pair<uint64_t, std::vector<float>>> copy;
  std::vector<merged_push> copy_merged;
  int queries = 0;
  int copies_sent = 0;
  int credits_granted = 0;  ///< broadcast chunks received under credit (and credited)
  int32_t id = 0;           ///< the learner id it answers as
};

/// A stand-in learner: forwards pushes to an owner as itself and records what comes back.
caf::behavior probe(caf::event_based_actor* self, std::shared_ptr<probe_log> log) {
  return {
      [=](caf::forward_atom, const caf::actor& owner, const std::vector<uint8_t>& bytes) {
        self->send(owner, atoms::push_atom_v, bytes, uint64_t{0});  // seq 0: no credit
      },
      [=](caf::forward_atom, const caf::actor& owner, atoms::pull_atom,
          const std::vector<uint8_t>& bytes) { self->send(owner, atoms::pull_atom_v, bytes); },
      [=](atoms::ack_atom, const std::vector<uint8_t>& bytes) {
        auto a = decode_push_ack(bytes);
        if (!a) {
          log->undecodable_acks += 1;
          return;
        }
        log->acked.push_back(a->transfer_id);
        log->acks.push_back(*a);
      },
      [=](atoms::broadcast_atom, const std::vector<uint8_t>& bytes) {
        auto b = decode_broadcast(bytes);
        if (b) log->broadcasts.push_back(*b);
      },
      // Under credit (actors/link/chunk_flow.hpp): take the chunk, grant the credit back.
      [=](atoms::broadcast_atom, const std::vector<uint8_t>& bytes, uint64_t seq) {
        log->credits_granted += 1;
        if (auto to = caf::actor_cast<caf::actor>(self->current_sender()))
          self->send(to, atoms::credit_atom_v, seq);
        auto b = decode_broadcast(bytes);
        if (b) log->broadcasts.push_back(*b);
      },
      [=](atoms::reject_atom, const std::vector<uint8_t>& bytes) {
        auto r = decode_reject(bytes.data(), bytes.size());
        if (r) log->rejects.push_back(*r);
      },
      [=](atoms::subscribe_atom, const std::vector<uint8_t>& bytes) {
        // A wire message of the owner's run (whatever its run id); the owner is its sender.
        const auto header = peek_envelope(bytes);
        auto sub = decode_subscribe(bytes, {}, {header ? header->run_id : std::string(), 0});
        EXPECT_TRUE(sub.ok()) << sub.error().message;
        log->subscribed.push_back(caf::actor_cast<caf::actor>(self->current_sender()));
      },
      // A learner's side of a rebuild (actors/roles/learner.cpp answers the same way).
      [=](atoms::query_atom, const std::vector<uint8_t>& bytes) {
        auto q = decode_fragment_query(bytes);
        if (!q) return;
        log->queries += 1;
        auto sender = caf::actor_cast<caf::actor>(self->current_sender());
        fragment_held h{log->id,
                        0,
                        q->fragment_id,
                        q->query_id,
                        log->copy.has_value(),
                        log->copy ? log->copy->first : 0};
        self->send(sender, atoms::held_atom_v, encode(h));
        if (!log->copy || !q->send_value) return;
        broadcast_msg b;
        b.fragment_id = q->fragment_id;
        b.version = log->copy->first;
        b.total_elements = log->copy->second.size();
        b.payload = encode_payload(payload_encoding::fp32, log->copy->second.data(),
                                   log->copy->second.size());
        b.payload_bytes = b.payload.size();
        b.merged = log->copy_merged;
        self->send(sender, atoms::copy_atom_v, encode(b), uint64_t{0});
        log->copies_sent += 1;
      },
  };
}

std::vector<float> values_of(const broadcast_msg& b) {
  auto v = decode_payload(b.encoding, b.payload.data(), b.payload.size(), b.total_elements);
  return v.ok() ? *v : std::vector<float>{};
}

struct owner_actor_test : ::testing::Test {
  dd::test::coordinator env;
  std::shared_ptr<probe_log> a_log = std::make_shared<probe_log>();
  std::shared_ptr<probe_log> b_log = std::make_shared<probe_log>();
  std::shared_ptr<probe_log> monitor_log = std::make_shared<probe_log>();
  caf::actor a, b, monitor;
  std::vector<caf::actor> to_stop;

  void SetUp() override {
    a = env.sys->spawn(probe, a_log);
    b = env.sys->spawn(probe, b_log);
    monitor = env.sys->spawn(probe, monitor_log);
    b_log->id = 1;
    to_stop = {a, b, monitor};
  }
  std::vector<std::filesystem::path> scratch;  ///< checkpoint directories, removed at the end
  void TearDown() override {
    env.shutdown(to_stop);
    for (const auto& d : scratch) std::filesystem::remove_all(d);
  }

  /// The services the test hands the next owner it spawns, as its node would (context() starts
  /// them afresh: no log, a history of its own).
  owner_services services;

  std::shared_ptr<owner_config> context() {
    services = owner_services{};
    auto c = std::make_shared<owner_config>();
    c->options.layout = tiny_layout();
    c->options.quorum = policy::quorum_spec::of_count(1);
    c->options.grace.mode = policy::grace_mode::fixed;
    c->options.grace.fixed_s = 2.0;
    c->options.merge.rule = merge_rule::weighted_average;
    c->options.merge.outer_lr = 1.0f;
    c->options.merge.outer_momentum = 0.0f;
    c->options.max_staleness = 0;
    c->initial = std::vector<float>(6, 1.0f);
    c->backend = "reference";
    c->monitor = caf::actor_cast<monitor_hdl>(monitor);  // a probe standing in for it
    return c;
  }

  /// What the owner said on the run log's console hook (stderr in dd-node run).
  std::vector<std::string> console;
  std::unique_ptr<run_log> console_log;
  /// A run log on the test clock whose console lines land in `console`.
  run_log& log_with_console() {
    console_log = std::make_unique<run_log>("", true, [this] { return env.now(); });
    console_log->set_console([this](const std::string& line) { console.push_back(line); });
    return *console_log;
  }

  /// context() with a checkpoint every `every` versions at owner_0.ddck in a fresh directory
  /// `name` (removed at TearDown).
  std::shared_ptr<owner_config> checkpointed_context(const std::string& name, uint64_t every) {
    auto c = context();
    scratch.push_back(dd::test::fresh_dir(name));
    c->options.checkpoint_every = every;
    c->options.checkpoint_path = (scratch.back() / "owner_0.ddck").string();
    return c;
  }

  /// The owner of `ctx`, spawned unsupervised (stopped at TearDown) and run until idle.
  caf::actor spawn_owner(std::shared_ptr<const owner_config> ctx) {
    auto owner =
        caf::actor_cast<caf::actor>(env.sys->spawn(fragment_owner, std::move(ctx), services));
    to_stop.push_back(owner);
    env.run();
    return owner;
  }

  /// Spawns the owner of `ctx` under a supervisor (backoff 0.5 s, events into `log`) and runs
  /// until it has subscribed to the monitor probe.
  void spawn_supervised_owner(const std::shared_ptr<owner_config>& ctx, run_log& log) {
    auto sctx = std::make_shared<supervisor_config>();
    sctx->kind = child_kind::owner;
    sctx->restart.backoff_base_s = 0.5;
    supervisor_services sup_services;
    sup_services.log = &log;
    std::shared_ptr<const owner_config> cc = ctx;
    sctx->children.push_back({0, [cc, svc = services](caf::actor_system& sys) {
                                return caf::actor_cast<caf::actor>(
                                    sys.spawn(fragment_owner, cc, svc));
                              }});
    auto sup =
        env.sys->spawn(supervisor, std::shared_ptr<const supervisor_config>(sctx), sup_services);
    to_stop.push_back(caf::actor_cast<caf::actor>(sup));
    env.run();
  }

  /// The owner of `ctx` spawned under a supervisor with `log` as its log (the first owner of the
  /// test to subscribe), told that both learners are live; in `owner`.
  void start_live_owner(const std::shared_ptr<owner_config>& ctx, run_log& log, caf::actor& owner) {
    services.log = &log;
    spawn_supervised_owner(ctx, log);
    ASSERT_EQ(monitor_log->subscribed.size(), 1u);
    owner = monitor_log->subscribed.back();
    set_live(owner);
  }

  /// Learner a's push of six `va` and learner b's of six `vb`, each one step of 10 tokens based on
  /// version `base`, transfer id `transfer`.
  void push_both(const caf::actor& owner, uint64_t base, uint64_t transfer, float va, float vb) {
    push_from(a, owner, make_push(0, 0, base, 1, 10, transfer, std::vector<float>(6, va)));
    push_from(b, owner, make_push(1, 0, base, 1, 10, transfer, std::vector<float>(6, vb)));
  }

  /// Kills the supervised `owner` and lets the supervisor's 0.5 s backoff pass: the respawned
  /// owner (the second to subscribe) in `respawned`.
  void kill_and_await_respawn(const caf::actor& owner, caf::actor& respawned) {
    caf::anon_send_exit(owner, caf::exit_reason::kill);
    env.run();
    env.advance(0.5);
    ASSERT_EQ(monitor_log->subscribed.size(), 2u);
    respawned = monitor_log->subscribed.back();
    to_stop.push_back(respawned);
  }

  void set_live(const caf::actor& owner, uint64_t incarnation_b = 0) {
    // The monitor's wire message, with one handle per learner next to it.
    live_view_msg v{1, {{0, 0, 1.0}, {1, incarnation_b, 1.0}}};
    caf::anon_send(owner, atoms::live_atom_v, encode(v),
                   std::vector<learner_at_owner_hdl>{caf::actor_cast<learner_at_owner_hdl>(a),
                                                     caf::actor_cast<learner_at_owner_hdl>(b)});
    env.run();
  }

  void push_from(const caf::actor& learner, const caf::actor& owner, const push_msg& m) {
    caf::anon_send(learner, caf::forward_atom_v, owner, encode(m, {"", m.incarnation}));
    env.run();
  }
};

TEST_F(owner_actor_test, grace_timer_then_broadcast_to_every_live_learner) {
  auto owner = spawn_owner(context());
  ASSERT_EQ(monitor_log->subscribed.size(), 1u);  // the owner announced itself
  set_live(owner);
  push_from(a, owner, make_push(0, 0, 0, 1, 10, 1, std::vector<float>(6, 0.5f)));
  ASSERT_EQ(a_log->acked, std::vector<uint64_t>{1});
  ASSERT_EQ(a_log->acks.size(), 1u);  // the ack travels as codec bytes naming the push
  EXPECT_EQ(a_log->acks[0].learner_id, 0);
  EXPECT_EQ(a_log->acks[0].incarnation, 0u);
  EXPECT_EQ(a_log->acks[0].fragment_id, 0);
  EXPECT_EQ(a_log->acks[0].version, 0u);
  EXPECT_EQ(a_log->undecodable_acks, 0);
  EXPECT_TRUE(a_log->broadcasts.empty());  // K = 1 reached, 2 s grace window running
  env.advance(1.0);
  EXPECT_TRUE(a_log->broadcasts.empty());
  env.advance(1.0);  // window over: merge and broadcast
  ASSERT_EQ(a_log->broadcasts.size(), 1u);
  ASSERT_EQ(b_log->broadcasts.size(), 1u);
  EXPECT_EQ(a_log->broadcasts[0].version, 1u);
  for (float v : values_of(b_log->broadcasts[0])) EXPECT_NEAR(v, 0.5f, 1e-6);
}

TEST_F(owner_actor_test, stale_push_gets_a_rejection_and_the_current_value) {
  auto owner = spawn_owner(context());
  set_live(owner);
  push_from(a, owner, make_push(0, 0, 0, 1, 10, 1, std::vector<float>(6, 0.25f)));
  push_from(b, owner, make_push(1, 0, 0, 1, 10, 1, std::vector<float>(6, 0.25f)));  // all pending
  ASSERT_EQ(b_log->broadcasts.size(), 1u);  // merged at once: version 1
  b_log->broadcasts.clear();
  // b pushes again against version 0 with max_staleness 0: stale.
  push_from(b, owner, make_push(1, 0, 0, 2, 20, 2, std::vector<float>(6, 0.1f)));
  ASSERT_EQ(b_log->rejects.size(), 1u);
  EXPECT_EQ(b_log->rejects[0].reason, reject_reason::stale);
  ASSERT_EQ(b_log->broadcasts.size(), 1u);  // the resync
  EXPECT_EQ(b_log->broadcasts[0].version, 1u);
  for (float v : values_of(b_log->broadcasts[0])) EXPECT_NEAR(v, 0.75f, 1e-6);
  EXPECT_TRUE(a_log->rejects.empty());
}

TEST_F(owner_actor_test, respawned_owner_restores_its_checkpoint) {
  auto ctx = checkpointed_context("dd_owner_actor_test", 1);
  ctx->options.merge.outer_momentum = 0.9f;
  ctx->options.merge.outer_lr = 0.7f;
  run_log log({}, true, [this] { return env.now(); });
  caf::actor owner;
  ASSERT_NO_FATAL_FAILURE(start_live_owner(ctx, log, owner));
  push_both(owner, 0, 1, 0.5f, 0.3f);
  ASSERT_EQ(a_log->broadcasts.size(), 1u);
  const auto before = a_log->broadcasts.back();
  ASSERT_TRUE(std::filesystem::exists(ctx->options.checkpoint_path));

  caf::anon_send_exit(owner, caf::exit_reason::kill);
  env.run();
  EXPECT_EQ(monitor_log->subscribed.size(), 1u);  // still down: backoff 0.5 s
  env.advance(0.5);
  ASSERT_EQ(monitor_log->subscribed.size(), 2u);  // respawned, subscribed again
  auto respawned = monitor_log->subscribed.back();
  EXPECT_NE(respawned, owner);
  // With a checkpoint of every version it restores at once: no learner can hold a newer one
  // (the checkpoint is written before its broadcast leaves), so it asks nobody.
  a_log->broadcasts.clear();
  caf::anon_send(a, caf::forward_atom_v, respawned, atoms::pull_atom_v,
                 encode(pull_request{0, 0, 0}));
  env.run();
  EXPECT_EQ(a_log->queries + b_log->queries, 0);
  ASSERT_EQ(a_log->broadcasts.size(), 1u);  // the pull, answered at once
  EXPECT_EQ(a_log->broadcasts[0].version, 1u);
  EXPECT_EQ(values_of(a_log->broadcasts[0]), values_of(before));
  auto events = log.events();
  bool restored = false;
  for (const auto& e : events)
    if (e["event"] == "owner_restored" && e["version"] == 1) restored = true;
  EXPECT_TRUE(restored);
  // Momentum came back too: the next merge equals the original owner's continuation.
  set_live(respawned);
  push_from(a, respawned, make_push(0, 0, 1, 1, 10, 2, std::vector<float>(6, 0.2f)));
  push_from(b, respawned, make_push(1, 0, 1, 1, 10, 2, std::vector<float>(6, 0.2f)));
  ASSERT_FALSE(a_log->broadcasts.empty());
  const auto after = a_log->broadcasts.back();
  EXPECT_EQ(after.version, 2u);
  // Reference: same two outer steps on a fresh state (Δ1 = 0.4, Δ2 = 0.2).
  auto be = kernels::make_backend("reference");
  owner_core ref(ctx->options, *be, std::vector<float>(6, 1.0f), [] { return 0.0; });
  ref.on_membership({{0, 0, 1.0}, {1, 0, 1.0}}, 0.0);
  ref.on_push(make_push(0, 0, 0, 1, 10, 1, std::vector<float>(6, 0.5f)), 0.0);
  ref.on_push(make_push(1, 0, 0, 1, 10, 1, std::vector<float>(6, 0.3f)), 0.0);
  EXPECT_EQ(values_of(before), ref.value());
  ref.on_push(make_push(0, 0, 1, 1, 10, 2, std::vector<float>(6, 0.2f)), 0.0);
  ref.on_push(make_push(1, 0, 1, 1, 10, 2, std::vector<float>(6, 0.2f)), 0.0);
  EXPECT_EQ(values_of(after), ref.value());
  to_stop.push_back(respawned);
}

// A syncer killed between an owner's checkpoint and its `merge` line dropped that
// merge from events.jsonl (versions jumped 15 -> 17 while owner_restored said 16; its
// contributors never reached `merges`). The checkpoint keeps its merge's record; a resumed owner
// whose checkpoint is newer than every version events.jsonl names (highest_version) logs that
// merge from it, once, before owner_restored — and logs nothing when the line is there.
TEST_F(owner_actor_test, a_merge_whose_line_a_kill_cut_off_is_logged_from_the_checkpoint) {
  auto dir = std::filesystem::temp_directory_path() / "dd_owner_actor_merge_record";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "owner_0.ddck").string();
  // One log per owner, alive as long as the supervisors that hold them.
  std::vector<std::unique_ptr<run_log>> logs;
  auto new_log = [&]() -> run_log& {
    logs.push_back(std::make_unique<run_log>("", true, [this] { return env.now(); }));
    return *logs.back();
  };
  // Part one: two merges; the checkpoint of version 2 holds version 2's merge record.
  {
    auto ctx = context();
    ctx->options.checkpoint_every = 1;
    ctx->options.checkpoint_path = path;
    std::filesystem::remove(path);
    run_log& log = new_log();
    caf::actor owner;
    ASSERT_NO_FATAL_FAILURE(start_live_owner(ctx, log, owner));
    for (uint64_t k = 1; k <= 2; ++k) {
      push_both(owner, k - 1, k, 0.5f, 0.3f);
    }
    auto ck = load_checkpoint(path);
    ASSERT_TRUE(ck.ok());
    EXPECT_EQ(ck->version, 2u);
    const auto rec = nlohmann::json::parse(ck->merge_record);
    EXPECT_EQ(rec["version"], 2);
    ASSERT_EQ(rec["contributors"].size(), 2u);
    EXPECT_EQ(rec["contributors"][1]["learner"], 1);
    EXPECT_EQ(rec["contributors"][1]["tokens"], 10);
    caf::anon_send_exit(owner, caf::exit_reason::kill);
    env.run();
  }
  // Resumed with events.jsonl naming version 1 only (the kill cut version 2's line off), then
  // with version 2's line there.
  for (const uint64_t logged : {uint64_t{1}, uint64_t{2}}) {
    auto ctx = context();
    ctx->options.checkpoint_every = 1;
    ctx->options.checkpoint_path = path;
    ctx->resumed = true;
    services.history = std::make_shared<owner_history>(logged);
    run_log& log = new_log();
    services.log = &log;
    monitor_log->subscribed.clear();
    spawn_supervised_owner(ctx, log);
    ASSERT_FALSE(monitor_log->subscribed.empty());
    std::vector<nlohmann::json> merges;
    int merge_at = -1, restored_at = -1, i = 0;
    for (const auto& e : log.events()) {
      if (e["event"] == "merge") {
        merges.push_back(e);
        merge_at = i;
      }
      if (e["event"] == "owner_restored") restored_at = i;
      ++i;
    }
    ASSERT_GE(restored_at, 0);
    if (logged == 1) {
      ASSERT_EQ(merges.size(), 1u);
      EXPECT_EQ(merges[0]["version"], 2);
      EXPECT_EQ(merges[0]["from_checkpoint"], true);
      EXPECT_EQ(merges[0]["contributors"].size(), 2u);
      EXPECT_EQ(log.snapshot().merges, 1u);
      EXPECT_EQ(log.snapshot().tokens_merged, 20u);
      EXPECT_LT(merge_at, restored_at);
    } else {
      EXPECT_TRUE(merges.empty()) << merges[0].dump();
    }
    to_stop.push_back(monitor_log->subscribed.back());
  }
  std::filesystem::remove_all(dir);
}

// An owner never restores another run's checkpoint of the same shapes (a
// resume restored version 33 of another run where this one was at 183, with no word): it says
// whose it is and starts as an owner without a checkpoint would.
TEST_F(owner_actor_test, a_checkpoint_of_another_run_is_not_restored) {
  auto dir = std::filesystem::temp_directory_path() / "dd_owner_actor_other_run";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "owner_0.ddck").string();
  owner_checkpoint other;
  other.fragment_id = 0;
  other.version = 33;
  other.value = std::vector<float>(6, 9.0f);
  other.momentum = std::vector<float>(6, 0.0f);
  other.run_id = "00000000000000bb";
  ASSERT_TRUE(save_checkpoint(path, other).ok());
  auto ctx = context();
  ctx->options.checkpoint_every = 1;
  ctx->options.checkpoint_path = path;
  ctx->options.run_id = "00000000000000aa";
  ctx->resumed = true;
  ctx->rebuild_wait_s = 0;  // no learner to ask: straight to the initial weights
  run_log log({}, true, [this] { return env.now(); });
  services.log = &log;
  auto owner = spawn_owner(ctx);
  bool named = false, restored = false, started = false;
  for (const auto& e : log.events()) {
    if (e["event"] == "owner_start") started = e.value("version", 0) != 33;
    if (e["event"] == "failure" && e.value("what", "") == "checkpoint_of_another_run") {
      const std::string err = e["error"];
      named = err.find("belongs to run 00000000000000bb, not to this run 00000000000000aa") !=
              std::string::npos;
    }
    if (e["event"] == "owner_restored") restored = true;
  }
  EXPECT_TRUE(named);
  EXPECT_FALSE(restored);
  EXPECT_TRUE(started) << "no owner_start (or one at the other run's version)";
  std::filesystem::remove_all(dir);
}

// An owner that restarts from the initial weights says so on the console hook (stderr in
// dd-node run), besides its events: respawned before its first checkpoint ...
TEST_F(owner_actor_test, owner_respawned_before_its_first_checkpoint_warns) {
  auto ctx = checkpointed_context("dd_owner_actor_test_nockpt", 1000);  // never reached
  run_log& log = log_with_console();
  caf::actor owner;
  ASSERT_NO_FATAL_FAILURE(start_live_owner(ctx, log, owner));
  push_both(owner, 0, 1, 0.5f, 0.3f);
  ASSERT_EQ(a_log->broadcasts.size(), 1u);  // version 1, no checkpoint written
  EXPECT_TRUE(console.empty()) << "a first start is not a reset";
  ASSERT_FALSE(std::filesystem::exists(ctx->options.checkpoint_path));

  caf::actor respawned;
  ASSERT_NO_FATAL_FAILURE(kill_and_await_respawn(owner, respawned));
  set_live(respawned);  // neither learner holds a copy (both answer have = false)
  EXPECT_EQ(a_log->queries, 1);
  int resets = 0;
  for (const auto& e : log.events())
    if (e["event"] == "owner_start" && e.contains("reset")) {
      ++resets;
      EXPECT_EQ(e["version"], 2) << "versions never repeat: version 1 was published";
      EXPECT_NE(e["reset"].get<std::string>().find("before its first checkpoint"),
                std::string::npos)
          << e.dump();
    }
  EXPECT_EQ(resets, 1);
  ASSERT_EQ(console.size(), 1u);
  EXPECT_NE(console[0].find("warning: fragment owner 0: it was respawned before its first "
                            "checkpoint"),
            std::string::npos)
      << console[0];
  EXPECT_NE(console[0].find("restarts from the initial weights"), std::string::npos) << console[0];
  EXPECT_NE(console[0].find("no live learner holds a copy"), std::string::npos) << console[0];
  // The run is degraded, naming the fragment.
  const auto c = log.snapshot();
  ASSERT_EQ(c.degraded.count("fragment 0"), 1u);
  EXPECT_NE(c.degraded.at("fragment 0").find("initial weights"), std::string::npos);
}

// ... or with an unreadable (truncated) checkpoint file.
TEST_F(owner_actor_test, owner_with_an_unreadable_checkpoint_warns) {
  auto ctx = checkpointed_context("dd_owner_actor_test_badckpt", 1);
  std::ofstream(ctx->options.checkpoint_path, std::ios::binary) << "DDCK truncated";
  run_log& log = log_with_console();
  services.log = &log;
  auto owner = spawn_owner(ctx);
  bool failure = false, reset = false;
  for (const auto& e : log.events()) {
    if (e["event"] == "failure" && e["what"] == "checkpoint_unreadable") failure = true;
    if (e["event"] == "owner_start" && e.contains("reset") && e["version"] == 0) reset = true;
  }
  EXPECT_TRUE(failure);
  EXPECT_TRUE(reset);
  ASSERT_EQ(console.size(), 1u);
  EXPECT_NE(console[0].find("warning: fragment owner 0: its checkpoint '" +
                            ctx->options.checkpoint_path + "' is unreadable"),
            std::string::npos)
      << console[0];
  EXPECT_NE(console[0].find("restarts from the initial weights"), std::string::npos) << console[0];
}

// Rebuild from the learners: an owner killed with a damaged checkpoint does
// not restart from the initial weights while a learner holds a trained copy. It takes the
// newest copy (values equal to the learner's), numbers it above every version it knows,
// resets momentum, writes a checkpoint and broadcasts it; no learner is sent the initial value.
TEST_F(owner_actor_test, killed_with_a_damaged_checkpoint_it_is_rebuilt_from_the_newest_copy) {
  auto ctx = checkpointed_context("dd_owner_actor_test_rebuild", 1);
  ctx->options.merge.outer_momentum = 0.9f;
  ctx->options.merge.outer_lr = 0.7f;
  run_log& log = log_with_console();
  caf::actor owner;
  ASSERT_NO_FATAL_FAILURE(start_live_owner(ctx, log, owner));
  push_both(owner, 0, 1, 0.5f, 0.3f);
  push_both(owner, 1, 2, 0.2f, 0.1f);
  ASSERT_EQ(a_log->broadcasts.size(), 2u);
  ASSERT_EQ(a_log->broadcasts.back().version, 2u);
  // Learner a applied version 2; learner b still holds version 1 (a broadcast it missed).
  const std::vector<float> v1 = values_of(a_log->broadcasts[0]);
  const std::vector<float> v2 = values_of(a_log->broadcasts[1]);
  ASSERT_NE(v1, v2);
  a_log->copy = std::make_pair(uint64_t{2}, v2);
  a_log->copy_merged = a_log->broadcasts[1].merged;
  b_log->copy = std::make_pair(uint64_t{1}, v1);
  // Damage the checkpoint (its CRC no longer matches), then kill the owner.
  {
    std::fstream f(ctx->options.checkpoint_path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(
        static_cast<std::streamoff>(std::filesystem::file_size(ctx->options.checkpoint_path) / 2));
    f.write("garbage!", 8);
  }
  caf::actor respawned;
  ASSERT_NO_FATAL_FAILURE(kill_and_await_respawn(owner, respawned));
  a_log->broadcasts.clear();
  b_log->broadcasts.clear();
  set_live(respawned);
  EXPECT_EQ(a_log->copies_sent, 1) << "the newest copy is fetched";
  EXPECT_EQ(b_log->copies_sent, 0);
  // Every live learner received the rebuilt value: learner a's copy, as version 3.
  for (const auto* l : {a_log.get(), b_log.get()}) {
    ASSERT_EQ(l->broadcasts.size(), 1u);
    EXPECT_EQ(l->broadcasts[0].version, 3u);
    EXPECT_EQ(values_of(l->broadcasts[0]), v2);
    EXPECT_EQ(l->broadcasts[0].merged.size(), a_log->copy_merged.size());
    for (const auto& bc : l->broadcasts)
      EXPECT_NE(values_of(bc), std::vector<float>(6, 1.0f)) << "never the initial weights";
  }
  bool rebuilt = false, reset = false, unreadable = false;
  for (const auto& e : log.events()) {
    if (e["event"] == "fragment_rebuilt") {
      rebuilt = true;
      EXPECT_EQ(e["learner"], 0);
      EXPECT_EQ(e["learner_version"], 2);
      EXPECT_EQ(e["version"], 3);
      EXPECT_TRUE(e["checkpoint_version"].is_null());
    }
    if (e["event"] == "owner_start" && e.contains("reset")) reset = true;
    if (e["event"] == "failure" && e["what"] == "checkpoint_unreadable") unreadable = true;
  }
  EXPECT_TRUE(rebuilt);
  EXPECT_TRUE(unreadable);
  EXPECT_FALSE(reset);
  EXPECT_TRUE(log.snapshot().degraded.empty());
  ASSERT_EQ(console.size(), 1u);
  EXPECT_NE(console[0].find("rebuilt from learner 0's copy of version 2 as version 3"),
            std::string::npos)
      << console[0];
  // The rebuilt value was checkpointed at once.
  auto ck = load_checkpoint(ctx->options.checkpoint_path);
  ASSERT_TRUE(ck.ok()) << ck.error().message;
  EXPECT_EQ(ck->version, 3u);
  EXPECT_EQ(ck->value, v2);
  EXPECT_EQ(ck->momentum, std::vector<float>(6, 0.0f)) << "momentum reset";
  // Momentum reset, version strictly greater: the next merge is version 4 and equals one outer
  // step from v2 with zero momentum (weighted average of Δ = 0.2, lr 0.7, μ 0.9: Nesterov).
  push_from(a, respawned, make_push(0, 0, 3, 1, 10, 3, std::vector<float>(6, 0.2f)));
  push_from(b, respawned, make_push(1, 0, 3, 1, 10, 3, std::vector<float>(6, 0.2f)));
  ASSERT_FALSE(a_log->broadcasts.empty());
  EXPECT_EQ(a_log->broadcasts.back().version, 4u);
  owner_checkpoint fresh;
  fresh.fragment_id = 0;
  fresh.version = 3;
  fresh.value = v2;
  fresh.momentum.assign(6, 0.0f);
  auto be = kernels::make_backend("reference");
  owner_core ref(ctx->options, *be, fresh, [] { return 0.0; });
  ref.forget_restore();
  ref.on_membership({{0, 0, 1.0}, {1, 0, 1.0}}, 0.0);
  ref.on_push(make_push(0, 0, 3, 1, 10, 3, std::vector<float>(6, 0.2f)), 0.0);
  ref.on_push(make_push(1, 0, 3, 1, 10, 3, std::vector<float>(6, 0.2f)), 0.0);
  EXPECT_EQ(ref.version(), 4u);
  EXPECT_EQ(values_of(a_log->broadcasts.back()), ref.value());
  // The rebuild's wait timer rings later, once the owner serves: it is ignored (the owner
  // stays up and keeps merging).
  env.advance(ctx->rebuild_wait_s + 1.0);
  push_from(a, respawned, make_push(0, 0, 4, 1, 10, 4, std::vector<float>(6, 0.2f)));
  push_from(b, respawned, make_push(1, 0, 4, 1, 10, 4, std::vector<float>(6, 0.2f)));
  EXPECT_EQ(a_log->broadcasts.back().version, 5u) << "the owner died after its rebuild";
  EXPECT_EQ(monitor_log->subscribed.size(), 2u) << "the owner was respawned again";
}

// The checkpoint is readable, but a learner holds a newer version (published
// after the checkpoint, checkpoint.every_versions > 1): the newest value wins.
TEST_F(owner_actor_test, a_learner_copy_newer_than_a_readable_checkpoint_wins) {
  auto ctx = checkpointed_context("dd_owner_actor_test_newest", 2);
  run_log log({}, true, [this] { return env.now(); });
  caf::actor owner;
  ASSERT_NO_FATAL_FAILURE(start_live_owner(ctx, log, owner));
  for (uint64_t v = 0; v < 3; ++v) {
    push_both(owner, v, v + 1, 0.1f, 0.1f);
  }
  ASSERT_EQ(a_log->broadcasts.back().version, 3u);
  auto ck = load_checkpoint(ctx->options.checkpoint_path);
  ASSERT_TRUE(ck.ok());
  ASSERT_EQ(ck->version, 2u);  // version 3 is newer than the checkpoint
  const std::vector<float> v3 = values_of(a_log->broadcasts.back());
  a_log->copy = std::make_pair(uint64_t{3}, v3);
  b_log->copy = std::make_pair(uint64_t{2}, ck->value);
  caf::actor respawned;
  ASSERT_NO_FATAL_FAILURE(kill_and_await_respawn(owner, respawned));
  a_log->broadcasts.clear();
  set_live(respawned);
  ASSERT_EQ(a_log->broadcasts.size(), 1u);
  EXPECT_EQ(a_log->broadcasts[0].version, 4u);
  EXPECT_EQ(values_of(a_log->broadcasts[0]), v3);
  bool rebuilt = false;
  for (const auto& e : log.events())
    if (e["event"] == "fragment_rebuilt") {
      rebuilt = true;
      EXPECT_EQ(e["checkpoint_version"], 2);
      EXPECT_EQ(e["learner_version"], 3);
    }
  EXPECT_TRUE(rebuilt);
}

// No learner answers within checkpoint.rebuild_wait_seconds: the owner falls back to the
// initial weights and the run is degraded (naming the fragment).
TEST_F(owner_actor_test, no_learner_answers_within_the_wait_so_the_fragment_is_degraded) {
  auto ctx = checkpointed_context("dd_owner_actor_test_nolearner", 1);
  ctx->rebuild_wait_s = 3.0;
  std::ofstream(ctx->options.checkpoint_path, std::ios::binary) << "DDCK truncated";
  run_log log({}, true, [this] { return env.now(); });
  services.log = &log;
  ctx->resumed = true;  // a resumed run: the first start asks the learners too
  ctx->learners = 2;
  services.history =
      std::make_shared<owner_history>(7);  // events.jsonl of the first part named version 7
  auto owner = spawn_owner(ctx);
  caf::anon_send(owner, atoms::live_atom_v, encode(live_view_msg{}),
                 std::vector<learner_at_owner_hdl>{});
  env.run();
  for (const auto& e : log.events()) EXPECT_NE(e["event"], "owner_start") << "still waiting";
  env.advance(3.0);
  bool reset = false;
  for (const auto& e : log.events())
    if (e["event"] == "owner_start") {
      reset = e.contains("reset");
      EXPECT_EQ(e["version"], 8) << "numbered above every version the run used";
      EXPECT_NE(e.value("reset", std::string()).find("no learner answered within 3 s"),
                std::string::npos)
          << e.dump();
    }
  EXPECT_TRUE(reset);
  EXPECT_EQ(log.snapshot().degraded.count("fragment 0"), 1u);
}

// Issue 10 (typed owner): a push and a pull that arrive while the owner rebuilds are not
// handled — no answer, no event — until it serves; then both are, in the order they came
// (caf::skip leaves them in the mailbox). The typed rebuilding behavior implements the whole
// interface and skips exactly what the untyped one left to its default handler (caf::skip).
TEST_F(owner_actor_test, a_push_and_a_pull_during_the_rebuild_wait_until_it_serves) {
  auto ctx = context();
  ctx->rebuild_wait_s = 3.0;
  ctx->resumed = true;  // the first start asks the learners
  ctx->learners = 3;    // ...and waits for 3 answers: only a and b answer
  run_log log({}, true, [this] { return env.now(); });
  services.log = &log;
  auto owner = spawn_owner(ctx);
  set_live(owner);
  ASSERT_EQ(a_log->queries, 1);
  ASSERT_EQ(b_log->queries, 1);
  push_from(a, owner, make_push(0, 0, 0, 1, 10, 1, std::vector<float>(6, 0.5f)));
  caf::anon_send(b, caf::forward_atom_v, owner, atoms::pull_atom_v, encode(pull_request{1, 0, 0}));
  env.advance(1.0);
  EXPECT_TRUE(a_log->acked.empty());
  EXPECT_TRUE(a_log->rejects.empty());
  EXPECT_TRUE(b_log->broadcasts.empty());
  for (const auto& e : log.events()) {
    EXPECT_NE(e["event"], "push") << "a push was handled during the rebuild";
    EXPECT_NE(e["event"], "owner_start") << "still rebuilding";
  }
  env.advance(2.0);  // the wait is over: it starts from the initial value and serves
  size_t starts = 0, pushes = 0;
  for (const auto& e : log.events()) {
    if (e["event"] == "owner_start") ++starts;
    if (e["event"] == "push") {
      ++pushes;
      EXPECT_EQ(e["learner"], 0);
      EXPECT_EQ(e["transfer_id"], 1);
    }
  }
  EXPECT_EQ(starts, 1u);
  EXPECT_EQ(pushes, 1u) << "the push that waited was handled once";
  EXPECT_EQ(a_log->acked.size() + a_log->rejects.size(), 1u);
  ASSERT_FALSE(b_log->broadcasts.empty()) << "the pull that waited was answered";
  EXPECT_EQ(b_log->broadcasts.front().version, 0u);
  EXPECT_EQ(values_of(b_log->broadcasts.front()), std::vector<float>(6, 1.0f));
}

// A pull travels as codec bytes: a valid one is answered with the current value (to the sender
// only); undecodable bytes or a pull for another fragment are dropped with a `failure` event.
TEST_F(owner_actor_test, pull_is_a_codec_message_and_bad_pulls_are_dropped) {
  auto ctx = context();
  run_log log({}, true, [this] { return env.now(); });
  services.log = &log;
  auto owner = spawn_owner(ctx);
  caf::anon_send(a, caf::forward_atom_v, owner, atoms::pull_atom_v, encode(pull_request{0, 0, 0}));
  env.run();
  ASSERT_EQ(a_log->broadcasts.size(), 1u);
  EXPECT_EQ(a_log->broadcasts[0].version, 0u);
  for (float v : values_of(a_log->broadcasts[0])) EXPECT_EQ(v, 1.0f);
  EXPECT_TRUE(b_log->broadcasts.empty());
  // The evaluator's pull (learner id -1) is valid too.
  caf::anon_send(b, caf::forward_atom_v, owner, atoms::pull_atom_v, encode(pull_request{-1, 0, 0}));
  env.run();
  EXPECT_EQ(b_log->broadcasts.size(), 1u);

  a_log->broadcasts.clear();
  caf::anon_send(a, caf::forward_atom_v, owner, atoms::pull_atom_v,
                 std::vector<uint8_t>{1, 2, 3});  // not a message
  caf::anon_send(a, caf::forward_atom_v, owner, atoms::pull_atom_v,
                 encode(heartbeat_msg{}));  // another kind
  caf::anon_send(a, caf::forward_atom_v, owner, atoms::pull_atom_v,
                 encode(pull_request{0, 0, 3}));  // another owner's fragment
  env.run();
  EXPECT_TRUE(a_log->broadcasts.empty());
  int failures = 0;
  for (const auto& e : log.events())
    if (e["event"] == "failure" && e["what"] == "undecodable_pull") ++failures;
  EXPECT_EQ(failures, 3);
}

// A live view that does not decode (not a message; a view naming two learners that travels with
// no handle) is dropped with a `failure` event naming the fragment, in the rebuilding and in the
// serving behaviour alike: the owner keeps the view it has.
TEST_F(owner_actor_test,
       an_undecodable_live_view_is_dropped_and_logged_while_rebuilding_and_serving) {
  auto ctx = context();
  ctx->rebuild_wait_s = 3.0;
  ctx->resumed = true;  // the first start asks the learners for their copies
  ctx->learners = 2;
  run_log log({}, true, [this] { return env.now(); });
  services.log = &log;
  auto owner = spawn_owner(ctx);
  const auto send_bad_views = [&] {
    caf::anon_send(owner, atoms::live_atom_v, std::vector<uint8_t>{1, 2, 3},
                   std::vector<learner_at_owner_hdl>{});
    caf::anon_send(owner, atoms::live_atom_v, encode(live_view_msg{1, {{0, 0, 1.0}, {1, 0, 1.0}}}),
                   std::vector<learner_at_owner_hdl>{});
    env.run();
  };
  const auto refusals = [&] {
    std::vector<std::string> codes;
    for (const auto& e : log.events())
      if (e["event"] == "failure" && e["what"] == "undecodable_live_view") {
        EXPECT_EQ(e["fragment"], 0) << e.dump();
        codes.push_back(e["code"].get<std::string>());
      }
    return codes;
  };
  send_bad_views();  // rebuilding: no view yet, so no learner was asked
  ASSERT_EQ(refusals().size(), 2u);
  EXPECT_EQ(refusals()[1], "malformed") << "two learners, no handle";
  EXPECT_EQ(a_log->queries, 0);
  EXPECT_EQ(b_log->queries, 0);
  set_live(owner);  // a good view: both learners are asked
  EXPECT_EQ(a_log->queries, 1);
  EXPECT_EQ(b_log->queries, 1);
  env.advance(3.0);  // nobody answers: it starts from the initial value and serves
  bool started = false;
  for (const auto& e : log.events()) started = started || e["event"] == "owner_start";
  ASSERT_TRUE(started);

  send_bad_views();  // serving: dropped too, and a and b stay live
  EXPECT_EQ(refusals().size(), 4u);
  push_from(a, owner, make_push(0, 0, 0, 1, 10, 1, std::vector<float>(6, 0.5f)));
  EXPECT_EQ(a_log->acked, std::vector<uint64_t>{1}) << "a is still in the owner's view";
}

/// Adds one; drops what it cannot use (`net corrupt`).
caf::behavior plus_one(caf::event_based_actor* self, run_log* log) {
  drop_unexpected(self, log, "plus_one");
  return {[](int x) { return x + 1; }};
}

struct plus_one_seen {
  int answer = 0;
  std::string request_error;
};

/// On CAF's defaults (an asynchronous error would end it): sends plus_one garbage, a stray
/// error, a request that matches nothing, and 41.
caf::behavior plus_one_client(caf::event_based_actor* self, caf::actor target,
                              std::shared_ptr<plus_one_seen> seen) {
  self->send(target, std::string("ddaebeat"));  // a garbled "heartbeat", asynchronous
  self->send(target, caf::make_error(caf::sec::unexpected_message));
  self->request(target, caf::infinite, std::string("garbled request"))
      .then([](int) {}, [=](caf::error& e) { seen->request_error = self->system().render(e); });
  self->request(target, caf::infinite, 41).then([=](int y) { seen->answer = y; });
  return {[](int) {}};
}

// Issue 11: a byte flipped on a link made CAF deliver messages no handler matched; CAF's
// print_and_drop answered each with an asynchronous error(unexpected_message), which ended its
// sender (owners, then the health monitor). Now neither the receiver nor the sender dies.
TEST(drop_unexpected, garbage_and_stray_errors_are_logged_and_dropped_and_nobody_dies) {
  dd::test::coordinator env;
  run_log log({}, true, [&env] { return env.now(); });
  auto target = env.sys->spawn(plus_one, &log);
  auto seen = std::make_shared<plus_one_seen>();
  auto client = env.sys->spawn(plus_one_client, target, seen);
  env.run();
  EXPECT_EQ(seen->answer, 42);
  EXPECT_NE(seen->request_error.find("unexpected_message"), std::string::npos)
      << seen->request_error;
  for (const auto& a : {target, client})
    EXPECT_FALSE(
        caf::actor_cast<caf::abstract_actor*>(a)->getf(caf::abstract_actor::is_terminated_flag));
  std::vector<std::string> what;
  for (const auto& e : log.events())
    if (e["event"] == "unexpected_message") {
      EXPECT_EQ(e["who"], "plus_one");
      what.push_back(e["what"]);
    }
  EXPECT_EQ(what, (std::vector<std::string>{"message", "error", "message"}));
  anon_send_exit(target, caf::exit_reason::user_shutdown);
  anon_send_exit(client, caf::exit_reason::user_shutdown);
  env.run();
}

/// A supervised child that throws while it sets up, as a learner whose backend cannot allocate.
/// (It takes an unused argument: CAF 0.17 spawns a function actor without arguments through a
/// null shared_ptr<tuple<>> dereference, which UBSan rightly reports.)
caf::behavior throwing_child(caf::event_based_actor* self, int /*unused*/) {
  name_crashes(self);
  throw std::runtime_error(
      "cpu: allocate_bytes: out of host memory allocating 1099511627776 bytes");
  return {[](int) {}};
}

/// What a node stand-in heard of failed writes (write_report_hdl) and the verdict it answers each
/// with, by message to the writer, as the job does with its run log's policy.
struct write_reports {
  write_verdict verdict = write_verdict::retry_degraded;
  std::vector<std::pair<std::string, std::string>> heard;  ///< (file, error), in order
  std::vector<double> at;                                  ///< when each arrived (test clock)
};

write_report_hdl::behavior_type verdict_node(write_report_hdl::pointer self,
                                             std::shared_ptr<write_reports> reports,
                                             std::function<double()> now) {
  return {[=](atoms::write_trouble_atom, const std::string& file, const std::string& error) {
    reports->heard.emplace_back(file, error);
    reports->at.push_back(now());
    send_untyped(self, caf::actor_cast<caf::actor>(self->current_sender()),
                 atoms::write_verdict_atom_v, file, reports->verdict);
  }};
}

// The write-failure policy is the node's, and the owner learns it by message: a checkpoint that
// cannot be written is reported to the node (write_trouble_atom: the file and the error), and
// the owner does what the node's answer (write_verdict_atom) says — retry_degraded: write it
// again with backoff (0.5 s, then 0.5, 1, 2 s doubling), each failure reported again;
// end_the_run: never again. Without an answer nothing is retried.
TEST_F(owner_actor_test, a_failed_checkpoint_is_retried_or_not_as_the_nodes_verdict_message_says) {
  struct row {
    const char* name;
    std::optional<write_verdict> answer;  ///< none: the node never answers
    std::vector<int64_t> reports_at_ms;   ///< milliseconds after the merge
  };
  const row rows[] = {
      {"retry_degraded", write_verdict::retry_degraded, {0, 500, 1000, 2000, 4000}},
      {"end_the_run", write_verdict::end_the_run, {0}},
      {"no_answer", std::nullopt, {0}},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.name);
    auto ctx = checkpointed_context(std::string("dd_owner_actor_test_verdict_") + r.name, 1);
    // The checkpoint's directory is a plain file: every write of it fails.
    std::ofstream(scratch.back() / "blocker") << "not a directory\n";
    ctx->options.checkpoint_path = (scratch.back() / "blocker" / "owner_0.ddck").string();
    auto reports = std::make_shared<write_reports>();
    caf::actor node;
    if (r.answer) {
      reports->verdict = *r.answer;
      node = caf::actor_cast<caf::actor>(
          env.sys->spawn(verdict_node, reports, [this] { return env.now(); }));
    } else {  // takes the report, answers nothing (the unused int: see throwing_child)
      node = env.sys->spawn(
          [reports, this](caf::event_based_actor*, int) -> caf::behavior {
            return {[=](atoms::write_trouble_atom, const std::string& file, const std::string& e) {
              reports->heard.emplace_back(file, e);
              reports->at.push_back(env.now());
            }};
          },
          0);
    }
    to_stop.push_back(node);
    run_log log("", true, [this] { return env.now(); });
    services.log = &log;
    services.node = caf::actor_cast<write_report_hdl>(node);
    const size_t subscribed = monitor_log->subscribed.size();
    auto owner = spawn_owner(ctx);
    ASSERT_EQ(monitor_log->subscribed.size(), subscribed + 1);
    set_live(owner);
    push_both(owner, 0, 1, 0.5f, 0.5f);  // both pending: merged at once, version 1
    const double merged_at = env.now();
    for (int i = 0; i < 12; ++i) env.advance(0.5);  // 6 s
    std::vector<int64_t> after_ms;
    for (double t : reports->at) after_ms.push_back(std::llround((t - merged_at) * 1000));
    EXPECT_EQ(after_ms, r.reports_at_ms);
    for (const auto& [file, error] : reports->heard) {
      EXPECT_EQ(file, ctx->options.checkpoint_path);
      EXPECT_NE(error.find("fragment owner 0: checkpoint of version 1: "), std::string::npos)
          << error;
    }
    // The owner asked nothing of the log: the verdict's bookkeeping (`degraded`) is the node's.
    EXPECT_TRUE(log.snapshot().degraded.empty());
    EXPECT_TRUE(log.write_failure().empty());
    env.shutdown({owner, node});
    services.log = nullptr;
  }
}

/// What a supervisor reported to its job (supervisor_report_hdl).
struct report_probe_state {
  std::vector<std::tuple<child_kind, int32_t, std::string>> given_up;
  std::vector<child_kind> done;
  static inline const char* name = "report_probe";
};

/// (The unused argument: see throwing_child.)
supervisor_report_hdl::behavior_type report_probe(
    supervisor_report_hdl::stateful_pointer<report_probe_state> self, int /*unused*/) {
  return {
      [=](atoms::children_done_atom, child_kind kind) { self->state.done.push_back(kind); },
      [=](atoms::child_given_up_atom, child_kind kind, int32_t id, const std::string& crash) {
        self->state.given_up.emplace_back(kind, id, crash);
      },
  };
}

// The typed reports: a fragment owner given up is named to the job with its kind, id and last
// crash, then the supervisor reports its children done (one meaning per atom; the job stops the
// run on an owner, not on a learner).
TEST(supervisor, reports_a_given_up_owner_and_then_its_children_done_to_the_job) {
  static_assert(std::is_convertible<job_hdl, supervisor_report_hdl>::value,
                "the job takes a supervisor's reports");
  dd::test::coordinator env;
  auto probe = env.sys->spawn(report_probe, 0);
  auto sctx = std::make_shared<supervisor_config>();
  sctx->kind = child_kind::owner;
  sctx->restart.max_restarts = 0;
  sctx->job = probe;
  sctx->children.push_back(
      {2, [](caf::actor_system& sys) { return sys.spawn(throwing_child, 0); }});
  supervisor_hdl sup = env.sys->spawn(supervisor, std::shared_ptr<const supervisor_config>(sctx),
                                      supervisor_services{});
  env.run();
  auto& st = dynamic_cast<caf::stateful_actor<report_probe_state, supervisor_report_hdl::base>&>(
                 *caf::actor_cast<caf::abstract_actor*>(probe))
                 .state;
  ASSERT_EQ(st.given_up.size(), 1u);
  EXPECT_EQ(std::get<0>(st.given_up[0]), child_kind::owner);
  EXPECT_EQ(std::get<1>(st.given_up[0]), 2);
  EXPECT_NE(std::get<2>(st.given_up[0]).find("out of host memory"), std::string::npos);
  ASSERT_EQ(st.done.size(), 1u);
  EXPECT_EQ(st.done[0], child_kind::owner);
  EXPECT_EQ(to_string(child_kind::owner), "owner");
  EXPECT_EQ(to_string(child_kind::learner), "learner");
  env.shutdown({caf::actor_cast<caf::actor>(sup), caf::actor_cast<caf::actor>(probe)});
}

TEST(supervisor, a_crash_names_its_exception_in_the_give_up_event) {
  dd::test::coordinator env;
  run_log log({}, true, [&env] { return env.now(); });
  auto sctx = std::make_shared<supervisor_config>();
  sctx->kind = child_kind::learner;
  sctx->restart.max_restarts = 0;  // give up at the first crash
  supervisor_services sup_services;
  sup_services.log = &log;
  sctx->children.push_back(
      {3, [](caf::actor_system& sys) { return sys.spawn(throwing_child, 0); }});
  auto sup =
      env.sys->spawn(supervisor, std::shared_ptr<const supervisor_config>(sctx), sup_services);
  env.run();
  bool gave_up = false;
  for (const auto& ev : log.events())
    if (ev["event"] == "give_up" && ev["id"] == 3) {
      gave_up = true;
      EXPECT_NE(ev["error"].get<std::string>().find("out of host memory allocating"),
                std::string::npos)
          << ev.dump();
    }
  EXPECT_TRUE(gave_up);
  const auto snap = log.snapshot();
  ASSERT_EQ(snap.learners_given_up.count(3), 1u);
  EXPECT_NE(snap.learners_given_up.at(3).find("out of host memory"), std::string::npos);
  env.shutdown({caf::actor_cast<caf::actor>(sup)});
}

}  // namespace
}  // namespace dd::actors
