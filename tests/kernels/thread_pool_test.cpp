// tests/kernels/thread_pool_test.cpp — the CPU backend's fork-join pool: every chunk runs
// exactly once, on the participant the static rule names, across many back-to-back jobs.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "kernels/cpu/detail/thread_pool.hpp"

namespace dd::kernels::cpu_detail {
namespace {

TEST(thread_pool, runs_every_chunk_once_on_its_static_participant) {
  for (int participants : {1, 2, 3}) {
    thread_pool pool(participants);
    EXPECT_EQ(pool.size(), participants);
    const std::thread::id caller = std::this_thread::get_id();
    for (int n_chunks : {0, 1, 2, 5, 17}) {
      std::vector<std::atomic<int>> runs(n_chunks);
      std::vector<std::thread::id> who(n_chunks);
      pool.run(n_chunks, [&](int c) {
        runs[c].fetch_add(1);
        who[c] = std::this_thread::get_id();
      });
      for (int c = 0; c < n_chunks; ++c) {
        EXPECT_EQ(runs[c].load(), 1) << "chunk " << c << " of " << n_chunks;
        // Chunks of participant 0 run on the caller; the same participant always gets the same
        // thread, so chunks c and c + participants ran on one thread.
        if (c % participants == 0) {
          EXPECT_EQ(who[c], caller);
        }
        if (c + participants < n_chunks) {
          EXPECT_EQ(who[c], who[c + participants]);
        }
      }
    }
  }
}

TEST(thread_pool, many_back_to_back_jobs_complete) {
  // Catches lost wake-ups and a run() that returns before its workers finish: each job's sum
  // must be complete when run() returns.
  thread_pool pool(2);
  long long total = 0;
  for (int job = 0; job < 20000; ++job) {
    std::atomic<long long> sum{0};
    const int n = 1 + job % 4;
    pool.run(n, [&](int c) { sum.fetch_add(c + 1); });
    ASSERT_EQ(sum.load(), n * (n + 1) / 2) << "job " << job;
    total += sum.load();
  }
  EXPECT_EQ(total, 5000LL * (1 + 3 + 6 + 10));
}

}  // namespace
}  // namespace dd::kernels::cpu_detail
