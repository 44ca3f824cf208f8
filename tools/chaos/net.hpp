// tools/chaos/net.hpp — TCP helpers of dd-chaos: IPv4 listeners and connections, and the
// one-line request / one-line JSON reply client used for the launcher's and the proxy's control
// sockets. Any thread; every call blocks at most its timeout.
#pragma once

#include <string>

#include <netinet/in.h>
#include <nlohmann/json.hpp>

#include "tools/chaos/common.hpp"

namespace dd::chaos {

/// Resolves HOST (a dotted IPv4 address or a name) and PORT. Throws chaos_error.
sockaddr_in resolve_ipv4(const host_port& hp);

/// A non-blocking, close-on-exec listening socket bound to `hp` (port 0 picks one).
/// Returns the fd; `bound` gets the actual address. Throws chaos_error naming the address.
int listen_tcp(const host_port& hp, host_port* bound);

/// Sends `line` (a '\n' is added) to the control socket at `address` and returns the parsed
/// one-line JSON reply. Throws chaos_error naming the address on connect failure, timeout,
/// a closed connection or a reply that is not JSON. With an operator token set
/// (set_operator_token), the request first asks the socket for a challenge on the same
/// connection (`challenge`, or {"op":"challenge"} for a JSON line) and carries the token's proof
/// over it (` auth=HEX` appended, or an "auth" member; actors/link/join_auth.hpp).
/// `prove` false: never (dd-chaos's own proxy, which has no token).
nlohmann::json control_request(const std::string& address, const std::string& line,
                               double timeout_seconds = 5.0, bool prove = true);

/// The run's join token that control_request proves (empty = none; the default). dd-chaos sets
/// it from DD_JOIN_TOKEN or RUN_DIR/join_token.
void set_operator_token(const std::string& token);

}  // namespace dd::chaos
