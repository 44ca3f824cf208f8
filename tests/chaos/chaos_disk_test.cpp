// tests/chaos/chaos_disk_test.cpp — disk faults and the cgroup form of `slow`, through the real
// dd-chaos binary: an owner checkpoint truncated and corrupted, a tmpfs filled with ballast
// (a real small tmpfs, tests/support/scoped_tmpfs.hpp; skipped with the reason where mount(2) is
// refused) and removed after the duration or by heal, and a busy child moved into a cgroup v1
// cpu group with a quota, then back.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "tests/chaos/one_learner_nodes.hpp"
#include "tests/support/child_process.hpp"
#include "tests/support/scoped_tmpfs.hpp"
#include "tools/chaos/common.hpp"
#include "tools/chaos/nodes_file.hpp"
#include "tools/chaos/proc.hpp"
#include "tools/chaos/sysfs.hpp"

using namespace dd::chaos;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::pair<int, std::string> dd_chaos(const std::string& args) {
  return dd::test::run_command(std::string(DD_CHAOS_BIN) + " " + args);
}

int spawn(const std::vector<std::string>& argv) { return dd::test::start_child({}, argv); }

std::string read_or_empty(const std::string& p) {
  std::ifstream in(p);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return s;
}

// A run directory with a syncer (hosting owner:0, run dir `dir`) and one learner process
// (`child`, run dir `learner_dir`), both described in dir/nodes.json.
struct disk_cluster : ::testing::Test {
  std::string dir, learner_dir;
  int child = 0;

  void SetUp() override {
    char tmpl[] = "/tmp/dd-chaos-disk-XXXXXX";
    dir = ::mkdtemp(tmpl);
    learner_dir = dir + "/nodes/learner-0";
    fs::create_directories(learner_dir);
  }
  void start_child(const std::vector<std::string>& argv) {
    child = spawn(argv);
    for (int i = 0; i < 200 && !read_proc_stat(child); ++i) sleep_for(0.005);
    sleep_for(0.05);  // exec'd
    nodes_file f =
        dd::test::syncer_down_one_learner("d15c", child, read_proc_stat(child)->start_time,
                                          {"/bin/true", "learner", "--run-dir", learner_dir});
    f.nodes[0].argv = {"/bin/true", "syncer", "--run-dir", dir};
    write_nodes_file(dir + "/nodes.json", f);
  }
  void TearDown() override {
    if (child > 0) {
      ::kill(child, SIGKILL);
      ::waitpid(child, nullptr, 0);
    }
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string rd() const { return " --run-dir " + dir; }
  json pending() const {
    const auto p = dir + "/chaos-state.json";
    return fs::exists(p) ? json::parse(read_file(p))["pending"] : json::array();
  }
  std::vector<json> tape() const {
    std::vector<json> out;
    std::ifstream in(dir + "/chaos.jsonl");
    std::string line;
    while (std::getline(in, line))
      if (!line.empty()) out.push_back(json::parse(line));
    return out;
  }
  std::string checkpoint(size_t bytes) {
    fs::create_directories(dir + "/checkpoints");
    const std::string p = dir + "/checkpoints/owner_0.ddck";
    write_file_atomic(p, std::string(bytes, '\0'));
    return p;
  }
};

std::string cpu_cgroup_of(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    const auto a = line.find(':'), b = line.find(':', a + 1);
    for (const auto& c : split(line.substr(a + 1, b - a - 1), ','))
      if (c == "cpu") return line.substr(b + 1);
  }
  return "?";
}

}  // namespace

TEST_F(disk_cluster, truncate_owner_checkpoint) {
  start_child({"/bin/sleep", "100"});
  const std::string ck = checkpoint(1000);
  auto [rc, out] = dd_chaos("disk truncate owner:0 --dry-run" + rd());
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("[dry-run] disk_truncate owner:0"), std::string::npos) << out;
  EXPECT_EQ(fs::file_size(ck), 1000u);
  EXPECT_TRUE(tape().empty());
  std::tie(rc, out) = dd_chaos("disk truncate owner:0" + rd());
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(fs::file_size(ck), 500u);  // half by default
  std::tie(rc, out) = dd_chaos("disk truncate owner:0 --keep 17" + rd());
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(fs::file_size(ck), 17u);
  const auto t = tape();
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[1]["kind"], "disk_truncate");
  EXPECT_EQ(t[1]["targets"], json::array({"owner:0"}));
  EXPECT_EQ(t[1]["hits"][0]["bytes_before"], 500);
  EXPECT_EQ(t[1]["hits"][0]["bytes_after"], 17);
  EXPECT_EQ(t[1]["params"]["keep"], 17);
  // Bad targets: an owner no node hosts (1), not an owner at all (2), --for (2).
  std::tie(rc, out) = dd_chaos("disk truncate owner:7" + rd());
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("no node hosts owner:7 (owners: owner:0)"), std::string::npos) << out;
  std::tie(rc, out) = dd_chaos("disk truncate learner:0" + rd());
  EXPECT_EQ(rc, 2) << out;
  std::tie(rc, out) = dd_chaos("disk truncate owner:0 --for 3s" + rd());
  EXPECT_EQ(rc, 2) << out;
  std::tie(rc, out) = dd_chaos("disk shred owner:0" + rd());
  EXPECT_EQ(rc, 2) << out;
  fs::remove(ck);
  std::tie(rc, out) = dd_chaos("disk truncate owner:0" + rd());
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("no checkpoint file yet"), std::string::npos) << out;
}

TEST_F(disk_cluster, corrupt_owner_checkpoint_is_seeded) {
  start_child({"/bin/sleep", "100"});
  const std::string ck = checkpoint(4096);
  auto [rc, out] = dd_chaos("disk corrupt owner:0 --count 8 --seed 5" + rd());
  ASSERT_EQ(rc, 0) << out;
  const std::string first = read_or_empty(ck);
  ASSERT_EQ(first.size(), 4096u);
  size_t changed = 0;
  for (char c : first) changed += c != '\0';
  EXPECT_GE(changed, 1u);
  EXPECT_LE(changed, 8u);
  const auto t = tape();
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0]["hits"][0]["offsets"].size(), 8u);
  EXPECT_EQ(t[0]["params"]["seed"], 5);
  for (const auto& off : t[0]["hits"][0]["offsets"]) EXPECT_NE(first[off.get<size_t>()], '\0');
  // Same seed on the same bytes: the same damage.
  checkpoint(4096);
  std::tie(rc, out) = dd_chaos("disk corrupt owner:0 --count 8 --seed 5" + rd());
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(read_or_empty(ck), first);
}

TEST_F(disk_cluster, full_refuses_a_directory_not_on_tmpfs) {
  start_child({"/bin/sleep", "100"});
  if (filesystem_of(learner_dir).tmpfs) GTEST_SKIP() << "/tmp is a tmpfs here";
  auto [rc, out] = dd_chaos("disk full node:learner-0 --for 2s" + rd());
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("not a tmpfs"), std::string::npos) << out;
  EXPECT_TRUE(pending().empty());
  EXPECT_TRUE(fs::is_empty(learner_dir));
}

TEST_F(disk_cluster, full_fills_a_tmpfs_and_reverts_after_the_duration_and_on_heal) {
  dd::test::scoped_tmpfs tmp(learner_dir, 4 << 20);
  if (!tmp.mounted()) GTEST_SKIP() << "cannot mount a tmpfs: " << tmp.error();
  start_child({"/bin/sleep", "100"});
  const size_t empty = tmp.free_bytes();
  auto [rc, out] = dd_chaos("disk full node:learner-0 --dry-run --for 2s" + rd());
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(tmp.free_bytes(), empty);
  // Too big a tmpfs for --max-fill: refused.
  std::tie(rc, out) = dd_chaos("disk full node:learner-0 --max-fill 1000 --for 2s" + rd());
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("--max-fill"), std::string::npos) << out;

  std::tie(rc, out) = dd_chaos("disk full learner:0 --reserve 65536 --for 2s" + rd());
  ASSERT_EQ(rc, 0) << out;
  EXPECT_LE(tmp.free_bytes(), 64u * 1024 + 4096);  // only the reserve is left
  {
    // A 1 MiB write by the node now fails with ENOSPC.
    std::ofstream f(learner_dir + "/events.jsonl");
    f << std::string(1 << 20, 'x');
    f.flush();
    EXPECT_FALSE(f.good());
  }
  fs::remove(learner_dir + "/events.jsonl");
  ASSERT_EQ(pending().size(), 1u);
  EXPECT_EQ(pending()[0]["kind"], "disk_full");
  const std::string ballast = pending()[0]["path"];
  EXPECT_TRUE(fs::exists(ballast));
  EXPECT_EQ(tape().back()["kind"], "disk_full");
  EXPECT_EQ(tape().back()["targets"], json::array({"node:learner-0"}));
  // The reverter removes the ballast after 2 s.
  const double end = mono_now() + 6;
  while (fs::exists(ballast) && mono_now() < end) sleep_for(0.05);
  EXPECT_FALSE(fs::exists(ballast));
  for (int i = 0; i < 100 && !pending().empty(); ++i) sleep_for(0.02);
  EXPECT_TRUE(pending().empty());
  EXPECT_EQ(tmp.free_bytes(), empty);

  // Without a duration it stays until heal.
  std::tie(rc, out) = dd_chaos("disk full node:learner-0" + rd());
  ASSERT_EQ(rc, 0) << out;
  EXPECT_LE(tmp.free_bytes(), (1u << 20) + 4096);  // the default reserve, 1 MiB
  std::tie(rc, out) = dd_chaos("heal" + rd());
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("ballast"), std::string::npos) << out;
  EXPECT_EQ(tmp.free_bytes(), empty);
  EXPECT_TRUE(pending().empty());
}

TEST_F(disk_cluster, slow_through_cgroup_v1_cpu_then_back) {
  std::string why;
  const std::string root = cgroup_cpu_root(&why);
  if (root.empty()) GTEST_SKIP() << why;
  start_child({"/bin/sh", "-c", "while :; do :; done"});  // a busy process
  const std::string before = cpu_cgroup_of(child);
  auto [rc, out] =
      dd_chaos("slow learner:0 --via cgroup --duty 0.75 --period 100ms --for 2s --dry-run" + rd());
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(cpu_cgroup_of(child), before);
  EXPECT_TRUE(pending().empty());

  std::tie(rc, out) =
      dd_chaos("slow learner:0 --via cgroup --duty 0.75 --period 100ms --for 2s" + rd());
  ASSERT_EQ(rc, 0) << out;
  const std::string inside = cpu_cgroup_of(child);
  EXPECT_NE(inside.find("/dd-chaos/slow_cgroup-learner-0-"), std::string::npos) << inside;
  const std::string group = root + inside;
  EXPECT_EQ(std::stoll(read_or_empty(group + "/cpu.cfs_period_us")), 100000);
  EXPECT_EQ(std::stoll(read_or_empty(group + "/cpu.cfs_quota_us")), 25000);
  ASSERT_EQ(pending().size(), 1u);
  EXPECT_EQ(pending()[0]["kind"], "slow_cgroup");
  EXPECT_EQ(pending()[0]["path"], group);
  EXPECT_EQ(tape().back()["params"]["via"], "cgroup");
  const double end = mono_now() + 6;
  while (fs::exists(group) && mono_now() < end) sleep_for(0.05);
  EXPECT_FALSE(fs::exists(group));
  EXPECT_EQ(cpu_cgroup_of(child), before);
  for (int i = 0; i < 100 && !pending().empty(); ++i) sleep_for(0.02);
  EXPECT_TRUE(pending().empty());

  // Until heal; and resume does the same ("slow" without --via: auto, a cgroup here).
  for (const auto& [slow, end_it] : {std::pair{"slow learner:0 --via cgroup", "heal"},
                                     std::pair{"slow learner:0", "resume learner:0"}}) {
    SCOPED_TRACE(std::string(slow) + ", then " + end_it);
    std::tie(rc, out) = dd_chaos(slow + rd());
    ASSERT_EQ(rc, 0) << out;
    EXPECT_NE(cpu_cgroup_of(child), before);
    std::tie(rc, out) = dd_chaos(end_it + rd());
    EXPECT_EQ(rc, 0) << out;
    EXPECT_EQ(cpu_cgroup_of(child), before);
    EXPECT_TRUE(pending().empty());
  }
  EXPECT_EQ(read_proc_stat(child)->state == 'T', false);
}

TEST_F(disk_cluster, slow_via_signals_still_duty_cycles) {
  start_child({"/bin/sleep", "100"});
  const std::string before = cpu_cgroup_of(child);
  auto [rc, out] = dd_chaos("slow learner:0 --via signals --for 1s" + rd());
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(cpu_cgroup_of(child), before);
  ASSERT_EQ(pending().size(), 1u);
  EXPECT_EQ(pending()[0]["kind"], "slow");
  std::tie(rc, out) = dd_chaos("slow learner:0 --via carrier-pigeon" + rd());
  EXPECT_EQ(rc, 2) << out;
  std::tie(rc, out) = dd_chaos("heal" + rd());
  EXPECT_EQ(rc, 0) << out;
}
