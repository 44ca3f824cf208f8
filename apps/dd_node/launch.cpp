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

/// The flags of `dd-node launch`, and what the parse made of them.
struct launch_options {
  experiment_args ea;
  int processes = 0;  ///< learner processes; 0 until check_launch (then M when not given)
  double delay = 2.0, progress = 5.0, backoff_cap = 5.0;
  double heartbeat = -1, conn_timeout = -1;
  int compute_nice = -1;
  bool via_proxy = false, no_admission = false, force_memory = false, no_http = false;
  bool slurm = false, dry_run = false, tls_on = false;
  std::string http_text, token_file;
  int port_flag = 0;
  // From the flags, once parsed.
  std::string join_token;  ///< --join-token-file's (or DD_JOIN_TOKEN's); "" = none given
  std::pair<std::string, uint16_t> http{"127.0.0.1", 0};
  run_dir_mode mode{};
  bool http_on() const { return !no_http; }
};

/// Parses `dd-node launch`'s flags into `o` (help generated from the same table); the exit
/// status when the command ends here (--help, a bad flag, an unreadable join token).
std::optional<int> parse_launch_flags(int argc, char** argv, launch_options& o) {
  util::flag_table flags(
      "dd-node launch", "EXP [flags]",
      "Starts the experiment as a cluster of processes on this host: one `dd-node syncer` and P\n"
      "`dd-node learner` processes (default one per learner), over loopback TCP, and supervises\n"
      "them: a learner process that dies is started again at once, the syncer after\n"
      "--syncer-restart-delay with --resume; a process that left cleanly, a learner that exited\n"
      "2-7 and a syncer that exited 1 or 2 (a result: failed run, bad flags) are not restarted.\n"
      "--name, --set and --script-timeout are passed on to the syncer (and dd-chaos).");
  add_experiment_flags(flags, o.ea);
  flags
      .count("--learner-processes", &o.processes, 1, 4096, "P",
             "learner processes (learner ids dealt round-robin; default M)")
      .seconds("--syncer-restart-delay", &o.delay,
               "wait before restarting a dead syncer (default 2)")
      .count("--port", &o.port_flag, 0, 65535, "PORT", "the syncer's port (default: a free one)")
      .toggle("--via-proxy", &o.via_proxy,
              "route every learner process's link through a `dd-chaos proxy` (links learner-N, "
              "for network faults); supervised too")
      .toggle("--no-step-admission", &o.no_admission,
              "no host-wide step admission (learner processes then share the cores as the OS "
              "schedules them)")
      .seconds("--progress", &o.progress,
               "the syncer's progress line every S seconds (default 5; 0 = off)")
      .seconds("--learner-backoff-cap", &o.backoff_cap,
               "longest wait between a learner's reconnection attempts (default 5)")
      .seconds("--heartbeat", &o.heartbeat, "every node's middleman heartbeat period (default 1)")
      .seconds("--connection-timeout", &o.conn_timeout,
               "every node drops a peer silent this long (default 10)")
      .count("--compute-nice", &o.compute_nice, 0, 19, "N",
             "the learner processes' --compute-nice (default 0)");
  add_force_memory_flag(flags, &o.force_memory,
                        "the memory estimate of the syncer and the learners",
                        "that is refused (exit 2); passed on to them");
  flags
      .text("--http", &o.http_text, "HOST:PORT",
            "the launcher's own HTTP listener (/metrics: its nodes' state and starts; /status; "
            "/healthz; /readyz) on this loopback address (default 127.0.0.1:0 = a free port, "
            "printed). Every node also serves /metrics, /healthz, /readyz and /status on a free "
            "loopback port of its own (nodes.json: endpoints.http)")
      .toggle("--no-http", &o.no_http, "no HTTP listener in the launcher nor in its nodes")
      .toggle("--slurm", &o.slurm,
              "with --dry-run: print an sbatch file that runs this cluster as one Slurm job "
              "(syncer on the first node, one step per learner process round-robin over the "
              "nodes, each restarted in place; SIGTERM 120 s before the time limit stops the run "
              "and requeues the job, which resumes it); starts nothing. --port fixes the "
              "syncer's port (default 20000 + job id mod 20000). docs/deploying.md")
      .toggle("--dry-run", &o.dry_run, "with --slurm: print the script only");
  flags.toggle("--tls", &o.tls_on,
               "mutual TLS between the nodes: a throwaway CA and certificates in RUN_DIR/tls "
               "(syncer, one per learner process naming its learner ids, operator for dd-node "
               "status/drain), passed to every node as --tls-cert/--tls-key/--tls-ca");
  add_join_token_flag(flags, &o.token_file,
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
  if (auto rc = flags.parse(argc, argv)) return rc;
  if (!read_join_token("dd-node launch", o.token_file, o.join_token)) return 2;
  if (!o.http_text.empty() && !parse_http_flag("dd-node launch", o.http_text, false, o.http))
    return 2;
  if (!o.ea.mode("dd-node launch", o.mode)) return 2;
  return std::nullopt;
}

/// What is refused before any process starts or the run directory is touched (exit 2, one line
/// on stderr): more learner processes than learners, the syncer's own checks (its data, the
/// memory estimate), and (unless only a Slurm script is printed) a network fault without
/// --via-proxy. Sets o.processes to M when not given.
bool check_launch(launch_options& o, const config::experiment& exp) {
  const int M = exp.learners.count;
  if (o.processes <= 0) o.processes = M;
  if (o.processes > M) {
    std::fprintf(stderr, "dd-node launch: --learner-processes %d is more than the %d learners\n",
                 o.processes, M);
    return false;
  }
  // The syncer's own check: else the syncer would refuse while the learners spin on
  // "connection refused".
  if (auto why = actors::check_startable(exp, actors::start_check_for::launch, o.force_memory);
      !why.empty()) {
    std::fprintf(stderr, "dd-node launch: %s: %s\n", exp.name.c_str(), why.c_str());
    return false;
  }
  if (o.slurm || o.dry_run) return true;  // the script's checks are print_slurm_script's
  // A network fault needs the fault proxy.
  for (size_t i = 0; i < exp.chaos.events.size(); ++i) {
    const auto& ev = exp.chaos.events[i];
    if (config::fault_layer_of(ev.action) == config::fault_layer::network && !o.via_proxy) {
      std::fprintf(stderr,
                   "%s: chaos.events[%zu]: action '%s' faults a link through the fault proxy: "
                   "add --via-proxy\n",
                   ev.where.c_str(), i + 1, config::dsl_name(ev.action));
      return false;
    }
  }
  return true;
}

/// --slurm --dry-run: prints the sbatch file that runs this cluster as one Slurm job; starts
/// nothing. The exit status (2: the flags do not go together).
int print_slurm_script(const launch_options& o, const config::experiment& exp) {
  if (!o.slurm || !o.dry_run || o.ea.resume || o.ea.overwrite || o.via_proxy) {
    std::fprintf(stderr,
                 "dd-node launch: --slurm and --dry-run go together (the script is "
                 "printed, sbatch submits it), without --resume, --overwrite (the "
                 "script resumes an unfinished run itself) and --via-proxy\n");
    return 2;
  }
  const std::string run_dir =
      !o.ea.load.run_dir.empty() ? o.ea.load.run_dir : config::run_dir_of(exp);
  slurm_script_options so;
  so.dd_node = self_exe();
  so.experiment = fs::absolute(o.ea.file()).lexically_normal().string();
  so.experiment_name = exp.name;
  so.run_dir = fs::absolute(run_dir).lexically_normal().string();
  so.experiment_flags = o.ea.passthrough();
  if (o.heartbeat >= 0)
    so.node_flags.insert(so.node_flags.end(), {"--heartbeat", fmt::format("{}", o.heartbeat)});
  if (o.conn_timeout >= 0)
    so.node_flags.insert(so.node_flags.end(),
                         {"--connection-timeout", fmt::format("{}", o.conn_timeout)});
  if (o.force_memory) so.node_flags.emplace_back("--force-memory");
  so.learner_ids = deal_learner_ids(exp.learners.count, o.processes);
  so.port = static_cast<uint16_t>(o.port_flag);
  so.syncer_restart_delay_s = o.delay;
  so.progress_s = o.progress;
  so.learner_backoff_cap_s = o.backoff_cap;
  so.tls = o.tls_on;
  std::fputs(slurm_script(so).c_str(), stdout);
  return 0;
}

/// The cluster as the launcher builds it: where it runs and what every node's argv shares.
struct cluster_plan {
  cluster_plan(const launch_options& o, const config::experiment& exp) : o(o), exp(exp) {}

  const launch_options& o;
  const config::experiment& exp;
  std::string exe = self_exe();
  std::string dir, logs, tls_dir;
  std::string token_path;  ///< the join token file the children read ("" = none)
  std::string syncer_addr;
  int threads = 1;  ///< per learner
  std::optional<actors::host_admission> gate;

  /// A node process named `name` (its log logs/<name>.log) in `role`.
  node_proc proc(const std::string& name, const std::string& role) const {
    node_proc n;
    n.name = name;
    n.role = role;
    n.log = (fs::path(logs) / (name + ".log")).string();
    return n;
  }
  /// --name, --set and --script-timeout, as launch got them.
  void add_experiment_flags(std::vector<std::string>& v) const {
    const auto passthrough = o.ea.passthrough();
    v.insert(v.end(), passthrough.begin(), passthrough.end());
  }
  /// --tls-cert/--tls-key/--tls-ca of certificate `stem` (with --tls).
  void add_tls_flags(std::vector<std::string>& v, const std::string& stem) const {
    if (!o.tls_on) return;
    v.insert(v.end(), {"--tls-cert", (fs::path(tls_dir) / (stem + ".pem")).string(), "--tls-key",
                       (fs::path(tls_dir) / (stem + ".key")).string(), "--tls-ca",
                       (fs::path(tls_dir) / "ca.pem").string()});
  }
  /// The flags the syncer and every learner process get alike.
  void add_node_flags(std::vector<std::string>& v) const {
    if (!token_path.empty()) v.insert(v.end(), {"--join-token-file", token_path});
    if (o.heartbeat >= 0) v.insert(v.end(), {"--heartbeat", fmt::format("{}", o.heartbeat)});
    if (o.force_memory) v.emplace_back("--force-memory");
    if (o.conn_timeout >= 0)
      v.insert(v.end(), {"--connection-timeout", fmt::format("{}", o.conn_timeout)});
  }
  /// Every node serves message faults on a loopback port of its own (dd-chaos msg), and its
  /// HTTP listener on another unless --no-http.
  void add_endpoints(node_proc& n) const {
    n.chaos_port = util::free_loopback_port();
    n.argv.insert(n.argv.end(), {"--chaos-endpoint", fmt::format("127.0.0.1:{}", n.chaos_port),
                                 "--message-faults-via-endpoint"});
    if (o.http_on()) {
      n.http_port = util::free_loopback_port();
      n.argv.insert(n.argv.end(), {"--http", fmt::format("127.0.0.1:{}", n.http_port)});
    }
  }
};

/// Opens and locks the run directory (and checkpoint.dir) for the children across restarts
/// (the syncer sees DD_LAUNCH_LOCK_PID), and settles the join token: the one given, else the
/// run directory's (a resumed run keeps it), else a fresh one written there (mode 0600). The
/// children read it from the file, never argv. The exit status when the launch ends here.
std::optional<int> open_launch_dir(launch_options& o, run_dir_opener& dirs, cluster_plan& c) {
  if (!dirs.open(c.exp)) return 2;
  dirs.begin();
  c.dir = dirs.dir();
  ::setenv("DD_LAUNCH_LOCK_PID", std::to_string(::getpid()).c_str(), 1);
  c.token_path = o.token_file;
  if (c.token_path.empty() && o.join_token.empty()) {
    c.token_path = (fs::path(c.dir) / actors::join_token_file_name).string();
    std::string why;
    // A resumed run keeps its token; a run directory without one (made by dd-node run, or
    // before tokens) gets a fresh one, without a line about the missing file.
    std::error_code ec;
    const bool have = o.ea.resume && fs::exists(c.token_path, ec);
    if (!have || !read_join_token("dd-node launch", c.token_path, o.join_token) ||
        o.join_token.empty()) {
      o.join_token = actors::make_join_token();
      if (!write_secret_file(c.token_path, o.join_token + "\n", why)) {
        std::fprintf(stderr, "dd-node launch: %s\n", why.c_str());
        return 1;
      }
    }
  }
  if (!c.token_path.empty()) ::unsetenv(actors::join_token_env);
  return std::nullopt;
}

/// Host-wide step admission: cores / threads per learner slots shared by every learner process
/// (none with --no-step-admission, one learner, or enough cores). Sets c.threads.
void plan_step_admission(cluster_plan& c) {
  const int M = c.exp.learners.count;
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  c.threads =
      c.exp.learners.threads > 0 ? c.exp.learners.threads : std::max(1, static_cast<int>(hw) / M);
  if (c.o.no_admission || M <= 1) return;
  const unsigned slots = std::max(1u, hw / static_cast<unsigned>(c.threads));
  if (slots >= static_cast<unsigned>(M)) return;
  try {
    c.gate.emplace(actors::host_admission::create(slots));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dd-node launch: %s (continuing without host step admission)\n", e.what());
  }
}

/// Mutual TLS: a CA and certificates of this run in RUN_DIR/tls (a --resume signs new ones with
/// its CA). False after one line on stderr.
bool make_cluster_certs(cluster_plan& c) {
  c.tls_dir = (fs::path(c.dir) / "tls").string();
  if (!c.o.tls_on) return true;
  std::error_code ec;
  if (!c.o.ea.resume) fs::remove_all(c.tls_dir, ec);
  const int M = c.exp.learners.count;
  std::vector<actors::cert_request> reqs = {{"syncer", {actors::syncer_cert_name}},
                                            {"operator", {"operator"}}};
  for (int k = 0; k < c.o.processes; ++k) {
    actors::cert_request r{fmt::format("learner-{}", k), {}};
    for (int i = k; i < M; i += c.o.processes) r.names.push_back(fmt::format("learner-{}", i));
    reqs.push_back(std::move(r));
  }
  try {
    actors::make_certs(c.tls_dir, reqs);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dd-node launch: %s\n", e.what());
    return false;
  }
  return true;
}

node_proc syncer_proc(const cluster_plan& c) {
  node_proc s = c.proc("syncer", "syncer");
  s.actors = {"monitor", "evaluator"};
  for (int p = 0; p < c.exp.sync.fragments; ++p) s.actors.push_back(fmt::format("owner:{}", p));
  s.argv = {c.exe,      "syncer",      c.o.ea.file(),
            "--listen", c.syncer_addr, "--run-dir",
            c.dir,      "--progress",  fmt::format("{}", c.o.progress)};
  c.add_experiment_flags(s.argv);
  c.add_node_flags(s.argv);
  c.add_tls_flags(s.argv, "syncer");
  if (c.o.ea.overwrite) s.argv.emplace_back("--overwrite");
  c.add_endpoints(s);
  s.listen = s.advertise = c.syncer_addr;
  return s;
}

/// The `dd-chaos proxy` that carries learner process k's link from link_ports[k] to the syncer.
node_proc proxy_proc(const cluster_plan& c, const std::vector<std::string>& link_ports) {
  node_proc p = c.proc("proxy", "proxy");
  const std::string chaos = (fs::path(c.exe).parent_path() / "dd-chaos").string();
  p.argv = {chaos,          "proxy",
            "--control",    fmt::format("127.0.0.1:{}", util::free_loopback_port()),
            "--ports-file", (fs::path(c.dir) / "proxy-ports.json").string()};
  for (int k = 0; k < c.o.processes; ++k)
    p.argv.insert(p.argv.end(),
                  {"--link", fmt::format("learner-{}={}->{}", k, link_ports[static_cast<size_t>(k)],
                                         c.syncer_addr)});
  return p;
}

/// Learner process k: learner ids k, k + P, k + 2P, ... (dealt round-robin), joining `join`.
node_proc learner_proc(const cluster_plan& c, int k, const std::string& join) {
  const int M = c.exp.learners.count;
  node_proc n = c.proc(fmt::format("learner-{}", k), "learner");
  std::string ids;
  for (int i = k; i < M; i += c.o.processes) {
    ids += (ids.empty() ? "" : ",") + std::to_string(i);
    n.actors.push_back(fmt::format("learner:{}", i));
  }
  n.argv = {c.exe,           "learner",
            "--join",        join,
            "--learner-ids", ids,
            "--node-name",   n.name,
            "--threads",     std::to_string(c.threads),
            "--run-dir",     (fs::path(c.dir) / "nodes" / n.name).string(),
            "--progress",    fmt::format("{}", c.o.progress * 2),
            "--backoff-cap", fmt::format("{}", c.o.backoff_cap)};
  if (c.gate) n.argv.insert(n.argv.end(), {"--step-admission", c.gate->spec()});
  c.add_tls_flags(n.argv, n.name);
  c.add_endpoints(n);
  c.add_node_flags(n.argv);
  if (c.o.compute_nice >= 0)
    n.argv.insert(n.argv.end(), {"--compute-nice", std::to_string(c.o.compute_nice)});
  return n;
}

/// Whether the chaos section needs a `dd-chaos run` session: its process, network, disk and
/// message faults (and whole-cluster random faults) are fired from outside the nodes, the
/// message kinds through the nodes' chaos endpoints (and taped like every other fault); the
/// other in-process kinds (kill, slow, kill_owner, chaos.random.mtbf_seconds) the nodes apply
/// themselves.
bool needs_chaos_session(const config::experiment& exp) {
  if (exp.chaos.random.cluster_mtbf_seconds > 0) return true;
  for (const auto& ev : exp.chaos.events)
    if (config::fault_layer_of(ev.action) != config::fault_layer::in_process ||
        config::is_live_fault(ev.action))
      return true;
  return false;
}

node_proc chaos_proc(const cluster_plan& c) {
  node_proc n = c.proc("chaos", "chaos");
  n.argv = {(fs::path(c.exe).parent_path() / "dd-chaos").string(), "run", c.o.ea.file(),
            "--run-dir", c.dir};
  c.add_experiment_flags(n.argv);
  return n;
}

/// Builds the cluster in `L` without starting it: the run directory and join token, the control
/// socket, the syncer's port, step admission, the certificates, and every node process (syncer,
/// proxy, learner processes, chaos session, in that order). The exit status when the launch
/// ends here.
std::optional<int> build_cluster(launch_options& o, run_dir_opener& dirs, cluster_plan& c,
                                 process_supervisor& L) {
  if (auto rc = open_launch_dir(o, dirs, c)) return rc;
  L.run_dir = c.dir;
  if (!o.ea.resume) L.stale_run_id = L.current_run_id();
  L.syncer_delay_s = o.delay;
  L.join_token = o.join_token;
  L.control_fd = util::listen_loopback(0, &L.control_port, /*nonblocking=*/true);
  if (L.control_fd < 0) {
    std::fprintf(stderr, "dd-node launch: cannot open the control socket: %s\n",
                 std::strerror(errno));
    return 1;
  }
  auto port = static_cast<uint16_t>(o.port_flag);
  if (port == 0) port = util::free_loopback_port();
  c.syncer_addr = fmt::format("127.0.0.1:{}", port);
  plan_step_admission(c);
  if (!make_cluster_certs(c)) return 1;
  c.logs = (fs::path(c.dir) / "logs").string();
  L.nodes.push_back(syncer_proc(c));
  std::vector<std::string> link_ports(static_cast<size_t>(o.processes));
  for (auto& p : link_ports)
    p = o.via_proxy ? fmt::format("127.0.0.1:{}", util::free_loopback_port()) : c.syncer_addr;
  if (o.via_proxy) {
    L.nodes.push_back(proxy_proc(c, link_ports));
    L.proxy_ports = nlohmann::json{{"control", L.nodes.back().argv[3]}};
  }
  for (int k = 0; k < o.processes; ++k)
    L.nodes.push_back(learner_proc(c, k, link_ports[static_cast<size_t>(k)]));
  if (needs_chaos_session(c.exp)) L.nodes.push_back(chaos_proc(c));
  return std::nullopt;
}

/// Starts every node process: the proxy first, then the syncer (with --resume when resuming),
/// the learner processes, the chaos session.
void start_cluster(process_supervisor& L, bool resume) {
  if (auto* p = L.find("proxy")) L.start(*p, false);
  L.start(L.nodes.front(), resume);
  for (auto& n : L.nodes)
    if (n.role == "learner") L.start(n, false);
  if (auto* c = L.find("chaos")) L.start(*c, false);
}

/// The launcher's own HTTP listener: its nodes' state and starts (a node's own metrics are on
/// its listener, nodes.json endpoints.http). Does nothing without one (--no-http).
class launcher_http {
 public:
  void start(const launch_options& o, const config::experiment& exp, process_supervisor& L) {
    if (!o.http_on()) return;
    actors::node_metrics_options mo;
    mo.kind = "launch";
    mo.node = "launch";
    mo.run_id = L.written_run_id;  // "" until the syncer writes it (show)
    mo.learners = exp.learners.count;
    mo.fragments = exp.sync.fragments;
    mo.version = util::build_version();
    mo.commit = util::build_commit();
    web_ = actors::start_node_http(o.http.first, o.http.second, mo, nullptr, "dd-node launch");
    node_up_ = &web_.metrics->registry().gauge("dd_launch_node_up",
                                               "1 while the launcher's node process runs, else 0.",
                                               {"run", "node", "role"});
    node_starts_ = &web_.metrics->registry().counter("dd_launch_node_starts_total",
                                                     "Starts of a node process by the launcher.",
                                                     {"run", "node", "role"});
    web_.metrics->set_status_extra([shown = shown_] {
      std::lock_guard<std::mutex> g(shown->m);
      return nlohmann::json{{"nodes", shown->nodes}};
    });
    if (web_.listener) L.http_url = web_.listener->url();
  }
  /// The nodes' state into the metrics and /status (at most every 0.5 s).
  void show(const process_supervisor& L) {
    if (!web_.metrics) return;
    const double t = now_s();
    if (last_shown_ >= 0 && t - last_shown_ < 0.5) return;
    last_shown_ = t;
    const std::string run = L.written_run_id;
    if (run != shown_run_) {
      // The run id is known (the nodes file was written with it, by whichever writer came
      // first): the series get it from now on, the launcher's own too.
      shown_run_ = run;
      node_starts_->clear();
      web_.metrics->set_run_id(run);
    }
    node_up_->clear();
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& n : L.nodes) {
      node_up_->set({run, n.name, n.role}, n.state == node_state::running ? 1 : 0);
      node_starts_->set({run, n.name, n.role}, n.starts);
      arr.push_back({{"name", n.name},
                     {"role", n.role},
                     {"state", to_string(n.state)},
                     {"pid", n.state == node_state::running ? n.pid : 0},
                     {"starts", n.starts},
                     {"last_exit", n.last_exit},
                     {"http", n.http_port}});
    }
    std::lock_guard<std::mutex> g(shown_->m);
    shown_->nodes = std::move(arr);
  }
  void set_serving(bool on) {
    if (web_.metrics) web_.metrics->set_serving(on);
  }
  void set_ending() {
    if (web_.metrics) web_.metrics->set_ending();
  }

 private:
  struct shared_nodes {
    std::mutex m;
    nlohmann::json nodes = nlohmann::json::array();
  };
  actors::node_http web_;
  actors::metric_family *node_up_ = nullptr, *node_starts_ = nullptr;
  std::shared_ptr<shared_nodes> shown_ = std::make_shared<shared_nodes>();
  double last_shown_ = -1.0;
  std::string shown_run_;  // the run id the series carry
};

/// Echoes the syncer's log on stdout (its progress lines), so the launcher shows the run: from
/// the log's end at the start when resuming, so that a --resume does not replay the earlier
/// parts' lines as if new.
class log_follower {
 public:
  log_follower(std::string path, bool from_end) : path_(std::move(path)) {
    std::error_code ec;
    const auto size = fs::file_size(path_, ec);
    if (from_end && !ec) at_ = static_cast<std::streamoff>(size);
  }
  /// Prints the complete lines written since the last call.
  void echo() {
    if (!in_.is_open()) in_.open(path_);
    if (!in_.is_open()) return;
    in_.clear();
    in_.seekg(at_);
    std::string line;
    while (std::getline(in_, line)) {
      if (in_.eof()) break;
      std::printf("%s\n", line.c_str());
      at_ = in_.tellg();
    }
    std::fflush(stdout);
  }

 private:
  std::string path_;
  std::ifstream in_;
  std::streampos at_ = 0;
};

/// Ctrl-C / SIGTERM: the first is forwarded as that signal to the syncer (to every child while
/// the syncer is down) and stops the cluster within 60 s; a second SIGKILLs the whole tree.
/// `handled`: the signals acted on so far.
void forward_signals(process_supervisor& L, int& handled) {
  if (g_launch_signals <= handled) return;
  handled = g_launch_signals;
  if (handled != 1) {
    L.signal_all(SIGKILL);
    return;
  }
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
}

/// Reaps every exited child and hands it to the supervisor.
void reap_children(process_supervisor& L) {
  int ws = 0;
  pid_t pid;
  while ((pid = ::waitpid(-1, &ws, WNOHANG)) > 0)
    for (auto& n : L.nodes)
      if (n.pid == pid && n.state == node_state::running) L.exited(n, ws);
}

/// The run is over (the syncer exited 0): learners get 20 s to leave, then SIGTERM, then
/// SIGKILL; a stop past its deadline is SIGKILLed; the chaos session ends as soon as the run is
/// over or stopping (with its final heal).
void end_when_over(process_supervisor& L, bool& chaos_stopped) {
  const double t = now_s();
  if (L.syncer_done_at >= 0) {
    L.stopping = true;
    if (t - L.syncer_done_at > 20.0) L.signal_all(SIGTERM);
    if (t - L.syncer_done_at > 30.0) L.signal_all(SIGKILL);
  }
  if (L.stop_deadline > 0 && t > L.stop_deadline) L.signal_all(SIGKILL);
  if (auto* c = L.find("chaos"); c != nullptr && !chaos_stopped &&
                                 (L.stopping || L.syncer_done_at >= 0) &&
                                 c->state == node_state::running) {
    ::kill(c->pid, SIGTERM);
    chaos_stopped = true;
  }
}

/// Whether any node process other than one with role `except` runs.
bool any_running(const process_supervisor& L, const std::string& except = {}) {
  for (const auto& n : L.nodes)
    if (n.role != except && n.state == node_state::running) return true;
  return false;
}

void stop_proxy(process_supervisor& L) {
  if (auto* p = L.find("proxy"); p != nullptr && p->state == node_state::running)
    ::kill(p->pid, SIGTERM);
}

/// The supervision loop, every 100 ms: signals, exits and restarts, the nodes file, the HTTP
/// view, the control socket, the run's end, the syncer's log; until every process is down and
/// the run is over or stopping. Returns the signals the launcher acted on.
int supervise_until_done(process_supervisor& L, launcher_http& web, log_follower& follow) {
  bool chaos_stopped = false;
  int handled_signals = 0;
  while (true) {
    forward_signals(L, handled_signals);
    reap_children(L);
    if (!L.stopping) L.restart_due();
    // The nodes file names the run as soon as the syncer has written its run id.
    if (L.written_run_id.empty() && !L.current_run_id().empty()) L.write_nodes_file();
    web.set_serving(!L.stopping);
    web.show(L);
    serve_control(L);
    end_when_over(L, chaos_stopped);
    const bool running = any_running(L);
    follow.echo();
    if (!running && (L.syncer_done_at >= 0 || L.stopping)) {
      stop_proxy(L);  // the proxy (if any) is the last one standing
      break;
    }
    if (L.syncer_done_at >= 0 && !any_running(L, "proxy")) stop_proxy(L);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return handled_signals;
}

/// The last nodes file and the exit status: the syncer's, or, interrupted, the launcher's own
/// signal (130 for SIGINT, 143 for SIGTERM) whatever the syncer's status after the signal it
/// was forwarded (0, or 128 + a signal); a failure the syncer reported (1, 2) is kept. The last
/// line names the status returned, and the syncer's when they differ.
int finish_launch(process_supervisor& L, launcher_http& web, int handled_signals) {
  L.write_nodes_file();
  web.set_ending();
  const int status = L.syncer_exit >= 0 ? L.syncer_exit : 1;
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

}  // namespace

/// Entry point of `dd-node launch`; argv[0] is "launch".
int launch_main(int argc, char** argv) {
  launch_options o;
  if (auto rc = parse_launch_flags(argc, argv, o)) return *rc;
  config::load_result loaded;
  if (!o.ea.load_experiments("dd-node launch", /*single=*/true, loaded)) return 2;
  const auto& exp = loaded.experiments.front();
  if (!check_launch(o, exp)) return 2;
  if (o.slurm || o.dry_run) return print_slurm_script(o, exp);
  // The launcher holds the run directory's lock (and checkpoint.dir's) while it runs.
  run_dir_opener dirs("dd-node launch", o.mode);
  cluster_plan c(o, exp);
  process_supervisor L;
  if (auto rc = build_cluster(o, dirs, c, L)) return *rc;
  struct sigaction sa {};
  sa.sa_handler = on_launch_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  launcher_http web;
  web.start(o, exp, L);
  const int M = exp.learners.count, P = o.processes, T = c.threads;
  std::printf(
      "dd-node launch: %s: syncer on %s, %d learner process%s (%d learner%s, %d thread%s "
      "each%s), control 127.0.0.1:%u, nodes file %s/nodes.json\n",
      exp.name.c_str(), c.syncer_addr.c_str(), P, P == 1 ? "" : "es", M, M == 1 ? "" : "s", T,
      T == 1 ? "" : "s", c.gate ? ", host step admission on" : "", L.control_port, c.dir.c_str());
  std::fflush(stdout);
  log_follower follow(L.nodes.front().log, o.ea.resume);
  start_cluster(L, o.ea.resume);
  const int handled_signals = supervise_until_done(L, web, follow);
  return finish_launch(L, web, handled_signals);
}

}  // namespace dd::app
