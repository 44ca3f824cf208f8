// util/child.cpp — see child.hpp.
#include "util/child.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <exception>

#include "util/net.hpp"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || defined(__SANITIZE_MEMORY__)
#define DD_CHILD_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define DD_CHILD_SANITIZED 1
#endif
#endif

namespace dd::util {

namespace {

#ifndef DD_CHILD_SANITIZED  // (a sanitized child sets no RLIMIT_AS: see run_in_child)
/// Address space in use now, bytes (first field of /proc/self/statm, in pages); 0 if unknown.
std::size_t address_space_now() {
  const int fd = ::open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[64];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return 0;
  std::size_t pages = 0;
  for (ssize_t i = 0; i < n && buf[i] >= '0' && buf[i] <= '9'; ++i)
    pages = pages * 10 + static_cast<std::size_t>(buf[i] - '0');
  return pages * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
}
#endif

/// The child's side: limits, work, hand back, _exit. Never returns.
[[noreturn]] void child_main(int out, volatile int* progress,
                             const std::function<std::string(volatile int*)>& work,
                             const child_limits& limits) {
  // Die with the parent; the parent's signal handlers are not ours.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGXCPU, SIGCHLD})
    ::signal(sig, SIG_DFL);
  rlimit none{0, 0};
  ::setrlimit(RLIMIT_CORE, &none);
  if (limits.cpu_seconds > 0) {
    rlimit cpu{limits.cpu_seconds, limits.cpu_seconds + 1};
    ::setrlimit(RLIMIT_CPU, &cpu);
  }
#ifndef DD_CHILD_SANITIZED
  if (limits.extra_address_space > 0) {
    const std::size_t now = address_space_now();
    if (now > 0) {
      rlimit as{now + limits.extra_address_space, now + limits.extra_address_space};
      ::setrlimit(RLIMIT_AS, &as);
    }
  }
#endif
  char tag = 'R';
  std::string bytes;
  try {
    bytes = work(progress);
  } catch (const std::exception& e) {
    tag = 'E';
    try {
      bytes = e.what();
    } catch (...) {}
  } catch (...) {
    tag = 'E';
  }
  const std::uint64_t size = bytes.size();
  char header[9];
  header[0] = tag;
  std::memcpy(header + 1, &size, sizeof size);
  const bool ok =
      write_all(out, header, sizeof header) == 0 && write_all(out, bytes.data(), bytes.size()) == 0;
  ::_exit(ok ? 0 : 1);
}

std::string describe_wait(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = ::strsignal(sig);
    return "killed by signal " + std::to_string(sig) + " (" + (name != nullptr ? name : "?") + ")";
  }
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  return "ended";
}

}  // namespace

child_outcome run_in_child(const std::function<std::string(volatile int* progress)>& work,
                           const child_limits& limits) noexcept {
  child_outcome r;
  try {
    void* page = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) {
      r.detail = std::string("cannot map shared memory: ") + std::strerror(errno);
      return r;
    }
    auto* progress = static_cast<volatile int*>(page);
    *progress = 0;
    struct unmap {
      void* p;
      ~unmap() { ::munmap(p, 4096); }
    } unmapper{page};

    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
      r.detail = std::string("cannot create a pipe: ") + std::strerror(errno);
      return r;
    }
    const pid_t pid = ::fork();
    if (pid < 0) {
      r.detail = std::string("cannot fork: ") + std::strerror(errno);
      ::close(fds[0]);
      ::close(fds[1]);
      return r;
    }
    if (pid == 0) {
      ::close(fds[0]);
      child_main(fds[1], progress, work, limits);
    }
    ::close(fds[1]);
    const int in = fds[0];

    // Read "tag, 8-byte size, bytes" until complete, EOF or the deadline.
    std::string got;
    bool complete = false, timed_out = false;
    char buf[65536];
    for (;;) {
      if (got.size() >= 9) {
        std::uint64_t size = 0;
        std::memcpy(&size, got.data() + 1, sizeof size);
        if (got.size() - 9 >= size) {
          complete = true;
          break;
        }
      }
      const auto left = limits.deadline - std::chrono::steady_clock::now();
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(left).count();
      if (ms <= 0) {
        timed_out = true;
        break;
      }
      pollfd p{in, POLLIN, 0};
      const int n = ::poll(&p, 1, static_cast<int>(ms > 60000 ? 60000 : ms + 1));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) break;
      if (n == 0) continue;
      const ssize_t k = ::read(in, buf, sizeof buf);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) break;  // EOF: the child ended without a whole result
      got.append(buf, static_cast<std::size_t>(k));
    }
    ::close(in);
    if (timed_out) ::kill(pid, SIGKILL);
    int status = 0;
    pid_t w;
    do {
      w = ::waitpid(pid, &status, 0);
    } while (w < 0 && errno == EINTR);
    const bool reaped = w == pid;
    r.progress = *progress;
    if (timed_out || (reaped && WIFSIGNALED(status) && WTERMSIG(status) == SIGXCPU)) {
      r.state = child_outcome::status::timed_out;
      return r;
    }
    if (complete) {
      if (got[0] == 'R') {
        r.state = child_outcome::status::ok;
        r.payload = got.substr(9);
      } else {
        r.state = child_outcome::status::died;
        r.detail = "threw: " + got.substr(9);
      }
      return r;
    }
    r.state = child_outcome::status::died;
    r.detail = reaped ? describe_wait(status) : "ended without a result";
    return r;
  } catch (...) {
    r.state = child_outcome::status::failed;
    r.detail = "out of memory";
    return r;
  }
}

}  // namespace dd::util
