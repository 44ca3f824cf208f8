// tools/chaos/proxy.hpp — the TCP fault proxy (`dd-chaos proxy`): one listener per link
// forwarding to its target, both directions, and per-link faults set over a line-protocol
// control socket, each reverted by the proxy itself when its duration ends.
//
// One thread runs the event loop (epoll, level-triggered, non-blocking sockets); stop() may be
// called from any thread. Memory is bounded: 1 MiB queued per direction of a connection, 64 MiB
// (hold_cap) while a black hole holds that direction; a full queue stops reading (TCP back
// pressure), it never drops bytes. Only `corrupt` alters bytes and only `close_after` (and
// `reset`) discards them. The control protocol is in docs/chaos.md, "The fault proxy".
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/chaos/common.hpp"

namespace dd::chaos {

/// One link: connections accepted on `listen` are forwarded to `target`.
/// "up" is listener-side client → target, "down" is target → client.
struct link_spec {
  std::string name;
  host_port listen;
  host_port target;
};

/// Parses "NAME=LISTEN_HOST:LISTEN_PORT->TARGET_HOST:TARGET_PORT". Throws usage_error.
link_spec parse_link_spec(const std::string& text);

struct proxy_config {
  host_port control{"127.0.0.1", 0};
  std::vector<link_spec> links;
  uint64_t seed = 1;            ///< corrupt and jitter draws (a fault's own seed= wins)
  size_t queue_cap = 1 << 20;   ///< bytes queued per direction normally
  size_t hold_cap = 64u << 20;  ///< bytes held per direction under a black hole
};

/// The proxy. Construction binds every socket (throws chaos_error naming the address).
class fault_proxy {
 public:
  explicit fault_proxy(proxy_config cfg);
  ~fault_proxy();
  fault_proxy(const fault_proxy&) = delete;
  fault_proxy& operator=(const fault_proxy&) = delete;

  /// {"control":"127.0.0.1:P","links":{"NAME":"HOST:P",...}} with the bound ports.
  nlohmann::json ports() const;
  /// Runs the event loop until stop(). Call from one thread.
  void run();
  /// Makes run() return soon. Any thread.
  void stop();

  struct impl;

 private:
  std::unique_ptr<impl> impl_;
};

}  // namespace dd::chaos
