// messages/detail/envelope.hpp — the codec's shared machinery: byte views, flattening, and the
// one place that reads hostile bytes (reader limits sized to the input, every exception caught).
// Used by messages/codec.cpp (data plane, checkpoints) and messages/control_codec.cpp (cluster
// control messages); not included from outside messages/.
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

// Flattens a builder into a byte vector (segment table + segments).
inline wire_bytes flatten(capnp::MessageBuilder& builder) {
  kj::Array<capnp::word> words = capnp::messageToFlatArray(builder);
  kj::ArrayPtr<const kj::byte> bytes = words.asBytes();
  return wire_bytes(bytes.begin(), bytes.end());
}

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

inline const char* kind_name(cw::Envelope::Body::Which w) {
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
  }
  return "unknown";
}

// Decodes an Envelope whose body must be `want`, then calls fn(body).
template <class Fn>
auto decode_envelope(const uint8_t* data, size_t size, const decode_limits& limits,
                     cw::Envelope::Body::Which want, Fn&& fn)
    -> decltype(fn(std::declval<cw::Envelope::Body::Reader>())) {
  using R = decltype(fn(std::declval<cw::Envelope::Body::Reader>()));
  if (size > limits.max_message_bytes) {
    return R(errc::too_large, "message of " + num(size) + " bytes exceeds max_message_bytes " +
                                  num(limits.max_message_bytes));
  }
  return with_reader(data, size, limits.nesting_limit, [&](capnp::MessageReader& reader) -> R {
    auto envelope = reader.getRoot<cw::Envelope>();
    if (envelope.getSchemaVersion() != wire_schema_version) {
      return R(errc::malformed, "envelope.schemaVersion " + num(envelope.getSchemaVersion()) +
                                    " (this build reads version " + num(wire_schema_version) + ")");
    }
    auto body = envelope.getBody();
    auto which = body.which();
    if (which != want) {
      return R(errc::malformed, std::string("envelope holds '") + kind_name(which) +
                                    "', expected '" + kind_name(want) + "'");
    }
    return fn(body);
  });
}

}  // namespace dd::detail
