// apps/dd_node/run_lock.cpp — see run_lock.hpp.
#include "apps/dd_node/run_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace dd::app {

std::string lock_holder(const std::string& pid) {
  const std::string fallback = "another dd-node process";
  if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) return fallback;
  std::ifstream in("/proc/" + pid + "/cmdline", std::ios::binary);
  std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  for (size_t at = 0; at < cmdline.size() && args.size() < 2;) {
    const size_t end = cmdline.find('\0', at);
    args.push_back(cmdline.substr(at, end == std::string::npos ? std::string::npos : end - at));
    if (end == std::string::npos) break;
    at = end + 1;
  }
  if (args.empty()) return fallback;
  const std::string exe = std::filesystem::path(args[0]).filename().string();
  if (exe.empty()) return fallback;
  return args.size() > 1 && !args[1].empty() && args[1][0] != '-' ? exe + " " + args[1] : exe;
}

run_dir_lock::~run_dir_lock() {
  if (fd_ >= 0) ::close(fd_);
}

run_dir_lock::run_dir_lock(run_dir_lock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }

run_dir_lock& run_dir_lock::operator=(run_dir_lock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

run_dir_lock run_dir_lock::acquire(const std::string& dir, std::string& error,
                                   const std::string& kind, const std::string& advice) {
  namespace fs = std::filesystem;
  run_dir_lock lock;
  std::error_code ec;
  fs::create_directories(dir, ec);
  const std::string path = (fs::path(dir) / "LOCK").string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    error = "cannot open the lock file '" + path + "' of " + kind + " '" + dir +
            "': " + std::strerror(errno);
    return lock;
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err == EWOULDBLOCK) {
      char buf[32] = {};
      const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
      std::string pid = n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
      while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
      error = kind + " '" + dir + "' is in use by " + lock_holder(pid) + " (pid " +
              (pid.empty() ? std::string("unknown") : pid) + ", lock " + path +
              "); wait for it to finish or " + advice;
    } else {
      error = "cannot lock '" + path + "': " + std::strerror(err);
    }
    ::close(fd);
    return lock;
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) == 0) {
    ssize_t ignored = ::pwrite(fd, pid.data(), pid.size(), 0);
    (void)ignored;
  }
  lock.fd_ = fd;
  return lock;
}

bool checkpoint_dir_outside(const std::string& run_dir, const std::string& checkpoint_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto run_abs = fs::weakly_canonical(fs::absolute(run_dir), ec);
  const auto ck_abs = fs::weakly_canonical(fs::absolute(checkpoint_dir), ec);
  const auto rel = ck_abs.lexically_relative(run_abs);
  return rel.empty() || *rel.begin() == "..";
}

bool lock_checkpoint_dir(const std::string& run_dir, const std::string& checkpoint_dir,
                         run_dir_lock& out, std::string& error) {
  if (checkpoint_dir.empty() || !checkpoint_dir_outside(run_dir, checkpoint_dir)) return true;
  out = run_dir_lock::acquire(checkpoint_dir, error, "checkpoint directory",
                              "point checkpoint.dir elsewhere");
  return out.held();
}

}  // namespace dd::app
