// kernels/cpu/detail/thread_pool.hpp — the CPU backend's own fork-join pool: a fixed set of
// worker threads that sleep on a condition variable between jobs (no spinning, so an idle or
// descheduled learner never burns a core that another learner needs; OpenMP's default spinning
// barriers made 2 threads 2-4x SLOWER than 1 on the loaded 2-vCPU dev machine).
//
// One pool per cpu backend object; the backend's (single) calling thread calls run(). Internal
// to kernels/cpu/.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace dd::kernels::cpu_detail {

/// Fork-join pool of `participants` threads: the caller plus participants - 1 workers.
/// Chunk c of a job always runs on participant c % participants (static assignment), so a job's
/// work split never depends on timing. Move-only by construction (owns threads); not copyable.
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

  /// Runs f(c) for every chunk c in [0, n_chunks), chunk c on participant c % size() (the
  /// caller is participant 0), and returns when all have finished. f must not throw.
  void run(int n_chunks, const std::function<void(int)>& f);

 private:
  void worker_loop(int id);

  int participants_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  const std::function<void(int)>* job_ = nullptr;
  int job_chunks_ = 0;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

}  // namespace dd::kernels::cpu_detail
