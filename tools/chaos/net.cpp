// tools/chaos/net.cpp — see net.hpp.
#include "tools/chaos/net.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "actors/link/join_auth.hpp"
#include "util/net.hpp"

namespace dd::chaos {

sockaddr_in resolve_ipv4(const host_port& hp) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(hp.port);
  if (::inet_pton(AF_INET, hp.host.c_str(), &a.sin_addr) == 1) return a;
  std::string why;
  const auto res = util::resolve_tcp(hp.host, hp.port, AF_INET, /*passive=*/false, why);
  if (!res) throw chaos_error(fmt::format("{}: {}", hp.str(), why));
  a.sin_addr = reinterpret_cast<const sockaddr_in*>(res->ai_addr)->sin_addr;
  return a;
}

int listen_tcp(const host_port& hp, host_port* bound) {
  const sockaddr_in a = resolve_ipv4(hp);
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) throw chaos_error(fmt::format("socket: {}", std::strerror(errno)));
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 128) != 0) {
    const int e = errno;
    ::close(fd);
    throw chaos_error(fmt::format("cannot listen on {}: {}", hp.str(), std::strerror(e)));
  }
  if (bound) {
    sockaddr_in got{};
    socklen_t len = sizeof got;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&got), &len);
    char buf[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &got.sin_addr, buf, sizeof buf);
    bound->host = buf;
    bound->port = ntohs(got.sin_port);
  }
  return fd;
}

namespace {
std::string g_operator_token;  // set once by main, before any request
}  // namespace

void set_operator_token(const std::string& token) { g_operator_token = token; }

nlohmann::json control_request(const std::string& address, const std::string& line_in,
                               double timeout, bool prove) {
  std::string line = line_in;
  host_port hp;
  try {
    hp = parse_host_port(address, "control address");
  } catch (const usage_error& e) {
    throw chaos_error(e.what());
  }
  const sockaddr_in a = resolve_ipv4(hp);
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) throw chaos_error(fmt::format("socket: {}", std::strerror(errno)));
  const double end = mono_now() + timeout;
  auto fail = [&](const std::string& why) {
    ::close(fd);
    throw chaos_error(fmt::format("control {}: {}", address, why));
  };
  auto wait = [&](short ev) {
    for (;;) {
      const double left = end - mono_now();
      if (left <= 0) fail(fmt::format("no reply within {}", format_duration(timeout)));
      pollfd p{fd, ev, 0};
      const int r = ::poll(&p, 1, static_cast<int>(left * 1000) + 1);
      if (r > 0) return;
      if (r < 0 && errno != EINTR) fail(std::strerror(errno));
    }
  };
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) {
    if (errno != EINPROGRESS) fail(fmt::format("cannot connect: {}", std::strerror(errno)));
    wait(POLLOUT);
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) fail(fmt::format("cannot connect: {}", std::strerror(err)));
  }
  auto send_line = [&](const std::string& text) {
    const std::string out = text + "\n";
    size_t sent = 0;
    while (sent < out.size()) {
      const ssize_t n = ::send(fd, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
      if (n > 0) {
        sent += static_cast<size_t>(n);
      } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
        wait(POLLOUT);
      } else {
        fail(fmt::format("send failed: {}", std::strerror(errno)));
      }
    }
  };
  std::string pending;
  auto read_line = [&]() {
    for (;;) {
      const auto nl = pending.find('\n');
      if (nl != std::string::npos) {
        std::string one = pending.substr(0, nl);
        pending.erase(0, nl + 1);
        return one;
      }
      char buf[4096];
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n > 0) {
        pending.append(buf, static_cast<size_t>(n));
      } else if (n == 0) {
        if (pending.empty()) fail("closed without a reply");
        std::string one = pending;
        pending.clear();
        return one;
      } else if (errno == EAGAIN || errno == EINTR) {
        wait(POLLIN);
      } else {
        fail(fmt::format("recv failed: {}", std::strerror(errno)));
      }
    }
  };
  const bool json_line = !line.empty() && line.front() == '{';
  if (prove && !g_operator_token.empty()) {
    send_line(json_line ? std::string(R"({"op":"challenge"})") : std::string("challenge"));
    std::string challenge;
    try {
      const auto c = nlohmann::json::parse(read_line());
      challenge = c.value("challenge", "");
    } catch (const nlohmann::json::exception&) {}
    if (challenge.empty()) fail("no challenge in the reply to the join token's challenge request");
    if (json_line) {
      auto req = nlohmann::json::parse(line);
      const auto proof =
          dd::actors::join_proof(g_operator_token, dd::actors::operator_purpose,
                                 dd::actors::operator_context(challenge, req.dump()));
      req["auth"] = dd::actors::to_hex(proof);
      line = req.dump();
    } else {
      const auto proof = dd::actors::join_proof(g_operator_token, dd::actors::operator_purpose,
                                                dd::actors::operator_context(challenge, line));
      line += " auth=" + dd::actors::to_hex(proof);
    }
  }
  send_line(line);
  const std::string reply = read_line();
  ::close(fd);
  try {
    return nlohmann::json::parse(reply);
  } catch (const nlohmann::json::parse_error&) {
    throw chaos_error(fmt::format("control {}: reply is not JSON: {}", address, reply));
  }
}

}  // namespace dd::chaos
