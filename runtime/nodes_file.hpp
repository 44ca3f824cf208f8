// runtime/nodes_file.hpp — the nodes file contract: `<run_dir>/nodes.json`, written
// atomically by `dd-node launch` (or by hand) and read by every dd-chaos command and by
// `dd-node status`, all through this one type. The format is documented in docs/chaos.md,
// "The nodes file". Pure parsing; any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <stdexcept>

#include <nlohmann/json.hpp>

#include "util/files.hpp"

namespace dd {

/// A nodes file that cannot be read or does not parse; the message names the file and field.
struct nodes_file_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// One supervising process with a control socket (the launcher, or the fault proxy).
struct control_process {
  int pid = 0;
  std::string control;  ///< "127.0.0.1:PORT"
};

/// One node process of the cluster.
struct node_entry {
  std::string name;                 ///< "syncer", "learner-0", ...
  std::string role;                 ///< "syncer" | "learner"
  std::vector<std::string> actors;  ///< "monitor", "evaluator", "owner:0", "learner:0", ...
  int pid = 0;                      ///< 0 when down
  uint64_t start_time = 0;          ///< field 22 of /proc/PID/stat: clock ticks since boot
  std::vector<std::string> argv;    ///< the command line that started it (absolute binary)
  std::string listen;               ///< "HOST:PORT" or ""
  std::string advertise;            ///< "HOST:PORT" or ""
  int chaos_port = 0;               ///< endpoints.chaos; 0 = none
  int http_port = 0;                ///< endpoints.http (its HTTP listener); 0 = none
  int incarnation = 0;              ///< process starts so far - 1
  std::string log;                  ///< log file path (restart appends to it)
  std::string state;                ///< "running" | "down" | "held" | "exited"
  int last_exit = 0;                ///< its last exit status, or 128 + signal (launcher)

  bool hosts(const std::string& actor) const;
};

/// The whole nodes file.
struct nodes_file {
  std::string run_id;
  std::optional<control_process> launcher;  ///< absent for nodes started by hand
  std::string launcher_http;                ///< launcher.http: its HTTP listener's URL ("" = none)
  std::optional<control_process> proxy;     ///< absent unless `launch --via-proxy`
  /// "message_faults": "endpoint" — the nodes leave the experiment's message faults to dd-chaos,
  /// which sends them through their chaos endpoints (dd-node launch starts them with
  /// --message-faults-via-endpoint); absent or "nodes": the nodes apply them themselves.
  bool message_faults_via_endpoint = false;
  std::vector<node_entry> nodes;
  std::string path;     ///< where it was read from
  std::string run_dir;  ///< the folder holding it: the tape and the state file go here

  const node_entry* find(const std::string& name) const;
  node_entry* find(const std::string& name);
};

/// Parses the JSON text of a nodes file; `origin` names it in errors.
/// Throws nodes_file_error naming the origin and the bad field.
nodes_file nodes_file_from_text(const std::string& text, const std::string& origin);

/// Reads and parses `path`. Throws nodes_file_error ("PATH: cannot read: ...", "PATH: nodes[2].pid:
/// ...").
nodes_file load_nodes_file(const std::string& path);

/// The JSON form (the exact format the launcher writes).
nlohmann::json to_json(const nodes_file& f);

/// Writes `f` to `path` atomically (util/files.hpp); the status names the file on failure.
util::io_status save_nodes_file(const std::string& path, const nodes_file& f);

/// What `dd-node status` shows for a node process: its nodes-file `state`, except "stopped" for a
/// `running` node whose process this host's /proc shows stopped (state T or t: SIGSTOP, a
/// debugger) with the nodes file's start time (a reused pid is never taken for it), and "gone"
/// for a `running` node whose pid this host does not have (it exited, or was killed with its
/// launcher, while the file still says running; or it runs on another host). The launcher does
/// not track stops (a stopped child is still running to it).
std::string observed_state(const node_entry& n);

}  // namespace dd
