// actors/roles/supervisor.hpp — spawns a set of children (learners or fragment owners), monitors
// them, and respawns a child that went down abnormally after a backoff, within a restart budget
// (at most N restarts per sliding window, as OTP supervisors do; policy/restart_budget.hpp).
//
// Promises: a child that exits normally is not respawned; a child that crashes is respawned
// after max(backoff, the downtime its exit reason carries: with_downtime) unless the budget is
// spent, in which case a "give_up" event is recorded and the child stays down (the quorum absorbs a
// lost learner); (stop_atom) forwards stop to every live child and disables respawns; each child
// given up is reported to the job as (child_given_up_atom, kind, id, last crash); when every child
// has exited normally (or was given up) the supervisor sends (children_done_atom, kind) to the job.
// An exit message from anyone but a child (the job shutting down) is forwarded to every child.
// Interface: supervisor_hdl (actors/link/protocol.hpp).
// Event-based; CAF has monitors and links but no supervisor trees, so this is ours.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/error.hpp>
#include <caf/scheduled_actor.hpp>
#include <caf/stateful_actor.hpp>

#include "actors/link/atoms.hpp"
#include "actors/link/protocol.hpp"
#include "actors/policy/restart_budget.hpp"
#include "actors/services/node_services.hpp"

namespace dd::actors {

/// One child: which one it is and how to start an incarnation of it.
struct child_spec {
  int32_t id = 0;  ///< learner id or fragment id
  /// Spawns one incarnation (the supervisor monitors it).
  std::function<caf::actor(caf::actor_system&)> spawn;
};

/// Configuration of one supervisor. A plain value; the node's services (event sink, fault hook)
/// come separately (supervisor_services, actors/services/node_services.hpp).
struct supervisor_config {
  /// What its children are (events, counters, its reports).
  child_kind kind = child_kind::learner;
  std::vector<child_spec> children;
  policy::restart_config restart;
  /// Receives its reports (supervisor_report_hdl); may be invalid.
  supervisor_report_hdl job;
};

/// CAF state of a supervisor.
struct supervisor_state {
  std::vector<caf::actor> current;  ///< live incarnation per child (null when down)
  std::vector<bool> done;           ///< exited normally or given up
  std::vector<policy::restart_history> history;
  bool stopping = false;
  bool reported = false;
  static inline const char* name = "supervisor";
};

using supervisor_actor = supervisor_hdl::stateful_base<supervisor_state>;

/// `reason` carrying a least downtime: the supervisor respawns the child that exits with it no
/// sooner than `downtime_s` seconds after its death (a kill fault's scripted downtime: the node's
/// fault hooks, actors/services/step_faults.hpp and owner_faults.hpp, make the exit reason). The
/// downtime is two elements appended to the error's context; read_down_reason takes them off, so
/// the reason renders as it would without them. `downtime_s` <= 0: `reason` unchanged.
caf::error with_downtime(const caf::error& reason, double downtime_s);

/// A down message's reason as its actor gave it, and the downtime it carries (0: none).
struct down_reason {
  caf::error reason;
  double downtime_s = 0.0;
};
down_reason read_down_reason(const caf::error& reason);

/// The supervisor's behavior: spawns every child at start.
/// `services`: the node's.
supervisor_hdl::behavior_type supervisor(supervisor_actor* self,
                                         std::shared_ptr<const supervisor_config> config,
                                         supervisor_services services);

/// Makes an exception thrown by `self` (in its behavior's setup or any handler) end it with
/// error(runtime_error, "<what()>") instead of CAF's bare runtime_error, so the supervisor's
/// respawn/give_up events and a failed run's failure_reason name the cause (e.g. "cpu:
/// allocate_bytes: out of host memory ..."). Call first thing in a supervised actor's behavior.
void name_crashes(caf::scheduled_actor* self);

/// The default handler `drop_unexpected` installs, for an actor that swaps handlers (a fragment
/// owner waits with caf::skip while it rebuilds): logs a message that matches no handler and
/// drops it, answering only a request (see drop_unexpected). `who` names the actor in the log
/// ("owner 1", "health monitor").
caf::scheduled_actor::default_handler unexpected_handler(event_sink* log, const std::string& who);

/// Makes `self` survive messages it cannot use — garbled by a corrupted link (a flipped byte in
/// CAF's BASP framing can retarget or retype a message; CAF has no checksum of its own) or sent
/// by a peer of another version — instead of dying of them:
/// - a message that matches no handler is logged and dropped; only a request is answered (with
///   error(unexpected_message), which its requester's response handler takes): CAF's default,
///   print_and_drop, answers every sender so, and that asynchronous error ended the sender;
/// - an asynchronous error message (one not answering a request of `self`, e.g. that answer from
///   a peer still on CAF's default) is logged and dropped (CAF's default error handler ends the
///   actor with it). Requests keep their own error handlers; `.then` without one is logged too.
/// The first 5 of each are logged (an `unexpected_message` event with `who`, `what` = "message"
/// or "error", the message rendered and cut to 200 characters, and the count so far; a warning
/// line); later ones are dropped silently. `log` may be null (nothing logged).
/// Call first thing in an actor's behavior (after name_crashes).
void drop_unexpected(caf::scheduled_actor* self, event_sink* log, const std::string& who);

}  // namespace dd::actors
