// apps/dd_node/node_flags.hpp — what the dd-node commands share: HOST:PORT parsing, loopback
// checks, the flag rows of run/syncer/launch (experiment, run directory) and of eval/sample (the
// model), and the stop-signal handler that a node's main loop polls. main() thread only, except
// the handler.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "actors/link/tls.hpp"
#include "actors/nodes/node_config.hpp"
#include "runtime/config/loader.hpp"
#include "runtime/run_dir_rules.hpp"
#include "util/flags.hpp"

namespace dd::actors {
struct run_options;
}  // namespace dd::actors

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

/// What the subcommands that read a model file (eval, sample) take besides their own flags:
/// RUN_DIR|FILE (runtime/model_file.hpp load_model), --backend NAME and --threads N (0..4096).
struct model_args {
  std::vector<std::string> where;  ///< RUN_DIR or FILE (one positional)
  std::string backend;             ///< the backend's name; the caller's default until given
  int threads = 1;                 ///< CPU threads of the backend, 0 = all
};
/// Adds model_args' rows to `t`; `backend_default` is said in --backend's help.
void add_model_flags(util::flag_table& t, model_args& m, const std::string& backend_default);

/// What `run`, `syncer` and `launch` take alike: the experiment file, --name, --set,
/// --script-timeout, and the run directory's --run-dir, --resume and --overwrite.
struct experiment_args {
  std::vector<std::string> files;  ///< the experiment file (one positional)
  config::load_options load;       ///< --name, --set, --script-timeout; --run-dir as load.run_dir
  bool resume = false, overwrite = false;
  std::string script_timeout_text;  ///< --script-timeout as given (empty: not given)
  /// --name, --set and --script-timeout as flags again, for a child process (dd-node launch).
  std::vector<std::string> passthrough() const;
  /// fresh, resume or overwrite; false after one line on stderr when both were given.
  bool mode(const char* who, run_dir_mode& out) const;
  const std::string& file() const { return files.front(); }
  /// Loads the file's selected experiments into `out` (exactly one when `single`); false after
  /// the loader's errors, or "`who`: FILE defines N experiments; select one with --name", on
  /// stderr.
  bool load_experiments(const char* who, bool single, config::load_result& out) const;
  /// Sets what these flags say of a job run in this process (actors/nodes/job_runner.hpp): its
  /// run directory (--run-dir), --resume, and the stop flag g_node_interrupt.
  void apply(actors::run_options& ro) const;
};
/// Adds experiment_args' rows to `t`: the positional EXP, --name, --set, --script-timeout,
/// --run-dir, --resume, --overwrite, with their help lines.
void add_experiment_flags(util::flag_table& t, experiment_args& a);
/// A flag_table value check for HOST:PORT (parse_endpoint) into `out`.
std::function<std::string(const std::string&)> endpoint_value(
    std::pair<std::string, uint16_t>* out);

/// A flag_table value check for --chaos-endpoint: HOST:PORT on a loopback address (the chaos
/// endpoint listens on 127.0.0.1 only until nodes authenticate), into `out`.
std::function<std::string(const std::string&)> chaos_endpoint_value(
    std::pair<std::string, uint16_t>* out);

/// Adds --force-memory (into `force`) to `t`: start even when `estimate` (the memory estimate of
/// what this command starts, as dd-node resolve prints it) exceeds the host's memory or
/// address-space limit; `without` says what happens without the flag.
void add_force_memory_flag(util::flag_table& t, bool* force, const std::string& estimate,
                           const std::string& without);
/// Adds --http HOST:PORT (into `text`) of a node's own HTTP listener (/metrics, /healthz,
/// /readyz, /status); `where` ends its help line (which addresses it takes, for how long).
void add_http_flag(util::flag_table& t, std::string* text, const std::string& where);
/// Adds --heartbeat S and --connection-timeout S (into `tr`) to `t`.
void add_transport_flags(util::flag_table& t, actors::node_transport& tr);
/// Adds --chaos-endpoint HOST:PORT (into `endpoint`, loopback only) and
/// --message-faults-via-endpoint (into `via`) to `t`: the node serves `faults` (its chaos event
/// kinds `kinds`) to dd-chaos msg, and with `via` applies none of the experiment's itself.
void add_chaos_endpoint_flags(util::flag_table& t, std::pair<std::string, uint16_t>* endpoint,
                              bool* via, const std::string& faults, const std::string& kinds);
/// False after one line on stderr when --message-faults-via-endpoint came without
/// --chaos-endpoint (the faults would reach nobody).
bool check_chaos_endpoint_flags(const char* who, const std::pair<std::string, uint16_t>& endpoint,
                                bool via);

/// Adds --join-token-file FILE (into `file`) to `t`; `role` says what the token does for this
/// command in its help line.
void add_join_token_flag(util::flag_table& t, std::string* file, const std::string& role);
/// The join token (actors/link/join_auth.hpp) from `file`, else DD_JOIN_TOKEN, else
/// `fallback_file` when that file exists (a run directory's join_token); empty when none.
/// False after one line on stderr (`who`: the error, never the secret).
bool read_join_token(const char* who, const std::string& file, std::string& token,
                     const std::string& fallback_file = {});

/// Adds --tls-cert FILE, --tls-key FILE and --tls-ca FILE (into `f`) to `t`.
void add_tls_flags(util::flag_table& t, actors::tls_files* f, const std::string& role);
/// The TLS context of `f` for `s` (null when no --tls-* flag was given). False after one line
/// on stderr: some but not all three flags, a file OpenSSL refuses, a key that does not match,
/// an expired certificate. A certificate expiring within 7 days is a warning line.
bool load_tls(const char* who, const actors::tls_files& f, actors::tls_context::side s,
              std::shared_ptr<actors::tls_context>& out);

/// The first SIGINT/SIGTERM's number (0 = none); a second one exits at once with 128 + signal.
extern std::atomic<int> g_node_interrupt;
/// Installs the handler for SIGINT and SIGTERM; `who` prefixes the "second signal" line.
void install_node_stop_handlers(const char* who);

}  // namespace dd::app
