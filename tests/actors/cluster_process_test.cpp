// Multi-process clusters on loopback, as users run them: `dd-node launch` starts a syncer
// process and learner processes of a tiny experiment (1-layer GPT, 3 learners) over real TCP,
// and the test kills real processes (SIGKILL) and black-holes a real link (the dd-chaos fault
// proxy), then checks what the run directory says happened:
//   - a killed learner process is started again, rejoins with a new incarnation and contributes
//     to later merges;
//   - a killed syncer is started again on the same port with --resume; the learners keep
//     stepping during the outage; no version of a fragment repeats; the restored owners start
//     from the newest merged version (checkpoint.every_versions = 1); the run completes;
//   - a learner whose link is black-holed for 20 s rejoins within the backoff cap + 2 s of the
//   heal;
//   - a learner process paused 4 s (SIGSTOP/SIGCONT) is live again within a few seconds of the
//     SIGCONT and its pushes are merged again (they once went to dead proxies of the owners);
//   - learners that finish their budget while the syncer is held down keep their leaves, rejoin
//     the resumed syncer and leave, so the run completes with every step counted;
//   - a syncer without its frame guard has no tensor channel, and the run completes on CAF.
// Each takes 20-45 s (RUN_SERIAL: they use every core). Timing bounds are sanity bounds; the
// measured times are printed.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/actors/process_support.hpp"
#include "tests/support/tiny_lua.hpp"

namespace {

namespace fs = std::filesystem;
using namespace dd::test;
using nlohmann::json;

double wall_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

/// A tiny experiment: 3 learners, 2 fragments, H = 4, checkpoints every version.
std::string tiny(const std::string& budget) {
  dd::test::tiny_lua t;
  t.budget = budget;
  return t.text();
}

fs::path workdir(const std::string& name, const std::string& budget) {
  const fs::path dir = dd::test::fresh_dir("dd_cluster_" + name);
  std::ofstream(dir / "tiny.lua") << tiny(budget);
  return dir;
}

json nodes_file(const fs::path& run) {
  try {
    return json::parse(text(run / "nodes.json"));
  } catch (...) {
    return json();
  }
}

/// The pid of `node` once nodes.json lists it running, waiting up to 10 s (0 if it never does):
/// the launcher rewrites the file on every start and state change, so a reader can come between
/// a node's join event and the rewrite that lists it (one cluster-label run failed its first
/// ASSERT_GT(pid, 0) 1.4 s in).
int pid_of(const fs::path& run, const std::string& node) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  do {
    auto n = nodes_file(run);
    if (n.is_object())
      for (const auto& x : n["nodes"])
        if (x["name"] == node && x["state"] == "running") return x["pid"].get<int>();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  } while (std::chrono::steady_clock::now() < end);
  return 0;
}

/// A tiny run under `dd-node launch` (launch_until_joined).
struct tiny_run {
  fs::path dir;      ///< its work directory
  fs::path run;      ///< its run directory, dir / "run"
  pid_t launch = 0;  ///< the launcher
};

/// `dd-node launch` (with `flags`) of the tiny run with `budget` in work directory `name`, until
/// all 3 learners joined and `merges` merges are done.
void launch_until_joined(const std::string& name, const std::string& budget,
                         const std::vector<std::string>& flags, size_t merges, tiny_run& r) {
  r.dir = workdir(name, budget);
  r.run = r.dir / "run";
  r.launch = launch_tiny(r.dir, flags);
  const fs::path events_file = r.run / "events.jsonl";
  ASSERT_TRUE(wait_events(events_file, "join", 3, 30)) << text(r.dir / "launch.out");
  if (merges > 0) {
    ASSERT_TRUE(wait_events(events_file, "merge", merges, 30));
  }
}

/// launch_until_joined with a dead syncer restarted after 2 s, until 20 merges are done.
void launch_until_merging(const std::string& name, const std::string& budget, tiny_run& r) {
  launch_until_joined(name, budget, {"--syncer-restart-delay", "2"}, 20, r);
}

/// Kills `node`'s process (SIGKILL) once the nodes file lists it running.
void kill_node(const fs::path& run, const std::string& node) {
  const int victim = pid_of(run, node);
  ASSERT_GT(victim, 0) << node;
  ASSERT_EQ(::kill(victim, SIGKILL), 0) << node;
}

/// Whether each of `learners` learners has a row of its own in learner_loss.csv within `seconds`.
bool every_learner_stepped(const fs::path& run, size_t learners, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  std::set<std::string> stepped;
  while (true) {
    std::istringstream rows(text(run / "learner_loss.csv"));
    std::string row;
    std::getline(rows, row);  // header: wall_time,learner,...
    while (std::getline(rows, row)) {
      const auto a = row.find(',');
      const auto b = row.find(',', a + 1);
      if (a != std::string::npos && b != std::string::npos)
        stepped.insert(row.substr(a + 1, b - a - 1));
    }
    if (stepped.size() >= learners) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

/// Versions of each fragment's merges never repeat and only increase, across the whole file
/// (both parts of a resumed run).
void expect_versions_increase(const std::vector<json>& evs) {
  std::map<int, uint64_t> last;
  for (const auto& e : evs) {
    if (e["event"] != "merge") continue;
    const int p = e["fragment"].get<int>();
    const uint64_t v = e["version"].get<uint64_t>();
    if (last.count(p) != 0) {
      EXPECT_GT(v, last[p]) << "fragment " << p << " repeated a version";
    }
    last[p] = v;
  }
  EXPECT_FALSE(last.empty());
}

}  // namespace

TEST(cluster_process, a_killed_learner_process_is_started_again_and_contributes_again) {
  tiny_run cluster;
  ASSERT_NO_FATAL_FAILURE(launch_until_joined("kill_learner", "{ seconds = 14 }", {}, 0, cluster));
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const int victim = pid_of(cluster.run, "learner-1");
  ASSERT_GT(victim, 0);
  const double killed_at = wall_now();
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  EXPECT_EQ(wait_for(cluster.launch, 60), 0) << text(cluster.dir / "launch.out");
  const auto evs = events(cluster.run / "events.jsonl");
  double rejoined_at = -1;
  for (const auto& e : evs)
    if (e["event"] == "rejoin" && e["learner"] == 1 && e["incarnation"] == 1 &&
        !e["live"].get<bool>())
      rejoined_at = e["time"].get<double>();
  ASSERT_GT(rejoined_at, 0) << "learner 1 never rejoined";
  std::printf("learner process killed -> rejoined in %.2f s\n", rejoined_at - killed_at);
  EXPECT_LT(rejoined_at - killed_at, 10.0);
  size_t merged_after = 0;
  for (const auto& e : evs)
    if (e["event"] == "merge" && e["time"].get<double>() > rejoined_at)
      for (const auto& c : e["contributors"])
        if (c["learner"] == 1 && c["incarnation"] == 1) ++merged_after;
  EXPECT_GE(merged_after, 1u) << "the restarted learner never contributed to a merge";
  const auto summary = json::parse(text(cluster.run / "summary.json"));
  EXPECT_GE(summary["learner_restarts"].get<int>(), 1);
  EXPECT_GT(summary["tokens"].get<uint64_t>(), 0u);
  auto nodes = nodes_file(cluster.run);
  for (const auto& n : nodes["nodes"])
    if (n["name"] == "learner-1") {
      EXPECT_EQ(n["incarnation"], 1);
    }
  expect_versions_increase(evs);
}

// A learner node started again on the same run directory appends to its own events.jsonl (it
// once truncated it, keeping only the new process's lines), and the syncer's forwarded copy
// holds both processes' lines once each (the forwarder's offsets are per process stream).
TEST(cluster_process, a_restarted_learner_node_appends_to_its_own_events_file) {
  tiny_run cluster;
  ASSERT_NO_FATAL_FAILURE(launch_until_joined("append_events", "{ seconds = 40 }", {}, 0, cluster));
  const fs::path own = cluster.run / "nodes" / "learner-1" / "events.jsonl";
  const fs::path copy = cluster.run / "nodes" / "learner-1.events.jsonl";
  ASSERT_TRUE(wait_events(own, "node_start", 1, 10)) << text(own);
  // Killed once its first lines were forwarded (a SIGKILL loses the lines not sent yet).
  ASSERT_TRUE(wait_events(copy, "node_start", 1, 10)) << text(copy);
  const std::string first_process = text(own);
  ASSERT_NO_FATAL_FAILURE(kill_node(cluster.run, "learner-1"));
  EXPECT_TRUE(wait_events(own, "node_start", 2, 30)) << text(own);
  EXPECT_TRUE(wait_events(copy, "node_start", 2, 10)) << text(copy);
  ::kill(cluster.launch, SIGINT);
  EXPECT_EQ(wait_for(cluster.launch, 60), 130) << text(cluster.dir / "launch.out");
  const std::string all = text(own);
  EXPECT_EQ(all.substr(0, first_process.size()), first_process);
  EXPECT_EQ(count_events(own, "node_start"), 2u);
  EXPECT_EQ(count_events(copy, "node_start"), 2u);
  // Every forwarded line once, and each one of the node's own lines.
  std::set<std::string> own_lines, seen;
  std::istringstream a(all), c(text(copy));
  for (std::string line; std::getline(a, line);) own_lines.insert(line);
  size_t forwarded = 0;
  for (std::string line; std::getline(c, line); ++forwarded) {
    EXPECT_TRUE(seen.insert(line).second) << "forwarded twice: " << line;
    EXPECT_EQ(own_lines.count(line), 1u) << "not in the node's own file: " << line;
  }
  EXPECT_GT(forwarded, 2u);
}

TEST(cluster_process, a_killed_syncer_resumes_on_its_port_and_the_learners_never_stop) {
  // A budget the learners cannot spend during the outage even on a loaded machine (with 1.5M
  // tokens a learner once reached its last step while the syncer was away and left without a
  // syncer_back).
  tiny_run cluster;
  ASSERT_NO_FATAL_FAILURE(launch_until_merging("kill_syncer", "{ tokens = 4000000 }", cluster));
  // Every learner has stepped (a row of its own in learner_loss.csv) before the kill: a learner
  // that (re)joined just before it has no model yet and could not step during the outage (seen
  // under load, where a 1 s connection timeout can drop a link and a learner rejoins late).
  ASSERT_TRUE(every_learner_stepped(cluster.run, 3, 30))
      << "not every learner stepped before the kill";
  ASSERT_NO_FATAL_FAILURE(kill_node(cluster.run, "syncer"));
  EXPECT_EQ(wait_for(cluster.launch, 90), 0) << text(cluster.dir / "launch.out");
  const auto evs = events(cluster.run / "events.jsonl");
  // The same port both times.
  std::vector<int> ports;
  for (const auto& e : evs)
    if (e["event"] == "listening") ports.push_back(e["port"].get<int>());
  ASSERT_EQ(ports.size(), 2u);
  EXPECT_EQ(ports[0], ports[1]);
  // No merged version lost: each restored owner starts at the newest version merged before.
  std::map<int, uint64_t> before;
  bool resumed = false;
  for (const auto& e : evs) {
    if (e["event"] == "resume") resumed = true;
    if (!resumed && e["event"] == "merge")
      before[e["fragment"].get<int>()] = e["version"].get<uint64_t>();
    if (resumed && e["event"] == "owner_restored") {
      // At least the newest version whose merge was logged (a version checkpointed just before
      // the kill may not have reached events.jsonl yet: then the restored one is newer).
      EXPECT_GE(e["version"].get<uint64_t>(), before[e["fragment"].get<int>()])
          << "fragment " << e["fragment"] << " lost merged versions";
    }
  }
  EXPECT_TRUE(resumed);
  expect_versions_increase(evs);
  // Every learner kept stepping while the syncer was down, and rejoined.
  for (int k = 0; k < 3; ++k) {
    const auto node =
        events(cluster.run / "nodes" / ("learner-" + std::to_string(k)) / "events.jsonl");
    json lost, back;
    for (const auto& e : node) {
      if (e["event"] == "syncer_lost" && lost.is_null()) lost = e;
      if (e["event"] == "syncer_back" && back.is_null()) back = e;
    }
    ASSERT_FALSE(lost.is_null()) << "learner-" << k;
    ASSERT_FALSE(back.is_null()) << "learner-" << k;
    std::printf("learner-%d: syncer out for %.2f s; steps %s -> %s\n", k,
                back["time"].get<double>() - lost["time"].get<double>(),
                lost["steps"].dump().c_str(), back["steps"].dump().c_str());
    for (auto& [id, step] : lost["steps"].items())
      EXPECT_GT(back["steps"][id].get<uint64_t>(), step.get<uint64_t>()) << "learner " << id;
  }
  const auto summary = json::parse(text(cluster.run / "summary.json"));
  EXPECT_TRUE(summary.value("resumed", false));
  EXPECT_EQ(summary.value("parts", 0), 2);
  EXPECT_GE(summary["tokens"].get<uint64_t>(), 1500000u);
  // summary.json counts the merges of both parts, not of the last one.
  size_t merges = 0;
  for (const auto& e : evs)
    if (e["event"] == "merge") ++merges;
  EXPECT_EQ(summary["merges"].get<size_t>(), merges);
  // Every learner rejoined the restarted syncer live while stepping; each
  // of its steps is counted once (also the step it makes while its rejoin is in flight): tokens =
  // steps × batch 4 × context 32, per learner and in summary.json.
  const auto record = json::parse(text(cluster.run / "monitor.json"));
  uint64_t tokens = 0;
  for (const auto& l : record["learners"]) {
    const uint64_t t =
        l["tokens_before"].get<uint64_t>() + l["tokens_this_incarnation"].get<uint64_t>();
    EXPECT_EQ(t, l["step"].get<uint64_t>() * 4u * 32u) << "learner " << l["learner"];
    tokens += t;
  }
  EXPECT_EQ(summary["tokens"].get<uint64_t>(), tokens);
}

// Issue 24 items 2 and 4 (acceptance). A syncer killed again within about 2 s of the learners'
// live rejoin (dd-node launch starts it again after 2 s) lost 7.7% and 12.6% of the run's tokens
// in two of three runs — every learner reached its last step, summary.json counted fewer,
// learner_loss.csv's tokens went backwards, exit 0, every report invariant valid — and
// summary.json's uptime disagreed with the report's global downtime. Here the syncer is killed,
// then killed again 0.2 s after all three learners rejoined it live, three times: every token
// is counted (summary.json = 3 × steps × batch 4 × context 32, monitor.json and every
// learner_loss.csv row = step × 128, never backwards), `dd-chaos report` says tokens_match_steps
// valid, and summary.json's uptime is the report's (one rule, one source; K = 1 here, so also
// 1 − global downtime / observed time).
TEST(cluster_process, three_syncer_kills_right_after_each_rejoin_lose_no_token) {
  // Long enough that the learners are still stepping at the third kill (they step on through
  // every outage): 12000 steps, each made 3 times its time (learners.speed), so an idle
  // machine's 1500 steps a second per learner becomes about 500 — about 24 s against about 12 s
  // for three outages and rejoins; a loaded one takes longer (the wait below allows 400 s).
  constexpr uint64_t steps = 12000;
  tiny_run cluster;
  ASSERT_NO_FATAL_FAILURE(launch_until_joined(
      "kill_syncer_thrice", "{ steps = " + std::to_string(steps) + " }",
      {"--syncer-restart-delay", "2", "--set", "learners.speed={3, 3, 3}"}, 0, cluster));
  ASSERT_TRUE(every_learner_stepped(cluster.run, 3, 30))
      << "not every learner stepped before the kill";
  // Per part (1 = the first resume): the learners that rejoined it live, and those that left
  // (spent their budget) by now. Learners step on through each outage, so on a loaded machine
  // they may finish before the third kill: a part is ready to be killed once every learner
  // rejoined it live or has left; with every learner gone there is nothing left to kill.
  auto part_state = [&](int part) {
    int resumes = 0;
    std::set<int> rejoined, left;
    for (const auto& e : events(cluster.run / "events.jsonl")) {
      if (e["event"] == "resume") ++resumes;
      if (e["event"] == "leave") left.insert(e["learner"].get<int>());
      if (resumes == part && e["event"] == "rejoin" && e.value("live", false))
        rejoined.insert(e["learner"].get<int>());
    }
    return std::make_pair(rejoined, left);
  };
  int victim = pid_of(cluster.run, "syncer");
  ASSERT_GT(victim, 0);
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  int kills = 1;
  for (int part = 1; part <= 3; ++part) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(40);
    auto ready = [&] {
      auto [rejoined, left] = part_state(part);
      for (int l = 0; l < 3; ++l)
        if (rejoined.count(l) == 0 && left.count(l) == 0) return false;
      return true;
    };
    while (!ready() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ASSERT_TRUE(ready()) << "part " << part << "\n" << text(cluster.dir / "launch.out");
    if (part_state(part).second.size() == 3) break;  // every learner spent its budget
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    victim = pid_of(cluster.run, "syncer");
    // The learners may spend their budget in those 0.2 s, and the run end with them.
    if (victim <= 0 || ::kill(victim, SIGKILL) != 0) break;
    ++kills;
    std::printf("syncer killed 0.2 s after the rejoins of part %d\n", part);
  }
  EXPECT_GE(kills, 3) << "the learners finished before the kills right after their rejoins";
  ASSERT_EQ(wait_for(cluster.launch, 400), 0) << text(cluster.dir / "launch.out");
  const auto summary = json::parse(text(cluster.run / "summary.json"));
  // One part per kill, or one more when the last kill's syncer came back before the learners
  // finished (the last kill may end a part that had written the summary).
  EXPECT_GE(summary.value("parts", 0), kills) << summary.dump();
  EXPECT_EQ(summary["tokens"].get<uint64_t>(), 3u * steps * 4u * 32u);
  const auto record = json::parse(text(cluster.run / "monitor.json"));
  for (const auto& l : record["learners"]) {
    EXPECT_EQ(l["step"].get<uint64_t>(), steps) << "learner " << l["learner"];
    EXPECT_EQ(l["tokens_before"].get<uint64_t>() + l["tokens_this_incarnation"].get<uint64_t>(),
              steps * 4u * 32u)
        << "learner " << l["learner"];
  }
  {
    std::istringstream rows(text(cluster.run / "learner_loss.csv"));
    std::string row;
    std::getline(rows, row);  // wall_time,learner,incarnation,step,tokens,loss,lr
    std::map<int, uint64_t> last;
    size_t n = 0;
    while (std::getline(rows, row)) {
      std::vector<std::string> f;
      std::stringstream ss(row);
      for (std::string x; std::getline(ss, x, ',');) f.push_back(x);
      ASSERT_GE(f.size(), 5u) << row;
      const int l = std::stoi(f[1]);
      const uint64_t step = std::stoull(f[3]), tokens = std::stoull(f[4]);
      EXPECT_EQ(tokens, step * 128u) << row;
      EXPECT_GE(tokens, last[l]) << "learner " << l << "'s tokens went backwards: " << row;
      last[l] = tokens;
      ++n;
    }
    EXPECT_GT(n, 0u);
  }
  const pid_t report = spawn(cluster.dir, {DD_CHAOS_BIN, "report", "run", "--json", "report.json"},
                             (cluster.dir / "report.out").string());
  ASSERT_GE(wait_for(report, 60), 0);
  const auto r = json::parse(text(cluster.dir / "report.json"));
  std::string tokens_verdict;
  for (const auto& i : r["invariants"])
    if (i["name"] == "tokens_match_steps") tokens_verdict = i["verdict"].get<std::string>();
  EXPECT_EQ(tokens_verdict, "valid") << r["invariants"].dump(2);
  // One uptime: the summary's is the report's rule over the same files.
  ASSERT_TRUE(r["run"]["uptime_from_steps"].is_number()) << r["run"].dump(2);
  const double uptime = summary["uptime"].get<double>();
  EXPECT_NEAR(uptime, r["run"]["uptime_from_steps"].get<double>(), 1e-9);
  const double observed = r["run"]["observed_s"].get<double>();
  const double down = r["run"]["global_downtime_s"].get<double>();
  ASSERT_GT(observed, 0.0);
  EXPECT_NEAR(uptime, 1.0 - down / observed, 1e-9);
  std::printf("summary uptime %.4f; report: global downtime %.2f s of %.1f s observed\n", uptime,
              down, observed);
}

// Learners that spend their whole budget while the syncer is down
// once left into the void: each node exited 0 with its leave sent to the dead monitor, and the
// resumed syncer waited for ever. Now each learner keeps its unanswered leave: the node stays up,
// rejoins the resumed syncer, and its learners rejoin live (reporting the steps and tokens of the
// outage) and then leave, so the run completes with every step counted.
TEST(cluster_process, learners_that_finish_while_the_syncer_is_down_leave_after_it_is_back) {
  tiny_run cluster;
  ASSERT_NO_FATAL_FAILURE(
      launch_until_joined("finish_in_outage", "{ steps = 2000 }", {}, 10, cluster));
  // A learner killed before its first step has no model and cannot train during the outage.
  ASSERT_TRUE(every_learner_stepped(cluster.run, 3, 30))
      << "not every learner stepped before the kill";
  // Killed and held down (the launcher's `hold`) until every learner has finished.
  const pid_t chaos =
      spawn(cluster.dir, {DD_CHAOS_BIN, "kill", "node:syncer", "--for", "150s", "--run-dir", "run"},
            (cluster.dir / "chaos.out").string());
  ASSERT_EQ(wait_for(chaos, 20), 0) << text(cluster.dir / "chaos.out");
  auto node_events = [&](int k) {
    return events(cluster.run / "nodes" / ("learner-" + std::to_string(k)) / "events.jsonl");
  };
  auto finished_in_outage = [&](int k) {
    bool lost = false;
    for (const auto& e : node_events(k)) {
      if (e["event"] == "syncer_lost") lost = true;
      if (lost && e["event"] == "learner_done") return true;
    }
    return false;
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  bool all = false;
  while (!all && std::chrono::steady_clock::now() < deadline) {
    all = finished_in_outage(0) && finished_in_outage(1) && finished_in_outage(2);
    if (!all) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  ASSERT_TRUE(all) << "not every learner finished its budget during the outage";
  // Every learner process waits for the syncer instead of exiting.
  std::this_thread::sleep_for(std::chrono::seconds(2));
  for (int k = 0; k < 3; ++k) {
    const int pid = pid_of(cluster.run, "learner-" + std::to_string(k));
    EXPECT_GT(pid, 0) << "learner-" << k << " exited with its leave undelivered";
  }
  const pid_t heal = spawn(cluster.dir, {DD_CHAOS_BIN, "heal", "--run-dir", "run"},
                           (cluster.dir / "heal.out").string());
  EXPECT_EQ(wait_for(heal, 20), 0) << text(cluster.dir / "heal.out");
  EXPECT_EQ(wait_for(cluster.launch, 90), 0) << text(cluster.dir / "launch.out");
  const auto evs = events(cluster.run / "events.jsonl");
  // After the resume each learner rejoined live and then left at its last step.
  bool resumed = false;
  std::set<int> rejoined, left;
  for (const auto& e : evs) {
    if (e["event"] == "resume") resumed = true;
    if (!resumed) continue;
    if (e["event"] == "rejoin" && e["live"].get<bool>()) rejoined.insert(e["learner"].get<int>());
    if (e["event"] == "leave") {
      EXPECT_EQ(e["step"].get<uint64_t>(), 2000u) << e.dump();
      left.insert(e["learner"].get<int>());
    }
  }
  EXPECT_TRUE(resumed);
  EXPECT_EQ(rejoined, (std::set<int>{0, 1, 2}));
  EXPECT_EQ(left, (std::set<int>{0, 1, 2}));
  // What they trained during the outage reached the model: each pushed its fragments once more
  // after the rejoin (final_pushes), and those pushes were merged.
  std::set<int> merged_after_resume;
  resumed = false;
  for (const auto& e : evs) {
    if (e["event"] == "resume") resumed = true;
    if (resumed && e["event"] == "merge")
      for (const auto& c : e["contributors"]) merged_after_resume.insert(c["learner"].get<int>());
  }
  EXPECT_EQ(merged_after_resume, (std::set<int>{0, 1, 2}));
  for (int k = 0; k < 3; ++k) {
    bool pending = false, to_leave = false;
    for (const auto& e : node_events(k)) {
      if (e["event"] == "leave_pending" && e.value("syncer_lost", false)) pending = true;
      if (e["event"] == "learner_rejoined" && e.value("to_leave", false)) to_leave = true;
    }
    EXPECT_TRUE(pending) << "learner-" << k;
    EXPECT_TRUE(to_leave) << "learner-" << k;
    size_t final_fragments = 0;
    for (const auto& e : node_events(k))
      if (e["event"] == "final_pushes") final_fragments = e["fragments"].get<size_t>();
    EXPECT_EQ(final_fragments, 2u) << "learner-" << k;
  }
  expect_versions_increase(evs);
  // Every step of both parts counted once: 3 learners × 2000 steps × batch 4 × context 32.
  const auto record = json::parse(text(cluster.run / "monitor.json"));
  for (const auto& l : record["learners"]) {
    EXPECT_EQ(l["step"].get<uint64_t>(), 2000u) << "learner " << l["learner"];
    EXPECT_TRUE(l["finished"].get<bool>()) << "learner " << l["learner"];
  }
  const auto summary = json::parse(text(cluster.run / "summary.json"));
  EXPECT_TRUE(summary.value("resumed", false));
  EXPECT_EQ(summary["tokens"].get<uint64_t>(), 3u * 2000u * 4u * 32u);
}

TEST(cluster_process, a_learner_black_holed_for_20_s_rejoins_within_the_backoff_cap_plus_2_s) {
  const double cap = 4.0;
  tiny_run cluster;
  ASSERT_NO_FATAL_FAILURE(launch_until_joined(
      "blackhole", "{ seconds = 40 }", {"--via-proxy", "--learner-backoff-cap", "4"}, 0, cluster));
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const double start = wall_now();
  const pid_t chaos =
      spawn(cluster.dir,
            {DD_CHAOS_BIN, "net", "blackhole", "learner:1", "--for", "20s", "--run-dir", "run"},
            (cluster.dir / "chaos.out").string());
  EXPECT_EQ(wait_for(chaos, 20), 0) << text(cluster.dir / "chaos.out");
  const double healed = start + 20.0;
  EXPECT_EQ(wait_for(cluster.launch, 90), 0) << text(cluster.dir / "launch.out");
  const auto node = events(cluster.run / "nodes" / "learner-1" / "events.jsonl");
  double lost = -1, back = -1;
  for (const auto& e : node) {
    if (e["event"] == "syncer_lost" && lost < 0) lost = e["time"].get<double>();
    if (e["event"] == "syncer_back" && back < 0) back = e["time"].get<double>();
  }
  ASSERT_GT(lost, 0) << "the black hole was never noticed";
  ASSERT_GT(back, 0) << "learner-1 never came back";
  std::printf("black hole noticed after %.2f s; rejoined %.2f s after the heal (cap %.0f s)\n",
              lost - start, back - healed, cap);
  EXPECT_LT(back - healed, cap + 2.0);
  EXPECT_GT(back, healed - 0.5);  // not before the heal: the link really was cut
  const auto evs = events(cluster.run / "events.jsonl");
  bool rejoined = false;
  for (const auto& e : evs)
    if (e["event"] == "rejoin" && e["learner"] == 1 && e["live"].get<bool>()) rejoined = true;
  EXPECT_TRUE(rejoined);
  expect_versions_increase(evs);
}

TEST(cluster_process, a_paused_learner_is_live_again_soon_after_sigcont_and_its_pushes_are_merged) {
  tiny_run cluster;
  ASSERT_NO_FATAL_FAILURE(launch_until_joined("pause", "{ seconds = 20 }", {}, 5, cluster));
  const int victim = pid_of(cluster.run, "learner-1");
  ASSERT_GT(victim, 0);
  const double stopped_at = wall_now();
  ASSERT_EQ(::kill(victim, SIGSTOP), 0);
  // Held past the syncer's connection timeout (1 s), so the syncer drops it.
  ASSERT_TRUE(wait_events(cluster.run / "events.jsonl", "failure", 1, 10));
  std::this_thread::sleep_until(std::chrono::steady_clock::now() +
                                std::chrono::duration<double>(4.0 - (wall_now() - stopped_at)));
  const double continued_at = wall_now();
  ASSERT_EQ(::kill(victim, SIGCONT), 0);
  EXPECT_EQ(wait_for(cluster.launch, 60), 0) << text(cluster.dir / "launch.out");
  const auto evs = events(cluster.run / "events.jsonl");
  double failed_at = -1, rejoined_at = -1, merged_at = -1;
  for (const auto& e : evs) {
    if (e["event"] == "failure" && e.value("learner", -1) == 1 && failed_at < 0)
      failed_at = e["time"].get<double>();
    if (e["event"] == "rejoin" && e["learner"] == 1 && e["live"].get<bool>() && rejoined_at < 0)
      rejoined_at = e["time"].get<double>();
    if (e["event"] == "merge" && rejoined_at > 0 && merged_at < 0)
      for (const auto& c : e["contributors"])
        if (c["learner"] == 1 && c["incarnation"].get<int>() >= 1)
          merged_at = e["time"].get<double>();
  }
  ASSERT_GT(failed_at, 0) << "the pause was never noticed";
  ASSERT_GT(rejoined_at, 0) << "learner 1 never rejoined";
  std::printf(
      "paused learner: noticed after %.2f s; live again %.2f s after SIGCONT; first merge "
      "with it %.2f s after SIGCONT\n",
      failed_at - stopped_at, rejoined_at - continued_at,
      merged_at > 0 ? merged_at - continued_at : -1.0);
  // One connection timeout (1 s) + one backoff step (0.5 s) + slack for a loaded machine; before
  // the fix a handshake sent to the dead proxy of the syncer waited 10 s.
  EXPECT_LT(rejoined_at - continued_at, 3.0);
  // Before the fix its pushes went to the dead proxies of the owners: never merged again.
  EXPECT_GT(merged_at, 0) << "learner 1 rejoined but none of its pushes was merged";
  const auto node = events(cluster.run / "nodes" / "learner-1" / "events.jsonl");
  bool lost = false, back = false;
  for (const auto& e : node) {
    if (e["event"] == "syncer_lost") lost = true;
    if (e["event"] == "syncer_back") back = true;
  }
  EXPECT_TRUE(lost);
  EXPECT_TRUE(back);
  // Regression: the lines the node logged around the pause reach the syncer's copy after the
  // rejoin (a batch sent on the dead link is sent again), each once. Every line of the node's
  // own log up to its syncer_back is in the copy.
  auto lines_of = [](const std::string& t) {
    std::vector<std::string> out;
    std::istringstream in(t);
    for (std::string l; std::getline(in, l);)
      if (!l.empty()) out.push_back(l);
    return out;
  };
  const auto own = lines_of(text(cluster.run / "nodes" / "learner-1" / "events.jsonl"));
  const auto copy = lines_of(text(cluster.run / "nodes" / "learner-1.events.jsonl"));
  std::map<std::string, int> in_copy;
  for (const auto& l : copy) ++in_copy[l];
  for (const auto& [l, n] : in_copy) EXPECT_EQ(n, 1) << "twice in the syncer's copy: " << l;
  size_t checked = 0;
  for (const auto& l : own) {
    EXPECT_EQ(in_copy.count(l), 1u) << "missing from the syncer's copy: " << l;
    ++checked;
    if (l.find("\"event\":\"syncer_back\"") != std::string::npos) break;
  }
  EXPECT_GT(checked, 3u);
  expect_versions_increase(evs);
}

// Issue 12 item 2 across processes: the syncer is killed, its checkpoint of fragment 1 is
// damaged while it is down, and the launcher starts it again with --resume. The resumed owner
// of fragment 1 rebuilds its value from the copy a rejoining learner holds (fragment_rebuilt,
// through the wire.capnp FragmentQuery/FragmentHeld messages over the middleman), numbered
// above every earlier version; fragment 0 restores its checkpoint; the run is not degraded.
TEST(cluster_process, a_resumed_syncer_rebuilds_a_damaged_fragment_from_a_learner) {
  // A budget the learners cannot spend while the syncer is down (they step ~1 ms apart on
  // this model, 3 learners: about 0.4M tokens a second, and the outage lasts about 3 s): they
  // must still be there to hand over their copies.
  tiny_run cluster;
  ASSERT_NO_FATAL_FAILURE(launch_until_merging("rebuild", "{ tokens = 5000000 }", cluster));
  ASSERT_NO_FATAL_FAILURE(kill_node(cluster.run, "syncer"));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // gone before the damage
  {
    const fs::path ck = cluster.run / "checkpoints" / "owner_1.ddck";
    ASSERT_TRUE(fs::exists(ck));
    std::fstream f(ck, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(ck) / 2));
    f.write("damaged!damaged!", 16);
  }
  // A deadline, not a speed check: 8M tokens finished inside 90 s in earlier CI landings, but on a
  // slower machine (52k tokens/s, with or without the tensor channel) 8M took over
  // 140 s, hence 5M; 140 s keeps the whole case inside its 180 s ctest TIMEOUT.
  EXPECT_EQ(wait_for(cluster.launch, 140), 0) << text(cluster.dir / "launch.out");
  const auto evs = events(cluster.run / "events.jsonl");
  uint64_t before1 = 0;
  bool resumed = false, rebuilt = false, restored0 = false, reset = false;
  for (const auto& e : evs) {
    if (e["event"] == "resume") resumed = true;
    if (!resumed && e["event"] == "merge" && e["fragment"] == 1)
      before1 = std::max(before1, e["version"].get<uint64_t>());
    if (resumed && e["event"] == "fragment_rebuilt") {
      rebuilt = true;
      EXPECT_EQ(e["fragment"], 1);
      EXPECT_GE(e["learner"].get<int>(), 0);
      EXPECT_GT(e["learner_version"].get<uint64_t>(), 0u);
      EXPECT_GT(e["version"].get<uint64_t>(), before1) << "versions never repeat";
    }
    if (resumed && e["event"] == "owner_restored" && e["fragment"] == 0) restored0 = true;
    if (e["event"] == "owner_start" && e.contains("reset")) reset = true;
  }
  EXPECT_TRUE(resumed);
  EXPECT_TRUE(rebuilt) << "fragment 1 was not rebuilt from a learner";
  EXPECT_TRUE(restored0);
  EXPECT_FALSE(reset);
  expect_versions_increase(evs);
  const auto summary = json::parse(text(cluster.run / "summary.json"));
  EXPECT_FALSE(summary.contains("degraded")) << summary.dump();
  EXPECT_FALSE(summary.value("failed", false)) << summary.dump();
}

namespace {

/// The port a syncer's first "listening" event names, waiting up to `seconds` (0 if none).
int listening_port(const fs::path& run, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    for (const auto& e : events(run / "events.jsonl"))
      if (e["event"] == "listening") return e["port"].get<int>();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return 0;
}

}  // namespace

// The syncer's refusal of a node of another run is stamped
// with the syncer's run id, and the learner node discarded it as undecodable: a node started with
// another --run-id retried at once in a busy loop (26,000 attempts in 30 s, 33,750 node_refused
// lines in the syncer's events.jsonl) and never exited 3; an old node facing a fresh syncer (new
// run id) on the old one's port backed off for ever. Both must exit 3 at the first answer.
TEST(cluster_process, learners_of_another_run_exit_3_at_the_first_refusal) {
  const auto dir = workdir("other_run", "{ seconds = 60 }");
  const pid_t syncer =
      spawn(dir,
            {DD_NODE_BIN, "syncer", "tiny.lua", "--listen", "127.0.0.1:0", "--run-dir", "run",
             "--progress", "0", "--heartbeat", "0.2", "--connection-timeout", "1"},
            (dir / "syncer.out").string());
  const int port = listening_port(dir / "run", 30);
  ASSERT_GT(port, 0) << text(dir / "syncer.out");
  const std::string at = "127.0.0.1:" + std::to_string(port);

  // 1. A node that names another run at its first handshake.
  const double asked = wall_now();
  const pid_t stranger = spawn(
      dir,
      {DD_NODE_BIN, "learner", "--join", at, "--learners", "1", "--run-id", "deadbeefdeadbeef",
       "--node-name", "stranger", "--run-dir", "stranger", "--join-deadline", "20"},
      (dir / "stranger.out").string());
  EXPECT_EQ(wait_for(stranger, 25), 3) << text(dir / "stranger.out");
  std::printf("a node of another run exited after %.2f s\n", wall_now() - asked);
  size_t refused = 0;
  for (const auto& e : events(dir / "run" / "events.jsonl"))
    if (e["event"] == "node_refused" && e.value("node", "") == "stranger") {
      ++refused;
      EXPECT_EQ(e.value("refusal", ""), "otherRun");
    }
  EXPECT_EQ(refused, 1u) << "one refusal, one exit";
  EXPECT_NE(text(dir / "stranger.out").find("otherRun"), std::string::npos)
      << text(dir / "stranger.out");

  // 2. A node of this run; then a fresh syncer (another run) takes the old one's port.
  const pid_t old = spawn(dir,
                          {DD_NODE_BIN, "learner", "--join", at, "--learners", "1", "--node-name",
                           "old", "--run-dir", "old", "--heartbeat", "0.2", "--connection-timeout",
                           "1", "--backoff-cap", "2", "--progress", "0"},
                          (dir / "old.out").string());
  ASSERT_TRUE(wait_events(dir / "run" / "events.jsonl", "join", 1, 30)) << text(dir / "old.out");
  ASSERT_EQ(::kill(syncer, SIGKILL), 0);
  EXPECT_EQ(wait_for(syncer, 10), 128 + SIGKILL);
  const pid_t fresh = spawn(dir,
                            {DD_NODE_BIN, "syncer", "tiny.lua", "--listen", at, "--run-dir", "run2",
                             "--progress", "0", "--heartbeat", "0.2", "--connection-timeout", "1"},
                            (dir / "fresh.out").string());
  ASSERT_GT(listening_port(dir / "run2", 30), 0) << text(dir / "fresh.out");
  const double fresh_at = wall_now();
  EXPECT_EQ(wait_for(old, 30), 3) << text(dir / "old.out");
  std::printf("an old node facing a fresh syncer exited %.2f s after it listened\n",
              wall_now() - fresh_at);
  EXPECT_NE(text(dir / "old.out").find("otherRun"), std::string::npos) << text(dir / "old.out");
  ::kill(fresh, SIGTERM);
  EXPECT_NE(wait_for(fresh, 20), -1) << text(dir / "fresh.out");
}

// A launch stopped with Ctrl-C (summary.json "interrupted") is
// continued by `dd-node launch --resume`, as `dd-node run --resume` continues an interrupted run
// (it was refused: "holds no unfinished run").
TEST(cluster_process, a_launch_stopped_with_ctrl_c_is_resumed_by_launch_resume) {
  const auto dir = workdir("interrupt_resume", "{ tokens = 1500000 }");
  const fs::path run = dir / "run";
  const pid_t first = launch_tiny(dir, {}, "first.out");
  ASSERT_TRUE(wait_events(run / "events.jsonl", "merge", 10, 60)) << text(dir / "first.out");
  ASSERT_EQ(::kill(first, SIGINT), 0);
  EXPECT_EQ(wait_for(first, 60), 130) << text(dir / "first.out");
  const auto stopped = json::parse(text(run / "summary.json"));
  ASSERT_TRUE(stopped.value("interrupted", false));
  // Ctrl-C reaches the syncer as SIGINT (the launcher forwarded SIGTERM whatever it got).
  EXPECT_EQ(stopped.value("interrupt_reason", ""), "SIGINT") << stopped.dump();
  const uint64_t tokens_before = stopped["tokens"].get<uint64_t>();
  const pid_t second = launch_tiny(dir, {"--resume"}, "second.out");
  EXPECT_EQ(wait_for(second, 120), 0) << text(dir / "second.out");
  const auto summary = json::parse(text(run / "summary.json"));
  EXPECT_TRUE(summary.value("resumed", false));
  EXPECT_FALSE(summary.value("interrupted", false));
  EXPECT_EQ(summary.value("parts", 0), 2);
  EXPECT_GT(summary["tokens"].get<uint64_t>(), tokens_before);
  expect_versions_increase(events(run / "events.jsonl"));
}

// A syncer without its frame guard (--max-frame-bytes 0) has no tensor channel: the learner node
// says so (stderr and a channel_unavailable event) and the run completes with its chunks on CAF.
TEST(cluster_process, a_syncer_without_the_frame_guard_trains_its_learners_on_caf) {
  const auto dir = workdir("no_guard", "{ steps = 120 }");
  const pid_t syncer = spawn(dir,
                             {DD_NODE_BIN, "syncer", "tiny.lua", "--listen", "127.0.0.1:0",
                              "--run-dir", "run", "--progress", "0", "--max-frame-bytes", "0"},
                             (dir / "syncer.out").string());
  const int port = listening_port(dir / "run", 30);
  ASSERT_GT(port, 0) << text(dir / "syncer.out");
  const pid_t node = spawn(
      dir,
      {DD_NODE_BIN, "learner", "--join", "127.0.0.1:" + std::to_string(port), "--learners", "3",
       "--node-name", "all", "--run-dir", "all", "--progress", "0", "--join-deadline", "60"},
      (dir / "node.out").string());
  EXPECT_EQ(wait_for(node, 90), 0) << text(dir / "node.out");
  EXPECT_EQ(wait_for(syncer, 30), 0) << text(dir / "syncer.out");
  EXPECT_NE(text(dir / "node.out").find("chunks go on CAF"), std::string::npos)
      << text(dir / "node.out");
  size_t unavailable = 0, open = 0;
  for (const auto& e : events(dir / "all" / "events.jsonl")) {
    if (e["event"] == "channel_unavailable") ++unavailable;
    if (e["event"] == "channel_open") ++open;
  }
  EXPECT_GE(unavailable, 1u);
  EXPECT_EQ(open, 0u);
  const auto summary = json::parse(text(dir / "run" / "summary.json"));
  EXPECT_EQ(summary["tokens"].get<uint64_t>(), 3u * 120u * 4u * 32u);
  EXPECT_GT(summary["merges"].get<uint64_t>(), 0u);
}
