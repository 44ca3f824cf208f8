// tests/actors/describe_handshake_test.cpp — a learner node started before its syncer whose first
// describe handshake goes unanswered joins within a second or two of the syncer listening, not
// after the describe's 10 s request timeout: the real `dd-node learner` (started first, its
// --join port closed) and `dd-node syncer`, and between them a user-space relay opened once the
// syncer listens, which lets the syncer's CAF handshake through on the first connection the node
// speaks on and swallows everything the syncer sends on it after that: the node's CAF
// connection stays open and its describe is never answered, as when the syncer's middleman no
// longer routes to the node (docs/nodes.md "The node handshake"). Later connections pass. About
// 5 s.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/actors/process_support.hpp"
#include "tests/support/tiny_lua.hpp"
#include "util/net.hpp"

namespace {

namespace fs = std::filesystem;
using namespace dd::test;
using clock_type = std::chrono::steady_clock;

/// Forwards every connection on 127.0.0.1:`port` to 127.0.0.1:`target`; on the first connection
/// whose client sends anything, the server's first CAF frame (its handshake: a 32-byte header
/// whose bytes 4-7 are the payload length, big-endian) passes and every later byte from the
/// server is read and dropped.
class lossy_relay {
 public:
  lossy_relay(uint16_t port, uint16_t target) : target_(target) {
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
      pollfd p{listen_fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      const int c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      const int u = dd::util::connect_loopback(target_);
      if (u < 0) {
        ::close(c);
        continue;
      }
      pumps_.emplace_back([this, c, u] { pump(c, u); });
    }
  }
  void pump(int c, int u) {
    char buf[65536];
    bool lossy = false;
    std::vector<char> head;  // the server's first frame header, while incomplete
    uint64_t pass = 32;      // server bytes still passed on a lossy connection
    while (!stop_) {
      pollfd p[2] = {{c, POLLIN, 0}, {u, POLLIN, 0}};
      if (::poll(p, 2, 100) <= 0) continue;
      if (p[0].revents) {
        const ssize_t n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0) break;
        if (!claimed_.exchange(true)) lossy = true;
        if (dd::util::write_all(u, buf, static_cast<size_t>(n)) != 0) break;
      }
      if (p[1].revents) {
        const ssize_t n = ::recv(u, buf, sizeof buf, 0);
        if (n <= 0) break;
        size_t forward = static_cast<size_t>(n);
        if (lossy) {
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

}  // namespace
