// actors/services/compute_gate.hpp — fair sharing of the machine's cores between the learners of
// one process, so that M learners on C < M cores behave like M equal devices started together.
//
// Without it the OS scheduler hands 4 single-threaded learners on 2 cores uneven shares (20–30%
// apart was measured), the learners drift out of phase and, with K = 1, each one's pushes miss the
// others' grace windows — an artefact of the emulation, not of the algorithm. The gate admits at
// most `slots` inner steps at once; among the waiting learners it admits the one with the least
// virtual time (ties: first come, first served), where each admission adds the learner's
// slowdown factor f (1 for full speed) to its virtual time. Under contention every learner thus
// gets steps in proportion to 1/f — equal devices make equal progress, a learner that fell behind
// (preempted by the OS) catches up, and emulated slower hardware is slower by exactly f. (The
// learner also sleeps (f − 1) × its step time outside the gate, which slows it when cores are
// idle.) A (re)joining learner starts level with the least-served live learner, so a respawn does
// not get a catch-up burst. Thread-safe; shared by the learners of one run, which it must outlive.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <tuple>

namespace dd::actors {

/// Step admission: what a learner asks before each inner step so that the learners sharing a
/// machine's cores get equal turns. The learner does not know which kind it has: `compute_gate`
/// (the learners of one process) or `host_admission` (every learner process of one host under
/// `dd-node launch`, actors/services/host_admission.hpp). Thread-safe.
class step_admission {
 public:
  virtual ~step_admission() = default;
  /// Learner `key` (re)joins / leaves the set of learners that share the admission.
  virtual void join(int32_t key) = 0;
  virtual void leave(int32_t key) = 0;
  /// Blocks until learner `key` may run one step that costs `weight` (its slowdown f >= 1).
  virtual void acquire(int32_t key, double weight) = 0;
  /// Returns one admission.
  virtual void release() = 0;
};

/// A counting gate that admits the least-served waiting learner first.
class compute_gate final : public step_admission {
 public:
  /// `slots` >= 1 concurrent holders (e.g. hardware threads / threads per learner).
  explicit compute_gate(unsigned slots) : slots_(slots == 0 ? 1 : slots) {}

  /// Learner `key` (re)joins: its admission count starts at the smallest count of the other
  /// live learners (0 when it is the first).
  void join(int32_t key) override {
    std::lock_guard<std::mutex> guard(mutex_);
    double level = 0;
    bool any = false;
    for (const auto& [k, c] : live_)
      if (k != key) {
        level = any ? std::min(level, c) : c;
        any = true;
      }
    live_[key] = any ? level : 0;
  }

  /// Learner `key` left (finished or died): it no longer sets the level.
  void leave(int32_t key) override {
    std::lock_guard<std::mutex> guard(mutex_);
    live_.erase(key);
  }

  /// Blocks until learner `key` may run one step; the step costs `weight` (its slowdown f >= 1)
  /// of virtual time.
  void acquire(int32_t key, double weight = 1.0) override {
    std::unique_lock<std::mutex> lock(mutex_);
    const auto me = std::make_tuple(live_[key], next_++, key);
    waiting_.insert(me);
    cv_.wait(lock, [&] { return active_ < slots_ && *waiting_.begin() == me; });
    waiting_.erase(waiting_.begin());
    ++active_;
    live_[key] += weight > 0 ? weight : 1.0;
    cv_.notify_all();  // the next in line may fit in another free slot
  }

  /// Returns one admission.
  void release() override {
    {
      std::lock_guard<std::mutex> guard(mutex_);
      --active_;
    }
    cv_.notify_all();
  }

  unsigned slots() const noexcept { return slots_; }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  const unsigned slots_;
  unsigned active_ = 0;
  uint64_t next_ = 0;
  std::map<int32_t, double> live_;                           // virtual time per live learner
  std::set<std::tuple<double, uint64_t, int32_t>> waiting_;  // (virtual time, ticket, key)
};

/// RAII admission through a gate (a null gate admits at once).
class gate_pass {
 public:
  gate_pass(step_admission* g, int32_t key, double weight = 1.0) : gate_(g) {
    if (gate_ != nullptr) gate_->acquire(key, weight);
  }
  ~gate_pass() {
    if (gate_ != nullptr) gate_->release();
  }
  gate_pass(const gate_pass&) = delete;
  gate_pass& operator=(const gate_pass&) = delete;

 private:
  step_admission* gate_;
};

}  // namespace dd::actors
