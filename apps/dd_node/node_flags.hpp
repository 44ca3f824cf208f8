// apps/dd_node/node_flags.hpp — what the cluster subcommands (syncer, learner, launch, status,
// drain) share: HOST:PORT parsing, loopback checks, number flags, and the stop-signal handler
// that a node's main loop polls. main() thread only, except the handler.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
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
/// `--http HOST:PORT` of `who` (port 0 = any free port): parsed into `out`; a host that is not
/// loopback needs `insecure` (the listener has no authentication). False after one line on
/// stderr.
bool parse_http_flag(const char* who, const std::string& text, bool insecure,
                     std::pair<std::string, uint16_t>& out);
/// A finite number >= 0, the whole string.
bool parse_nonneg(const std::string& text, double& out);
/// A comma-separated list of integers >= 0 ("0,2,3").
bool parse_ids(const std::string& text, std::vector<int32_t>& out);

/// Walks a subcommand's argv: the value of the flag at the cursor, as text, seconds or a count,
/// each refused with one line on stderr prefixed by `who` ("dd-node learner: --threads needs a
/// whole number >= 1, got 'x'"). Shared by syncer, learner and launch.
class flag_cursor {
 public:
  flag_cursor(const char* who, int argc, char** argv) : who_(who), argc_(argc), argv_(argv) {}
  /// Advances to the next argument; false at the end.
  bool next() { return ++i_ < argc_; }
  /// The argument at the cursor.
  std::string arg() const { return argv_[i_]; }
  /// The flag's value (the next argument), or nullptr after saying it is missing.
  const char* value(const std::string& flag);
  /// A number of seconds >= 0.
  bool seconds(const std::string& flag, double& out);
  /// A whole number in [lo, hi].
  bool count(const std::string& flag, int& out, int lo = 1, int hi = 4096);
  /// A port number (0..65535).
  bool port(const std::string& flag, uint16_t& out);
  /// The `who` its lines start with ("dd-node eval").
  const char* who() const { return who_; }

 private:
  const char* who_;
  int argc_;
  char** argv_;
  int i_ = 0;
};

/// What the subcommands that read a model file (eval, sample) take besides their own flags:
/// RUN_DIR|FILE (runtime/model_file.hpp load_model), --backend NAME and --threads N (0..4096).
struct model_args {
  std::string where;    ///< RUN_DIR or FILE; empty until given
  std::string backend;  ///< the backend's name; the caller's default until given
  int threads = 1;      ///< CPU threads of the backend, 0 = all
  /// Takes `a`, the argument at `f`'s cursor, as one of the above; false after one line on
  /// stderr prefixed by f.who() (a bad --threads, a missing value, an unknown flag — then
  /// help(stderr) too —, or a second RUN_DIR|FILE), when the caller exits 2.
  bool take(flag_cursor& f, const std::string& a, void (*help)(FILE*));
};

/// The first SIGINT/SIGTERM's number (0 = none); a second one exits at once with 128 + signal.
extern std::atomic<int> g_node_interrupt;
/// Installs the handler for SIGINT and SIGTERM; `who` prefixes the "second signal" line.
void install_node_stop_handlers(const char* who);

}  // namespace dd::app
