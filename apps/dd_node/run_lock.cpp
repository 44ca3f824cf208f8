// apps/dd_node/run_lock.cpp — see run_lock.hpp.
#include "apps/dd_node/run_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "runtime/config/run_dir_default.hpp"
#include "runtime/run_dir.hpp"
#include "util/parse.hpp"

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

run_dir_lock run_dir_lock::acquire(const std::string& dir, std::string& error,
                                   const std::string& kind, const std::string& advice) {
  namespace fs = std::filesystem;
  run_dir_lock lock;
  std::error_code ec;
  fs::create_directories(dir, ec);
  const std::string path = (fs::path(dir) / "LOCK").string();
  util::unique_fd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!fd.valid()) {
    error = "cannot open the lock file '" + path + "' of " + kind + " '" + dir +
            "': " + std::strerror(errno);
    return lock;
  }
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err == EWOULDBLOCK) {
      char buf[32] = {};
      const ssize_t n = ::pread(fd.get(), buf, sizeof buf - 1, 0);
      std::string pid = n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
      while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
      error = kind + " '" + dir + "' is in use by " + lock_holder(pid) + " (pid " +
              (pid.empty() ? std::string("unknown") : pid) + ", lock " + path +
              "); wait for it to finish or " + advice;
    } else {
      error = "cannot lock '" + path + "': " + std::strerror(err);
    }
    return lock;
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd.get(), 0) == 0) {
    ssize_t ignored = ::pwrite(fd.get(), pid.data(), pid.size(), 0);
    (void)ignored;
  }
  lock.fd_ = std::move(fd);
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

run_dir_opener::run_dir_opener(std::string who, run_dir_mode mode, bool name_in_lines)
    : who_(std::move(who)),
      mode_(mode),
      name_in_lines_(name_in_lines),
      parent_holds_(lock_held_by_parent()) {}

bool run_dir_opener::lock_held_by_parent() {
  const char* holder = std::getenv("DD_LAUNCH_LOCK_PID");
  int pid = 0;
  return holder != nullptr && util::parse_number(holder, pid) &&
         pid == static_cast<int>(::getppid());
}

bool run_dir_opener::lock(const std::string& dir, const std::string& prefix, bool checkpoints) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::string key = std::filesystem::weakly_canonical(std::filesystem::absolute(dir), ec).string();
  if (ec) key = dir;
  for (const auto& k : locked_)
    if (k == key) return true;
  std::string error;
  auto l = checkpoints ? run_dir_lock::acquire(dir, error, "checkpoint directory",
                                               "point checkpoint.dir elsewhere")
                       : run_dir_lock::acquire(dir, error);
  if (!l.held()) {
    std::fprintf(stderr, "%s: %s\n", prefix.c_str(), error.c_str());
    return false;
  }
  locks_.push_back(std::move(l));
  locked_.push_back(key);
  return true;
}

bool run_dir_opener::open(const config::experiment& exp) {
  const std::string dir = config::run_dir_of(exp);
  last_dir_ = dir;
  const std::string prefix = name_in_lines_ ? who_ + ": " + exp.name : who_;
  std::error_code ec;
  if (mode_ == run_dir_mode::resume && !std::filesystem::exists(dir, ec)) {
    // Nothing to resume: refused before the lock would create the directory.
    std::fprintf(stderr, "%s: %s\n", prefix.c_str(),
                 run_dir_refusal(dir, mode_, config::to_json(exp)).c_str());
    return false;
  }
  if (!parent_holds_) {
    if (!lock(dir, prefix, false)) return false;
    if (!exp.checkpoint.dir.empty() && checkpoint_dir_outside(dir, exp.checkpoint.dir) &&
        !lock(exp.checkpoint.dir, who_ + ": " + exp.name + ": checkpoint.dir", true))
      return false;
  }
  if (const auto why = run_dir_refusal(dir, mode_, config::to_json(exp)); !why.empty()) {
    std::fprintf(stderr, "%s: %s\n", prefix.c_str(), why.c_str());
    return false;
  }
  if (mode_ == run_dir_mode::resume && !parent_holds_) {  // the launcher says it once
    if (auto drift = experiment_drift_on_resume(dir, config::to_json(exp)); !drift.empty())
      std::fprintf(stderr, "%s: warning: %s\n", prefix.c_str(), drift.c_str());
  }
  if (mode_ != run_dir_mode::resume && !parent_holds_) to_begin_.emplace_back(prefix, dir);
  return true;
}

void run_dir_opener::begin() {
  for (const auto& [prefix, dir] : to_begin_) {
    std::string names;
    for (const auto& n : clear_cluster_files(dir)) names += (names.empty() ? "" : ", ") + n;
    if (!names.empty())
      std::fprintf(stderr, "%s: removed the earlier cluster run's %s from '%s'\n", prefix.c_str(),
                   names.c_str(), dir.c_str());
  }
  to_begin_.clear();
}

}  // namespace dd::app
