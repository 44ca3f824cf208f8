// tools/chaos/proc.hpp — processes as dd-chaos sees them: identity from /proc (pid + start time),
// signals that can never reach a reused pid (a pidfd opened, then the start time checked, then
// pidfd_send_signal), and detached children (restarted nodes, reverters). Linux only.
// Single-threaded callers: spawn_detached_fn forks without exec.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace dd::chaos {

/// What /proc says about a pid.
struct proc_stat {
  char state = 0;           ///< field 3: R, S, D, T (stopped), t, Z, X ...
  uint64_t start_time = 0;  ///< field 22: clock ticks after boot
};

/// Reads /proc/PID/stat; nullopt when the pid does not exist.
std::optional<proc_stat> read_proc_stat(int pid);

/// Why a process could not be acted on; `none` when it could.
enum class identity_check { ok, no_pid, gone, reused };

/// A human sentence for an identity check result, naming pid and times.
std::string describe(identity_check c, int pid, uint64_t expected, uint64_t found);

/// A process held by a pidfd whose start time matched. Move-only; closes the pidfd.
class verified_process {
 public:
  /// Opens `pid` and checks its start time against `start_time`. On failure returns nullopt and
  /// sets `why` (a sentence) and `check`.
  static std::optional<verified_process> open(int pid, uint64_t start_time, std::string* why,
                                              identity_check* check = nullptr);
  verified_process(verified_process&& o) noexcept;
  verified_process& operator=(verified_process&& o) noexcept;
  verified_process(const verified_process&) = delete;
  verified_process& operator=(const verified_process&) = delete;
  ~verified_process();

  int pid() const { return pid_; }
  int fd() const { return fd_; }
  /// Sends `sig` to this very process (never to a reused pid). False with errno on failure
  /// (ESRCH: it exited).
  bool signal(int sig) const;
  /// True while the process exists (and is not a zombie).
  bool alive() const;

 private:
  verified_process(int pid, int fd) : pid_(pid), fd_(fd) {}
  int pid_ = 0;
  int fd_ = -1;
};

/// Starts argv[0] (an absolute path) with argv, detached: its own session, stdin /dev/null,
/// stdout and stderr appended to `log` (or /dev/null when empty). Returns its pid. Throws
/// chaos_error when the exec fails (naming the binary and the reason).
int spawn_detached(const std::vector<std::string>& argv, const std::string& log);

/// As spawn_detached, but the process stays the caller's child (still its own session), so
/// exited_within() can read how it ended. When the caller exits first, it is reparented.
int spawn_child(const std::vector<std::string>& argv, const std::string& log);

/// Waits up to `seconds` for the caller's child `pid` to exit: its exit status (its code, or
/// 128 + the signal that ended it), or none while it still runs.
std::optional<int> exited_within(int pid, double seconds);

/// The command line that starts node `argv` again: a `dd-node syncer` or `dd-node run` gets
/// `--resume` when it lacks it (its run directory holds the unfinished run it was killed in,
/// which it refuses without --resume) and loses `--overwrite` (which would wipe that run).
/// Any other command line is returned as it is.
std::vector<std::string> reexec_argv(const std::vector<std::string>& argv);

/// Forks a detached process (its own session, not our child) that runs `fn` and exits.
/// Its stdio is /dev/null and every other inherited fd but `keep_fd` is closed.
/// Returns its pid. Call only while single-threaded.
int spawn_detached_fn(const std::function<void()>& fn, int keep_fd = -1);

/// Waits until `pid` no longer exists or `timeout` seconds pass; true if it is gone.
/// Reaps it when it is our child.
bool wait_gone(int pid, uint64_t start_time, double timeout);

/// Sleeps `seconds` but returns early (true) when SIGTERM arrives; SIGTERM must be blocked.
bool sleep_or_sigterm(double seconds);

}  // namespace dd::chaos
