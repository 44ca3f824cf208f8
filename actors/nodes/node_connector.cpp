// actors/nodes/node_connector.cpp — see node_connector.hpp.
#include "actors/nodes/node_connector.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <future>
#include <memory>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "actors/link/atoms.hpp"
#include "actors/link/join_auth.hpp"
#include "util/net.hpp"

namespace dd::actors {

namespace fs = std::filesystem;

double join_backoff_s(int attempt, double base_s, double cap_s, double u01) {
  const double raw = base_s * std::pow(2.0, std::min(attempt, 30));
  return std::min(cap_s, std::min(cap_s, raw) * (1.0 + 0.4 * (u01 - 0.5)));
}

bool tcp_reachable(const std::string& host, uint16_t port, double timeout_s, std::string* why) {
  auto fail = [&](std::string w) {
    if (why != nullptr) *why = std::move(w);
    return false;
  };
  std::string unresolved;
  const auto res = util::resolve_tcp(host, port, AF_UNSPEC, /*passive=*/false, unresolved);
  if (!res) return fail(unresolved);
  std::string last = "no address";
  bool ok = false;
  for (addrinfo* a = res.get(); a != nullptr && !ok; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc == 0) {
      ok = true;
    } else if (errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      rc = ::poll(&p, 1, static_cast<int>(timeout_s * 1000));
      if (rc == 1) {
        int err = 0;
        socklen_t len = sizeof err;
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err == 0)
          ok = true;
        else
          last = std::strerror(err);
      } else {
        last = fmt::format("no answer within {:.1f} s", timeout_s);
      }
    } else {
      last = std::strerror(errno);
    }
    ::close(fd);
  }
  if (!ok) return fail(fmt::format("{}:{}: {}", host, port, last));
  return true;
}

int shutdown_connections_to(const std::vector<std::pair<std::string, uint16_t>>& peers) {
  std::vector<sockaddr_storage> want;
  for (const auto& [host, port] : peers) {
    std::string unresolved;  // a peer that does not resolve has no connection to shut down
    const auto res = util::resolve_tcp(host, port, AF_UNSPEC, /*passive=*/false, unresolved);
    for (addrinfo* a = res.get(); a != nullptr; a = a->ai_next) {
      sockaddr_storage s{};
      std::memcpy(&s, a->ai_addr, std::min<size_t>(a->ai_addrlen, sizeof s));
      want.push_back(s);
    }
  }
  auto same = [](const sockaddr_storage& a, const sockaddr_storage& b) {
    if (a.ss_family != b.ss_family) return false;
    if (a.ss_family == AF_INET) {
      const auto& x = reinterpret_cast<const sockaddr_in&>(a);
      const auto& y = reinterpret_cast<const sockaddr_in&>(b);
      return x.sin_port == y.sin_port && x.sin_addr.s_addr == y.sin_addr.s_addr;
    }
    if (a.ss_family == AF_INET6) {
      const auto& x = reinterpret_cast<const sockaddr_in6&>(a);
      const auto& y = reinterpret_cast<const sockaddr_in6&>(b);
      return x.sin6_port == y.sin6_port &&
             std::memcmp(&x.sin6_addr, &y.sin6_addr, sizeof x.sin6_addr) == 0;
    }
    return false;
  };
  int n = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc/self/fd", ec)) {
    int fd = -1;
    try {
      fd = std::stoi(entry.path().filename().string());
    } catch (const std::exception&) {
      continue;
    }
    int type = 0;
    socklen_t tlen = sizeof type;
    if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tlen) != 0 || type != SOCK_STREAM) continue;
    sockaddr_storage peer{};
    socklen_t plen = sizeof peer;
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &plen) != 0) continue;
    for (const auto& w : want)
      if (same(peer, w)) {
        if (::shutdown(fd, SHUT_RDWR) == 0) ++n;
        break;
      }
  }
  return n;
}

namespace {

/// CAF's remote lookup on its own thread, bounded by `timeout_s` (CAF's own connect has no
/// deadline). A lookup that times out is abandoned on its thread.
std::optional<monitor_hdl> lookup(caf::actor_system& sys, const std::string& host, uint16_t port,
                                  double timeout_s, std::string* why) {
  if (!tcp_reachable(host, port, timeout_s, why)) return std::nullopt;
  struct slot {
    std::mutex m;
    std::optional<caf::expected<monitor_hdl>> result;
  };
  auto s = std::make_shared<slot>();
  auto done = std::make_shared<std::promise<void>>();
  auto fut = done->get_future();
  std::thread([&sys, host, port, s, done] {
    auto r = sys.middleman().remote_actor<monitor_hdl>(host, port);
    {
      std::lock_guard<std::mutex> g(s->m);
      s->result.emplace(std::move(r));
    }
    done->set_value();
  }).detach();
  if (fut.wait_for(std::chrono::duration<double>(timeout_s)) != std::future_status::ready) {
    if (why != nullptr)
      *why = fmt::format("{}:{}: no CAF handshake within {:.1f} s", host, port, timeout_s);
    return std::nullopt;
  }
  std::lock_guard<std::mutex> g(s->m);
  if (!*s->result) {
    if (why != nullptr) *why = fmt::format("{}:{}: {}", host, port, sys.render(s->result->error()));
    return std::nullopt;
  }
  return **s->result;
}

}  // namespace

namespace {

/// One node_join round trip (node_handshake without the join token's challenge).
std::optional<node_join_reply> handshake_once(caf::scoped_actor& self, const monitor_hdl& monitor,
                                              const node_join& req, double timeout_s,
                                              std::string* why, bool* timed_out) {
  std::optional<node_join_reply> out;
  // The reply is decoded under the run its own envelope names: a syncer of another run answers
  // with a refusal (otherRun) stamped with its own run id, and that refusal must be read, not
  // discarded as undecodable (the node would retry it for ever instead of exiting 3). A node's
  // first handshake names no run (req.run_id empty) and takes the run the reply names; a later
  // one answered by another run is refused here whatever the reply says.
  self->request(monitor, std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)),
                atoms::node_join_atom_v, encode(req, {req.run_id, 0}))
      .receive(
          [&](const std::vector<uint8_t>& bytes) {
            const auto header = peek_envelope(bytes);
            envelope_expect expect{header ? header->run_id : req.run_id, 0};
            auto rep = decode_node_join_reply(bytes, {}, expect);
            if (!rep) {
              *why = "undecodable node_join_reply: " + rep.error().message;
              return;
            }
            if (!req.run_id.empty() && expect.run_id != req.run_id) {
              if (rep->accepted || rep->refusal == node_refusal::none) {
                rep->accepted = false;
                rep->refusal = node_refusal::other_run;
                rep->reason = fmt::format("the syncer runs run '{}', this node belongs to run '{}'",
                                          expect.run_id, req.run_id);
              }
            }
            out = std::move(*rep);
          },
          [&](caf::error& err) {
            *why = "handshake failed: " + self->system().render(err);
            if (timed_out != nullptr) *timed_out = err == caf::sec::request_timeout;
          });
  return out;
}

}  // namespace

std::optional<node_join_reply> node_handshake(caf::scoped_actor& self, const monitor_hdl& monitor,
                                              const node_join& req, const std::string& token,
                                              double timeout_s, std::string* why, bool* timed_out) {
  auto rep = handshake_once(self, monitor, req, timeout_s, why, timed_out);
  if (!rep || rep->refusal != node_refusal::auth_challenge) return rep;
  node_join proven = req;
  proven.challenge = rep->challenge;
  if (!token.empty())
    proven.proof = join_proof(
        token, node_join_purpose,
        node_join_context(rep->run_id, req.node_name, caf::to_string(self->system().node()),
                          req.learner_ids, req.learner_count, rep->challenge));
  // Without a token the request goes back unproven: the syncer logs the refusal too.
  auto answer = handshake_once(self, monitor, proven, timeout_s, why, timed_out);
  if (answer && token.empty() && answer->refusal == node_refusal::unauthorized)
    answer->reason =
        "the syncer asks for the run's join token and this node has none: give "
        "--join-token-file FILE or set DD_JOIN_TOKEN";
  return answer;
}

std::string join_failure_text(const std::string& error, const std::string& forwarder,
                              const std::string& syncer, const std::string& tls_refusal,
                              bool reached_before) {
  if (!forwarder.empty()) {
    if (!tls_refusal.empty()) return tls_refusal;
    std::string rest = error;
    if (rest.rfind(forwarder + ": ", 0) == 0) rest.erase(0, forwarder.size() + 2);
    return fmt::format("{} through the TLS forwarder {}: {}", syncer, forwarder, rest);
  }
  if (error.find("disconnect_during_handshake") == std::string::npos) return error;
  // A node that reached the syncer before speaks what the syncer speaks: TLS is not the cause.
  if (reached_before)
    return error +
           ": the syncer closed the connection during the handshake (the syncer is restarting, "
           "or a proxy between them closed the connection)";
  return error +
         ": the syncer closed the connection during the handshake — the syncer is restarting, "
         "or a proxy between them closed the connection, or the syncer listens with TLS and "
         "this node has none: then give --tls-cert, --tls-key and --tls-ca (docs/securing.md)";
}

double node_connector::now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

std::optional<monitor_hdl> node_connector::try_once() {
  if (now_s() < next_try_s) return std::nullopt;
  const auto& [host, port] = join[next % join.size()];
  last_addr = {host, port};
  ++next;
  // An attempt never runs past the deadline.
  double timeout = connect_timeout_s;
  if (deadline_at > 0) timeout = std::max(0.05, std::min(timeout, deadline_at - now_s()));
  auto m = lookup(sys, host, port, timeout, &last_error);
  if (m) {
    reached = true;
    return m;
  }
  if (explain) last_error = explain(last_addr, last_error, reached);
  failed(last_error);
  return std::nullopt;
}

void node_connector::failed(const std::string& why) {
  last_error = why;
  const double wait = join_backoff_s(attempt++, backoff_base_s, backoff_cap_s, jitter.uniform());
  next_try_s = now_s() + wait;
  std::fprintf(stderr, "dd-node learner %s: syncer not reachable (%s); next attempt in %.1f s\n",
               name.c_str(), last_error.c_str(), wait);
  std::fflush(stderr);
}

int node_connector::drop_connections(const std::string& why) {
  const int n = shutdown_connections_to(join);
  // Said only when there was one to shut down (a syncer that died mid-handshake leaves none).
  if (n > 0) {
    std::fprintf(stderr, "dd-node learner %s: %d connection%s to the syncer shut down (%s)\n",
                 name.c_str(), n, n == 1 ? "" : "s", why.c_str());
    std::fflush(stderr);
  }
  return n;
}

}  // namespace dd::actors
