// apps/dd_node/control_socket.hpp — the launcher's control socket: one request line per TCP
// connection on 127.0.0.1, one JSON reply line (`hold NODE SECONDS`, `release NODE`,
// `restart NODE`, `status`; docs/run-directory.md "The launcher's control socket"). main() thread
// only.
//
// The join token: with one, hold, release and restart must end with ` auth=HEX`, the hex
// HMAC-SHA256 of the token over "dd-operator/1\nnonce CHALLENGE\nLINE" (LINE without the auth
// part; actors/link/join_auth.hpp operator_context), where CHALLENGE is what the line
// `challenge`, sent first on the same connection, was answered with ({"ok":true,"challenge":
// HEX}); the request line follows on that connection. `status` needs no token.
#pragma once

#include <string>

#include "apps/dd_node/process_supervisor.hpp"

namespace dd::app {

/// The JSON reply to one request line, applied to `sup` ({"ok": false, "error": ...} when it
/// cannot be).
/// `challenge`: the hex challenge this connection was given ("" = none).
std::string control_reply(process_supervisor& sup, const std::string& line,
                          const std::string& challenge = {});

/// Answers every connection waiting on `sup.control_fd` (non-blocking; each client gets 1 s to
/// send its line), then returns.
void serve_control(process_supervisor& sup);

}  // namespace dd::app
