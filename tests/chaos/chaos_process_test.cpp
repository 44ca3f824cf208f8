// tests/chaos/chaos_process_test.cpp — dd-chaos against real processes: `sleep 100` children
// stand in for nodes, the real dd-chaos binary acts on them through a nodes file, /proc says
// what happened. Also the real proxy as a subprocess, healed from the nodes file.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "tests/chaos/one_learner_nodes.hpp"
#include "tests/support/child_process.hpp"
#include "tools/chaos/common.hpp"
#include "tools/chaos/net.hpp"
#include "tools/chaos/nodes_file.hpp"
#include "tools/chaos/proc.hpp"

using namespace dd::chaos;
using nlohmann::json;

namespace {

struct run_result {
  int rc = -1;
  std::string out;
};

run_result dd_chaos(const std::string& args) {
  auto [rc, out] = dd::test::run_command(std::string(DD_CHAOS_BIN) + " " + args);
  return {rc, out};
}

int spawn(const std::vector<std::string>& argv) { return dd::test::start_child({}, argv); }

char state_of(int pid) {
  const auto st = read_proc_stat(pid);
  return st ? st->state : '-';
}

// Waits up to `timeout` seconds for /proc to show `want` for `pid`.
bool wait_state(int pid, char want, double timeout) {
  const double end = mono_now() + timeout;
  while (mono_now() < end) {
    if (state_of(pid) == want) return true;
    sleep_for(0.01);
  }
  return state_of(pid) == want;
}

struct cluster : ::testing::Test {
  std::string dir;
  int sleeper = 0;
  std::vector<int> others;

  void SetUp() override {
    char tmpl[] = "/tmp/dd-chaos-test-XXXXXX";
    dir = ::mkdtemp(tmpl);
    sleeper = spawn({"/bin/sleep", "100"});
    ASSERT_TRUE(wait_state(sleeper, 'S', 2.0));
    write_nodes(read_proc_stat(sleeper)->start_time);
  }
  void TearDown() override {
    for (int pid : others) ::kill(pid, SIGKILL);
    ::kill(sleeper, SIGCONT);
    ::kill(sleeper, SIGKILL);
    ::waitpid(sleeper, nullptr, 0);
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  void write_nodes(uint64_t start_time, const std::string& proxy = "") {
    nodes_file f =
        dd::test::syncer_down_one_learner("0c0ffee", sleeper, start_time, {"/bin/sleep", "100"});
    if (!proxy.empty()) f.proxy = control_process{1, proxy};
    f.nodes[1].log = dir + "/learner-0.log";
    write_nodes_file(dir + "/nodes.json", f);
  }
  std::string rd() const { return " --run-dir " + dir; }
  json state_file() const {
    const auto p = dir + "/chaos-state.json";
    return std::filesystem::exists(p) ? json::parse(read_file(p))
                                      : json{{"pending", json::array()}};
  }
};

}  // namespace

TEST_F(cluster, reused_pid_is_never_signalled) {
  // The nodes file names a live pid whose start time is not the recorded one: a reused pid.
  write_nodes(read_proc_stat(sleeper)->start_time + 7);
  for (const char* cmd : {"kill learner:0", "term learner:0", "pause learner:0 --for 5s",
                          "pause learner:0", "slow learner:0 --for 1s", "resume learner:0"}) {
    const auto r = dd_chaos(std::string(cmd) + rd());
    EXPECT_EQ(r.rc, 1) << cmd << ": " << r.out;
    EXPECT_NE(r.out.find("reused"), std::string::npos) << r.out;
    EXPECT_EQ(state_of(sleeper), 'S') << cmd;
  }
  // heal must not SIGCONT it either: stopped by someone else, it stays stopped.
  ASSERT_EQ(::kill(sleeper, SIGSTOP), 0);
  ASSERT_TRUE(wait_state(sleeper, 'T', 2.0));
  const auto h = dd_chaos("heal" + rd());
  EXPECT_NE(h.out.find("reused"), std::string::npos) << h.out;
  sleep_for(0.1);
  EXPECT_EQ(state_of(sleeper), 'T');
  // restart treats the node as gone: it starts the recorded command line anew and leaves the
  // process that now owns the pid alone.
  const auto r = dd_chaos("restart learner:0" + rd());
  EXPECT_EQ(r.rc, 0) << r.out;
  const int fresh = read_nodes_file(dir + "/nodes.json").find("learner-0")->pid;
  if (fresh > 0 && fresh != sleeper) others.push_back(fresh);
  EXPECT_NE(fresh, sleeper);
  EXPECT_EQ(state_of(sleeper), 'T');
}

TEST_F(cluster, pause_resumes_by_itself_after_its_duration) {
  const auto r = dd_chaos("pause learner:0 --for 500ms" + rd());
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(state_of(sleeper), 'T');
  EXPECT_EQ(state_file()["pending"].size(), 1u);
  EXPECT_TRUE(wait_state(sleeper, 'S', 3.0));
  sleep_for(0.1);
  EXPECT_TRUE(state_file()["pending"].empty());
  // The tape has the fault.
  const std::string tape = read_file(dir + "/chaos.jsonl");
  const json line = json::parse(tape.substr(0, tape.find('\n')));
  EXPECT_EQ(line["kind"], "pause");
  EXPECT_EQ(line["targets"][0], "learner-0");
  EXPECT_EQ(line["result"], "ok");
}

TEST_F(cluster, heal_restores_a_pause_whose_reverter_was_killed) {
  ASSERT_EQ(dd_chaos("pause learner:0 --for 60s" + rd()).rc, 0);
  ASSERT_EQ(state_of(sleeper), 'T');
  json pending = state_file()["pending"];
  ASSERT_EQ(pending.size(), 1u);
  const int reverter = pending[0]["reverter_pid"];
  ASSERT_GT(reverter, 0);
  ASSERT_EQ(::kill(reverter, SIGKILL), 0);  // everything of dd-chaos is gone now
  sleep_for(0.2);
  EXPECT_EQ(state_of(sleeper), 'T');
  const auto h = dd_chaos("heal" + rd());
  EXPECT_EQ(h.rc, 0) << h.out;
  EXPECT_TRUE(wait_state(sleeper, 'S', 2.0));
  EXPECT_TRUE(state_file()["pending"].empty());
}

TEST_F(cluster, a_session_killed_mid_fault_still_reverts) {
  {
    std::ofstream lua(dir + "/scenario.lua");
    lua << "return {\n  { at = 0, kind = 'pause', target = 'learner:0', for_ = 0.7 },\n"
           "  { at = 30, kind = 'kill', target = 'learner:0' },\n}\n";
  }
  const int session = spawn({DD_CHAOS_BIN, "run", dir + "/scenario.lua", "--run-dir", dir});
  ASSERT_TRUE(wait_state(sleeper, 'T', 3.0));
  ::kill(session, SIGKILL);
  ::waitpid(session, nullptr, 0);
  EXPECT_EQ(state_of(sleeper), 'T');
  EXPECT_TRUE(wait_state(sleeper, 'S', 3.0));  // the detached reverter did it
  EXPECT_NE(state_of(sleeper), '-');           // and the kill at 30 s never came
  const double end = mono_now() + 2;           // the reverter clears its state entry as it exits
  while (!state_file()["pending"].empty() && mono_now() < end) sleep_for(0.02);
  EXPECT_TRUE(state_file()["pending"].empty());
}

TEST_F(cluster, slow_cycles_stop_and_continue_then_ends_running) {
  ASSERT_EQ(
      dd_chaos("slow learner:0 --via signals --for 800ms --duty 0.5 --period 100ms" + rd()).rc, 0);
  int stopped = 0, running = 0;
  const double end = mono_now() + 0.6;
  while (mono_now() < end) {
    const char s = state_of(sleeper);
    stopped += s == 'T';
    running += s == 'S';
    sleep_for(0.005);
  }
  EXPECT_GT(stopped, 10);
  EXPECT_GT(running, 10);
  sleep_for(0.5);
  EXPECT_TRUE(wait_state(sleeper, 'S', 2.0));
  EXPECT_TRUE(state_file()["pending"].empty());
}

TEST_F(cluster, kill_then_restart_without_a_launcher_reexecs_argv) {
  auto r = dd_chaos("kill learner:0" + rd());
  ASSERT_EQ(r.rc, 0) << r.out;
  ::waitpid(sleeper, nullptr, 0);
  EXPECT_EQ(state_of(sleeper), '-');
  nodes_file f = read_nodes_file(dir + "/nodes.json");
  EXPECT_EQ(f.find("learner-0")->pid, 0);
  EXPECT_EQ(f.find("learner-0")->state, "down");
  r = dd_chaos("restart node:learner-0" + rd());
  ASSERT_EQ(r.rc, 0) << r.out;
  f = read_nodes_file(dir + "/nodes.json");
  const node_entry& n = *f.find("learner-0");
  others.push_back(n.pid);
  EXPECT_NE(n.pid, 0);
  EXPECT_EQ(n.incarnation, 1);
  EXPECT_EQ(n.state, "running");
  std::string why;
  EXPECT_TRUE(verified_process::open(n.pid, n.start_time, &why)) << why;
}

// A syncer killed with --for and no launcher was re-executed from its argv, which had no
// --resume: it refused its own unfinished run and exited at once, while dd-chaos said "ok". The
// re-exec adds --resume (and drops --overwrite); here a stand-in dd-node refuses the run
// directory it made without --resume, as dd-node syncer does.
TEST_F(cluster, a_syncer_reexecuted_without_a_launcher_resumes_its_run) {
  std::filesystem::create_directories(dir + "/bin");
  const std::string fake = dir + "/bin/dd-node";
  {
    std::ofstream(fake)
        << "#!/bin/sh\n"
           "for a in \"$@\"; do [ \"$a\" = --resume ] && exec /bin/sleep 100; done\n"
           "d=$(dirname \"$0\")/..\n"
           "if [ -e \"$d/events.jsonl\" ]; then\n"
           "  echo 'holds an unfinished run: continue it with --resume' >&2\n"
           "  exit 1\n"
           "fi\n"
           ": > \"$d/events.jsonl\"\n"
           "exec /bin/sleep 100\n";
  }
  std::filesystem::permissions(fake, std::filesystem::perms::owner_all);
  const std::vector<std::string> argv = {fake,        "syncer", "tiny.lua",
                                         "--run-dir", dir,      "--overwrite"};
  const int syncer = spawn(argv);
  others.push_back(syncer);
  const double end = mono_now() + 5;
  while (!std::filesystem::exists(dir + "/events.jsonl") && mono_now() < end) sleep_for(0.02);
  ASSERT_TRUE(wait_state(syncer, 'S', 3.0));
  nodes_file f = read_nodes_file(dir + "/nodes.json");
  node_entry& s = f.nodes[0];
  s.pid = syncer;
  s.start_time = read_proc_stat(syncer)->start_time;
  s.argv = argv;
  s.log = dir + "/syncer.log";
  s.state = "running";
  write_nodes_file(dir + "/nodes.json", f);

  auto r = dd_chaos("kill node:syncer --for 300ms" + rd());
  EXPECT_EQ(r.rc, 0) << r.out;
  f = read_nodes_file(dir + "/nodes.json");
  const node_entry& back = *f.find("syncer");
  others.push_back(back.pid);
  EXPECT_EQ(back.state, "running");
  EXPECT_NE(back.pid, syncer);
  EXPECT_EQ(back.incarnation, 1);
  EXPECT_TRUE(wait_state(back.pid, 'S', 1.0));
  json revert;
  for (const auto& line : split(read_file(dir + "/chaos.jsonl"), '\n'))
    if (!line.empty() && json::parse(line).value("kind", "") == "revert")
      revert = json::parse(line);
  ASSERT_TRUE(revert.is_object()) << read_file(dir + "/chaos.jsonl");
  EXPECT_EQ(revert["result"], "ok");
  EXPECT_EQ(revert["of"], "kill");
  EXPECT_EQ(revert["new_pid"], back.pid);
  EXPECT_EQ(revert["argv"], json(std::vector<std::string>{fake, "syncer", "tiny.lua", "--run-dir",
                                                          dir, "--resume"}));
  EXPECT_EQ(read_file(dir + "/syncer.log").find("unfinished"), std::string::npos);
}

// A node re-executed by the reverter that exits at once did not come back: dd-chaos exits 1
// naming its exit status, the tape's revert record says "failed", and the nodes file says down.
TEST_F(cluster, a_reexec_that_exits_at_once_fails_the_fault_with_its_exit_status) {
  nodes_file f = read_nodes_file(dir + "/nodes.json");
  f.nodes[1].argv = {"/bin/sh", "-c", "exit 3"};
  write_nodes_file(dir + "/nodes.json", f);
  auto r = dd_chaos("kill learner:0 --for 200ms" + rd());
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("exited with status 3"), std::string::npos) << r.out;
  json revert;
  for (const auto& line : split(read_file(dir + "/chaos.jsonl"), '\n'))
    if (!line.empty() && json::parse(line).value("kind", "") == "revert")
      revert = json::parse(line);
  ASSERT_TRUE(revert.is_object()) << read_file(dir + "/chaos.jsonl");
  EXPECT_EQ(revert["result"], "failed");
  EXPECT_EQ(revert["exit_status"], 3);
  EXPECT_EQ(revert["target"], "node:learner-0");
  const node_entry& n = *read_nodes_file(dir + "/nodes.json").find("learner-0");
  EXPECT_EQ(n.state, "down");
  EXPECT_EQ(n.pid, 0);
  EXPECT_TRUE(state_file()["pending"].empty());
}

TEST_F(cluster, dry_run_touches_nothing) {
  for (const char* cmd : {"pause learner:0 --for 5s", "kill learner:0", "slow learner:0 --for 1s",
                          "heal", "random --mtbf 1s --duration 5s --seed 3"}) {
    const auto r = dd_chaos(std::string(cmd) + " --dry-run" + rd());
    EXPECT_EQ(r.rc, 0) << cmd << ": " << r.out;
    EXPECT_NE(r.out.find("[dry-run]"), std::string::npos) << r.out;
    EXPECT_EQ(state_of(sleeper), 'S');
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/chaos.jsonl"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/chaos-state.json"));
}

TEST_F(cluster, bad_flags_and_missing_targets) {
  EXPECT_EQ(dd_chaos("pause learner:0 --for" + rd()).rc, 2);
  EXPECT_EQ(dd_chaos("pause learner:0 --for 5 parsecs" + rd()).rc, 2);
  EXPECT_EQ(dd_chaos("pause learner:0 --frobnicate 1" + rd()).rc, 2);
  EXPECT_EQ(dd_chaos("pause learner:0 --pick some" + rd()).rc, 2);
  EXPECT_EQ(dd_chaos("pause learner:0").rc, 2);
  const auto missing = dd_chaos("pause learner:5" + rd());
  EXPECT_EQ(missing.rc, 1);
  EXPECT_NE(missing.out.find("learner:5"), std::string::npos);
  const auto unreadable = dd_chaos("pause learner:0 --nodes " + dir + "/nope.json");
  EXPECT_EQ(unreadable.rc, 1);
  EXPECT_NE(unreadable.out.find("nope.json"), std::string::npos);
  EXPECT_EQ(state_of(sleeper), 'S');
}

TEST_F(cluster, random_schedule_is_printed_with_its_seed_and_is_reproducible) {
  const auto a = dd_chaos("random --mtbf 2s --duration 30s --seed 11 --dry-run" + rd());
  const auto b = dd_chaos("random --mtbf 2s --duration 30s --seed 11 --dry-run" + rd());
  EXPECT_EQ(a.rc, 0) << a.out;
  EXPECT_NE(a.out.find("seed 11"), std::string::npos);
  EXPECT_EQ(a.out, b.out);
}

TEST_F(cluster, heal_opens_the_proxy_found_in_the_nodes_file) {
  const std::string ports_file = dir + "/ports.json";
  const int proxy = spawn({DD_CHAOS_BIN, "proxy", "--control", "127.0.0.1:0", "--link",
                           "learner-0=127.0.0.1:0->127.0.0.1:9", "--ports-file", ports_file});
  others.push_back(proxy);
  const double end = mono_now() + 5;
  while (!std::filesystem::exists(ports_file) && mono_now() < end) sleep_for(0.02);
  ASSERT_TRUE(std::filesystem::exists(ports_file));
  const std::string control = json::parse(read_file(ports_file))["control"];
  write_nodes(read_proc_stat(sleeper)->start_time, control);
  auto r = dd_chaos("net blackhole learner:0 --for 60s" + rd());
  ASSERT_EQ(r.rc, 0) << r.out;
  r = dd_chaos("pause learner:0" + rd());  // no duration: until heal
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(control_request(control, "status")["links"][0]["faults"].size(), 1u);
  EXPECT_TRUE(wait_state(sleeper, 'T', 2.0));  // SIGSTOP lands asynchronously
  r = dd_chaos("heal" + rd());
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(control_request(control, "status")["links"][0]["faults"].empty());
  EXPECT_TRUE(wait_state(sleeper, 'S', 2.0));
  ::kill(proxy, SIGTERM);
  ::waitpid(proxy, nullptr, 0);
}

// term is a graceful stop, not a leave for good: the process gets SIGTERM (a dd-node drains its
// learners and exits 143) and, being non-zero, is brought back like a killed one — by the
// launcher's restart policy under a launcher (chaos_matrix_test's process run), here by the
// reverter after --for. Without --for it stays down, as after kill.
TEST_F(cluster, term_stops_the_process_and_for_brings_it_back) {
  auto r = dd_chaos("term learner:0 --for 500ms" + rd());
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("SIGTERM, then re-exec after 500ms"), std::string::npos) << r.out;
  int status = 0;
  ASSERT_EQ(::waitpid(sleeper, &status, 0), sleeper);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);
  // dd-chaos waited for the reverter's re-exec (await_reverts): it is back already.
  const nodes_file f = read_nodes_file(dir + "/nodes.json");
  const node_entry& n = *f.find("learner-0");
  ASSERT_EQ(n.state, "running");
  others.push_back(n.pid);
  EXPECT_NE(n.pid, sleeper);
  EXPECT_EQ(n.incarnation, 1);
  const std::string tape = read_file(dir + "/chaos.jsonl");
  const json line = json::parse(tape.substr(0, tape.find('\n')));
  EXPECT_EQ(line["kind"], "term");
  EXPECT_EQ(line["result"], "ok");
}

// Flags are checked before anything is read or contacted: a bad flag is exit 2 even when the
// nodes file is missing, and a network fault without its knob never reaches the proxy.
TEST_F(cluster, bad_flags_are_reported_before_the_nodes_file_is_read) {
  const std::string nowhere = " --run-dir " + dir + "/no-such-run";
  for (const char* cmd : {"pause learner:0 --for 5parsecs", "kill learner:0 --pick some",
                          "slow learner:0 --via magic --for 1s", "disk corrupt owner:0 --count 0",
                          "msg delay-push learner:0 --for 1s", "msg drop-push learner:0",
                          "net latency learner:0 --for 5s", "net bandwidth learner:0 --for 5s",
                          "net corrupt learner:0 --p 2 --for 5s", "net reset learner:0 --ms 5",
                          "random --kinds latency --duration 10s"}) {
    const auto r = dd_chaos(std::string(cmd) + nowhere);
    EXPECT_EQ(r.rc, 2) << cmd << ": " << r.out;
    EXPECT_EQ(r.out.find("nodes.json"), std::string::npos) << cmd << ": " << r.out;
  }
  // The exact message a user saw, and with a real nodes file (no proxy in it) too.
  for (const std::string& where : {nowhere, rd()}) {
    const auto r = dd_chaos("net latency learner:0 --for 5s" + where);
    EXPECT_EQ(r.rc, 2) << r.out;
    EXPECT_NE(r.out.find("net latency needs --ms"), std::string::npos) << r.out;
  }
  // Good flags, missing nodes file: that error, exit 1.
  const auto missing = dd_chaos("pause learner:0 --for 1s" + nowhere);
  EXPECT_EQ(missing.rc, 1) << missing.out;
  EXPECT_NE(missing.out.find("nodes.json"), std::string::npos) << missing.out;
  EXPECT_EQ(state_of(sleeper), 'S');
}

// --dry-run checks every target against the nodes file, for sessions too (their faults are
// only listed): learner:99 is hosted by no node.
TEST_F(cluster, dry_run_refuses_targets_no_node_hosts) {
  {
    std::ofstream lua(dir + "/bad.lua");
    lua << "return {\n  { at = 1, kind = 'pause', target = 'learner:0', for_ = 1 },\n"
           "  { at = 2, kind = 'kill', target = 'learner:99' },\n"
           "  { at = 3, kind = 'drop_push', target = 'learner:98', count = 1 },\n}\n";
    std::ofstream good(dir + "/good.lua");
    good << "return {\n  { at = 1, kind = 'pause', target = 'learner:0', for_ = 1 },\n"
            "  { at = 2, kind = 'nan_step', target = 'learner:0' },\n"
            "  { at = 3, kind = 'heal' },\n}\n";
  }
  auto r = dd_chaos("run " + dir + "/bad.lua --dry-run" + rd());
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("learner:99: no node"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("learner:98"), std::string::npos) << r.out;
  r = dd_chaos("run " + dir + "/good.lua --dry-run" + rd());
  EXPECT_EQ(r.rc, 0) << r.out;
  for (const char* cmd : {"kill learner:99 --dry-run", "msg nan learner:99 --dry-run",
                          "disk truncate owner:7 --dry-run", "pause node:nobody --dry-run"}) {
    r = dd_chaos(std::string(cmd) + rd());
    EXPECT_EQ(r.rc, 1) << cmd << ": " << r.out;
    EXPECT_NE(r.out.find("no node"), std::string::npos) << cmd << ": " << r.out;
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/chaos.jsonl"));
  EXPECT_EQ(state_of(sleeper), 'S');
}

// A node that restarts has no chaos endpoint for a moment (nobody listens on its port): heal
// says "restarting" and does not count it as a failure. The nodes file's empty run id (the
// launcher wrote it before the syncer chose one) is "unknown yet" in status.
TEST_F(cluster, heal_counts_a_restarting_node_as_restarting_and_status_an_unknown_run_id) {
  nodes_file f = read_nodes_file(dir + "/nodes.json");
  f.run_id = "";
  // A port nobody listens on: bound and closed again.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  ::close(fd);
  f.find("learner-0")->chaos_port = ntohs(a.sin_port);
  f.find("learner-0")->incarnation = 1;
  write_nodes_file(dir + "/nodes.json", f);
  const auto h = dd_chaos("heal" + rd());
  EXPECT_EQ(h.rc, 0) << h.out;
  EXPECT_NE(h.out.find("restarting"), std::string::npos) << h.out;
  const auto s = dd_chaos("status" + rd());
  EXPECT_EQ(s.rc, 0) << s.out;
  EXPECT_NE(s.out.find("(run id unknown yet"), std::string::npos) << s.out;
}

// `learners` in a network fault is every learner link, as
// docs/chaos.md's net section says (it picked one link at random, the rule of process faults,
// while the report's table still said "learners"); --pick still narrows it.
TEST_F(cluster, a_network_fault_on_learners_hits_every_learner_link) {
  nodes_file f = read_nodes_file(dir + "/nodes.json");
  f.proxy = control_process{1, "127.0.0.1:9"};
  for (int k = 1; k < 3; ++k) {
    node_entry l = *f.find("learner-0");
    l.name = "learner-" + std::to_string(k);
    l.actors = {"learner:" + std::to_string(k)};
    f.nodes.push_back(l);
  }
  write_nodes_file(dir + "/nodes.json", f);
  const auto all = dd_chaos("net latency learners --ms 5 --for 1s --dry-run" + rd());
  ASSERT_EQ(all.rc, 0) << all.out;
  for (int k = 0; k < 3; ++k)
    EXPECT_NE(all.out.find("latency link learner-" + std::to_string(k)), std::string::npos)
        << all.out;
  const auto one = dd_chaos("net latency learners --ms 5 --for 1s --pick one --dry-run" + rd());
  ASSERT_EQ(one.rc, 0) << one.out;
  size_t links = 0;
  for (size_t at = one.out.find("latency link "); at != std::string::npos;
       at = one.out.find("latency link ", at + 1))
    ++links;
  EXPECT_EQ(links, 1u) << one.out;
  EXPECT_EQ(state_of(sleeper), 'S');
}
