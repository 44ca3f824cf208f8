// tools/chaos/report_inputs.hpp — what `dd-chaos report` reads from a run directory (report.hpp
// lists the files): the events of every process in one stream ordered by wall time, which
// learners each node process hosts, the faults (the tape and the runtime's own), the heartbeat
// rows, summary.json, experiment.json and a baseline's summary.json. Pure reading; any thread.
#pragma once

#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/chaos/report.hpp"

namespace dd::chaos::report_detail {

/// One event of events.jsonl (node "syncer") or of a node's forwarded nodes/NODE.events.jsonl.
struct event {
  double time = 0;
  std::string node;  ///< "syncer" for events.jsonl, else the forwarding node's name
  nlohmann::json j;
  std::string kind() const { return j.value("event", ""); }
};

/// One fault: a record of the tape, or a `fault` event the runtime injected itself.
struct fault {
  std::string source, kind, target;
  std::vector<std::string> nodes;  ///< processes or links hit (link learner-N = node learner-N)
  std::set<int> learners;          ///< learner ids those nodes host
  bool syncer = false;             ///< the syncer process (or one of its owners) was hit
  int fragment = -1;               ///< in-process kill_owner
  double at = 0, duration = 0;
  std::string result = "ok";
};

/// One row of learner_loss.csv: time, incarnation, step and training loss of a learner's
/// heartbeat (the loss NaN where the row has none).
struct heartbeat_row {
  double t;
  long long inc, step;
  double loss = std::numeric_limits<double>::quiet_NaN();
};

/// Everything the report judges, read once.
struct report_inputs {
  /// file -> "read (N events)" | "missing" | ... (the report's "inputs").
  nlohmann::json notes = nlohmann::json::object();
  std::vector<event> events;  ///< ordered by time (stable: a file's own order for equal times)
  bool have_syncer_events = false;
  double run_start = 0;                         ///< the first event's time (0 without events)
  std::map<std::string, std::set<int>> hosted;  ///< node name -> learner ids
  std::vector<fault> faults;                    ///< ordered by injection time
  std::optional<nlohmann::json> experiment, summary, baseline_summary;
  std::optional<nlohmann::json> baseline_experiment;  ///< the baseline's experiment.json
  std::optional<nlohmann::json> monitor_record;       ///< monitor.json (the token invariant)
  bool have_heartbeats = false;                       ///< learner_loss.csv exists
  size_t heartbeat_rows = 0;                          ///< its well-formed rows
  std::map<long long, std::vector<heartbeat_row>> heartbeats;  ///< by learner id, file order
};

/// Reads the run directory `o.run_dir` (and `o.tape`, `o.baseline_dir`). Throws chaos_error
/// when run_dir or the baseline is not a directory, or a present JSON file does not parse.
report_inputs read_report_inputs(const report_options& o);

/// `v` as JSON, null when absent.
inline nlohmann::json opt(std::optional<double> v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

}  // namespace dd::chaos::report_detail
