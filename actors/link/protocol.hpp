// actors/link/protocol.hpp — the typed interface of each role: what it accepts and what it answers,
// checked by the compiler at every spawn site and every sender that holds the handle. The atoms
// and the message types are the project's one CAF type-ID block (actors/link/atoms.hpp, where the
// whole protocol is summarized, sender by sender). Payloads named `wire_bytes` are
// messages/codec.hpp encodings.
//
// Every role is a typed actor: the job, the supervisor, the evaluator, the
// health monitor, the fragment owner (both of its behaviors, rebuilding and serving, implement
// all of owner_hdl) and the learner.
//
// A learner is addressed through facets (sub-interfaces its handle converts to): what an owner
// sends it (learner_at_owner_hdl), what the monitor sends it (learner_at_monitor_hdl), and both
// (learner_at_syncer_hdl, the handle its join carries). The facets break the cycles among the
// handles that travel inside messages — the live view carries learner handles to the owners,
// the owner directory carries owner handles to the learners, a join carries the learner's handle
// to the monitor, a rejoin order carries the monitor's handle to the learner — and name what
// each peer may send.
//
// Handles that travel between nodes (the monitor's, the owners', the learner facets, and vectors
// of them) have CAF type IDs, so they serialize across the middleman like any value: the one
// type-ID block opens in actors/link/atoms.hpp and ends at the bottom of this header, after those
// handles (atoms.hpp includes this header at its end; either header may be included first). The
// monitor is published typed and every `remote_actor` lookup of it asks for monitor_hdl (CAF
// 0.17 checks the published interface at lookup: an untyped lookup of it fails). Untyped on
// purpose: the job's `reply_to` (a node's main loop), a supervisor's children (one spawn
// function type for learners and owners), a pull's sender at an owner (a learner or the
// evaluator: it only gets broadcast chunks), and the chunks under credit
// (actors/link/chunk_flow.hpp: pre-built messages through untyped handles; each credit goes back to
// the current sender).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <caf/actor.hpp>
#include <caf/replies_to.hpp>
#include <caf/send.hpp>
#include <caf/typed_actor.hpp>

#include "actors/link/atoms.hpp"

namespace dd::actors {

/// The bytes of one wire message (messages/codec.hpp's wire_bytes).
using protocol_bytes = std::vector<uint8_t>;

/// What a supervisor reports to whoever started it (the job; a learner node's main loop):
/// every child is down for good (exited normally, stopped, or given up), and each child it gave
/// up on (restart budget spent), with its id and its last crash.
using supervisor_report_hdl =
    caf::typed_actor<caf::reacts_to<atoms::children_done_atom, child_kind>,
                     caf::reacts_to<atoms::child_given_up_atom, child_kind, int32_t, std::string>>;

/// Where a role reports a failed write: its node, which owns the write-failure policy
/// (actors/services/write_policy.hpp). (write_trouble_atom, file, error message naming the file):
/// the node applies its policy and answers the sender with (write_verdict_atom, file,
/// write_verdict) — retry_degraded (write it again with backoff, the run goes on degraded) or
/// end_the_run (do not; the node ends the run, naming the file). Node-local.
using write_report_hdl =
    caf::typed_actor<caf::reacts_to<atoms::write_trouble_atom, std::string, std::string>>;

/// The job (actors/nodes/job.hpp): a supervisor's reports; a role's failed write
/// (write_report_hdl); (budget_spent_atom) from the monitor (token budget) or its own seconds
/// timer; (stop_atom, reason) an interrupt (SIGINT/SIGTERM); (eval_atom, val_loss) from the
/// evaluator after each evaluation; and its own interrupt deadline.
using job_hdl = supervisor_report_hdl::extend_with<write_report_hdl>::extend<
    caf::reacts_to<atoms::budget_spent_atom>, caf::reacts_to<atoms::stop_atom, std::string>,
    caf::reacts_to<atoms::eval_atom, double>, caf::reacts_to<atoms::interrupt_timeout_atom>>;

/// A learner as a fragment owner addresses it (the handles of the owner's live view): the
/// owner's broadcast chunks (bytes broadcast_msg, seq), its (ack_atom, push_ack) and
/// (reject_atom, reject_msg) answers to a push, a rebuilding owner's (query_atom,
/// fragment_query), and the credit for each copy chunk the learner sent it.
using learner_at_owner_hdl =
    caf::typed_actor<caf::reacts_to<atoms::broadcast_atom, protocol_bytes, uint64_t>,
                     caf::reacts_to<atoms::ack_atom, protocol_bytes>,
                     caf::reacts_to<atoms::reject_atom, protocol_bytes>,
                     caf::reacts_to<atoms::query_atom, protocol_bytes>,
                     caf::reacts_to<atoms::credit_atom, uint64_t>>;

/// A fragment owner (actors/roles/fragment_owner.hpp). From learners: (push_atom, push_msg, seq)
/// chunks, (pull_atom, pull_request) — the evaluator pulls too, as learner −1 —, (held_atom,
/// fragment_held) and (copy_atom, broadcast_msg, seq) chunks answering a rebuild's query, and the
/// credit for each broadcast chunk. From the monitor: (live_atom, live_view_msg, one handle per
/// learner in list order). From anyone: (owner_status_atom) -> (version, pending pushes, last
/// grace window in seconds). From the job at the end of the run: (checkpoint_atom) -> whether a
/// checkpoint of the current state was written. From its node: (write_verdict_atom, file,
/// verdict) the answer to a failed checkpoint it reported (write_report_hdl). Its own timers:
/// (grace_atom, timer id),
/// (rebuild_atom, query id), (snapshot_atom, backoff seconds) a failed checkpoint's retry,
/// (kill_atom) a time-keyed fault.
using owner_hdl = caf::typed_actor<
    caf::reacts_to<atoms::push_atom, protocol_bytes, uint64_t>,
    caf::reacts_to<atoms::pull_atom, protocol_bytes>,
    caf::reacts_to<atoms::live_atom, protocol_bytes, std::vector<learner_at_owner_hdl>>,
    caf::reacts_to<atoms::credit_atom, uint64_t>, caf::reacts_to<atoms::held_atom, protocol_bytes>,
    caf::reacts_to<atoms::copy_atom, protocol_bytes, uint64_t>,
    caf::replies_to<atoms::owner_status_atom>::with<uint64_t, size_t, double>,
    caf::replies_to<atoms::checkpoint_atom>::with<bool>,
    caf::reacts_to<atoms::grace_atom, uint64_t>, caf::reacts_to<atoms::rebuild_atom, uint64_t>,
    caf::reacts_to<atoms::snapshot_atom, double>, caf::reacts_to<atoms::kill_atom>,
    caf::reacts_to<atoms::write_verdict_atom, std::string, write_verdict>>;

/// A learner as the health monitor addresses it: (progress_atom,
/// progress_msg) answering each heartbeat, (owners_atom, owner_directory, one owner handle per
/// entry in list order), (stop_atom, stop_msg) finish after the current step (a stop of the run
/// or an operator's drain).
using learner_at_monitor_hdl =
    caf::typed_actor<caf::reacts_to<atoms::progress_atom, protocol_bytes>,
                     caf::reacts_to<atoms::owners_atom, protocol_bytes, std::vector<owner_hdl>>,
                     caf::reacts_to<atoms::stop_atom, protocol_bytes>>;

/// A learner as the syncer node's roles address it: both facets. A join carries it; the monitor
/// talks to it as learner_at_monitor_hdl and hands it to the owners (live view) as
/// learner_at_owner_hdl.
using learner_at_syncer_hdl = learner_at_monitor_hdl::extend_with<learner_at_owner_hdl>;

/// The health monitor (actors/roles/health_monitor.hpp), published by a syncer node. From learners:
/// (join_atom, join_request, the learner) -> join_reply, (heartbeat_atom, heartbeat_msg),
/// (leave_atom, leave_msg) -> true once the leave is recorded (or was already: a repeated leave
/// changes nothing; a learner node's learner waits for it, see learner_config::leave).
/// From a learner node: (node_join_atom, node_join) -> node_join_reply,
/// (events_atom, node_events) -> whether the lines were taken. From an owner (the sender):
/// (subscribe_atom, subscribe_msg). From the job: (stop_atom). From the evaluator (and
/// operators' tools): (get_atom, owners_atom) -> (owner_directory, one owner handle per entry),
/// (get_atom, progress_atom) -> (global step Σ step / M, tokens of every learner).
/// From an operator (dd-node status / drain): (status_atom, status_request) -> status_reply,
/// (drain_atom, drain_msg) -> drain_reply. From its node: (write_verdict_atom, file, verdict) the
/// answer to a failed write of its record it reported (write_report_hdl). Its own timer:
/// (lease_atom).
using monitor_hdl = caf::typed_actor<
    caf::replies_to<atoms::join_atom, protocol_bytes, learner_at_syncer_hdl>::with<protocol_bytes>,
    caf::reacts_to<atoms::heartbeat_atom, protocol_bytes>,
    caf::replies_to<atoms::leave_atom, protocol_bytes>::with<bool>,
    caf::replies_to<atoms::node_join_atom, protocol_bytes>::with<protocol_bytes>,
    caf::replies_to<atoms::events_atom, protocol_bytes>::with<bool>,
    caf::reacts_to<atoms::subscribe_atom, protocol_bytes>, caf::reacts_to<atoms::stop_atom>,
    caf::replies_to<caf::get_atom, atoms::owners_atom>::with<protocol_bytes,
                                                             std::vector<owner_hdl>>,
    caf::replies_to<caf::get_atom, atoms::progress_atom>::with<double, uint64_t>,
    caf::replies_to<atoms::status_atom, protocol_bytes>::with<protocol_bytes>,
    caf::replies_to<atoms::drain_atom, protocol_bytes>::with<protocol_bytes>,
    caf::reacts_to<atoms::lease_atom>,
    caf::reacts_to<atoms::write_verdict_atom, std::string, write_verdict>>;

/// A learner (actors/roles/learner.hpp): both facets above; from its node (supervisor): (stop_atom)
/// finish after the current step, (syncer_atom, monitor) the syncer came back: join this monitor;
/// its own timers: (step_atom), (barrier_timeout_atom), (drain_timeout_atom), (leave_retry_atom).
using learner_hdl = learner_at_syncer_hdl::extend<
    caf::reacts_to<atoms::stop_atom>, caf::reacts_to<atoms::syncer_atom, monitor_hdl>,
    caf::reacts_to<atoms::step_atom>, caf::reacts_to<atoms::barrier_timeout_atom>,
    caf::reacts_to<atoms::drain_timeout_atom>, caf::reacts_to<atoms::leave_retry_atom>>;

/// A supervisor (actors/roles/supervisor.hpp): (stop_atom) stop every child and respawn none;
/// (syncer_atom, monitor) a learner node's syncer came back: every live child rejoins it;
/// (kill_atom, id) kill that child (it is respawned like a crash); (respawn_atom, index) its own
/// backoff timer.
using supervisor_hdl = caf::typed_actor<
    caf::reacts_to<atoms::stop_atom>, caf::reacts_to<atoms::syncer_atom, monitor_hdl>,
    caf::reacts_to<atoms::kill_atom, int32_t>, caf::reacts_to<atoms::respawn_atom, uint64_t>>;

/// The evaluator (actors/roles/evaluator.hpp): (final_eval_atom) answers (val_loss, digest) after a
/// fresh round; the owners' broadcast chunks (it pulls as learner −1); its own timers: the
/// periodic evaluation, the global-step poll, and a round's pull timeout.
using evaluator_hdl =
    caf::typed_actor<caf::replies_to<atoms::final_eval_atom>::with<double, uint64_t>,
                     caf::reacts_to<atoms::broadcast_atom, protocol_bytes, uint64_t>,
                     caf::reacts_to<atoms::eval_atom>, caf::reacts_to<atoms::step_poll_atom>,
                     caf::reacts_to<atoms::round_timeout_atom, uint64_t>>;

/// Sends `xs` from the typed actor `self` to the dynamically typed `dest` exactly as
/// `self->send` would (the same sender and the same execution context, so logical-time runs
/// keep their message order). CAF 0.17 lets a typed actor send() only to typed actors; this is
/// for the addresses that stay untyped: the job's `reply_to` (a node's main loop) and a
/// supervisor's children (learners or owners, one spawn function type for both).
template <class Self, class... Ts>
void send_untyped(Self* self, const caf::actor& dest, Ts&&... xs) {
  if (dest) caf::unsafe_send_as(self, dest, std::forward<Ts>(xs)...);
}

}  // namespace dd::actors

// The handles that travel inside messages and across nodes (the block opens in atoms.hpp).
CAF_ADD_TYPE_ID(dd_actors, (dd::actors::learner_at_owner_hdl))
CAF_ADD_TYPE_ID(dd_actors, (std::vector<dd::actors::learner_at_owner_hdl>))
CAF_ADD_TYPE_ID(dd_actors, (dd::actors::owner_hdl))
CAF_ADD_TYPE_ID(dd_actors, (std::vector<dd::actors::owner_hdl>))
CAF_ADD_TYPE_ID(dd_actors, (dd::actors::learner_at_syncer_hdl))
CAF_ADD_TYPE_ID(dd_actors, (dd::actors::monitor_hdl))

CAF_END_TYPE_ID_BLOCK(dd_actors)
