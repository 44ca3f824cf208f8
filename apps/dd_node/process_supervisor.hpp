// apps/dd_node/process_supervisor.hpp — the process supervision of `dd-node launch`: the
// processes it runs (syncer, learners, the fault proxy, the chaos session), starting them,
// deciding on each exit whether and when to start it again (a restart budget, holds, a syncer's
// --resume), and the nodes file that describes them. main() thread only.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/policy/restart_budget.hpp"

namespace dd::app {

/// Steady-clock seconds.
double now_s();

/// Field 22 of /proc/PID/stat: the process start time in clock ticks since boot (0 if gone).
uint64_t start_time_of(pid_t pid);

enum class node_state { running, down, held, exited };

/// "running", "down", "held" or "exited".
const char* to_string(node_state s);

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

/// The launcher's processes and the rules that restart them. Plain state: launch.cpp's
/// supervise_until_done calls exited() for each reaped child, restart_due() and the control
/// socket's requests.
class process_supervisor {
 public:
  std::string run_dir, run_id_hint;
  std::string http_url;  ///< the launcher's own HTTP listener ("" = none)
  std::vector<node_proc> nodes;
  int control_fd = -1;
  uint16_t control_port = 0;
  /// The run's join token: the control socket's hold, release and restart must prove it
  /// (control_socket.hpp); empty = none asked. Never logged.
  std::string join_token;
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
    std::ifstream(std::filesystem::path(run_dir) / "run_id") >> id;
    return id == stale_run_id ? std::string() : id;
  }

  node_proc* find(const std::string& name) {
    for (auto& n : nodes)
      if (n.name == name) return &n;
    return nullptr;
  }

  /// Writes <run_dir>/nodes.json (runtime/nodes_file.hpp) from the processes' states.
  void write_nodes_file();
  /// Starts `n` (fork + exec, its own process group, output appended to its log); with
  /// `resume_flag` its argv gets --resume instead of --overwrite (a restarted syncer).
  void start(node_proc& n, bool resume_flag);
  /// A child exited with wait status `ws`: decide its restart.
  void exited(node_proc& n, int ws);
  /// Starts every process whose restart time (and hold) has passed.
  void restart_due();

  void signal_all(int sig) {
    for (auto& n : nodes)
      if (n.state == node_state::running && n.pid > 0) ::kill(n.pid, sig);
  }
};

}  // namespace dd::app
