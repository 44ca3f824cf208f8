// actors/policy/credit_window.hpp — credit-based flow control of chunked transfers, as a pure
// state machine (no CAF, no clock, no I/O).
//
// One `credit_window` lives in each sending actor (a learner pushing chunks to fragment owners, an
// owner broadcasting chunks to learners). A *link* is one (sender, peer) pair. On every link at
// most `window` chunks are in flight: sent and not yet credited. Each chunk sent gets a sequence
// number unique within the sender (never reused, also not after a link was dropped); the receiver
// grants credit by sending that number back once it has taken the chunk out of its mailbox.
// Chunks over the window wait in the link's queue, in order, and go out as credit comes back.
//
// What the actor gets back from every call is the list of chunks it must send now, each with its
// sequence number. Promises (tests/actors/flow_control_test.cpp):
//   - in_flight(peer) <= window at all times, for every peer;
//   - chunks of one link leave in the order they were queued;
//   - a credit for a number that is not in flight (a duplicate, a late credit after the link was
//     dropped, a number never sent) changes nothing;
//   - `drop(peer)` (the peer vanished) frees the link's queue and in-flight numbers at once; other
//     links are untouched, so a dead or silent peer stalls only its own link.
// Any thread, one at a time (the owning actor's).
//
// Why: every tensor transfer is chunked with credit-based flow control in both directions,
// broadcasts included, so the bytes in flight per link are bounded; docs/caf.md ("1–8 MiB
// chunks, four in flight, acknowledged: about 1 GiB/s with 20–110 MB RSS").
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace dd::policy {

/// The default window: chunks in flight per link (docs/config.md, `sync.window_chunks`). With
/// 4 MiB chunks (`dd::default_chunk_bytes`) that is at most 32 MiB in flight per link.
inline constexpr int default_window_chunks = 8;

/// Checks a window size: 1..1024 chunks. Returns an empty string when valid, else a message
/// naming `where` and the value.
std::string check_window(long long window, const std::string& where);

/// Credit-based flow control for one sender and all its peers. `Peer` identifies a link (ordered
/// by `<`; the actors use the peer's actor control block pointer); `Item` is what is queued (the
/// actors queue a shared, already encoded chunk).
template <class Peer, class Item>
class credit_window {
 public:
  /// A chunk that must be sent now: to `peer`, carrying sequence number `seq`.
  struct send_order {
    Peer peer;
    uint64_t seq;
    Item item;
  };

  /// `window`: chunks in flight per link, >= 1 (std::invalid_argument otherwise). `first_seq`:
  /// the first sequence number (>= 1); two windows of one sender that share a credit message
  /// start far apart so their numbers never meet.
  explicit credit_window(size_t window = default_window_chunks, uint64_t first_seq = 1)
      : window_(window), next_seq_(first_seq == 0 ? 1 : first_seq) {
    if (window == 0) throw std::invalid_argument("credit_window: window must be at least 1");
  }

  /// The window, chunks per link.
  size_t window() const { return window_; }

  /// Queues `item` for `peer` behind everything queued for it, with a caller-defined `tag` (the
  /// owner tags broadcast chunks with their version, see `discard_queued`). Returns what may be
  /// sent now: this item (if the link has room and nothing waits before it) or nothing.
  std::vector<send_order> enqueue(const Peer& peer, Item item, uint64_t tag = 0) {
    auto& l = links_[peer];
    l.queue.push_back({tag, std::move(item)});
    std::vector<send_order> out;
    fill(peer, l, out);
    return out;
  }

  /// Removes the queued (not yet sent) items of `peer` whose tag satisfies `pred(tag)`; chunks
  /// already in flight are not affected. Returns how many were removed.
  template <class Pred>
  size_t discard_queued(const Peer& peer, Pred pred) {
    auto it = links_.find(peer);
    if (it == links_.end()) return 0;
    auto& q = it->second.queue;
    const size_t before = q.size();
    for (auto i = q.begin(); i != q.end();) i = pred(i->first) ? q.erase(i) : std::next(i);
    return before - q.size();
  }

  /// The receiver consumed chunk `seq`: frees its slot and returns what may be sent now on that
  /// link. A number not in flight (duplicate, late, unknown) returns nothing and changes nothing.
  std::vector<send_order> credit(uint64_t seq) {
    std::vector<send_order> out;
    auto s = seq_peer_.find(seq);
    if (s == seq_peer_.end()) return out;
    const Peer peer = s->second;
    seq_peer_.erase(s);
    auto it = links_.find(peer);
    if (it == links_.end()) return out;  // cannot happen: drop() erases the link's numbers
    it->second.in_flight.erase(seq);
    fill(peer, it->second, out);
    if (it->second.in_flight.empty() && it->second.queue.empty()) links_.erase(it);
    return out;
  }

  /// `peer` vanished (or will never credit again): forgets its link — queued items and in-flight
  /// numbers (a later credit for them is ignored). Returns the number of queued items freed.
  size_t drop(const Peer& peer) {
    auto it = links_.find(peer);
    if (it == links_.end()) return 0;
    for (uint64_t seq : it->second.in_flight) seq_peer_.erase(seq);
    const size_t freed = it->second.queue.size();
    links_.erase(it);
    return freed;
  }

  /// Forgets every link (the sender stops).
  void clear() {
    links_.clear();
    seq_peer_.clear();
  }

  /// Chunks sent to `peer` and not yet credited (<= window()).
  size_t in_flight(const Peer& peer) const {
    auto it = links_.find(peer);
    return it == links_.end() ? 0 : it->second.in_flight.size();
  }

  /// Chunks queued for `peer` and not yet sent.
  size_t queued(const Peer& peer) const {
    auto it = links_.find(peer);
    return it == links_.end() ? 0 : it->second.queue.size();
  }

  /// Chunks in flight on all links together.
  size_t in_flight_total() const { return seq_peer_.size(); }

  /// Links that hold queued or in-flight chunks (an idle link takes no memory).
  size_t links() const { return links_.size(); }

  /// The peers with a link (queued or in-flight chunks).
  std::vector<Peer> peers() const {
    std::vector<Peer> out;
    for (const auto& [p, l] : links_) out.push_back(p);
    return out;
  }

  /// The sequence number the next chunk sent will carry (numbers start at 1).
  uint64_t next_seq() const { return next_seq_; }

 private:
  struct link {
    std::deque<std::pair<uint64_t, Item>> queue;  ///< (tag, item), oldest first
    std::set<uint64_t> in_flight;                 ///< sequence numbers not yet credited
  };

  void fill(const Peer& peer, link& l, std::vector<send_order>& out) {
    while (l.in_flight.size() < window_ && !l.queue.empty()) {
      const uint64_t seq = next_seq_++;
      l.in_flight.insert(seq);
      seq_peer_.emplace(seq, peer);
      out.push_back({peer, seq, std::move(l.queue.front().second)});
      l.queue.pop_front();
    }
  }

  size_t window_;
  uint64_t next_seq_;
  std::map<Peer, link> links_;
  std::map<uint64_t, Peer> seq_peer_;  ///< in-flight number → its link
};

}  // namespace dd::policy
