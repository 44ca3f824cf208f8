// kernels/cpu/detail/thread_pool.cpp — see thread_pool.hpp.
#include "kernels/cpu/detail/thread_pool.hpp"

#include <algorithm>

namespace dd::kernels::cpu_detail {

thread_pool::thread_pool(int participants) : participants_(std::max(1, participants)) {
  workers_.reserve(participants_ - 1);
  for (int id = 1; id < participants_; ++id) workers_.emplace_back([this, id] { worker_loop(id); });
}

thread_pool::~thread_pool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& w : workers_) w.join();
}

void thread_pool::run(int n_chunks, const std::function<void(int)>& f) {
  if (n_chunks <= 0) return;
  const int active = std::min(n_chunks, participants_);
  if (active > 1) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = &f;
      job_chunks_ = n_chunks;
      pending_ = active - 1;
      ++generation_;
    }
    work_cv_.notify_all();
  }
  for (int c = 0; c < n_chunks; c += participants_) f(c);
  if (active > 1) {
    std::unique_lock<std::mutex> lock(mutex_);
    done_cv_.wait(lock, [this] { return pending_ == 0; });
    job_ = nullptr;
  }
}

void thread_pool::worker_loop(int id) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* job = nullptr;
    int chunks = 0;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
      chunks = job_chunks_;
    }
    if (id >= chunks) continue;  // this job has no chunk for us (and did not count us)
    for (int c = id; c < chunks; c += participants_) (*job)(c);
    bool last = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      last = --pending_ == 0;
    }
    if (last) done_cv_.notify_one();
  }
}

}  // namespace dd::kernels::cpu_detail
