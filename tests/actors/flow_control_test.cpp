// tests/actors/flow_control_test.cpp — the credit window (actors/policy/credit_window.hpp) as a
// pure state machine: the window bound, order per link, duplicate/late/unknown credit, a peer
// that vanishes, supersession of queued chunks, and a seeded random run checking the invariants.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "actors/policy/credit_window.hpp"

namespace dd::policy {
namespace {

using window = credit_window<int, int>;

std::vector<int> items(const std::vector<window::send_order>& v) {
  std::vector<int> out;
  for (const auto& s : v) out.push_back(s.item);
  return out;
}

TEST(CreditWindow, SendsUpToTheWindowThenWaitsForCredit) {
  window w(3);
  std::vector<window::send_order> sent;
  for (int i = 0; i < 5; ++i)
    for (auto& s : w.enqueue(7, 100 + i)) sent.push_back(s);
  ASSERT_EQ(items(sent), (std::vector<int>{100, 101, 102}));
  EXPECT_EQ(sent[0].seq, 1u);
  EXPECT_EQ(sent[1].seq, 2u);
  EXPECT_EQ(sent[2].seq, 3u);
  EXPECT_EQ(sent[0].peer, 7);
  EXPECT_EQ(w.in_flight(7), 3u);
  EXPECT_EQ(w.queued(7), 2u);
  // Credit for the second chunk: one slot frees, the next queued chunk goes with seq 4.
  auto next = w.credit(2);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].item, 103);
  EXPECT_EQ(next[0].seq, 4u);
  EXPECT_EQ(w.in_flight(7), 3u);
  EXPECT_EQ(w.queued(7), 1u);
  next = w.credit(1);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].item, 104);
  EXPECT_EQ(next[0].seq, 5u);
  EXPECT_EQ(w.queued(7), 0u);
  // Nothing queued: credits only free slots.
  EXPECT_TRUE(w.credit(3).empty());
  EXPECT_TRUE(w.credit(4).empty());
  EXPECT_EQ(w.in_flight(7), 1u);
  EXPECT_TRUE(w.credit(5).empty());
  EXPECT_EQ(w.in_flight(7), 0u);
  EXPECT_EQ(w.links(), 0u);  // an idle link takes no memory
}

TEST(CreditWindow, DuplicateLateAndUnknownCreditChangeNothing) {
  window w(2);
  w.enqueue(1, 10);
  w.enqueue(1, 11);
  w.enqueue(1, 12);
  w.enqueue(1, 13);
  ASSERT_EQ(w.in_flight(1), 2u);
  ASSERT_EQ(w.queued(1), 2u);
  auto a = w.credit(1);
  ASSERT_EQ(items(a), (std::vector<int>{12}));
  // The same credit again (duplicated in transit): no extra chunk, window still 2.
  EXPECT_TRUE(w.credit(1).empty());
  EXPECT_EQ(w.in_flight(1), 2u);
  EXPECT_EQ(w.queued(1), 1u);
  // Numbers never sent, zero, far in the future.
  EXPECT_TRUE(w.credit(0).empty());
  EXPECT_TRUE(w.credit(99).empty());
  EXPECT_TRUE(w.credit(UINT64_MAX).empty());
  EXPECT_EQ(w.in_flight(1), 2u);
  EXPECT_EQ(w.queued(1), 1u);
  // Credit out of order (seq 3 before seq 2) is fine: slots are per number.
  ASSERT_EQ(items(w.credit(3)), (std::vector<int>{13}));
  EXPECT_EQ(w.in_flight(1), 2u);
  EXPECT_EQ(w.queued(1), 0u);
}

TEST(CreditWindow, LinksAreIndependent) {
  window w(1);
  EXPECT_EQ(items(w.enqueue(1, 10)), (std::vector<int>{10}));
  EXPECT_TRUE(w.enqueue(1, 11).empty());
  // Peer 1 never credits; peer 2 is served anyway.
  EXPECT_EQ(items(w.enqueue(2, 20)), (std::vector<int>{20}));
  auto c = w.credit(2);  // seq 2 belonged to peer 2
  EXPECT_TRUE(c.empty());
  EXPECT_EQ(items(w.enqueue(2, 21)), (std::vector<int>{21}));
  EXPECT_EQ(w.in_flight(1), 1u);
  EXPECT_EQ(w.queued(1), 1u);
  EXPECT_EQ(w.in_flight(2), 1u);
  EXPECT_EQ(w.in_flight_total(), 2u);
}

TEST(CreditWindow, DropFreesTheLinkAndIgnoresItsLateCredit) {
  window w(2);
  for (int i = 0; i < 5; ++i) w.enqueue(1, i);
  for (int i = 0; i < 3; ++i) w.enqueue(2, 100 + i);
  ASSERT_EQ(w.in_flight_total(), 4u);
  EXPECT_EQ(w.drop(1), 3u);  // 3 queued freed, 2 in flight forgotten
  EXPECT_EQ(w.in_flight(1), 0u);
  EXPECT_EQ(w.queued(1), 0u);
  EXPECT_EQ(w.in_flight_total(), 2u);
  EXPECT_EQ(w.links(), 1u);
  // Late credits for the vanished peer's chunks (seq 1 and 2): ignored, peer 2 unaffected.
  EXPECT_TRUE(w.credit(1).empty());
  EXPECT_TRUE(w.credit(2).empty());
  EXPECT_EQ(w.in_flight(2), 2u);
  EXPECT_EQ(w.queued(2), 1u);
  EXPECT_EQ(w.drop(1), 0u);  // dropping twice is harmless
  // Peer 2's credit still works (its chunks had seq 3 and 4).
  EXPECT_EQ(items(w.credit(3)), (std::vector<int>{102}));
  // A peer that comes back under the same key starts a fresh link with fresh numbers.
  auto again = w.enqueue(1, 50);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].seq, 6u);
  EXPECT_EQ(w.in_flight(1), 1u);
}

TEST(CreditWindow, DiscardQueuedLeavesChunksInFlight) {
  window w(2);
  // Version 5 in four chunks: two in flight, two queued; then version 6 arrives.
  for (int i = 0; i < 4; ++i) w.enqueue(1, 50 + i, 5);
  EXPECT_EQ(w.discard_queued(1, [](uint64_t tag) { return tag < 6; }), 2u);
  EXPECT_EQ(w.in_flight(1), 2u);
  EXPECT_EQ(w.queued(1), 0u);
  EXPECT_TRUE(w.enqueue(1, 60, 6).empty());
  EXPECT_TRUE(w.enqueue(1, 61, 6).empty());
  EXPECT_EQ(w.discard_queued(1, [](uint64_t tag) { return tag < 6; }), 0u);
  EXPECT_EQ(items(w.credit(1)), (std::vector<int>{60}));
  EXPECT_EQ(items(w.credit(2)), (std::vector<int>{61}));
  EXPECT_EQ(w.discard_queued(9, [](uint64_t) { return true; }), 0u);  // unknown peer
}

TEST(CreditWindow, TwoWindowsWithDisjointNumbersIgnoreEachOthersCredit) {
  window pushes(1), copies(1, uint64_t{1} << 62);
  auto p = pushes.enqueue(1, 10);
  auto c = copies.enqueue(1, 20);
  ASSERT_EQ(p.size(), 1u);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(p[0].seq, 1u);
  EXPECT_EQ(c[0].seq, uint64_t{1} << 62);
  pushes.enqueue(1, 11);
  copies.enqueue(1, 21);
  // The actor offers each credit to both windows: only the owner of the number moves.
  EXPECT_TRUE(pushes.credit(c[0].seq).empty());
  EXPECT_EQ(items(copies.credit(c[0].seq)), (std::vector<int>{21}));
  EXPECT_TRUE(copies.credit(p[0].seq).empty());
  EXPECT_EQ(items(pushes.credit(p[0].seq)), (std::vector<int>{11}));
  EXPECT_EQ(window(1, 0).next_seq(), 1u);  // 0 is never used: it means "no credit"
}

TEST(CreditWindow, RefusesAnEmptyWindow) {
  EXPECT_THROW(window(0), std::invalid_argument);
  EXPECT_EQ(check_window(8, "sync.window_chunks"), "");
  EXPECT_EQ(check_window(1, "x"), "");
  EXPECT_EQ(check_window(1024, "x"), "");
  EXPECT_EQ(check_window(0, "sync.window_chunks"),
            "sync.window_chunks: window 0 is outside 1..1024 chunks");
  EXPECT_EQ(check_window(1025, "w"), "w: window 1025 is outside 1..1024 chunks");
}

// A seeded random run over 4 peers: enqueue, credit (right, duplicate, unknown), drop. Checked
// after every operation: in_flight <= W per peer; each peer receives its items in queue order
// with no item twice; sequence numbers are never reused; at the end, after all credit, every
// item queued to a peer that was never dropped was sent exactly once.
TEST(CreditWindow, RandomRunKeepsTheInvariants) {
  const uint64_t seed = 20261202;
  std::printf("flow_control_test RandomRun seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  for (size_t W : {1u, 2u, 4u, 8u}) {
    window w(W);
    std::map<int, std::vector<int>> queued_items, sent_items;
    std::map<uint64_t, int> outstanding;  // seq → peer, as a receiver would see it
    std::set<uint64_t> seen;
    std::vector<uint64_t> credited;
    std::set<int> dropped;
    int next_item = 0;
    auto take = [&](const std::vector<window::send_order>& v) {
      for (const auto& s : v) {
        ASSERT_TRUE(seen.insert(s.seq).second) << "seq " << s.seq << " reused";
        outstanding[s.seq] = s.peer;
        sent_items[s.peer].push_back(s.item);
      }
    };
    for (int op = 0; op < 20000; ++op) {
      const int peer = static_cast<int>(rng() % 4);
      const int kind = static_cast<int>(rng() % 100);
      if (kind < 45) {
        queued_items[peer].push_back(next_item);
        take(w.enqueue(peer, next_item++));
      } else if (kind < 85 && !outstanding.empty()) {
        auto it = outstanding.begin();
        std::advance(it, static_cast<long>(rng() % outstanding.size()));
        credited.push_back(it->first);
        take(w.credit(it->first));
        outstanding.erase(it);
      } else if (kind < 95 && !credited.empty()) {
        // A duplicate or late credit: must not send anything.
        const auto before = w.in_flight_total();
        EXPECT_TRUE(w.credit(credited[rng() % credited.size()]).empty());
        EXPECT_EQ(w.in_flight_total(), before);
      } else if (kind < 97) {
        w.drop(peer);
        dropped.insert(peer);
        for (auto it = outstanding.begin(); it != outstanding.end();)
          it = it->second == peer ? outstanding.erase(it) : std::next(it);
        queued_items[peer].clear();
        sent_items[peer].clear();
      }
      for (int p = 0; p < 4; ++p) ASSERT_LE(w.in_flight(p), W) << "peer " << p << " op " << op;
      for (int p = 0; p < 4; ++p) {
        const auto& s = sent_items[p];
        const auto& q = queued_items[p];
        ASSERT_LE(s.size(), q.size());
        for (size_t i = 0; i < s.size(); ++i) ASSERT_EQ(s[i], q[i]) << "order, peer " << p;
      }
    }
    // Credit everything: every remaining queued item goes out, in order.
    while (!outstanding.empty()) {
      auto it = outstanding.begin();
      const uint64_t seq = it->first;
      outstanding.erase(it);
      take(w.credit(seq));
    }
    for (int p = 0; p < 4; ++p) EXPECT_EQ(sent_items[p], queued_items[p]) << "peer " << p;
    EXPECT_EQ(w.in_flight_total(), 0u);
    EXPECT_EQ(w.links(), 0u);
  }
}

}  // namespace
}  // namespace dd::policy
