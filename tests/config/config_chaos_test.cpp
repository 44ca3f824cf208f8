// tests/config/config_chaos_test.cpp — the chaos section's kinds beyond the in-process ones:
// message kinds with counts, process and network kinds with dd-chaos targets and knobs, and the
// whole-cluster random schedule keys; each read back from the resolved JSON (what a learner
// node receives in its handshake) unchanged.
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "runtime/config/loader.hpp"
#include "tests/config/config_test_util.hpp"

namespace dd::config {
namespace {

const char* const k_script = R"(
experiment {
  data = { file = "datasets/tinyshakespeare/input.txt" },
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
  EXPECT_EQ(ev[0].action, fault_kind::nan_step);
  EXPECT_EQ(ev[0].trigger, chaos_trigger::at_step);
  EXPECT_EQ(ev[0].target, 2);
  EXPECT_EQ(fault_layer_of(ev[0].action), fault_layer::in_process);
  EXPECT_TRUE(starts_live_window(ev[0].action));
  EXPECT_EQ(ev[1].action, fault_kind::dup_push);
  EXPECT_DOUBLE_EQ(ev[1].duration, 10.0);
  EXPECT_EQ(ev[2].params.at("count").get<int>(), 3);
  EXPECT_EQ(ev[3].action, fault_kind::delay_broadcast);
  EXPECT_DOUBLE_EQ(ev[3].delay, 0.25);
  EXPECT_EQ(ev[4].action, fault_kind::pause);
  EXPECT_EQ(fault_layer_of(ev[4].action), fault_layer::process);
  EXPECT_FALSE(starts_live_window(ev[4].action));
  EXPECT_EQ(ev[4].target_spec, "learner:1");
  EXPECT_EQ(ev[5].trigger, chaos_trigger::at_fraction);
  EXPECT_DOUBLE_EQ(ev[5].params.at("duty").get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(ev[5].params.at("period").get<double>(), 0.4);
  EXPECT_EQ(ev[6].action, fault_kind::latency);
  EXPECT_EQ(fault_layer_of(ev[6].action), fault_layer::network);
  EXPECT_DOUBLE_EQ(ev[6].params.at("ms").get<double>(), 200.0);
  EXPECT_DOUBLE_EQ(ev[6].params.at("jitter").get<double>(), 50.0);
  EXPECT_EQ(ev[6].params.at("dir").get<std::string>(), "up");
  EXPECT_EQ(ev[7].action, fault_kind::partition);
  const auto& r = e.chaos.random;
  EXPECT_DOUBLE_EQ(r.cluster_mtbf_seconds, 30.0);
  EXPECT_EQ(r.kinds, (std::vector<fault_kind>{fault_kind::kill, fault_kind::pause}));
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

// A dd-chaos target holding bytes that are not UTF-8
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

// One vocabulary (runtime/config/fault_kind.hpp): every fault has one name that reads back to
// it, its DSL spelling reads back without a warning, and the in-process kill is not the SIGKILL.
TEST(ConfigChaos, EveryFaultHasOneNameAndTheKillsDiffer) {
  std::set<std::string> names;
  for (int i = 0; i <= static_cast<int>(fault_kind::disk_full); ++i) {
    const auto k = static_cast<fault_kind>(i);
    EXPECT_TRUE(names.insert(to_string(k)).second) << to_string(k);
    EXPECT_EQ(fault_kind_from(to_string(k)), k) << to_string(k);
    if (dsl_name(k) == nullptr) continue;
    std::string warning;
    EXPECT_EQ(dsl_fault_kind(dsl_name(k), &warning), k) << dsl_name(k);
    EXPECT_EQ(warning, "") << dsl_name(k);
  }
  EXPECT_EQ(names.size(), static_cast<size_t>(fault_kind::disk_full) + 1);
  EXPECT_STREQ(to_string(fault_kind::kill), "kill");
  EXPECT_STREQ(to_string(fault_kind::kill_learner), "kill_learner");
  EXPECT_EQ(fault_layer_of(fault_kind::kill), fault_layer::process);
  EXPECT_EQ(fault_layer_of(fault_kind::kill_learner), fault_layer::in_process);
  EXPECT_STREQ(dsl_name(fault_kind::kill), "kill_process");
  EXPECT_STREQ(dsl_name(fault_kind::slow), "slow_process");
  EXPECT_EQ(dsl_name(fault_kind::resume), nullptr);
  EXPECT_EQ(fault_kind_from("nan"), std::nullopt);  // an old DSL spelling, not a name
}

// An experiment file written with the DSL's old fault names keeps its meaning, and each old
// name is reported with its file, line and the name to write instead.
TEST(ConfigChaos, OldFaultNamesStillLoadAndWarnNamingTheNewOne) {
  const std::string text = std::string("experiment { ") + test::k_data +
                           R"(, learners = { count = 3 }, chaos = { events = {
  { at_step = 10, action = "kill", target = 1 },
  { at_step = 20, action = "slow", target = 0, factor = 3 },
  { at_step = 30, action = "nan", target = 2 },
  { at_step = 40, action = "fail", target = 2 },
  { at_step = 50, action = "kill_learner", target = 0 },
} } })";
  auto r = load_string(text, "old.lua", test::repo_options());
  ASSERT_TRUE(r.ok()) << r.error_text();
  const auto& ev = r.experiments[0].chaos.events;
  ASSERT_EQ(ev.size(), 5u);
  EXPECT_EQ(ev[0].action, fault_kind::kill_learner);
  EXPECT_EQ(ev[1].action, fault_kind::slow_learner);
  EXPECT_DOUBLE_EQ(ev[1].factor, 3.0);
  EXPECT_EQ(ev[2].action, fault_kind::nan_step);
  EXPECT_EQ(ev[3].action, fault_kind::fail_step);
  EXPECT_EQ(ev[4].action, fault_kind::kill_learner);
  ASSERT_EQ(r.warnings.size(), 4u) << r.warning_text();  // not for kill_learner
  EXPECT_EQ(r.warnings[0].file, "old.lua");
  EXPECT_EQ(r.warnings[0].line, 2);
  EXPECT_EQ(r.warnings[0].key_path, "chaos.events[1].action");
  EXPECT_NE(r.warnings[0].message.find("write 'kill_learner'"), std::string::npos)
      << r.warnings[0].message;
  EXPECT_NE(r.warnings[0].message.find("'kill_process'"), std::string::npos);
  EXPECT_NE(r.warnings[1].message.find("write 'slow_learner'"), std::string::npos);
  EXPECT_NE(r.warnings[2].message.find("write 'nan_step'"), std::string::npos);
  EXPECT_NE(r.warnings[3].message.find("write 'fail_step'"), std::string::npos);
  EXPECT_NE(r.warning_text().find("warning: old.lua:2: chaos.events[1].action: action 'kill'"),
            std::string::npos)
      << r.warning_text();
  // The resolved form (run directories, a learner node's handshake) uses the new names.
  const auto j = to_json(r.experiments[0]);
  EXPECT_EQ(j["chaos"]["events"][0]["action"], "kill_learner");
  EXPECT_EQ(j["chaos"]["events"][2]["action"], "nan_step");
  load_options o;
  o.check_files = false;
  auto again = load_json(j, o);
  ASSERT_TRUE(again.ok()) << again.error_text();
  EXPECT_TRUE(again.warnings.empty()) << again.warning_text();
  EXPECT_EQ(again.experiments[0].chaos.events[0].action, fault_kind::kill_learner);
}

}  // namespace
}  // namespace dd::config
