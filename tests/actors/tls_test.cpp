// tests/actors/tls_test.cpp — mutual TLS pieces (actors/link/tls.hpp, tls_tunnel.hpp) on
// loopback: the learner ids a certificate's names grant; certificates made by make_certs and what
// read_cert says of them; contexts refuse a key of another certificate and an expired
// certificate; a pair of tunnels (originate → terminate) carries bytes both ways to a plain echo
// server, names the client's certificate by the port its forwarded connection leaves from, and
// refuses a client whose certificate another CA signed and a plaintext client.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "actors/link/tls.hpp"
#include "actors/link/tls_tunnel.hpp"
#include "actors/nodes/node_connector.hpp"
#include "util/net.hpp"

namespace dd::actors {
namespace {

namespace fs = std::filesystem;

TEST(Tls, LearnerIdsOfCertificateNames) {
  EXPECT_EQ(learner_ids_of({"learner-0", "learner-12", "syncer"}), (std::set<int32_t>{0, 12}));
  EXPECT_EQ(learner_ids_of({"learner-", "learner-x", "learner-1a", "Learner-1", "xlearner-2"}),
            std::set<int32_t>{});
  EXPECT_EQ(learner_ids_of({"learner-1234567"}), (std::set<int32_t>{1234567}));
  EXPECT_EQ(learner_ids_of({"learner-12345678"}), std::set<int32_t>{});  // too long
}

// Draining is an operator's: a certificate that names a role (a learner id, the syncer) may not.
TEST(Tls, OperatorRequestsAreRefusedToCertificatesThatNameARole) {
  struct row {
    std::vector<std::string> names;
    bool refused;
  };
  const std::vector<row> table = {
      {{"operator"}, false},
      {{"ops-alice", "admin"}, false},
      {{}, false},
      {{"learner-0"}, true},
      {{"operator", "learner-12"}, true},
      {{"syncer"}, true},
      {{"learner-x", "Learner-1"}, false},  // no learner id: not a learner's name
  };
  for (const auto& r : table) {
    const std::string why = operator_refusal(r.names);
    EXPECT_EQ(!why.empty(), r.refused) << fmt::format("{}", fmt::join(r.names, ","));
  }
  EXPECT_NE(operator_refusal({"learner-0"}).find("names learner-0"), std::string::npos)
      << operator_refusal({"learner-0"});
}

// A connection's first read: closed before it sent anything (a probe) is no handshake to refuse.
TEST(TlsTunnel, FirstReadClassifiesAConnectionClosedBeforeItSentAnything) {
  struct row {
    long n;
    int err;
    first_read want;
  };
  const std::vector<row> table = {
      {1, 0, first_read::data},
      {0, 0, first_read::closed},
      {-1, ECONNRESET, first_read::closed},
      {-1, EPIPE, first_read::closed},
      {-1, EAGAIN, first_read::silent},
      {-1, EWOULDBLOCK, first_read::silent},
      {-1, EINTR, first_read::data},
      {-1, EBADF, first_read::data},
  };
  for (const auto& r : table)
    EXPECT_EQ(classify_first_read(r.n, r.err), r.want) << r.n << " " << r.err;
}

fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::path(::testing::TempDir()) / name;
  fs::remove_all(d);
  return d;
}

tls_files files(const fs::path& dir, const std::string& stem, const fs::path& ca_dir) {
  return {(dir / (stem + ".pem")).string(), (dir / (stem + ".key")).string(),
          (ca_dir / "ca.pem").string()};
}

TEST(Tls, MadeCertificatesSayTheirNamesAndExpiry) {
  const auto dir = fresh_dir("dd_tls_make");
  make_certs(dir.string(), {{"node-a", {"learner-0", "learner-3"}}, {"syncer", {"syncer"}}}, 10);
  const auto c = read_cert((dir / "node-a.pem").string());
  EXPECT_EQ(c.names, (std::vector<std::string>{"learner-0", "learner-3"}));
  EXPECT_NEAR(c.seconds_to_expiry, 10 * 86400.0, 120.0);
  EXPECT_GT(c.seconds_since_start, 0);
  struct stat st {};
  ASSERT_EQ(::stat((dir / "node-a.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat((dir / "ca.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // A second call signs with the same CA.
  const auto ca_before = read_cert((dir / "ca.pem").string());
  make_certs(dir.string(), {{"node-b", {"learner-1"}}});
  EXPECT_EQ(read_cert((dir / "ca.pem").string()).subject, ca_before.subject);
  EXPECT_NO_THROW(tls_context(files(dir, "node-b", dir), tls_context::side::client));
}

TEST(Tls, ContextsRefuseAForeignKeyAndAnExpiredCertificate) {
  const auto dir = fresh_dir("dd_tls_refuse");
  make_certs(dir.string(), {{"a", {"learner-0"}}, {"b", {"learner-1"}}});
  make_certs(dir.string(), {{"old", {"learner-2"}}}, /*days=*/-1);
  auto mixed = files(dir, "a", dir);
  mixed.key = (dir / "b.key").string();
  try {
    tls_context bad(mixed, tls_context::side::server);
    ADD_FAILURE() << "a key of another certificate was taken";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("does not match"), std::string::npos) << e.what();
  }
  try {
    tls_context old(files(dir, "old", dir), tls_context::side::client);
    ADD_FAILURE() << "an expired certificate was taken";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("is expired"), std::string::npos) << e.what();
  }
  EXPECT_THROW(tls_context(tls_files{"", "", ""}, tls_context::side::client), std::runtime_error);
}

/// A plain TCP echo server on loopback (one thread, every connection).
class echo_server {
 public:
  echo_server() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(fd_, 8);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    t_ = std::thread([this] {
      std::vector<int> conns;
      while (!stop_) {
        std::vector<pollfd> p{{fd_, POLLIN, 0}};
        for (int c : conns) p.push_back({c, POLLIN, 0});
        if (::poll(p.data(), p.size(), 100) <= 0) continue;
        if (p[0].revents & POLLIN) {
          const int c = ::accept4(fd_, reinterpret_cast<sockaddr*>(&peer_), &plen_, SOCK_CLOEXEC);
          if (c >= 0) {
            conns.push_back(c);
            last_peer_port_ = ntohs(peer_.sin_port);
          }
        }
        for (size_t i = 1; i < p.size(); ++i)
          if (p[i].revents & POLLIN) {
            char buf[65536];
            const ssize_t n = ::recv(p[i].fd, buf, sizeof buf, 0);
            if (n > 0) {
              for (ssize_t off = 0; off < n;) {
                const ssize_t w = ::send(p[i].fd, buf + off, n - off, MSG_NOSIGNAL);
                if (w <= 0) break;
                off += w;
              }
            }
          }
      }
      for (int c : conns) ::close(c);
    });
  }
  ~echo_server() {
    stop_ = true;
    t_.join();
    ::close(fd_);
  }
  uint16_t port() const { return port_; }
  uint16_t last_peer_port() const { return last_peer_port_.load(); }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
  sockaddr_in peer_{};
  socklen_t plen_ = sizeof(sockaddr_in);
  std::atomic<uint16_t> last_peer_port_{0};
  std::atomic<bool> stop_{false};
  std::thread t_;
};

/// Sends `n` bytes through `fd` and reads them back (the echo); true when they came back equal.
bool round_trip(int fd, size_t n) {
  std::string out(n, '\0');
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<char>(i * 131 + 7);
  std::string in;
  size_t sent = 0;
  while (in.size() < n) {
    if (sent < n) {
      const ssize_t w =
          ::send(fd, out.data() + sent, std::min<size_t>(n - sent, 65536), MSG_NOSIGNAL);
      if (w <= 0) return false;
      sent += static_cast<size_t>(w);
    }
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, sent < n ? 0 : 5000) < 0) return false;
    if (p.revents & POLLIN) {
      char buf[65536];
      const ssize_t r = ::recv(fd, buf, sizeof buf, 0);
      if (r <= 0) return false;
      in.append(buf, static_cast<size_t>(r));
    } else if (sent >= n) {
      return false;
    }
  }
  return in == out;
}

TEST(TlsTunnel, CarriesBytesBothWaysAndRefusesForeignAndPlainClients) {
  const auto dir = fresh_dir("dd_tls_tunnel");
  const auto other = fresh_dir("dd_tls_tunnel_other");
  make_certs(dir.string(), {{"syncer", {"syncer"}}, {"node", {"learner-4"}}, {"fake", {"x"}}});
  make_certs(other.string(), {{"node", {"learner-4"}}});
  echo_server echo;
  std::vector<std::string> refusals;
  std::mutex mu;
  tls_tunnel::options so;
  so.what = tls_tunnel::mode::terminate;
  so.target_port = echo.port();
  so.ctx = std::make_shared<tls_context>(files(dir, "syncer", dir), tls_context::side::server);
  so.handshake_timeout_s = 2.0;
  so.on_refused = [&](const std::string& w) {
    std::lock_guard<std::mutex> g(mu);
    refusals.push_back(w);
  };
  tls_tunnel server(std::move(so));
  auto client_to = [&](const tls_files& f, const std::string& expect) {
    tls_tunnel::options co;
    co.what = tls_tunnel::mode::originate;
    co.target_port = server.port();
    co.ctx = std::make_shared<tls_context>(f, tls_context::side::client);
    co.expect_peer_name = expect;
    co.handshake_timeout_s = 2.0;
    return std::make_unique<tls_tunnel>(std::move(co));
  };

  auto good = client_to(files(dir, "node", dir), syncer_cert_name);
  const int fd = dd::util::connect_loopback(good->port());
  ASSERT_GE(fd, 0);
  EXPECT_TRUE(round_trip(fd, 3 << 20));  // 3 MiB through both tunnels and back
  EXPECT_EQ(server.names_of_port(echo.last_peer_port()), std::vector<std::string>{"learner-4"});
  EXPECT_EQ(server.accepted(), 1u);
  ::close(fd);

  // A client through `port` whose round trip a side of the tunnel refuses.
  auto expect_refused_round_trip = [](int port) {
    const int client = dd::util::connect_loopback(port);
    ASSERT_GE(client, 0);
    EXPECT_FALSE(round_trip(client, 1024));
    ::close(client);
  };
  // Another CA's certificate (trusting our CA): the server refuses it.
  auto foreign = client_to(
      {(other / "node.pem").string(), (other / "node.key").string(), (dir / "ca.pem").string()},
      syncer_cert_name);
  ASSERT_NO_FATAL_FAILURE(expect_refused_round_trip(foreign->port()));
  // The server records each refusal on its own thread: wait for each before the next client
  // connects, so refusals[i] is the i-th client's.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  auto await_server_refusals = [&](uint64_t n) {
    while (server.refused() < n && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  };
  await_server_refusals(1);
  // A plaintext client straight to the TLS port.
  ASSERT_NO_FATAL_FAILURE(expect_refused_round_trip(server.port()));
  await_server_refusals(2);
  // A client trusting another CA: its own tunnel refuses the syncer's certificate, naming the
  // syncer's address (not the forwarder's port) and --tls-ca.
  auto distrusting = client_to(
      {(dir / "node.pem").string(), (dir / "node.key").string(), (other / "ca.pem").string()},
      syncer_cert_name);
  ASSERT_NO_FATAL_FAILURE(expect_refused_round_trip(distrusting->port()));
  EXPECT_EQ(distrusting->refused(), 1u);
  const std::string own = distrusting->last_refusal();
  EXPECT_NE(own.find(fmt::format("TLS handshake with the syncer at 127.0.0.1:{} failed verifying "
                                 "the syncer's certificate against the CA of --tls-ca",
                                 server.port())),
            std::string::npos)
      << own;
  await_server_refusals(3);
  EXPECT_EQ(server.refused(), 3u);  // the foreign client, the plaintext one, the distrusting one
  // A TCP connection that closes before it sends anything (a port probe, e.g. a reachability
  // check) is counted as closed, not refused.
  const int probe = dd::util::connect_loopback(server.port());
  ASSERT_GE(probe, 0);
  ::close(probe);
  const auto probe_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (server.closed_silent() < 1 && std::chrono::steady_clock::now() < probe_deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(server.closed_silent(), 1u);
  EXPECT_EQ(server.refused(), 3u);
  std::lock_guard<std::mutex> g(mu);
  ASSERT_EQ(refusals.size(), 3u);
  EXPECT_NE(refusals[0].find("refused"), std::string::npos) << refusals[0];
  // The plaintext client is named as one.
  EXPECT_NE(refusals[1].find("the client spoke no TLS"), std::string::npos) << refusals[1];
}

// A peer whose end closes while a tunnel writes to it (a node that died or finished): the
// write fails with EPIPE and ends that connection; SIGPIPE, left at its default here, does not
// kill the process (a learner node once exited 141 after its run had finished).
TEST(TlsTunnel, APeerThatClosesWhileItWritesDoesNotKillTheProcess) {
  std::signal(SIGPIPE, SIG_DFL);
  const auto dir = fresh_dir("dd_tls_tunnel_epipe");
  make_certs(dir.string(), {{"syncer", {"syncer"}}, {"node", {"learner-4"}}});
  echo_server echo;
  // Several rounds: the far end closes while bytes stream through the client tunnel, so its
  // SSL_write meets the closed socket (without the fix one round in a few died of SIGPIPE).
  for (int round = 0; round < 6; ++round) {
    SCOPED_TRACE(round);
    tls_tunnel::options so;
    so.what = tls_tunnel::mode::terminate;
    so.target_port = echo.port();
    so.ctx = std::make_shared<tls_context>(files(dir, "syncer", dir), tls_context::side::server);
    so.handshake_timeout_s = 2.0;
    auto server = std::make_unique<tls_tunnel>(std::move(so));
    tls_tunnel::options co;
    co.what = tls_tunnel::mode::originate;
    co.target_port = server->port();
    co.ctx = std::make_shared<tls_context>(files(dir, "node", dir), tls_context::side::client);
    co.expect_peer_name = syncer_cert_name;
    co.handshake_timeout_s = 2.0;
    tls_tunnel client(std::move(co));
    const int fd = dd::util::connect_loopback(client.port());
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(round_trip(fd, 4096));
    std::atomic<bool> stop{false};
    std::thread stream([&] {  // writes and drains until told to stop or the tunnel ends
      const std::string chunk(1 << 16, 'x');
      char buf[1 << 16];
      while (!stop.load()) {
        if (::send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL | MSG_DONTWAIT) == 0) break;
        while (::recv(fd, buf, sizeof buf, MSG_DONTWAIT) > 0) {}
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    server.reset();  // the far end goes away mid-stream
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    stop.store(true);
    stream.join();
    ::close(fd);
    // Still here, and the client tunnel still accepts connections.
    const int again = dd::util::connect_loopback(client.port());
    EXPECT_GE(again, 0);
    if (again >= 0) ::close(again);
  }
}

TEST(TlsTunnel, ALearnerRefusesASyncerWhoseCertificateDoesNotNameIt) {
  const auto dir = fresh_dir("dd_tls_name");
  make_certs(dir.string(), {{"imposter", {"learner-9"}}, {"node", {"learner-4"}}});
  echo_server echo;
  tls_tunnel::options so;
  so.what = tls_tunnel::mode::terminate;
  so.target_port = echo.port();
  so.ctx = std::make_shared<tls_context>(files(dir, "imposter", dir), tls_context::side::server);
  tls_tunnel server(std::move(so));
  std::atomic<int> refused{0};
  std::string why;
  std::mutex mu;
  tls_tunnel::options co;
  co.what = tls_tunnel::mode::originate;
  co.target_port = server.port();
  co.ctx = std::make_shared<tls_context>(files(dir, "node", dir), tls_context::side::client);
  co.expect_peer_name = syncer_cert_name;
  co.on_refused = [&](const std::string& w) {
    std::lock_guard<std::mutex> g(mu);
    why = w;
    ++refused;
  };
  tls_tunnel client(std::move(co));
  const int fd = dd::util::connect_loopback(client.port());
  ASSERT_GE(fd, 0);
  EXPECT_FALSE(round_trip(fd, 1024));
  ::close(fd);
  EXPECT_EQ(refused.load(), 1);
  std::lock_guard<std::mutex> g(mu);
  EXPECT_NE(why.find("not 'syncer'"), std::string::npos) << why;
}

// Regression: a learner whose handshake failed said `syncer not reachable (127.0.0.1:38677:
// ...)`, naming its own TLS forwarder's port, and a plaintext learner joining a TLS syncer got
// `system_error(disconnect_during_handshake)` with no word of TLS; then a plaintext learner that
// was joined, reconnecting while its syncer restarted behind a proxy, was told to give TLS flags.
// What a failed attempt says.
TEST(TlsTunnel, a_failed_join_names_the_syncer_and_what_is_wrong) {
  struct row {
    const char *what, *error, *forwarder, *syncer, *refusal, *said;
    bool reached_before = false;
  };
  const std::vector<row> table = {
      {"TLS, the forwarder refused the syncer", "127.0.0.1:38677: system_error(x)",
       "127.0.0.1:38677", "10.0.0.5:29529",
       "TLS handshake with the syncer at 10.0.0.5:29529 failed verifying ...",
       "TLS handshake with the syncer at 10.0.0.5:29529 failed verifying ..."},
      {"TLS, no refusal since the last attempt", "127.0.0.1:38677: connection refused",
       "127.0.0.1:38677", "10.0.0.5:29529", "",
       "10.0.0.5:29529 through the TLS forwarder 127.0.0.1:38677: connection refused"},
      {"plaintext to a TLS syncer", "127.0.0.1:29529: system_error(disconnect_during_handshake)",
       "", "", "",
       "127.0.0.1:29529: system_error(disconnect_during_handshake): the syncer closed the "
       "connection during the handshake — the syncer is restarting, or a proxy between them "
       "closed the connection, or the syncer listens with TLS and this node has none: then "
       "give --tls-cert, --tls-key and --tls-ca (docs/securing.md)"},
      {"plaintext, joined before, the syncer restarting",
       "127.0.0.1:36481: system_error(disconnect_during_handshake)", "", "", "",
       "127.0.0.1:36481: system_error(disconnect_during_handshake): the syncer closed the "
       "connection during the handshake (the syncer is restarting, or a proxy between them "
       "closed the connection)",
       true},
      {"plaintext, another error", "127.0.0.1:29529: connect: Connection refused", "", "", "",
       "127.0.0.1:29529: connect: Connection refused"},
  };
  for (const auto& r : table)
    EXPECT_EQ(join_failure_text(r.error, r.forwarder, r.syncer, r.refusal, r.reached_before),
              r.said)
        << r.what;
}

}  // namespace
}  // namespace dd::actors
