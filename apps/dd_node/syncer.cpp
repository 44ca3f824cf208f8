// apps/dd_node/syncer.cpp — `dd-node syncer <experiment.lua> --listen HOST:PORT [flags]`: the
// syncer node of a cluster. Runs the job (budget, stop, final evaluation, summary), the
// health monitor, the fragment owners and the evaluator in this process, publishes the monitor
// on --listen, and prints the command a learner host runs to join. Learners run elsewhere
// (`dd-node learner`); their heartbeats are mirrored into this node's run directory, which
// tells the whole run's story (events.jsonl, summary.json).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "actors/nodes/job_runner.hpp"
#include "actors/nodes/memory_check.hpp"
#include "apps/dd_node/job_output.hpp"
#include "apps/dd_node/node_flags.hpp"
#include "apps/dd_node/run_lock.hpp"
#include "kernels/all_backends.hpp"
#include "runtime/config/loader.hpp"
#include "util/flags.hpp"
#include "util/net.hpp"

namespace dd::app {

namespace {

/// The flags of `dd-node syncer`, and what the checks made of them. The run's options are
/// parsed straight into `ro`; syncer_run_options adds the rest.
struct syncer_options {
  experiment_args ea;
  actors::run_options ro;
  std::string listen_text, advertise_text, http_text, token_file;
  std::pair<std::string, uint16_t> listen, advertise;
  bool insecure = false, force_memory = false;
  actors::tls_files tls_files;
  // From the flags, once checked.
  run_dir_mode mode{};
};

/// Parses `dd-node syncer`'s flags into `o` (help generated from the same table); the exit
/// status when the command ends here (--help, a bad flag, an unreadable join token, no
/// --listen).
std::optional<int> parse_syncer_flags(int argc, char** argv, syncer_options& o) {
  util::flag_table t(
      "dd-node syncer", "EXP --listen HOST:PORT [flags]",
      "Runs the syncer node of a cluster: the job, the health monitor, one fragment owner\n"
      "per fragment and the evaluator. The monitor is published on --listen; learners join it\n"
      "with `dd-node learner --join ADVERTISED:PORT` (the exact command is printed).");
  add_experiment_flags(t, o.ea);
  t.custom("--listen", "HOST:PORT",
           "where to listen (port 0 = any free port; it is printed). A non-loopback address "
           "needs TLS (--tls-cert, --tls-key, --tls-ca) or --insecure",
           [&o](const std::string& v) {
             o.listen_text = v;
             return endpoint_value(&o.listen)(v);
           })
      .custom("--advertise", "HOST:PORT",
              "the address learners are told to join (default: --listen, or this host's name "
              "when listening on 0.0.0.0); port 0 = the bound one",
              [&o](const std::string& v) {
                o.advertise_text = v;
                return endpoint_value(&o.advertise)(v);
              })
      .toggle("--insecure", &o.insecure,
              "listen on a non-loopback address without TLS (anyone who reaches it can read the "
              "run's traffic; the join token still decides who joins)")
      .seconds("--progress", &o.ro.progress_every_s,
               "progress line every S seconds (default 5; 0 = off)");
  add_transport_flags(t, o.ro.transport);
  t.count("--max-frame-bytes", &o.ro.guard.max_frame_bytes, uint64_t{0}, uint64_t{4294967295}, "N",
          "a connection announcing a larger CAF frame is closed before CAF allocates it, and "
          "a tensor channel frame above it closes its channel (default 4456448 = one 4 MiB "
          "chunk + 256 KiB; 0 = no guard and no tensor channel: every chunk goes on CAF)")
      .count("--stranger-bytes", &o.ro.guard.stranger_bytes, uint64_t{0}, uint64_t{4294967295}, "N",
             "frames announced by connections the syncer has not yet answered (strangers) and "
             "not yet complete may total N bytes; a frame past it closes its connection "
             "(default 67108864 = 64 MiB)")
      .count("--stranger-connections", &o.ro.guard.stranger_connections, size_t{0},
             size_t{4294967295}, "N",
             "strangers open at once; one more is closed (default 32). A stranger unanswered "
             "for 60 s is closed. Every connection the guard closes is a frame_refused event, "
             "counted in summary.json frames_refused");
  add_force_memory_flag(t, &o.force_memory, "the owners' and the evaluator's memory estimate",
                        "that is refused (exit 2)");
  add_http_flag(t, &o.http_text, "A non-loopback address needs --insecure (no authentication)");
  add_chaos_endpoint_flags(t, &o.ro.chaos_endpoint, &o.ro.message_faults_via_endpoint,
                           "broadcast faults", "drop/dup/delay/reorder_broadcast");
  add_join_token_flag(t, &o.token_file,
                      "the run's join token: a learner node's handshake and tensor channel, "
                      "dd-node drain and the chaos endpoint must prove it (HMAC over a fresh "
                      "challenge); without one anyone who reaches --listen can join.");
  add_tls_flags(t, &o.tls_files,
                "every connection to --listen is then TLS with a client certificate signed by "
                "--tls-ca (a learner node's names the learner ids it may take: learner-N), "
                "and this certificate must name `syncer`.");
  t.epilog(
      "A run directory holding an unfinished or interrupted run is refused without --resume\n"
      "or --overwrite.\n"
      "The run directory is locked while the syncer runs, and so is checkpoint.dir when it\n"
      "lies outside it: a second run on either exits with status 2.\n"
      "SIGINT/SIGTERM: learners stop at their next step, final evaluation, summary.json.\n"
      "Exit status: 0 ok; 1 runtime failure (summary.json \"failed\": true); 2 bad flags or\n"
      "configuration, port in use, a locked or unfinished run directory; 130/143 "
      "interrupted.\n");
  if (auto rc = t.parse(argc, argv)) return rc;
  if (!read_join_token("dd-node syncer", o.token_file, o.ro.join_token)) return 2;
  if (o.listen_text.empty()) {
    std::fprintf(stderr, "dd-node syncer: --listen HOST:PORT is required\n");
    t.print_help(stderr);
    return 2;
  }
  return std::nullopt;
}

/// The flags that must go together: --resume/--overwrite, --message-faults-via-endpoint with
/// --chaos-endpoint, TLS files that load and name the syncer (and the frame guard under them),
/// a non-loopback --listen only with TLS or --insecure, --http. False after one line on stderr.
bool check_syncer_flags(syncer_options& o) {
  if (!o.ea.mode("dd-node syncer", o.mode)) return false;
  if (!check_chaos_endpoint_flags("dd-node syncer", o.ro.chaos_endpoint,
                                  o.ro.message_faults_via_endpoint))
    return false;
  if (!load_tls("dd-node syncer", o.tls_files, actors::tls_context::side::server, o.ro.tls))
    return false;
  if (o.ro.tls) {
    const auto& names = o.ro.tls->own().names;
    if (std::find(names.begin(), names.end(), actors::syncer_cert_name) == names.end()) {
      std::fprintf(stderr,
                   "dd-node syncer: --tls-cert '%s' does not name '%s' (its CN or a DNS "
                   "subjectAltName): learner nodes would refuse it\n",
                   o.tls_files.cert.c_str(), actors::syncer_cert_name);
      return false;
    }
    if (o.ro.guard.max_frame_bytes == 0) {
      std::fprintf(stderr, "dd-node syncer: TLS needs the frame guard (--max-frame-bytes > 0)\n");
      return false;
    }
  }
  if (!is_loopback(o.listen.first) && !o.insecure && !o.ro.tls) {
    std::fprintf(stderr,
                 "dd-node syncer: --listen %s is not a loopback address; give it TLS "
                 "(--tls-cert, --tls-key, --tls-ca; docs/securing.md) or add --insecure to "
                 "listen there in the clear\n",
                 o.listen_text.c_str());
    return false;
  }
  return o.http_text.empty() ||
         parse_http_flag("dd-node syncer", o.http_text, o.insecure, o.ro.http);
}

/// The syncer's published: the command a learner host runs to join (or, under dd-node launch,
/// which starts the learner processes itself, that they are expected).
void print_join_command(const syncer_options& o, const config::experiment& exp,
                        const std::string& dir, bool own_lock, uint16_t port) {
  const int M = exp.learners.count;
  std::string host = o.advertise_text.empty() ? o.listen.first : o.advertise.first;
  if (host.empty() || host == "0.0.0.0") {
    char buf[256] = {0};
    host = ::gethostname(buf, sizeof buf - 1) == 0 ? buf : "localhost";
  }
  const uint16_t adv_port =
      o.advertise_text.empty() || o.advertise.second == 0 ? port : o.advertise.second;
  if (own_lock) {
    std::printf(
        "dd-node syncer: %s: listening on %s:%u; %d learner%s expected\n"
        "  on each learner host run:  dd-node learner --join %s:%u --learners N "
        "--node-name NAME --run-dir %s/nodes/NAME%s%s\n"
        "  (N learners in that process, %d in all; --run-dir keeps the node's events with "
        "this run on this host)\n",
        exp.name.c_str(), o.listen.first.c_str(), port, M, M == 1 ? "" : "s", host.c_str(),
        adv_port, dir.c_str(),
        o.ro.tls ? " --tls-cert NODE.pem --tls-key NODE.key --tls-ca CA.pem" : "",
        o.ro.join_token.empty() ? "" : " --join-token-file TOKEN_FILE", M);
  } else {
    std::printf(
        "dd-node syncer: %s: listening on %s:%u; %d learner%s expected (dd-node launch "
        "starts them)\n",
        exp.name.c_str(), o.listen.first.c_str(), port, M, M == 1 ? "" : "s");
  }
  std::fflush(stdout);
}

/// Why HOST:PORT cannot be listened on now (util::listen_tcp's "cannot listen on HOST:PORT:
/// ..."), or empty: it can, or port 0 (any). Asked before the run directory is written, so a
/// port in use leaves no unfinished run behind that a retry on another port would have to
/// --resume or --overwrite.
std::string port_refusal(const std::string& host, uint16_t port) {
  if (port == 0) return {};
  std::string why;
  const int fd = util::listen_tcp(host, port, nullptr, /*nonblocking=*/false, why);
  if (fd < 0) return why;
  ::close(fd);
  return {};
}

/// What run_job gets from the flags: the syncer role, listening and serving as asked.
actors::run_options syncer_run_options(const syncer_options& o) {
  actors::run_options ro = o.ro;
  ro.role = actors::node_role::syncer;
  o.ea.apply(ro);
  ro.listen_host = o.listen.first == "0.0.0.0" ? std::string() : o.listen.first;
  ro.listen_port = o.listen.second;
  return ro;
}

}  // namespace

/// Entry point of `dd-node syncer`; argv[0] is "syncer".
int syncer_main(int argc, char** argv) {
  syncer_options o;
  if (auto rc = parse_syncer_flags(argc, argv, o)) return *rc;
  if (!check_syncer_flags(o)) return 2;
  config::load_result loaded;
  if (!o.ea.load_experiments("dd-node syncer", /*single=*/true, loaded)) return 2;
  const auto& exp = loaded.experiments.front();
  kernels::init_all_backends();
  if (auto why = actors::check_startable(exp, actors::start_check_for::syncer_node, o.force_memory);
      !why.empty()) {
    std::fprintf(stderr, "dd-node syncer: %s: %s\n", exp.name.c_str(), why.c_str());
    return 2;
  }
  std::string taken = port_refusal(o.listen.first, o.listen.second);
  if (taken.empty() && !o.ro.http.first.empty())  // an empty host: --http off
    if (auto why = port_refusal(o.ro.http.first, o.ro.http.second); !why.empty())
      taken = "--http: " + why;
  if (!taken.empty()) {
    std::fprintf(stderr, "dd-node syncer: %s (nothing written)\n", taken.c_str());
    return 2;
  }
  // Under dd-node launch the launcher holds the locks and has cleared the earlier run's files.
  run_dir_opener dirs("dd-node syncer", o.mode);
  if (!dirs.open(exp)) return 2;
  dirs.begin();
  const std::string dir = dirs.dir();
  const bool own_lock = !run_dir_opener::lock_held_by_parent();
  install_node_stop_handlers("dd-node syncer");
  actors::run_options ro = syncer_run_options(o);
  ro.on_published = [&](uint16_t port) { print_join_command(o, exp, dir, own_lock, port); };
  const auto ran = run_job_or_say("dd-node syncer", exp, ro);
  if (!ran) return 1;
  const actors::run_result& r = *ran;
  // Under dd-node launch the nodes' logs are in <run_dir>/logs.
  std::error_code ec;
  const std::string logs = (std::filesystem::path(dir) / "logs").string();
  const bool failed = report_job_result("dd-node syncer", exp.name, r, dir,
                                        std::filesystem::is_directory(logs, ec) ? logs : "");
  if (const int sig = g_node_interrupt.load(); sig != 0) return 128 + sig;
  return failed ? 1 : 0;
}

}  // namespace dd::app
