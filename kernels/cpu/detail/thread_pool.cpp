// kernels/cpu/detail/thread_pool.cpp — see thread_pool.hpp.
#include "kernels/cpu/detail/thread_pool.hpp"

#include <algorithm>

namespace dd::kernels::cpu_detail {

thread_pool::thread_pool(int participants) : participants_(std::max(1, participants)) {
  workers_.reserve(participants_ - 1);
  for (int id = 1; id < participants_; ++id) workers_.emplace_back([this] { worker_loop(); });
}

thread_pool::~thread_pool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& w : workers_) w.join();
}

void thread_pool::drain(const std::function<void(int)>& f, int n_chunks) {
  for (int c; (c = next_.fetch_add(1, std::memory_order_relaxed)) < n_chunks;) f(c);
}

void thread_pool::run(int n_chunks, const std::function<void(int)>& f) {
  if (n_chunks <= 0) return;
  if (n_chunks == 1 || participants_ == 1) {
    for (int c = 0; c < n_chunks; ++c) f(c);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = &f;
    job_chunks_ = n_chunks;
    next_.store(0, std::memory_order_relaxed);
    ++generation_;
  }
  work_cv_.notify_all();
  drain(f, n_chunks);
  // Every chunk is claimed; the ones claimed by workers are done once those workers have left.
  // A worker that wakes after this finds no job (job_ is cleared under the lock it joins under).
  std::unique_lock<std::mutex> lock(mutex_);
  done_cv_.wait(lock, [this] { return inside_ == 0; });
  job_ = nullptr;
}

void thread_pool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* job = nullptr;
    int chunks = 0;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_cv_.wait(lock, [&] { return stop_ || (generation_ != seen && job_ != nullptr); });
      if (stop_) return;
      seen = generation_;
      job = job_;
      chunks = job_chunks_;
      ++inside_;
    }
    drain(*job, chunks);
    bool last = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      last = --inside_ == 0;
    }
    if (last) done_cv_.notify_one();
  }
}

}  // namespace dd::kernels::cpu_detail
