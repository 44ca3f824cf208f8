// tests/support/child_process.hpp — the one child-process helper of the tests that run a binary
// (dd-node, dd-chaos, the benchmarks): start it in a directory with its output to files, or run
// a shell command and capture its output; wait for it with a deadline; read what it wrote.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace dd::test {

/// Starts `argv` (argv[0]: the program's path) without waiting: in `cwd` when not empty, stdout
/// to `out` and stderr to `err` when not empty (both truncated; the same path for both joins
/// them), in a process group of its own when `own_group`. The child exits 126 when it cannot
/// enter `cwd` or open those files, 127 when the exec fails. Returns its pid (-1 when fork fails).
inline pid_t start_child(const std::filesystem::path& cwd, std::vector<std::string> argv,
                         const std::string& out = {}, const std::string& err = {},
                         bool own_group = false) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (own_group) ::setpgid(0, 0);
    if (!cwd.empty() && ::chdir(cwd.c_str()) != 0) ::_exit(126);
    if (!out.empty()) {
      const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int e = err == out    ? o
                    : err.empty() ? 2
                                  : ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (o < 0 || e < 0) ::_exit(126);
      ::dup2(o, 1);
      ::dup2(e, 2);
    }
    std::vector<char*> raw;
    for (auto& a : argv) raw.push_back(a.data());
    raw.push_back(nullptr);
    ::execv(raw[0], raw.data());
    ::_exit(127);
  }
  return pid;
}

/// start_child in `cwd` with stdout to cwd/<tag>.out and stderr to cwd/<tag>.err.
inline pid_t start_process(const std::filesystem::path& cwd, const std::string& tag,
                           std::vector<std::string> argv) {
  return start_child(cwd, std::move(argv), (cwd / (tag + ".out")).string(),
                     (cwd / (tag + ".err")).string());
}

/// Runs `cmd` through the shell and waits: its exit status (-1 when a signal ended it) and its
/// stdout and stderr together.
inline std::pair<int, std::string> run_command(const std::string& cmd) {
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  std::string out;
  if (p == nullptr) return {-1, out};
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = ::pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

/// Waits up to `seconds` for `pid`, polling every 20 ms: its exit status, 256 + the signal when
/// a signal ended it (so that exit(130) and death by SIGINT differ), or -1 after killing it
/// with SIGKILL at the deadline.
inline int wait_exit(pid_t pid, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  int status = 0;
  while (std::chrono::steady_clock::now() < end) {
    if (::waitpid(pid, &status, WNOHANG) == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : 256 + WTERMSIG(status);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  return -1;
}

/// Calls `pred()` every 50 ms until it is true or `seconds` pass; whether it became true.
template <class Pred>
bool wait_until(Pred pred, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

/// The whole file, byte for byte ("" when it cannot be read).
inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace dd::test
