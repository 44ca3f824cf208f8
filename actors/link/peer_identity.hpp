// actors/link/peer_identity.hpp — which certificate a CAF node connected with, in the syncer's
// process (mutual TLS, tls_tunnel.hpp). The frame guard binds each node id, read from the BASP
// client handshake of a connection that came through TLS, to the names of that connection's
// client certificate; a node id once bound keeps its names: a second connection claiming it
// under another certificate is refused (a node id is a host id and a process id, so anyone who
// sees `ps` could claim another node's). The tensor channel hub checks a greeting's node id
// against the certificate of the greeting's own connection, and the health monitor gives a node
// only the learner ids its certificate names (tls.hpp learner_ids_of). Thread-safe.
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace dd::actors {

class peer_identity {
 public:
  /// Binds `node` (caf::to_string of its node id) to `names`. False when it was bound to other
  /// names (`*bound` gets them).
  bool bind(const std::string& node, const std::vector<std::string>& names,
            std::vector<std::string>* bound = nullptr) {
    std::lock_guard<std::mutex> g(mu_);
    auto [it, fresh] = nodes_.emplace(node, names);
    if (fresh || it->second == names) return true;
    if (bound != nullptr) *bound = it->second;
    return false;
  }
  /// The names `node` is bound to; nullopt when it never connected through TLS.
  std::optional<std::vector<std::string>> names_of(const std::string& node) const {
    std::lock_guard<std::mutex> g(mu_);
    auto it = nodes_.find(node);
    if (it == nodes_.end()) return std::nullopt;
    return it->second;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::vector<std::string>> nodes_;
};

/// "a, b, c" ("nothing" for none).
inline std::string join_names(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s.empty() ? "nothing" : s;
}

}  // namespace dd::actors
