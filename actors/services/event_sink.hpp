// actors/services/event_sink.hpp — what a role may do with its node's run log: write events and
// counters, never read a fact back. The node owns the log (actors/services/run_log.hpp, which
// implements this interface) and hands roles this narrow view of it through their services
// (actors/services/node_services.hpp); the node's reporting (run_report, node_metrics) reads the
// log itself. Thread-safe as run_log is: learners on their own threads all call it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

namespace dd::actors {

struct run_counters;

class event_sink {
 public:
  virtual ~event_sink() = default;

  /// Seconds since the run started, on the log's clock (stamps an event's own timings).
  virtual double now() const = 0;
  /// Appends one event: `fields` plus "event", "t" and "time", as one whole line.
  virtual void emit(const std::string& kind, nlohmann::json fields = nlohmann::json::object()) = 0;
  /// One line for the person watching the run (emit the event as well).
  virtual void warn(const std::string& text) const = 0;

  /// A file the run promised could not be written: the run's write failure (the node ends it).
  virtual void write_failed(const std::string& message) = 0;
  // A failed write of a file is not reported here: a role reports it to its node by message
  // (write_trouble_atom, actors/link/protocol.hpp write_report_hdl), and the node, which owns the
  // write-failure policy, answers with the verdict (write_verdict_atom).
  /// A write of `file` succeeded again (after a failure reported to the node).
  virtual void write_recovered(const std::string& file) = 0;

  /// Mutates the run's counters (run_counters, run_log.hpp) under the log's lock.
  virtual void update(const std::function<void(run_counters&)>& f) = 0;
  /// Learner `learner_id` stepped once (step_s seconds).
  virtual void note_step(int32_t learner_id, double step_s) = 0;
  /// Learner `learner_id` holds version `version` of fragment `fragment`.
  virtual void note_applied(int32_t learner_id, int32_t fragment, uint64_t version) = 0;
  /// A learner enters (true) or leaves (false) its stepping state.
  virtual void set_stepping(int32_t learner_id, bool stepping) = 0;
  /// The uptime figures as the health monitor computed them up to now.
  virtual void set_uptime(double uptime_s, double observed_s) = 0;
  /// Learner `learner_id` finished its budget, was drained or given up for good.
  virtual void learner_finished(int32_t learner_id) = 0;

 protected:
  event_sink() = default;
  event_sink(const event_sink&) = default;
  event_sink& operator=(const event_sink&) = default;
};

}  // namespace dd::actors
