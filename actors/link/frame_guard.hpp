// actors/link/frame_guard.hpp — a guard in front of the syncer's published port. CAF 0.17's BASP
// receiver allocates (and zero-fills) whatever payload length a frame header announces, before
// any handshake: 32 unauthenticated bytes can make the syncer allocate up to 4 GiB per connection
// (measured: docs/benchmarks.md "Transport"). The guard listens on the user's address, forwards
// every connection to the middleman's port on loopback, and parses the client's BASP frame
// headers (32 bytes: operation, 2 padding bytes, flags, payload length as a big-endian u32, ...)
// on the way: a frame announcing more than `max_frame_bytes` closes that connection (logged),
// before a byte of it reaches CAF. The other direction is forwarded as is. Bounded memory: at
// most 256 KiB buffered per direction per connection. One thread, poll(2).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace dd::actors {

/// Runs the guard on its own thread until destroyed.
class frame_guard {
 public:
  /// Called (on the guard's thread) with one line for each refused connection.
  using report_fn = std::function<void(const std::string& what)>;
  /// Takes over a tensor channel socket: (fd, "ip:port" of the peer, the bytes read from it so
  /// far: the 32-byte hello prefix and whatever followed it). Called on the guard's thread.
  using channel_fn =
      std::function<void(int fd, std::string peer, std::vector<uint8_t> first_bytes)>;

  /// Listens on host:port (SO_REUSEADDR; "" = every address; port 0 = any) and forwards to
  /// 127.0.0.1:target_port. Throws std::runtime_error naming the address when it cannot listen.
  /// `on_channel` empty: a channel hello is forwarded to CAF like any bytes (CAF refuses it).
  frame_guard(const std::string& host, uint16_t port, uint16_t target_port,
              uint64_t max_frame_bytes, report_fn report, channel_fn on_channel = {});
  ~frame_guard();
  frame_guard(const frame_guard&) = delete;
  frame_guard& operator=(const frame_guard&) = delete;

  /// The port it listens on.
  uint16_t port() const noexcept { return port_; }
  /// Connections closed for announcing an oversized frame.
  uint64_t refused() const noexcept { return refused_.load(); }

 private:
  void run();
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  uint16_t port_ = 0;
  uint16_t target_port_ = 0;
  uint64_t max_frame_bytes_ = 0;
  report_fn report_;
  channel_fn on_channel_;
  std::atomic<uint64_t> refused_{0};
  std::thread thread_;
};

}  // namespace dd::actors
