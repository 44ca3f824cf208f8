// tests/actors/run_log_test.cpp — run_log from 4 threads at once: every line of
// events.jsonl is whole, each thread's events keep their order, and "t" never goes back from one
// line to the next (in the file, on the tap and in events()), with plain and with retried writes.
// The counting clock yields after each reading, which widens the window between stamping "t" and
// taking the log's lock: a log that stamps outside its lock writes older stamps after newer ones
// here on every run (the full_disk flake: an event 36 ms before the previous line).
#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "actors/services/run_log.hpp"

namespace dd::actors {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::path(::testing::TempDir()) / ("dd_run_log_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::vector<std::string> read_lines(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

constexpr int kThreads = 4;
constexpr int kEventsPerThread = 500;

/// Emits kThreads × kEventsPerThread events from kThreads threads started together; each event
/// carries its thread ("th") and its index on that thread ("seq").
void hammer(run_log& log) {
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int th = 0; th < kThreads; ++th) {
    threads.emplace_back([&log, &ready, th] {
      ready.fetch_add(1);
      while (ready.load() < kThreads) std::this_thread::yield();
      const std::string pad(64, 'x');
      for (int i = 0; i < kEventsPerThread; ++i)
        log.emit("hammer", {{"th", th}, {"seq", i}, {"pad", pad}});
    });
  }
  for (auto& t : threads) t.join();
}

/// Checks `lines` (JSON text, one event each): all kThreads × kEventsPerThread there, each
/// thread's seq 0, 1, 2, ... in order, and "t" non-decreasing line by line. Returns the
/// number of lines whose t was below the previous line's (0 expected).
size_t check_lines(const std::vector<std::string>& lines, const std::string& where) {
  EXPECT_EQ(lines.size(), size_t{kThreads} * kEventsPerThread) << where;
  std::map<int, int> next_seq;
  double prev_t = -1.0;
  size_t back = 0;
  for (size_t n = 0; n < lines.size(); ++n) {
    const auto ev = nlohmann::json::parse(lines[n], nullptr, /*allow_exceptions=*/false);
    if (ev.is_discarded()) {
      ADD_FAILURE() << where << " line " << n + 1 << " is not whole JSON: " << lines[n];
      continue;
    }
    EXPECT_EQ(ev.value("event", ""), "hammer") << where << " line " << n + 1;
    const int th = ev.at("th").get<int>();
    EXPECT_EQ(ev.at("seq").get<int>(), next_seq[th]) << where << " line " << n + 1;
    next_seq[th] = ev.at("seq").get<int>() + 1;
    const double t = ev.at("t").get<double>();
    if (t < prev_t) {
      if (back == 0)
        ADD_FAILURE() << where << " line " << n + 1 << ": t = " << t
                      << " is before the previous line's t = " << prev_t;
      ++back;
    }
    prev_t = t;
  }
  for (int th = 0; th < kThreads; ++th)
    EXPECT_EQ(next_seq[th], kEventsPerThread) << where << " thread " << th;
  return back;
}

/// A clock that counts its readings (every reading a new, larger value) and yields the thread
/// after each one.
run_log::clock_fn counting_clock(std::shared_ptr<std::atomic<uint64_t>> ticks) {
  return [ticks] {
    const double t = static_cast<double>(ticks->fetch_add(1) + 1) * 1e-3;
    std::this_thread::yield();
    return t;
  };
}

void run_hammer(bool retry_writes, const std::string& name) {
  const fs::path dir = fresh_dir(name);
  auto ticks = std::make_shared<std::atomic<uint64_t>>(0);
  run_log log((dir / "events.jsonl").string(), /*keep_in_memory=*/true, counting_clock(ticks));
  log.set_write_policy(retry_writes ? write_policy::retry_and_degrade(60.0)
                                    : write_policy::end_the_run());
  std::vector<std::string> tapped;  // the tap is called under the log's lock
  log.set_tap([&tapped](const std::string& line) { tapped.push_back(line); });
  hammer(log);

  EXPECT_TRUE(log.write_failure().empty()) << log.write_failure();
  EXPECT_TRUE(log.snapshot().degraded.empty());
  const auto file = read_lines(dir / "events.jsonl");
  EXPECT_EQ(check_lines(file, name + " events.jsonl"), 0u);

  std::vector<std::string> tap_lines;
  for (auto& l : tapped) {
    ASSERT_FALSE(l.empty());
    EXPECT_EQ(l.back(), '\n');
    tap_lines.push_back(l.substr(0, l.size() - 1));
  }
  EXPECT_EQ(tap_lines, file) << name << ": the tap saw the lines in another order than the file";

  std::vector<std::string> kept;
  for (const auto& ev : log.events()) kept.push_back(ev.dump());
  EXPECT_EQ(check_lines(kept, name + " events()"), 0u);
}

TEST(run_log, t_never_goes_back_line_by_line_when_threads_emit_at_once) {
  run_hammer(/*retry_writes=*/false, "plain");
}

TEST(run_log, t_never_goes_back_line_by_line_with_retried_writes) {
  run_hammer(/*retry_writes=*/true, "retry");
}

TEST(run_log, t_never_goes_back_on_the_default_steady_clock) {
  const fs::path dir = fresh_dir("steady");
  run_log log((dir / "events.jsonl").string());
  hammer(log);
  EXPECT_EQ(check_lines(read_lines(dir / "events.jsonl"), "steady events.jsonl"), 0u);
}

}  // namespace
}  // namespace dd::actors
