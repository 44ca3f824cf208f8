// tests/kernels/thread_pool_test.cpp — the CPU backend's fork-join pool: every chunk runs
// exactly once, claimed by whichever participant is free, across many back-to-back jobs.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "kernels/cpu/detail/thread_pool.hpp"

namespace dd::kernels::cpu_detail {
namespace {

TEST(thread_pool, runs_every_chunk_once) {
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
      }
      // A job of one chunk, or a pool of one participant, runs entirely on the caller.
      if (n_chunks == 1 || participants == 1) {
        for (int c = 0; c < n_chunks; ++c) {
          EXPECT_EQ(who[c], caller) << "chunk " << c;
        }
      }
    }
  }
}

TEST(thread_pool, a_held_up_participant_does_not_hold_the_chunks_after_it) {
  // Chunk 0 waits until chunk 2 has run. With a static assignment of chunk c to
  // participant c % 2, chunk 2 would wait behind chunk 0 on the same thread forever; with chunks
  // claimed by whoever is free, the other participant takes chunks 1 and 2 and the job completes.
  thread_pool pool(2);
  for (int job = 0; job < 50; ++job) {
    std::atomic<bool> two_done{false};
    std::atomic<bool> timed_out{false};
    std::vector<std::atomic<int>> runs(3);
    pool.run(3, [&](int c) {
      runs[c].fetch_add(1);
      if (c == 0) {
        const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (!two_done.load()) {
          if (std::chrono::steady_clock::now() > give_up) {
            timed_out = true;
            return;
          }
          std::this_thread::yield();
        }
      } else if (c == 2) {
        two_done = true;
      }
    });
    ASSERT_FALSE(timed_out.load()) << "job " << job;
    for (int c = 0; c < 3; ++c) {
      EXPECT_EQ(runs[c].load(), 1) << "job " << job << " chunk " << c;
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
