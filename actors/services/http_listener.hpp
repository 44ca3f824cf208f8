// actors/services/http_listener.hpp — a node's HTTP listener (`--http HOST:PORT`): GET routes
// that a node registers (path → handler returning a body and its content type), served by
// cpp-httplib (Debian's libcpp-httplib-dev) on threads of its own, never an actor's.
//
// The node registers /metrics, /healthz, /readyz and /status (actors/services/node_metrics.hpp);
// the status page adds `/` and its static files the same way. Binds loopback unless the caller
// allows otherwise (the dd-node commands refuse a non-loopback host without --insecure). The
// socket is bound with SO_REUSEADDR only (cpp-httplib's default SO_REUSEPORT would let a second
// node share a taken port silently): a taken port is an error at construction.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace dd::actors {

/// What a route returns.
struct http_response {
  int status = 200;
  std::string body;
  std::string content_type = "text/plain; charset=utf-8";
};

/// A GET request as a handler sees it: the path and the query parameters.
struct http_request {
  std::string path;
  std::multimap<std::string, std::string> params;
};

using http_handler = std::function<http_response(const http_request&)>;

/// The running listener; stops (closes its socket, joins its threads) when destroyed.
class http_listener {
 public:
  /// Binds `host`:`port` (0 = any free port; see port()) and starts serving on a thread of its
  /// own (with a pool of `workers` request threads). Throws std::runtime_error naming the address
  /// and errno's text when it cannot bind.
  http_listener(const std::string& host, uint16_t port, int workers = 2);
  ~http_listener();
  http_listener(const http_listener&) = delete;
  http_listener& operator=(const http_listener&) = delete;

  /// Serves GET `path` (exact match) with `handler`, replacing an earlier one. Any thread, any
  /// time. Handlers run on the listener's threads: they must be thread-safe. An exception in a
  /// handler is answered 500 with its text.
  void route(const std::string& path, http_handler handler);
  /// Serves every GET path that starts with `prefix` (e.g. "/static/") not matched exactly.
  void route_prefix(const std::string& prefix, http_handler handler);

  const std::string& host() const { return host_; }
  uint16_t port() const { return port_; }
  /// "http://HOST:PORT" (IPv6 hosts in brackets).
  std::string url() const;

 private:
  struct impl;
  http_response dispatch(const http_request& req) const;
  std::string host_;
  uint16_t port_ = 0;
  mutable std::mutex mutex_;
  std::map<std::string, http_handler> routes_, prefixes_;
  std::unique_ptr<impl> impl_;
  std::thread thread_;
};

}  // namespace dd::actors
