// tests/actors/describe_handshake_test.cpp — a learner node started before its syncer whose first
// describe handshake goes unanswered joins within a second or two of the syncer listening, not
// after the describe's 10 s request timeout: the real `dd-node learner` (started first, its
// --join port closed) and `dd-node syncer`, and between them a user-space relay opened once the
// syncer listens, which lets the syncer's CAF handshake through on the first connection the node
// speaks on and swallows everything the syncer sends on it after that: the node's CAF
// connection stays open and its describe is never answered, as when the syncer's middleman no
// longer routes to the node (docs/nodes.md "The node handshake"). Later connections pass. About
// 5 s. The second case does the same to the handshake's next request, the ask for learner ids
// (the relay passes the describe's answer and swallows the rest), with the node started after
// the syncer: the node asks again at once on a fresh connection and is granted the same id.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/actors/process_support.hpp"
#include "tests/support/tiny_lua.hpp"
#include "util/net.hpp"

namespace {

namespace fs = std::filesystem;
using namespace dd::test;
using clock_type = std::chrono::steady_clock;

/// Reads a stream of CAF 0.17 BASP frames (a 32-byte header: byte 0 the operation, bytes 4-7 the
/// payload length, bytes 24-31 the destination actor, big-endian; then the payload) as it passes
/// and counts the frames of one operation sent to each destination actor.
class frame_counter {
 public:
  explicit frame_counter(uint8_t operation) : operation_(operation) {}
  void feed(const char* p, size_t n) {
    for (size_t i = 0; i < n;) {
      if (skip_ > 0) {
        const size_t k = static_cast<size_t>(std::min<uint64_t>(skip_, n - i));
        skip_ -= k;
        i += k;
        continue;
      }
      head_.push_back(p[i++]);
      if (head_.size() < 32) continue;
      uint32_t len_be = 0;
      std::memcpy(&len_be, head_.data() + 4, 4);
      skip_ = ntohl(len_be);
      if (static_cast<uint8_t>(head_[0]) == operation_) {
        uint64_t dest = 0;
        for (size_t b = 24; b < 32; ++b) dest = dest << 8 | static_cast<uint8_t>(head_[b]);
        most_ = std::max(most_, ++to_[dest]);
      }
      head_.clear();
    }
  }
  /// The most frames of the operation sent to one actor.
  int most_to_one_actor() const { return most_; }

 private:
  uint8_t operation_;
  std::vector<char> head_;
  uint64_t skip_ = 0;
  std::map<uint64_t, int> to_;
  int most_ = 0;
};

constexpr uint8_t basp_direct_message = 2;

/// Forwards every connection on 127.0.0.1:`port` to 127.0.0.1:`target`. With
/// `pass_requests` 0: on the first connection whose client sends anything, the server's first
/// CAF frame (its handshake: a 32-byte header whose bytes 4-7 are the payload length,
/// big-endian) passes and every later byte from the server is read and dropped. With
/// `pass_requests` k > 0: on the first connection whose client sends a (k+1)-th message (BASP
/// direct_message) to one actor — the monitor: the describe is the node's first, the ask for
/// learner ids its second — every byte from the server after that is read and dropped.
class lossy_relay {
 public:
  lossy_relay(uint16_t port, uint16_t target, int pass_requests = 0)
      : target_(target), pass_requests_(pass_requests) {
    listen_fd_ = dd::util::listen_loopback(port, nullptr);
    thread_ = std::thread([this] { run(); });
  }
  ~lossy_relay() {
    stop_ = true;
    ::shutdown(listen_fd_, SHUT_RDWR);
    thread_.join();
    ::close(listen_fd_);
    for (auto& t : pumps_) t.join();
  }
  bool listening() const { return listen_fd_ >= 0; }
  /// Bytes the syncer sent on the lossy connection that the relay dropped.
  size_t dropped() const { return dropped_.load(); }

 private:
  void run() {
    while (!stop_) {
      const auto cu = accept_relayed(listen_fd_, target_, 100);
      if (!cu) continue;
      const auto [c, u] = *cu;
      pumps_.emplace_back([this, c = c, u = u] { pump(c, u); });
    }
  }
  void pump(int c, int u) {
    char buf[65536];
    bool lossy = false;
    std::vector<char> head;  // the server's first frame header, while incomplete
    uint64_t pass = 32;      // server bytes still passed on a lossy connection
    frame_counter client_messages(basp_direct_message);
    while (!stop_) {
      pollfd p[2] = {{c, POLLIN, 0}, {u, POLLIN, 0}};
      if (::poll(p, 2, 100) <= 0) continue;
      if (p[0].revents) {
        const ssize_t n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0) break;
        if (pass_requests_ > 0) {
          client_messages.feed(buf, static_cast<size_t>(n));
          if (!lossy && client_messages.most_to_one_actor() > pass_requests_ &&
              !claimed_.exchange(true))
            lossy = true;
        } else if (!claimed_.exchange(true)) {
          lossy = true;
        }
        if (dd::util::write_all(u, buf, static_cast<size_t>(n)) != 0) break;
      }
      if (p[1].revents) {
        const ssize_t n = ::recv(u, buf, sizeof buf, 0);
        if (n <= 0) break;
        size_t forward = static_cast<size_t>(n);
        if (lossy && pass_requests_ > 0) {
          forward = 0;
          dropped_ += static_cast<size_t>(n);
        } else if (lossy) {
          // Learn the handshake's length from its header, then pass exactly that frame.
          for (ssize_t i = 0; i < n && head.size() < 32; ++i) {
            head.push_back(buf[i]);
            if (head.size() == 32) {
              uint32_t len_be = 0;
              std::memcpy(&len_be, head.data() + 4, 4);
              pass += ntohl(len_be);
            }
          }
          forward = static_cast<size_t>(std::min<uint64_t>(pass, static_cast<uint64_t>(n)));
          pass -= forward;
          dropped_ += static_cast<size_t>(n) - forward;
        }
        if (forward > 0 && dd::util::write_all(c, buf, forward) != 0) break;
      }
    }
    ::close(c);
    ::close(u);
  }
  uint16_t target_;
  int pass_requests_;
  int listen_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::atomic<bool> claimed_{false};
  std::atomic<size_t> dropped_{0};
  std::thread thread_;
  std::vector<std::thread> pumps_;
};

// Regression: a learner node started before its syncer waited the whole 10 s describe timeout
// (twice when its next lookup got the same connection back) for a reply the syncer's middleman
// had sent nowhere, and joined 12-23 s after the syncer listened.
TEST(describe_handshake, an_unanswered_first_describe_is_asked_again_at_once) {
  const fs::path dir = fresh_dir("describe_handshake");
  tiny_lua t;
  t.learners = 1;
  t.budget = "{ seconds = 60 }";
  t.checkpoint_every = 0;
  std::ofstream(dir / "tiny.lua") << t.text();
  const uint16_t join_port = dd::util::free_loopback_port();
  const uint16_t syncer_port = dd::util::free_loopback_port();
  ASSERT_NE(join_port, 0);
  ASSERT_NE(syncer_port, 0);
  ASSERT_NE(join_port, syncer_port);
  const std::string join = "127.0.0.1:" + std::to_string(join_port);

  // The learner node first: nothing listens on its --join port yet.
  const pid_t node =
      spawn(dir,
            {DD_NODE_BIN, "learner", "--join", join, "--learners", "1", "--node-name", "n0",
             "--run-dir", "node", "--progress", "0", "--backoff-cap", "0.5"},
            (dir / "node.out").string());
  const pid_t syncer =
      spawn(dir,
            {DD_NODE_BIN, "syncer", "tiny.lua", "--listen",
             "127.0.0.1:" + std::to_string(syncer_port), "--run-dir", "run", "--progress", "0"},
            (dir / "syncer.out").string());
  const bool listening = wait_events(dir / "run" / "events.jsonl", "listening", 1, 60);
  EXPECT_TRUE(listening) << text(dir / "syncer.out");
  {
    lossy_relay relay(join_port, syncer_port);
    EXPECT_TRUE(relay.listening());
    const auto opened = clock_type::now();
    // Ids granted (the syncer's node_join event) well within one describe timeout (10 s) of the
    // relay listening: the node's backoff step (at most 0.5 s), the unanswered describe (1 s),
    // the retry on a fresh connection and the ask for ids.
    const bool joined = listening && wait_events(dir / "run" / "events.jsonl", "node_join", 1, 20);
    const double took = std::chrono::duration<double>(clock_type::now() - opened).count();
    std::printf("[describe_handshake] ids granted %.2f s after the relay listened\n", took);
    EXPECT_TRUE(joined) << text(dir / "node.out");
    EXPECT_LT(took, 6.0) << text(dir / "node.out");
    // The relay did swallow the syncer's answers on the first connection, and the node said so.
    EXPECT_GT(relay.dropped(), 0u);
    EXPECT_NE(text(dir / "node.out").find("describe handshake unanswered"), std::string::npos)
        << text(dir / "node.out");
    ::kill(node, SIGINT);
    EXPECT_EQ(wait_for(node, 30), 130) << text(dir / "node.out");
  }
  ::kill(syncer, SIGINT);
  wait_for(syncer, 30);
}

/// The learner ids of every `node_join` event in a JSON-lines events file.
std::vector<std::vector<int32_t>> granted_ids(const fs::path& events) {
  std::vector<std::vector<int32_t>> out;
  std::ifstream in(events);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find("\"event\":\"node_join\"") == std::string::npos) continue;
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded()) out.push_back(j.value("learners", std::vector<int32_t>{}));
  }
  return out;
}

// Regression: the ask for learner ids went down the connection the describe was answered on;
// when the syncer's answers on it went nowhere, the node waited the whole 10 s request timeout
// and asked again on the same connection, where nothing came back either. The syncer granted
// the lost ask: the repeated one, from the same node, is granted the same id (of 2 free) again.
TEST(describe_handshake, an_unanswered_ask_for_ids_is_asked_again_at_once_on_a_fresh_connection) {
  const fs::path dir = fresh_dir("ids_handshake");
  tiny_lua t;
  t.learners = 2;
  t.budget = "{ seconds = 60 }";
  t.checkpoint_every = 0;
  std::ofstream(dir / "tiny.lua") << t.text();
  const uint16_t join_port = dd::util::free_loopback_port();
  const uint16_t syncer_port = dd::util::free_loopback_port();
  ASSERT_NE(join_port, 0);
  ASSERT_NE(syncer_port, 0);
  ASSERT_NE(join_port, syncer_port);
  const std::string join = "127.0.0.1:" + std::to_string(join_port);
  const pid_t syncer =
      spawn(dir,
            {DD_NODE_BIN, "syncer", "tiny.lua", "--listen",
             "127.0.0.1:" + std::to_string(syncer_port), "--run-dir", "run", "--progress", "0"},
            (dir / "syncer.out").string());
  const bool listening = wait_events(dir / "run" / "events.jsonl", "listening", 1, 60);
  EXPECT_TRUE(listening) << text(dir / "syncer.out");
  {
    // The node's connection passes the describe's answer and swallows the syncer's answers from
    // the node's second request to the monitor on (the ask for ids).
    lossy_relay relay(join_port, syncer_port, /*pass_requests=*/1);
    EXPECT_TRUE(relay.listening());
    const auto opened = clock_type::now();
    const pid_t node =
        spawn(dir,
              {DD_NODE_BIN, "learner", "--join", join, "--learners", "1", "--node-name", "n0",
               "--run-dir", "node", "--progress", "0", "--backoff-cap", "0.5"},
              (dir / "node.out").string());
    // Two grants (the lost one and the one answered) well within one request timeout (10 s) of
    // the node starting: the describe, the unanswered ask (1 s), a fresh connection, the ask.
    const bool granted = listening && wait_events(dir / "run" / "events.jsonl", "node_join", 2, 15);
    const double took = std::chrono::duration<double>(clock_type::now() - opened).count();
    std::printf("[describe_handshake] ids granted again %.2f s after the node started\n", took);
    EXPECT_TRUE(granted) << text(dir / "node.out");
    EXPECT_LT(took, 6.0) << text(dir / "node.out");
    EXPECT_GT(relay.dropped(), 0u);
    EXPECT_NE(text(dir / "node.out").find("ask for learner ids unanswered"), std::string::npos)
        << text(dir / "node.out");
    // The same id both times: the repeated ask reserved nothing else.
    EXPECT_EQ(granted_ids(dir / "run" / "events.jsonl"),
              (std::vector<std::vector<int32_t>>{{0}, {0}}));
    ::kill(node, SIGINT);
    EXPECT_EQ(wait_for(node, 30), 130) << text(dir / "node.out");
  }
  ::kill(syncer, SIGINT);
  wait_for(syncer, 30);
}

}  // namespace
