// actors/link/frame_guard.hpp — a guard in front of the syncer's published port. CAF 0.17's BASP
// receiver allocates (and zero-fills) whatever payload length a frame header announces, before
// any handshake: 32 unauthenticated bytes can make the syncer allocate up to 4 GiB per connection
// (measured: docs/benchmarks-transport.md "Transport"). The guard listens on the user's address,
// forwards every connection to the middleman's port on loopback, and parses the client's BASP frame
// headers (32 bytes: operation, 2 padding bytes, flags, payload length as a big-endian u32, ...)
// on the way: a frame announcing more than `max_frame_bytes` closes that connection (logged),
// before a byte of it reaches CAF. The default cap is the largest legitimate message, one chunk
// (default_chunk_bytes of payload, 4 MiB) plus 256 KiB for its header and CAF's framing.
//
// Strangers: a connection is a stranger until the syncer has sent it a CAF direct message (a
// reply: a learner node's handshake is answered within milliseconds). CAF holds a stranger's
// announced frame until its payload is complete, so the guard bounds what strangers can make it
// hold: the frames strangers have announced and not yet completed may total at most
// `stranger_bytes`, at most `stranger_connections` strangers are open at once, and a stranger
// that has not been answered within `stranger_timeout_s` is closed. A connection past any of
// these is closed (logged, counted in refused()); connections the syncer answered are bounded
// by max_frame_bytes only. The other direction is forwarded as is (and parsed only to see the
// first direct message). Bounded memory: at most 256 KiB buffered per direction per connection.
// One thread, poll(2).
//
// Behind TLS (actors/link/tls_tunnel.hpp) the guard listens on loopback and the TLS tunnel
// forwards each verified connection's plaintext to it; the checks above apply to those bytes
// unchanged, and `vet_handshake` binds each CAF node to its connection's certificate.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace dd::actors {

/// The largest CAF frame a legitimate peer sends: a 4 MiB chunk message plus 256 KiB of slack for
/// its header (the merged-push list grows with the learners) and CAF's framing.
inline constexpr uint64_t default_max_frame_bytes = (uint64_t{4} << 20) + (uint64_t{256} << 10);

/// What the guard lets a connection (and all strangers together) make the syncer hold.
struct frame_guard_limits {
  /// A frame announcing more payload bytes than this closes its connection (0 < cap).
  uint64_t max_frame_bytes = default_max_frame_bytes;
  /// Frames announced by strangers and not yet complete, bytes in all.
  uint64_t stranger_bytes = uint64_t{64} << 20;
  /// Strangers open at once; one more is closed as it is accepted.
  size_t stranger_connections = 32;
  /// A stranger not answered by the syncer within this many seconds is closed.
  double stranger_timeout_s = 60.0;
};

/// Runs the guard on its own thread until destroyed.
class frame_guard {
 public:
  /// Called (on the guard's thread) with one line for each refused connection.
  using report_fn = std::function<void(const std::string& what)>;
  /// Takes over a tensor channel socket: (fd, "ip:port" of the peer, the bytes read from it so
  /// far: the 32-byte hello prefix and whatever followed it). Called on the guard's thread.
  using channel_fn =
      std::function<void(int fd, std::string peer, std::vector<uint8_t> first_bytes)>;
  /// Vets a connection's first CAF frame, a BASP client handshake: (the peer's port on
  /// 127.0.0.1 — the TLS tunnel's side of it —, the handshake's payload, at most 64 KiB) → ""
  /// to let it through, or why the connection is closed (counted in refused(), reported).
  /// Called on the guard's thread before the frame's last byte reaches CAF. Empty: none.
  using handshake_fn =
      std::function<std::string(uint16_t peer_port, const std::vector<uint8_t>& payload)>;

  /// Listens on host:port (SO_REUSEADDR; "" = every address; port 0 = any) and forwards to
  /// 127.0.0.1:target_port. Throws std::runtime_error naming the address when it cannot listen.
  /// `on_channel` empty: a channel hello is forwarded to CAF like any bytes (CAF refuses it).
  frame_guard(const std::string& host, uint16_t port, uint16_t target_port,
              frame_guard_limits limits, report_fn report, channel_fn on_channel = {},
              handshake_fn vet_handshake = {});
  ~frame_guard();
  frame_guard(const frame_guard&) = delete;
  frame_guard& operator=(const frame_guard&) = delete;

  /// The port it listens on.
  uint16_t port() const noexcept { return port_; }
  /// Connections closed by the guard: an oversized frame, or past a stranger limit.
  uint64_t refused() const noexcept { return refused_.load(); }
  /// Bytes of the frames strangers have announced and not completed, now.
  uint64_t stranger_bytes_held() const noexcept { return stranger_held_.load(); }

 private:
  void run();
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  uint16_t port_ = 0;
  uint16_t target_port_ = 0;
  frame_guard_limits limits_;
  report_fn report_;
  channel_fn on_channel_;
  handshake_fn vet_handshake_;
  std::atomic<uint64_t> refused_{0};
  std::atomic<uint64_t> stranger_held_{0};
  std::thread thread_;
};

}  // namespace dd::actors
