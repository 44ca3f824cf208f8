// The frame guard's bounds against strangers (actors/link/frame_guard.hpp), against a plain TCP
// server standing in for CAF's middleman: the largest frame it lets through is one chunk message,
// strangers' announced frames share one budget, strangers are limited in number, and a connection
// the server has answered with a direct message is outside the strangers' limits.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "actors/link/frame_guard.hpp"
#include "messages/codec.hpp"
#include "util/net.hpp"

namespace {

using dd::actors::frame_guard;
using dd::actors::frame_guard_limits;

/// A loopback server that accepts every connection and reads (and drops) what it gets.
struct fake_middleman {
  int listen_fd = -1;
  uint16_t port = 0;
  std::mutex m;
  std::vector<int> conns;  // accepted, in order
  std::atomic<bool> stop{false};
  std::thread th;

  fake_middleman() {
    listen_fd = dd::util::listen_loopback(0, &port, false, 256);
    EXPECT_GE(listen_fd, 0) << std::strerror(errno);
    th = std::thread([this] {
      char buf[65536];
      while (!stop) {
        std::vector<pollfd> fds{{listen_fd, POLLIN, 0}};
        {
          std::lock_guard<std::mutex> g(m);
          for (int fd : conns) fds.push_back({fd, POLLIN, 0});
        }
        ::poll(fds.data(), fds.size(), 50);
        if (fds[0].revents & POLLIN) {
          const int fd = ::accept(listen_fd, nullptr, nullptr);
          std::lock_guard<std::mutex> g(m);
          if (fd >= 0) conns.push_back(fd);
        }
        for (size_t i = 1; i < fds.size(); ++i)
          if (fds[i].revents & POLLIN) (void)!::read(fds[i].fd, buf, sizeof buf);
      }
    });
  }
  ~fake_middleman() {
    stop = true;
    th.join();
    for (int fd : conns) ::close(fd);
    ::close(listen_fd);
  }
  /// Sends a BASP header of operation `op` (payload 0) to the k-th accepted connection.
  void send_header(size_t k, uint8_t op) {
    char h[32] = {0};
    h[0] = static_cast<char>(op);
    std::lock_guard<std::mutex> g(m);
    ASSERT_LT(k, conns.size());
    ASSERT_EQ(::write(conns[k], h, sizeof h), 32);
  }
  size_t accepted() {
    std::lock_guard<std::mutex> g(m);
    return conns.size();
  }
};

int connect_to(uint16_t port) {
  const int fd = dd::util::connect_loopback(port);
  EXPECT_GE(fd, 0) << std::strerror(errno);
  return fd;
}

/// A BASP header announcing `len` payload bytes (operation direct_message).
void announce(int fd, uint32_t len) {
  char h[32] = {0};
  h[0] = 2;
  const uint32_t be = htonl(len);
  std::memcpy(h + 4, &be, 4);
  ASSERT_EQ(::write(fd, h, sizeof h), 32);
}

/// True when the guard closed `fd` (EOF within `ms`); reads and drops what the server sent.
bool closed_by_guard(int fd, int ms = 2000) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  char buf[4096];
  while (std::chrono::steady_clock::now() < until) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 20) > 0) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN)) return true;
    }
  }
  return false;
}

template <class F>
bool eventually(F f) {
  for (int i = 0; i < 200; ++i) {
    if (f()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return f();
}

struct guarded {
  fake_middleman mm;
  std::mutex m;
  std::vector<std::string> reports;
  frame_guard guard;
  explicit guarded(frame_guard_limits l)
      : guard("127.0.0.1", 0, mm.port, l, [this](const std::string& what) {
          std::lock_guard<std::mutex> g(m);
          reports.push_back(what);
        }) {}
  std::vector<std::string> said() {
    std::lock_guard<std::mutex> g(m);
    return reports;
  }
};

constexpr uint32_t MiB = 1u << 20;

}  // namespace

// The default cap is the largest legitimate message: a full 4 MiB chunk message (here a broadcast
// naming 4096 merged pushes) fits with room for CAF's framing; twice a chunk does not.
TEST(frame_guard, the_default_cap_is_one_chunk_message_plus_slack) {
  dd::broadcast_msg b;
  b.fragment_id = 1;
  b.version = 7;
  b.total_elements = dd::default_chunk_bytes / 4;
  b.payload.assign(dd::default_chunk_bytes, 0x5a);
  b.payload_bytes = b.payload.size();
  for (int32_t i = 0; i < 4096; ++i)
    b.merged.push_back({i, 1000u + static_cast<uint64_t>(i), 3, 5});
  const auto bytes = dd::encode(b, {"0123456789abcdef", 1});
  EXPECT_LT(bytes.size() + 4096, dd::actors::default_max_frame_bytes) << bytes.size();
  EXPECT_LT(dd::actors::default_max_frame_bytes, 2 * dd::default_chunk_bytes);
  EXPECT_EQ(frame_guard_limits{}.max_frame_bytes, dd::actors::default_max_frame_bytes);
}

// Strangers that announce frames and never send them: the budget admits three 1 MiB frames, the
// next two connections are closed (reported, counted), and what the guard holds stays at the
// budget.
TEST(frame_guard, strangers_announced_frames_share_one_budget) {
  guarded g(frame_guard_limits{MiB, 3 * MiB, 32, 60.0});
  std::vector<int> fds;
  for (int i = 0; i < 5; ++i) {
    fds.push_back(connect_to(g.guard.port()));
    announce(fds.back(), MiB);
  }
  ASSERT_TRUE(eventually([&] { return g.guard.refused() == 2; })) << g.guard.refused();
  EXPECT_EQ(g.guard.stranger_bytes_held(), 3ull * MiB);
  std::vector<int> open;
  for (int fd : fds)
    if (!closed_by_guard(fd, 300)) open.push_back(fd);
  ASSERT_EQ(open.size(), 3u);
  const auto said = g.said();
  ASSERT_EQ(said.size(), 2u);
  EXPECT_NE(said[0].find("budget 3145728"), std::string::npos) << said[0];
  // One stranger completes its frame: its megabyte leaves the budget and a new one fits.
  std::vector<char> payload(MiB, 1);
  ASSERT_EQ(::send(open[0], payload.data(), payload.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(MiB));
  ASSERT_TRUE(eventually([&] { return g.guard.stranger_bytes_held() == 2ull * MiB; }));
  int late = connect_to(g.guard.port());
  announce(late, MiB);
  ASSERT_TRUE(eventually([&] { return g.guard.stranger_bytes_held() == 3ull * MiB; }));
  EXPECT_EQ(g.guard.refused(), 2u);
  // A frame above the cap is refused whoever sends it.
  int big = connect_to(g.guard.port());
  announce(big, MiB + 1);
  EXPECT_TRUE(closed_by_guard(big));
  EXPECT_EQ(g.guard.refused(), 3u);
  for (int fd : fds) ::close(fd);
  ::close(late);
  ::close(big);
  ASSERT_TRUE(eventually([&] { return g.guard.stranger_bytes_held() == 0; }));
}

// At most `stranger_connections` strangers at once; an answered connection is no stranger: it
// frees its place and its frames are outside the budget.
TEST(frame_guard, strangers_are_limited_in_number_and_an_answered_connection_is_none) {
  guarded g(frame_guard_limits{MiB, MiB, 2, 60.0});
  int a = connect_to(g.guard.port());
  int b = connect_to(g.guard.port());
  ASSERT_TRUE(eventually([&] { return g.mm.accepted() == 2; }));
  int c = connect_to(g.guard.port());
  EXPECT_TRUE(closed_by_guard(c));
  EXPECT_EQ(g.guard.refused(), 1u);
  ASSERT_EQ(g.said().size(), 1u);
  EXPECT_NE(g.said()[0].find("limit 2"), std::string::npos) << g.said()[0];
  // The server answers `a` (a server handshake is no answer; a direct message is).
  g.mm.send_header(0, 0x00);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  int d = connect_to(g.guard.port());
  EXPECT_TRUE(closed_by_guard(d));
  EXPECT_EQ(g.guard.refused(), 2u);
  g.mm.send_header(0, 0x02);
  ASSERT_TRUE(closed_by_guard(a, 200) == false);
  int e = connect_to(g.guard.port());
  ASSERT_TRUE(eventually([&] { return g.mm.accepted() == 3; }));
  EXPECT_FALSE(closed_by_guard(e, 200));
  // `a` announces two frames' worth of the strangers' budget: not counted against it.
  announce(a, MiB);
  std::vector<char> payload(MiB, 1);
  ASSERT_EQ(::send(a, payload.data(), payload.size(), MSG_NOSIGNAL), static_cast<ssize_t>(MiB));
  announce(a, MiB);
  announce(b, MiB);  // the stranger `b` fills the budget
  ASSERT_TRUE(eventually([&] { return g.guard.stranger_bytes_held() == MiB; }));
  EXPECT_FALSE(closed_by_guard(a, 200));
  EXPECT_EQ(g.guard.refused(), 2u);
  for (int fd : {a, b, c, d, e}) ::close(fd);
}

// A stranger the server never answers is closed after stranger_timeout_s.
TEST(frame_guard, an_unanswered_stranger_is_closed_after_its_timeout) {
  guarded g(frame_guard_limits{MiB, MiB, 8, 0.5});
  int a = connect_to(g.guard.port());
  EXPECT_TRUE(closed_by_guard(a, 4000));
  EXPECT_EQ(g.guard.refused(), 1u);
  ASSERT_EQ(g.said().size(), 1u);
  EXPECT_NE(g.said()[0].find("not answered"), std::string::npos) << g.said()[0];
  ::close(a);
}
