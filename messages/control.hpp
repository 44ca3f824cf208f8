// messages/control.hpp — the cluster's control messages as plain C++ values, and their Cap'n
// Proto bytes (wire.capnp NodeJoin, NodeJoinReply, Leave, FragmentQuery, FragmentHeld): the
// handshake of a learner process with the health monitor, a learner's leave, and an owner's
// question for the learners' copies of its fragment (rebuild). Same rules as messages/codec.hpp:
// decoding never trusts its input and returns a dd::wire_error naming the field at fault. Pure and
// thread-safe. docs/wire.md "Nodes" describes the handshake.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "messages/codec.hpp"

namespace dd {

/// Version of the node protocol (the handshake and every message a node exchanges). A learner
/// node of another version is refused at its handshake (`node_refusal::protocol_version`); CAF's
/// middleman refuses a peer whose app identifier ("decoupled-diloco/<version>") differs before
/// that. Bump it when a change needs both sides to be upgraded together.
inline constexpr uint32_t protocol_version = 2;

/// Why a health monitor refused a learner node (wire.capnp NodeRefusal).
enum class node_refusal : uint8_t {
  none = 0,
  other_run,         ///< the node belongs to another run (run id differs)
  protocol_version,  ///< the node speaks another protocol version
  data_mismatch,     ///< the node's data file differs from the syncer's (size or hash)
  no_free_learner,   ///< every learner id asked for is live, or out of range
  run_finished,      ///< the run is stopping or over
  bad_request,       ///< the request did not decode or made no sense
};

/// "none", "otherRun", "protocolVersion", "dataMismatch", "noFreeLearner", "runFinished",
/// "badRequest".
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
};

/// Learner → health monitor: leaving for good (budget spent, drained or stopped).
struct leave_msg {
  int32_t learner_id = 0;
  uint64_t incarnation = 0;
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

wire_bytes encode(const node_join& m);
wire_bytes encode(const node_join_reply& m);
wire_bytes encode(const leave_msg& m);

/// Decoders: errc::malformed for bytes that are not such an envelope (or a negative learner
/// id, more than 4096 learner ids, a Text field above 16 MiB); errc::too_large above
/// limits.max_message_bytes.
result<node_join> decode_node_join(const wire_bytes& b, const decode_limits& limits = {});
result<node_join_reply> decode_node_join_reply(const wire_bytes& b,
                                               const decode_limits& limits = {});
result<leave_msg> decode_leave(const wire_bytes& b, const decode_limits& limits = {});

wire_bytes encode(const fragment_query& m);
wire_bytes encode(const fragment_held& m);
/// errc::malformed for bytes that are not such an envelope or a negative id (and, for
/// fragment_held, a version without `have`); errc::too_large above limits.max_message_bytes.
result<fragment_query> decode_fragment_query(const wire_bytes& b, const decode_limits& limits = {});
result<fragment_held> decode_fragment_held(const wire_bytes& b, const decode_limits& limits = {});

}  // namespace dd
