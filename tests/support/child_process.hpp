// tests/support/child_process.hpp — the tests that run a binary as a child process
// (dd_node_run_test, full_disk_test): start it in a directory with stdout and stderr to
// <tag>.out / <tag>.err there, wait for it with a deadline, read what it wrote.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace dd::test {

/// Starts `argv` (argv[0]: the program's path) in `cwd` without waiting; stdout goes to
/// cwd/<tag>.out and stderr to cwd/<tag>.err (both truncated). The child exits 126 when it
/// cannot enter `cwd` or open those files, 127 when the exec fails. Returns its pid (-1 when
/// fork fails).
inline pid_t start_process(const std::filesystem::path& cwd, const std::string& tag,
                           std::vector<std::string> argv) {
  const std::string out = (cwd / (tag + ".out")).string();
  const std::string err = (cwd / (tag + ".err")).string();
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::chdir(cwd.c_str()) != 0) ::_exit(126);
    const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (o < 0 || e < 0) ::_exit(126);
    ::dup2(o, 1);
    ::dup2(e, 2);
    std::vector<char*> raw;
    for (auto& a : argv) raw.push_back(a.data());
    raw.push_back(nullptr);
    ::execv(raw[0], raw.data());
    ::_exit(127);
  }
  return pid;
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

/// The whole file, byte for byte ("" when it cannot be read).
inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace dd::test
