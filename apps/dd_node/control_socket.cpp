// apps/dd_node/control_socket.cpp — see control_socket.hpp.
#include "apps/dd_node/control_socket.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sstream>

#include <nlohmann/json.hpp>

#include "actors/link/join_auth.hpp"
#include "apps/dd_node/node_flags.hpp"

namespace dd::app {

std::string control_reply(process_supervisor& sup, const std::string& line_in,
                          const std::string& challenge) {
  auto err = [](const std::string& e) {
    return nlohmann::json{{"ok", false}, {"error", e}}.dump();
  };
  std::string line = line_in, auth;
  if (const auto at = line.rfind(" auth="); at != std::string::npos) {
    auth = line.substr(at + 6);
    line.resize(at);
  }
  std::istringstream in(line);
  std::string cmd, name;
  in >> cmd >> name;
  if (!sup.join_token.empty() && cmd != "status") {
    std::vector<uint8_t> nonce, proof;
    actors::challenge_book book;
    if (!challenge.empty() && actors::from_hex(challenge, nonce)) book.issue(nonce, 0.0);
    const auto v = auth.empty() || !actors::from_hex(auth, proof)
                       ? actors::auth_verdict::no_proof
                       : actors::judge(book, sup.join_token, nonce, proof, actors::operator_purpose,
                                       actors::operator_context(challenge, line), 0.0);
    if (v != actors::auth_verdict::accepted)
      return err(std::string("join token: ") + std::string(actors::to_string(v)) +
                 ": send `challenge` first on this connection and end the request with "
                 "` auth=HEX` (dd-chaos does so with RUN_DIR/join_token or DD_JOIN_TOKEN)");
  }
  if (cmd == "status") {
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& n : sup.nodes)
      arr.push_back({{"name", n.name},
                     {"role", n.role},
                     {"state", to_string(n.state)},
                     {"pid", n.pid},
                     {"starts", n.starts},
                     {"last_exit", n.last_exit}});
    return nlohmann::json{{"ok", true}, {"sup.nodes", arr}}.dump();
  }
  node_proc* n = sup.find(name);
  if (n == nullptr) return err("no node named '" + name + "'");
  if (cmd == "hold") {
    double s = 0;
    std::string v;
    in >> v;
    if (!parse_nonneg(v, s)) return err("hold NODE SECONDS: seconds must be a number >= 0");
    n->held_until = now_s() + s;
    if (n->state == node_state::down) n->state = node_state::held;
    sup.write_nodes_file();
    return nlohmann::json{{"ok", true}, {"node", name}, {"held_for_s", s}}.dump();
  }
  if (cmd == "release") {
    n->held_until = 0;
    if (n->state == node_state::held) {
      n->state = node_state::down;
      n->restart_at = now_s();
    }
    sup.write_nodes_file();
    return nlohmann::json{{"ok", true}, {"node", name}}.dump();
  }
  if (cmd == "restart") {
    if (n->state == node_state::running) {
      n->force_restart = true;
      ::kill(n->pid, SIGKILL);
    } else {
      n->state = node_state::down;
      n->restart_at = now_s();
      n->held_until = 0;
    }
    return nlohmann::json{{"ok", true}, {"node", name}}.dump();
  }
  return err("unknown request '" + cmd + "' (hold, release, restart, status)");
}

void serve_control(process_supervisor& sup) {
  while (true) {
    int c = ::accept4(sup.control_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) return;
    std::string pending;
    // One line within 1 s (a line `challenge` is answered and the next line read the same way).
    auto read_line = [&]() {
      char buf[512];
      const double until = now_s() + 1.0;
      while (pending.find('\n') == std::string::npos && now_s() < until && pending.size() < 4096) {
        pollfd p{c, POLLIN, 0};
        if (::poll(&p, 1, 100) <= 0) continue;
        const ssize_t k = ::read(c, buf, sizeof buf);
        if (k <= 0) break;
        pending.append(buf, static_cast<size_t>(k));
      }
      std::string line = pending;
      if (auto nl = pending.find('\n'); nl != std::string::npos) {
        line = pending.substr(0, nl);
        pending.erase(0, nl + 1);
      } else {
        pending.clear();
      }
      return line;
    };
    std::string line = read_line(), challenge;
    if (line == "challenge") {
      challenge = actors::to_hex(actors::random_nonce());
      const std::string r = nlohmann::json{{"ok", true}, {"challenge", challenge}}.dump() + "\n";
      ssize_t w = ::write(c, r.data(), r.size());
      (void)w;
      line = read_line();
    }
    const std::string reply = control_reply(sup, line, challenge) + "\n";
    ssize_t w = ::write(c, reply.data(), reply.size());
    (void)w;
    ::close(c);
  }
}

}  // namespace dd::app
