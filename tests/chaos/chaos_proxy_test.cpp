// tests/chaos/chaos_proxy_test.cpp — the fault proxy on real loopback TCP: an echo server behind
// one link, a client in front; every fault observed on the bytes that come back.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <atomic>
#include <thread>

#include "tools/chaos/common.hpp"
#include "tools/chaos/net.hpp"
#include "tools/chaos/proxy.hpp"

using namespace dd::chaos;
using nlohmann::json;

namespace {

// Echoes every byte back on each accepted connection (a thread per connection).
class echo_server {
 public:
  echo_server() {
    host_port bound;
    fd_ = listen_tcp({"127.0.0.1", 0}, &bound);
    port_ = bound.port;
    thread_ = std::thread([this] { loop(); });
  }
  ~echo_server() {
    stop_ = true;
    thread_.join();
    for (auto& t : workers_) t.join();
    ::close(fd_);
  }
  uint16_t port() const { return port_; }

 private:
  void loop() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) continue;
      workers_.emplace_back([this, c] {
        char buf[65536];
        for (;;) {
          pollfd q{c, POLLIN, 0};
          if (::poll(&q, 1, 50) == 0) {
            if (stop_) break;
            continue;
          }
          const ssize_t n = ::recv(c, buf, sizeof buf, 0);
          if (n <= 0) break;
          for (ssize_t off = 0; off < n;) {
            const ssize_t w = ::send(c, buf + off, n - off, MSG_NOSIGNAL);
            if (w <= 0) break;
            off += w;
          }
        }
        ::close(c);
      });
    }
  }
  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::vector<std::thread> workers_;
};

// A proxy with one link "l" in front of an echo server, run on its own thread.
struct fixture : ::testing::Test {
  echo_server echo;
  std::unique_ptr<fault_proxy> proxy;
  std::thread loop;
  std::string control;
  uint16_t link_port = 0;

  void SetUp() override {
    proxy_config cfg;
    cfg.links.push_back(parse_link_spec("l=127.0.0.1:0->127.0.0.1:" + std::to_string(echo.port())));
    cfg.seed = 5;
    proxy = std::make_unique<fault_proxy>(cfg);
    const json ports = proxy->ports();
    control = ports["control"];
    link_port = parse_host_port(ports["links"]["l"], "l").port;
    loop = std::thread([this] { proxy->run(); });
  }
  void TearDown() override {
    proxy->stop();
    loop.join();
  }

  json ctl(const std::string& line) {
    const json r = control_request(control, line);
    EXPECT_TRUE(r.value("ok", false)) << line << " -> " << r.dump();
    return r;
  }

  int connect_link() {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a = resolve_ipv4({"127.0.0.1", link_port});
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    return fd;
  }
};

void send_all(int fd, const std::string& s) {
  for (size_t off = 0; off < s.size();) {
    const ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    ASSERT_GT(n, 0);
    off += static_cast<size_t>(n);
  }
}

// Reads until `want` bytes arrived, the peer closed, or `timeout` seconds passed.
std::string recv_for(int fd, size_t want, double timeout, bool* closed = nullptr) {
  std::string out;
  const double end = mono_now() + timeout;
  if (closed) *closed = false;
  while (out.size() < want) {
    const double left = end - mono_now();
    if (left <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left * 1000) + 1) <= 0) continue;
    char buf[65536];
    const ssize_t n = ::recv(fd, buf, std::min(sizeof buf, want - out.size()), 0);
    if (n <= 0) {
      if (closed) *closed = true;
      break;
    }
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// Sends `s` through `fd` and expects all of it echoed back within `timeout` seconds.
void expect_echoed(int fd, const std::string& s, double timeout) {
  send_all(fd, s);
  ASSERT_EQ(recv_for(fd, s.size(), timeout), s);
}

std::string pattern(size_t n) {
  std::string s(n, '\0');
  uint32_t x = 12345;
  for (auto& c : s) {
    x = x * 1103515245u + 12345u;
    c = static_cast<char>(x >> 24);
  }
  return s;
}

}  // namespace

TEST_F(fixture, forwards_bytes_both_ways_intact) {
  const int fd = connect_link();
  expect_echoed(fd, "hello", 2.0);
  // 8 MiB each way at once: exercises partial writes and back pressure (queues are 1 MiB).
  const std::string big = pattern(8u << 20);
  std::thread sender([&] { send_all(fd, big); });
  const std::string back = recv_for(fd, big.size(), 20.0);
  sender.join();
  EXPECT_EQ(back.size(), big.size());
  EXPECT_TRUE(back == big);
  ::close(fd);
  const json st = ctl("status");
  EXPECT_EQ(st["links"][0]["name"], "l");
  EXPECT_GE(st["links"][0]["accepted"].get<int>(), 1);
}

TEST_F(fixture, latency_adds_at_least_the_latency_each_way) {
  const int fd = connect_link();
  ASSERT_NO_FATAL_FAILURE(expect_echoed(fd, "x", 2.0));
  ctl("latency l ms=150 dir=both for=10");
  const double t0 = mono_now();
  expect_echoed(fd, "ping", 3.0);
  EXPECT_GE(mono_now() - t0, 0.300);  // 150 ms up + 150 ms down
  ctl("heal l");
  ::close(fd);
}

TEST_F(fixture, blackhole_holds_bytes_and_delivers_them_after_heal) {
  const int fd = connect_link();
  ctl("blackhole l dir=up");
  send_all(fd, "held bytes");
  EXPECT_EQ(recv_for(fd, 10, 0.4), "");
  const json st = ctl("status");
  EXPECT_EQ(st["links"][0]["queued"]["up"], 10);
  ctl("heal");
  EXPECT_EQ(recv_for(fd, 10, 2.0), "held bytes");
  ::close(fd);
}

TEST_F(fixture, fault_reverts_by_itself_after_its_duration) {
  const int fd = connect_link();
  ctl("blackhole l dir=both for=300ms");
  const double t0 = mono_now();
  expect_echoed(fd, "later", 3.0);
  EXPECT_GE(mono_now() - t0, 0.29);
  EXPECT_TRUE(ctl("status")["links"][0]["faults"].empty());
  ::close(fd);
}

TEST_F(fixture, corrupt_changes_bytes) {
  const int fd = connect_link();
  ctl("corrupt l p=1 dir=up seed=3");
  const std::string msg = pattern(1000);
  send_all(fd, msg);
  const std::string back = recv_for(fd, msg.size(), 2.0);
  ASSERT_EQ(back.size(), msg.size());
  size_t differ = 0;
  for (size_t i = 0; i < msg.size(); ++i) differ += msg[i] != back[i];
  EXPECT_EQ(differ, msg.size());  // p = 1: every byte flipped (xor with a non-zero value)
  ctl("corrupt l p=0.1 dir=up seed=3");
  send_all(fd, msg);
  const std::string some = recv_for(fd, msg.size(), 2.0);
  differ = 0;
  for (size_t i = 0; i < msg.size(); ++i) differ += msg[i] != some[i];
  EXPECT_GT(differ, 50u);
  EXPECT_LT(differ, 150u);
  ::close(fd);
}

TEST_F(fixture, close_after_n_bytes_closes) {
  ctl("close_after l bytes=10 dir=down");
  const int fd = connect_link();
  send_all(fd, std::string(100, 'a'));
  bool closed = false;
  const std::string back = recv_for(fd, 100, 3.0, &closed);
  EXPECT_EQ(back, std::string(10, 'a'));
  EXPECT_TRUE(closed);
  ::close(fd);
}

TEST_F(fixture, reset_closes_open_connections) {
  const int fd = connect_link();
  ASSERT_NO_FATAL_FAILURE(expect_echoed(fd, "a", 2.0));
  EXPECT_EQ(ctl("reset l")["reset"], 1);
  bool closed = false;
  recv_for(fd, 1, 2.0, &closed);
  EXPECT_TRUE(closed);
  ::close(fd);
  const int again = connect_link();  // one-shot: new connections work
  expect_echoed(again, "b", 2.0);
  ::close(again);
}

TEST_F(fixture, slice_and_bandwidth_deliver_everything) {
  const int fd = connect_link();
  ctl("slice l size=3 delay_us=200");
  expect_echoed(fd, "0123456789", 3.0);
  ctl("heal l");
  ctl("bandwidth l rate=100000 dir=up");
  const std::string msg = pattern(50000);
  const double t0 = mono_now();
  send_all(fd, msg);
  EXPECT_TRUE(recv_for(fd, msg.size(), 5.0) == msg);
  EXPECT_GE(mono_now() - t0, 0.4);  // 50 kB at 100 kB/s (minus one 5 kB burst)
  ::close(fd);
}

TEST_F(fixture, bad_requests_get_an_error_reply) {
  EXPECT_FALSE(control_request(control, "latency nolink ms=5").value("ok", true));
  EXPECT_FALSE(control_request(control, "latency l").value("ok", true));
  EXPECT_FALSE(control_request(control, "latency l ms=5 volume=11").value("ok", true));
  EXPECT_FALSE(control_request(control, "explode l").value("ok", true));
}
