// util/child.hpp — run a piece of untrusted work (an experiment script) in a forked child
// process with resource limits and a wall-clock deadline, and get its result back as bytes.
//
// Why a process: Lua's hooks do not fire inside C functions (string.find backtracking,
// string.rep, table.sort), nor in __gc finalizers, and a thread cannot be stopped safely. A child
// can: the parent SIGKILLs it at the deadline, whatever it is doing.
//
// Why fork() and not spawn+exec: the loader is a library used by several binaries and by tests,
// and only fork lets the child run the very code and data the caller passed without a hidden
// entry point in every binary. A fork from a multi-threaded process (OpenBLAS starts its pool in
// a library constructor, so every dd-node is one) may by POSIX only call async-signal-safe
// functions in the child; glibc goes further and takes the malloc and stdio locks around fork()
// and resets them in the child, so malloc/new and stdio are usable there. The child's work
// must therefore touch nothing but memory, malloc/new and stdio (no locks of the caller's, no
// CAF, no logging, no iostreams that another thread may hold); it leaves with _exit (no atexit
// handlers, no flush of the parent's buffered output). The experiment sandbox does exactly that.
// Callers load experiments before they start their own threads where they can (dd-node does).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>

namespace dd::util {

/// Limits of one child run.
struct child_limits {
  /// When the parent SIGKILLs the child (steady clock).
  std::chrono::steady_clock::time_point deadline;
  /// Address space the child may add beyond what it inherited, bytes (RLIMIT_AS); 0 = no limit.
  /// Not applied in sanitizer builds (their shadow memory needs unbounded address space).
  std::size_t extra_address_space = 0;
  /// CPU seconds the child may use (RLIMIT_CPU, a backstop to the deadline); 0 = no limit.
  unsigned cpu_seconds = 0;
};

/// How a child run ended.
struct child_outcome {
  enum class status {
    ok,         ///< the work returned; `payload` holds its bytes
    timed_out,  ///< the deadline passed (or the CPU limit hit); the child was killed
    died,       ///< the child ended without handing back a result (signal, crash, out of memory)
    failed,     ///< no child could be started (fork/pipe failed); `detail` says why
  };
  status state = status::failed;
  std::string payload;
  /// For died/failed: what happened ("killed by signal 11 (Segmentation fault)", errno text).
  std::string detail;
  /// The value of the shared progress counter when the child ended (see run_in_child).
  int progress = 0;
};

/// Forks, runs `work` in the child under `limits`, and returns what it returned. `work` gets a
/// pointer to an int shared with the parent (a MAP_SHARED page, starting at 0) where it may
/// record progress (the sandbox stores the script line it reached); the parent reports its last
/// value even when it had to kill the child. An exception thrown by `work` ends the child as
/// `died` with its what() in `detail`. Blocks the calling thread until the child is done or
/// killed; the child is always reaped. Never throws.
child_outcome run_in_child(const std::function<std::string(volatile int* progress)>& work,
                           const child_limits& limits) noexcept;

}  // namespace dd::util
