// tests/util/thread_priority_test.cpp — lower_thread_priority lowers only the calling thread,
// caps at nice 19, and a thread it starts afterwards inherits the lowered value (what a learner
// relies on for its backend's worker pool).
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <thread>

#include "util/thread_priority.hpp"

namespace {

TEST(ThreadPriority, LowersOnlyTheCallingThreadAndItsLaterChildren) {
  int before = 0, after = 0, child = 0, main_after = 0;
  std::thread t([&] {
    before = dd::util::thread_nice();
    after = dd::util::lower_thread_priority(3);
    std::thread c([&] { child = dd::util::thread_nice(); });
    c.join();
  });
  t.join();
  main_after = dd::util::thread_nice();
  EXPECT_EQ(after, std::min(19, before + 3));
  EXPECT_EQ(child, after);        // inherited by a thread started afterwards
  EXPECT_EQ(main_after, before);  // the other threads keep theirs
}

TEST(ThreadPriority, CapsAtNineteenAndRefusesANegativeIncrement) {
  int capped = 0, unchanged = 0;
  bool refused = false;
  std::thread t([&] {
    capped = dd::util::lower_thread_priority(40);
    unchanged = dd::util::lower_thread_priority(0);
    try {
      dd::util::lower_thread_priority(-1);
    } catch (const std::invalid_argument&) {
      refused = true;
    }
  });
  t.join();
  EXPECT_EQ(capped, 19);
  EXPECT_EQ(unchanged, 19);
  EXPECT_TRUE(refused);
}

}  // namespace
