// The join token between real processes on loopback (actors/link/join_auth.hpp): a syncer
// started with --join-token-file runs a tiny experiment while
//   - a learner node without a token, and one with another token, are refused (exit 7, a clear
//     line on their stderr), each an auth_refused event and counted in summary.json;
//   - a recorded tensor channel greeting (hello and proof, captured by a user-space tap between
//     the real learner node and the syncer) replayed on a fresh connection is refused: the
//     syncer's challenge is new, the recorded proof answers the old one;
//   - dd-node drain with another token is refused;
//   - the learner node with the right token joins and the run completes.
// About 20 s. The second test does the same under mutual TLS (below).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/actors/process_support.hpp"
#include "util/net.hpp"

namespace {

namespace fs = std::filesystem;
using namespace dd::test;
using nlohmann::json;

std::string tiny() {
  return "experiment {\n"
         "  name = 'tiny',\n"
         "  data = { file = '" +
         std::string(DD_DATA_DIR) +
         "/tinyshakespeare/input.txt' },\n"
         "  model = { layers = 1, width = 32, heads = 2, context = 32 },\n"
         "  learners = { count = 2, batch = 4, threads = 1 },\n"
         "  sync = { fragments = 2, interval = 4 },\n"
         "  inner = { lr = 3e-3, warmup = 5, decay_steps = 2000 },\n"
         "  eval = { every_seconds = 0, batches = 2 },\n"
         "  budget = { steps = 400 },\n"
         "}\n";
}

void write_secret(const fs::path& p, const std::string& text) {
  std::ofstream(p) << text << "\n";
  ::chmod(p.c_str(), 0600);
}

size_t plaintext_markers(const std::string& bytes) {
  size_t n = 0;
  for (const char* m : {"DDC3", "DDTCHAN1", "DDTF"})
    for (size_t at = bytes.find(m); at != std::string::npos; at = bytes.find(m, at + 1)) ++n;
  return n;
}

/// A user-space tap: forwards every connection to 127.0.0.1:target and records the bytes each
/// client sent (per connection, in accept order).
class tap {
 public:
  explicit tap(uint16_t target) : target_(target) {
    listen_fd_ = dd::util::listen_loopback(0, &port_);
    thread_ = std::thread([this] { run(); });
  }
  ~tap() {
    stop_ = true;
    ::shutdown(listen_fd_, SHUT_RDWR);
    thread_.join();
    ::close(listen_fd_);
    for (auto& t : pumps_) t.join();
  }
  uint16_t port() const { return port_; }
  /// Per connection: what the client sent.
  std::vector<std::string> recorded() {
    std::lock_guard<std::mutex> g(mu_);
    return sent_;
  }
  /// Every byte that crossed, both directions, all connections (at most 64 MiB).
  std::string everything() {
    std::lock_guard<std::mutex> g(mu_);
    return all_;
  }
  size_t bytes() {
    std::lock_guard<std::mutex> g(mu_);
    return total_;
  }

 private:
  void run() {
    while (!stop_) {
      const auto cu = accept_relayed(listen_fd_, target_, 200);
      if (!cu) continue;
      const auto [c, u] = *cu;
      size_t slot;
      {
        std::lock_guard<std::mutex> g(mu_);
        slot = sent_.size();
        sent_.emplace_back();
      }
      pumps_.emplace_back([this, c = c, u = u, slot] { pump(c, u, slot); });
    }
  }
  void pump(int c, int u, size_t slot) {
    char buf[65536];
    while (!stop_) {
      pollfd p[2] = {{c, POLLIN, 0}, {u, POLLIN, 0}};
      if (::poll(p, 2, 200) <= 0) continue;
      if (p[0].revents) {
        const ssize_t n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0) break;
        {
          std::lock_guard<std::mutex> g(mu_);
          if (sent_[slot].size() < (size_t{1} << 20)) sent_[slot].append(buf, n);
          keep(buf, n);
        }
        if (dd::util::write_all(u, buf, static_cast<size_t>(n)) != 0) break;
      }
      if (p[1].revents) {
        const ssize_t n = ::recv(u, buf, sizeof buf, 0);
        if (n <= 0) break;
        {
          std::lock_guard<std::mutex> g(mu_);
          keep(buf, n);
        }
        if (dd::util::write_all(c, buf, static_cast<size_t>(n)) != 0) break;
      }
    }
    ::close(c);
    ::close(u);
  }
  void keep(const char* b, ssize_t n) {
    total_ += static_cast<size_t>(n);
    if (all_.size() < (size_t{64} << 20)) all_.append(b, static_cast<size_t>(n));
  }
  uint16_t target_, port_ = 0;
  int listen_fd_ = -1;
  std::string all_;
  size_t total_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::vector<std::thread> pumps_;
  std::mutex mu_;
  std::vector<std::string> sent_;
};

bool read_exact(int fd, void* out, size_t n) {
  auto* p = static_cast<char*>(out);
  while (n > 0) {
    pollfd q{fd, POLLIN, 0};
    if (::poll(&q, 1, 5000) <= 0) return false;
    const ssize_t k = ::recv(fd, p, n, 0);
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

uint32_t le32(const unsigned char* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

/// One channel hello-framed message (32-byte prefix + its body) read from fd; empty on failure.
std::string read_hello(int fd) {
  unsigned char prefix[32];
  if (!read_exact(fd, prefix, 32)) return {};
  std::string body(le32(prefix + 12), '\0');
  if (!read_exact(fd, body.data(), body.size())) return {};
  return std::string(reinterpret_cast<char*>(prefix), 32) + body;
}

/// Starts `dd-node learner --join JOIN` as node NAME (run directory nodes/NAME, no progress
/// lines, a 0.2 s heartbeat, a 1 s connection timeout, then `more`); its output in NAME.out.
pid_t start_learner(const fs::path& dir, const std::string& name, const std::string& join,
                    const std::vector<std::string>& more) {
  std::vector<std::string> argv = {DD_NODE_BIN,
                                   "learner",
                                   "--join",
                                   join,
                                   "--node-name",
                                   name,
                                   "--run-dir",
                                   "nodes/" + name,
                                   "--progress",
                                   "0",
                                   "--heartbeat",
                                   "0.2",
                                   "--connection-timeout",
                                   "1"};
  argv.insert(argv.end(), more.begin(), more.end());
  return spawn(dir, argv, (dir / (name + ".out")).string());
}

TEST(TrustProcess, JoinTokenRefusesStrangersAndReplaysWhileTheRunGoesOn) {
  const fs::path dir = dd::test::fresh_dir("dd_trust_token");
  std::ofstream(dir / "tiny.lua") << tiny();
  write_secret(dir / "token", "a-join-token-of-the-run-0123456789");
  write_secret(dir / "other", "another-token-not-the-runs-9876543");
  ::unsetenv("DD_JOIN_TOKEN");

  const uint16_t port = dd::util::free_loopback_port();
  const std::string addr = "127.0.0.1:" + std::to_string(port);
  const pid_t syncer = spawn(
      dir,
      {DD_NODE_BIN, "syncer", "tiny.lua", "--listen", addr, "--run-dir", "run", "--join-token-file",
       "token", "--progress", "0", "--heartbeat", "0.2", "--connection-timeout", "1"},
      (dir / "syncer.out").string());
  const fs::path ev = dir / "run" / "events.jsonl";
  ASSERT_TRUE(wait_events(ev, "listening", 1, 30)) << text(dir / "syncer.out");

  auto learner = [&](const std::string& name, const std::vector<std::string>& more,
                     const std::string& join) { return start_learner(dir, name, join, more); };

  // No token, another token: refused, exit 7, a clear line, nothing joined.
  EXPECT_EQ(wait_for(learner("stranger", {"--learners", "1"}, addr), 30), 7)
      << text(dir / "stranger.out");
  EXPECT_NE(text(dir / "stranger.out").find("this node has none"), std::string::npos)
      << text(dir / "stranger.out");
  EXPECT_EQ(
      wait_for(learner("forger", {"--learners", "1", "--join-token-file", "other"}, addr), 30), 7)
      << text(dir / "forger.out");
  EXPECT_NE(text(dir / "forger.out").find("wrong join token"), std::string::npos)
      << text(dir / "forger.out");
  EXPECT_EQ(count_events(ev, "node_join"), 0u);
  EXPECT_EQ(count_events(ev, "auth_refused"), 2u);

  // The right token, through a tap that records what the node sends.
  tap t(port);
  const pid_t real = learner("real", {"--learners", "2", "--join-token-file", "token"},
                             "127.0.0.1:" + std::to_string(t.port()));
  ASSERT_TRUE(wait_events(ev, "channel_open", 1, 60)) << text(dir / "real.out");

  // The recorded channel greeting: hello, then the proof of the challenge of that connection.
  std::string greeting;
  for (const auto& sent : t.recorded())
    if (sent.rfind("DDTCHAN1", 0) == 0) greeting = sent;
  ASSERT_GE(greeting.size(), 64u);
  const size_t hello_bytes =
      32 + le32(reinterpret_cast<const unsigned char*>(greeting.data()) + 12);
  ASSERT_GE(greeting.size(), hello_bytes + 32);
  const size_t proof_bytes =
      32 + le32(reinterpret_cast<const unsigned char*>(greeting.data()) + hello_bytes + 12);
  const int fd = dd::util::connect_loopback(port);
  ASSERT_GE(fd, 0);
  unsigned char basp[32];  // the middleman's server handshake, forwarded by the guard
  ASSERT_TRUE(read_exact(fd, basp, 32));
  std::string skip(
      (size_t{basp[4]} << 24) | (size_t{basp[5]} << 16) | (size_t{basp[6]} << 8) | size_t{basp[7]},
      '\0');
  ASSERT_TRUE(read_exact(fd, skip.data(), skip.size()));
  ASSERT_EQ(::send(fd, greeting.data(), hello_bytes, MSG_NOSIGNAL),
            static_cast<ssize_t>(hello_bytes));
  const std::string challenge = read_hello(fd);
  ASSERT_GT(challenge.size(), 32u);
  EXPECT_EQ(challenge[32], 2);  // status 2: a challenge, a fresh one
  ASSERT_EQ(::send(fd, greeting.data() + hello_bytes, proof_bytes, MSG_NOSIGNAL),
            static_cast<ssize_t>(proof_bytes));
  const std::string verdict = read_hello(fd);
  ::close(fd);
  ASSERT_GT(verdict.size(), 32u);
  EXPECT_EQ(verdict[32], 1);  // refused
  EXPECT_NE(verdict.find("wrong join token"), std::string::npos) << verdict.substr(33);
  EXPECT_TRUE(wait_events(ev, "auth_refused", 3, 10));

  // dd-node drain with another token: refused by the syncer.
  const pid_t drain =
      spawn(dir, {DD_NODE_BIN, "drain", "learner:0", addr, "--join-token-file", "other"},
            (dir / "drain.out").string());
  EXPECT_EQ(wait_for(drain, 30), 1) << text(dir / "drain.out");
  EXPECT_NE(text(dir / "drain.out").find("wrong join token"), std::string::npos)
      << text(dir / "drain.out");
  EXPECT_TRUE(wait_events(ev, "auth_refused", 4, 10));

  // The run goes on and completes.
  EXPECT_EQ(wait_for(real, 120), 0) << text(dir / "real.out");
  EXPECT_EQ(wait_for(syncer, 60), 0) << text(dir / "syncer.out");
  const json summary = json::parse(text(dir / "run" / "summary.json"));
  EXPECT_EQ(summary["auth_refused"], 4) << summary.dump();
  EXPECT_GT(summary["merges"].get<int>(), 0);
  // The tap saw the run in the clear (the TLS test below asserts the opposite).
  EXPECT_GT(plaintext_markers(t.everything()), 100u);
  // The secret is in no log.
  for (const auto* f : {"syncer.out", "real.out", "forger.out", "run/events.jsonl"})
    EXPECT_EQ(text(dir / f).find("a-join-token-of-the-run"), std::string::npos) << f;
}

// Mutual TLS (actors/link/tls_tunnel.hpp): a syncer with --tls-* and a join token, while
//   - a plaintext learner node (no certificate) and a TLS client without a certificate
//     (openssl s_client) are refused at the handshake: tls_refused events;
//   - a learner node whose certificate another CA signed is refused at the handshake;
//   - a learner node whose certificate names learner-1 asking for learner 0 gets no id (exit 7);
//   - the node whose certificate names learner-0 and learner-1 joins through a user-space tap;
//     dd-node status with the operator's certificate adds no tls_refused, and dd-node drain with
//     the node's certificate is refused (draining is the operator's); the run completes; the tap
//     saw none of the run's plaintext markers (message trailers, tensor channel magics) in either
//     direction.
TEST(TrustProcess, MutualTlsRefusesStrangersAndKeepsLearnerIdsToTheirCertificates) {
  const fs::path dir = dd::test::fresh_dir("dd_trust_tls");
  std::ofstream(dir / "tiny.lua") << tiny();
  write_secret(dir / "token", "a-join-token-of-the-run-0123456789");
  ::unsetenv("DD_JOIN_TOKEN");
  auto run = [&](const std::vector<std::string>& argv, const std::string& out) {
    return wait_for(spawn(dir, argv, (dir / out).string()), 60);
  };
  ASSERT_EQ(run({DD_NODE_BIN, "certs", "tls", "syncer", "node-a=learner-0,learner-1",
                 "sneak=learner-1", "operator"},
                "certs.out"),
            0)
      << text(dir / "certs.out");
  ASSERT_EQ(run({DD_NODE_BIN, "certs", "other", "syncer", "learner-0"}, "certs2.out"), 0);
  EXPECT_EQ(::access((dir / "tls" / "node-a.key").c_str(), F_OK), 0);
  struct stat st {};
  ASSERT_EQ(::stat((dir / "tls" / "node-a.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  const uint16_t port = dd::util::free_loopback_port();
  const std::string addr = "127.0.0.1:" + std::to_string(port);
  auto tls_of = [](const std::string& ca_dir, const std::string& stem, const std::string& ca) {
    return std::vector<std::string>{"--tls-cert", ca_dir + "/" + stem + ".pem",
                                    "--tls-key",  ca_dir + "/" + stem + ".key",
                                    "--tls-ca",   ca + "/ca.pem"};
  };
  std::vector<std::string> sargv = {DD_NODE_BIN,  "syncer",
                                    "tiny.lua",   "--listen",
                                    addr,         "--run-dir",
                                    "run",        "--join-token-file",
                                    "token",      "--progress",
                                    "0",          "--heartbeat",
                                    "0.2",        "--connection-timeout",
                                    "1",          "--http",
                                    "127.0.0.1:0"};
  for (auto& a : tls_of("tls", "syncer", "tls")) sargv.push_back(a);
  const pid_t syncer = spawn(dir, sargv, (dir / "syncer.out").string());
  const fs::path ev = dir / "run" / "events.jsonl";
  ASSERT_TRUE(wait_events(ev, "listening", 1, 30)) << text(dir / "syncer.out");

  auto learner = [&](const std::string& name, std::vector<std::string> more,
                     const std::string& join) {
    more.insert(more.begin(), {"--join-token-file", "token"});
    return start_learner(dir, name, join, more);
  };
  // Plaintext: no certificate. Its connections never complete a CAF handshake.
  EXPECT_EQ(wait_for(learner("plain", {"--learners", "1", "--join-deadline", "4"}, addr), 60), 6)
      << text(dir / "plain.out");
  // A TLS client that presents no certificate.
  const int sc =
      run({"/bin/sh", "-c",
           "echo | timeout 10 openssl s_client -connect " + addr + " -CAfile tls/ca.pem -tls1_3"},
          "s_client.out");
  EXPECT_NE(text(dir / "s_client.out").find("CONNECTED"), std::string::npos)
      << "rc " << sc << ": " << text(dir / "s_client.out");
  // A certificate of another CA (trusting the run's CA itself).
  std::vector<std::string> foreign = tls_of("other", "learner-0", "tls");
  foreign.insert(foreign.end(), {"--learners", "1", "--join-deadline", "4"});
  EXPECT_EQ(wait_for(learner("foreign", foreign, addr), 60), 6) << text(dir / "foreign.out");
  EXPECT_TRUE(wait_events(ev, "tls_refused", 3, 30)) << text(dir / "syncer.out");
  std::string refusals;
  for (const auto& e : events(ev))
    if (e["event"] == "tls_refused") refusals += e["reason"].get<std::string>() + "\n";
  EXPECT_NE(refusals.find("certificate"), std::string::npos) << refusals;

  // A certificate naming learner-1, asking for learner 0.
  std::vector<std::string> sneak = tls_of("tls", "sneak", "tls");
  sneak.insert(sneak.end(), {"--learner-ids", "0"});
  EXPECT_EQ(wait_for(learner("sneak", sneak, addr), 60), 7) << text(dir / "sneak.out");
  EXPECT_NE(text(dir / "sneak.out").find("not named by the node's certificate"), std::string::npos)
      << text(dir / "sneak.out");
  EXPECT_EQ(count_events(ev, "node_join"), 0u);

  // The right node, through a tap.
  tap t(port);
  std::vector<std::string> good = tls_of("tls", "node-a", "tls");
  good.insert(good.end(), {"--learners", "2"});
  const pid_t real = learner("node-a", good, "127.0.0.1:" + std::to_string(t.port()));
  ASSERT_TRUE(wait_events(ev, "channel_open", 1, 60)) << text(dir / "node-a.out");
  // dd-node status through TLS with the operator's certificate. Regression: it opens no
  // connection that closes before its handshake (a reachability probe was one, and the syncer
  // counted it as a refused stranger).
  const size_t tls_refused_before = count_events(ev, "tls_refused");
  std::vector<std::string> st_argv = {DD_NODE_BIN, "status", addr};
  for (auto& a : tls_of("tls", "operator", "tls")) st_argv.push_back(a);
  EXPECT_EQ(run(st_argv, "status.out"), 0) << text(dir / "status.out");
  EXPECT_NE(text(dir / "status.out").find("learners known"), std::string::npos)
      << text(dir / "status.out");
  EXPECT_EQ(count_events(ev, "tls_refused"), tls_refused_before);
  // Regression: a learner's certificate may not drain (an operator's request): the client is
  // told why, the syncer logs an auth_refused, and the learner keeps training.
  std::vector<std::string> dr_argv = {DD_NODE_BIN,         "drain", "learner:1", addr,
                                      "--join-token-file", "token"};
  for (auto& a : tls_of("tls", "node-a", "tls")) dr_argv.push_back(a);
  EXPECT_EQ(run(dr_argv, "drain_learner.out"), 1) << text(dir / "drain_learner.out");
  EXPECT_NE(text(dir / "drain_learner.out")
                .find("refused: the certificate it came with names learner-0, learner-1"),
            std::string::npos)
      << text(dir / "drain_learner.out");
  EXPECT_EQ(count_events(ev, "drain"), 0u);
  bool drain_refused = false;
  for (const auto& e : events(ev))
    drain_refused =
        drain_refused || (e["event"] == "auth_refused" && e["what"] == "drain learner:1");
  EXPECT_TRUE(drain_refused);
  EXPECT_EQ(count_events(ev, "tls_refused"), tls_refused_before);
  // Regression: dd-node status without certificates against the TLS syncer names the likely
  // cause and the flags, as dd-node learner does.
  EXPECT_EQ(run({DD_NODE_BIN, "status", addr}, "status_plain.out"), 1)
      << text(dir / "status_plain.out");
  EXPECT_NE(text(dir / "status_plain.out")
                .find("a syncer that listens with TLS does so to a client without a certificate: "
                      "give --tls-cert, --tls-key and --tls-ca (docs/securing.md)"),
            std::string::npos)
      << text(dir / "status_plain.out");

  EXPECT_EQ(wait_for(real, 150), 0) << text(dir / "node-a.out");
  // Its joining line says the address it dials is its local TLS forwarder, not the syncer.
  EXPECT_NE(text(dir / "node-a.out").find(", the local TLS forwarder to the syncer"),
            std::string::npos)
      << text(dir / "node-a.out");
  EXPECT_EQ(wait_for(syncer, 60), 0) << text(dir / "syncer.out");
  const json summary = json::parse(text(dir / "run" / "summary.json"));
  EXPECT_GT(summary["merges"].get<int>(), 0);
  EXPECT_GE(summary["auth_refused"].get<int>(), 4) << summary.dump();
  std::set<int> joined;
  for (const auto& e : events(ev))
    if (e["event"] == "node_join")
      for (const auto& id : e["learners"]) joined.insert(id.get<int>());
  EXPECT_EQ(joined, (std::set<int>{0, 1}));
  // On the wire between the node and the syncer: megabytes, none of them readable.
  EXPECT_GT(t.bytes(), size_t{1} << 20);
  EXPECT_EQ(plaintext_markers(t.everything()), 0u);
}

}  // namespace
