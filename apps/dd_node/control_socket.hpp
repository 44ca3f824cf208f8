// apps/dd_node/control_socket.hpp — the launcher's control socket: one request line per TCP
// connection on 127.0.0.1, one JSON reply line (`hold NODE SECONDS`, `release NODE`,
// `restart NODE`, `status`; docs/chaos.md "The launcher's control socket"). main() thread only.
#pragma once

#include <string>

#include "apps/dd_node/process_supervisor.hpp"

namespace dd::app {

/// The JSON reply to one request line, applied to `sup` ({"ok": false, "error": ...} when it
/// cannot be).
std::string control_reply(process_supervisor& sup, const std::string& line);

/// Answers every connection waiting on `sup.control_fd` (non-blocking; each client gets 1 s to
/// send its line), then returns.
void serve_control(process_supervisor& sup);

}  // namespace dd::app
