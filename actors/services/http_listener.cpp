// actors/services/http_listener.cpp — see http_listener.hpp.
#include "actors/services/http_listener.hpp"

#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include <httplib.h>

namespace dd::actors {

struct http_listener::impl {
  httplib::Server server;
};

http_listener::http_listener(const std::string& host, uint16_t port, int workers)
    : host_(host), impl_(std::make_unique<impl>()) {
  auto& s = impl_->server;
  const size_t n = static_cast<size_t>(workers < 1 ? 1 : workers);
  s.new_task_queue = [n] { return new httplib::ThreadPool(n); };
  s.set_socket_options([](int sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  s.set_read_timeout(5, 0);
  s.set_write_timeout(5, 0);
  s.set_keep_alive_max_count(16);
  s.Get(".*", [this](const httplib::Request& r, httplib::Response& res) {
    http_request req;
    req.path = r.path;
    for (const auto& [k, v] : r.params) req.params.emplace(k, v);
    http_response out;
    try {
      out = dispatch(req);
    } catch (const std::exception& e) {
      out = {500, std::string("error: ") + e.what() + "\n", "text/plain; charset=utf-8"};
    }
    res.status = out.status;
    res.set_header("Cache-Control", "no-store");
    res.set_content(std::move(out.body), out.content_type.c_str());
  });
  errno = 0;
  int bound = port == 0 ? s.bind_to_any_port(host) : (s.bind_to_port(host, port) ? port : -1);
  if (bound <= 0) {
    const int err = errno;
    throw std::runtime_error("cannot listen for HTTP on " + host + ":" + std::to_string(port) +
                             ": " + (err != 0 ? std::strerror(err) : "bind failed"));
  }
  port_ = static_cast<uint16_t>(bound);
  thread_ = std::thread([this] { impl_->server.listen_after_bind(); });
  // stop() acts only on a running server: wait until it runs, so that the destructor stops it.
  for (int i = 0; i < 2000 && !impl_->server.is_running(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

http_listener::~http_listener() {
  impl_->server.stop();
  if (thread_.joinable()) thread_.join();
}

void http_listener::route(const std::string& path, http_handler handler) {
  std::lock_guard<std::mutex> g(mutex_);
  routes_[path] = std::move(handler);
}

void http_listener::route_prefix(const std::string& prefix, http_handler handler) {
  std::lock_guard<std::mutex> g(mutex_);
  prefixes_[prefix] = std::move(handler);
}

std::string http_listener::url() const {
  const bool v6 = host_.find(':') != std::string::npos;
  return "http://" + (v6 ? "[" + host_ + "]" : host_) + ":" + std::to_string(port_);
}

http_response http_listener::dispatch(const http_request& req) const {
  http_handler h;
  {
    std::lock_guard<std::mutex> g(mutex_);
    if (auto it = routes_.find(req.path); it != routes_.end()) {
      h = it->second;
    } else {
      // The longest matching prefix wins.
      size_t best = 0;
      for (const auto& [prefix, handler] : prefixes_)
        if (req.path.rfind(prefix, 0) == 0 && prefix.size() >= best) {
          best = prefix.size();
          h = handler;
        }
    }
  }
  if (!h) return {404, "not found: " + req.path + "\n", "text/plain; charset=utf-8"};
  return h(req);
}

}  // namespace dd::actors
