// tests/actors/process_support.hpp — helpers of the tests that run real processes (dd-node
// syncer / learner / launch, dd-chaos) on top of tests/support/child_process.hpp: spawn with
// stdout+stderr to one file, wait with a deadline (killing its process group), read a
// JSON-lines events file, count and wait for events in it, read a whole file.
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/child_process.hpp"
#include "tests/support/fresh_dir.hpp"
#include "util/net.hpp"

namespace dd::test {

/// One accept of a test relay: waits up to poll_ms for a client on listen_fd, accepts it and
/// dials `target` on loopback. The two descriptors (client, upstream), or nothing when no client
/// came or the target refused (the client is closed then).
inline std::optional<std::pair<int, int>> accept_relayed(int listen_fd, uint16_t target,
                                                         int poll_ms) {
  pollfd p{listen_fd, POLLIN, 0};
  if (::poll(&p, 1, poll_ms) <= 0) return std::nullopt;
  const int c = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
  if (c < 0) return std::nullopt;
  const int u = dd::util::connect_loopback(target);
  if (u < 0) {
    ::close(c);
    return std::nullopt;
  }
  return std::make_pair(c, u);
}

/// Starts argv[0] with `args` in `cwd`, stdout and stderr to `out`.
inline pid_t spawn(const std::filesystem::path& cwd, const std::vector<std::string>& args,
                   const std::string& out) {
  return start_child(cwd, args, out, out);
}

/// Exit status (128 + signal when killed); -1 after killing it (and its group) at the deadline.
inline int wait_for(pid_t pid, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    int ws = 0;
    if (::waitpid(pid, &ws, WNOHANG) == pid)
      return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::kill(-pid, SIGKILL);
  ::kill(pid, SIGKILL);
  int ws = 0;
  ::waitpid(pid, &ws, 0);
  return -1;
}

/// Every line of a JSON-lines file (empty when it does not exist).
inline std::vector<nlohmann::json> events(const std::filesystem::path& file) {
  std::vector<nlohmann::json> out;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

/// The whole file ("" when it does not exist).
inline std::string text(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// The number of `kind` events in a JSON-lines events file, by their text (a line cut short by a
/// kill is passed over, not a parse error).
inline size_t count_events(const std::filesystem::path& file, const std::string& kind) {
  size_t n = 0;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line))
    if (line.find("\"event\":\"" + kind + "\"") != std::string::npos) ++n;
  return n;
}

/// Waits up to `seconds` until `file` holds `count` events of `kind`; whether it did.
inline bool wait_events(const std::filesystem::path& file, const std::string& kind, size_t count,
                        double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (count_events(file, kind) >= count) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

/// The invariant verdicts of a `dd-chaos report --json` file by name; expects the report's exit
/// status `rc` to be 1 exactly when one of them is "invalid".
inline std::map<std::string, std::string> report_verdicts(const nlohmann::json& report, int rc) {
  bool any_invalid = false;
  std::map<std::string, std::string> v;
  for (const auto& i : report["invariants"]) {
    v[i["name"]] = i["verdict"];
    any_invalid = any_invalid || i["verdict"] == "invalid";
  }
  EXPECT_EQ(rc, any_invalid ? 1 : 0);
  return v;
}

#ifdef DD_NODE_BIN
/// Starts `dd-node launch tiny.lua` in `dir` (run directory `run`, no progress lines, a 0.2 s
/// middleman heartbeat and a 1 s connection timeout, then `extra`); its output in `dir`/`out`.
inline pid_t launch_tiny(const std::filesystem::path& dir,
                         const std::vector<std::string>& extra = {},
                         const std::string& out = "launch.out") {
  std::vector<std::string> argv = {
      DD_NODE_BIN,  "launch", "tiny.lua",    "--run-dir", "run",
      "--progress", "0",      "--heartbeat", "0.2",       "--connection-timeout",
      "1"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return spawn(dir, argv, (dir / out).string());
}
#endif

}  // namespace dd::test
