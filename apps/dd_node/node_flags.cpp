// apps/dd_node/node_flags.cpp — see node_flags.hpp.
#include "apps/dd_node/node_flags.hpp"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "actors/link/join_auth.hpp"
#include "actors/nodes/job_runner.hpp"

namespace dd::app {

bool parse_endpoint(const std::string& text, std::pair<std::string, uint16_t>& out,
                    std::string& error) {
  std::string host, port;
  if (!text.empty() && text[0] == '[') {
    const auto close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      error = "'" + text + "' is not [IPV6]:PORT";
      return false;
    }
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string::npos || colon == 0) {
      error = "'" + text + "' is not HOST:PORT";
      return false;
    }
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || errno != 0 || v < 0 || v > 65535) {
    error = "'" + text + "': the port must be a number in 0..65535";
    return false;
  }
  out = {host, static_cast<uint16_t>(v)};
  return true;
}

bool parse_endpoints(const std::string& text, std::vector<std::pair<std::string, uint16_t>>& out,
                     std::string& error) {
  size_t start = 0;
  while (start <= text.size()) {
    const auto comma = text.find(',', start);
    const std::string one =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    std::pair<std::string, uint16_t> e;
    if (!parse_endpoint(one, e, error)) return false;
    out.push_back(e);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return !out.empty();
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

bool parse_http_flag(const char* who, const std::string& text, bool insecure,
                     std::pair<std::string, uint16_t>& out) {
  std::string error;
  if (!parse_endpoint(text, out, error)) {
    std::fprintf(stderr, "%s: --http: %s\n", who, error.c_str());
    return false;
  }
  if (!is_loopback(out.first) && !insecure) {
    std::fprintf(stderr,
                 "%s: --http %s is not a loopback address; the HTTP listener has no "
                 "authentication%s\n",
                 who, text.c_str(),
                 std::string(who).find("syncer") != std::string::npos ||
                         std::string(who).find("launch") != std::string::npos
                     ? ": add --insecure to listen there anyway"
                     : " and this command serves it on loopback only");
    return false;
  }
  return true;
}

bool parse_nonneg(const std::string& text, double& out) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(v) || v < 0) return false;
  out = v;
  return true;
}

bool parse_ids(const std::string& text, std::vector<int32_t>& out) {
  size_t start = 0;
  while (true) {
    const auto comma = text.find(',', start);
    const std::string one =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(one.c_str(), &end, 10);
    if (one.empty() || *end != '\0' || errno != 0 || v < 0 || v > 1000000) return false;
    out.push_back(static_cast<int32_t>(v));
    if (comma == std::string::npos) return true;
    start = comma + 1;
  }
}

void add_model_flags(util::flag_table& t, model_args& m, const std::string& backend_default) {
  t.positionals(&m.where, 1, 1, "RUN_DIR|FILE",
                "a run directory (its model.safetensors, or dd-node train's "
                "checkpoint.safetensors) or a safetensors file")
      .text("--backend", &m.backend, "NAME",
            "cpu | reference | cuda (default " + backend_default + ")")
      .count("--threads", &m.threads, 0, 4096, "N",
             "CPU threads for the backend, 0 = all (default 1)");
}

bool experiment_args::mode(const char* who, run_dir_mode& out) const {
  if (resume && overwrite) {
    std::fprintf(stderr, "%s: --resume and --overwrite exclude each other\n", who);
    return false;
  }
  out = resume ? run_dir_mode::resume : overwrite ? run_dir_mode::overwrite : run_dir_mode::fresh;
  return true;
}

std::vector<std::string> experiment_args::passthrough() const {
  std::vector<std::string> v;
  for (const auto& n : load.names) v.insert(v.end(), {"--name", n});
  for (const auto& o : load.overrides) v.insert(v.end(), {"--set", o});
  if (!script_timeout_text.empty()) v.insert(v.end(), {"--script-timeout", script_timeout_text});
  return v;
}

bool experiment_args::load_experiments(const char* who, bool single,
                                       config::load_result& out) const {
  out = config::load_file(file(), load);
  if (!out.ok()) {
    std::fprintf(stderr, "%s", out.error_text().c_str());
    return false;
  }
  if (single && out.experiments.size() != 1) {
    std::fprintf(stderr, "%s: %s defines %zu experiments; select one with --name\n", who,
                 file().c_str(), out.experiments.size());
    return false;
  }
  return true;
}

void experiment_args::apply(actors::run_options& ro) const {
  ro.run_dir = load.run_dir;
  ro.resume = resume;
  ro.interrupt = &g_node_interrupt;
}

void add_experiment_flags(util::flag_table& t, experiment_args& a) {
  t.positionals(&a.files, 1, 1, "EXP", "the experiment file (Lua; docs/config.md)")
      .texts("--name", &a.load.names, "N", "select experiment N of the file (repeatable)")
      .texts("--set", &a.load.overrides, "K=V",
             "override a key of every selected experiment, e.g. --set budget.steps=50 "
             "(repeatable; applied after --name selects)")
      .custom("--script-timeout", "S",
              "wall-clock limit of evaluating the experiment file and the --set values, "
              "seconds > 0 (default 10); the script runs in a child process killed at the limit",
              [&a](const std::string& v) {
                std::string why;
                if (!config::parse_script_timeout(v, a.load.script_timeout, why)) return why;
                a.script_timeout_text = v;
                return std::string();
              })
      .text("--run-dir", &a.load.run_dir, "DIR",
            "run directory (default runs/<experiment>); also moves the owner checkpoints to "
            "DIR/checkpoints unless the experiment sets checkpoint.dir")
      .toggle("--resume", &a.resume,
              "continue the run in the run directory that crashed or was interrupted: same run "
              "id, owners restored from their checkpoints (or rebuilt), learners from the "
              "monitor's record (monitor.json); the budget counts both parts")
      .toggle("--overwrite", &a.overwrite,
              "replace the unfinished (crashed) or interrupted run in the run directory");
}

std::function<std::string(const std::string&)> endpoint_value(
    std::pair<std::string, uint16_t>* out) {
  return [out](const std::string& v) {
    std::string error;
    return parse_endpoint(v, *out, error) ? std::string() : error;
  };
}

std::function<std::string(const std::string&)> chaos_endpoint_value(
    std::pair<std::string, uint16_t>* out) {
  return [out](const std::string& v) -> std::string {
    std::string error;
    if (!parse_endpoint(v, *out, error)) return "--chaos-endpoint: " + error;
    if (!is_loopback(out->first))
      return "--chaos-endpoint " + v +
             " is not a loopback address; the chaos endpoint listens on 127.0.0.1 only until "
             "nodes authenticate";
    return {};
  };
}

void add_force_memory_flag(util::flag_table& t, bool* force, const std::string& estimate,
                           const std::string& without) {
  t.toggle("--force-memory", force,
           "start even when " + estimate +
               " (dd-node resolve prints it) exceeds this host's available memory or its "
               "address-space limit (RLIMIT_AS); without it " +
               without);
}

void add_http_flag(util::flag_table& t, std::string* text, const std::string& where) {
  t.text("--http", text, "HOST:PORT",
         "serve /metrics (Prometheus), /healthz, /readyz and /status (JSON) on this address "
         "(port 0 = any; printed); off by default. " +
             where);
}

void add_transport_flags(util::flag_table& t, actors::node_transport& tr) {
  t.seconds("--heartbeat", &tr.heartbeat_s, "middleman heartbeat period (default 1)")
      .seconds("--connection-timeout", &tr.connection_timeout_s,
               "a peer silent this long is dropped (default 10)");
}

void add_chaos_endpoint_flags(util::flag_table& t, std::pair<std::string, uint16_t>* endpoint,
                              bool* via, const std::string& faults, const std::string& kinds) {
  t.custom("--chaos-endpoint", "HOST:PORT",
           "serve " + faults +
               " (dd-chaos msg) on this loopback address (port 0 = any; printed); off by default",
           chaos_endpoint_value(endpoint))
      .toggle("--message-faults-via-endpoint", via,
              "do not apply the experiment's " + faults + " (chaos events " + kinds +
                  ") here: dd-chaos sends them through the chaos endpoint (dd-node launch)");
}

bool check_chaos_endpoint_flags(const char* who, const std::pair<std::string, uint16_t>& endpoint,
                                bool via) {
  if (!via || !endpoint.first.empty()) return true;
  std::fprintf(stderr,
               "%s: --message-faults-via-endpoint needs --chaos-endpoint HOST:PORT (the faults "
               "would reach nobody)\n",
               who);
  return false;
}

void add_join_token_flag(util::flag_table& t, std::string* file, const std::string& role) {
  t.text("--join-token-file", file, "FILE",
         role +
             " The token is read from FILE (mode 0600, at least 16 bytes; dd-node launch "
             "writes RUN_DIR/join_token) or, without this flag, from the environment "
             "variable DD_JOIN_TOKEN; never from the command line");
}

bool read_join_token(const char* who, const std::string& file, std::string& token,
                     const std::string& fallback_file) {
  const char* env = std::getenv(actors::join_token_env);
  std::string from = file;
  if (from.empty() && (env == nullptr || *env == '\0') && !fallback_file.empty() &&
      ::access(fallback_file.c_str(), F_OK) == 0)
    from = fallback_file;
  auto t = actors::load_join_token(from, env);
  if (!t.error.empty()) {
    std::fprintf(stderr, "%s: %s\n", who, t.error.c_str());
    return false;
  }
  token = std::move(t.token);
  return true;
}

void add_tls_flags(util::flag_table& t, actors::tls_files* f, const std::string& role) {
  t.text("--tls-cert", &f->cert, "FILE",
         "this node's certificate (PEM) for mutual TLS (TLS 1.3); " + role +
             " Needs --tls-key and --tls-ca; docs/securing.md")
      .text("--tls-key", &f->key, "FILE", "the private key of --tls-cert (PEM)")
      .text("--tls-ca", &f->ca, "FILE", "the CA (PEM) that peers' certificates must be signed by");
}

bool load_tls(const char* who, const actors::tls_files& f, actors::tls_context::side s,
              std::shared_ptr<actors::tls_context>& out) {
  out.reset();
  if (!f.any()) return true;
  if (!f.all()) {
    std::fprintf(stderr, "%s: --tls-cert, --tls-key and --tls-ca go together\n", who);
    return false;
  }
  try {
    out = std::make_shared<actors::tls_context>(f, s);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", who, e.what());
    return false;
  }
  const auto& c = out->own();
  if (c.seconds_to_expiry < actors::cert_warn_s)
    std::fprintf(stderr, "%s: warning: --tls-cert '%s' (%s) expires in %.1f days\n", who,
                 f.cert.c_str(), c.subject.c_str(), c.seconds_to_expiry / 86400.0);
  return true;
}

static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free atomic");
std::atomic<int> g_node_interrupt{0};

namespace {
std::atomic<int> g_signals{0};
const char* g_who = "dd-node";

extern "C" void on_node_signal(int sig) {
  // Async-signal-safe only: lock-free atomics, write(2), _exit(2).
  if (g_signals.fetch_add(1) >= 1) {
    static const char msg[] = ": second signal, exiting at once\n";
    ssize_t a = ::write(STDERR_FILENO, g_who, std::strlen(g_who));
    ssize_t b = ::write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)a;
    (void)b;
    ::_exit(128 + sig);
  }
  g_node_interrupt.store(sig);
}
}  // namespace

void install_node_stop_handlers(const char* who) {
  g_who = who;
  struct sigaction sa {};
  sa.sa_handler = on_node_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

}  // namespace dd::app
