// apps/dd_node/run_lock.hpp — the run-directory lock of `dd-node run`/`syncer`/`launch` (also
// taken on a checkpoint directory outside the run directory): an exclusive advisory
// flock(2) on <run_dir>/LOCK, held for the life of the process, so two runs never train into the
// same directory (events.jsonl, checkpoints and summary.json would be interleaved). The holder's
// PID is written into the file so that a refused run can name it. The kernel drops the lock when
// the holder exits or crashes; the LOCK file itself stays (harmless: only the flock counts).
#pragma once

#include <string>
#include <vector>

#include "runtime/config/experiment.hpp"
#include "runtime/run_dir_rules.hpp"
#include "util/files.hpp"

namespace dd::app {

/// A held run-directory lock; closing the descriptor (destructor) releases it. Move-only.
class run_dir_lock {
 public:
  /// Creates `dir` if needed and takes the lock without waiting. On failure returns an empty
  /// lock and sets `error` to one line naming the directory (as `kind`, e.g. "run directory" or
  /// "checkpoint directory") and, when another process holds it, that process's PID and what to
  /// do (`advice`, e.g. "choose another --run-dir").
  static run_dir_lock acquire(const std::string& dir, std::string& error,
                              const std::string& kind = "run directory",
                              const std::string& advice = "choose another --run-dir");

  bool held() const { return fd_.valid(); }

 private:
  util::unique_fd fd_;
};

/// Who holds a lock, named for a refusal: "dd-node launch", "dd-node run", "dd-node syncer"
/// (the holder's program name and subcommand, from /proc/PID/cmdline), or "another dd-node
/// process" when `pid` is not a number or no such process is readable.
std::string lock_holder(const std::string& pid);

/// True when `checkpoint_dir` lies outside `run_dir` (so the run directory's lock does not cover
/// it and it needs its own). Paths are compared made absolute and canonical as far as they exist.
bool checkpoint_dir_outside(const std::string& run_dir, const std::string& checkpoint_dir);

/// The one run-directory opener of `dd-node run`, `syncer` and `launch`: for each experiment it
/// takes the run directory's lock and its checkpoint directory's (when that lies outside), then
/// applies run_dir_refusal (runtime/run_dir.hpp: an unfinished run needs --resume or
/// --overwrite; --resume needs a resumable run of the same experiment); begin() then clears an
/// earlier cluster run's files from each new run's directory. Every refusal is one line on
/// stderr; the command exits 2. Holds its locks for its life. main() thread only.
class run_dir_opener {
 public:
  /// `who` starts every line ("dd-node run"); with `name_in_lines` lines name the experiment
  /// too ("dd-node run: NAME: ...", for a command that runs several).
  run_dir_opener(std::string who, run_dir_mode mode, bool name_in_lines = false);

  /// The launcher (DD_LAUNCH_LOCK_PID, our parent) holds the locks for its children and has
  /// cleared the earlier run's files itself: open() only checks, begin() removes nothing.
  static bool lock_held_by_parent();

  /// Opens the run directory of `exp` (config::run_dir_of); false after one
  /// line on stderr. A directory this opener already holds is not locked twice.
  bool open(const config::experiment& exp);
  /// Starts the runs: removes an earlier cluster run's files (clear_cluster_files) from every
  /// directory opened for a new run and locked here, one line for each that held any.
  void begin();
  /// The run directory of the last open().
  const std::string& dir() const { return last_dir_; }

 private:
  bool lock(const std::string& dir, const std::string& prefix, bool checkpoints);

  std::string who_;
  run_dir_mode mode_;
  bool name_in_lines_;
  bool parent_holds_;
  std::vector<run_dir_lock> locks_;
  std::vector<std::string> locked_;                            ///< canonical paths
  std::vector<std::pair<std::string, std::string>> to_begin_;  ///< (line prefix, dir)
  std::string last_dir_;
};

}  // namespace dd::app
