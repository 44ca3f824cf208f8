// apps/dd_node/run_lock.hpp — the run-directory lock of `dd-node run`: an exclusive advisory
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
  /// lock and sets `error` to one line naming the directory and, when another process holds it,
  /// that process's PID.
  static run_dir_lock acquire(const std::string& dir, std::string& error);

  bool held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace dd::app
