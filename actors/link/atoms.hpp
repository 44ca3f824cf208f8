// actors/link/atoms.hpp — the project's CAF type-ID block: every atom the actors exchange, and (at
// the end, through actors/link/protocol.hpp, where the block ends) the typed handles that travel in
// messages. Between nodes only atoms, wire_bytes (messages/codec.hpp, messages/control.hpp:
// stamped with the run id and the sender's incarnation, checked on decode) and typed actor
// handles travel. Included by every actor; any thread.
//
// Protocol summary (who sends what; payloads named `wire_bytes` are messages/codec.hpp encodings,
// so a multi-node transport only changes how the bytes travel). Every learner <-> syncer message
// (owner, monitor) that carries data is a codec encoding; an undecodable one is dropped (with a
// `failure` event where the receiver has a run log):
//   learner  -> monitor : (join_atom, wire_bytes join_request, learner_at_syncer_hdl learner)
//                         -> (wire_bytes join_reply)
//   learner  -> monitor : (heartbeat_atom, wire_bytes heartbeat_msg)
//   monitor  -> learner : (progress_atom, wire_bytes progress_msg) reply to each heartbeat: tokens
//                                                                 all learners have trained on
//   node     -> monitor : (node_join_atom, wire_bytes node_join) -> (wire_bytes node_join_reply)
//                         the handshake of a learner process (messages/control.hpp)
//   learner  -> monitor : (leave_atom, wire_bytes leave_msg)
//   learner  -> owner   : (push_atom, wire_bytes push_msg, uint64 seq)
//   owner    -> learner : (ack_atom, wire_bytes push_ack)        a whole push was accepted
//   learner  -> owner   : (pull_atom, wire_bytes pull_request)   the owner answers the sender
//                                                                 with broadcast chunks (the
//                                                                 evaluator pulls as learner -1)
//   owner    -> learner : (broadcast_atom, wire_bytes broadcast_msg, uint64 seq)
//   owner    -> learner : (reject_atom, wire_bytes reject_msg)
//   owner    -> monitor : (subscribe_atom, wire_bytes subscribe_msg)  the sender is the owner
//   monitor  -> owner   : (live_atom, wire_bytes live_view_msg, std::vector<learner_at_owner_hdl>)
//                                                                 one handle per learner, in
//                                                                 list order
//   monitor  -> learner : (owners_atom, wire_bytes owner_directory, std::vector<owner_hdl>)
//                                                                 current owner of each fragment
//                                                                 named
//   monitor  -> learner : (stop_atom, wire_bytes stop_msg)       finish after the current step
//   node     -> learner : (stop_atom)                            the same, node-local (its
//                                                                 supervisor)
//   job      -> monitor : (stop_atom)                            syncer node: forward stop to
//                                                                 every live (remote) learner
//   node     -> learner : (syncer_atom, monitor_hdl monitor)     the syncer came back: join
//                                                                 the new monitor
//   job      -> main    : (publish_atom, monitor_hdl monitor)    syncer node: publish it
//   job      -> main    : (finished_atom, run_result)            the run is over: its result
//                                                                 (in-process only)
//   monitor  -> job     : (budget_spent_atom)                    the token budget is spent
//                         (the job's own budget.seconds timer sends it too)
//   monitor  -> job     : (children_done_atom, child_kind::learner)  every remote learner left
//   supervisor -> job   : (children_done_atom, child_kind)       every child is down for good
//   supervisor -> job   : (child_given_up_atom, child_kind, int32 id, string last crash)
//   job      -> evaluator : (final_eval_atom) -> (double val_loss, uint64 digest)
//   timers (to self): learner (step_atom), (barrier_timeout_atom), (drain_timeout_atom),
//                     (leave_retry_atom);
//                     evaluator (eval_atom), (step_poll_atom), (round_timeout_atom, round);
//                     owner (grace_atom, id), (snapshot_atom, backoff), (rebuild_atom, id),
//                     (kill_atom); monitor (lease_atom); supervisor (respawn_atom, index);
//                     job (budget_spent_atom), (interrupt_timeout_atom)
//   node     -> monitor : (events_atom, wire_bytes node_events) -> bool  a learner node's event
//                                                                 lines (JSONL, at most 1 MiB),
//                                                                 written to
//                                                                 <run_dir>/nodes/<node>.events.jsonl
//   owner    -> learner : (query_atom, wire_bytes fragment_query)  rebuild: which version of
//                                                                 this fragment do you hold?
//   learner  -> owner   : (held_atom, wire_bytes fragment_held)    the answer
//   learner  -> owner   : (copy_atom, wire_bytes broadcast_msg, seq)  the value it holds, chunked
//                                                                 (a query with send_value)
//   owner    -> owner   : (rebuild_atom, uint64 query_id)         the rebuild's bounded wait
//   chunks under credit (actors/link/chunk_flow.hpp): push, copy and broadcast chunks also travel
//   as (atom, wire_bytes, uint64 seq); the receiver answers each with (credit_atom, uint64 seq)
//   anyone   -> owner   : (owner_status_atom) -> (uint64 version, size_t pending, double grace)
//   job      -> owner   : (checkpoint_atom) -> bool               the run is over: write a
//                                                                 checkpoint of the current state
//                                                                 now (false: checkpoints are off
//                                                                 or the write failed)
//   evaluator -> monitor : (get_atom, owners_atom) -> (wire_bytes owner_directory,
//                                                     std::vector<owner_hdl>)
//   operator -> monitor : (status_atom, wire_bytes status_request) -> wire_bytes status_reply
//                                                                 dd-node status (JSON text)
//   operator -> monitor : (drain_atom, wire_bytes drain_msg) -> wire_bytes drain_reply
//                                                                 dd-node drain: stop that
//                                                                 learner gracefully (it leaves)
//   owner, monitor -> job : (write_trouble_atom, string file, string error)  a write of `file`
//                                                                 failed (node-local); the job
//                                                                 applies the node's
//                                                                 write-failure policy and answers
//   job -> owner, monitor : (write_verdict_atom, string file, write_verdict)  what the writer
//                                                                 must do: retry_degraded (write
//                                                                 it again with backoff) or
//                                                                 end_the_run (do not; the node
//                                                                 ends the run)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/type_id.hpp>

#include "actors/services/write_policy.hpp"

namespace dd::actors {

/// What a supervisor supervises (events name it "learner" or "owner"; it decides which
/// counters a restart or a give-up updates, and whether a scripted fault's downtime applies).
enum class child_kind : uint8_t { learner, owner };

/// "learner" or "owner".
std::string to_string(child_kind k);

}  // namespace dd::actors

CAF_BEGIN_TYPE_ID_BLOCK(dd_actors, caf::first_custom_type_id)

CAF_ADD_TYPE_ID(dd_actors, (std::vector<uint8_t>))
CAF_ADD_TYPE_ID(dd_actors, (dd::actors::child_kind))
CAF_ADD_TYPE_ID(dd_actors, (dd::actors::write_verdict))

CAF_ADD_ATOM(dd_actors, dd::atoms, join_atom, "dd_join")
CAF_ADD_ATOM(dd_actors, dd::atoms, heartbeat_atom, "dd_hbeat")
CAF_ADD_ATOM(dd_actors, dd::atoms, leave_atom, "dd_leave")
CAF_ADD_ATOM(dd_actors, dd::atoms, push_atom, "dd_push")
CAF_ADD_ATOM(dd_actors, dd::atoms, ack_atom, "dd_ack")
CAF_ADD_ATOM(dd_actors, dd::atoms, pull_atom, "dd_pull")
CAF_ADD_ATOM(dd_actors, dd::atoms, broadcast_atom, "dd_bcast")
CAF_ADD_ATOM(dd_actors, dd::atoms, reject_atom, "dd_reject")
CAF_ADD_ATOM(dd_actors, dd::atoms, subscribe_atom, "dd_sub")
CAF_ADD_ATOM(dd_actors, dd::atoms, live_atom, "dd_live")
CAF_ADD_ATOM(dd_actors, dd::atoms, owners_atom, "dd_owners")
CAF_ADD_ATOM(dd_actors, dd::atoms, stop_atom, "dd_stop")
CAF_ADD_ATOM(dd_actors, dd::atoms, step_atom, "dd_step")
CAF_ADD_ATOM(dd_actors, dd::atoms, grace_atom, "dd_grace")
CAF_ADD_ATOM(dd_actors, dd::atoms, lease_atom, "dd_lease")
CAF_ADD_ATOM(dd_actors, dd::atoms, respawn_atom, "dd_respawn")
CAF_ADD_ATOM(dd_actors, dd::atoms, eval_atom, "dd_eval")
CAF_ADD_ATOM(dd_actors, dd::atoms, status_atom, "dd_status")
CAF_ADD_ATOM(dd_actors, dd::atoms, budget_spent_atom, "dd_budget")
CAF_ADD_ATOM(dd_actors, dd::atoms, children_done_atom, "dd_chdone")
CAF_ADD_ATOM(dd_actors, dd::atoms, child_given_up_atom, "dd_giveup")
CAF_ADD_ATOM(dd_actors, dd::atoms, interrupt_timeout_atom, "dd_itmout")
CAF_ADD_ATOM(dd_actors, dd::atoms, finished_atom, "dd_fin")
CAF_ADD_ATOM(dd_actors, dd::atoms, drain_timeout_atom, "dd_dtmout")
CAF_ADD_ATOM(dd_actors, dd::atoms, leave_retry_atom, "dd_lvretry")
CAF_ADD_ATOM(dd_actors, dd::atoms, barrier_timeout_atom, "dd_btmout")
CAF_ADD_ATOM(dd_actors, dd::atoms, round_timeout_atom, "dd_rtmout")
CAF_ADD_ATOM(dd_actors, dd::atoms, final_eval_atom, "dd_feval")
CAF_ADD_ATOM(dd_actors, dd::atoms, step_poll_atom, "dd_spoll")
CAF_ADD_ATOM(dd_actors, dd::atoms, owner_status_atom, "dd_ostatus")
CAF_ADD_ATOM(dd_actors, dd::atoms, kill_atom, "dd_kill")
CAF_ADD_ATOM(dd_actors, dd::atoms, snapshot_atom, "dd_snap")
CAF_ADD_ATOM(dd_actors, dd::atoms, checkpoint_atom, "dd_ckpt")
CAF_ADD_ATOM(dd_actors, dd::atoms, progress_atom, "dd_prog")
CAF_ADD_ATOM(dd_actors, dd::atoms, node_join_atom, "dd_njoin")
CAF_ADD_ATOM(dd_actors, dd::atoms, publish_atom, "dd_pub")
CAF_ADD_ATOM(dd_actors, dd::atoms, syncer_atom, "dd_syncer")
CAF_ADD_ATOM(dd_actors, dd::atoms, drain_atom, "dd_drain")
CAF_ADD_ATOM(dd_actors, dd::atoms, events_atom, "dd_events")
CAF_ADD_ATOM(dd_actors, dd::atoms, query_atom, "dd_query")
CAF_ADD_ATOM(dd_actors, dd::atoms, held_atom, "dd_held")
CAF_ADD_ATOM(dd_actors, dd::atoms, copy_atom, "dd_copy")
CAF_ADD_ATOM(dd_actors, dd::atoms, rebuild_atom, "dd_rebuild")
CAF_ADD_ATOM(dd_actors, dd::atoms, credit_atom, "dd_credit")
CAF_ADD_ATOM(dd_actors, dd::atoms, write_trouble_atom, "dd_wtrbl")
CAF_ADD_ATOM(dd_actors, dd::atoms, write_verdict_atom, "dd_verdict")

// The typed interfaces of the roles (their handles travel in messages: they get type IDs there)
// and the end of the block.
#include "actors/link/protocol.hpp"  // IWYU pragma: export
