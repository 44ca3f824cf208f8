// apps/dd_node/process_supervisor.cpp — see process_supervisor.hpp.
#include "apps/dd_node/process_supervisor.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "runtime/nodes_file.hpp"

namespace dd::app {

namespace fs = std::filesystem;

double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

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

const char* to_string(node_state s) {
  switch (s) {
    case node_state::running: return "running";
    case node_state::down: return "down";
    case node_state::held: return "held";
    case node_state::exited: return "exited";
  }
  return "down";
}

void process_supervisor::write_nodes_file() {
  dd::nodes_file f;
  for (const auto& n : nodes) {
    if (n.role == "proxy" || n.role == "chaos") continue;
    dd::node_entry e;
    e.name = n.name;
    e.role = n.role;
    e.actors = n.actors;
    e.pid = n.state == node_state::running ? n.pid : 0;
    e.start_time = n.state == node_state::running ? n.start_time : 0;
    e.argv = n.argv;
    e.listen = n.listen;
    e.advertise = n.advertise;
    e.chaos_port = n.chaos_port;
    e.http_port = n.http_port;
    e.incarnation = std::max(0, n.starts - 1);
    e.log = n.log;
    e.state = to_string(n.state);
    e.last_exit = n.last_exit;
    f.nodes.push_back(std::move(e));
  }
  f.run_id = written_run_id = current_run_id();
  f.launcher = dd::control_process{::getpid(), fmt::format("127.0.0.1:{}", control_port)};
  f.launcher_http = http_url;
  // Every node leaves the experiment's message faults to the chaos session, which sends them
  // through its endpoint (--message-faults-via-endpoint below; dd-chaos reads this).
  f.message_faults_via_endpoint = true;
  if (auto* p = find("proxy"); p != nullptr && proxy_ports)
    f.proxy = dd::control_process{p->state == node_state::running ? p->pid : 0,
                                  (*proxy_ports).value("control", "")};
  if (auto st = dd::save_nodes_file((fs::path(run_dir) / "nodes.json").string(), f); !st)
    std::fprintf(stderr, "dd-node launch: %s\n", st.message.c_str());
}

void process_supervisor::start(node_proc& n, bool resume_flag) {
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

void process_supervisor::exited(node_proc& n, int ws) {
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
      n.role == "learner" && WIFEXITED(ws) && WEXITSTATUS(ws) >= 2 && WEXITSTATUS(ws) <= 7;
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

void process_supervisor::restart_due() {
  const double t = now_s();
  for (auto& n : nodes) {
    if (n.state == node_state::running || n.state == node_state::exited || n.restart_at < 0)
      continue;
    if (t < n.restart_at || t < n.held_until) continue;
    n.history.restart_times_s.push_back(t);
    start(n, n.role == "syncer");
  }
}

}  // namespace dd::app
