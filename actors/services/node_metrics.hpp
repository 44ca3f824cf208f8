// actors/services/node_metrics.hpp — what a node shows on its HTTP listener: Prometheus metrics
// at /metrics, liveness at /healthz, readiness at /readyz and what the node knows as JSON at
// /status (docs/monitoring.md, "HTTP endpoints and metrics").
//
// Fed from what the node's services already record, never from inside a role's decisions: the
// run log's events as they are written (run_observer: merges, pushes, refusals, evaluations,
// failures, restarts; the "start"/"resume" and "stop" events date the training), each inner step
// recorded at the node (its wall time), and at every scrape a snapshot of the run log's counters
// (steps, tokens, loss, versions, liveness, uptime). The run figures (dd_run_tokens_total,
// dd_run_merges_total, dd_run_goodput_ratio, dd_run_uptime_*, /status "run") are summary.json's
// (run_report.hpp make_summary over whole_run): of the whole run, earlier parts of a resumed run
// included, and goodput divides by the training seconds up to the "stop" event, not by the time
// the final evaluation adds. Counters fed by events (dd_fragment_*, dd_learner_pushes_total, ...)
// count what this process saw since it started. The launcher, which has no run log, feeds gauges
// of its own through registry().
//
// Thread-safe: the observer runs on the recording threads, scrapes on the listener's.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/services/http_listener.hpp"
#include "actors/services/metrics.hpp"
#include "actors/services/run_log.hpp"
#include "runtime/run_dir.hpp"

namespace dd::actors {

/// Who the node is.
struct node_metrics_options {
  std::string kind;    ///< "syncer", "learner", "run" or "launch"
  std::string node;    ///< the node's name ("syncer", "learner-0", "run", "launch")
  std::string run_id;  ///< the run's id (label `run`)
  int learners = 0;    ///< M of the run (0: unknown)
  int fragments = 0;   ///< P of the run (0: unknown)
  /// The version and commit this binary was built from (dd_build_info).
  std::string version, commit;
  /// This node's TLS certificate's notAfter, unix seconds (actors/link/tls.hpp); 0 = no TLS.
  /// Exposed as dd_tls_cert_expiry_seconds (seconds left; negative once expired).
  double tls_not_after_unix = 0;
  /// A resumed run (a later part of it): the earlier parts' counts and training seconds. The
  /// run figures of /metrics (dd_run_*) and /status ("run") add them, as summary.json does, so
  /// they cover the whole run.
  bool resumed = false;
  double seconds_before = 0.0;
  earlier_parts before;
};

/// The metrics and status of one node. Construct it before the node's actors run; attach()
/// makes it the run log's observer (detach with attach(nullptr) before it goes).
class node_metrics final : public run_observer {
 public:
  explicit node_metrics(node_metrics_options o);
  ~node_metrics() override;

  /// Reads `log` (its snapshot at every scrape) and observes it; nullptr detaches.
  void attach(run_log* log);
  /// Registers /metrics, /healthz, /readyz and /status on `l`.
  void serve(http_listener& l);

  /// The node is serving its role (a syncer: its monitor published; a launcher: its nodes
  /// started). A learner node or `run` is ready once one of its learners steps.
  void set_serving(bool on) { serving_ = on; }
  /// The node is ending: /readyz answers 503.
  void set_ending() { ending_ = true; }
  bool ready() const;

  /// Called by the node's loop now and then (every ~250 ms): samples each learner's tokens and
  /// loss once a second for /status (tokens/s, the loss curve).
  void sample();

  /// The text exposition of every metric, refreshed from the log's snapshot.
  std::string scrape();
  /// What the node knows, as /status serves it.
  nlohmann::json status();
  /// The run id (label `run`), for a node that learns it after it started serving (the
  /// launcher: once the syncer wrote it); the series set at the start are relabelled.
  /// Thread-safe. Not for a node whose learners step (their {run, learner} labels are kept).
  void set_run_id(const std::string& id);
  /// The run id now.
  std::string run() const;
  /// The registry (the launcher adds its own families).
  metrics_registry& registry() { return reg_; }
  /// Extra fields for /status (the launcher's nodes), called at each status().
  void set_status_extra(std::function<nlohmann::json()> f);

  // run_observer
  void on_event(const nlohmann::json& line) override;
  void on_step(int32_t learner, double step_s) override;

 private:
  void refresh(const run_counters& c, double now);
  /// summary.json's figures of the whole run up to `now` (make_summary over whole_run).
  nlohmann::json run_figures(const run_counters& c, double now);
  std::string L(int32_t id) const { return std::to_string(id); }
  /// {run, id} built once per id (no allocation on the step and event paths).
  const label_values& run_and(int32_t id);
  mutable std::mutex label_mutex_;  // guards run_and_ and o_.run_id
  std::map<int32_t, label_values> run_and_;

  node_metrics_options o_;
  std::atomic<run_log*> log_{nullptr};
  std::atomic<bool> serving_{false}, ending_{false};
  double started_unix_ = 0.0;
  metrics_registry reg_;
  // Fed by events and steps.
  metric_family *step_seconds_, *pushes_, *merges_, *merge_contributors_, *quorum_seconds_,
      *merge_seconds_, *staleness_, *refusals_, *broadcast_bytes_, *push_bytes_, *evaluations_,
      *restarts_, *faults_, *reconnects_, *divergences_, *node_refusals_;
  // Refreshed from the snapshot at each scrape.
  metric_family *learner_pushes_sent_, *learner_steps_, *learner_tokens_, *learner_loss_,
      *learner_up_, *learner_stepping_, *learner_incarnation_, *learner_restarts_,
      *learner_lease_age_, *learner_applied_, *learner_applied_age_, *monitor_learners_,
      *fragment_version_, *fragment_grace_, *last_merge_contributors_, *last_merge_tokens_,
      *last_merge_weight_, *fragment_quorum_, *val_loss_, *run_tokens_, *run_merges_, *goodput_,
      *uptime_ratio_, *uptime_seconds_, *degraded_, *writes_failing_, *node_uptime_, *node_start_,
      *build_info_, *link_bytes_;
  metric_family* tls_expiry_ = nullptr;

  mutable std::mutex mutex_;  // guards what follows
  struct contribution {
    int32_t learner = -1;
    uint64_t incarnation = 0, tokens = 0, steps = 0;
    double weight = 0, staleness = 0;
  };
  struct merge_record {
    double t = 0;
    uint64_t version = 0;
    std::vector<contribution> contributors;
    double grace_s = 0, round_s = 0, sync_s = 0;
    int live = 0, needed = 0;
    std::string reason;
    uint64_t tokens = 0;
  };
  std::map<int32_t, merge_record> last_merge_;
  std::map<int32_t, nlohmann::json> last_push_;  // learner → its last push at this node
  // learner → fragment → (base version of its last push, log time that base first came)
  std::map<int32_t, std::map<int32_t, std::pair<uint64_t, double>>> pushed_base_;
  std::deque<nlohmann::json> val_history_, timeline_;
  struct loss_point {
    double t;
    uint64_t tokens;
    double loss;
  };
  std::map<int32_t, std::deque<loss_point>> loss_history_;
  double last_sample_t_ = -1.0;
  double start_t_ = 0.0;  ///< run-log time of this part's "start"/"resume" event
  double stop_t_ = -1.0;  ///< run-log time of the "stop" event (end of training); < 0: none yet
  std::function<nlohmann::json()> status_extra_;
};

/// What `--http HOST:PORT` starts in a node: its metrics and the listener serving them. The
/// listener goes first (its handlers use the metrics).
struct node_http {
  std::unique_ptr<node_metrics> metrics;
  std::unique_ptr<http_listener> listener;  ///< null when the address could not be bound
};

/// Starts metrics for `o` attached to `log` and a listener on `host`:`port` (0 = any) serving
/// /metrics, /healthz, /readyz and /status; prints "<who>: http on http://HOST:PORT" on stdout
/// and logs an "http" event with the port. An address that cannot be bound is a warning and a
/// "failure" event: the node goes on without a listener (metrics still attached).
node_http start_node_http(const std::string& host, uint16_t port, node_metrics_options o,
                          run_log* log, const std::string& who);

}  // namespace dd::actors
