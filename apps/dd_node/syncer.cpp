// apps/dd_node/syncer.cpp — `dd-node syncer <experiment.lua> --listen HOST:PORT [flags]`: the
// syncer node of a cluster. Runs the job (budget, stop, final evaluation, summary), the
// health monitor, the fragment owners and the evaluator in this process, publishes the monitor
// on --listen, and prints the command a learner host runs to join. Learners run elsewhere
// (`dd-node learner`); their heartbeats are mirrored into this node's run directory, which
// tells the whole run's story (events.jsonl, summary.json).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <fmt/format.h>

#include "actors/nodes/job_runner.hpp"
#include "actors/nodes/memory_check.hpp"
#include "apps/dd_node/node_flags.hpp"
#include "apps/dd_node/run_lock.hpp"
#include "kernels/all_backends.hpp"
#include "runtime/config/loader.hpp"
#include "util/parse.hpp"

namespace dd::app {

namespace {

void print_syncer_help(FILE* f) {
  std::fprintf(
      f,
      "usage: dd-node syncer <experiment.lua> --listen HOST:PORT [--advertise HOST:PORT]\n"
      "                      [--run-dir DIR] [--resume | --overwrite] [--insecure]\n"
      "                      [--name N] [--set key=value]... [--progress S]\n"
      "                      [--heartbeat S] [--connection-timeout S] [--script-timeout S]\n"
      "                      [--chaos-endpoint HOST:PORT [--message-faults-via-endpoint]]\n"
      "                      [--max-frame-bytes N] [--stranger-bytes N]\n"
      "                      [--stranger-connections N] [--force-memory] [--http HOST:PORT]\n"
      "Runs the syncer node of a cluster: the job, the health monitor, one fragment owner\n"
      "per fragment and the evaluator. The monitor is published on --listen; learners join it\n"
      "with `dd-node learner --join ADVERTISED:PORT` (the exact command is printed).\n"
      "  --listen HOST:PORT     where to listen (port 0 = any free port; it is printed).\n"
      "                         A non-loopback address needs --insecure (no TLS yet: anyone who\n"
      "                         reaches the port can join).\n"
      "  --advertise HOST:PORT  the address learners are told to join (default: --listen, or\n"
      "                         this host's name when listening on 0.0.0.0); port 0 = the bound "
      "one\n"
      "  --run-dir DIR          run directory (default runs/<experiment>)\n"
      "  --resume               continue the unfinished run in the run directory: same run id,\n"
      "                         owners restored from their checkpoints, the monitor's record of\n"
      "                         every learner; the budget counts both parts\n"
      "  --overwrite            replace an unfinished run in the run directory\n"
      "  --name N, --set k=v    select an experiment of the file, override a key (as dd-node run)\n"
      "  --progress S           progress line every S seconds (default 5; 0 = off)\n"
      "  --script-timeout S     wall-clock limit of evaluating the experiment file (default 10)\n"
      "  --heartbeat S          middleman heartbeat period (default 1)\n"
      "  --connection-timeout S a peer silent this long is dropped (default 10)\n"
      "  --max-frame-bytes N    a connection announcing a larger CAF frame is closed before CAF\n"
      "                         allocates it, and a tensor channel frame above it closes its\n"
      "                         channel (default 4456448 = one 4 MiB chunk + 256 KiB; 0 = no\n"
      "                         guard and no tensor channel: every chunk goes on CAF)\n"
      "  --stranger-bytes N     frames announced by connections the syncer has not yet answered\n"
      "                         (strangers) and not yet complete may total N bytes; a frame past\n"
      "                         it closes its connection (default 67108864 = 64 MiB)\n"
      "  --stranger-connections N  strangers open at once; one more is closed (default 32).\n"
      "                         A stranger unanswered for 60 s is closed. Every connection the\n"
      "                         guard closes is a frame_refused event, counted in summary.json\n"
      "                         frames_refused\n"
      "  --force-memory         start even when the owners' and the evaluator's memory estimate\n"
      "                         (dd-node resolve prints it) exceeds the available memory or the\n"
      "                         address-space limit; without it that is refused (exit 2)\n"
      "  --http HOST:PORT       serve /metrics (Prometheus), /healthz, /readyz and /status\n"
      "                         (JSON) on this address (port 0 = any; printed); off by default.\n"
      "                         A non-loopback address needs --insecure (no authentication)\n"
      "  --chaos-endpoint HOST:PORT  serve message faults on broadcasts (dd-chaos msg) on this\n"
      "                         loopback address (port 0 = any; printed); off by default\n"
      "  --message-faults-via-endpoint  do not apply the experiment's broadcast faults (chaos\n"
      "                         events drop/dup/delay/reorder_broadcast) here: dd-chaos sends\n"
      "                         them through the chaos endpoint (dd-node launch)\n"
      "A run directory holding an unfinished run is refused without --resume or --overwrite.\n"
      "The run directory is locked while the syncer runs, and so is checkpoint.dir when it lies\n"
      "outside it: a second run on either exits with status 2.\n"
      "SIGINT/SIGTERM: learners stop at their next step, final evaluation, summary.json.\n"
      "Exit status: 0 ok; 1 runtime failure (summary.json \"failed\": true); 2 bad flags or\n"
      "configuration, port in use, a locked or unfinished run directory; 130/143 interrupted.\n");
}

}  // namespace

/// Entry point of `dd-node syncer`; argv[0] is "syncer".
int syncer_main(int argc, char** argv) {
  std::string file, run_dir, listen_text, advertise_text, chaos_text, http_text;
  bool resume = false, overwrite = false, insecure = false, messages_via_endpoint = false,
       force_memory = false;
  double progress = 5.0;
  actors::frame_guard_limits guard;
  actors::node_transport transport;
  config::load_options lo;
  flag_cursor f("dd-node syncer", argc, argv);
  auto value = [&](const char* flag) { return f.value(flag); };
  auto seconds = [&](const char* flag, double& out) { return f.seconds(flag, out); };
  while (f.next()) {
    const std::string a = f.arg();
    if (a == "--help" || a == "-h") {
      print_syncer_help(stdout);
      return 0;
    } else if (a == "--listen") {
      const char* v = value("--listen");
      if (v == nullptr) return 2;
      listen_text = v;
    } else if (a == "--advertise") {
      const char* v = value("--advertise");
      if (v == nullptr) return 2;
      advertise_text = v;
    } else if (a == "--chaos-endpoint") {
      const char* v = value("--chaos-endpoint");
      if (v == nullptr) return 2;
      chaos_text = v;
    } else if (a == "--http") {
      const char* v = value("--http");
      if (v == nullptr) return 2;
      http_text = v;
    } else if (a == "--run-dir") {
      const char* v = value("--run-dir");
      if (v == nullptr) return 2;
      run_dir = v;
    } else if (a == "--name") {
      const char* v = value("--name");
      if (v == nullptr) return 2;
      lo.names.emplace_back(v);
    } else if (a == "--set") {
      const char* v = value("--set");
      if (v == nullptr) return 2;
      lo.overrides.emplace_back(v);
    } else if (a == "--script-timeout") {
      const char* v = value("--script-timeout");
      std::string why;
      if (v == nullptr) return 2;
      if (!config::parse_script_timeout(v, lo.script_timeout, why)) {
        std::fprintf(stderr, "dd-node syncer: %s\n", why.c_str());
        return 2;
      }
    } else if (a == "--progress") {
      if (!seconds("--progress", progress)) return 2;
    } else if (a == "--heartbeat") {
      if (!seconds("--heartbeat", transport.heartbeat_s)) return 2;
    } else if (a == "--connection-timeout") {
      if (!seconds("--connection-timeout", transport.connection_timeout_s)) return 2;
    } else if (a == "--max-frame-bytes" || a == "--stranger-bytes" ||
               a == "--stranger-connections") {
      double d = 0;
      const char* v = value(a.c_str());
      if (v == nullptr) return 2;
      if (!parse_nonneg(v, d) || d > 4294967295.0 || d != static_cast<double>(uint64_t(d))) {
        std::fprintf(stderr, "dd-node syncer: %s needs a whole number in 0..4294967295, got '%s'\n",
                     a.c_str(), v);
        return 2;
      }
      const auto n = static_cast<uint64_t>(d);
      if (a == "--max-frame-bytes")
        guard.max_frame_bytes = n;
      else if (a == "--stranger-bytes")
        guard.stranger_bytes = n;
      else
        guard.stranger_connections = static_cast<size_t>(n);
    } else if (a == "--force-memory") {
      force_memory = true;
    } else if (a == "--resume") {
      resume = true;
    } else if (a == "--overwrite") {
      overwrite = true;
    } else if (a == "--insecure") {
      insecure = true;
    } else if (a == "--message-faults-via-endpoint") {
      messages_via_endpoint = true;
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "dd-node syncer: unknown flag '%s'\n", a.c_str());
      print_syncer_help(stderr);
      return 2;
    } else if (file.empty()) {
      file = a;
    } else {
      std::fprintf(stderr, "dd-node syncer: more than one experiment file given\n");
      return 2;
    }
  }
  if (file.empty() || listen_text.empty()) {
    std::fprintf(
        stderr, "dd-node syncer: %s\n",
        file.empty() ? "an experiment file is required" : "--listen HOST:PORT is required");
    print_syncer_help(stderr);
    return 2;
  }
  if (resume && overwrite) {
    std::fprintf(stderr, "dd-node syncer: --resume and --overwrite exclude each other\n");
    return 2;
  }
  std::pair<std::string, uint16_t> listen, advertise;
  std::string error;
  if (!parse_endpoint(listen_text, listen, error) ||
      (!advertise_text.empty() && !parse_endpoint(advertise_text, advertise, error))) {
    std::fprintf(stderr, "dd-node syncer: %s\n", error.c_str());
    return 2;
  }
  std::pair<std::string, uint16_t> chaos_ep;
  if (messages_via_endpoint && chaos_text.empty()) {
    std::fprintf(stderr,
                 "dd-node syncer: --message-faults-via-endpoint needs --chaos-endpoint HOST:PORT "
                 "(the faults would reach nobody)\n");
    return 2;
  }
  if (!chaos_text.empty()) {
    if (!parse_endpoint(chaos_text, chaos_ep, error)) {
      std::fprintf(stderr, "dd-node syncer: --chaos-endpoint: %s\n", error.c_str());
      return 2;
    }
    if (!is_loopback(chaos_ep.first)) {
      std::fprintf(stderr,
                   "dd-node syncer: --chaos-endpoint %s is not a loopback address; the chaos "
                   "endpoint listens on 127.0.0.1 only until nodes authenticate\n",
                   chaos_text.c_str());
      return 2;
    }
  }
  if (!is_loopback(listen.first) && !insecure) {
    std::fprintf(stderr,
                 "dd-node syncer: --listen %s is not a loopback address; without TLS anyone who "
                 "reaches it can join: add --insecure to listen there anyway\n",
                 listen_text.c_str());
    return 2;
  }
  std::pair<std::string, uint16_t> http;
  if (!http_text.empty() && !parse_http_flag("dd-node syncer", http_text, insecure, http)) return 2;
  lo.run_dir = run_dir;
  auto loaded = config::load_file(file, lo);
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s", loaded.error_text().c_str());
    return 2;
  }
  if (loaded.experiments.size() != 1) {
    std::fprintf(stderr, "dd-node syncer: %s defines %zu experiments; select one with --name\n",
                 file.c_str(), loaded.experiments.size());
    return 2;
  }
  const auto& exp = loaded.experiments.front();
  kernels::init_all_backends();
  try {
    actors::check_experiment_data(exp);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dd-node syncer: %s: %s\n", exp.name.c_str(), e.what());
    return 2;
  }
  if (auto why =
          actors::check_before_start(exp, actors::start_check_for::syncer_node, 0, force_memory);
      !why.empty()) {
    std::fprintf(stderr, "dd-node syncer: %s: %s\n", exp.name.c_str(), why.c_str());
    return 2;
  }
  const std::string dir = !run_dir.empty()       ? run_dir
                          : !exp.run_dir.empty() ? exp.run_dir
                                                 : "runs/" + exp.name;
  // The launcher holds the run directory's lock for its children (dd-node launch).
  // Its checkpoint directory too, when it lies outside the run directory (the owners delete
  // their fragments' old checkpoints as they start): the same rule as dd-node run.
  run_dir_lock lock, checkpoint_lock;
  const char* holder = std::getenv("DD_LAUNCH_LOCK_PID");
  int holder_pid = 0;
  if (holder == nullptr || !util::parse_number(holder, holder_pid) ||
      holder_pid != static_cast<int>(::getppid())) {
    lock = run_dir_lock::acquire(dir, error);
    if (!lock.held()) {
      std::fprintf(stderr, "dd-node syncer: %s\n", error.c_str());
      return 2;
    }
    if (!lock_checkpoint_dir(dir, exp.checkpoint.dir, checkpoint_lock, error)) {
      std::fprintf(stderr, "dd-node syncer: %s: checkpoint.dir: %s\n", exp.name.c_str(),
                   error.c_str());
      return 2;
    }
  }
  const auto state = inspect_run_dir(dir);
  if (state == run_dir_state::unfinished && !resume && !overwrite) {
    std::fprintf(stderr,
                 "dd-node syncer: run directory '%s' holds an unfinished run (no summary.json): "
                 "continue it with --resume, or replace it with --overwrite\n",
                 dir.c_str());
    return 2;
  }
  if (resume) {
    if (const auto why = why_not_resumable(dir); !why.empty()) {
      std::fprintf(stderr, "dd-node syncer: --resume: run directory '%s' holds %s\n", dir.c_str(),
                   why.c_str());
      return 2;
    }
    if (const auto why = experiment_change_on_resume(dir, config::to_json(exp)); !why.empty()) {
      std::fprintf(stderr, "dd-node syncer: --resume: run directory '%s' holds %s\n", dir.c_str(),
                   why.c_str());
      return 2;
    }
  }
  // A launcher's syncer finds the launcher's fresh nodes.json and logs/: the launcher cleared
  // the earlier run's files itself.
  if (!resume && lock.held()) {
    std::string names;
    for (const auto& n : clear_cluster_files(dir)) names += (names.empty() ? "" : ", ") + n;
    if (!names.empty())
      std::fprintf(stderr, "dd-node syncer: removed the earlier cluster run's %s from '%s'\n",
                   names.c_str(), dir.c_str());
  }
  install_node_stop_handlers("dd-node syncer");
  actors::run_options ro;
  ro.role = actors::node_role::syncer;
  ro.run_dir = run_dir;
  ro.progress_every_s = progress;
  ro.interrupt = &g_node_interrupt;
  ro.listen_host = listen.first == "0.0.0.0" ? std::string() : listen.first;
  ro.listen_port = listen.second;
  ro.resume = resume;
  ro.transport = transport;
  ro.chaos_endpoint = chaos_ep;
  ro.message_faults_via_endpoint = messages_via_endpoint;
  ro.http = http;
  ro.guard = guard;
  const int M = exp.learners.count;
  ro.on_published = [&](uint16_t port) {
    std::string host = advertise_text.empty() ? listen.first : advertise.first;
    if (host.empty() || host == "0.0.0.0") {
      char buf[256] = {0};
      host = ::gethostname(buf, sizeof buf - 1) == 0 ? buf : "localhost";
    }
    const uint16_t adv_port =
        advertise_text.empty() || advertise.second == 0 ? port : advertise.second;
    if (lock.held()) {
      std::printf(
          "dd-node syncer: %s: listening on %s:%u; %d learner%s expected\n"
          "  on each learner host run:  dd-node learner --join %s:%u --learners N "
          "--node-name NAME --run-dir %s/nodes/NAME\n"
          "  (N learners in that process, %d in all; --run-dir keeps the node's events with "
          "this run on this host)\n",
          exp.name.c_str(), listen.first.c_str(), port, M, M == 1 ? "" : "s", host.c_str(),
          adv_port, dir.c_str(), M);
    } else {  // under dd-node launch, which starts the learner processes itself
      std::printf(
          "dd-node syncer: %s: listening on %s:%u; %d learner%s expected (dd-node launch "
          "starts them)\n",
          exp.name.c_str(), listen.first.c_str(), port, M, M == 1 ? "" : "s");
    }
    std::fflush(stdout);
  };
  actors::run_result r;
  try {
    r = actors::run_job(exp, ro);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dd-node syncer: %s: %s\n", exp.name.c_str(), e.what());
    return 1;
  }
  // A readable summary; every key is in <run_dir>/summary.json. Under dd-node launch the nodes'
  // logs are in <run_dir>/logs.
  {
    std::error_code ec;
    const std::string logs = (std::filesystem::path(dir) / "logs").string();
    std::printf("%s", actors::summary_text(exp.name, r, dir,
                                           std::filesystem::is_directory(logs, ec) ? logs : "")
                          .c_str());
  }
  std::fflush(stdout);
  if (const int sig = g_node_interrupt.load(); sig != 0) return 128 + sig;
  if (r.failed) {
    std::fprintf(stderr, "dd-node syncer: %s failed: %s\n", exp.name.c_str(),
                 r.failure_reason.c_str());
    return 1;
  }
  return 0;
}

}  // namespace dd::app
