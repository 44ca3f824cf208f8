// tools/chaos/sysfs.hpp — the OS pieces of disk and cgroup faults: an owner's checkpoint file and
// a node's run directory found from the nodes file, truncating or flipping bytes of a file,
// filling a tmpfs with a ballast file, and the cgroup v1 cpu controller (quota, moving a process
// in and back). Linux only; no state of its own; any thread may call.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/chaos/nodes_file.hpp"

namespace dd::chaos {

/// The checkpoint file of fragment owner `fragment`: `<checkpoint.dir>/owner_<fragment>.ddck`,
/// checkpoint.dir from `<run_dir>/experiment.json` (empty or absent: `<run_dir>/checkpoints`; a
/// relative one is taken from the syncer's working directory, /proc/PID/cwd, when it runs).
/// Throws chaos_error when no node hosts `owner:<fragment>`.
std::string owner_checkpoint_path(const nodes_file& nf, int fragment);

/// A node's run directory: the value of `--run-dir` in its argv (relative ones against its
/// /proc/PID/cwd when it runs), else the nodes file's folder.
std::string node_run_dir(const nodes_file& nf, const node_entry& n);

/// Cuts `path` to `keep` bytes (in place, not atomically: a torn file is the point). Returns the
/// size before. Throws chaos_error naming the path and errno's text.
uint64_t truncate_file(const std::string& path, uint64_t keep);

/// Xors `count` bytes of `path` at offsets drawn from `seed` (uniform over the file) with a
/// non-zero byte, in place. Returns the offsets. Throws chaos_error (unreadable, empty file).
std::vector<uint64_t> corrupt_file(const std::string& path, int count, uint64_t seed);

/// The file system that holds `dir`: its type name ("tmpfs", "ext4", or "0x..."), size and free
/// bytes. Throws chaos_error when statfs fails.
struct fs_info {
  std::string type;
  uint64_t size = 0, free = 0;
  bool tmpfs = false;
};
fs_info filesystem_of(const std::string& dir);

/// Creates `path` and writes to it until the file system is full (ENOSPC). Returns the bytes
/// written. Throws chaos_error on any other error (the partial file is left for the caller).
uint64_t fill_with_ballast(const std::string& path);

/// The cgroup v1 cpu controller: its mount point, when it exists and we may create groups in
/// it; else "" and `why` says why not.
std::string cgroup_cpu_root(std::string* why);

/// The cpu cgroup of `pid` as an absolute directory under `root` (from /proc/PID/cgroup).
/// Throws chaos_error when the pid has no cpu line.
std::string cgroup_cpu_of(int pid, const std::string& root);

/// Creates cgroup directory `dir` (its parents too) with cfs_period_us = `period_us` and
/// cfs_quota_us = `quota_us`. Throws chaos_error naming the file and errno's text.
void cgroup_create(const std::string& dir, uint64_t period_us, uint64_t quota_us);

/// Moves every thread of process `pid` into cgroup `dir` (writes cgroup.procs).
/// Throws chaos_error.
void cgroup_move(int pid, const std::string& dir);

/// The pids in cgroup `dir` (cgroup.procs); empty when it does not exist.
std::vector<int> cgroup_pids(const std::string& dir);

/// Moves every process still in `dir` to `back`, then removes `dir`. Returns "" on success or
/// the reason it could not (the group stays).
std::string cgroup_release(const std::string& dir, const std::string& back);

}  // namespace dd::chaos
