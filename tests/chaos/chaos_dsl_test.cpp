// tests/chaos/chaos_dsl_test.cpp — an experiment's chaos section as a dd-chaos session
// (tools/chaos/dsl.hpp): process and network events at their times with their knobs, in-process
// kinds left to the nodes, whole-cluster random faults drawn by make_schedule (same seed, same
// faults), loader errors passed on with file:line; and the message kinds' CLI spellings.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <utility>

#include "tools/chaos/common.hpp"
#include "tools/chaos/dsl.hpp"
#include "tools/chaos/msg.hpp"

using namespace dd::chaos;

namespace {

namespace fs = std::filesystem;

const char* nodes_json = R"({
  "run_id": "5f3a", "launcher": {"pid": 10, "control": "127.0.0.1:7100"},
  "nodes": [
    {"name": "syncer", "role": "syncer", "actors": ["monitor", "evaluator", "owner:0", "owner:1"],
     "pid": 11, "start_time": 100, "endpoints": {"chaos": 7200}, "state": "running"},
    {"name": "learner-0", "role": "learner", "actors": ["learner:0", "learner:2"], "pid": 12,
     "start_time": 101, "endpoints": {"chaos": 7201}, "state": "running"},
    {"name": "learner-1", "role": "learner", "actors": ["learner:1"], "pid": 13, "start_time": 102,
     "endpoints": {"chaos": 7202}, "state": "running"}
  ]})";

std::string write(const std::string& name, const std::string& chaos) {
  const fs::path dir = fs::path(::testing::TempDir()) / "dd_chaos_dsl";
  fs::create_directories(dir);
  const fs::path f = dir / name;
  std::ofstream(f) << "experiment {\n"
                      "  name = 'x',\n"
                      "  data = { file = '" DD_DATA_DIR
                      "/tinyshakespeare/input.txt' },\n"
                      "  learners = { count = 3 },\n"
                      "  budget = { seconds = 100 },\n"
                      "  inner = { decay_steps = 1000 },\n"
                      "  chaos = " +
                          chaos +
                          ",\n"
                          "}\n";
  return f.string();
}

}  // namespace

TEST(chaos_dsl, process_and_network_events_become_timed_faults) {
  const auto nodes = parse_nodes_file(nodes_json, "/run/x/nodes.json");
  const std::string file = write("events.lua", R"({ events = {
      { at_time = 5, action = "pause", target = "learner:1", duration = 10 },
      { at_fraction = 0.5, action = "slow_process", target = 2, duration = 20, duty = 0.25, period = 0.4 },
      { at_time = 7, action = "nan", target = 1 },
      { at_time = 8, action = "partition", target = "learner:0", duration = 20 },
      { at_time = 9, action = "latency", target = "learners", ms = 200, jitter = 50, dir = "up", duration = 3 },
      { at_time = 10, action = "kill_process", target = "node:syncer", duration = 5 },
  } })");
  const auto s = read_experiment_chaos(file, {}, {}, nodes);
  ASSERT_EQ(s.faults.size(), 5u);  // the nan event is the nodes' own
  EXPECT_DOUBLE_EQ(s.faults[0].at, 5);
  EXPECT_EQ(s.faults[0].spec.kind, "pause");
  EXPECT_EQ(s.faults[0].spec.target, "learner:1");
  EXPECT_DOUBLE_EQ(s.faults[0].spec.duration, 10);
  EXPECT_DOUBLE_EQ(s.faults[1].at, 50);  // half of the 100 s budget
  EXPECT_EQ(s.faults[1].spec.kind, "slow");
  EXPECT_EQ(s.faults[1].spec.target, "learner:2");
  EXPECT_DOUBLE_EQ(s.faults[1].spec.duty, 0.25);
  EXPECT_DOUBLE_EQ(s.faults[1].spec.period, 0.4);
  EXPECT_EQ(s.faults[2].spec.kind, "blackhole");
  EXPECT_EQ(s.faults[2].spec.net["dir"], "both");
  EXPECT_EQ(s.faults[3].spec.kind, "latency");
  EXPECT_EQ(s.faults[3].spec.net["ms"], 200.0);
  EXPECT_EQ(s.faults[3].spec.net["jitter"], 50.0);
  EXPECT_EQ(s.faults[3].spec.net["dir"], "up");
  EXPECT_EQ(s.faults[4].spec.kind, "kill");
  EXPECT_EQ(s.faults[4].spec.target, "node:syncer");
  EXPECT_EQ(s.info["experiment"], "x");
  EXPECT_EQ(s.info["events"], 5);
}

// Under dd-node launch (nodes.json "message_faults": "endpoint") the message kinds are the
// session's too: time-keyed ones at their time, step-keyed ones at once with the step the node
// arms them for; kill, slow and kill_owner stay the nodes' own.
TEST(chaos_dsl, message_events_go_through_the_endpoints_when_the_nodes_leave_them) {
  std::string text = nodes_json;
  text.replace(text.find("\"nodes\""), 7, "\"message_faults\": \"endpoint\", \"nodes\"");
  const auto nodes = parse_nodes_file(text, "/run/x/nodes.json");
  ASSERT_TRUE(nodes.message_faults_via_endpoint);
  EXPECT_EQ(to_json(nodes)["message_faults"], "endpoint");
  const std::string file = write("messages.lua", R"({ events = {
      { at_time = 3, action = "drop_push", target = 1 },
      { at_step = 40, action = "nan", target = 2 },
      { at_time = 4, action = "delay_broadcast", target = 0, delay = 0.3, duration = 2 },
      { at_fraction = 0.1, action = "dup_push", target = 1, count = 3 },
      { at_time = 6, action = "kill", target = 0 },
      { at_step = 9, action = "delay_push", target = 0, delay = 0.5 },
  } })");
  const auto s = read_experiment_chaos(file, {}, {}, nodes);
  ASSERT_EQ(s.faults.size(), 5u);  // kill (in-process) stays the node's
  EXPECT_EQ(s.info["message_events"], 5);
  const auto& drop = s.faults[0];
  EXPECT_EQ(drop.spec.kind, "drop_push");
  EXPECT_EQ(drop.spec.target, "learner:1");
  EXPECT_DOUBLE_EQ(drop.at, 3);
  EXPECT_EQ(drop.spec.net["count"], 1);  // one push, as the node would drop
  const auto& nan = s.faults[1];
  EXPECT_EQ(nan.spec.kind, "nan_step");
  EXPECT_EQ(nan.spec.target, "learner:2");
  EXPECT_DOUBLE_EQ(nan.at, 0);  // sent at once, armed for the step
  EXPECT_EQ(nan.spec.net["at_step"], 40.0);
  EXPECT_EQ(nan.spec.net["count"], 1);
  const auto& delay = s.faults[2];
  EXPECT_EQ(delay.spec.kind, "delay_broadcast");
  EXPECT_DOUBLE_EQ(delay.spec.duration, 2);
  EXPECT_EQ(delay.spec.net["ms"], 300.0);
  EXPECT_FALSE(delay.spec.net.contains("count"));
  const auto& dup = s.faults[3];
  EXPECT_DOUBLE_EQ(dup.at, 10);  // 0.1 of the 100 s budget
  EXPECT_EQ(dup.spec.net["count"], 3);
  const auto& dp = s.faults[4];
  EXPECT_EQ(dp.spec.kind, "delay_push");
  EXPECT_EQ(dp.spec.net["at_step"], 9.0);
  EXPECT_EQ(dp.spec.net["ms"], 500.0);
  EXPECT_EQ(dp.spec.net["count"], 1);
  for (const auto& f : s.faults) EXPECT_NO_THROW(check_msg_spec(f.spec)) << f.spec.kind;
  // Without the field the nodes apply them themselves: none is the session's.
  const auto own = read_experiment_chaos(file, {}, {}, parse_nodes_file(nodes_json, "n.json"));
  EXPECT_TRUE(own.faults.empty());
}

TEST(chaos_dsl, cluster_random_faults_are_drawn_from_the_seed) {
  const auto nodes = parse_nodes_file(nodes_json, "/run/x/nodes.json");
  const std::string file = write("random.lua", R"({ random = {
      cluster_mtbf_seconds = 10, kinds = { "kill_process", "pause" }, min_gap_seconds = 2,
      max_concurrent = 1, recovery = { dist = "weibull", mean = 3, shape = 2 }, seed = 99 } })");
  const auto a = read_experiment_chaos(file, {}, {}, nodes);
  const auto b = read_experiment_chaos(file, {}, {}, nodes);
  ASSERT_GE(a.faults.size(), 3u);  // 100 s at one per 10 s (minus skips)
  ASSERT_EQ(a.faults.size(), b.faults.size());
  std::set<std::string> kinds, targets;
  double prev = -1;
  for (size_t i = 0; i < a.faults.size(); ++i) {
    EXPECT_DOUBLE_EQ(a.faults[i].at, b.faults[i].at);
    EXPECT_EQ(a.faults[i].spec.kind, b.faults[i].spec.kind);
    EXPECT_EQ(a.faults[i].spec.target, b.faults[i].spec.target);
    EXPECT_DOUBLE_EQ(a.faults[i].spec.duration, b.faults[i].spec.duration);
    EXPECT_LT(a.faults[i].at, 100.0);
    if (prev >= 0) {
      EXPECT_GE(a.faults[i].at - prev, 2.0);
    }
    prev = a.faults[i].at;
    kinds.insert(a.faults[i].spec.kind);
    targets.insert(a.faults[i].spec.target);
  }
  for (const auto& k : kinds) EXPECT_TRUE(k == "kill" || k == "pause") << k;
  for (const auto& t : targets) EXPECT_TRUE(t == "node:learner-0" || t == "node:learner-1") << t;
  EXPECT_EQ(a.info["seed"], 99);
  EXPECT_EQ(a.info["recovery"], "weibull:3s,2");
  // --set changes the draw: another seed, another schedule.
  const auto c = read_experiment_chaos(file, {"chaos.random.seed=100"}, {}, nodes);
  EXPECT_EQ(c.info["seed"], 100);
  bool differs = c.faults.size() != a.faults.size();
  for (size_t i = 0; !differs && i < a.faults.size(); ++i)
    differs = c.faults[i].at != a.faults[i].at;
  EXPECT_TRUE(differs);
}

TEST(chaos_dsl, loader_errors_name_the_file_and_line) {
  const auto nodes = parse_nodes_file(nodes_json, "/run/x/nodes.json");
  const std::string file = write("bad.lua", R"({ events = {
      { at_step = 5, action = "pause", target = 1 },
  } })");
  try {
    read_experiment_chaos(file, {}, {}, nodes);
    FAIL() << "loaded";
  } catch (const chaos_error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.lua:8: chaos.events[1].at_step: action 'pause' is "
                                         "fired by dd-chaos from outside the nodes"),
              std::string::npos)
        << e.what();
  }
}

// Issue 11: the disk kinds in the chaos section, with their knobs and target checks.
TEST(chaos_dsl, disk_events_become_timed_faults) {
  const auto nodes = parse_nodes_file(nodes_json, "/run/x/nodes.json");
  const std::string file = write("disk.lua", R"({ events = {
      { at_time = 3, action = "disk_truncate", target = "owner:0" },
      { at_time = 4, action = "disk_corrupt", target = "owner:1", count = 8, seed = 5 },
      { at_time = 6, action = "disk_full", target = "node:learner-0", duration = 2 },
  } })");
  const auto s = read_experiment_chaos(file, {}, {}, nodes);
  ASSERT_EQ(s.faults.size(), 3u);
  EXPECT_EQ(s.faults[0].spec.kind, "disk_truncate");
  EXPECT_EQ(s.faults[0].spec.target, "owner:0");
  EXPECT_DOUBLE_EQ(s.faults[0].at, 3);
  EXPECT_EQ(s.faults[1].spec.kind, "disk_corrupt");
  EXPECT_EQ(s.faults[1].spec.count, 8);
  EXPECT_EQ(s.faults[1].spec.picks.seed, 5u);
  EXPECT_TRUE(s.faults[1].spec.net.empty());
  EXPECT_EQ(s.faults[2].spec.kind, "disk_full");
  EXPECT_EQ(s.faults[2].spec.target, "node:learner-0");
  EXPECT_DOUBLE_EQ(s.faults[2].spec.duration, 2);
  // Wrong targets and knobs are the loader's errors, with the file's line.
  for (const auto& [events, want] : std::vector<std::pair<std::string, std::string>>{
           {R"({ at_time = 3, action = "disk_truncate", target = "learner:1" })",
            "action 'disk_truncate' needs one target \"owner:N\" (got 'learner:1')"},
           {R"({ at_time = 3, action = "disk_full", target = "owner:0", duration = 2 })",
            "action 'disk_full' needs one target \"node:NAME\""},
           {R"({ at_time = 3, action = "disk_corrupt", target = "owner:0", duration = 2 })",
            "does not apply to action 'disk_corrupt'"},
           {R"({ at_time = 3, action = "disk_truncate", target = "owner:0", seed = 2 })",
            "applies only to action 'disk_corrupt'"},
           {R"({ at_step = 3, action = "disk_truncate", target = "owner:0" })",
            "fired by dd-chaos from outside the nodes"}}) {
    const std::string bad = write("disk_bad.lua", "{ events = {\n" + events + ",\n} }");
    try {
      read_experiment_chaos(bad, {}, {}, nodes);
      ADD_FAILURE() << "loaded: " << events;
    } catch (const chaos_error& e) {
      EXPECT_NE(std::string(e.what()).find("disk_bad.lua:8: chaos.events[1]."), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
}

TEST(chaos_msg, cli_names_map_to_the_tape_kinds) {
  using names = std::pair<const char*, const char*>;
  for (const auto& [cli, kind] :
       {names{"drop-push", "drop_push"}, names{"reorder-broadcast", "reorder_broadcast"},
        names{"nan", "nan_step"}, names{"fail", "fail_step"},
        names{"corrupt_push", "corrupt_push"}})
    EXPECT_EQ(msg_kind_from_cli(cli), kind) << cli;
  EXPECT_THROW(msg_kind_from_cli("explode"), usage_error);
  EXPECT_TRUE(is_msg_kind("dup_broadcast"));
  EXPECT_FALSE(is_msg_kind("pause"));
  // The DSL's in-process kill and slow are not dd-chaos's process kill and slow.
  for (const auto& [action, kind] :
       {names{"kill_process", "kill"}, names{"partition", "blackhole"},
        names{"close_after", "close_after"}, names{"disk_full", "disk_full"}, names{"nan", ""},
        names{"kill", ""}, names{"slow", ""}, names{"slow_process", "slow"}})
    EXPECT_EQ(chaos_kind_of_action(action), kind) << action;
  EXPECT_EQ(msg_kind_of_action("nan"), "nan_step");
  EXPECT_EQ(msg_kind_of_action("drop_push"), "drop_push");
  EXPECT_EQ(msg_kind_of_action("kill"), "");
}
