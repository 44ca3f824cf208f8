// actors/services/owner_history.hpp — what the incarnations of one fragment owner leave to the
// next: how many have started, and the highest version any of them published or started at. The
// node owns one per fragment (the syncer node; resumed from events.jsonl) and hands it to every
// incarnation in its services (node_services.hpp owner_services), so a respawned owner knows it
// is one and numbers a rebuilt or reset value above every version already out. Thread-safe: an
// incarnation may still be running down on one thread while the next starts on another.
#pragma once

#include <atomic>
#include <cstdint>

namespace dd::actors {

class owner_history {
 public:
  /// `highest_version`: the highest version the run has seen of this fragment (0 for a fresh run;
  /// a resumed run: the highest in events.jsonl).
  explicit owner_history(uint64_t highest_version = 0) : highest_(highest_version) {}
  owner_history(const owner_history&) = delete;
  owner_history& operator=(const owner_history&) = delete;

  /// An incarnation starts: how many started before it (0: the first start, else a respawn).
  uint64_t start() { return starts_.fetch_add(1); }
  /// Incarnations started so far.
  uint64_t starts() const { return starts_.load(); }

  /// The highest version any incarnation published or started at.
  uint64_t highest_version() const { return highest_.load(); }
  /// An incarnation holds version `v`: raises highest_version to it.
  void note_version(uint64_t v) {
    uint64_t cur = highest_.load();
    while (v > cur && !highest_.compare_exchange_weak(cur, v)) {}
  }

 private:
  std::atomic<uint64_t> starts_{0};
  std::atomic<uint64_t> highest_{0};
};

}  // namespace dd::actors
