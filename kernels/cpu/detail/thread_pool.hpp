// kernels/cpu/detail/thread_pool.hpp — the CPU backend's own fork-join pool: a fixed set of
// worker threads that sleep on a condition variable between jobs (no spinning, so an idle or
// descheduled learner never burns a core that another learner needs; OpenMP's default spinning
// barriers made 2 threads 2-4x SLOWER than 1 on the loaded 2-vCPU dev machine).
//
// One pool per cpu backend object; the backend's (single) calling thread calls run(). Internal
// to kernels/cpu/.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace dd::kernels::cpu_detail {

/// Fork-join pool of `participants` threads: the caller plus participants - 1 workers.
/// Chunks are claimed in order (0, 1, 2, ...) by whichever participant is free: the caller starts
/// at once, and a worker that wakes late, or runs slowly because another process shares its
/// core, takes fewer chunks instead of holding up the job. What a chunk computes must therefore
/// depend only on its index, never on the thread that runs it (the cpu backend's chunk → range
/// maps depend only on the shapes and the thread count, so its results stay deterministic).
/// Move-only by construction (owns threads); not copyable.
class thread_pool {
 public:
  /// Starts participants - 1 worker threads (participants >= 1).
  explicit thread_pool(int participants);
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;
  /// Stops and joins the workers.
  ~thread_pool();

  /// Number of participants (caller included).
  int size() const noexcept { return participants_; }

  /// Runs f(c) exactly once for every chunk c in [0, n_chunks), each on whichever participant
  /// claims it first (the caller is one of them), and returns when all have finished. f must not
  /// throw.
  void run(int n_chunks, const std::function<void(int)>& f);

 private:
  void worker_loop();
  /// Claims and runs chunks of the current job until none is left.
  void drain(const std::function<void(int)>& f, int n_chunks);

  int participants_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  const std::function<void(int)>* job_ = nullptr;  ///< set while a job accepts workers
  int job_chunks_ = 0;
  uint64_t generation_ = 0;
  int inside_ = 0;            ///< workers that joined the current job and have not left it
  std::atomic<int> next_{0};  ///< the next unclaimed chunk of the current job
  bool stop_ = false;
};

}  // namespace dd::kernels::cpu_detail
