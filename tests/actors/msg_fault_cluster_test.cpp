// Message faults through the chaos endpoints of a real cluster: `dd-node launch` runs a tiny
// experiment (1-layer GPT, 3 learner processes) with every node's endpoint on loopback, and
// `dd-chaos msg` faults pushes, broadcasts and steps inside the running nodes:
//   - corrupt-push: the damaged chunks are refused by the owner's CRC-32C check, the learner
//     sends the push again, and no corrupt push is merged;
//   - drop-push (3 pushes): they vanish, later ones merge again; delay-push --for 1s reverts
//     by itself (gone from `msg status`);
//   - dup-push: the second copy is refused as a duplicate (never merged twice);
//   - nan: the push carrying the NaN is refused as non-finite, the learner reloads;
//   - drop-broadcast, fail (a learner throws at a step and is respawned in its node);
//   - refusals (a learner no node hosts, no duration), --dry-run (nothing sent, no tape),
//     msg status, and heal clearing every endpoint.
// About 30 s with every core: RUN_SERIAL, label cluster.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
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

std::string tiny(const std::string& budget = "45", const std::string& chaos = "") {
  dd::test::tiny_lua t;
  t.width = 64;
  t.interval = 16;
  // Pushes on each learner's own steps: the global push clock extrapolates the mean step only 3
  // own steps ahead of its last reading, and under load (2 shared cores, 5 ms steps) a learner
  // may then push nothing for tens of seconds.
  t.sync_extra = ", push_clock = 'learner'";
  t.budget = "{ seconds = " + budget + " }";
  t.extra = chaos;
  return t.text();
}

struct chaos_result {
  int status;
  std::string out;
};

/// Runs dd-chaos to the end (at most 20 s) in `dir`.
chaos_result chaos(const fs::path& dir, std::vector<std::string> args) {
  static int n = 0;
  const std::string out = (dir / ("chaos." + std::to_string(n++) + ".out")).string();
  args.insert(args.begin(), DD_CHAOS_BIN);
  args.insert(args.end(), {"--run-dir", "run"});
  const pid_t pid = spawn(dir, args, out);
  chaos_result r{wait_for(pid, 20), text(out)};
  std::printf("$ dd-chaos");
  for (size_t i = 1; i < args.size(); ++i) std::printf(" %s", args[i].c_str());
  std::printf("  -> exit %d\n%s", r.status, r.out.c_str());
  return r;
}

size_t count_events(const std::vector<json>& evs, const std::string& kind,
                    const std::function<bool(const json&)>& pred = nullptr) {
  size_t n = 0;
  for (const auto& e : evs)
    if (e["event"] == kind && (!pred || pred(e))) ++n;
  return n;
}

}  // namespace

TEST(msg_fault_cluster, endpoint_faults_are_applied_inside_the_nodes_and_revert) {
  const fs::path dir = dd::test::fresh_dir("dd_cluster_msg_faults");
  std::ofstream(dir / "tiny.lua") << tiny();
  const fs::path run = dir / "run";
  const pid_t launch = launch_tiny(dir, {"--no-step-admission"});
  ASSERT_TRUE(wait_events(run / "events.jsonl", "join", 3, 30)) << text(dir / "launch.out");
  // Every node's endpoint is in the nodes file.
  const json nodes = json::parse(text(run / "nodes.json"));
  ASSERT_EQ(nodes["nodes"].size(), 4u);
  for (const auto& n : nodes["nodes"]) EXPECT_GT(n["endpoints"]["chaos"].get<int>(), 0) << n.dump();
  std::this_thread::sleep_for(std::chrono::seconds(1));

  // Dry run: the request is printed, nothing is sent or taped.
  auto r = chaos(dir, {"msg", "drop-push", "learner:2", "--for", "4s", "--dry-run"});
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("[dry-run] drop_push node learner-2: endpoint 127.0.0.1:"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(run / "chaos.jsonl"));
  // Refusals.
  EXPECT_EQ(chaos(dir, {"msg", "drop-push", "learner:7", "--for", "1s"}).status, 1);
  EXPECT_EQ(chaos(dir, {"msg", "drop-push", "learner:1"}).status, 2);  // no --for / --count
  EXPECT_EQ(chaos(dir, {"msg", "explode", "learner:1", "--for", "1s"}).status, 2);

  // Count-bounded faults, each awaited in the node's own events (the tiny learners share two
  // cores with the test: no fixed sleep is long enough under load).
  auto node_events = [&](const std::string& node) {
    return node == "syncer" ? run / "events.jsonl" : run / "nodes" / node / "events.jsonl";
  };
  auto await_fault = [&](const std::string& node, const std::string& kind, size_t n) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < end) {
      if (count_events(events(node_events(node)), "fault",
                       [&](const json& e) { return e["fault"] == kind; }) >= n)
        return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  };
  // Which learner pushes when depends on the global push clock and the load: the push faults
  // go to every learner node (`learners`), and the test waits for hits anywhere.
  auto await_hits = [&](const std::string& kind, size_t n) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < end) {
      size_t hits = 0;
      for (const char* node : {"learner-0", "learner-1", "learner-2"})
        hits += count_events(events(node_events(node)), "fault",
                             [&](const json& e) { return e["fault"] == kind; });
      if (hits >= n) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  };
  // One after the other: faults on the same push compose (a dropped push is not also sent
  // damaged or twice), so each is awaited before the next.
  EXPECT_EQ(chaos(dir, {"msg", "corrupt-push", "learners", "--count", "1"}).status, 0);
  EXPECT_TRUE(await_hits("corrupt_push", 3));  // one in each learner node
  EXPECT_EQ(chaos(dir, {"msg", "drop-push", "learners", "--count", "2"}).status, 0);
  EXPECT_TRUE(await_hits("drop_push", 3));
  EXPECT_EQ(chaos(dir, {"msg", "dup-push", "learners", "--count", "2"}).status, 0);
  EXPECT_TRUE(await_hits("dup_push", 3));
  EXPECT_EQ(chaos(dir, {"msg", "drop-broadcast", "learner:0", "--count", "2"}).status, 0);
  // A time-bounded one reverts by itself: gone from the endpoint's status after its time.
  EXPECT_EQ(chaos(dir, {"msg", "delay-push", "learner:0", "--ms", "50", "--for", "1s"}).status, 0);
  r = chaos(dir, {"msg", "status"});
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("\"delay_push\""), std::string::npos) << r.out;
  EXPECT_TRUE(await_fault("syncer", "drop_broadcast", 2));
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  r = chaos(dir, {"msg", "status"});
  EXPECT_EQ(r.out.find("\"delay_push\""), std::string::npos) << r.out;
  EXPECT_EQ(chaos(dir, {"msg", "nan", "learner:2"}).status, 0);
  EXPECT_TRUE(await_fault("learner-2", "nan_step", 1));
  EXPECT_EQ(chaos(dir, {"msg", "fail", "learner:1"}).status, 0);
  EXPECT_TRUE(await_fault("learner-1", "fail_step", 1));
  // A long fault, cleared by heal.
  EXPECT_EQ(chaos(dir, {"msg", "delay-broadcast", "owner:1", "--ms", "300", "--for", "60s"}).status,
            0);
  r = chaos(dir, {"heal"});
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("of node syncer: clear: {\"cleared\":1,\"ok\":true}"), std::string::npos)
      << r.out;

  EXPECT_EQ(wait_for(launch, 90), 0) << text(dir / "launch.out");
  const auto evs = events(run / "events.jsonl");
  auto learner_events = [&](int k) {
    return events(run / "nodes" / ("learner-" + std::to_string(k)) / "events.jsonl");
  };
  const auto l0 = learner_events(0), l1 = learner_events(1), l2 = learner_events(2);

  const std::vector<std::vector<json>> ls = {l0, l1, l2};
  auto hits_of = [&](const std::string& kind) {
    size_t n = 0;
    for (const auto& l : ls)
      n += count_events(l, "fault", [&](const json& e) { return e["fault"] == kind; });
    return n;
  };
  // corrupt-push: every damaged chunk is refused by its CRC. The learner sends such a push again
  // while it still waits for it (push_resent); one that already stepped H steps past it lets it
  // go (its next push carries the tokens). Either way the damaged bytes are never merged: a
  // refused transfer is merged only when it was sent again.
  const size_t corrupted = hits_of("corrupt_push");
  EXPECT_EQ(corrupted, 3u);
  std::set<std::tuple<int, int, uint64_t>> resent;
  for (size_t k = 0; k < ls.size(); ++k)
    for (const auto& e : ls[k])
      if (e["event"] == "push_resent")
        resent.insert(
            {static_cast<int>(k), e["fragment"].get<int>(), e["transfer_id"].get<uint64_t>()});
  size_t refused = 0;
  for (const auto& x : evs) {
    if (x["event"] != "chunk_refused" || x.value("what", "") != "push") continue;
    ++refused;
    const std::tuple<int, int, uint64_t> key{x["learner"].get<int>(), x["fragment"].get<int>(),
                                             x["transfer_id"].get<uint64_t>()};
    if (resent.count(key) != 0) continue;
    for (const auto& e : evs) {
      if (e["event"] != "merge" || e["fragment"] != std::get<1>(key)) continue;
      for (const auto& c : e["contributors"]) {
        EXPECT_FALSE(c["learner"] == std::get<0>(key) && c["transfer_id"] == std::get<2>(key))
            << "a refused, never resent transfer was merged: " << e.dump();
      }
    }
  }
  EXPECT_EQ(refused, corrupted) << "every damaged push is refused by its CRC";
  std::printf("corrupt-push: %zu pushes damaged, %zu chunks refused, %zu pushes resent\n",
              corrupted, refused, resent.size());
  // drop-push: dropped in the learners' nodes; the learners merge again afterwards.
  size_t dropped = 0;
  double dropped_last = -1;
  for (const auto& l : ls)
    for (const auto& e : l)
      if (e["event"] == "push_dropped") {
        ++dropped;
        dropped_last = std::max(dropped_last, e["time"].get<double>());
      }
  EXPECT_EQ(dropped, hits_of("drop_push"));
  EXPECT_GE(dropped, 3u);
  size_t merged_after = 0;
  for (const auto& e : evs)
    if (e["event"] == "merge" && e["time"].get<double>() > dropped_last) ++merged_after;
  EXPECT_GE(merged_after, 1u) << "nothing merged after the dropped pushes";
  // dup-push: both copies reach the owner, which accepts at most one (the copy is refused as a
  // duplicate, or both as superseded); no (learner, incarnation, transfer) is merged twice.
  std::map<std::tuple<int, int, int, uint64_t>, std::pair<int, int>> copies;  // → (seen, accepted)
  for (const auto& e : evs)
    if (e["event"] == "push") {
      auto& c = copies[{e["learner"].get<int>(), e["incarnation"].get<int>(),
                        e["fragment"].get<int>(), e["transfer_id"].get<uint64_t>()}];
      c.first += 1;
      c.second += e["accepted"].get<bool>() ? 1 : 0;
    }
  size_t twice = 0;
  for (const auto& [key, c] : copies) {
    if (c.first >= 2) ++twice;
    EXPECT_LE(c.second, 1) << "a push accepted twice";
  }
  EXPECT_GE(twice, 1u) << "no push arrived twice";
  std::set<std::tuple<int, int, uint64_t, int>> merged;
  for (const auto& e : evs)
    if (e["event"] == "merge")
      for (const auto& c : e["contributors"]) {
        const auto key =
            std::make_tuple(c["learner"].get<int>(), c["incarnation"].get<int>(),
                            c["transfer_id"].get<uint64_t>(), e["fragment"].get<int>());
        EXPECT_TRUE(merged.insert(key).second) << "a push merged twice: " << e.dump();
      }
  // drop-broadcast: the owner skipped learner 0.
  EXPECT_GE(
      count_events(evs, "fault", [](const json& e) { return e["fault"] == "drop_broadcast"; }), 1u);
  // nan: injected once; the learner discarded a non-finite step (and reloaded).
  EXPECT_EQ(count_events(l2, "nan_injected"), 1u);
  EXPECT_GE(count_events(l2, "nonfinite"), 1u);
  // fail: learner 1 threw at a step and was respawned in its node.
  EXPECT_EQ(
      count_events(l1, "crash", [](const json& e) { return e.value("reason", "") == "fail_step"; }),
      1u);
  // ... and rejoined without a new node handshake (same process): before the monitor knew the
  // learner's process, this join was refused once the node's 30 s reservation had lapsed.
  EXPECT_EQ(count_events(evs, "rejoin",
                         [](const json& e) {
                           return e["learner"] == 1 && e["incarnation"] == 1 &&
                                  !e["live"].get<bool>();
                         }),
            1u);
  EXPECT_EQ(count_events(evs, "join_refused"), 0u);
  const auto summary = json::parse(text(run / "summary.json"));
  EXPECT_GT(summary["tokens"].get<uint64_t>(), 0u);
  // Every fault is on the tape, with the node it reached.
  const auto tape = events(run / "chaos.jsonl");
  std::set<std::string> kinds;
  for (const auto& t : tape) kinds.insert(t.value("kind", ""));
  for (const char* k : {"corrupt_push", "drop_push", "dup_push", "drop_broadcast", "delay_push",
                        "nan_step", "fail_step", "delay_broadcast", "heal"})
    EXPECT_EQ(kinds.count(k), 1u) << k;
}

// The experiment's own message faults under `dd-node launch`: the nodes leave them to the
// launcher's `dd-chaos run` session, which sends them through the chaos endpoints and tapes them
// like every other fault — a time-keyed one (drop_broadcast at 3 s, two broadcasts) at its time,
// a step-keyed one (nan at learner 0's step 30) armed in the node at once. Each acts once: no
// node applies it from the experiment as well.
TEST(msg_fault_cluster, experiment_message_faults_under_launch_go_through_the_endpoints) {
  const fs::path dir = dd::test::fresh_dir("dd_cluster_msg_dsl");
  std::ofstream(dir / "tiny.lua") << tiny("20",
                                          "  chaos = { events = {\n"
                                          "    { at_time = 3, action = 'drop_broadcast', target = "
                                          "1, count = 2 },\n"
                                          "    { at_step = 30, action = 'nan', target = 0 },\n"
                                          "  } },\n");
  const fs::path run = dir / "run";
  const pid_t launch = launch_tiny(dir, {"--no-step-admission"});
  const int rc = wait_for(launch, 90);
  EXPECT_EQ(rc, 0) << text(dir / "launch.out");
  const std::string chaos_log = text(run / "logs" / "chaos.log");
  std::printf("%s", chaos_log.c_str());
  EXPECT_EQ(json::parse(text(run / "nodes.json"))["message_faults"], "endpoint");
  // The tape: both faults, fired by the session, applied.
  std::map<std::string, json> taped;
  for (const auto& t : events(run / "chaos.jsonl"))
    if (t.value("kind", "") != "session" && t.value("kind", "") != "heal")
      taped[t.value("kind", "")] = t;
  ASSERT_EQ(taped.size(), 2u) << text(run / "chaos.jsonl") << chaos_log;
  for (const char* k : {"drop_broadcast", "nan_step"}) {
    ASSERT_TRUE(taped.count(k)) << k;
    EXPECT_EQ(taped[k]["result"], "ok") << taped[k].dump();
    EXPECT_EQ(taped[k]["source"], "scenario") << taped[k].dump();
  }
  EXPECT_EQ(taped["drop_broadcast"]["targets"], json::array({"syncer"}));
  EXPECT_EQ(taped["nan_step"]["targets"], json::array({"learner-0"}));
  EXPECT_EQ(taped["nan_step"]["hits"][0]["request"]["at_step"], 30.0);
  EXPECT_TRUE(taped["nan_step"]["hits"][0]["reply"].value("armed", false));
  // Their effect, once each, from the endpoint (not the node's own schedule).
  const auto evs = events(run / "events.jsonl");
  const auto l0 = events(run / "nodes" / "learner-0" / "events.jsonl");
  EXPECT_EQ(count_events(evs, "fault",
                         [](const json& e) {
                           return e["fault"] == "drop_broadcast" && e["source"] == "endpoint" &&
                                  e["learner"] == 1;
                         }),
            2u);
  EXPECT_EQ(count_events(l0, "chaos_fault",
                         [](const json& e) {
                           return e["action"] == "armed" && e["kind"] == "nan_step" &&
                                  e["at_step"] == 30 && e["source"] == "endpoint";
                         }),
            1u);
  EXPECT_EQ(count_events(l0, "nan_injected"), 1u);
  EXPECT_GE(count_events(l0, "nonfinite"), 1u);
  for (const auto& file :
       {run / "events.jsonl", run / "nodes" / "learner-0" / "events.jsonl",
        run / "nodes" / "learner-1" / "events.jsonl", run / "nodes" / "learner-2" / "events.jsonl"})
    EXPECT_EQ(count_events(events(file), "chaos_fault",
                           [](const json& e) { return e.value("source", "") == "schedule"; }),
              0u)
        << file << ": a message fault applied from the experiment too";
}
