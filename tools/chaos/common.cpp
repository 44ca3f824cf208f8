// tools/chaos/common.cpp — see common.hpp.
#include "tools/chaos/common.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>

#include <fmt/format.h>

#include "util/parse.hpp"

namespace dd::chaos {

double parse_duration(const std::string& text, const std::string& what) {
  if (text.empty()) throw usage_error(fmt::format("{}: empty duration", what));
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    throw usage_error(fmt::format("{}: '{}' is not a duration (e.g. 250ms, 1.5s, 2m)", what, text));
  }
  const std::string unit = text.substr(used);
  const double scale = util::seconds_per_unit(unit);
  if (scale == 0)
    throw usage_error(
        fmt::format("{}: '{}' has unknown unit '{}' (use us, ms, s, m, h)", what, text, unit));
  if (!std::isfinite(value) || value < 0)
    throw usage_error(fmt::format("{}: '{}' must be a finite duration >= 0", what, text));
  return value * scale;
}

std::string format_duration(double s) {
  if (s < 1e-3) return fmt::format("{:g}us", s * 1e6);
  if (s < 1) return fmt::format("{:g}ms", std::round(s * 1e6) / 1e3);
  if (s < 60) return fmt::format("{:g}s", std::round(s * 1e3) / 1e3);
  const auto m = static_cast<long>(s / 60);
  const double rest = s - 60.0 * m;
  if (rest < 1e-3) return fmt::format("{}m", m);
  return fmt::format("{}m{:g}s", m, std::round(rest * 1e3) / 1e3);
}

host_port parse_host_port(const std::string& text, const std::string& what) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos)
    throw usage_error(fmt::format("{}: '{}' is not HOST:PORT", what, text));
  host_port hp;
  hp.host = text.substr(0, colon);
  if (hp.host.empty()) hp.host = "127.0.0.1";
  const std::string port = text.substr(colon + 1);
  char* end = nullptr;
  errno = 0;
  const long p = port.empty() ? -1 : std::strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || errno != 0 || p < 0 || p > 65535)
    throw usage_error(fmt::format("{}: '{}' has no valid port (0-65535)", what, text));
  hp.port = static_cast<uint16_t>(p);
  return hp;
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const auto at = text.find(sep, start);
    out.push_back(text.substr(start, at - start));
    if (at == std::string::npos) break;
    start = at + 1;
  }
  return out;
}

double wall_now() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

double mono_now() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void sleep_for(double seconds) {
  if (seconds <= 0) return;
  timespec req{};
  req.tv_sec = static_cast<time_t>(seconds);
  req.tv_nsec = static_cast<long>((seconds - req.tv_sec) * 1e9);
  while (nanosleep(&req, &req) != 0 && errno == EINTR) {}
}

void write_file_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = fmt::format("{}.tmp.{}", path, getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw chaos_error(fmt::format("{}: cannot write: {}", tmp, std::strerror(errno)));
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw chaos_error(fmt::format("{}: write failed: {}", tmp, std::strerror(e)));
    }
    done += static_cast<size_t>(n);
  }
  ::fsync(fd);
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    throw chaos_error(fmt::format("{}: rename failed: {}", path, std::strerror(e)));
  }
}

std::string read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw chaos_error(fmt::format("{}: cannot read: {}", path, std::strerror(errno)));
  std::string out;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      throw chaos_error(fmt::format("{}: read failed: {}", path, std::strerror(e)));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

void append_line(const std::string& path, const std::string& line) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw chaos_error(fmt::format("{}: cannot append: {}", path, std::strerror(errno)));
  const std::string text = line + "\n";
  const ssize_t n = ::write(fd, text.data(), text.size());
  const int e = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(text.size()))
    throw chaos_error(fmt::format("{}: append failed: {}", path, std::strerror(e)));
}

}  // namespace dd::chaos
