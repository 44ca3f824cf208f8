// messages/control.hpp — the cluster's control messages as plain C++ values, and their Cap'n
// Proto bytes (wire.capnp NodeJoin, NodeJoinReply, Leave, FragmentQuery, FragmentHeld, LiveView,
// OwnerDirectory, Subscribe, Stop, StatusRequest/Reply, Drain/DrainReply, NodeEvents): the
// handshake of a learner process with the health monitor, a learner's leave, an owner's question
// for the learners' copies of its fragment (rebuild), the membership the monitor hands out (live
// view, owner directory), and the operator's and job's commands (stop, status, drain).
// Messages that name actors carry no handle in their bytes: the handles travel next to the bytes,
// in list order (see each message). Same rules as messages/codec.hpp:
// decoding never trusts its input and returns a dd::wire_error naming the field at fault. Pure and
// thread-safe. docs/nodes.md "The node handshake" describes it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "messages/codec.hpp"

namespace dd {

/// Version of the node protocol (the handshake and every message a node exchanges). 3: the live
/// view, owner directory, subscribe, stop, status, drain and node events are wire messages, and
/// every envelope carries the run id and the sender's incarnation (wire_schema_version 2). A
/// learner node of another version is refused at its handshake (`node_refusal::protocol_version`);
/// CAF's middleman refuses a peer whose app identifier ("decoupled-diloco/<version>") differs
/// before that. 4: the monitor acknowledges a leave (a learner node's learner keeps a leave the
/// syncer did not take and delivers it after its node rejoined). 5: a live rejoin reports the
/// learner's tokens and compute seconds over every incarnation (join_request::tokens_total,
/// told by join_reply::tokens_before), so a syncer that crashed before recording a rejoin loses
/// none. Bump it when a change needs both sides to be upgraded together.
inline constexpr uint32_t protocol_version = 5;

/// Why a health monitor refused a learner node (wire.capnp NodeRefusal).
enum class node_refusal : uint8_t {
  none = 0,
  other_run,         ///< the node belongs to another run (run id differs)
  protocol_version,  ///< the node speaks another protocol version
  data_mismatch,     ///< the node's data file differs from the syncer's (size or hash)
  no_free_learner,   ///< every learner id asked for is live, or out of range
  run_finished,      ///< the run is stopping or over
  bad_request,       ///< the request did not decode or made no sense
  auth_challenge,    ///< not a refusal: prove the join token over the reply's challenge
  unauthorized,      ///< the join token proof was missing, wrong or replayed
};

/// "none", "otherRun", "protocolVersion", "dataMismatch", "noFreeLearner", "runFinished",
/// "badRequest", "authChallenge", "unauthorized".
std::string_view to_string(node_refusal r) noexcept;

/// Learner node → health monitor: the handshake of a learner process.
struct node_join {
  /// The run the node belongs to (hex); empty on a node's first start: any run.
  std::string run_id;
  uint32_t protocol_version = dd::protocol_version;
  /// The node's name (nodes file, logs) and host name.
  std::string node_name;
  std::string host;
  /// Learner ids asked for; empty: `learner_count` free ids.
  std::vector<int32_t> learner_ids;
  uint32_t learner_count = 1;
  /// Size in bytes and training-split hash (hex) of the node's data file.
  uint64_t data_bytes = 0;
  std::string data_hash;
  /// The syncer's challenge this request answers, and the join token's proof over it
  /// (actors/link/join_auth.hpp node_join_context); both empty on a first request.
  std::vector<uint8_t> challenge{};
  std::vector<uint8_t> proof{};
};

/// Health monitor → learner node: accepted with the run's identity, experiment and the learner
/// ids the node now holds, or refused with a reason.
struct node_join_reply {
  bool accepted = false;
  node_refusal refusal = node_refusal::none;
  std::string reason;
  std::string run_id;
  /// The resolved experiment as JSON (config::load_json) and its hash (hex).
  std::string experiment_json;
  std::string experiment_hash;
  std::vector<int32_t> learner_ids;
  uint64_t data_bytes = 0;
  std::string data_hash;
  /// Steps per learner: the lr schedule's horizon and the steps budget.
  uint64_t steps_per_learner = 0;
  /// With refusal auth_challenge: the nonce the node proves the join token over.
  std::vector<uint8_t> challenge{};
};

/// Learner → health monitor: leaving for good (budget spent, drained or stopped).
struct leave_msg {
  int32_t learner_id = 0;
  uint64_t incarnation = 0;
  /// The learner leaves because its own node was stopped (SIGINT/SIGTERM to a learner node), not
  /// because its budget is done or it was drained: the monitor keeps its id unfinished (given
  /// back to the next node that asks) and the run goes on.
  bool interrupted = false;
};

/// Fragment owner → learner (rebuilding a fragment whose checkpoint is unusable, or checking
/// for a newer copy after a resume): which version of fragment `fragment_id` do you hold? With
/// `send_value` the learner also sends the value it holds to the owner, as broadcast_msg chunks
/// (atom dd_copy) carrying that value's version and merged list. docs/wire.md "Rebuild".
struct fragment_query {
  int32_t fragment_id = 0;  ///< never negative (decode: malformed)
  uint64_t query_id = 0;    ///< echoed in the answer
  bool send_value = false;
};

/// Learner → fragment owner: the answer to a fragment_query. `have` false: the learner holds no
/// copy yet (it is still loading its fragments after a join or respawn).
struct fragment_held {
  int32_t learner_id = 0;  ///< never negative (decode: malformed)
  uint64_t incarnation = 0;
  int32_t fragment_id = 0;  ///< never negative (decode: malformed)
  uint64_t query_id = 0;
  bool have = false;
  uint64_t version = 0;  ///< the held value's version (0 when !have)
};

wire_bytes encode(const node_join& m, const envelope_stamp& stamp = {});
wire_bytes encode(const node_join_reply& m, const envelope_stamp& stamp = {});
wire_bytes encode(const leave_msg& m, const envelope_stamp& stamp = {});

/// Decoders: errc::malformed for bytes that are not such an envelope (or a negative learner
/// id, more than 4096 learner ids, a Text field above 16 MiB); errc::too_large above
/// limits.max_message_bytes.
result<node_join> decode_node_join(const wire_bytes& b, const decode_limits& limits = {},
                                   const envelope_expect& expect = {});
result<node_join_reply> decode_node_join_reply(const wire_bytes& b,
                                               const decode_limits& limits = {},
                                               const envelope_expect& expect = {});
result<leave_msg> decode_leave(const wire_bytes& b, const decode_limits& limits = {},
                               const envelope_expect& expect = {});

wire_bytes encode(const fragment_query& m, const envelope_stamp& stamp = {});
wire_bytes encode(const fragment_held& m, const envelope_stamp& stamp = {});
/// errc::malformed for bytes that are not such an envelope or a negative id (and, for
/// fragment_held, a version without `have`); errc::too_large above limits.max_message_bytes.
result<fragment_query> decode_fragment_query(const wire_bytes& b, const decode_limits& limits = {},
                                             const envelope_expect& expect = {});
result<fragment_held> decode_fragment_held(const wire_bytes& b, const decode_limits& limits = {},
                                           const envelope_expect& expect = {});

// ---- membership and control (wire.capnp "membership and control") ------------------------------

/// Caps every control decoder applies: learners in a live view, entries in an owner directory.
inline constexpr size_t max_control_entries = 4096;

/// One live learner as the health monitor sees it (wire.capnp LiveLearner).
struct live_learner_entry {
  int32_t learner_id = 0;  ///< never negative (decode: malformed)
  uint64_t incarnation = 0;
  /// EMA of the learner's inner-step wall time, seconds (ξ_step input); finite and >= 0.
  double step_time_ema_s = 0.0;
  friend bool operator==(const live_learner_entry& a, const live_learner_entry& b) {
    return a.learner_id == b.learner_id && a.incarnation == b.incarnation &&
           a.step_time_ema_s == b.step_time_ema_s;
  }
};

/// Health monitor → fragment owners: the live learners, the owners' quorum input. Travels as
/// (live_atom, bytes, std::vector<learner_at_owner_hdl>) with one handle per learner, in list
/// order (the typed handles: actors/link/protocol.hpp).
struct live_view_msg {
  uint64_t epoch = 0;  ///< increases with every change
  /// Ascending learner id, each id at most once (decode: malformed otherwise).
  std::vector<live_learner_entry> learners;
};

/// Health monitor → learners and the evaluator: the current owner of each fragment. Travels as
/// (owners_atom, bytes, std::vector<owner_hdl>) with one handle per entry, in list order.
struct owner_directory {
  /// Entry i: the fragment whose owner is handle i. Non-negative, each at most once.
  std::vector<int32_t> fragment_ids;
};

/// Fragment owner → health monitor: it owns `fragment_id` (the sender is the owner's handle).
struct subscribe_msg {
  int32_t fragment_id = 0;  ///< never negative (decode: malformed)
};

/// Health monitor or a learner node's supervisor → learner, job → health monitor:
/// finish after the current step.
struct stop_msg {
  std::string reason;  ///< for the logs; may be empty; at most 4 KiB
};

/// Operator (dd-node status) → health monitor.
struct status_request {};

/// Health monitor → operator: the live view as JSON text (learners, incarnations, leases,
/// fragment versions; docs/monitoring.md).
struct status_reply {
  std::string json;  ///< at most 16 MiB
  /// A nonce a drain proves the join token over (empty: the syncer has no token).
  std::vector<uint8_t> challenge{};
};

/// Operator (dd-node drain) → health monitor: remove this learner gracefully.
struct drain_msg {
  int32_t learner_id = 0;  ///< never negative (decode: malformed)
  /// The status reply's challenge and the join token's proof over it (drain_context).
  std::vector<uint8_t> challenge{};
  std::vector<uint8_t> proof{};
};

/// Health monitor → operator: whether the learner was live and is now draining.
struct drain_reply {
  bool accepted = false;
  std::string detail;  ///< human-readable; at most 4 KiB
};

/// Learner node → health monitor: a batch of the node's event lines (JSONL).
struct node_events {
  std::string node;   ///< the node's name; 1..64 of [A-Za-z0-9._-] (decode: malformed)
  std::string lines;  ///< whole lines, at most 1 MiB (decode: too_large)
  /// The sending process's stream ("" = none: no duplicate check); at most 64 bytes (decode:
  /// malformed). A batch sent again names the same stream and offset.
  std::string stream;
  uint64_t offset = 0;  ///< bytes of `stream` before `lines`
};

wire_bytes encode(const live_view_msg& m, const envelope_stamp& stamp = {});
wire_bytes encode(const owner_directory& m, const envelope_stamp& stamp = {});
wire_bytes encode(const subscribe_msg& m, const envelope_stamp& stamp = {});
wire_bytes encode(const stop_msg& m, const envelope_stamp& stamp = {});
wire_bytes encode(const status_request& m, const envelope_stamp& stamp = {});
wire_bytes encode(const status_reply& m, const envelope_stamp& stamp = {});
wire_bytes encode(const drain_msg& m, const envelope_stamp& stamp = {});
wire_bytes encode(const drain_reply& m, const envelope_stamp& stamp = {});
wire_bytes encode(const node_events& m, const envelope_stamp& stamp = {});

/// Decoders: the envelope checks of messages/codec.hpp (schema version, run, incarnation, kind),
/// then errc::malformed for a negative or repeated id, more than max_control_entries entries, a
/// live view not in ascending learner id or with a negative or non-finite step time, a Text field
/// above its cap, a node name outside its alphabet; errc::too_large for event lines above 1 MiB
/// or a message above limits.max_message_bytes.
result<live_view_msg> decode_live_view(const wire_bytes& b, const decode_limits& limits = {},
                                       const envelope_expect& expect = {});
result<owner_directory> decode_owner_directory(const wire_bytes& b,
                                               const decode_limits& limits = {},
                                               const envelope_expect& expect = {});
result<subscribe_msg> decode_subscribe(const wire_bytes& b, const decode_limits& limits = {},
                                       const envelope_expect& expect = {});
result<stop_msg> decode_stop(const wire_bytes& b, const decode_limits& limits = {},
                             const envelope_expect& expect = {});
result<status_request> decode_status_request(const wire_bytes& b, const decode_limits& limits = {},
                                             const envelope_expect& expect = {});
result<status_reply> decode_status_reply(const wire_bytes& b, const decode_limits& limits = {},
                                         const envelope_expect& expect = {});
result<drain_msg> decode_drain(const wire_bytes& b, const decode_limits& limits = {},
                               const envelope_expect& expect = {});
result<drain_reply> decode_drain_reply(const wire_bytes& b, const decode_limits& limits = {},
                                       const envelope_expect& expect = {});
result<node_events> decode_node_events(const wire_bytes& b, const decode_limits& limits = {},
                                       const envelope_expect& expect = {});

}  // namespace dd
