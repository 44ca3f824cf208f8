// apps/dd_node/launch.cpp — `dd-node launch <experiment.lua> [flags]`: the local launcher. Starts
// one syncer process and M learner processes on this host (each a real `dd-node syncer` /
// `dd-node learner` process talking over loopback TCP), supervises them as processes, and keeps
// a control socket and the nodes file that other tools (dd-chaos, dd-node status) use.
//
// Supervision (docs/operating.md "Who restarts what"):
//   a learner process that dies (non-zero exit or any signal) is started again at once — or when
//   a `hold` placed on it expires — under a per-node restart budget (10 in 60 s); one that left
//   cleanly (exit 0) or was refused for good (exit 2..6: another run, protocol, data) is not;
//   the syncer process that dies is started again with --resume after --syncer-restart-delay,
//   unless it exited 1 or 2 (a failed run, bad flags: a result, not a crash);
//   when the syncer exits 0 the run is over: learners still running after 20 s get SIGTERM.
// Ctrl-C / SIGTERM: forwarded as that signal to the syncer (or every child when the syncer is
// down; graceful: the syncer stops the learners and writes summary.json); a second signal
// SIGKILLs the whole tree. Children run in their own
// process group, so only the launcher decides what they receive.
//
//   nodes file  <run_dir>/nodes.json, rewritten atomically on every start, exit and state change
//   logs        <run_dir>/logs/<node>.log (stdout and stderr of each process, appended)
//   control     TCP 127.0.0.1:<port>, one request line, one JSON reply line:
//               hold NODE SECONDS | release NODE | restart NODE | status
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "actors/link/join_auth.hpp"
#include "actors/link/tls.hpp"
#include "actors/nodes/job_runner.hpp"
#include "actors/nodes/memory_check.hpp"
#include "actors/policy/restart_budget.hpp"
#include "actors/services/host_admission.hpp"
#include "actors/services/node_metrics.hpp"
#include "apps/dd_node/control_socket.hpp"
#include "apps/dd_node/node_flags.hpp"
#include "apps/dd_node/process_supervisor.hpp"
#include "apps/dd_node/run_lock.hpp"
#include "apps/dd_node/slurm_script.hpp"
#include "runtime/config/loader.hpp"
#include "runtime/config/run_dir_default.hpp"
#include "runtime/nodes_file.hpp"
#include "util/build_info.hpp"
#include "util/files.hpp"
#include "util/net.hpp"

namespace dd::app {

namespace fs = std::filesystem;

namespace {

std::string self_exe() {
  std::error_code ec;
  auto p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("dd-node") : p.string();
}

/// Writes `text` to a new file at `path` readable by its owner only (0600; an existing one is
/// replaced). False with `why`.
bool write_secret_file(const std::string& path, const std::string& text, std::string& why) {
  ::unlink(path.c_str());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    why = fmt::format("cannot create {}: {}", path, std::strerror(errno));
    return false;
  }
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
                  ::fsync(fd) == 0;
  ::close(fd);
  if (!ok) why = fmt::format("cannot write {}: {}", path, std::strerror(errno));
  return ok;
}

volatile sig_atomic_t g_launch_signals = 0;
volatile sig_atomic_t g_launch_first = 0;
extern "C" void on_launch_signal(int sig) {
  if (g_launch_signals == 0) g_launch_first = sig;
  g_launch_signals = g_launch_signals + 1;
}

}  // namespace

/// Entry point of `dd-node launch`; argv[0] is "launch".
int launch_main(int argc, char** argv) {
  experiment_args ea;
  int processes = 0;
  double delay = 2.0, progress = 5.0, backoff_cap = 5.0;
  double heartbeat = -1, conn_timeout = -1;
  int compute_nice = -1;
  bool via_proxy = false, no_admission = false, force_memory = false, no_http = false;
  bool slurm = false, dry_run = false, tls_on = false;
  std::string http_text, token_file;
  int port_flag = 0;
  util::flag_table flags(
      "dd-node launch", "EXP [flags]",
      "Starts the experiment as a cluster of processes on this host: one `dd-node syncer` and P\n"
      "`dd-node learner` processes (default one per learner), over loopback TCP, and supervises\n"
      "them: a learner process that dies is started again at once, the syncer after\n"
      "--syncer-restart-delay with --resume; a process that left cleanly, a learner that exited\n"
      "2-7 and a syncer that exited 1 or 2 (a result: failed run, bad flags) are not restarted.\n"
      "--name, --set and --script-timeout are passed on to the syncer (and dd-chaos).");
  add_experiment_flags(flags, ea);
  flags
      .count("--learner-processes", &processes, 1, 4096, "P",
             "learner processes (learner ids dealt round-robin; default M)")
      .seconds("--syncer-restart-delay", &delay, "wait before restarting a dead syncer (default 2)")
      .count("--port", &port_flag, 0, 65535, "PORT", "the syncer's port (default: a free one)")
      .toggle("--via-proxy", &via_proxy,
              "route every learner process's link through a `dd-chaos proxy` (links learner-N, "
              "for network faults); supervised too")
      .toggle("--no-step-admission", &no_admission,
              "no host-wide step admission (learner processes then share the cores as the OS "
              "schedules them)")
      .seconds("--progress", &progress,
               "the syncer's progress line every S seconds (default 5; 0 = off)")
      .seconds("--learner-backoff-cap", &backoff_cap,
               "longest wait between a learner's reconnection attempts (default 5)")
      .seconds("--heartbeat", &heartbeat, "every node's middleman heartbeat period (default 1)")
      .seconds("--connection-timeout", &conn_timeout,
               "every node drops a peer silent this long (default 10)")
      .count("--compute-nice", &compute_nice, 0, 19, "N",
             "the learner processes' --compute-nice (default 0)")
      .toggle("--force-memory", &force_memory,
              "start even when the memory estimate of the syncer and the learners (dd-node "
              "resolve prints it) exceeds this host's available memory or address-space limit "
              "(passed on to them); without it that is refused (exit 2)")
      .text("--http", &http_text, "HOST:PORT",
            "the launcher's own HTTP listener (/metrics: its nodes' state and starts; /status; "
            "/healthz; /readyz) on this loopback address (default 127.0.0.1:0 = a free port, "
            "printed). Every node also serves /metrics, /healthz, /readyz and /status on a free "
            "loopback port of its own (nodes.json: endpoints.http)")
      .toggle("--no-http", &no_http, "no HTTP listener in the launcher nor in its nodes")
      .toggle("--slurm", &slurm,
              "with --dry-run: print an sbatch file that runs this cluster as one Slurm job "
              "(syncer on the first node, one step per learner process round-robin over the "
              "nodes, each restarted in place; SIGTERM 120 s before the time limit stops the run "
              "and requeues the job, which resumes it); starts nothing. --port fixes the "
              "syncer's port (default 20000 + job id mod 20000). docs/deploying.md")
      .toggle("--dry-run", &dry_run, "with --slurm: print the script only");
  flags.toggle("--tls", &tls_on,
               "mutual TLS between the nodes: a throwaway CA and certificates in RUN_DIR/tls "
               "(syncer, one per learner process naming its learner ids, operator for dd-node "
               "status/drain), passed to every node as --tls-cert/--tls-key/--tls-ca");
  add_join_token_flag(flags, &token_file,
                      "the run's join token, passed to the syncer and every learner process as "
                      "this file (default: a fresh one written to RUN_DIR/join_token, mode 0600; "
                      "a --resume keeps the run directory's); the control socket's hold, "
                      "release and restart ask for it too.");
  flags.epilog(
      "The launcher locks the run directory, and checkpoint.dir when it lies outside it, for\n"
      "its children: a second run on either exits with status 2.\n"
      "Files: <run_dir>/nodes.json (every process: role, actors, pid, start time, argv,\n"
      "addresses, incarnation, log), <run_dir>/logs/<node>.log; the control socket's address\n"
      "is in the nodes file: `hold NODE SECONDS`, `release NODE`, `restart NODE`, `status`\n"
      "(one line each).\n"
      "Ctrl-C stops the whole tree gracefully (a second one kills it). Exit status: the\n"
      "syncer's (0 ok, 1 failed run, 2 bad flags/config/locked run directory, 130/143\n"
      "interrupted).\n");
  if (auto rc = flags.parse(argc, argv)) return *rc;
  std::string join_token;
  if (!read_join_token("dd-node launch", token_file, join_token)) return 2;
  const bool http_on = !no_http;
  std::pair<std::string, uint16_t> http{"127.0.0.1", 0};
  if (!http_text.empty() && !parse_http_flag("dd-node launch", http_text, false, http)) return 2;
  const std::string& file = ea.file();
  run_dir_mode mode{};
  if (!ea.mode("dd-node launch", mode)) return 2;
  const bool resume = ea.resume;
  const bool admission = !no_admission;
  const std::vector<std::string> passthrough = ea.passthrough();
  auto port = static_cast<uint16_t>(port_flag);
  config::load_result loaded;
  if (!ea.load_experiments("dd-node launch", /*single=*/true, loaded)) return 2;
  const auto& exp = loaded.experiments.front();
  const int M = exp.learners.count;
  if (processes <= 0) processes = M;
  if (processes > M) {
    std::fprintf(stderr, "dd-node launch: --learner-processes %d is more than the %d learners\n",
                 processes, M);
    return 2;
  }
  // The syncer's own check, before any process starts or the run directory is touched (it
  // once started the syncer, which refused, while the learners spun on "connection refused").
  try {
    actors::check_experiment_data(exp);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dd-node launch: %s: %s\n", exp.name.c_str(), e.what());
    return 2;
  }
  if (auto why = actors::check_before_start(exp, actors::start_check_for::launch, 0, force_memory);
      !why.empty()) {
    std::fprintf(stderr, "dd-node launch: %s: %s\n", exp.name.c_str(), why.c_str());
    return 2;
  }
  if (slurm || dry_run) {
    if (!slurm || !dry_run || ea.resume || ea.overwrite || via_proxy) {
      std::fprintf(stderr,
                   "dd-node launch: --slurm and --dry-run go together (the script is "
                   "printed, sbatch submits it), without --resume, --overwrite (the "
                   "script resumes an unfinished run itself) and --via-proxy\n");
      return 2;
    }
    const std::string run_dir =
        !ea.load.run_dir.empty() ? ea.load.run_dir : config::run_dir_of(exp);
    slurm_script_options so;
    so.dd_node = self_exe();
    so.experiment = fs::absolute(file).lexically_normal().string();
    so.experiment_name = exp.name;
    so.run_dir = fs::absolute(run_dir).lexically_normal().string();
    so.experiment_flags = passthrough;
    if (heartbeat >= 0)
      so.node_flags.insert(so.node_flags.end(), {"--heartbeat", fmt::format("{}", heartbeat)});
    if (conn_timeout >= 0)
      so.node_flags.insert(so.node_flags.end(),
                           {"--connection-timeout", fmt::format("{}", conn_timeout)});
    if (force_memory) so.node_flags.push_back("--force-memory");
    so.learner_ids = deal_learner_ids(M, processes);
    so.port = port;
    so.syncer_restart_delay_s = delay;
    so.progress_s = progress;
    so.learner_backoff_cap_s = backoff_cap;
    so.tls = tls_on;
    std::fputs(slurm_script(so).c_str(), stdout);
    return 0;
  }
  // A network fault needs the fault proxy: refused before the run directory is touched.
  for (size_t i = 0; i < exp.chaos.events.size(); ++i) {
    const auto& ev = exp.chaos.events[i];
    if (config::fault_layer_of(ev.action) == config::fault_layer::network && !via_proxy) {
      std::fprintf(stderr,
                   "%s: chaos.events[%zu]: action '%s' faults a link through the fault proxy: "
                   "add --via-proxy\n",
                   ev.where.c_str(), i + 1, config::dsl_name(ev.action));
      return 2;
    }
  }
  // The launcher holds the run directory's lock (and checkpoint.dir's) for its children across
  // restarts: the syncer sees DD_LAUNCH_LOCK_PID.
  run_dir_opener dirs("dd-node launch", mode);
  if (!dirs.open(exp)) return 2;
  dirs.begin();
  const std::string dir = dirs.dir();
  ::setenv("DD_LAUNCH_LOCK_PID", std::to_string(::getpid()).c_str(), 1);
  // The join token: the one given, else the run directory's (a resumed run keeps it), else a
  // fresh one written there (mode 0600). The children read it from the file, never argv.
  std::string token_path = token_file;
  if (token_path.empty() && join_token.empty()) {
    token_path = (fs::path(dir) / actors::join_token_file_name).string();
    std::string why;
    if (!resume || !read_join_token("dd-node launch", token_path, join_token) ||
        join_token.empty()) {
      join_token = actors::make_join_token();
      if (!write_secret_file(token_path, join_token + "\n", why)) {
        std::fprintf(stderr, "dd-node launch: %s\n", why.c_str());
        return 1;
      }
    }
  }
  if (!token_path.empty()) ::unsetenv(actors::join_token_env);

  process_supervisor L;
  L.run_dir = dir;
  if (!resume) L.stale_run_id = L.current_run_id();
  L.syncer_delay_s = delay;
  L.join_token = join_token;
  L.control_fd = util::listen_loopback(0, &L.control_port, /*nonblocking=*/true);
  if (L.control_fd < 0) {
    std::fprintf(stderr, "dd-node launch: cannot open the control socket: %s\n",
                 std::strerror(errno));
    return 1;
  }
  if (port == 0) port = util::free_loopback_port();
  const std::string exe = self_exe();
  const std::string syncer_addr = fmt::format("127.0.0.1:{}", port);
  // Host-wide step admission: cores / threads per learner slots for all learner processes.
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const int threads =
      exp.learners.threads > 0 ? exp.learners.threads : std::max(1, static_cast<int>(hw) / M);
  std::optional<actors::host_admission> gate;
  if (admission && M > 1) {
    const unsigned slots = std::max(1u, hw / static_cast<unsigned>(threads));
    if (slots < static_cast<unsigned>(M)) {
      try {
        gate.emplace(actors::host_admission::create(slots));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "dd-node launch: %s (continuing without host step admission)\n",
                     e.what());
      }
    }
  }
  // Mutual TLS: a CA and certificates of this run (a --resume signs new ones with its CA).
  const std::string tls_dir = (fs::path(dir) / "tls").string();
  if (tls_on) {
    std::error_code ec;
    if (!resume) fs::remove_all(tls_dir, ec);
    std::vector<actors::cert_request> reqs = {{"syncer", {actors::syncer_cert_name}},
                                              {"operator", {"operator"}}};
    for (int k = 0; k < processes; ++k) {
      actors::cert_request r{fmt::format("learner-{}", k), {}};
      for (int i = k; i < M; i += processes) r.names.push_back(fmt::format("learner-{}", i));
      reqs.push_back(std::move(r));
    }
    try {
      actors::make_certs(tls_dir, reqs);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "dd-node launch: %s\n", e.what());
      return 1;
    }
  }
  auto tls_flags = [&](std::vector<std::string>& v, const std::string& stem) {
    if (!tls_on) return;
    v.insert(v.end(), {"--tls-cert", (fs::path(tls_dir) / (stem + ".pem")).string(), "--tls-key",
                       (fs::path(tls_dir) / (stem + ".key")).string(), "--tls-ca",
                       (fs::path(tls_dir) / "ca.pem").string()});
  };
  auto extra = [&](std::vector<std::string>& v) {
    if (!token_path.empty()) v.insert(v.end(), {"--join-token-file", token_path});
    if (heartbeat >= 0) v.insert(v.end(), {"--heartbeat", fmt::format("{}", heartbeat)});
    if (force_memory) v.push_back("--force-memory");
    if (conn_timeout >= 0)
      v.insert(v.end(), {"--connection-timeout", fmt::format("{}", conn_timeout)});
  };
  const std::string logs = (fs::path(dir) / "logs").string();
  // The syncer.
  {
    node_proc s;
    s.name = "syncer";
    s.role = "syncer";
    s.actors = {"monitor", "evaluator"};
    for (int p = 0; p < exp.sync.fragments; ++p) s.actors.push_back(fmt::format("owner:{}", p));
    s.argv = {exe,        "syncer",     file,
              "--listen", syncer_addr,  "--run-dir",
              dir,        "--progress", fmt::format("{}", progress)};
    s.argv.insert(s.argv.end(), passthrough.begin(), passthrough.end());
    extra(s.argv);
    tls_flags(s.argv, "syncer");
    if (ea.overwrite) s.argv.push_back("--overwrite");
    // Every node serves message faults on a loopback port of its own (dd-chaos msg).
    s.chaos_port = util::free_loopback_port();
    s.argv.insert(s.argv.end(), {"--chaos-endpoint", fmt::format("127.0.0.1:{}", s.chaos_port),
                                 "--message-faults-via-endpoint"});
    if (http_on) {
      s.http_port = util::free_loopback_port();
      s.argv.insert(s.argv.end(), {"--http", fmt::format("127.0.0.1:{}", s.http_port)});
    }
    s.listen = s.advertise = syncer_addr;
    s.log = (fs::path(logs) / "syncer.log").string();
    L.nodes.push_back(std::move(s));
  }
  // Learner processes; ids dealt round-robin.
  std::vector<std::string> link_ports(static_cast<size_t>(processes));
  for (int k = 0; k < processes; ++k)
    link_ports[static_cast<size_t>(k)] =
        via_proxy ? fmt::format("127.0.0.1:{}", util::free_loopback_port()) : syncer_addr;
  if (via_proxy) {
    node_proc p;
    p.name = "proxy";
    p.role = "proxy";
    const std::string chaos = (fs::path(exe).parent_path() / "dd-chaos").string();
    p.argv = {chaos,          "proxy",
              "--control",    fmt::format("127.0.0.1:{}", util::free_loopback_port()),
              "--ports-file", (fs::path(dir) / "proxy-ports.json").string()};
    for (int k = 0; k < processes; ++k)
      p.argv.insert(p.argv.end(),
                    {"--link", fmt::format("learner-{}={}->{}", k,
                                           link_ports[static_cast<size_t>(k)], syncer_addr)});
    p.log = (fs::path(logs) / "proxy.log").string();
    L.proxy_ports = nlohmann::json{{"control", p.argv[3]}};
    L.nodes.push_back(std::move(p));
  }
  for (int k = 0; k < processes; ++k) {
    node_proc n;
    n.name = fmt::format("learner-{}", k);
    n.role = "learner";
    std::string ids;
    for (int i = k; i < M; i += processes) {
      ids += (ids.empty() ? "" : ",") + std::to_string(i);
      n.actors.push_back(fmt::format("learner:{}", i));
    }
    n.argv = {exe,
              "learner",
              "--join",
              link_ports[static_cast<size_t>(k)],
              "--learner-ids",
              ids,
              "--node-name",
              n.name,
              "--threads",
              std::to_string(threads),
              "--run-dir",
              (fs::path(dir) / "nodes" / n.name).string(),
              "--progress",
              fmt::format("{}", progress * 2),
              "--backoff-cap",
              fmt::format("{}", backoff_cap)};
    if (gate) n.argv.insert(n.argv.end(), {"--step-admission", gate->spec()});
    tls_flags(n.argv, n.name);
    n.chaos_port = util::free_loopback_port();
    n.argv.insert(n.argv.end(), {"--chaos-endpoint", fmt::format("127.0.0.1:{}", n.chaos_port),
                                 "--message-faults-via-endpoint"});
    if (http_on) {
      n.http_port = util::free_loopback_port();
      n.argv.insert(n.argv.end(), {"--http", fmt::format("127.0.0.1:{}", n.http_port)});
    }
    extra(n.argv);
    if (compute_nice >= 0)
      n.argv.insert(n.argv.end(), {"--compute-nice", std::to_string(compute_nice)});
    n.log = (fs::path(logs) / (n.name + ".log")).string();
    L.nodes.push_back(std::move(n));
  }
  // The chaos section's process, network, disk and message faults (and whole-cluster random
  // faults) are fired by a `dd-chaos run` session started after the nodes, the message kinds
  // through the nodes' chaos endpoints (and taped like every other fault); the other in-process
  // kinds (kill, slow, kill_owner, chaos.random.mtbf_seconds) the nodes apply themselves.
  {
    bool outside = exp.chaos.random.cluster_mtbf_seconds > 0;
    for (size_t i = 0; i < exp.chaos.events.size(); ++i) {
      const auto& ev = exp.chaos.events[i];
      const auto layer = config::fault_layer_of(ev.action);
      const bool message = config::is_live_fault(ev.action);
      if (layer == config::fault_layer::in_process && !message) continue;
      outside = true;
    }
    if (outside) {
      node_proc c;
      c.name = "chaos";
      c.role = "chaos";
      c.argv = {(fs::path(exe).parent_path() / "dd-chaos").string(), "run", file, "--run-dir", dir};
      c.argv.insert(c.argv.end(), passthrough.begin(), passthrough.end());
      c.log = (fs::path(logs) / "chaos.log").string();
      L.nodes.push_back(std::move(c));
    }
  }
  struct sigaction sa {};
  sa.sa_handler = on_launch_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  // The launcher's own listener: its nodes' state and starts (a node's own metrics are on its
  // listener, nodes.json endpoints.http).
  actors::node_http web;
  actors::metric_family *node_up = nullptr, *node_starts = nullptr;
  struct shared_nodes {
    std::mutex m;
    nlohmann::json nodes = nlohmann::json::array();
  };
  auto shown = std::make_shared<shared_nodes>();
  if (http_on) {
    actors::node_metrics_options mo;
    mo.kind = "launch";
    mo.node = "launch";
    mo.learners = M;
    mo.fragments = exp.sync.fragments;
    mo.version = util::build_version();
    mo.commit = util::build_commit();
    web = actors::start_node_http(http.first, http.second, mo, nullptr, "dd-node launch");
    node_up = &web.metrics->registry().gauge("dd_launch_node_up",
                                             "1 while the launcher's node process runs, else 0.",
                                             {"run", "node", "role"});
    node_starts = &web.metrics->registry().counter("dd_launch_node_starts_total",
                                                   "Starts of a node process by the launcher.",
                                                   {"run", "node", "role"});
    web.metrics->set_status_extra([shown] {
      std::lock_guard<std::mutex> g(shown->m);
      return nlohmann::json{{"nodes", shown->nodes}};
    });
    if (web.listener) L.http_url = web.listener->url();
  }
  double last_shown = -1.0;
  auto show_nodes = [&] {
    if (!web.metrics) return;
    const double t = now_s();
    if (last_shown >= 0 && t - last_shown < 0.5) return;
    last_shown = t;
    const std::string run = L.written_run_id;
    node_up->clear();
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& n : L.nodes) {
      node_up->set({run, n.name, n.role}, n.state == node_state::running ? 1 : 0);
      node_starts->set({run, n.name, n.role}, n.starts);
      arr.push_back({{"name", n.name},
                     {"role", n.role},
                     {"state", to_string(n.state)},
                     {"pid", n.state == node_state::running ? n.pid : 0},
                     {"starts", n.starts},
                     {"last_exit", n.last_exit},
                     {"http", n.http_port}});
    }
    std::lock_guard<std::mutex> g(shown->m);
    shown->nodes = std::move(arr);
  };
  std::printf(
      "dd-node launch: %s: syncer on %s, %d learner process%s (%d learner%s, %d thread%s "
      "each%s), control 127.0.0.1:%u, nodes file %s/nodes.json\n",
      exp.name.c_str(), syncer_addr.c_str(), processes, processes == 1 ? "" : "es", M,
      M == 1 ? "" : "s", threads, threads == 1 ? "" : "s", gate ? ", host step admission on" : "",
      L.control_port, dir.c_str());
  std::fflush(stdout);
  // Follow the syncer's log on our stdout (progress lines), so the launcher shows the run: from
  // its end now, so that a --resume does not replay the earlier parts' lines as if new.
  std::ifstream follow;
  std::streampos followed = 0;
  {
    std::error_code ec;
    const auto size = std::filesystem::file_size(L.nodes.front().log, ec);
    if (resume && !ec) followed = static_cast<std::streamoff>(size);
  }
  if (auto* p = L.find("proxy")) L.start(*p, false);
  L.start(L.nodes.front(), resume);
  for (auto& n : L.nodes)
    if (n.role == "learner") L.start(n, false);
  if (auto* c = L.find("chaos")) L.start(*c, false);
  bool chaos_stopped = false;
  int handled_signals = 0;
  while (true) {
    if (g_launch_signals > handled_signals) {
      handled_signals = g_launch_signals;
      if (handled_signals == 1) {
        std::fprintf(stderr, "dd-node launch: %s: stopping the cluster (again to kill it)\n",
                     g_launch_first == SIGINT ? "SIGINT" : "SIGTERM");
        L.stopping = true;
        L.stop_deadline = now_s() + 60.0;
        // The signal the launcher got, so that summary.json names it (Ctrl-C: SIGINT).
        const int sig = g_launch_first == SIGINT ? SIGINT : SIGTERM;
        if (auto* s = L.find("syncer"); s != nullptr && s->state == node_state::running)
          ::kill(s->pid, sig);
        else
          L.signal_all(sig);
      } else {
        L.signal_all(SIGKILL);
      }
    }
    int ws = 0;
    pid_t pid;
    while ((pid = ::waitpid(-1, &ws, WNOHANG)) > 0)
      for (auto& n : L.nodes)
        if (n.pid == pid && n.state == node_state::running) L.exited(n, ws);
    if (!L.stopping) L.restart_due();
    // The nodes file names the run as soon as the syncer has written its run id.
    if (L.written_run_id.empty() && !L.current_run_id().empty()) {
      L.write_nodes_file();
      if (web.metrics) node_starts->clear();  // the series get the run's id from now on
    }
    if (web.metrics) web.metrics->set_serving(!L.stopping);
    show_nodes();
    serve_control(L);
    // The run is over: learners get 20 s to leave, then SIGTERM, then SIGKILL.
    const double t = now_s();
    if (L.syncer_done_at >= 0) {
      L.stopping = true;
      if (t - L.syncer_done_at > 20.0) L.signal_all(SIGTERM);
      if (t - L.syncer_done_at > 30.0) L.signal_all(SIGKILL);
    }
    if (L.stop_deadline > 0 && t > L.stop_deadline) L.signal_all(SIGKILL);
    // The run is over or stopping: the chaos session ends now (with its final heal).
    if (auto* c = L.find("chaos"); c != nullptr && !chaos_stopped &&
                                   (L.stopping || L.syncer_done_at >= 0) &&
                                   c->state == node_state::running) {
      ::kill(c->pid, SIGTERM);
      chaos_stopped = true;
    }
    bool any_running = false;
    for (const auto& n : L.nodes)
      if (n.state == node_state::running) any_running = true;
    // Echo the syncer's new log lines.
    if (!follow.is_open()) follow.open(L.nodes.front().log);
    if (follow.is_open()) {
      follow.clear();
      follow.seekg(followed);
      std::string line;
      while (std::getline(follow, line)) {
        if (follow.eof()) break;
        std::printf("%s\n", line.c_str());
        followed = follow.tellg();
      }
      std::fflush(stdout);
    }
    if (!any_running && (L.syncer_done_at >= 0 || L.stopping)) {
      // The proxy (if any) is the last one standing.
      if (auto* p = L.find("proxy"); p != nullptr && p->state == node_state::running)
        ::kill(p->pid, SIGTERM);
      break;
    }
    if (auto* p = L.find("proxy");
        L.syncer_done_at >= 0 && p != nullptr && p->state == node_state::running) {
      bool others = false;
      for (const auto& n : L.nodes)
        if (n.role != "proxy" && n.state == node_state::running) others = true;
      if (!others) ::kill(p->pid, SIGTERM);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  L.write_nodes_file();
  if (web.metrics) web.metrics->set_ending();
  const int status = L.syncer_exit >= 0 ? L.syncer_exit : 1;
  // Interrupted: the launcher's own signal (130 for SIGINT, 143 for SIGTERM), whatever the
  // syncer's status after the signal it was forwarded (0, or 128 + a signal); a failure the
  // syncer reported (1, 2) is kept. The last line names the status returned, and the syncer's
  // when they differ.
  const int rc =
      handled_signals > 0 && (status == 0 || status >= 128) ? 128 + g_launch_first : status;
  if (rc == status)
    std::printf("dd-node launch: done (exit %d)\n", rc);
  else
    std::printf("dd-node launch: done (exit %d: interrupted by %s; the syncer exited %d)\n", rc,
                g_launch_first == SIGINT ? "SIGINT" : "SIGTERM", status);
  std::fflush(stdout);
  return rc;
}

}  // namespace dd::app
