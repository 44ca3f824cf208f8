// tools/chaos/sysfs.cpp — see sysfs.hpp.
#include "tools/chaos/sysfs.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "tools/chaos/common.hpp"
#include "tools/chaos/proc.hpp"

namespace dd::chaos {

namespace fs = std::filesystem;

namespace {

// `p` as given when absolute, else against the running process's cwd (or ours).
std::string resolve_against(const std::string& p, const node_entry* n) {
  if (p.empty() || fs::path(p).is_absolute()) return p;
  if (n && n->pid > 0) {
    std::string why;
    if (verified_process::open(n->pid, n->start_time, &why)) {
      std::error_code ec;
      const auto cwd = fs::read_symlink(fmt::format("/proc/{}/cwd", n->pid), ec);
      if (!ec) return (cwd / p).lexically_normal().string();
    }
  }
  return fs::absolute(p).lexically_normal().string();
}

std::string errno_text() { return std::strerror(errno); }

void write_text(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) throw chaos_error(fmt::format("{}: cannot open: {}", path, errno_text()));
  const ssize_t n = ::write(fd, text.data(), text.size());
  const int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(text.size()))
    throw chaos_error(fmt::format("{}: cannot write '{}': {}", path, text, std::strerror(err)));
}

}  // namespace

std::string owner_checkpoint_path(const nodes_file& nf, int fragment) {
  const std::string actor = fmt::format("owner:{}", fragment);
  const node_entry* host = nullptr;
  std::vector<std::string> owners;
  for (const auto& n : nf.nodes) {
    if (n.hosts(actor)) host = &n;
    for (const auto& a : n.actors)
      if (a.rfind("owner:", 0) == 0) owners.push_back(a);
  }
  if (!host)
    throw chaos_error(fmt::format(
        "{}: no node hosts {} (owners: {})", nf.path, actor,
        owners.empty() ? std::string("none") : fmt::format("{}", fmt::join(owners, ", "))));
  std::string dir;
  const fs::path exp = fs::path(nf.run_dir) / "experiment.json";
  std::error_code ec;
  if (fs::exists(exp, ec)) {
    try {
      const auto j = nlohmann::json::parse(read_file(exp.string()));
      if (j.contains("checkpoint") && j["checkpoint"].contains("dir") &&
          j["checkpoint"]["dir"].is_string())
        dir = j["checkpoint"]["dir"].get<std::string>();
    } catch (const nlohmann::json::exception& e) {
      throw chaos_error(fmt::format("{}: not JSON: {}", exp.string(), e.what()));
    }
  }
  dir = dir.empty() ? (fs::path(node_run_dir(nf, *host)) / "checkpoints").string()
                    : resolve_against(dir, host);
  return (fs::path(dir) / fmt::format("owner_{}.ddck", fragment)).string();
}

std::string node_run_dir(const nodes_file& nf, const node_entry& n) {
  for (size_t i = 0; i + 1 < n.argv.size(); ++i)
    if (n.argv[i] == "--run-dir") return resolve_against(n.argv[i + 1], &n);
  for (const auto& a : n.argv)
    if (a.rfind("--run-dir=", 0) == 0) return resolve_against(a.substr(10), &n);
  return nf.run_dir;
}

uint64_t truncate_file(const std::string& path, uint64_t keep) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw chaos_error(fmt::format("{}: cannot stat: {}", path, errno_text()));
  if (::truncate(path.c_str(), static_cast<off_t>(keep)) != 0)
    throw chaos_error(fmt::format("{}: cannot truncate to {} bytes: {}", path, keep, errno_text()));
  return static_cast<uint64_t>(st.st_size);
}

std::vector<uint64_t> corrupt_file(const std::string& path, int count, uint64_t seed) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) throw chaos_error(fmt::format("{}: cannot open: {}", path, errno_text()));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size == 0) {
    ::close(fd);
    throw chaos_error(fmt::format("{}: empty or unreadable; nothing to corrupt", path));
  }
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> offsets;
  for (int i = 0; i < count; ++i) {
    const uint64_t off = rng() % static_cast<uint64_t>(st.st_size);
    const auto flip = static_cast<unsigned char>(1 + rng() % 255);
    unsigned char b = 0;
    if (::pread(fd, &b, 1, static_cast<off_t>(off)) != 1 ||
        (b ^= flip, ::pwrite(fd, &b, 1, static_cast<off_t>(off)) != 1)) {
      const std::string why = errno_text();
      ::close(fd);
      throw chaos_error(fmt::format("{}: cannot rewrite byte {}: {}", path, off, why));
    }
    offsets.push_back(off);
  }
  ::fsync(fd);
  ::close(fd);
  return offsets;
}

fs_info filesystem_of(const std::string& dir) {
  struct statfs s {};
  if (::statfs(dir.c_str(), &s) != 0)
    throw chaos_error(fmt::format("{}: statfs: {}", dir, errno_text()));
  fs_info out;
  constexpr long tmpfs_magic = 0x01021994;
  switch (static_cast<long>(s.f_type)) {
    case tmpfs_magic:
      out.type = "tmpfs";
      out.tmpfs = true;
      break;
    case 0xEF53: out.type = "ext4"; break;
    case 0x58465342: out.type = "xfs"; break;
    case 0x794c7630: out.type = "overlay"; break;
    case 0x9123683E: out.type = "btrfs"; break;
    default: out.type = fmt::format("0x{:x}", static_cast<unsigned long>(s.f_type));
  }
  out.size = static_cast<uint64_t>(s.f_blocks) * s.f_bsize;
  out.free = static_cast<uint64_t>(s.f_bavail) * s.f_bsize;
  return out;
}

uint64_t fill_with_ballast(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw chaos_error(fmt::format("{}: cannot create: {}", path, errno_text()));
  std::vector<char> block(1 << 20, 'B');
  uint64_t written = 0;
  for (size_t size = block.size(); size >= 512;) {
    const ssize_t n = ::write(fd, block.data(), size);
    if (n > 0) {
      written += static_cast<uint64_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != ENOSPC) {
      const std::string why = errno_text();
      ::close(fd);
      throw chaos_error(fmt::format("{}: write: {}", path, why));
    }
    size /= 2;  // full for this size: smaller writes take the last pages
  }
  ::close(fd);
  return written;
}

std::string cgroup_cpu_root(std::string* why) {
  for (const char* root : {"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"}) {
    std::error_code ec;
    if (!fs::exists(fs::path(root) / "cpu.cfs_quota_us", ec)) continue;
    if (::access(root, W_OK) != 0) {
      *why =
          fmt::format("{} is not writable ({}): cgroup v1 cpu cannot be used", root, errno_text());
      return "";
    }
    return root;
  }
  *why = "no cgroup v1 cpu controller (/sys/fs/cgroup/cpu/cpu.cfs_quota_us absent)";
  return "";
}

std::string cgroup_cpu_of(int pid, const std::string& root) {
  std::ifstream in(fmt::format("/proc/{}/cgroup", pid));
  if (!in) throw chaos_error(fmt::format("pid {}: cannot read /proc/{}/cgroup", pid, pid));
  std::string line;
  while (std::getline(in, line)) {
    const auto a = line.find(':');
    const auto b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    for (const auto& c : split(line.substr(a + 1, b - a - 1), ','))
      if (c == "cpu")
        return (fs::path(root) / fs::path(line.substr(b + 1)).relative_path())
            .lexically_normal()
            .string();
  }
  throw chaos_error(fmt::format("pid {}: no cpu controller line in /proc/{}/cgroup", pid, pid));
}

void cgroup_create(const std::string& dir, uint64_t period_us, uint64_t quota_us) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw chaos_error(fmt::format("{}: cannot create the cgroup: {}", dir, ec.message()));
  write_text(dir + "/cpu.cfs_period_us", std::to_string(period_us));
  write_text(dir + "/cpu.cfs_quota_us", std::to_string(quota_us));
}

void cgroup_move(int pid, const std::string& dir) {
  write_text(dir + "/cgroup.procs", std::to_string(pid));
}

std::vector<int> cgroup_pids(const std::string& dir) {
  std::vector<int> out;
  std::ifstream in(dir + "/cgroup.procs");
  int pid = 0;
  while (in >> pid) out.push_back(pid);
  return out;
}

std::string cgroup_release(const std::string& dir, const std::string& back) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return "";
  std::string err;
  for (int pid : cgroup_pids(dir)) {
    try {
      cgroup_move(pid, back);
    } catch (const chaos_error& e) {
      if (fs::exists(fmt::format("/proc/{}", pid))) err = e.what();
    }
  }
  for (int i = 0; i < 50; ++i) {  // a process that just exited may linger in the group briefly
    if (::rmdir(dir.c_str()) == 0 || errno == ENOENT) return err;
    if (errno != EBUSY) break;
    sleep_for(0.02);
  }
  return fmt::format("{}: cannot remove the cgroup: {}{}", dir, errno_text(),
                     err.empty() ? "" : "; " + err);
}

}  // namespace dd::chaos
