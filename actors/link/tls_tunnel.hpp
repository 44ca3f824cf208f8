// actors/link/tls_tunnel.hpp — one TLS implementation for both ends of a node's connections: a
// forwarder between a TLS side and a plaintext side on loopback.
//
//   terminate (the syncer): listens on the syncer's public address, completes a TLS handshake
//     with each client (TLS 1.3, its certificate verified against the CA; tls.hpp), then
//     connects to the frame guard on loopback and forwards plaintext both ways. The guard applies
//     its frame checks to the decrypted bytes exactly as before and hands tensor channel
//     greetings to the hub; CAF's middleman still listens on loopback only. For each connection
//     it records the client certificate's names under the local port its loopback connection to
//     the guard leaves from (names_of_port), so the guard and the hub know whose connection a
//     plaintext one is.
//   originate (a learner node, dd-node status / drain): listens on 127.0.0.1 (port 0 = any);
//     each connection is forwarded to the syncer's address inside TLS, whose certificate must be
//     verified by the CA and name `syncer`. CAF's middleman and the tensor channel connect to
//     this loopback port instead of the syncer's.
//
// terminate: a client that closes its connection before it sends a byte (a port probe, a client
// that gave up) is no refusal: it is closed and counted apart (closed_silent(), `on_closed`),
// since nothing was presented to refuse (classify_first_read).
// A connection whose handshake fails (no certificate, another CA, a plaintext client, a peer
// that says nothing within handshake_timeout_s) is closed and reported (`on_refused`, one line
// naming the peer and OpenSSL's reason; originate: "TLS handshake with the syncer at H:P failed:
// ...", saying when the syncer's certificate did not verify against the CA of --tls-ca, or when
// the peer did not answer in TLS; terminate: a client that spoke no TLS is named as such). One
// thread accepts; one thread per connection (its handshake, then non-blocking forwarding with
// poll(2), at most 256 KiB buffered per direction). The destructor stops and joins them all.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "actors/link/tls.hpp"

namespace dd::actors {

/// How a TLS connection's first read ends (terminate: a blocking recv of one byte with
/// MSG_PEEK, bounded by the handshake timeout, before the handshake): `n` its result, `err` its
/// errno when n < 0. `closed`: the client closed (EOF, or a reset) before it sent anything — a
/// probe or a client that gave up, no handshake to refuse; `silent`: nothing within the timeout
/// (the handshake is refused, as one that never came); `data`: the handshake goes on (another
/// error too: the handshake reports it).
enum class first_read { data, closed, silent };
first_read classify_first_read(long n, int err);

class tls_tunnel {
 public:
  enum class mode { terminate, originate };
  struct options {
    mode what = mode::terminate;
    /// Where it listens ("" = every address; port 0 = any free port).
    std::string listen_host = "127.0.0.1";
    uint16_t listen_port = 0;
    /// Where it forwards each connection.
    std::string target_host = "127.0.0.1";
    uint16_t target_port = 0;
    std::shared_ptr<tls_context> ctx;
    /// originate: a name the syncer's certificate must carry (syncer_cert_name); empty = any
    /// verified certificate.
    std::string expect_peer_name;
    double handshake_timeout_s = 10.0;
    /// A refused connection, one line (the tunnel's threads; keep it short).
    std::function<void(const std::string& what)> on_refused;
    /// terminate: a connection closed before it sent anything (no refusal), one line.
    std::function<void(const std::string& what)> on_closed;
    /// originate: the syncer's address did not take the connection, one line.
    std::function<void(const std::string& what)> on_unreachable;
  };

  /// Listens and starts. Throws std::runtime_error naming the address when it cannot.
  explicit tls_tunnel(options o);
  ~tls_tunnel();
  tls_tunnel(const tls_tunnel&) = delete;
  tls_tunnel& operator=(const tls_tunnel&) = delete;

  uint16_t port() const { return port_; }
  /// terminate: the certificate names of the client whose forwarded connection leaves from
  /// 127.0.0.1:`local_port` (empty when that is none of this tunnel's). Thread-safe.
  std::vector<std::string> names_of_port(uint16_t local_port) const;
  /// Connections refused so far (a failed handshake or an unexpected peer name).
  uint64_t refused() const { return refused_.load(); }
  /// terminate: connections closed before they sent anything (not refusals).
  uint64_t closed_silent() const { return closed_.load(); }
  /// Connections that completed their handshake so far.
  uint64_t accepted() const { return accepted_.load(); }
  /// The line of the latest refusal (what on_refused got), "" when none yet; and how many
  /// refusals there were when it was written (refused()). Thread-safe.
  std::string last_refusal() const;

 private:
  void run();
  void serve(int fd, std::string peer);
  void refuse(const std::string& what);

  options o_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> refused_{0}, accepted_{0}, closed_{0};
  mutable std::mutex mu_;
  std::map<uint16_t, std::vector<std::string>> names_;
  std::string last_refusal_;
  struct worker {
    std::thread t;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::list<worker> workers_;
  std::thread thread_;
};

}  // namespace dd::actors
