// tools/chaos/proc.cpp — see proc.hpp.
#include "tools/chaos/proc.hpp"

#include <fcntl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cerrno>
#include <csignal>
#include <cstring>

#include <fmt/format.h>

#include "tools/chaos/common.hpp"
#include "util/net.hpp"

namespace dd::chaos {

std::optional<proc_stat> read_proc_stat(int pid) {
  if (pid <= 0) return std::nullopt;
  std::string text;
  try {
    text = read_file(fmt::format("/proc/{}/stat", pid));
  } catch (const chaos_error&) {
    return std::nullopt;
  }
  // "PID (COMM) STATE f4 f5 ..." — COMM may hold spaces and parentheses: cut at the last ')'.
  const auto close = text.rfind(')');
  if (close == std::string::npos || close + 2 >= text.size()) return std::nullopt;
  std::vector<std::string> fields;
  size_t i = close + 2;
  while (i < text.size() && fields.size() < 21) {
    const auto sp = text.find(' ', i);
    fields.push_back(text.substr(i, sp == std::string::npos ? std::string::npos : sp - i));
    if (sp == std::string::npos) break;
    i = sp + 1;
  }
  // fields[0] is field 3 (state); field 22 is fields[19].
  if (fields.size() < 20 || fields[0].empty()) return std::nullopt;
  proc_stat s;
  s.state = fields[0][0];
  s.start_time = std::strtoull(fields[19].c_str(), nullptr, 10);
  return s;
}

std::string describe(identity_check c, int pid, uint64_t expected, uint64_t found) {
  switch (c) {
    case identity_check::ok: return "ok";
    case identity_check::no_pid: return "no pid recorded (the node is down)";
    case identity_check::gone: return fmt::format("pid {} does not exist (the node exited)", pid);
    case identity_check::reused:
      return fmt::format(
          "pid {} was reused: its start time is {} ticks, the nodes file says {} — not signalled",
          pid, found, expected);
  }
  return "?";
}

namespace {
int pidfd_open(int pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }
}  // namespace

std::optional<verified_process> verified_process::open(int pid, uint64_t start_time,
                                                       std::string* why, identity_check* check) {
  auto fail = [&](identity_check c, uint64_t found) -> std::optional<verified_process> {
    if (why) *why = describe(c, pid, start_time, found);
    if (check) *check = c;
    return std::nullopt;
  };
  if (pid <= 0) return fail(identity_check::no_pid, 0);
  // Open first, then check: if the pid is reused after the open the pidfd still names the process
  // we checked; if it was reused before, the start time differs.
  const int fd = pidfd_open(pid);
  if (fd < 0) return fail(identity_check::gone, 0);
  const auto st = read_proc_stat(pid);
  if (!st || st->state == 'Z' || st->state == 'X') {
    ::close(fd);
    return fail(identity_check::gone, 0);
  }
  if (st->start_time != start_time) {
    ::close(fd);
    return fail(identity_check::reused, st->start_time);
  }
  if (check) *check = identity_check::ok;
  return verified_process(pid, fd);
}

verified_process::verified_process(verified_process&& o) noexcept : pid_(o.pid_), fd_(o.fd_) {
  o.fd_ = -1;
}

verified_process& verified_process::operator=(verified_process&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    pid_ = o.pid_;
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

verified_process::~verified_process() {
  if (fd_ >= 0) ::close(fd_);
}

bool verified_process::signal(int sig) const {
  return ::syscall(SYS_pidfd_send_signal, fd_, sig, nullptr, 0) == 0;
}

bool verified_process::alive() const {
  if (!signal(0)) return false;
  const auto st = read_proc_stat(pid_);
  return st && st->state != 'Z' && st->state != 'X';
}

namespace {

size_t read_all(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::read(fd, c + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  return got;
}

void reset_child_signals() {
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGCHLD}) std::signal(s, SIG_DFL);
}

// Forks twice; the grandchild runs `body` (which must not return normally for exec) in a new
// session. Returns the grandchild's pid as read from `report` pipe, after the middle child exits.
int double_fork(const std::function<void(int report_fd)>& body, int* report_read_fd) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) throw chaos_error(fmt::format("pipe: {}", std::strerror(errno)));
  const pid_t middle = ::fork();
  if (middle < 0) {
    ::close(p[0]);
    ::close(p[1]);
    throw chaos_error(fmt::format("fork: {}", std::strerror(errno)));
  }
  if (middle == 0) {
    ::close(p[0]);
    ::setsid();
    const pid_t grand = ::fork();
    if (grand < 0) ::_exit(1);
    if (grand == 0) {
      reset_child_signals();
      body(p[1]);
      ::_exit(0);
    }
    const int32_t g = grand;
    (void)util::write_all(p[1], &g, sizeof g);
    ::_exit(0);
  }
  ::close(p[1]);
  int status = 0;
  while (::waitpid(middle, &status, 0) < 0 && errno == EINTR) {}
  int32_t g = 0;
  if (read_all(p[0], &g, sizeof g) != sizeof g) {
    ::close(p[0]);
    throw chaos_error("fork of a detached process failed");
  }
  *report_read_fd = p[0];
  return g;
}

}  // namespace

namespace {

/// In the forked child: stdio as spawn_detached says, every other descriptor closed but
/// `report_fd` (close-on-exec), then exec; a failed exec writes its errno to `report_fd`.
[[noreturn]] void exec_node(const std::vector<std::string>& argv, const std::string& log,
                            int report_fd) {
  const int in = ::open("/dev/null", O_RDONLY);
  const int out = log.empty() ? ::open("/dev/null", O_WRONLY)
                              : ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (in >= 0) ::dup2(in, 0);
  if (out >= 0) {
    ::dup2(out, 1);
    ::dup2(out, 2);
  }
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  if (report_fd > 3) ::close_range(3, static_cast<unsigned>(report_fd - 1), 0);
  ::close_range(static_cast<unsigned>(report_fd + 1), ~0U, 0);
  ::execv(args[0], args.data());
  const int32_t e = errno;
  (void)util::write_all(report_fd, &e, sizeof e);
  ::_exit(127);
}

/// Reads the exec report of `report` (closing it): throws when the exec failed.
void check_exec(int report, const std::vector<std::string>& argv) {
  int32_t err = 0;
  const size_t got = read_all(report, &err, sizeof err);  // EOF: the exec succeeded
  ::close(report);
  if (got == sizeof err)
    throw chaos_error(fmt::format("cannot start {}: {}", argv[0], std::strerror(err)));
}

}  // namespace

int spawn_detached(const std::vector<std::string>& argv, const std::string& log) {
  if (argv.empty()) throw chaos_error("no command line recorded (argv is empty)");
  int report = -1;
  const int pid = double_fork([&](int report_fd) { exec_node(argv, log, report_fd); }, &report);
  check_exec(report, argv);
  return pid;
}

int spawn_child(const std::vector<std::string>& argv, const std::string& log) {
  if (argv.empty()) throw chaos_error("no command line recorded (argv is empty)");
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) throw chaos_error(fmt::format("pipe: {}", std::strerror(errno)));
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(p[0]);
    ::close(p[1]);
    throw chaos_error(fmt::format("fork: {}", std::strerror(errno)));
  }
  if (pid == 0) {
    ::close(p[0]);
    ::setsid();
    reset_child_signals();
    exec_node(argv, log, p[1]);
  }
  ::close(p[1]);
  try {
    check_exec(p[0], argv);
  } catch (...) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    throw;
  }
  return pid;
}

std::optional<int> exited_within(int pid, double seconds) {
  const double end = mono_now() + seconds;
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    }
    if (r < 0 && errno != EINTR) return std::nullopt;  // not our child
    if (mono_now() >= end) return std::nullopt;
    sleep_for(0.02);
  }
}

std::vector<std::string> reexec_argv(const std::vector<std::string>& argv) {
  if (argv.size() < 2) return argv;
  const std::string bin = argv[0].substr(argv[0].find_last_of('/') + 1);
  if (bin != "dd-node" || (argv[1] != "syncer" && argv[1] != "run")) return argv;
  std::vector<std::string> out;
  bool resume = false;
  for (const auto& a : argv) {
    if (a == "--overwrite") continue;
    resume = resume || a == "--resume";
    out.push_back(a);
  }
  if (!resume) out.push_back("--resume");
  return out;
}

int spawn_detached_fn(const std::function<void()>& fn, int keep_fd) {
  int report = -1;
  const int pid = double_fork(
      [&](int report_fd) {
        ::close(report_fd);
        const int devnull = ::open("/dev/null", O_RDWR);
        if (devnull >= 0) {
          ::dup2(devnull, 0);
          ::dup2(devnull, 1);
          ::dup2(devnull, 2);
        }
        // Hold nothing of the caller's (pipes to a terminal or a test) but the pidfd it needs.
        if (keep_fd >= 3) {
          if (keep_fd > 3) ::close_range(3, static_cast<unsigned>(keep_fd - 1), 0);
          ::close_range(static_cast<unsigned>(keep_fd + 1), ~0U, 0);
        } else {
          ::close_range(3, ~0U, 0);
        }
        fn();
        ::_exit(0);
      },
      &report);
  ::close(report);
  return pid;
}

bool wait_gone(int pid, uint64_t start_time, double timeout) {
  const double end = mono_now() + timeout;
  for (;;) {
    int status = 0;
    ::waitpid(pid, &status, WNOHANG);  // reaps our own children; harmless otherwise
    const auto st = read_proc_stat(pid);
    if (!st || st->start_time != start_time || st->state == 'Z' || st->state == 'X') return true;
    if (mono_now() >= end) return false;
    sleep_for(0.01);
  }
}

bool sleep_or_sigterm(double seconds) {
  if (seconds <= 0) return false;
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  const double end = mono_now() + seconds;
  for (;;) {
    const double left = end - mono_now();
    if (left <= 0) return false;
    timespec ts{};
    ts.tv_sec = static_cast<time_t>(left);
    ts.tv_nsec = static_cast<long>((left - ts.tv_sec) * 1e9);
    const int s = sigtimedwait(&set, nullptr, &ts);
    if (s == SIGTERM) return true;
  }
}

}  // namespace dd::chaos
