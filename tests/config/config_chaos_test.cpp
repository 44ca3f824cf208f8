// tests/config/config_chaos_test.cpp — the chaos section's kinds beyond the in-process ones:
// message kinds with counts, process and network kinds with dd-chaos targets and knobs, and the
// whole-cluster random schedule keys; each read back from the resolved JSON (what a learner
// node receives in its handshake) unchanged.
#include <gtest/gtest.h>

#include "runtime/config/loader.hpp"
#include "tests/config/config_test_util.hpp"

namespace dd::config {
namespace {

const char* const k_script = R"(
experiment {
  data = { file = "../shared/data/tinyshakespeare/input.txt" },
  learners = { count = 3 },
  budget = { seconds = 120 },
  inner = { decay_steps = 1000 },
  chaos = {
    events = {
      { at_step = 40, action = "nan", target = 2 },
      { at_time = 5, action = "dup_push", target = 1, duration = 10 },
      { at_time = 6, action = "corrupt_push", target = 0, count = 3 },
      { at_time = 7, action = "delay_broadcast", target = 1, delay = 0.25, duration = 4 },
      { at_time = 8, action = "pause", target = "learner:1", duration = 10 },
      { at_fraction = 0.5, action = "slow_process", target = "node:learner-0", duration = 20,
        duty = 0.25, period = 0.4 },
      { at_time = 30, action = "latency", target = "learner:0", ms = 200, jitter = 50,
        dir = "up", duration = 15 },
      { at_time = 40, action = "partition", target = "learner:2", duration = 20 },
    },
    random = { cluster_mtbf_seconds = 30, kinds = { "kill_process", "pause" },
               min_gap_seconds = 5, max_concurrent = 2,
               recovery = { dist = "weibull", mean = 5, shape = 2 }, seed = 77 },
  },
}
)";

void expect_chaos(const experiment& e) {
  ASSERT_EQ(e.chaos.events.size(), 8u);
  const auto& ev = e.chaos.events;
  EXPECT_EQ(ev[0].action, chaos_action::nan);
  EXPECT_EQ(ev[0].trigger, chaos_trigger::at_step);
  EXPECT_EQ(ev[0].target, 2);
  EXPECT_EQ(chaos_layer_of(ev[0].action), chaos_layer::in_process);
  EXPECT_TRUE(is_live_message_action(ev[0].action));
  EXPECT_EQ(ev[1].action, chaos_action::dup_push);
  EXPECT_DOUBLE_EQ(ev[1].duration, 10.0);
  EXPECT_EQ(ev[2].params.at("count").get<int>(), 3);
  EXPECT_EQ(ev[3].action, chaos_action::delay_broadcast);
  EXPECT_DOUBLE_EQ(ev[3].delay, 0.25);
  EXPECT_EQ(ev[4].action, chaos_action::pause);
  EXPECT_EQ(chaos_layer_of(ev[4].action), chaos_layer::process);
  EXPECT_FALSE(is_live_message_action(ev[4].action));
  EXPECT_EQ(ev[4].target_spec, "learner:1");
  EXPECT_EQ(ev[5].trigger, chaos_trigger::at_fraction);
  EXPECT_DOUBLE_EQ(ev[5].params.at("duty").get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(ev[5].params.at("period").get<double>(), 0.4);
  EXPECT_EQ(ev[6].action, chaos_action::latency);
  EXPECT_EQ(chaos_layer_of(ev[6].action), chaos_layer::network);
  EXPECT_DOUBLE_EQ(ev[6].params.at("ms").get<double>(), 200.0);
  EXPECT_DOUBLE_EQ(ev[6].params.at("jitter").get<double>(), 50.0);
  EXPECT_EQ(ev[6].params.at("dir").get<std::string>(), "up");
  EXPECT_EQ(ev[7].action, chaos_action::partition);
  const auto& r = e.chaos.random;
  EXPECT_DOUBLE_EQ(r.cluster_mtbf_seconds, 30.0);
  EXPECT_EQ(r.kinds, (std::vector<std::string>{"kill_process", "pause"}));
  EXPECT_DOUBLE_EQ(r.min_gap_seconds, 5.0);
  EXPECT_EQ(r.max_concurrent, 2);
  EXPECT_EQ(r.recovery.dist, recovery_dist::weibull);
  EXPECT_DOUBLE_EQ(r.recovery.shape, 2.0);
  EXPECT_EQ(r.seed, 77u);
}

TEST(ConfigChaos, NewKindsAndRandomKeysResolve) {
  auto r = load_string(k_script, "chaos_kinds.lua", test::repo_options());
  ASSERT_TRUE(r.ok()) << r.error_text();
  ASSERT_EQ(r.experiments.size(), 1u);
  expect_chaos(r.experiments[0]);
  // Each event knows where it was written (dd-node run names it when it refuses the event).
  EXPECT_EQ(r.experiments[0].chaos.events[4].where, "chaos_kinds.lua:13");
}

TEST(ConfigChaos, ResolvedJsonRoundTrips) {
  auto r = load_string(k_script, "chaos_kinds.lua", test::repo_options());
  ASSERT_TRUE(r.ok()) << r.error_text();
  load_options o;
  o.check_files = false;
  auto again = load_json(to_json(r.experiments[0]), o);
  ASSERT_TRUE(again.ok()) << again.error_text();
  expect_chaos(again.experiments[0]);
  EXPECT_EQ(to_json(again.experiments[0]), to_json(r.experiments[0]));
}

TEST(ConfigChaos, WithoutClusterMtbfTheScheduleKeysStayOut) {
  auto r = load_string(
      std::string("experiment { ") + test::k_data + ", chaos = { random = { mtbf_seconds = 9 } } }",
      "x.lua", test::repo_options());
  ASSERT_TRUE(r.ok()) << r.error_text();
  const auto j = to_json(r.experiments[0]);
  EXPECT_FALSE(j["chaos"]["random"].contains("kinds"));
  EXPECT_DOUBLE_EQ(j["chaos"]["random"]["cluster_mtbf_seconds"].get<double>(), 0.0);
  auto again = load_json(j, {});
  EXPECT_TRUE(again.ok()) << again.error_text();
}

// Regression: a dd-chaos target holding bytes that are not UTF-8
// escaped load_string as a JSON exception. Only [A-Za-z0-9._-:,] is a target; any other byte is
// refused naming its place.
TEST(ConfigChaos, ATargetWithAByteOutsideTargetNamesIsRefusedNamingIt) {
  for (const std::string& target : {std::string("learner:0,learne\x8c\xc5"
                                                "7"),
                                    std::string("node:sync er")}) {
    std::string text = std::string("experiment { ") + test::k_data +
                       ", learners = { count = 7 }, chaos = { events = { { at_time = 10, "
                       "action = 'kill_process', target = '" +
                       target + "' } } } }";
    load_result r;
    ASSERT_NO_THROW(r = load_string(text, "x.lua", test::repo_options()));
    ASSERT_FALSE(r.ok()) << target;
    EXPECT_NE(r.error_text().find("is not allowed in a dd-chaos target"), std::string::npos)
        << r.error_text();
  }
}

TEST(ConfigChaos, KnownKeyPathsListTheKnobs) {
  const auto& keys = known_key_paths();
  for (const char* k : {"chaos.events[].count", "chaos.events[].ms", "chaos.events[].dir",
                        "chaos.random.cluster_mtbf_seconds", "chaos.random.max_concurrent",
                        "chaos.random.recovery.shape"})
    EXPECT_NE(std::find(keys.begin(), keys.end(), k), keys.end()) << k;
}

}  // namespace
}  // namespace dd::config
