// actors/nodes/learner_node_core.hpp — everything a learner node (`dd-node learner`) decides,
// without sockets or CAF: its states, what each outcome of the connector (node_connector.hpp)
// and each message of its main loop moves it to, and the exit status. run_learner_node
// (learner_node.cpp) is the shell: it dials the syncer, runs the handshakes, receives, feeds
// the core the outcomes and the current time, and carries out the actions the core returns, in
// order.
//
//   connecting --described (run id, experiment)--> asking_ids --learner ids--> running
//     --monitor down--> syncer_lost (learners keep stepping) --rejoined, same run--> running
//     --signal, a final refusal, --join-deadline, failing writes--> stopping
//     --every learner done--> finished
//
// Time is injected (`now_s`, steady seconds). Single-threaded: the node's main thread.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/services/fault_hooks.hpp"
#include "actors/services/write_policy.hpp"
#include "messages/control.hpp"

namespace dd::actors {

/// Exit statuses of a learner node (documented in `dd-node learner --help` and docs/operating.md
/// "Exit status").
enum learner_node_exit : int {
  node_exit_ok = 0,             ///< every learner finished, or the run was already over
  node_exit_failure = 1,        ///< a runtime failure (a learner given up, bad experiment)
  node_exit_usage = 2,          ///< bad flags
  node_exit_other_run = 3,      ///< the syncer runs another run (run id differs)
  node_exit_protocol = 4,       ///< the syncer speaks another protocol version
  node_exit_data_mismatch = 5,  ///< this node's data differs from the syncer's
  node_exit_deadline = 6,       ///< no syncer reached (or no learner id free) by --join-deadline
  node_exit_unauthorized = 7,   ///< the syncer refused this node's join token (or it has none)
  node_exit_interrupted = 130,  ///< SIGINT (143 SIGTERM): learners stopped and left
};

/// Whether a node whose handshake the syncer refused for `r` asks again (after a backoff step)
/// instead of exiting with refusal_status: `no_free_learner` (ids may free up) and `bad_request`
/// (the syncer could not decode the node_join; this node encodes well-formed requests, so the
/// bytes were damaged on the way, e.g. `dd-chaos net corrupt`: exiting 2, "bad flags", would
/// leave its learners out of the rest of the run). Every other refusal is final.
bool refusal_is_retried(dd::node_refusal r);

/// The exit status of a final refusal (run_finished: 0).
int refusal_status(dd::node_refusal r);

/// Whether a failed remote lookup of the syncer's monitor (its error text) can have left CAF
/// holding a connection to the syncer that every later lookup reuses, so the node must shut its
/// sockets to the syncer down (shutdown_connections_to) before the next attempt:
/// `disconnect_during_handshake` (CAF refuses a second connection to a node it is still
/// connected to) and `unexpected_actor_messaging_interface` (the handshake's interface
/// signatures did not match monitor_hdl; with the same app identifier, i.e. protocol version,
/// they were damaged on the way, and CAF's middleman caches that handshake per host and port for
/// as long as its connection lives, so every later rejoin would fail on it).
bool lookup_error_leaves_stale_connection(const std::string& error);

/// Whether the experiment's scripted fault `f` acts in a learner node: an owner's (kill_owner)
/// and a broadcast's act in the syncer node, and with `message_faults_via_endpoint` (dd-node
/// launch) dd-chaos sends the message faults through the node's chaos endpoint instead.
bool acts_in_learner_node(const fault_spec& f, bool message_faults_via_endpoint);

enum class learner_node_state { connecting, asking_ids, running, syncer_lost, stopping, finished };
const char* to_string(learner_node_state s);

// ---- actions: what the shell carries out, in the order given --------------------------------
namespace node_do {
/// A failed attempt: the next one waits a backoff step (node_connector::failed).
struct backoff {
  std::string why;
};
/// A failed handshake (the describe, the ask for ids, a rejoin) retried at once on a fresh
/// connection, without a backoff step.
struct retry_at_once {
  std::string why;
};
/// The connector's attempts start again from the first backoff step; `deadline_at` (steady
/// seconds, 0 = none) bounds them.
struct set_deadline {
  double deadline_at = 0.0;
  bool reset_attempts = false;
};
/// Shut the node's sockets to the syncer down (shutdown_connections_to), say so when there were
/// any, and log `syncer_connection_dropped` when `log_event` (once the node has its event log).
struct drop_connections {
  std::string why;
  bool log_event = true;
};
/// Close every tensor channel to the syncer.
struct close_channels {
  std::string why;
};
/// Open the tensor channel to the syncer just reached.
struct open_channel {};
/// The monitor just reached becomes the node's: watched, handed to the learners' contexts.
struct adopt_monitor {};
/// The learner supervisor is told (syncer_atom): every live learner rejoins the syncer.
struct rejoin_learners {};
/// Stop every learner at its next step (stop_atom to the supervisor).
struct stop_learners {};
/// An event line; `with_steps` adds {"steps": every learner's inner step}.
struct emit {
  std::string event;
  nlohmann::json fields;
  bool with_steps = false;
};
/// A line on stdout (`err` false) or stderr.
struct say {
  std::string line;
  bool err = true;
};
/// Forward the buffered event lines to the syncer.
struct flush_events {};
/// The progress line on stdout, with `suffix` after it (`suffix_if_finished` when a learner has
/// finished).
struct progress {
  std::string suffix;
  std::string suffix_if_finished;
};
/// Wait before asking for learner ids again, seconds.
struct wait {
  double seconds = 0.0;
};
/// Leave run_learner_node with this status (before any learner runs).
struct exit_node {
  int status = 0;
};
}  // namespace node_do

using node_action =
    std::variant<node_do::backoff, node_do::retry_at_once, node_do::set_deadline,
                 node_do::drop_connections, node_do::close_channels, node_do::open_channel,
                 node_do::adopt_monitor, node_do::rejoin_learners, node_do::stop_learners,
                 node_do::emit, node_do::say, node_do::flush_events, node_do::progress,
                 node_do::wait, node_do::exit_node>;
using node_actions = std::vector<node_action>;

/// What one handshake (node_join round trip) came to.
struct handshake_outcome {
  enum class kind { accepted, refused, failed } what = kind::failed;
  dd::node_refusal refusal = dd::node_refusal::none;
  /// The refusal's reason, or why the handshake failed.
  std::string why;
  bool unanswered = false;   ///< failed: no answer within the timeout
  bool dead_handle = false;  ///< failed: the looked-up monitor handle was already down
  std::string run_id;        ///< accepted: the run the reply names
  static handshake_outcome accepted(std::string run_id = {});
  static handshake_outcome refused(dd::node_refusal r, std::string why);
  static handshake_outcome failed(std::string why, bool unanswered = false,
                                  bool dead_handle = false);
};

/// This node's copy of the run's data as loaded (learner_node_core::on_data).
struct node_data_check {
  std::string error;       ///< why it could not be read ("" = it was)
  bool from_flag = false;  ///< its path came from --data (else from the syncer's experiment)
  std::string name;        ///< the file(s), as the lines name them
  uint64_t bytes_here = 0, bytes_there = 0;
  std::string hash_here, hash_there;
};

/// How the learners of a node take turns at their steps (plan_step_gate).
struct step_gate_plan {
  enum class kind { none, host, local } what = kind::none;
  int sysv_id = 0;     ///< host: the launcher's semaphore set (--step-admission sysv:ID)
  unsigned slots = 0;  ///< local: learners stepping at once
  std::string error;   ///< a --step-admission that is not sysv:ID (the node exits 2)
};

/// --step-admission `spec` (sysv:ID) joins the launcher's host-wide admission; without one,
/// `learners` > 1 learners of `threads` threads each on `hw` cores share a gate of
/// max(1, hw / threads) slots when that is fewer than the learners; else there is none.
step_gate_plan plan_step_gate(const std::string& spec, unsigned hw, int threads, int learners);

struct learner_node_core_options {
  std::string name;              ///< the node's name, in its lines
  double join_deadline_s = 0.0;  ///< 0 = never give up
  double progress_every_s = 5.0;
  double started_at_s = 0.0;  ///< steady seconds of the start (the startup deadline counts from it)
};

class learner_node_core {
 public:
  explicit learner_node_core(learner_node_core_options o);

  learner_node_state state() const;
  /// The status run_learner_node returns once every learner is done (before finish()).
  int status() const { return status_; }
  bool syncer_lost() const { return lost_; }
  /// Steady seconds after which the syncer counts as unreachable for good (0 = none).
  double deadline_at() const { return deadline_at_; }
  /// Whether the shell dials the syncer now (lost and not stopping).
  bool wants_rejoin() const { return lost_ && !stopping_; }

  // ---- connecting and asking_ids (before any learner runs) ----
  /// Before each attempt: an exit_node action when interrupted or (connecting) past the
  /// startup's --join-deadline; `last_error`: the connector's latest.
  node_actions on_startup_check(double now_s, bool interrupted, const std::string& last_error);
  /// A startup lookup failed with `error` (a stale connection is shut down).
  node_actions on_startup_lookup_failed(const std::string& error);
  /// The describe handshake (learner_count 0) came to `r`; `attempt`: the connector's backoff
  /// step. An unanswered one is retried at once on fresh connections, once per backoff step, as
  /// a rejoin's is (on_rejoin); a second one in a row, or any other failure, is a failed attempt.
  node_actions on_described(const handshake_outcome& r, int attempt = 0);
  /// The syncer's experiment loaded here (`loads`; else it failed with `load_error`: exit 1) and
  /// this node's memory check came to `memory_refusal` ("" = its learners fit; else exit 2:
  /// started again it would fail so).
  node_actions on_experiment(bool loads, const std::string& load_error,
                             const std::string& memory_refusal);
  /// This node's copy of the data: unreadable, exit 2 (as for a bad flag: started again it would
  /// fail the same way); different from the syncer's, a line, and the node asks on so that the
  /// syncer refuses it and both sides log the refusal.
  node_actions on_data(const node_data_check& d);
  /// The ask for learner ids came to `r`. An unanswered one is retried at once on fresh
  /// connections (drop_connections, retry_at_once: the shell looks the syncer up again), once per
  /// round of asks; a second one in a row, or any other failure or a retried refusal, ends the
  /// round: asked again in 2 s. Past --join-deadline any failure is exit 6.
  node_actions on_ids(const handshake_outcome& r, double now_s);
  /// How long the ask for learner ids waits for its answer: the first one of a round
  /// first_handshake_s, the at-once retry describe_handshake_s (as the describe's).
  double ids_handshake_timeout_s() const;
  /// Every learner of the node was spawned; the main loop begins.
  void on_started(double now_s);

  // ---- the main loop ----
  node_actions on_children_done();
  /// The syncer's monitor went down; `link_unreachable`: its link was lost (CAF's
  /// remote_link_unreachable), anything else leaves a connection to shut down.
  node_actions on_monitor_down(const std::string& reason, bool link_unreachable, double now_s);
  /// A tensor channel to the syncer broke.
  node_actions on_channel_lost(const std::string& why);
  node_actions on_interrupt(int signal);
  /// The lost syncer's --join-deadline; `last_error`: the connector's latest.
  node_actions on_deadline_check(double now_s, const std::string& last_error);
  /// A rejoin's lookup failed after `took_s`.
  node_actions on_rejoin_lookup_failed(const std::string& error, double took_s);
  /// A rejoin's handshake came to `r`; `attempt`: the connector's backoff step (one unanswered
  /// handshake per step is retried at once).
  node_actions on_rejoin(const handshake_outcome& r, int attempt, double took_s);
  /// How long the rejoin handshake of backoff step `attempt` waits for its answer, given the
  /// node's connect timeout: the first one of a step at most first_handshake_s (a live syncer
  /// answers in milliseconds, and a reply lost down a stale route is retried at once on fresh
  /// connections, so waiting the whole connect timeout for it only delays the rejoin); the
  /// at-once retry the whole connect timeout (at least 1 s).
  double rejoin_handshake_timeout_s(int attempt, double connect_timeout_s) const;
  /// How long the describe handshake of backoff step `attempt` waits for its answer: the first
  /// one of a step at most first_handshake_s, for the same reason; the at-once retry
  /// describe_handshake_s (a syncer still starting under load may be slow to answer).
  double describe_handshake_timeout_s(int attempt) const;
  static constexpr double first_handshake_s = 1.0;
  static constexpr double describe_handshake_s = 10.0;
  /// The node's writes have been failing for `failing_s` (`files`: which, with their errors);
  /// `writes`: the node's write-failure policy (retry_and_degrade(checkpoint.max_failing_seconds)),
  /// which says whether that ends the run (the learners stop, exit 1).
  node_actions on_writes_failing(const write_policy& writes, double failing_s,
                                 const std::string& files);
  /// Periodic work: event forwarding, outage samples, the progress line.
  node_actions on_timers(double now_s);
  /// The final status once the learners are done (a learner given up turns 0 into 1).
  int finish(bool learners_given_up);

 private:
  void stop(int status, node_actions& out);

  learner_node_core_options o_;
  bool described_ = false;
  bool started_ = false;
  bool lost_ = false;
  bool stopping_ = false;
  bool done_ = false;
  int status_ = node_exit_ok;
  double deadline_at_ = 0.0;
  int handshake_retried_at_ = -1;  ///< the backoff step whose unanswered handshake was retried
  int ids_round_ = 0;           ///< the round of asks for learner ids (each failed round waits 2 s)
  int ids_retried_round_ = -1;  ///< the round whose unanswered ask for ids was retried at once
  double last_progress_ = 0.0;
  double last_flush_ = 0.0;
  double last_outage_sample_ = 0.0;
};

}  // namespace dd::actors
