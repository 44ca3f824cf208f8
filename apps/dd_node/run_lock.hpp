// apps/dd_node/run_lock.hpp — the run-directory lock of `dd-node run`/`syncer`/`launch` (also
// taken on a checkpoint directory outside the run directory): an exclusive advisory
// flock(2) on <run_dir>/LOCK, held for the life of the process, so two runs never train into the
// same directory (events.jsonl, checkpoints and summary.json would be interleaved). The holder's
// PID is written into the file so that a refused run can name it. The kernel drops the lock when
// the holder exits or crashes; the LOCK file itself stays (harmless: only the flock counts).
#pragma once

#include <string>

namespace dd::app {

/// A held run-directory lock; closing the descriptor (destructor) releases it. Move-only.
class run_dir_lock {
 public:
  run_dir_lock() = default;
  ~run_dir_lock();
  run_dir_lock(run_dir_lock&& other) noexcept;
  run_dir_lock& operator=(run_dir_lock&& other) noexcept;
  run_dir_lock(const run_dir_lock&) = delete;
  run_dir_lock& operator=(const run_dir_lock&) = delete;

  /// Creates `dir` if needed and takes the lock without waiting. On failure returns an empty
  /// lock and sets `error` to one line naming the directory (as `kind`, e.g. "run directory" or
  /// "checkpoint directory") and, when another process holds it, that process's PID and what to
  /// do (`advice`, e.g. "choose another --run-dir").
  static run_dir_lock acquire(const std::string& dir, std::string& error,
                              const std::string& kind = "run directory",
                              const std::string& advice = "choose another --run-dir");

  bool held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

/// Who holds a lock, named for a refusal: "dd-node launch", "dd-node run", "dd-node syncer"
/// (the holder's program name and subcommand, from /proc/PID/cmdline), or "another dd-node
/// process" when `pid` is not a number or no such process is readable.
std::string lock_holder(const std::string& pid);

/// True when `checkpoint_dir` lies outside `run_dir` (so the run directory's lock does not cover
/// it and it needs its own). Paths are compared made absolute and canonical as far as they exist.
bool checkpoint_dir_outside(const std::string& run_dir, const std::string& checkpoint_dir);

/// Locks `checkpoint_dir` (as "checkpoint directory") when it lies outside `run_dir`; a
/// checkpoint directory inside the run directory is covered by the run directory's lock and
/// gets an empty lock back. False with `error` set when another process holds it: two runs
/// never share owner checkpoints (a run deletes its fragments' old checkpoints as it starts).
bool lock_checkpoint_dir(const std::string& run_dir, const std::string& checkpoint_dir,
                         run_dir_lock& out, std::string& error);

}  // namespace dd::app
