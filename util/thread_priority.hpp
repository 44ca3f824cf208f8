// util/thread_priority.hpp — lowers the scheduling priority (nice value) of the calling thread,
// so a node's compute threads yield the CPU to its I/O threads (CAF's middleman multiplexer,
// its clock, the frame guard) on a loaded host: a middleman that misses its heartbeats for
// `connection_timeout` seconds drops a healthy link (docs/cluster.md, "Under load").
//
// Linux keeps a nice value per thread (setpriority(PRIO_PROCESS, gettid())), and a thread
// created afterwards inherits its creator's, so calling this before a compute backend starts
// its worker pool lowers the pool as well. Lowering needs no privilege; raising it back does
// (CAP_SYS_NICE), so it is done once, for good, on a thread that only computes.
#pragma once

#include <string>

namespace dd::util {

/// Adds `increment` (>= 0) to the calling thread's nice value, capped at 19 (the lowest
/// priority). Returns the nice value the thread has afterwards. Throws std::invalid_argument
/// for a negative increment and std::runtime_error naming errno's text when the kernel
/// refuses. 0 changes nothing and returns the current value.
int lower_thread_priority(int increment);

/// The calling thread's nice value.
int thread_nice();

}  // namespace dd::util
