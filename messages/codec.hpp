// messages/codec.hpp — plain C++ values for every wire message, and their Cap'n Proto bytes.
//
// Every message travels as one `std::vector<uint8_t>` holding a flat-array Cap'n Proto message
// (8-byte words; an `Envelope` from messages/wire.capnp whose union says which message it is),
// sealed by a CRC-32C trailer over all of it (seal_bytes).
// Fragment payloads travel in chunks (`split_push` / `split_broadcast`, default 4 MiB) and are
// put back together by a `chunk_assembler` (messages/chunking.hpp); an owner's durable state is a
// checkpoint file (messages/checkpoint_file.hpp). Both are included at the end of this header, so
// one include serves every caller. Decoding never trusts its input: explicit reader
// limits, every Cap'n Proto exception caught, every size checked; bad bytes give a
// `dd::wire_error`, never an exception or a crash. See docs/wire.md.
//
// Who calls it: learners (join, heartbeat, push, pull, decode broadcast/reject/ack/progress), the
// evaluator (pull), the health monitor (join, heartbeat, progress), fragment owners (decode push
// and pull, broadcast, reject, ack, checkpoints). Functions are
// pure and thread-safe; a chunk_assembler is used by one actor at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "messages/encoding.hpp"
#include "messages/error.hpp"

namespace dd {

/// Bytes of one encoded message (a flat Cap'n Proto message and its checksum trailer, seal_bytes;
/// size is a multiple of 8).
using wire_bytes = std::vector<uint8_t>;

/// Envelope.schemaVersion this build writes and reads; an envelope of another version is
/// refused (errc::schema_mismatch), naming both versions. 2: the envelope carries the run id and
/// the sender's incarnation. 3: every message ends with a checksum trailer (seal_bytes).
inline constexpr uint16_t wire_schema_version = 3;

/// Bytes of the checksum trailer after the last Cap'n Proto segment of every message (one
/// word): bytes 0–3 the CRC-32C (util/crc32c.hpp) of every byte before the trailer,
/// little-endian; bytes 4–7 seal_magic, little-endian. It covers the whole message, envelope and
/// body: a byte damaged on the way (a link that corrupts; `dd-chaos net corrupt`) is refused as
/// errc::checksum_mismatch by every decoder instead of being read as another value (a damaged
/// node_join once named other data and its node was refused for good as `dataMismatch`).
inline constexpr size_t seal_bytes = 8;
/// The trailer's tag ("DDC3" in memory order).
inline constexpr uint32_t seal_magic = 0x33434444;

/// Writes the checksum trailer into the last seal_bytes of `message` (which holds the encoded
/// message followed by seal_bytes of room). Every encode does this; a test or tool that edits an
/// encoded message calls it again on purpose to forge a well-sealed one. Throws
/// std::invalid_argument when `message` is shorter than seal_bytes.
void seal_message(std::vector<uint8_t>& message);

/// What a sender writes into every envelope beside the body: its run and its incarnation.
struct envelope_stamp {
  /// The run (hex, `<run_dir>/run_id`). Empty only where the sender does not know it yet.
  std::string run_id;
  /// A learner: its incarnation (join_reply::incarnation; 0 before its first join). A syncer
  /// role (health monitor, fragment owner, evaluator, job): the syncer's incarnation
  /// (1 for a fresh run, one more for each `--resume`).
  uint64_t incarnation = 0;
};

/// What a receiver accepts: every decoder refuses an envelope whose run id differs from
/// `run_id` (errc::other_run) or whose sender incarnation is below `min_incarnation`
/// (errc::stale_incarnation), before it reads the body. The default accepts only unstamped
/// envelopes of incarnation >= 0, i.e. another run's stamped bytes are refused even by a
/// receiver that forgot to say which run it belongs to.
struct envelope_expect {
  std::string run_id;
  uint64_t min_incarnation = 0;
};

/// The envelope fields around a body (peek_envelope).
struct envelope_header {
  uint16_t schema_version = 0;
  std::string run_id;
  uint64_t sender_incarnation = 0;
};

/// Default chunk size for fragment payloads: 4 MiB of payload bytes per message.
inline constexpr size_t default_chunk_bytes = size_t{4} << 20;

// ---- message values -------------------------------------------------------------------------

/// Which message an envelope holds (matches the union order in wire.capnp).
enum class message_kind : uint8_t {
  join_request = 0,
  join_reply,
  heartbeat,
  push,
  broadcast,
  reject,
  ack,              ///< push_ack
  pull,             ///< pull_request
  progress,         ///< progress_msg
  node_join,        ///< node_join (messages/control.hpp)
  node_join_reply,  ///< node_join_reply
  leave,            ///< leave_msg
  fragment_query,   ///< fragment_query (messages/control.hpp)
  fragment_held,    ///< fragment_held
  live_view,        ///< live_view_msg (messages/control.hpp)
  owner_directory,  ///< owner_directory
  subscribe,        ///< subscribe_msg
  stop,             ///< stop_msg
  status_request,   ///< status_request
  status_reply,     ///< status_reply
  drain,            ///< drain_msg
  drain_reply,      ///< drain_reply
  node_events,      ///< node_events
};

/// The body's name in wire.capnp ("push", "liveView", ...).
std::string_view to_string(message_kind k) noexcept;

/// Learner → health monitor: ask to join (or re-join after a respawn).
struct join_request {
  /// Learner id the caller wants back (a respawned learner asks for its old id); -1 = any.
  int32_t requested_learner_id = -1;
  /// Host name of the learner's node (for logs and the status page).
  std::string host;
  /// Device ordinals the learner runs on (empty on the CPU backend).
  std::vector<int32_t> devices;
  /// A running learner rejoining after its syncer came back: it keeps its own step and data
  /// cursor; `step`, `tokens` and `compute_s` (of its current incarnation) and `incarnation` say
  /// where it is.
  bool live = false;
  uint64_t step = 0;
  uint64_t tokens = 0;
  uint64_t incarnation = 0;
  /// Live: seconds its current incarnation spent in inner steps (heartbeat_msg::compute_s);
  /// 0 from an older writer.
  double compute_s = 0.0;
  /// Live: its tokens and compute seconds over every incarnation — the tokens_before /
  /// compute_before_s of the join reply that started its current incarnation plus `tokens` /
  /// `compute_s`. The monitor takes the larger of this and its own record (bounded by step ×
  /// batch × context), so an addition a crashed syncer never recorded is not lost.
  uint64_t tokens_total = 0;
  double compute_total_s = 0.0;
};

/// Health monitor → learner: the identity and work assignment of a joining learner.
struct join_reply {
  int32_t learner_id = 0;
  /// How many times this learner id has been (re)started; pushes carry it (ALGORITHM.md
  /// "Recovery").
  uint64_t incarnation = 0;
  /// The experiment configuration, JSON text.
  std::string experiment_config_json;
  /// This learner's data shard: index in [0, shard_count).
  uint32_t shard_index = 0;
  uint32_t shard_count = 1;
  /// Inner step to resume from (learning-rate schedule), 0 for a fresh learner.
  uint64_t resume_step = 0;
  /// Opaque data-loader cursor last recorded for this learner (empty = start of the shard).
  std::vector<uint8_t> data_cursor;
  /// The monitor's count of this learner's tokens and compute seconds of its earlier
  /// incarnations: the learner adds its own count to report its total at a live rejoin.
  uint64_t tokens_before = 0;
  double compute_before_s = 0.0;
};

/// Learner → health monitor, every step or every few steps.
struct heartbeat_msg {
  int32_t learner_id = 0;
  uint64_t incarnation = 0;
  /// Inner steps completed.
  uint64_t step = 0;
  /// Tokens processed in total.
  uint64_t tokens = 0;
  /// EMA of the inner step's wall time, seconds (ξ_step input of the grace window).
  double step_time_ema_s = 0.0;
  /// Opaque data-loader cursor after the last step.
  std::vector<uint8_t> data_cursor;
  /// Training loss of the last step, nats/token (0 from older writers).
  double loss = 0.0;
  /// Seconds this incarnation has spent in inner steps (goodput numerator; 0 from older writers).
  double compute_s = 0.0;
  /// Learning rate the last step applied (schedule × re-warmup; 0 from older writers).
  double lr = 0.0;
  /// Divergence check, one fragment per heartbeat in turn (held_digest 0 = none reported): the
  /// version of fragment `held_fragment` the learner holds as its stored global value, the digest
  /// the owner sent with it (broadcast_msg::value_digest) and the digest of the bytes it holds
  /// now (runtime/value_digest.hpp). The health monitor reports a learner whose two differ.
  int32_t held_fragment = 0;
  uint64_t held_version = 0;
  uint64_t held_owner_digest = 0;
  uint64_t held_digest = 0;
  /// The learner's wall clock (Unix seconds) when the step ended; 0 = not sent. learner_loss.csv
  /// is stamped with it, so that a syncer that is slow to read its mailbox does not show the
  /// learners as not stepping.
  double step_end_unix_s = 0.0;
};

/// Learner → fragment owner: one chunk of a pseudo-gradient push (ALGORITHM.md, learner loop).
/// A whole (unchunked) push has chunk_index 0, chunk_count 1, chunk_offset 0 and
/// payload.size() == payload_bytes.
struct push_msg {
  int32_t learner_id = 0;
  uint64_t incarnation = 0;
  int32_t fragment_id = 0;
  /// Version of the global fragment the delta was taken against (base_version_p).
  uint64_t base_version = 0;
  /// Inner steps and tokens since the learner last received this fragment (steps[p],
  /// tokens[p]); the owner's token weight is tokens² / steps.
  uint64_t steps = 0;
  uint64_t tokens = 0;
  /// Sender-chosen id, strictly increasing per (learner, incarnation, fragment); orders
  /// transfers so a newer push replaces a partially received older one.
  uint64_t transfer_id = 0;
  payload_encoding encoding = payload_encoding::fp32;
  /// Elements of the fragment vector (delta_p), before encoding.
  uint64_t total_elements = 0;
  /// Encoded bytes of the whole payload; must equal encoded_size(encoding, total_elements).
  uint64_t payload_bytes = 0;
  uint32_t chunk_index = 0;
  uint32_t chunk_count = 1;
  /// Byte offset of this chunk's payload in the whole encoded payload.
  uint64_t chunk_offset = 0;
  /// This chunk's encoded bytes.
  std::vector<uint8_t> payload;
  /// The oldest earlier transfer of this learner (same incarnation and fragment) whose progress
  /// this delta also holds — a push made before the learner heard whether that transfer was
  /// merged — or 0 when the delta holds only progress no earlier push carried. An owner that
  /// has merged a transfer in [contains_from, transfer_id) rejects the push as `superseded`
  /// instead of counting that progress twice.
  uint64_t contains_from = 0;
  /// CRC-32C of `payload` as it travelled (decode fills it; encode and split_push compute it
  /// from the payload). 0 = not set (an older writer, or a whole push put back together): the
  /// chunk_assembler checks every chunk whose value is not 0.
  uint32_t payload_crc32c = 0;
};

/// The newest push of one learner that a fragment's value contains: the learner's transfer
/// `transfer_id` of incarnation `incarnation` was merged by the outer step that produced
/// `version`. A learner that applies a broadcast with `sync.apply = "rebase"` uses it to tell
/// which of its in-flight pushes the value already contains (ALGORITHM.md "Measured changes").
struct merged_push {
  int32_t learner_id = 0;
  uint64_t incarnation = 0;
  uint64_t transfer_id = 0;
  uint64_t version = 0;
  friend bool operator==(const merged_push& a, const merged_push& b) {
    return a.learner_id == b.learner_id && a.incarnation == b.incarnation &&
           a.transfer_id == b.transfer_id && a.version == b.version;
  }
};

/// Fragment owner → learners (and evaluator): one chunk of the new global value of a fragment.
struct broadcast_msg {
  int32_t fragment_id = 0;
  /// The fragment's version after the outer step that produced this value.
  uint64_t version = 0;
  payload_encoding encoding = payload_encoding::fp32;
  uint64_t total_elements = 0;
  uint64_t payload_bytes = 0;
  uint32_t chunk_index = 0;
  uint32_t chunk_count = 1;
  uint64_t chunk_offset = 0;
  std::vector<uint8_t> payload;
  /// For every learner the owner has merged a push from: its newest merged push (ascending
  /// learner id). Every chunk of a broadcast carries the same list. Empty from older writers.
  std::vector<merged_push> merged;
  /// CRC-32C of `payload`, as for push_msg::payload_crc32c.
  uint32_t payload_crc32c = 0;
  /// Digest of the whole value as a learner decodes it (runtime/value_digest.hpp), computed once by
  /// the owner when it makes the value; the same on every chunk. 0 = none (an older writer).
  uint64_t value_digest = 0;
};

/// Why an owner refused a push (wire.capnp RejectReason).
enum class reject_reason : uint8_t {
  stale = 0,          ///< version - base_version > max_staleness, or anchor gone
  duplicate,          ///< same transfer already merged or pending
  malformed,          ///< bytes or chunks did not decode
  shape_mismatch,     ///< total_elements / payload size does not match the fragment
  non_finite,         ///< payload holds NaN or Inf
  unknown_learner,    ///< learner id not known to the health monitor (or declared dead)
  stale_incarnation,  ///< an older incarnation of a respawned learner
  superseded,         ///< base predates a merged push of the same learner (the delta holds it)
  implausible,        ///< ‖Δ‖ > k × the median accepted norm, or tokens > steps × B·T
};

/// "stale", "duplicate", "malformed", "shapeMismatch", "nonFinite", "unknownLearner",
/// "staleIncarnation", "superseded", "implausible".
std::string_view to_string(reject_reason r) noexcept;

/// Fragment owner → learner: a push was refused.
struct reject_msg {
  int32_t learner_id = 0;
  int32_t fragment_id = 0;
  reject_reason reason = reject_reason::malformed;
  /// Human-readable detail naming the field at fault.
  std::string detail;
  /// The owner's current version of the fragment.
  uint64_t current_version = 0;
  /// The refused push's transfer id (0 when the push did not decode).
  uint64_t transfer_id = 0;
};

/// Fragment owner → learner: a whole push was accepted (it is pending for, or already merged
/// into, an outer step). The learner may send its next push of this fragment; an accepted push
/// is not yet merged — `broadcast_msg::merged` says when it is.
struct push_ack {
  /// The pushing learner and incarnation (a stale incarnation's ack is ignored by the learner).
  int32_t learner_id = 0;
  uint64_t incarnation = 0;
  /// The fragment pushed; never negative (decode: malformed).
  int32_t fragment_id = 0;
  /// The accepted push's transfer id (push_msg::transfer_id).
  uint64_t transfer_id = 0;
  /// The owner's version of the fragment when it accepted the push.
  uint64_t version = 0;
};

/// Learner (or evaluator) → fragment owner: send me the fragment's current value. The owner
/// answers with broadcast chunks to the sender only.
struct pull_request {
  /// The asking learner, or -1 for a non-learner (the evaluator); below -1 is malformed.
  int32_t learner_id = -1;
  /// The asking learner's incarnation (0 for the evaluator).
  uint64_t incarnation = 0;
  /// The fragment wanted, which the receiving owner must hold; never negative (decode:
  /// malformed).
  int32_t fragment_id = 0;
};

/// Health monitor → learner, in reply to each heartbeat: global training progress (learners
/// whose learning-rate schedule follows the group's tokens read it).
struct progress_msg {
  /// Tokens all learners have trained on, over all their incarnations.
  uint64_t total_tokens = 0;
  /// Learners the monitor counted alive when it sent this.
  uint32_t live_learners = 0;
  /// The step of the heartbeat this answers (0: not an answer): the learner knows when it sent
  /// that heartbeat, so it can date `total_tokens` without trusting another node's clock.
  uint64_t step = 0;
  /// The group's mean step as the global push clock counts it: every learner step adds
  /// 1 / (learners live at that moment), so the clock runs at the live learners' mean step rate
  /// and neither jumps nor slows when a learner dies, respawns or finishes early.
  double mean_step = 0.0;
};

/// One retained (version, θ) pair of a fragment owner's anchor ring (anchor = current).
struct anchor_entry {
  uint64_t version = 0;
  std::vector<float> value;
};

/// A fragment owner's durable state (ALGORITHM.md "Recovery": value, momentum, version).
struct owner_checkpoint {
  int32_t fragment_id = 0;
  uint64_t version = 0;
  /// θ_p, fp32, (numel).
  std::vector<float> value;
  /// Outer Nesterov momentum b_p, (numel).
  std::vector<float> momentum;
  /// EMAs in seconds: learner step time ξ_step, round start → quorum ξ_quorum, merge+broadcast
  /// ξ_sync.
  double xi_step_s = 0.0;
  double xi_quorum_s = 0.0;
  double xi_sync_s = 0.0;
  /// Optional anchor ring, oldest first; every value has `value.size()` elements.
  std::vector<anchor_entry> anchors;
  /// Newest merged push per learner (broadcast_msg::merged), ascending learner id.
  std::vector<merged_push> merged;
  /// Whose state this is: the run id and the experiment digest (runtime/run_dir.hpp
  /// state_digest) of the run that wrote it; empty from an older writer. A loader refuses a
  /// checkpoint of another run or experiment.
  std::string run_id;
  std::string experiment_digest;
  /// The `merge` event of `version` as JSON text (its fields, without event/t/time), empty when
  /// `version` is not a merge (a rebuilt or initial value): a restore that finds no merge line of
  /// `version` in events.jsonl (a kill between the checkpoint and its line) logs it from here.
  std::string merge_record;
};

// ---- limits ---------------------------------------------------------------------------------

/// Caps applied while decoding one message.
struct decode_limits {
  /// Largest accepted encoded message, bytes (default 64 MiB; a 4 MiB chunk is ~4 MiB).
  size_t max_message_bytes = size_t{64} << 20;
  /// Cap'n Proto nesting limit (our schemas nest 3 deep).
  int nesting_limit = 16;
  /// Check the checksum trailer (seal_bytes). False only to read the header of a message that
  /// was already refused by its checksum, to address the refusal to what it names (the owner's
  /// targeted reject of a damaged push chunk); never to apply what such a message says.
  bool verify_checksum = true;
  /// decode_push_ref / decode_broadcast_ref only: checksum the message's bytes around the
  /// payload and leave the payload's share of the trailer's check to chunk_assembler::add, which
  /// computes it while it copies the payload into the transfer's buffer (chunk_ref::seal), so
  /// the payload is read once. For a caller that hands the chunk to the assembler before reading
  /// anything of it; a message that fails to decode is checked whole first, as without it.
  bool defer_payload_checksum = false;
};

// ---- encode ---------------------------------------------------------------------------------

/// Encode a value as a flat Cap'n Proto Envelope stamped with the sender's run id and
/// incarnation (`stamp`) and wire_schema_version. Infallible for values within Cap'n Proto's
/// limits (a Data/Text field < 512 MiB); a larger field is a caller bug (asserts/aborts).
wire_bytes encode(const join_request& m, const envelope_stamp& stamp = {});
wire_bytes encode(const join_reply& m, const envelope_stamp& stamp = {});
wire_bytes encode(const heartbeat_msg& m, const envelope_stamp& stamp = {});
wire_bytes encode(const push_msg& m, const envelope_stamp& stamp = {});
wire_bytes encode(const broadcast_msg& m, const envelope_stamp& stamp = {});
wire_bytes encode(const reject_msg& m, const envelope_stamp& stamp = {});
wire_bytes encode(const push_ack& m, const envelope_stamp& stamp = {});
wire_bytes encode(const pull_request& m, const envelope_stamp& stamp = {});
wire_bytes encode(const progress_msg& m, const envelope_stamp& stamp = {});

/// Bytes of a chunk's payload that live elsewhere (a slice of a whole fragment's payload).
struct payload_view {
  const uint8_t* data = nullptr;
  size_t size = 0;
};
/// encode(push_msg) of `header` (its own payload ignored) carrying `payload` as its payload: it
/// decodes to what encode() of a push_msg holding a copy of `payload` decodes to, without that
/// copy (the payload is copied once, into the message; a 4 MiB chunk a word-aligned whole number
/// of words long travels as a Cap'n Proto segment of its own). `payload` need only live during
/// the call.
wire_bytes encode_push_chunk(const push_msg& header, const payload_view& payload,
                             const envelope_stamp& stamp = {});
/// The same for a broadcast.
wire_bytes encode_broadcast_chunk(const broadcast_msg& header, const payload_view& payload,
                                  const envelope_stamp& stamp = {});

// ---- decode ---------------------------------------------------------------------------------

/// Which message `bytes` holds. errc::malformed when it is not an Envelope; errc::too_large over
/// limits.max_message_bytes; errc::checksum_mismatch as the decoders. Checks neither the schema
/// version, the run nor the incarnation.
result<message_kind> peek_kind(const uint8_t* data, size_t size, const decode_limits& limits = {});
/// The envelope's schema version, run id and sender incarnation (unchecked: a receiver that
/// learns the run or the sender's incarnation from a message, e.g. a learner from its join
/// reply, reads them here). Errors as peek_kind; a run id above 256 bytes is malformed.
result<envelope_header> peek_envelope(const uint8_t* data, size_t size,
                                      const decode_limits& limits = {});

/// Decode one message of the named kind. Errors, in the order checked: errc::too_large (over
/// max_message_bytes); errc::checksum_mismatch when the checksum trailer does not match the
/// bytes before it (errc::malformed when there is no trailer); errc::schema_mismatch for a
/// schema version other than wire_schema_version;
/// errc::other_run when the envelope's run id is not `expect.run_id`; errc::stale_incarnation
/// when its sender incarnation is below `expect.min_incarnation`; errc::malformed (not a valid
/// Envelope, another kind, a learner's message whose body names another incarnation than its
/// envelope (heartbeat, push, a learner's pull, a live join request), size not a multiple of 8, an
/// enum value out of range, chunk_index >= chunk_count, chunk_count == 0, a chunk that runs past
/// payload_bytes, a negative fragment id in an ack or pull, a pull's learner id below -1, an
/// ack's negative learner id); errc::size_mismatch when a push/broadcast's payload_bytes is not
/// encoded_size(encoding, total_elements). Never throws. `data` need not be aligned (it is copied
/// when it is not).
result<join_request> decode_join_request(const uint8_t* data, size_t size,
                                         const decode_limits& limits = {},
                                         const envelope_expect& expect = {});
result<join_reply> decode_join_reply(const uint8_t* data, size_t size,
                                     const decode_limits& limits = {},
                                     const envelope_expect& expect = {});
result<heartbeat_msg> decode_heartbeat(const uint8_t* data, size_t size,
                                       const decode_limits& limits = {},
                                       const envelope_expect& expect = {});
result<push_msg> decode_push(const uint8_t* data, size_t size, const decode_limits& limits = {},
                             const envelope_expect& expect = {});
result<broadcast_msg> decode_broadcast(const uint8_t* data, size_t size,
                                       const decode_limits& limits = {},
                                       const envelope_expect& expect = {});
result<reject_msg> decode_reject(const uint8_t* data, size_t size, const decode_limits& limits = {},
                                 const envelope_expect& expect = {});
result<push_ack> decode_push_ack(const uint8_t* data, size_t size, const decode_limits& limits = {},
                                 const envelope_expect& expect = {});
result<pull_request> decode_pull_request(const uint8_t* data, size_t size,
                                         const decode_limits& limits = {},
                                         const envelope_expect& expect = {});
result<progress_msg> decode_progress(const uint8_t* data, size_t size,
                                     const decode_limits& limits = {},
                                     const envelope_expect& expect = {});

/// What a decoder that deferred the trailer's check (decode_limits::defer_payload_checksum)
/// leaves for it: the CRC-32C of the message's bytes before the payload and of those between
/// the payload and the trailer. `message` points at the decoded message (alive as long as the
/// chunk_ref's payload), whose trailer follows its `body` bytes.
struct pending_seal {
  const uint8_t* message = nullptr;
  size_t body = 0;
  uint32_t before_crc = 0;  ///< of the bytes before the payload
  uint32_t after_crc = 0;   ///< of the after_bytes bytes between the payload and the trailer
  size_t after_bytes = 0;
  size_t payload_bytes = 0;
};

/// The trailer's check of a message whose payload has the CRC-32C `payload_crc`: ok when the
/// CRC of the whole body (combined from the three parts) matches the trailer; otherwise
/// errc::checksum_mismatch, as the decoder reports it.
status check_pending_seal(const pending_seal& seal, uint32_t payload_crc);

/// A push or broadcast chunk decoded without copying its payload (decode_push_ref,
/// decode_broadcast_ref; chunk_assembler::add takes it as it is). `header` holds every field but
/// the payload: header.payload is empty and header.payload_crc32c is the value sent.
/// `payload` points at the chunk's `payload_size` payload bytes inside the encoded message the
/// caller decoded, which must stay alive and unchanged while the view is used; only when that
/// message was not 8-byte aligned (the decoder then read an aligned copy) are the payload bytes
/// copied into `owned`, and `payload` points there. Move-only, so `payload` never points into
/// another object's `owned`.
template <class Msg>
struct chunk_ref {
  Msg header;
  const uint8_t* payload = nullptr;
  size_t payload_size = 0;
  std::vector<uint8_t> owned;
  /// CRC-32C of the payload bytes, computed by the decoder in the same pass that checked the
  /// message's trailer (the trailer's CRC is combined from the payload's and the rest's), so
  /// chunk_assembler::add compares it with header.payload_crc32c without reading the payload
  /// again. Empty when the decoder did not check the trailer (decode_limits::verify_checksum
  /// off) or read an aligned copy of the message: then add computes it.
  std::optional<uint32_t> payload_crc;
  /// Set when the decoder left the trailer's check to the assembler
  /// (decode_limits::defer_payload_checksum): then nothing of `header` or the payload has been
  /// checked against the trailer yet, and chunk_assembler::add refuses the chunk with
  /// errc::checksum_mismatch before it accepts anything of it when check_pending_seal fails.
  std::optional<pending_seal> seal;

  chunk_ref() = default;
  chunk_ref(chunk_ref&&) noexcept = default;
  chunk_ref& operator=(chunk_ref&&) noexcept = default;
  chunk_ref(const chunk_ref&) = delete;
  chunk_ref& operator=(const chunk_ref&) = delete;
  ~chunk_ref() = default;
};

/// decode_push without the payload copy: the same checks and errors, the payload left in
/// `data` (chunk_ref). The receive path of a fragment owner: one 4 MiB copy less per chunk.
/// The trailer is checked with one pass over the message that also gives the payload's CRC-32C
/// (chunk_ref::payload_crc); a message that fails both its trailer and another check is refused
/// by its checksum first, as by decode_push.
result<chunk_ref<push_msg>> decode_push_ref(const uint8_t* data, size_t size,
                                            const decode_limits& limits = {},
                                            const envelope_expect& expect = {});
/// decode_broadcast without the payload copy; as decode_push_ref.
result<chunk_ref<broadcast_msg>> decode_broadcast_ref(const uint8_t* data, size_t size,
                                                      const decode_limits& limits = {},
                                                      const envelope_expect& expect = {});

/// Convenience overloads on a byte vector.
inline result<message_kind> peek_kind(const wire_bytes& b, const decode_limits& l = {}) {
  return peek_kind(b.data(), b.size(), l);
}
inline result<envelope_header> peek_envelope(const wire_bytes& b, const decode_limits& l = {}) {
  return peek_envelope(b.data(), b.size(), l);
}
inline result<join_request> decode_join_request(const wire_bytes& b, const decode_limits& l = {},
                                                const envelope_expect& e = {}) {
  return decode_join_request(b.data(), b.size(), l, e);
}
inline result<join_reply> decode_join_reply(const wire_bytes& b, const decode_limits& l = {},
                                            const envelope_expect& e = {}) {
  return decode_join_reply(b.data(), b.size(), l, e);
}
inline result<heartbeat_msg> decode_heartbeat(const wire_bytes& b, const decode_limits& l = {},
                                              const envelope_expect& e = {}) {
  return decode_heartbeat(b.data(), b.size(), l, e);
}
inline result<reject_msg> decode_reject(const wire_bytes& b, const decode_limits& l = {},
                                        const envelope_expect& e = {}) {
  return decode_reject(b.data(), b.size(), l, e);
}
inline result<push_msg> decode_push(const wire_bytes& b, const decode_limits& l = {},
                                    const envelope_expect& e = {}) {
  return decode_push(b.data(), b.size(), l, e);
}
inline result<broadcast_msg> decode_broadcast(const wire_bytes& b, const decode_limits& l = {},
                                              const envelope_expect& e = {}) {
  return decode_broadcast(b.data(), b.size(), l, e);
}
inline result<chunk_ref<push_msg>> decode_push_ref(const wire_bytes& b, const decode_limits& l = {},
                                                   const envelope_expect& e = {}) {
  return decode_push_ref(b.data(), b.size(), l, e);
}
inline result<chunk_ref<broadcast_msg>> decode_broadcast_ref(const wire_bytes& b,
                                                             const decode_limits& l = {},
                                                             const envelope_expect& e = {}) {
  return decode_broadcast_ref(b.data(), b.size(), l, e);
}
inline result<push_ack> decode_push_ack(const wire_bytes& b, const decode_limits& l = {},
                                        const envelope_expect& e = {}) {
  return decode_push_ack(b.data(), b.size(), l, e);
}
inline result<pull_request> decode_pull_request(const wire_bytes& b, const decode_limits& l = {},
                                                const envelope_expect& e = {}) {
  return decode_pull_request(b.data(), b.size(), l, e);
}
inline result<progress_msg> decode_progress(const wire_bytes& b, const decode_limits& l = {},
                                            const envelope_expect& e = {}) {
  return decode_progress(b.data(), b.size(), l, e);
}

}  // namespace dd

// The codec's other jobs, each in its own header (they include this one first).
#include "messages/checkpoint_file.hpp"
#include "messages/chunking.hpp"
