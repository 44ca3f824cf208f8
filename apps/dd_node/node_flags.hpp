// apps/dd_node/node_flags.hpp — what the cluster subcommands (syncer, learner, launch, status,
// drain) share: HOST:PORT parsing, loopback checks, number flags, and the stop-signal handler
// that a node's main loop polls. main() thread only, except the handler.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace dd::app {

/// "HOST:PORT" (IPv4 or a name; "[v6]:PORT" for IPv6) → (host, port). False with `error` set
/// when it does not parse or the port is not in 0..65535.
bool parse_endpoint(const std::string& text, std::pair<std::string, uint16_t>& out,
                    std::string& error);
/// A comma-separated list of endpoints.
bool parse_endpoints(const std::string& text, std::vector<std::pair<std::string, uint16_t>>& out,
                     std::string& error);
/// True for 127.0.0.0/8, ::1 and "localhost".
bool is_loopback(const std::string& host);
/// A finite number >= 0, the whole string.
bool parse_nonneg(const std::string& text, double& out);
/// A comma-separated list of integers >= 0 ("0,2,3").
bool parse_ids(const std::string& text, std::vector<int32_t>& out);

/// The first SIGINT/SIGTERM's number (0 = none); a second one exits at once with 128 + signal.
extern std::atomic<int> g_node_interrupt;
/// Installs the handler for SIGINT and SIGTERM; `who` prefixes the "second signal" line.
void install_node_stop_handlers(const char* who);

}  // namespace dd::app
