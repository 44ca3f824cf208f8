// messages/envelope.cpp — the envelope around every message: its stamp checks (schema version,
// run id, sender incarnation), peeking at the kind and header, kind names, and the field checks
// the message decoders and the chunk assembler share. The single catch point for hostile bytes
// stays with_reader (detail/envelope.hpp).
#include <limits>
#include <stdexcept>
#include <string>

#include "messages/codec.hpp"
#include "messages/detail/envelope.hpp"
#include "util/crc32c.hpp"

namespace dd {

namespace detail {

const char* kind_name(cw::Envelope::Body::Which w) {
  switch (w) {
    case cw::Envelope::Body::JOIN_REQUEST: return "joinRequest";
    case cw::Envelope::Body::JOIN_REPLY: return "joinReply";
    case cw::Envelope::Body::HEARTBEAT: return "heartbeat";
    case cw::Envelope::Body::PUSH: return "push";
    case cw::Envelope::Body::BROADCAST: return "broadcast";
    case cw::Envelope::Body::REJECT: return "reject";
    case cw::Envelope::Body::ACK: return "ack";
    case cw::Envelope::Body::PULL: return "pull";
    case cw::Envelope::Body::PROGRESS: return "progress";
    case cw::Envelope::Body::NODE_JOIN: return "nodeJoin";
    case cw::Envelope::Body::NODE_JOIN_REPLY: return "nodeJoinReply";
    case cw::Envelope::Body::LEAVE: return "leave";
    case cw::Envelope::Body::FRAGMENT_QUERY: return "fragmentQuery";
    case cw::Envelope::Body::FRAGMENT_HELD: return "fragmentHeld";
    case cw::Envelope::Body::LIVE_VIEW: return "liveView";
    case cw::Envelope::Body::OWNER_DIRECTORY: return "ownerDirectory";
    case cw::Envelope::Body::SUBSCRIBE: return "subscribe";
    case cw::Envelope::Body::STOP: return "stop";
    case cw::Envelope::Body::STATUS_REQUEST: return "statusRequest";
    case cw::Envelope::Body::STATUS_REPLY: return "statusReply";
    case cw::Envelope::Body::DRAIN: return "drain";
    case cw::Envelope::Body::DRAIN_REPLY: return "drainReply";
    case cw::Envelope::Body::NODE_EVENTS: return "nodeEvents";
  }
  return "unknown";
}

/// A run id is at most max_run_id_bytes of text without control characters (ours are 16 hex
/// digits). A NUL inside would not survive a re-encode (Cap'n Proto sets Text from a C string),
/// so such an envelope could be accepted once and refused as another run after a relay
/// (regression input: tests/fuzz/corpus/codec_fuzz/regress_run_id_nul).
status check_run_id(capnp::Text::Reader run) {
  if (run.size() > max_run_id_bytes)
    return {errc::malformed, "envelope.runId is " + num(run.size()) + " bytes long (at most " +
                                 num(max_run_id_bytes) + ")"};
  for (size_t i = 0; i < run.size(); ++i) {
    const auto c = static_cast<unsigned char>(run[i]);
    if (c < 0x20 || c == 0x7f)
      return {errc::malformed,
              "envelope.runId holds control character " + num(c) + " at byte " + num(i)};
  }
  return {};
}

status check_envelope(cw::Envelope::Reader envelope, const envelope_expect& expect) {
  if (envelope.getSchemaVersion() != wire_schema_version) {
    return {errc::schema_mismatch, "envelope.schemaVersion " + num(envelope.getSchemaVersion()) +
                                       " (this build reads version " + num(wire_schema_version) +
                                       ")"};
  }
  const auto run = envelope.getRunId();
  if (auto st = check_run_id(run); !st) return st;
  if (std::string_view(run.cStr(), run.size()) != expect.run_id) {
    auto shown = [](std::string_view id) {
      return id.empty() ? std::string("(none)") : "'" + std::string(id) + "'";
    };
    return {errc::other_run, "envelope.runId " + shown(std::string_view(run.cStr(), run.size())) +
                                 " is another run than this node's " + shown(expect.run_id)};
  }
  const uint64_t inc = envelope.getSenderIncarnation();
  if (inc < expect.min_incarnation) {
    return {errc::stale_incarnation, "envelope.senderIncarnation " + num(inc) +
                                         " is older than the sender's current incarnation " +
                                         num(expect.min_incarnation)};
  }
  return {};
}

namespace {

uint32_t load_le32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

void store_le32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

std::string hex32(uint32_t v) {
  static const char* digits = "0123456789abcdef";
  std::string out = "0x";
  for (int i = 7; i >= 0; --i) out += digits[(v >> (4 * i)) & 0xf];
  return out;
}

}  // namespace

result<size_t> open_seal(const uint8_t* data, size_t size, const decode_limits& limits) {
  using R = result<size_t>;
  if (data == nullptr || size == 0) return R(errc::malformed, "message is empty");
  if (size % sizeof(capnp::word) != 0) {
    return R(errc::malformed,
             "message size " + num(size) + " bytes is not a multiple of 8 (Cap'n Proto words)");
  }
  if (size < 2 * seal_bytes)
    return R(errc::malformed, "message of " + num(size) +
                                  " bytes is too short for a segment and its checksum trailer");
  const uint8_t* trailer = data + size - seal_bytes;
  if (load_le32(trailer + 4) != seal_magic) {
    // No trailer: a peer of schema 2 or older (told by its version), or a damaged tag.
    auto version = with_reader(data, size, limits.nesting_limit,
                               [](capnp::MessageReader& reader) -> result<uint16_t> {
                                 return reader.getRoot<cw::Envelope>().getSchemaVersion();
                               });
    if (version && *version != wire_schema_version)
      return R(errc::schema_mismatch, "envelope.schemaVersion " + num(*version) +
                                          " (this build reads version " + num(wire_schema_version) +
                                          ")");
    return R(errc::malformed, "message of " + num(size) +
                                  " bytes has no checksum trailer (its last word is not tagged " +
                                  hex32(seal_magic) + ")");
  }
  const size_t body = size - seal_bytes;
  if (limits.verify_checksum)
    if (auto st = check_seal(data, body, util::crc32c(data, body)); !st) return st.error();
  return R(body);
}

status check_seal(const uint8_t* data, size_t body, uint32_t got) {
  const uint32_t want = load_le32(data + body);
  if (got == want) return {};
  return {errc::checksum_mismatch, "message checksum: CRC-32C of its " + num(body) + " bytes is " +
                                       hex32(got) + ", its trailer says " + hex32(want) +
                                       " (damaged in transit)"};
}

status same_incarnation(const char* what, uint64_t envelope, uint64_t body) {
  if (envelope == body) return {};
  return {errc::malformed, std::string(what) + ".incarnation " + num(body) +
                               " differs from envelope.senderIncarnation " + num(envelope)};
}

status check_chunk_fields(const char* what, payload_encoding enc, uint64_t total_elements,
                          uint64_t payload_bytes, uint32_t index, uint32_t count, uint64_t offset,
                          size_t chunk_size) {
  std::string w(what);
  if (static_cast<uint16_t>(enc) > static_cast<uint16_t>(payload_encoding::int4)) {
    return {errc::malformed, w + ".encoding: unknown value " + num(static_cast<uint16_t>(enc))};
  }
  if (count == 0) return {errc::malformed, w + ".chunkCount is 0"};
  if (index >= count) {
    return {errc::malformed,
            w + ".chunkIndex " + num(index) + " is not below chunkCount " + num(count)};
  }
  if (offset > payload_bytes || chunk_size > payload_bytes - offset) {
    return {errc::malformed, w + ".chunkOffset " + num(offset) + " + chunk of " + num(chunk_size) +
                                 " bytes runs past payloadBytes " + num(payload_bytes)};
  }
  auto expect = total_elements <= std::numeric_limits<size_t>::max()
                    ? encoded_size(enc, static_cast<size_t>(total_elements))
                    : std::nullopt;
  if (!expect || *expect != payload_bytes) {
    return {errc::size_mismatch, w + ".payloadBytes " + num(payload_bytes) + " does not match " +
                                     num(total_elements) + " elements in " +
                                     std::string(to_string(enc)) + " (" +
                                     (expect ? num(*expect) : std::string("overflow")) + " bytes)"};
  }
  return {};
}

void set_merged(capnp::List<cw::MergedPush>::Builder out, const std::vector<merged_push>& in) {
  for (size_t i = 0; i < in.size(); ++i) {
    auto e = out[static_cast<unsigned>(i)];
    e.setLearnerId(in[i].learner_id);
    e.setIncarnation(in[i].incarnation);
    e.setTransferId(in[i].transfer_id);
    e.setVersion(in[i].version);
  }
}

std::vector<merged_push> get_merged(capnp::List<cw::MergedPush>::Reader in) {
  std::vector<merged_push> out;
  out.reserve(in.size());
  for (auto e : in)
    out.push_back({e.getLearnerId(), e.getIncarnation(), e.getTransferId(), e.getVersion()});
  return out;
}

}  // namespace detail

using namespace detail;

void seal_message(std::vector<uint8_t>& message) {
  if (message.size() < seal_bytes)
    throw std::invalid_argument("seal_message: " + num(message.size()) +
                                " bytes leave no room for the " + num(seal_bytes) +
                                "-byte checksum trailer");
  write_seal(message, util::crc32c(message.data(), message.size() - seal_bytes));
}

namespace detail {

void write_seal(std::vector<uint8_t>& message, uint32_t crc) {
  const size_t body = message.size() - seal_bytes;
  store_le32(message.data() + body, crc);
  store_le32(message.data() + body + 4, seal_magic);
}

}  // namespace detail

std::string_view to_string(message_kind k) noexcept {
  return kind_name(static_cast<cw::Envelope::Body::Which>(static_cast<uint16_t>(k)));
}

result<message_kind> peek_kind(const uint8_t* data, size_t size, const decode_limits& limits) {
  using R = result<message_kind>;
  return read_sealed<R>(data, size, limits, [](capnp::MessageReader& reader) -> R {
    auto which = reader.getRoot<cw::Envelope>().getBody().which();
    if (static_cast<uint16_t>(which) > static_cast<uint16_t>(last_kind)) {
      return R(errc::malformed,
               "envelope body: unknown message kind " + num(static_cast<uint16_t>(which)));
    }
    return R(static_cast<message_kind>(static_cast<uint16_t>(which)));
  });
}

result<envelope_header> peek_envelope(const uint8_t* data, size_t size,
                                      const decode_limits& limits) {
  using R = result<envelope_header>;
  return read_sealed<R>(data, size, limits, [](capnp::MessageReader& reader) -> R {
    auto envelope = reader.getRoot<cw::Envelope>();
    auto run = envelope.getRunId();
    if (auto st = detail::check_run_id(run); !st) return R(st.error());
    envelope_header h;
    h.schema_version = envelope.getSchemaVersion();
    h.run_id.assign(run.cStr(), run.size());
    h.sender_incarnation = envelope.getSenderIncarnation();
    return h;
  });
}

}  // namespace dd
