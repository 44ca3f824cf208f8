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

#include "actors/nodes/job_runner.hpp"
#include "actors/nodes/memory_check.hpp"
#include "actors/policy/restart_budget.hpp"
#include "actors/services/host_admission.hpp"
#include "actors/services/node_metrics.hpp"
#include "apps/dd_node/node_flags.hpp"
#include "apps/dd_node/run_lock.hpp"
#include "apps/dd_node/slurm_script.hpp"
#include "runtime/config/loader.hpp"
#include "util/build_info.hpp"
#include "util/files.hpp"

namespace dd::app {

namespace fs = std::filesystem;

namespace {

double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

std::string self_exe() {
  std::error_code ec;
  auto p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("dd-node") : p.string();
}

/// Field 22 of /proc/PID/stat: the process start time in clock ticks since boot (0 if gone).
uint64_t start_time_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto close = all.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(all.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i)
    if (i == 22) return std::stoull(field);
  return 0;
}

/// A free TCP port on 127.0.0.1 (bound and released; the caller binds it again soon).
uint16_t free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  uint16_t port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

/// A non-blocking listening socket on 127.0.0.1:port (0 = any); -1 on failure.
int listen_on(uint16_t port, uint16_t* bound) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  socklen_t len = sizeof a;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 16) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(fd);
    return -1;
  }
  *bound = ntohs(a.sin_port);
  return fd;
}

enum class node_state { running, down, held, exited };

const char* to_string(node_state s) {
  switch (s) {
    case node_state::running: return "running";
    case node_state::down: return "down";
    case node_state::held: return "held";
    case node_state::exited: return "exited";
  }
  return "down";
}

/// One supervised process.
struct node_proc {
  std::string name;
  std::string
      role;  // "syncer", "learner", "proxy", "chaos" (the dd-chaos session of the chaos section)
  std::vector<std::string> actors;
  std::vector<std::string> argv;
  std::string log;
  std::string listen, advertise;
  uint16_t chaos_port = 0;  ///< its chaos endpoint (--chaos-endpoint 127.0.0.1:PORT); 0 = none
  uint16_t http_port = 0;   ///< its HTTP listener (--http 127.0.0.1:PORT); 0 = none
  pid_t pid = 0;
  uint64_t start_time = 0;
  int starts = 0;
  node_state state = node_state::down;
  double restart_at = -1.0;  ///< steady seconds; < 0 = no restart scheduled
  double held_until = 0.0;
  bool force_restart = false;
  int last_exit = 0;  ///< exit status, or 128 + signal
  policy::restart_history history;
};

volatile sig_atomic_t g_launch_signals = 0;
volatile sig_atomic_t g_launch_first = 0;
extern "C" void on_launch_signal(int sig) {
  if (g_launch_signals == 0) g_launch_first = sig;
  g_launch_signals = g_launch_signals + 1;
}

void print_launch_help(FILE* f) {
  std::fprintf(
      f,
      "usage: dd-node launch <experiment.lua> [--learner-processes P] [--syncer-restart-delay S]\n"
      "                      [--resume | --overwrite] [--run-dir DIR] [--port PORT]\n"
      "                      [--via-proxy] [--no-step-admission] [--name N] [--set key=value]...\n"
      "                      [--progress S] [--learner-backoff-cap S] [--heartbeat S]\n"
      "                      [--connection-timeout S] [--compute-nice N] [--script-timeout S]\n"
      "                      [--force-memory] [--http HOST:PORT | --no-http]\n"
      "       dd-node launch --slurm --dry-run <experiment.lua> [flags]\n"
      "Starts the experiment as a cluster of processes on this host: one `dd-node syncer` and P\n"
      "`dd-node learner` processes (default one per learner), over loopback TCP, and supervises\n"
      "them: a learner process that dies is started again at once, the syncer after\n"
      "--syncer-restart-delay with --resume; a process that left cleanly, a learner that exited\n"
      "2-6 and a syncer that exited 1 or 2 (a result: failed run, bad flags) are not restarted.\n"
      "  --learner-processes P   learner processes (learner ids dealt round-robin; default M)\n"
      "  --syncer-restart-delay S  wait before restarting a dead syncer (default 2)\n"
      "  --resume                continue the unfinished run in the run directory\n"
      "  --overwrite             replace an unfinished run in the run directory\n"
      "  --run-dir DIR           run directory (default runs/<experiment>)\n"
      "  --port PORT             the syncer's port (default: a free one)\n"
      "  --via-proxy             route every learner process's link through a `dd-chaos proxy`\n"
      "                          (links learner-N, for network faults); supervised too\n"
      "  --no-step-admission     no host-wide step admission (learner processes then share the\n"
      "                          cores as the OS schedules them)\n"
      "  --learner-backoff-cap S longest wait between a learner's reconnection attempts (5)\n"
      "  --compute-nice N        the learner processes' --compute-nice (default 0)\n"
      "  --force-memory          start even when the memory estimate of the syncer and the\n"
      "                          learners (dd-node resolve prints it) exceeds this host's\n"
      "                          available memory or address-space limit (passed on to them);\n"
      "                          without it that is refused (exit 2)\n"
      "  --http HOST:PORT        the launcher's own HTTP listener (/metrics: its nodes' state\n"
      "                          and starts; /status; /healthz; /readyz) on this loopback\n"
      "                          address (default 127.0.0.1:0 = a free port, printed). Every\n"
      "                          node also serves /metrics, /healthz, /readyz and /status on a\n"
      "                          free loopback port of its own (nodes.json: endpoints.http)\n"
      "  --no-http               no HTTP listener in the launcher nor in its nodes\n"
      "  --slurm --dry-run       print an sbatch file that runs this cluster as one Slurm job\n"
      "                          (syncer on the first node, one step per learner process\n"
      "                          round-robin over the nodes, each restarted in place; SIGTERM\n"
      "                          120 s before the time limit stops the run and requeues the job,\n"
      "                          which resumes it); starts nothing. --port fixes the syncer's\n"
      "                          port (default 20000 + job id mod 20000). docs/operating.md\n"
      "  --name N, --set k=v, --progress S, --heartbeat S, --connection-timeout S,\n"
      "  --script-timeout S (wall-clock limit of evaluating the experiment file): passed on\n"
      "The launcher locks the run directory, and checkpoint.dir when it lies outside it, for\n"
      "its children: a second run on either exits with status 2.\n"
      "Files: <run_dir>/nodes.json (every process: role, actors, pid, start time, argv, "
      "addresses,\n"
      "incarnation, log), <run_dir>/logs/<node>.log; the control socket's address is in the nodes\n"
      "file: `hold NODE SECONDS`, `release NODE`, `restart NODE`, `status` (one line each).\n"
      "Ctrl-C stops the whole tree gracefully (a second one kills it). Exit status: the syncer's\n"
      "(0 ok, 1 failed run, 2 bad flags/config/locked run directory, 130/143 interrupted).\n");
}

class launcher {
 public:
  std::string run_dir, run_id_hint;
  std::vector<node_proc> nodes;
  std::string http_url;  ///< the launcher's own listener ("" = none)
  int control_fd = -1;
  uint16_t control_port = 0;
  double syncer_delay_s = 2.0;
  bool stopping = false;
  double stop_deadline = -1.0;
  double syncer_done_at = -1.0;
  int syncer_exit = -1;
  std::optional<nlohmann::json> proxy_ports;
  /// The run id found in <run_dir>/run_id before the syncer started, unless --resume: an earlier
  /// run's, not this one's (the syncer replaces it).
  std::string stale_run_id;
  /// The run id last written to the nodes file ("" until the syncer has written its run_id).
  std::string written_run_id;

  /// The syncer's run id as far as it is known now ("" before the syncer wrote it).
  std::string current_run_id() const {
    std::string id;
    std::ifstream(fs::path(run_dir) / "run_id") >> id;
    return id == stale_run_id ? std::string() : id;
  }

  node_proc* find(const std::string& name) {
    for (auto& n : nodes)
      if (n.name == name) return &n;
    return nullptr;
  }

  void write_nodes_file() {
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& n : nodes) {
      if (n.role == "proxy" || n.role == "chaos") continue;
      arr.push_back({{"name", n.name},
                     {"role", n.role},
                     {"actors", n.actors},
                     {"pid", n.state == node_state::running ? n.pid : 0},
                     {"start_time", n.state == node_state::running ? n.start_time : 0},
                     {"argv", n.argv},
                     {"listen", n.listen},
                     {"advertise", n.advertise},
                     {"endpoints", {{"chaos", n.chaos_port}, {"http", n.http_port}}},
                     {"incarnation", std::max(0, n.starts - 1)},
                     {"log", n.log},
                     {"state", to_string(n.state)},
                     {"last_exit", n.last_exit}});
    }
    const std::string id = current_run_id();
    written_run_id = id;
    // Every node leaves the experiment's message faults to the chaos session, which sends them
    // through its endpoint (--message-faults-via-endpoint below; dd-chaos reads this).
    nlohmann::json doc = {{"run_id", id},
                          {"launcher",
                           {{"pid", ::getpid()},
                            {"control", fmt::format("127.0.0.1:{}", control_port)},
                            {"http", http_url}}},
                          {"message_faults", "endpoint"},
                          {"nodes", arr}};
    if (auto* p = find("proxy"); p != nullptr && proxy_ports)
      doc["proxy"] = {{"pid", p->state == node_state::running ? p->pid : 0},
                      {"control", (*proxy_ports).value("control", "")}};
    const std::string text = doc.dump(2) + "\n";
    if (auto st = util::write_file_atomic((fs::path(run_dir) / "nodes.json").string(), text); !st)
      std::fprintf(stderr, "dd-node launch: %s\n", st.message.c_str());
  }

  void start(node_proc& n, bool resume_flag) {
    std::vector<std::string> argv = n.argv;
    if (resume_flag) {
      // A restart resumes: the first start's --overwrite must not come with it.
      argv.erase(std::remove(argv.begin(), argv.end(), std::string("--overwrite")), argv.end());
      argv.push_back("--resume");
    }
    const pid_t launcher_pid = ::getpid();
    fs::create_directories(fs::path(n.log).parent_path());
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setpgid(0, 0);
      // The launcher holds the run directory's lock for its children: if it dies (even by
      // SIGKILL), they get SIGTERM and stop gracefully instead of running on unsupervised.
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != launcher_pid) ::_exit(1);
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      int fd = ::open(n.log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
        ::close(fd);
      }
      std::vector<char*> cargv;
      for (auto& a : argv) cargv.push_back(a.data());
      cargv.push_back(nullptr);
      ::execv(cargv[0], cargv.data());
      std::fprintf(stderr, "dd-node launch: cannot start %s: %s\n", cargv[0], std::strerror(errno));
      ::_exit(127);
    }
    n.pid = pid;
    n.start_time = 0;
    for (int i = 0; i < 50 && n.start_time == 0; ++i) {
      n.start_time = start_time_of(pid);
      if (n.start_time == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    n.starts += 1;
    n.state = node_state::running;
    n.restart_at = -1.0;
    n.force_restart = false;
    std::printf("dd-node launch: started %s (pid %d%s), log %s\n", n.name.c_str(), pid,
                n.starts > 1 ? fmt::format(", start {}", n.starts).c_str() : "", n.log.c_str());
    std::fflush(stdout);
    write_nodes_file();
  }

  /// A child exited with wait status `ws`: decide its restart.
  void exited(node_proc& n, int ws) {
    const bool clean = WIFEXITED(ws) && WEXITSTATUS(ws) == 0;
    n.last_exit = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
    n.pid = 0;
    // As a shell reports it: a death by signal N is status 128 + N (last_exit, the nodes file).
    const std::string how = WIFEXITED(ws)
                                ? fmt::format("exit {}", WEXITSTATUS(ws))
                                : fmt::format("signal {}, status {}", WTERMSIG(ws), n.last_exit);
    if (n.role == "chaos") {
      // A chaos session runs once: started again it would fire its schedule from the start.
      n.state = node_state::exited;
      std::printf("dd-node launch: the chaos session ended (%s; see %s)\n", how.c_str(),
                  n.log.c_str());
      std::fflush(stdout);
      return;
    }
    if (n.role == "syncer" && clean) {
      n.state = node_state::exited;
      syncer_exit = 0;
      syncer_done_at = now_s();
      std::printf("dd-node launch: the syncer finished the run (%s)\n", how.c_str());
      write_nodes_file();
      return;
    }
    const bool final_learner =
        n.role == "learner" && WIFEXITED(ws) && WEXITSTATUS(ws) >= 2 && WEXITSTATUS(ws) <= 6;
    // A syncer's exit 1 (a failed run, or an error it reported) and 2 (bad flags, config, a
    // locked run directory) are results, not crashes: started again with --resume it would only
    // find a finished run and exit 2, and launch would return that instead of the 1.
    const bool final_syncer =
        n.role == "syncer" && WIFEXITED(ws) && (WEXITSTATUS(ws) == 1 || WEXITSTATUS(ws) == 2);
    if (stopping || (clean && !n.force_restart) || final_learner || final_syncer) {
      n.state = node_state::exited;
      if (n.role == "syncer") {
        syncer_exit = n.last_exit;
        syncer_done_at = now_s();
      }
      std::printf("dd-node launch: %s exited (%s)%s\n", n.name.c_str(), how.c_str(),
                  final_learner || final_syncer ? ": not restarted (see its log)" : "");
      std::fflush(stdout);
      write_nodes_file();
      return;
    }
    const double t = now_s();
    policy::restart_config rc;
    rc.max_restarts = 10;
    rc.window_s = 60.0;
    rc.backoff_base_s = n.role == "syncer" ? syncer_delay_s : 0.0;
    rc.backoff_cap_s = std::max(rc.backoff_base_s, 30.0);
    auto d = policy::decide_restart(rc, n.history, t);
    if (d.action != policy::restart_action::restart) {
      n.state = node_state::exited;
      std::printf("dd-node launch: %s died (%s) and its restart budget is spent (%s): left down\n",
                  n.name.c_str(), how.c_str(), d.message.c_str());
      if (n.role == "syncer") {
        syncer_exit = n.last_exit == 0 ? 1 : n.last_exit;
        syncer_done_at = t;
      }
      write_nodes_file();
      return;
    }
    double delay = n.role == "syncer" ? syncer_delay_s : 0.0;
    if (n.force_restart) delay = 0.0;
    n.restart_at = std::max(t + delay, n.held_until);
    n.state = n.held_until > t ? node_state::held : node_state::down;
    std::printf("dd-node launch: %s died (%s); restarting in %.1f s\n", n.name.c_str(), how.c_str(),
                n.restart_at - t);
    std::fflush(stdout);
    write_nodes_file();
  }

  void restart_due() {
    const double t = now_s();
    for (auto& n : nodes) {
      if (n.state == node_state::running || n.state == node_state::exited || n.restart_at < 0)
        continue;
      if (t < n.restart_at || t < n.held_until) continue;
      n.history.restart_times_s.push_back(t);
      start(n, n.role == "syncer");
    }
  }

  std::string control(const std::string& line) {
    std::istringstream in(line);
    std::string cmd, name;
    in >> cmd >> name;
    auto err = [](const std::string& e) {
      return nlohmann::json{{"ok", false}, {"error", e}}.dump();
    };
    if (cmd == "status") {
      nlohmann::json arr = nlohmann::json::array();
      for (const auto& n : nodes)
        arr.push_back({{"name", n.name},
                       {"role", n.role},
                       {"state", to_string(n.state)},
                       {"pid", n.pid},
                       {"starts", n.starts},
                       {"last_exit", n.last_exit}});
      return nlohmann::json{{"ok", true}, {"nodes", arr}}.dump();
    }
    node_proc* n = find(name);
    if (n == nullptr) return err("no node named '" + name + "'");
    if (cmd == "hold") {
      double s = 0;
      std::string v;
      in >> v;
      if (!parse_nonneg(v, s)) return err("hold NODE SECONDS: seconds must be a number >= 0");
      n->held_until = now_s() + s;
      if (n->state == node_state::down) n->state = node_state::held;
      write_nodes_file();
      return nlohmann::json{{"ok", true}, {"node", name}, {"held_for_s", s}}.dump();
    }
    if (cmd == "release") {
      n->held_until = 0;
      if (n->state == node_state::held) {
        n->state = node_state::down;
        n->restart_at = now_s();
      }
      write_nodes_file();
      return nlohmann::json{{"ok", true}, {"node", name}}.dump();
    }
    if (cmd == "restart") {
      if (n->state == node_state::running) {
        n->force_restart = true;
        ::kill(n->pid, SIGKILL);
      } else {
        n->state = node_state::down;
        n->restart_at = now_s();
        n->held_until = 0;
      }
      return nlohmann::json{{"ok", true}, {"node", name}}.dump();
    }
    return err("unknown request '" + cmd + "' (hold, release, restart, status)");
  }

  void serve_control() {
    while (true) {
      int c = ::accept4(control_fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) return;
      std::string line;
      char buf[512];
      const double until = now_s() + 1.0;
      while (line.find('\n') == std::string::npos && now_s() < until && line.size() < 4096) {
        pollfd p{c, POLLIN, 0};
        if (::poll(&p, 1, 100) <= 0) continue;
        const ssize_t k = ::read(c, buf, sizeof buf);
        if (k <= 0) break;
        line.append(buf, static_cast<size_t>(k));
      }
      if (auto nl = line.find('\n'); nl != std::string::npos) line.resize(nl);
      const std::string reply = control(line) + "\n";
      ssize_t w = ::write(c, reply.data(), reply.size());
      (void)w;
      ::close(c);
    }
  }

  void signal_all(int sig) {
    for (auto& n : nodes)
      if (n.state == node_state::running && n.pid > 0) ::kill(n.pid, sig);
  }
};

}  // namespace

/// Entry point of `dd-node launch`; argv[0] is "launch".
int launch_main(int argc, char** argv) {
  std::string file, run_dir;
  int processes = 0;
  double delay = 2.0, progress = 5.0, backoff_cap = 5.0;
  double heartbeat = -1, conn_timeout = -1;
  int compute_nice = -1;
  bool resume = false, overwrite = false, via_proxy = false, admission = true, force_memory = false;
  bool http_on = true;
  bool slurm = false, dry_run = false;
  std::pair<std::string, uint16_t> http{"127.0.0.1", 0};
  uint16_t port = 0;
  std::vector<std::string> passthrough;
  config::load_options lo;
  flag_cursor f("dd-node launch", argc, argv);
  auto value = [&](const char* flag) { return f.value(flag); };
  auto seconds = [&](const char* flag, double& out) { return f.seconds(flag, out); };
  while (f.next()) {
    const std::string a = f.arg();
    if (a == "--help" || a == "-h") {
      print_launch_help(stdout);
      return 0;
    } else if (a == "--learner-processes") {
      if (!f.count(a, processes)) return 2;
    } else if (a == "--syncer-restart-delay") {
      if (!seconds(a.c_str(), delay)) return 2;
    } else if (a == "--progress") {
      if (!seconds(a.c_str(), progress)) return 2;
    } else if (a == "--learner-backoff-cap") {
      if (!seconds(a.c_str(), backoff_cap)) return 2;
    } else if (a == "--heartbeat") {
      if (!seconds(a.c_str(), heartbeat)) return 2;
    } else if (a == "--connection-timeout") {
      if (!seconds(a.c_str(), conn_timeout)) return 2;
    } else if (a == "--compute-nice") {
      if (!f.count(a, compute_nice, 0, 19)) return 2;
    } else if (a == "--port") {
      if (!f.port(a, port)) return 2;
    } else if (a == "--run-dir") {
      const char* v = value(a.c_str());
      if (v == nullptr) return 2;
      run_dir = v;
    } else if (a == "--name" || a == "--set") {
      const char* v = value(a.c_str());
      if (v == nullptr) return 2;
      (a == "--name" ? lo.names : lo.overrides).emplace_back(v);
      passthrough.push_back(a);
      passthrough.push_back(v);
    } else if (a == "--script-timeout") {
      const char* v = value(a.c_str());
      std::string why;
      if (v == nullptr) return 2;
      if (!config::parse_script_timeout(v, lo.script_timeout, why)) {
        std::fprintf(stderr, "dd-node launch: %s\n", why.c_str());
        return 2;
      }
      passthrough.push_back(a);
      passthrough.push_back(v);
    } else if (a == "--resume") {
      resume = true;
    } else if (a == "--overwrite") {
      overwrite = true;
    } else if (a == "--via-proxy") {
      via_proxy = true;
    } else if (a == "--no-step-admission") {
      admission = false;
    } else if (a == "--force-memory") {
      force_memory = true;
    } else if (a == "--http") {
      const char* v = value(a.c_str());
      if (v == nullptr || !parse_http_flag("dd-node launch", v, false, http)) return 2;
    } else if (a == "--no-http") {
      http_on = false;
    } else if (a == "--slurm" || a == "--dry-run") {
      (a == "--slurm" ? slurm : dry_run) = true;
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "dd-node launch: unknown flag '%s'\n", a.c_str());
      print_launch_help(stderr);
      return 2;
    } else if (file.empty()) {
      file = a;
    } else {
      std::fprintf(stderr, "dd-node launch: more than one experiment file given\n");
      return 2;
    }
  }
  if (file.empty()) {
    print_launch_help(stderr);
    return 2;
  }
  if (resume && overwrite) {
    std::fprintf(stderr, "dd-node launch: --resume and --overwrite exclude each other\n");
    return 2;
  }
  lo.run_dir = run_dir;
  auto loaded = config::load_file(file, lo);
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s", loaded.error_text().c_str());
    return 2;
  }
  if (loaded.experiments.size() != 1) {
    std::fprintf(stderr, "dd-node launch: %s defines %zu experiments; select one with --name\n",
                 file.c_str(), loaded.experiments.size());
    return 2;
  }
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
  const std::string dir = !run_dir.empty()       ? run_dir
                          : !exp.run_dir.empty() ? exp.run_dir
                                                 : "runs/" + exp.name;
  if (slurm || dry_run) {
    if (!slurm || !dry_run || resume || overwrite || via_proxy) {
      std::fprintf(stderr,
                   "dd-node launch: --slurm and --dry-run go together (the script is "
                   "printed, sbatch submits it), without --resume, --overwrite (the "
                   "script resumes an unfinished run itself) and --via-proxy\n");
      return 2;
    }
    slurm_script_options so;
    so.dd_node = self_exe();
    so.experiment = fs::absolute(file).lexically_normal().string();
    so.experiment_name = exp.name;
    so.run_dir = fs::absolute(dir).lexically_normal().string();
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
    std::fputs(slurm_script(so).c_str(), stdout);
    return 0;
  }
  std::string error;
  auto lock = run_dir_lock::acquire(dir, error);
  if (!lock.held()) {
    std::fprintf(stderr, "dd-node launch: %s\n", error.c_str());
    return 2;
  }
  // A checkpoint directory outside the run directory is locked as well; like the run directory's,
  // the lock is held here for the children (the syncer sees DD_LAUNCH_LOCK_PID), across restarts.
  run_dir_lock checkpoint_lock;
  if (!lock_checkpoint_dir(dir, exp.checkpoint.dir, checkpoint_lock, error)) {
    std::fprintf(stderr, "dd-node launch: %s: checkpoint.dir: %s\n", exp.name.c_str(),
                 error.c_str());
    return 2;
  }
  const auto state = inspect_run_dir(dir);
  if (state == run_dir_state::unfinished && !resume && !overwrite) {
    std::fprintf(stderr,
                 "dd-node launch: run directory '%s' holds an unfinished run (no summary.json): "
                 "continue it with --resume, or replace it with --overwrite\n",
                 dir.c_str());
    return 2;
  }
  if (resume) {
    if (const auto why = why_not_resumable(dir); !why.empty()) {
      std::fprintf(stderr, "dd-node launch: --resume: run directory '%s' holds %s\n", dir.c_str(),
                   why.c_str());
      return 2;
    }
    if (const auto why = experiment_change_on_resume(dir, config::to_json(exp)); !why.empty()) {
      std::fprintf(stderr, "dd-node launch: --resume: run directory '%s' holds %s\n", dir.c_str(),
                   why.c_str());
      return 2;
    }
  }
  if (!resume) {  // a new run: nothing of an earlier cluster run's files stays (run_dir.hpp)
    std::string names;
    for (const auto& n : clear_cluster_files(dir)) names += (names.empty() ? "" : ", ") + n;
    if (!names.empty())
      std::fprintf(stderr, "dd-node launch: removed the earlier cluster run's %s from '%s'\n",
                   names.c_str(), dir.c_str());
  }
  ::setenv("DD_LAUNCH_LOCK_PID", std::to_string(::getpid()).c_str(), 1);

  launcher L;
  L.run_dir = dir;
  if (!resume) L.stale_run_id = L.current_run_id();
  L.syncer_delay_s = delay;
  L.control_fd = listen_on(0, &L.control_port);
  if (L.control_fd < 0) {
    std::fprintf(stderr, "dd-node launch: cannot open the control socket: %s\n",
                 std::strerror(errno));
    return 1;
  }
  if (port == 0) port = free_port();
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
  auto extra = [&](std::vector<std::string>& v) {
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
    if (overwrite) s.argv.push_back("--overwrite");
    // Every node serves message faults on a loopback port of its own (dd-chaos msg).
    s.chaos_port = free_port();
    s.argv.insert(s.argv.end(), {"--chaos-endpoint", fmt::format("127.0.0.1:{}", s.chaos_port),
                                 "--message-faults-via-endpoint"});
    if (http_on) {
      s.http_port = free_port();
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
        via_proxy ? fmt::format("127.0.0.1:{}", free_port()) : syncer_addr;
  if (via_proxy) {
    node_proc p;
    p.name = "proxy";
    p.role = "proxy";
    const std::string chaos = (fs::path(exe).parent_path() / "dd-chaos").string();
    p.argv = {chaos,          "proxy",
              "--control",    fmt::format("127.0.0.1:{}", free_port()),
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
    n.chaos_port = free_port();
    n.argv.insert(n.argv.end(), {"--chaos-endpoint", fmt::format("127.0.0.1:{}", n.chaos_port),
                                 "--message-faults-via-endpoint"});
    if (http_on) {
      n.http_port = free_port();
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
      const auto layer = config::chaos_layer_of(ev.action);
      const bool message = config::is_live_message_action(ev.action) ||
                           ev.action == config::chaos_action::drop_push ||
                           ev.action == config::chaos_action::delay_push;
      if (layer == config::chaos_layer::in_process && !message) continue;
      outside = true;
      if (layer == config::chaos_layer::network && !via_proxy) {
        std::fprintf(stderr,
                     "%s: chaos.events[%zu]: action '%s' faults a link through the fault proxy: "
                     "add --via-proxy\n",
                     ev.where.c_str(), i + 1, config::to_string(ev.action));
        return 2;
      }
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
    L.serve_control();
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
