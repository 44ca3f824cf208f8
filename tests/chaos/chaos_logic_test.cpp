// tests/chaos/chaos_logic_test.cpp — dd-chaos's pure logic: durations, the nodes file, target
// resolution and picks, the seeded schedule and recovery distributions.
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "runtime/nodes_file.hpp"
#include "tests/support/fresh_dir.hpp"
#include "tools/chaos/actions.hpp"
#include "tools/chaos/common.hpp"
#include "tools/chaos/nodes_file.hpp"
#include "tools/chaos/proc.hpp"
#include "tools/chaos/proxy.hpp"
#include "tools/chaos/runner.hpp"
#include "tools/chaos/schedule.hpp"
#include "tools/chaos/state.hpp"
#include "tools/chaos/targets.hpp"

using namespace dd::chaos;

namespace {

const char* cluster_json = R"({
  "run_id": "5f3a", "launcher": {"pid": 10, "control": "127.0.0.1:7100"},
  "nodes": [
    {"name": "syncer", "role": "syncer", "actors": ["monitor", "evaluator", "owner:0", "owner:1"],
     "pid": 11, "start_time": 100, "argv": ["/bin/dd-node", "syncer"], "listen": "127.0.0.1:7000",
     "advertise": "127.0.0.1:7000", "endpoints": {"chaos": 7200}, "incarnation": 0,
     "log": "/tmp/s.log", "state": "running"},
    {"name": "learner-0", "role": "learner", "actors": ["learner:0", "learner:1"], "pid": 12,
     "start_time": 101, "argv": [], "listen": "", "advertise": "", "endpoints": {"chaos": 0},
     "incarnation": 2, "log": "", "state": "running"},
    {"name": "learner-2", "role": "learner", "actors": ["learner:2"], "pid": 13, "start_time": 102,
     "state": "running"},
    {"name": "learner-3", "role": "learner", "actors": ["learner:3"], "pid": 0, "start_time": 0,
     "state": "held"},
    {"name": "learner-4", "role": "learner", "actors": ["learner:4"], "pid": 15, "start_time": 104,
     "state": "running"}
  ]})";

nodes_file cluster() { return parse_nodes_file(cluster_json, "/run/x/nodes.json"); }

std::vector<std::string> hit_names(const selection& s) {
  std::vector<std::string> out;
  for (const auto& h : s.hits) out.push_back(h.node);
  return out;
}

}  // namespace

TEST(chaos_duration, units_and_errors) {
  EXPECT_DOUBLE_EQ(parse_duration("250ms", "x"), 0.25);
  EXPECT_DOUBLE_EQ(parse_duration("1.5s", "x"), 1.5);
  EXPECT_DOUBLE_EQ(parse_duration("2m", "x"), 120);
  EXPECT_DOUBLE_EQ(parse_duration("3", "x"), 3);
  EXPECT_THROW(parse_duration("-1s", "x"), usage_error);
  EXPECT_THROW(parse_duration("5 parsecs", "x"), usage_error);
  EXPECT_THROW(parse_duration("", "x"), usage_error);
  EXPECT_EQ(format_duration(150), "2m30s");
  EXPECT_EQ(format_duration(0.2), "200ms");
}

TEST(chaos_nodes_file, parses_every_field_and_round_trips) {
  const nodes_file f = cluster();
  ASSERT_EQ(f.nodes.size(), 5u);
  EXPECT_EQ(f.run_id, "5f3a");
  ASSERT_TRUE(f.launcher);
  EXPECT_EQ(f.launcher->control, "127.0.0.1:7100");
  EXPECT_FALSE(f.proxy);
  EXPECT_EQ(f.run_dir, "/run/x");
  EXPECT_EQ(f.nodes[0].chaos_port, 7200);
  EXPECT_EQ(f.nodes[1].incarnation, 2);
  EXPECT_EQ(f.nodes[3].state, "held");
  const nodes_file again = parse_nodes_file(to_json(f).dump(), "/run/x/nodes.json");
  EXPECT_EQ(to_json(again), to_json(f));
}

TEST(chaos_nodes_file, bad_files_name_the_field) {
  auto msg = [](const std::string& text) {
    try {
      parse_nodes_file(text, "F");
    } catch (const chaos_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(msg("{not json").find("F: not valid JSON"), std::string::npos);
  EXPECT_NE(msg(R"({"nodes": 3})").find("F: nodes"), std::string::npos);
  EXPECT_NE(msg(R"({"nodes": [{"name": "a", "role": "boss", "pid": 0}]})").find("nodes[0].role"),
            std::string::npos);
  EXPECT_NE(msg(R"({"nodes": [{"name": "a", "role": "learner", "pid": -4}]})").find("nodes[0].pid"),
            std::string::npos);
  EXPECT_NE(msg(R"({"nodes": [{"name": "a", "role": "learner", "pid": 5}]})")
                .find("nodes[0].start_time: missing"),
            std::string::npos);
  EXPECT_NE(msg(R"({"launcher": {"pid": 1, "control": "nowhere"}, "nodes": []})")
                .find("launcher.control"),
            std::string::npos);
}

// Regression: `dd-node status` listed a node paused with SIGSTOP as `running`. observed_state
// shows "stopped" for a running node whose process is stopped (its start time matching), and the
// file's state otherwise (a reused pid, a node not running).
TEST(chaos_nodes_file, a_stopped_process_is_shown_stopped) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    for (;;) ::pause();
  }
  const auto st = read_proc_stat(child);
  ASSERT_TRUE(st.has_value());
  dd::node_entry n;
  n.name = "learner-0";
  n.pid = child;
  n.start_time = st->start_time;
  n.state = "running";
  EXPECT_EQ(dd::observed_state(n), "running");
  ASSERT_EQ(::kill(child, SIGSTOP), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, WUNTRACED), child);  // stopped now
  ASSERT_TRUE(WIFSTOPPED(status));
  EXPECT_EQ(dd::observed_state(n), "stopped");
  dd::node_entry reused = n;
  reused.start_time = st->start_time + 1;
  EXPECT_EQ(dd::observed_state(reused), "running") << "another process under the same pid";
  dd::node_entry held = n;
  held.state = "held";
  EXPECT_EQ(dd::observed_state(held), "held");
  ::kill(child, SIGKILL);
  ::waitpid(child, &status, 0);
  // Regression: a node killed while the (hand-written) nodes file still says running was shown
  // `running`; its pid is gone from /proc once reaped.
  EXPECT_EQ(dd::observed_state(n), "gone");
  EXPECT_EQ(dd::observed_state(held), "held");
}

// A syncer re-executed from its recorded argv without --resume refused its own unfinished run
// ("holds an unfinished run (no summary.json): continue it with --resume") and exited at once.
TEST(chaos_reexec, a_reexecuted_syncer_resumes_its_run_and_never_overwrites_it) {
  using argv = std::vector<std::string>;
  const std::string bin = "/opt/dd/bin/dd-node";
  const std::pair<argv, argv> table[] = {
      {{bin, "syncer", "x.lua", "--run-dir", "r"},
       {bin, "syncer", "x.lua", "--run-dir", "r", "--resume"}},
      {{bin, "syncer", "x.lua", "--overwrite", "--run-dir", "r"},
       {bin, "syncer", "x.lua", "--run-dir", "r", "--resume"}},
      {{bin, "syncer", "x.lua", "--resume"}, {bin, "syncer", "x.lua", "--resume"}},
      {{"dd-node", "run", "x.lua"}, {"dd-node", "run", "x.lua", "--resume"}},
      // a learner node continues by joining again; other programs are left alone
      {{bin, "learner", "x.lua", "--overwrite"}, {bin, "learner", "x.lua", "--overwrite"}},
      {{"/bin/sleep", "100"}, {"/bin/sleep", "100"}},
      {{"/opt/not-dd-node", "syncer"}, {"/opt/not-dd-node", "syncer"}},
      {{bin}, {bin}},
      {{}, {}}};
  for (const auto& [in, want] : table)
    EXPECT_EQ(reexec_argv(in), want) << ::testing::PrintToString(in);
}

TEST(chaos_targets, actor_target_hits_the_hosting_process_and_names_the_others) {
  const auto s = resolve_targets(cluster(), parse_targets("learner:1"), {});
  ASSERT_EQ(hit_names(s), std::vector<std::string>{"learner-0"});
  EXPECT_EQ(s.hits[0].others, std::vector<std::string>{"learner:0"});
  target_options exact;
  exact.exact = true;
  EXPECT_THROW(resolve_targets(cluster(), parse_targets("learner:1"), exact), chaos_error);
  EXPECT_NO_THROW(resolve_targets(cluster(), parse_targets("learner:2"), exact));
  EXPECT_NO_THROW(resolve_targets(cluster(), parse_targets("node:learner-0"), exact));
}

TEST(chaos_targets, unknown_targets_are_errors_that_list_what_exists) {
  try {
    resolve_targets(cluster(), parse_targets("learner:9"), {});
    FAIL();
  } catch (const chaos_error& e) {
    EXPECT_NE(std::string(e.what()).find("learner:0, learner:1, learner:2"), std::string::npos);
  }
  EXPECT_THROW(resolve_targets(cluster(), parse_targets("node:nobody"), {}), chaos_error);
  EXPECT_THROW(parse_targets("learner:x"), usage_error);
  EXPECT_THROW(parse_targets("gpu:1"), usage_error);
}

TEST(chaos_targets, syncer_protected_unless_named) {
  target_options all;
  all.pick = pick_mode::all;
  all.pick_given = true;
  const auto s = resolve_targets(cluster(), parse_targets("nodes"), all);
  EXPECT_EQ(hit_names(s),
            (std::vector<std::string>{"learner-0", "learner-2", "learner-3", "learner-4"}));
  EXPECT_FALSE(s.notes.empty());
  EXPECT_EQ(hit_names(resolve_targets(cluster(), parse_targets("owner:1"), {})),
            std::vector<std::string>{"syncer"});
  EXPECT_EQ(hit_names(resolve_targets(cluster(), parse_targets("nodes,node:syncer"), all)).size(),
            5u);
  target_options prot = all;
  prot.protect = {"learner:2"};
  EXPECT_EQ(hit_names(resolve_targets(cluster(), parse_targets("learners"), prot)),
            (std::vector<std::string>{"learner-0", "learner-3", "learner-4"}));
  EXPECT_THROW(resolve_targets(cluster(), parse_targets("learner:2"), prot), chaos_error);
}

TEST(chaos_targets, picks_are_seeded_and_sized) {
  EXPECT_EQ(pick_count(pick_mode::one, 4), 1u);
  EXPECT_EQ(pick_count(pick_mode::minority, 4), 1u);
  EXPECT_EQ(pick_count(pick_mode::minority, 5), 2u);
  EXPECT_EQ(pick_count(pick_mode::majority, 4), 3u);
  EXPECT_EQ(pick_count(pick_mode::majority, 5), 3u);
  EXPECT_EQ(pick_count(pick_mode::all, 4), 4u);
  EXPECT_EQ(pick_count(pick_mode::minority, 2), 0u);
  target_options o;
  o.pick = pick_mode::majority;
  o.pick_given = true;
  o.seed = 42;
  const auto a = hit_names(resolve_targets(cluster(), parse_targets("learners"), o));
  const auto b = hit_names(resolve_targets(cluster(), parse_targets("learners"), o));
  EXPECT_EQ(a.size(), 3u);
  EXPECT_EQ(a, b);
  std::set<std::vector<std::string>> seen;
  for (uint64_t seed = 0; seed < 40; ++seed) {
    o.seed = seed;
    seen.insert(hit_names(resolve_targets(cluster(), parse_targets("learners"), o)));
  }
  EXPECT_GT(seen.size(), 1u);  // the seed matters
  // A group defaults to one; named targets default to all.
  EXPECT_EQ(resolve_targets(cluster(), parse_targets("learners"), {}).hits.size(), 1u);
  EXPECT_EQ(resolve_targets(cluster(), parse_targets("learner:2,learner:4"), {}).hits.size(), 2u);
  o.pick = pick_mode::minority;
  EXPECT_THROW(resolve_targets(cluster(), parse_targets("learner:2,learner:4"), o), chaos_error);
}

namespace {

/// Faults of `kinds` on `targets`, `mtbf` s apart on average, each lasting as `recovery` says,
/// over `duration` s, drawn with `seed`, at most `max_concurrent` at once.
schedule_config schedule_of(double mtbf, const std::string& recovery, uint64_t seed,
                            double duration, std::vector<std::string> kinds,
                            std::vector<std::string> targets, int max_concurrent) {
  schedule_config c;
  c.mtbf = mtbf;
  c.recovery = recovery_dist::parse(recovery);
  c.seed = seed;
  c.duration = duration;
  c.kinds = std::move(kinds);
  c.targets = std::move(targets);
  c.max_concurrent = max_concurrent;
  return c;
}

}  // namespace

TEST(chaos_schedule, same_seed_same_schedule) {
  schedule_config c = schedule_of(10, "lognormal:5s,0.5", 7, 600, {"kill", "pause"},
                                  {"learner-0", "learner-1", "learner-2", "learner-3"}, 2);
  c.min_gap = 2;
  const auto a = make_schedule(c);
  const auto b = make_schedule(c);
  ASSERT_GT(a.size(), 20u);
  EXPECT_EQ(a, b);
  c.seed = 8;
  EXPECT_NE(make_schedule(c), a);
  c.seed = 7;
  // Properties: min gap, max concurrent, no target faulted twice at once, inside the horizon.
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_LT(a[i].at, c.duration);
    if (i > 0) {
      EXPECT_GE(a[i].at - a[i - 1].at, c.min_gap - 1e-9);
    }
    int active = 0;
    for (size_t j = 0; j < i; ++j)
      if (a[j].at + a[j].duration > a[i].at) {
        ++active;
        EXPECT_NE(a[j].target, a[i].target);
      }
    EXPECT_LT(active, c.max_concurrent);
  }
}

TEST(chaos_schedule, interarrival_and_recovery_means) {
  const schedule_config c = schedule_of(3, "fixed:0.001s", 1, 30000, {"kill"}, {"a"}, 1);
  const auto s = make_schedule(c);
  const double mean_gap = s.back().at / static_cast<double>(s.size());
  EXPECT_NEAR(mean_gap, 3.0, 0.15);  // ~10000 arrivals: standard error ~0.03
  for (const char* spec : {"exponential:5s", "lognormal:5s,0.5", "weibull:5s,1.5"}) {
    const auto d = recovery_dist::parse(spec);
    chaos_rng rng(3);
    double sum = 0;
    const int n = 20000;
    for (int i = 0; i < n; ++i) sum += d.sample(rng);
    EXPECT_NEAR(sum / n, 5.0, 0.2) << spec;
  }
  EXPECT_THROW(recovery_dist::parse("gauss:5s"), usage_error);
  EXPECT_THROW(recovery_dist::parse("lognormal:5s,-1"), usage_error);
  EXPECT_THROW(recovery_dist::parse("5s"), usage_error);
}

TEST(chaos_proxy_spec, link_specs) {
  const auto l = parse_link_spec("learner-0=127.0.0.1:0->127.0.0.1:7000");
  EXPECT_EQ(l.name, "learner-0");
  EXPECT_EQ(l.listen.port, 0);
  EXPECT_EQ(l.target.port, 7000);
  EXPECT_THROW(parse_link_spec("learner-0=127.0.0.1:0"), usage_error);
  EXPECT_THROW(parse_link_spec("x=127.0.0.1:1->127.0.0.1:0"), usage_error);
  EXPECT_THROW(parse_link_spec("x=127.0.0.1:99999->127.0.0.1:5"), usage_error);
}

namespace {
std::string write_scenario(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "dd_chaos_scenario_" + name + ".lua";
  std::ofstream(path) << text;
  return path;
}
}  // namespace

// A scenario that never finishes (here a pattern that backtracks for ever inside Lua's C
// matcher, where no instruction hook fires) is killed at --script-timeout instead of hanging
// dd-chaos; a scenario cannot reach os/io (it describes faults, it does not run commands).
TEST(chaos_scenario, a_hanging_scenario_is_stopped_at_the_script_timeout) {
  const auto path = write_scenario(
      "hang",
      "local s = string.rep('a', 40) .. 'b'\ns:find(string.rep('a*', 30) .. 'c')\nreturn {}\n");
  const auto t0 = std::chrono::steady_clock::now();
  try {
    dd::chaos::read_scenario(path, 1.0);
    FAIL() << "a hanging scenario was read";
  } catch (const dd::chaos::chaos_error& e) {
    EXPECT_NE(std::string(e.what()).find("did not finish within 1 s"), std::string::npos)
        << e.what();
  }
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(took, 5.0);
}

TEST(chaos_scenario, a_scenario_has_no_os_or_io) {
  const auto path = write_scenario("os", "os.execute('true')\nreturn {}\n");
  try {
    dd::chaos::read_scenario(path, 5.0);
    FAIL() << "os.execute was reachable";
  } catch (const dd::chaos::chaos_error& e) {
    EXPECT_NE(std::string(e.what()).find("'os'"), std::string::npos) << e.what();
  }
  const auto ok =
      write_scenario("ok", "return {{at = 1, kind = 'pause', target = 'learner:1', for_ = 2}}\n");
  const auto faults = dd::chaos::read_scenario(ok, 5.0);
  ASSERT_EQ(faults.size(), 1u);
  EXPECT_DOUBLE_EQ(faults[0].at, 1.0);
  EXPECT_EQ(faults[0].spec.kind, "pause");
}

// Issue 11 (3): the launcher's chaos session ran its final heal while the syncer it had killed
// (held 5 s) was still restarting, and released every hold it found — one placed by another
// dd-chaos (a longer hold, by hand) would have been cut short. A session's final heal
// (own_holds) releases only its own holds that still run: another invocation's hold stays in
// the state file and is not released, and the session's own hold that already ended is not
// released either (the launcher restarts that node by itself). A plain heal releases every hold.
// The launcher's control address refuses connections here, so any release that is tried fails.
TEST(chaos_heal, a_sessions_final_heal_releases_only_its_own_running_holds) {
  namespace fs = std::filesystem;
  const fs::path dir = dd::test::fresh_dir("dd_chaos_heal_own_holds_test");
  // The launcher's pid: this test process (alive), or one that has exited (below).
  auto write_nodes = [&](int launcher_pid) {
    std::ofstream(dir / "nodes.json") << R"({
    "run_id": "5f3a", "launcher": {"pid": )" +
                                             std::to_string(launcher_pid) +
                                             R"(, "control": "127.0.0.1:1"},
    "nodes": [
      {"name": "syncer", "role": "syncer", "actors": ["monitor"], "pid": 0, "start_time": 0,
       "state": "down"},
      {"name": "learner-3", "role": "learner", "actors": ["learner:3"], "pid": 0,
       "start_time": 0, "state": "held"}]})";
  };
  write_nodes(static_cast<int>(::getpid()));
  chaos_env env;
  env.nodes = read_nodes_file((dir / "nodes.json").string());
  env.run_dir = dir.string();
  std::FILE* sink = std::fopen("/dev/null", "w");
  ASSERT_NE(sink, nullptr);
  env.out = sink;
  const state_store store(dir.string());
  pending_revert theirs;
  theirs.id = "hold-learner-3-1";
  theirs.kind = "hold";
  theirs.node = "learner-3";
  theirs.until = wall_now() + 600;
  store.add(theirs);
  pending_revert mine;
  mine.id = "hold-syncer-2";
  mine.kind = "hold";
  mine.node = "syncer";
  mine.until = wall_now() - 0.5;  // ran its course: the launcher is restarting the syncer
  store.add(mine);
  env.placed_holds.insert(mine.id);

  const auto own = heal(env, false, true);
  EXPECT_TRUE(own["ok"].get<bool>()) << own.dump();
  bool left_alone = false, ended = false;
  for (const auto& a : own["actions"]) {
    const std::string s = a.get<std::string>();
    EXPECT_EQ(s.find("launcher `release"), std::string::npos) << s;
    if (s.find("node learner-3: held by another dd-chaos") != std::string::npos) left_alone = true;
    if (s.find("node syncer: this session's hold ended") != std::string::npos) ended = true;
  }
  EXPECT_TRUE(left_alone) << own.dump();
  EXPECT_TRUE(ended) << own.dump();
  const auto kept = store.list();
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(kept[0].id, theirs.id);

  // A plain `dd-chaos heal` releases every hold (here: tried, and refused by nobody listening).
  const auto all = heal(env, false, false);
  EXPECT_FALSE(all["ok"].get<bool>()) << all.dump();
  EXPECT_NE(all.dump().find("launcher `release learner-3` failed"), std::string::npos)
      << all.dump();
  EXPECT_TRUE(store.list().empty());

  // A launcher that has exited (the run is over) holds nothing, so
  // there is nothing to release and the heal succeeds (it exited 1 on the gone control socket).
  const pid_t gone = ::fork();
  if (gone == 0) ::_exit(0);
  ASSERT_GT(gone, 0);
  ::waitpid(gone, nullptr, 0);
  write_nodes(static_cast<int>(gone));
  env.nodes = read_nodes_file((dir / "nodes.json").string());
  store.add(theirs);
  const auto after = heal(env, false, false);
  EXPECT_TRUE(after["ok"].get<bool>()) << after.dump();
  EXPECT_NE(after.dump().find("has exited, and its hold with it"), std::string::npos)
      << after.dump();
  EXPECT_TRUE(store.list().empty());
  std::fclose(sink);
  fs::remove_all(dir);
}
