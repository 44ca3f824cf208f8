// messages/detail/envelope.hpp — the codec's shared machinery: byte views, flattening, and the
// one place that reads hostile bytes (reader limits sized to the input, every exception caught).
// Used by messages/codec.cpp (data plane), chunking.cpp, checkpoint_file.cpp and
// control_codec.cpp (cluster control messages); not included from outside messages/.
#pragma once

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "messages/codec.hpp"
#include "messages/wire.capnp.h"
#include "util/crc32c.hpp"

namespace dd::detail {

namespace cw = capnp_wire;

inline std::string num(uint64_t v) { return std::to_string(v); }

inline kj::ArrayPtr<const kj::byte> as_bytes(const std::vector<uint8_t>& v) {
  return kj::ArrayPtr<const kj::byte>(reinterpret_cast<const kj::byte*>(v.data()), v.size());
}

inline std::vector<uint8_t> to_vector(capnp::Data::Reader d) {
  return std::vector<uint8_t>(d.begin(), d.end());
}

inline kj::ArrayPtr<const kj::byte> float_bytes(const std::vector<float>& v) {
  static_assert(sizeof(float) == 4, "float32 required");
  return kj::ArrayPtr<const kj::byte>(reinterpret_cast<const kj::byte*>(v.data()),
                                      v.size() * sizeof(float));
}

// Data field -> floats; nullopt when the byte count is not a multiple of 4.
inline std::optional<std::vector<float>> to_floats(capnp::Data::Reader d) {
  if (d.size() % sizeof(float) != 0) return std::nullopt;
  std::vector<float> out(d.size() / sizeof(float));
  if (!out.empty()) std::memcpy(out.data(), d.begin(), d.size());
  return out;
}

// Writes the checksum trailer into the last seal_bytes of `message`, `crc` being the CRC-32C of
// every byte before them (seal_message computes it).
void write_seal(std::vector<uint8_t>& message, uint32_t crc);

// Flattens a builder into a byte vector and seals it: Cap'n Proto's flat-array format (the
// segment table — segment count − 1, then each segment's size in words, u32 little-endian,
// padded to a word — then the segments), then the checksum trailer (seal_bytes: the CRC-32C of
// every byte before it, little-endian, then seal_magic). Each segment is copied once, straight
// into the result (capnp::messageToFlatArray and a vector copy of its words were two copies of
// a 4 MiB chunk, each into fresh memory: dd-bench-transport's sender spent its time there).
// `known`: a segment whose CRC-32C the caller already has (a chunk's payload, referenced as a
// segment of its own by set_payload, and checksummed for its payloadCrc32c): the trailer's CRC
// takes it by crc32c_combine instead of reading those bytes again. Any other segment, or none
// matching, is checksummed as it is.
struct known_crc {
  const uint8_t* data = nullptr;
  size_t size = 0;
  uint32_t crc = 0;
};

inline wire_bytes flatten(capnp::MessageBuilder& builder, const known_crc& known = {}) {
  auto segments = builder.getSegmentsForOutput();
  const size_t table_words = (segments.size() + 2) / 2;
  size_t total = table_words * sizeof(capnp::word);
  for (const auto& s : segments) total += s.size() * sizeof(capnp::word);
  wire_bytes out;
  out.reserve(total + seal_bytes);
  std::vector<uint8_t> table(table_words * sizeof(capnp::word), 0);
  auto put_le32 = [&](size_t at, size_t v) {
    for (int i = 0; i < 4; ++i) table[at + i] = static_cast<uint8_t>(v >> (8 * i));
  };
  put_le32(0, segments.size() - 1);
  for (size_t i = 0; i < segments.size(); ++i) put_le32(4 * (i + 1), segments[i].size());
  out.insert(out.end(), table.begin(), table.end());
  uint32_t crc = util::crc32c(out.data(), out.size());
  for (const auto& s : segments) {
    const auto bytes = s.asBytes();
    const size_t at = out.size();
    out.insert(out.end(), bytes.begin(), bytes.end());
    if (known.data != nullptr && bytes.begin() == known.data && bytes.size() == known.size)
      crc = util::crc32c_combine(crc, known.crc, bytes.size());
    else
      crc = util::crc32c(out.data() + at, bytes.size(), crc);
  }
  out.resize(total + seal_bytes);  // zero-fills only the trailer
  write_seal(out, crc);
  return out;
}

// Sets a chunk's payload (a push or broadcast body's Data field) without copying it into the
// builder when it can (referenceExternalData: `payload` becomes a segment of its own, copied once
// by flatten): when it is word-aligned and a whole number of words, as every 4 MiB chunk is.
// Otherwise copied. `payload` must outlive the builder.
template <class Builder>
void set_payload(Builder r, capnp::MessageBuilder& b, const payload_view& payload) {
  const auto at = reinterpret_cast<uintptr_t>(payload.data);
  const capnp::Data::Reader data(payload.data, payload.size);
  if (payload.size >= 4096 && payload.size % sizeof(capnp::word) == 0 &&
      at % alignof(capnp::word) == 0) {
    r.adoptPayload(b.getOrphanage().referenceExternalData(data));
  } else {
    r.setPayload(data);
  }
}

// The body of a sealed message: its size without the trailer, after checking the trailer
// (when limits.verify_checksum). errc::malformed for a message too short to hold a trailer, or
// one without it (but errc::schema_mismatch when its envelope names another schema version: a
// peer of schema 2 wrote no trailer); errc::checksum_mismatch when the CRC-32C differs.
result<size_t> open_seal(const uint8_t* data, size_t size, const decode_limits& limits);

// Compares `got`, the CRC-32C of the `body` bytes of a message at `data` (as open_seal left
// them), with the trailer after them: errc::checksum_mismatch naming both, as open_seal says it.
status check_seal(const uint8_t* data, size_t body, uint32_t got);

// First segment big enough for the whole message, so it flattens as one segment.
inline unsigned first_segment_words(size_t payload_bytes) {
  size_t words = payload_bytes / sizeof(capnp::word) + 256;
  return static_cast<unsigned>(std::min<size_t>(words, (size_t{1} << 29) - 1));
}

template <class E>
bool enum_in_range(E v, E last) {
  return static_cast<uint16_t>(v) <= static_cast<uint16_t>(last);
}

// Runs `fn(reader)` over a flat message in `data`, with limits and every exception caught.
template <class Fn>
auto with_reader(const uint8_t* data, size_t size, int nesting_limit, Fn&& fn)
    -> decltype(fn(std::declval<capnp::MessageReader&>())) {
  using R = decltype(fn(std::declval<capnp::MessageReader&>()));
  if (data == nullptr || size == 0) return R(errc::malformed, "message is empty");
  if (size % sizeof(capnp::word) != 0) {
    return R(errc::malformed,
             "message size " + num(size) + " bytes is not a multiple of 8 (Cap'n Proto words)");
  }
  const size_t nwords = size / sizeof(capnp::word);
  kj::Array<capnp::word> copy;
  kj::ArrayPtr<const capnp::word> words;
  if (reinterpret_cast<uintptr_t>(data) % alignof(capnp::word) != 0) {
    copy = kj::heapArray<capnp::word>(nwords);
    std::memcpy(copy.begin(), data, size);
    words = kj::ArrayPtr<const capnp::word>(copy.begin(), copy.size());
  } else {
    words = kj::ArrayPtr<const capnp::word>(reinterpret_cast<const capnp::word*>(data), nwords);
  }
  capnp::ReaderOptions options;
  // Sized to the input: a well-formed message reads each word once; twice the input plus slack
  // leaves room while refusing amplification through pointers that alias the same data.
  options.traversalLimitInWords = 2 * nwords + 64;
  options.nestingLimit = nesting_limit;
  try {
    capnp::FlatArrayMessageReader reader(words, options);
    return fn(reader);
  } catch (const kj::Exception& e) {
    return R(errc::malformed,
             std::string("Cap'n Proto refused the message: ") + e.getDescription().cStr());
  } catch (const std::exception& e) {
    return R(errc::malformed, std::string("message could not be decoded: ") + e.what());
  } catch (...) {
    return R(errc::malformed, "message could not be decoded (unknown exception)");
  }
}

// The body's name in wire.capnp ("push"), "unknown" past the last kind (envelope.cpp).
const char* kind_name(cw::Envelope::Body::Which w);

// The last body kind this build knows.
inline constexpr auto last_kind = cw::Envelope::Body::NODE_EVENTS;

// Longest run id an envelope may carry (ours are 32 hex digits).
inline constexpr size_t max_run_id_bytes = 256;

// Starts an Envelope in `b` stamped with wire_schema_version, the sender's run id and
// incarnation; returns its body for the caller to init.
inline cw::Envelope::Body::Builder start_envelope(capnp::MessageBuilder& b,
                                                  const envelope_stamp& stamp) {
  auto env = b.initRoot<cw::Envelope>();
  env.setSchemaVersion(wire_schema_version);
  env.setRunId(stamp.run_id);
  env.setSenderIncarnation(stamp.incarnation);
  return env.getBody();
}

// The envelope checks every decoder runs before it reads the body, in this order: schema
// version (schema_mismatch), run id (other_run), sender incarnation (stale_incarnation).
/// envelope.runId: at most max_run_id_bytes, no control characters (malformed otherwise).
status check_run_id(capnp::Text::Reader run);

status check_envelope(cw::Envelope::Reader envelope, const envelope_expect& expect);

// errc::malformed when a learner's body names incarnation `body` but its envelope `envelope`.
status same_incarnation(const char* what, uint64_t envelope, uint64_t body);

// Shared by the message decoders and the chunk assembler (messages/codec.cpp): checks of a
// payload chunk's header fields — encoding in range, chunk_index < chunk_count, the chunk inside
// payload_bytes, payload_bytes == encoded_size(encoding, total_elements). `what` names the
// message ("push").
status check_chunk_fields(const char* what, payload_encoding enc, uint64_t total_elements,
                          uint64_t payload_bytes, uint32_t index, uint32_t count, uint64_t offset,
                          size_t chunk_size);

// A merged-push list (broadcast or checkpoint) to and from Cap'n Proto (messages/codec.cpp).
void set_merged(capnp::List<cw::MergedPush>::Builder out, const std::vector<merged_push>& in);
std::vector<merged_push> get_merged(capnp::List<cw::MergedPush>::Reader in);

// Reads a sealed message: the size cap (max_message_bytes), the checksum trailer (open_seal),
// then fn(MessageReader&) under Cap'n Proto's reader limits; R is fn's result type.
template <class R, class Fn>
R read_sealed(const uint8_t* data, size_t size, const decode_limits& limits, Fn&& fn) {
  if (size > limits.max_message_bytes) {
    return R(errc::too_large, "message of " + num(size) + " bytes exceeds max_message_bytes " +
                                  num(limits.max_message_bytes));
  }
  auto body_size = open_seal(data, size, limits);
  if (!body_size) return body_size.error();
  return with_reader(data, *body_size, limits.nesting_limit, std::forward<Fn>(fn));
}

// Decodes an Envelope: the size cap, the checksum trailer (open_seal), Cap'n Proto's reader
// limits, check_envelope against
// `expect`, then the body must be `want`; calls fn(body, sender incarnation).
template <class Fn>
auto decode_envelope(const uint8_t* data, size_t size, const decode_limits& limits,
                     const envelope_expect& expect, cw::Envelope::Body::Which want, Fn&& fn)
    -> decltype(fn(std::declval<cw::Envelope::Body::Reader>(), uint64_t{})) {
  using R = decltype(fn(std::declval<cw::Envelope::Body::Reader>(), uint64_t{}));
  return read_sealed<R>(data, size, limits, [&](capnp::MessageReader& reader) -> R {
    auto envelope = reader.getRoot<cw::Envelope>();
    if (auto st = check_envelope(envelope, expect); !st) return st.error();
    auto body = envelope.getBody();
    auto which = body.which();
    if (which != want) {
      return R(errc::malformed, std::string("envelope holds '") + kind_name(which) +
                                    "', expected '" + kind_name(want) + "'");
    }
    return fn(body, envelope.getSenderIncarnation());
  });
}

}  // namespace dd::detail
