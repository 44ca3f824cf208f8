// actors/protocol.hpp — the typed interface of each role: what it accepts and what it answers,
// checked by the compiler at every spawn site and every sender that holds the handle. The atoms
// and the message types are the project's one CAF type-ID block (actors/atoms.hpp, where the
// whole protocol is summarized, sender by sender). Payloads named `wire_bytes` are
// messages/codec.hpp encodings.
//
// Typed here: the job (the coordinator), the supervisor and the evaluator — the roles a node
// spawns and addresses only from inside its own process.
//
// Still dynamically typed (`caf::actor`), for concrete reasons:
// - the health monitor is published on the middleman and looked up with an untyped
//   `remote_actor` by every learner node, `dd-node status`, dd-chaos and the cluster tests; CAF
//   0.17 refuses an untyped lookup of a typed actor (actor_system::assignable: an untyped handle
//   only takes an actor without an interface), so typing it changes every one of those lookups
//   in the same commit, and the monitor's messages (live view, owner directory, leave, stop,
//   status, drain) are being moved into wire.capnp right now (issue 10, the wire change): its
//   interface is typed once they have landed;
// - the fragment owner and the learner are addressed through handles that travel inside
//   messages (the live view's learner handles, the owner directory's vector<caf::actor>, the
//   sender of a pull) and across the middleman as proxies; those messages are the same ones
//   moving into wire.capnp, where a handle travels only as the sender or next to the bytes. The
//   owner also switches behaviors (rebuilding → serving), and a typed behavior must implement its
//   whole interface in each. Their protocols are listed in atoms.hpp.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <caf/actor.hpp>
#include <caf/replies_to.hpp>
#include <caf/send.hpp>
#include <caf/typed_actor.hpp>

#include "actors/atoms.hpp"

namespace dd::actors {

/// What a supervisor reports to whoever started it (the job; a learner node's main loop):
/// every child is down for good (exited normally, stopped, or given up), and each child it gave
/// up on (restart budget spent), with its id and its last crash.
using supervisor_report_hdl =
    caf::typed_actor<caf::reacts_to<atoms::children_done_atom, child_kind>,
                     caf::reacts_to<atoms::child_given_up_atom, child_kind, int32_t, std::string>>;

/// The job (actors/job.hpp): a supervisor's reports; (budget_spent_atom) from the monitor (token
/// budget) or its own seconds timer; (stop_atom, reason) an interrupt (SIGINT/SIGTERM); and its
/// own interrupt deadline.
using job_hdl = supervisor_report_hdl::extend<caf::reacts_to<atoms::budget_spent_atom>,
                                              caf::reacts_to<atoms::stop_atom, std::string>,
                                              caf::reacts_to<atoms::interrupt_timeout_atom>>;

/// A supervisor (actors/supervisor.hpp): (stop_atom) stop every child and respawn none;
/// (syncer_atom, monitor) a learner node's syncer came back: every live child rejoins it;
/// (kill_atom, id) kill that child (it is respawned like a crash); (respawn_atom, index) its own
/// backoff timer.
using supervisor_hdl = caf::typed_actor<
    caf::reacts_to<atoms::stop_atom>, caf::reacts_to<atoms::syncer_atom, caf::actor>,
    caf::reacts_to<atoms::kill_atom, int32_t>, caf::reacts_to<atoms::respawn_atom, uint64_t>>;

/// The evaluator (actors/evaluator.hpp): (final_eval_atom) answers (val_loss, digest) after a
/// fresh round; the owners' broadcast chunks (it pulls as learner −1); its own timers: the
/// periodic evaluation, the global-step poll, and a round's pull timeout.
using evaluator_hdl =
    caf::typed_actor<caf::replies_to<atoms::final_eval_atom>::with<double, uint64_t>,
                     caf::reacts_to<atoms::broadcast_atom, std::vector<uint8_t>, uint64_t>,
                     caf::reacts_to<atoms::eval_atom>, caf::reacts_to<atoms::step_poll_atom>,
                     caf::reacts_to<atoms::round_timeout_atom, uint64_t>>;

/// Sends `xs` from the typed actor `self` to the dynamically typed `dest` exactly as
/// `self->send` would (the same sender, which an owner answers a pull to, and the same
/// execution context, so logical-time runs keep their message order). CAF 0.17 lets a typed
/// actor send() only to typed actors; this is for the roles above that are still untyped.
template <class Self, class... Ts>
void send_untyped(Self* self, const caf::actor& dest, Ts&&... xs) {
  if (dest) caf::unsafe_send_as(self, dest, std::forward<Ts>(xs)...);
}

}  // namespace dd::actors
