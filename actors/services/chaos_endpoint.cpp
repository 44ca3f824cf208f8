// actors/services/chaos_endpoint.cpp — see chaos_endpoint.hpp.
#include "actors/services/chaos_endpoint.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "actors/link/join_auth.hpp"
#include "util/net.hpp"

namespace dd::actors {

using nlohmann::json;

bool chaos_endpoint_loopback(const std::string& host) {
  if (host == "localhost" || host == "::1") return true;
  in_addr a{};
  if (::inet_pton(AF_INET, host.c_str(), &a) != 1) return false;
  return (ntohl(a.s_addr) >> 24) == 127;
}

chaos_endpoint::chaos_endpoint(chaos_endpoint_options options, fault_hooks* hooks)
    : o_(std::move(options)), hooks_(hooks) {
  if (hooks_ == nullptr) throw std::invalid_argument("chaos endpoint: no fault hooks");
  if (!chaos_endpoint_loopback(o_.host))
    throw std::invalid_argument(
        fmt::format("--chaos-endpoint {}:{}: not a loopback address; the chaos endpoint listens on "
                    "127.0.0.1 only until nodes authenticate",
                    o_.host, o_.port));
  std::string why;
  const auto res = util::resolve_tcp(o_.host, o_.port, AF_UNSPEC, /*passive=*/true, why);
  if (!res)
    throw std::runtime_error(fmt::format("chaos endpoint {}:{}: {}", o_.host, o_.port, why));
  why = "no address";
  for (addrinfo* a = res.get(); a != nullptr; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 16) == 0) {
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
      port_ = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                             : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
      listen_fd_ = fd;
      break;
    }
    why = std::strerror(errno);
    ::close(fd);
  }
  if (listen_fd_ < 0)
    throw std::runtime_error(
        fmt::format("chaos endpoint: cannot listen on {}:{}: {}", o_.host, o_.port, why));
  if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
    ::close(listen_fd_);
    throw std::runtime_error(fmt::format("chaos endpoint: pipe: {}", std::strerror(errno)));
  }
  thread_ = std::thread([this] { serve(); });
}

chaos_endpoint::~chaos_endpoint() {
  stop_ = true;
  if (wake_[1] >= 0) {
    const char c = 'x';
    [[maybe_unused]] auto n = ::write(wake_[1], &c, 1);
  }
  if (thread_.joinable()) thread_.join();
  for (int fd : {listen_fd_, wake_[0], wake_[1]})
    if (fd >= 0) ::close(fd);
}

void chaos_endpoint::serve() {
  while (!stop_) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    const int rc = ::poll(p, 2, 1000);
    if (rc < 0 && errno != EINTR) break;
    if (stop_) break;
    if (rc <= 0 || (p[0].revents & POLLIN) == 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    serve_connection(fd);
    ::close(fd);
  }
}

void chaos_endpoint::serve_connection(int fd) {
  // One connection at a time; each waits at most 5 s for its next byte, so a silent client
  // cannot hold the endpoint.
  std::string buf, challenge;
  char chunk[4096];
  while (!stop_) {
    const auto nl = buf.find('\n');
    if (nl != std::string::npos) {
      std::string line = buf.substr(0, nl);
      buf.erase(0, nl + 1);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty()) continue;
      const std::string reply = handle(line, &challenge).dump() + "\n";
      size_t off = 0;
      while (off < reply.size()) {
        const ssize_t w = ::send(fd, reply.data() + off, reply.size() - off, MSG_NOSIGNAL);
        if (w <= 0) return;
        off += static_cast<size_t>(w);
      }
      continue;
    }
    if (buf.size() > 64 * 1024) return;  // no line that long is a request
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 5000) <= 0) return;
    const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
    if (n <= 0) return;
    buf.append(chunk, static_cast<size_t>(n));
  }
}

json chaos_endpoint::handle(const std::string& line, std::string* challenge) {
  auto err = [](const std::string& e) { return json{{"ok", false}, {"error", e}}; };
  json req;
  try {
    req = json::parse(line);
  } catch (const json::exception& e) {
    return err(fmt::format("not a JSON request line: {}", e.what()));
  }
  if (!req.is_object() || !req.contains("op") || !req["op"].is_string())
    return err("a request is a JSON object with \"op\": \"fault\", \"clear\" or \"status\"");
  const std::string op = req["op"];
  if (op == "challenge") {
    const std::string c = to_hex(random_nonce());
    if (challenge != nullptr) *challenge = c;
    return {{"ok", true}, {"challenge", c}};
  }
  if (!o_.join_token.empty() && (op == "fault" || op == "clear")) {
    // The proof covers the request as sent without its "auth" (nlohmann's dump() sorts keys, so
    // both sides render the same text) and this connection's challenge, which it spends.
    const std::string auth =
        req.contains("auth") && req["auth"].is_string() ? req["auth"].get<std::string>() : "";
    json bare = req;
    bare.erase("auth");
    const std::string c = challenge != nullptr ? *challenge : std::string();
    if (challenge != nullptr) challenge->clear();
    std::vector<uint8_t> proof;
    challenge_book book;
    std::vector<uint8_t> nonce;
    if (!c.empty() && from_hex(c, nonce)) book.issue(nonce, 0.0);
    const auto v = auth.empty() || !from_hex(auth, proof)
                       ? auth_verdict::no_proof
                       : judge(book, o_.join_token, nonce, proof, operator_purpose,
                               operator_context(c, bare.dump()), 0.0);
    if (v != auth_verdict::accepted)
      return err(fmt::format(
          "join token: {}: this node asks for the run's join token: send {{\"op\":\"challenge\"}} "
          "first and the proof as \"auth\" (dd-chaos does so with RUN_DIR/join_token or "
          "DD_JOIN_TOKEN)",
          to_string(v)));
    req = std::move(bare);
  }
  try {
    if (op == "status") {
      json faults = json::array();
      const double now = hooks_->now();
      for (const auto& f : hooks_->live()) {
        json j = {{"id", f.id},
                  {"kind", to_string(f.what)},
                  {"learner", f.learner},
                  {"fragment", f.fragment},
                  {"hits", f.hits}};
        if (f.until_s >= 0) j["expires_in_s"] = std::max(0.0, f.until_s - now);
        if (f.count >= 0) j["count_left"] = f.count;
        if (f.delay_s > 0) j["delay_s"] = f.delay_s;
        if (f.factor != 0) j["factor"] = f.factor;
        if (f.what == fault_kind::random_push) j["seed"] = f.seed;
        faults.push_back(j);
      }
      return {{"ok", true},
              {"node", o_.node_name},
              {"role", o_.role},
              {"learners", o_.learners},
              {"fragments", o_.fragments},
              {"faults", faults}};
    }
    if (op == "clear") return {{"ok", true}, {"cleared", hooks_->clear_live()}};
    if (op != "fault") return err(fmt::format("unknown op '{}' (fault, clear, status)", op));
    const std::string kind_name = req.value("kind", "");
    const auto kind = live_kind_from(kind_name);
    if (!kind)
      return err(fmt::format(
          "unknown kind '{}' (drop_push, dup_push, delay_push, reorder_push, corrupt_push, "
          "scale_push, random_push, drop_broadcast, dup_broadcast, delay_broadcast, "
          "reorder_broadcast, nan_step, fail_step, "
          "corrupt_held)",
          kind_name));
    live_fault f;
    f.what = *kind;
    f.learner = req.value("learner", -1);
    f.fragment = req.value("fragment", -1);
    f.count = req.value("count", int64_t{-1});
    f.delay_s = req.value("delay_s", 0.0);
    f.factor = req.value("factor", 0.0);
    f.seed = req.value("seed", uint64_t{0});
    const double for_s = req.value("for_s", 0.0);
    if (!(for_s >= 0)) return err("for_s must be >= 0");
    if (for_s > 0) f.until_s = hooks_->now() + for_s;
    const bool bcast = config::is_broadcast_fault(*kind);
    if (bcast && o_.role == "learner")
      return err(fmt::format("{}: broadcasts leave the syncer node; this is {} node '{}'",
                             kind_name, o_.role, o_.node_name));
    if (!bcast && o_.role == "syncer")
      return err(fmt::format("{}: pushes and steps happen in learner nodes; this is {} node '{}'",
                             kind_name, o_.role, o_.node_name));
    if (!bcast && f.learner >= 0 &&
        std::find(o_.learners.begin(), o_.learners.end(), f.learner) == o_.learners.end())
      return err(fmt::format("learner {} is not hosted by node '{}' (it hosts {})", f.learner,
                             o_.node_name, json(o_.learners).dump()));
    if (f.fragment >= 0 && o_.fragments > 0 && f.fragment >= o_.fragments)
      return err(
          fmt::format("fragment {} does not exist ({} fragments)", f.fragment, o_.fragments));
    if (req.contains("at_step") || req.contains("at_fraction")) {
      // Armed: it starts when the learner reaches that step, as the node's own schedule would
      // start a step-keyed event of the experiment (dd-node launch sends those this way).
      double step = 0;
      if (req.contains("at_step")) {
        if (!req["at_step"].is_number() || !(req["at_step"].get<double>() >= 0))
          return err("at_step must be a step number >= 0");
        step = req["at_step"].get<double>();
      } else {
        if (!req["at_fraction"].is_number() || !(req["at_fraction"].get<double>() >= 0) ||
            req["at_fraction"].get<double>() > 1)
          return err("at_fraction must be a number in [0, 1]");
        if (o_.steps_per_learner == 0)
          return err(fmt::format("at_fraction: node '{}' does not know its learners' step budget",
                                 o_.node_name));
        step = req["at_fraction"].get<double>() * static_cast<double>(o_.steps_per_learner);
      }
      f.until_s = -1.0;
      const auto at = static_cast<uint64_t>(std::llround(step));
      hooks_->arm_live(f, at, for_s);
      json out = {{"ok", true},           {"armed", true},        {"kind", kind_name},
                  {"node", o_.node_name}, {"learner", f.learner}, {"fragment", f.fragment},
                  {"at_step", at}};
      if (for_s > 0) out["for_s"] = for_s;
      if (f.count >= 0) out["count"] = f.count;
      if (f.delay_s > 0) out["delay_s"] = f.delay_s;
      if (f.factor != 0) out["factor"] = f.factor;
      if (f.what == fault_kind::random_push) out["seed"] = f.seed;
      return out;
    }
    if (config::is_step_message_fault(*kind) && f.count < 0 && f.until_s < 0)
      f.count = 1;  // one step by default
    const uint64_t id = hooks_->add_live(f);
    json out = {{"ok", true},           {"id", id},
                {"kind", kind_name},    {"node", o_.node_name},
                {"learner", f.learner}, {"fragment", f.fragment}};
    if (f.until_s >= 0) out["for_s"] = for_s;
    if (f.count >= 0) out["count"] = f.count;
    if (f.delay_s > 0) out["delay_s"] = f.delay_s;
    if (f.factor != 0) out["factor"] = f.factor;
    if (f.what == fault_kind::random_push) out["seed"] = f.seed;
    return out;
  } catch (const std::exception& e) {
    return err(e.what());
  }
}

}  // namespace dd::actors
