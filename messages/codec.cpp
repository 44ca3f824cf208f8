// messages/codec.cpp — the data-plane messages: C++ values <-> flat Cap'n Proto Envelopes.
// Chunking: messages/chunking.cpp; checkpoint files: messages/checkpoint_file.cpp.
//
// Every decode runs inside one try block that catches kj::Exception (and anything else): Cap'n
// Proto validates pointers lazily, so reading any field of hostile bytes may throw.
#include "messages/codec.hpp"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <type_traits>

#include "messages/detail/envelope.hpp"
#include "messages/wire.capnp.h"
#include "util/crc32c.hpp"

namespace dd {

namespace cw = capnp_wire;

std::string_view to_string(reject_reason r) noexcept {
  switch (r) {
    case reject_reason::stale: return "stale";
    case reject_reason::duplicate: return "duplicate";
    case reject_reason::malformed: return "malformed";
    case reject_reason::shape_mismatch: return "shapeMismatch";
    case reject_reason::non_finite: return "nonFinite";
    case reject_reason::unknown_learner: return "unknownLearner";
    case reject_reason::stale_incarnation: return "staleIncarnation";
    case reject_reason::superseded: return "superseded";
    case reject_reason::implausible: return "implausible";
  }
  return "unknown";
}

namespace {

using namespace detail;

/// errc::malformed naming `field` when the id `v` is below `min`.
status id_at_least(const char* field, int32_t v, int32_t min) {
  if (v >= min) return {};
  return {errc::malformed,
          std::string(field) + " " + std::to_string(v) +
              (min == 0 ? std::string(" is negative") : " is below " + std::to_string(min))};
}

/// The payload-chunk fields that push and broadcast share (push_msg, broadcast_msg: encoding,
/// total_elements, payload_bytes, chunk_index, chunk_count, chunk_offset, payload and its
/// CRC-32C, computed here), set on either body builder. Primitive fields sit at fixed places
/// in the struct, so only the payload's place among the pointer fields fixes the bytes: a
/// caller that sets other pointer fields after this call keeps the wire format.
template <class Builder, class Msg>
known_crc set_chunk_fields(Builder r, capnp::MessageBuilder& b, const Msg& m,
                           const payload_view& payload) {
  r.setEncoding(static_cast<cw::PayloadEncoding>(m.encoding));
  r.setTotalElements(m.total_elements);
  r.setChunkIndex(m.chunk_index);
  r.setChunkCount(m.chunk_count);
  set_payload(r, b, payload);
  r.setPayloadBytes(m.payload_bytes);
  r.setChunkOffset(m.chunk_offset);
  const uint32_t crc = util::crc32c(payload.data, payload.size);
  r.setPayloadCrc32c(crc);
  return {payload.data, payload.size, crc};  // flatten's trailer reuses it
}

/// Reads set_chunk_fields()'s fields from a push or broadcast body reader into `m` and checks
/// them (check_chunk_fields, errors naming `what`); on success `payload` is the chunk's Data field
/// (not copied: `m.payload` stays as it was).
template <class Reader, class Msg>
status get_chunk_fields(const char* what, Reader r, Msg& m, capnp::Data::Reader& payload) {
  m.encoding = static_cast<payload_encoding>(r.getEncoding());
  m.total_elements = r.getTotalElements();
  m.payload_bytes = r.getPayloadBytes();
  m.chunk_index = r.getChunkIndex();
  m.chunk_count = r.getChunkCount();
  m.chunk_offset = r.getChunkOffset();
  m.payload_crc32c = r.getPayloadCrc32c();
  payload = r.getPayload();
  return check_chunk_fields(what, m.encoding, m.total_elements, m.payload_bytes, m.chunk_index,
                            m.chunk_count, m.chunk_offset, payload.size());
}

/// A push body's fields into `m` (payload left empty), its payload Data field into `payload`.
status read_push(cw::Envelope::Body::Reader body, uint64_t sender_inc, push_msg& m,
                 capnp::Data::Reader& payload) {
  auto r = body.getPush();
  m.learner_id = r.getLearnerId();
  m.incarnation = r.getIncarnation();
  m.fragment_id = r.getFragmentId();
  m.base_version = r.getBaseVersion();
  m.steps = r.getSteps();
  m.tokens = r.getTokens();
  m.transfer_id = r.getTransferId();
  m.contains_from = r.getContainsFrom();
  if (auto st = get_chunk_fields("push", r, m, payload); !st) return st;
  return same_incarnation("push", sender_inc, m.incarnation);
}

/// A broadcast body's fields into `m` (payload left empty), its payload into `payload`.
status read_broadcast(cw::Envelope::Body::Reader body, broadcast_msg& m,
                      capnp::Data::Reader& payload) {
  auto r = body.getBroadcast();
  m.fragment_id = r.getFragmentId();
  m.version = r.getVersion();
  m.merged = get_merged(r.getMerged());
  m.value_digest = r.getValueDigest();
  return get_chunk_fields("broadcast", r, m, payload);
}

/// A chunk_ref of `header` whose payload is `payload`, a Data field read from the message at
/// [data, data + size) or from the aligned copy with_reader made of it.
template <class Msg>
chunk_ref<Msg> make_ref(Msg header, capnp::Data::Reader payload, const uint8_t* data, size_t size) {
  chunk_ref<Msg> out;
  out.header = std::move(header);
  out.payload_size = payload.size();
  const auto at = reinterpret_cast<uintptr_t>(payload.begin());
  const auto lo = reinterpret_cast<uintptr_t>(data);
  if (payload.size() == 0 || (at >= lo && at - lo <= size && payload.size() <= size - (at - lo))) {
    out.payload = payload.size() == 0 ? nullptr : payload.begin();
  } else {  // read from with_reader's aligned copy, which dies with the reader
    out.owned.assign(payload.begin(), payload.end());
    out.payload = out.owned.data();
  }
  return out;
}

/// decode_push_ref / decode_broadcast_ref: the body read with the trailer's check left out,
/// then the trailer checked with one pass over the message that yields the payload's CRC-32C
/// too (prefix, payload and suffix each checksummed once and combined). The checksum decides
/// first, so a damaged message is errc::checksum_mismatch whatever else is wrong with it, as
/// with read_sealed. `read(body, sender_incarnation, msg, payload)` fills the header fields.
template <class Msg, class Read>
result<chunk_ref<Msg>> decode_ref(const uint8_t* data, size_t size, const decode_limits& limits,
                                  const envelope_expect& expect, cw::Envelope::Body::Which want,
                                  Read&& read) {
  using R = result<chunk_ref<Msg>>;
  auto body_fn = [&](cw::Envelope::Body::Reader body, uint64_t sender_inc) -> R {
    Msg m;
    capnp::Data::Reader payload;
    if (auto st = read(body, sender_inc, m, payload); !st) return st.error();
    return make_ref(std::move(m), payload, data, size);
  };
  if (!limits.verify_checksum) return decode_envelope(data, size, limits, expect, want, body_fn);
  decode_limits unchecked = limits;
  unchecked.verify_checksum = false;
  // What open_seal refuses before the checksum (the size cap, no trailer) is refused as it is.
  if (size > limits.max_message_bytes) {
    return R(errc::too_large, "message of " + num(size) + " bytes exceeds max_message_bytes " +
                                  num(limits.max_message_bytes));
  }
  auto body_size = open_seal(data, size, unchecked);
  if (!body_size) return body_size.error();
  const size_t body = *body_size;
  R out = decode_envelope(data, size, unchecked, expect, want, body_fn);
  const bool in_place = out.ok() && out->payload_size != 0 && out->owned.empty();
  uint32_t got = 0, payload_crc = 0;
  if (in_place && limits.defer_payload_checksum) {
    // The payload's share is computed by the assembler as it copies it (check_pending_seal).
    const auto at = static_cast<size_t>(out->payload - data);
    const size_t n = out->payload_size;
    const size_t tail = body - std::min(body, at + n);
    pending_seal seal;
    seal.message = data;
    seal.body = body;
    seal.before_crc = util::crc32c(data, at);
    seal.after_crc = util::crc32c(data + at + n, tail);
    seal.after_bytes = tail;
    seal.payload_bytes = n;
    out->seal = seal;
    return out;
  }
  if (in_place) {
    const auto at = static_cast<size_t>(out->payload - data);
    const size_t n = out->payload_size;
    const size_t tail = body - std::min(body, at + n);  // the payload lies before the trailer
    payload_crc = util::crc32c(out->payload, n);
    got = util::crc32c_combine(util::crc32c(data, at), payload_crc, n);
    got = util::crc32c_combine(got, util::crc32c(data + at + n, tail), tail);
  } else {
    got = util::crc32c(data, body);
  }
  if (auto st = check_seal(data, body, got); !st) return st.error();
  if (in_place) out->payload_crc = payload_crc;
  return out;
}

}  // namespace

// ---- encode ---------------------------------------------------------------------------------

wire_bytes encode(const join_request& m, const envelope_stamp& stamp) {
  capnp::MallocMessageBuilder b;
  auto r = start_envelope(b, stamp).initJoinRequest();
  r.setRequestedLearnerId(m.requested_learner_id);
  r.setHost(m.host);
  auto devs = r.initDevices(static_cast<unsigned>(m.devices.size()));
  for (size_t i = 0; i < m.devices.size(); ++i) devs.set(static_cast<unsigned>(i), m.devices[i]);
  r.setLive(m.live);
  r.setStep(m.step);
  r.setTokens(m.tokens);
  r.setIncarnation(m.incarnation);
  r.setComputeSeconds(m.compute_s);
  r.setTokensTotal(m.tokens_total);
  r.setComputeTotalSeconds(m.compute_total_s);
  return flatten(b);
}

wire_bytes encode(const join_reply& m, const envelope_stamp& stamp) {
  capnp::MallocMessageBuilder b(
      first_segment_words(m.experiment_config_json.size() + m.data_cursor.size()));
  auto r = start_envelope(b, stamp).initJoinReply();
  r.setLearnerId(m.learner_id);
  r.setIncarnation(m.incarnation);
  r.setExperimentConfigJson(m.experiment_config_json);
  r.setShardIndex(m.shard_index);
  r.setShardCount(m.shard_count);
  r.setResumeStep(m.resume_step);
  r.setDataCursor(as_bytes(m.data_cursor));
  r.setTokensBefore(m.tokens_before);
  r.setComputeBeforeSeconds(m.compute_before_s);
  return flatten(b);
}

wire_bytes encode(const heartbeat_msg& m, const envelope_stamp& stamp) {
  capnp::MallocMessageBuilder b;
  auto r = start_envelope(b, stamp).initHeartbeat();
  r.setLearnerId(m.learner_id);
  r.setIncarnation(m.incarnation);
  r.setStep(m.step);
  r.setTokens(m.tokens);
  r.setStepTimeEmaSeconds(m.step_time_ema_s);
  r.setDataCursor(as_bytes(m.data_cursor));
  r.setLoss(m.loss);
  r.setComputeSeconds(m.compute_s);
  r.setLr(m.lr);
  r.setHeldFragment(m.held_fragment);
  r.setHeldVersion(m.held_version);
  r.setHeldOwnerDigest(m.held_owner_digest);
  r.setHeldDigest(m.held_digest);
  r.setStepEndUnixSeconds(m.step_end_unix_s);
  return flatten(b);
}

wire_bytes encode(const push_msg& m, const envelope_stamp& stamp) {
  return encode_push_chunk(m, {m.payload.data(), m.payload.size()}, stamp);
}

wire_bytes encode_push_chunk(const push_msg& header, const payload_view& payload,
                             const envelope_stamp& stamp) {
  const push_msg& m = header;
  capnp::MallocMessageBuilder b;  // the payload is a segment of its own (set_payload)
  auto r = start_envelope(b, stamp).initPush();
  r.setLearnerId(m.learner_id);
  r.setIncarnation(m.incarnation);
  r.setFragmentId(m.fragment_id);
  r.setBaseVersion(m.base_version);
  r.setSteps(m.steps);
  r.setTokens(m.tokens);
  r.setTransferId(m.transfer_id);
  r.setContainsFrom(m.contains_from);
  return flatten(b, set_chunk_fields(r, b, m, payload));
}

wire_bytes encode(const broadcast_msg& m, const envelope_stamp& stamp) {
  return encode_broadcast_chunk(m, {m.payload.data(), m.payload.size()}, stamp);
}

wire_bytes encode_broadcast_chunk(const broadcast_msg& header, const payload_view& payload,
                                  const envelope_stamp& stamp) {
  const broadcast_msg& m = header;
  capnp::MallocMessageBuilder b;  // the payload is a segment of its own (set_payload)
  auto r = start_envelope(b, stamp).initBroadcast();
  r.setFragmentId(m.fragment_id);
  r.setVersion(m.version);
  // The payload before the merged list, as it always was on the wire.
  const known_crc known = set_chunk_fields(r, b, m, payload);
  set_merged(r.initMerged(static_cast<unsigned>(m.merged.size())), m.merged);
  r.setValueDigest(m.value_digest);
  return flatten(b, known);
}

wire_bytes encode(const reject_msg& m, const envelope_stamp& stamp) {
  capnp::MallocMessageBuilder b;
  auto r = start_envelope(b, stamp).initReject();
  r.setLearnerId(m.learner_id);
  r.setFragmentId(m.fragment_id);
  r.setReason(static_cast<cw::RejectReason>(m.reason));
  r.setDetail(m.detail);
  r.setCurrentVersion(m.current_version);
  r.setTransferId(m.transfer_id);
  return flatten(b);
}

wire_bytes encode(const push_ack& m, const envelope_stamp& stamp) {
  capnp::MallocMessageBuilder b;
  auto r = start_envelope(b, stamp).initAck();
  r.setLearnerId(m.learner_id);
  r.setIncarnation(m.incarnation);
  r.setFragmentId(m.fragment_id);
  r.setTransferId(m.transfer_id);
  r.setVersion(m.version);
  return flatten(b);
}

wire_bytes encode(const pull_request& m, const envelope_stamp& stamp) {
  capnp::MallocMessageBuilder b;
  auto r = start_envelope(b, stamp).initPull();
  r.setLearnerId(m.learner_id);
  r.setIncarnation(m.incarnation);
  r.setFragmentId(m.fragment_id);
  return flatten(b);
}

wire_bytes encode(const progress_msg& m, const envelope_stamp& stamp) {
  capnp::MallocMessageBuilder b;
  auto r = start_envelope(b, stamp).initProgress();
  r.setTotalTokens(m.total_tokens);
  r.setLiveLearners(m.live_learners);
  r.setStep(m.step);
  r.setMeanStep(m.mean_step);
  return flatten(b);
}

// ---- decode ---------------------------------------------------------------------------------

result<join_request> decode_join_request(const uint8_t* data, size_t size,
                                         const decode_limits& limits,
                                         const envelope_expect& expect) {
  using R = result<join_request>;
  return decode_envelope(
      data, size, limits, expect, cw::Envelope::Body::JOIN_REQUEST,
      [](cw::Envelope::Body::Reader body, uint64_t sender_inc) -> R {
        auto r = body.getJoinRequest();
        join_request m;
        m.requested_learner_id = r.getRequestedLearnerId();
        m.host = r.getHost();
        for (int32_t d : r.getDevices()) m.devices.push_back(d);
        m.live = r.getLive();
        m.step = r.getStep();
        m.tokens = r.getTokens();
        m.incarnation = r.getIncarnation();
        m.compute_s = r.getComputeSeconds();
        m.tokens_total = r.getTokensTotal();
        m.compute_total_s = r.getComputeTotalSeconds();
        if (m.live) {
          if (auto st = same_incarnation("joinRequest", sender_inc, m.incarnation); !st)
            return st.error();
        }
        return m;
      });
}

result<join_reply> decode_join_reply(const uint8_t* data, size_t size, const decode_limits& limits,
                                     const envelope_expect& expect) {
  using R = result<join_reply>;
  return decode_envelope(data, size, limits, expect, cw::Envelope::Body::JOIN_REPLY,
                         [](cw::Envelope::Body::Reader body, uint64_t) -> R {
                           auto r = body.getJoinReply();
                           join_reply m;
                           m.learner_id = r.getLearnerId();
                           m.incarnation = r.getIncarnation();
                           m.experiment_config_json = r.getExperimentConfigJson();
                           m.shard_index = r.getShardIndex();
                           m.shard_count = r.getShardCount();
                           m.resume_step = r.getResumeStep();
                           m.data_cursor = to_vector(r.getDataCursor());
                           m.tokens_before = r.getTokensBefore();
                           m.compute_before_s = r.getComputeBeforeSeconds();
                           if (m.shard_count == 0) {
                             return R(errc::malformed, "joinReply.shardCount is 0");
                           }
                           if (m.shard_index >= m.shard_count) {
                             return R(errc::malformed,
                                      "joinReply.shardIndex " + num(m.shard_index) +
                                          " is not below shardCount " + num(m.shard_count));
                           }
                           return m;
                         });
}

result<heartbeat_msg> decode_heartbeat(const uint8_t* data, size_t size,
                                       const decode_limits& limits, const envelope_expect& expect) {
  using R = result<heartbeat_msg>;
  return decode_envelope(
      data, size, limits, expect, cw::Envelope::Body::HEARTBEAT,
      [](cw::Envelope::Body::Reader body, uint64_t sender_inc) -> R {
        auto r = body.getHeartbeat();
        heartbeat_msg m;
        m.learner_id = r.getLearnerId();
        m.incarnation = r.getIncarnation();
        m.step = r.getStep();
        m.tokens = r.getTokens();
        m.step_time_ema_s = r.getStepTimeEmaSeconds();
        m.data_cursor = to_vector(r.getDataCursor());
        m.loss = r.getLoss();
        m.compute_s = r.getComputeSeconds();
        m.lr = r.getLr();
        m.held_fragment = r.getHeldFragment();
        m.held_version = r.getHeldVersion();
        m.held_owner_digest = r.getHeldOwnerDigest();
        m.held_digest = r.getHeldDigest();
        m.step_end_unix_s = r.getStepEndUnixSeconds();
        if (m.held_digest != 0 && m.held_fragment < 0)
          return R(errc::malformed,
                   "heartbeat.heldFragment " + std::to_string(m.held_fragment) + " is negative");
        if (auto st = same_incarnation("heartbeat", sender_inc, m.incarnation); !st)
          return st.error();
        return m;
      });
}

result<push_msg> decode_push(const uint8_t* data, size_t size, const decode_limits& limits,
                             const envelope_expect& expect) {
  using R = result<push_msg>;
  return decode_envelope(data, size, limits, expect, cw::Envelope::Body::PUSH,
                         [](cw::Envelope::Body::Reader body, uint64_t sender_inc) -> R {
                           push_msg m;
                           capnp::Data::Reader payload;
                           if (auto st = read_push(body, sender_inc, m, payload); !st)
                             return st.error();
                           m.payload = to_vector(payload);
                           return m;
                         });
}

status check_pending_seal(const pending_seal& seal, uint32_t payload_crc) {
  uint32_t got = util::crc32c_combine(seal.before_crc, payload_crc, seal.payload_bytes);
  got = util::crc32c_combine(got, seal.after_crc, seal.after_bytes);
  return check_seal(seal.message, seal.body, got);
}

result<chunk_ref<push_msg>> decode_push_ref(const uint8_t* data, size_t size,
                                            const decode_limits& limits,
                                            const envelope_expect& expect) {
  return decode_ref<push_msg>(data, size, limits, expect, cw::Envelope::Body::PUSH, read_push);
}

result<broadcast_msg> decode_broadcast(const uint8_t* data, size_t size,
                                       const decode_limits& limits, const envelope_expect& expect) {
  using R = result<broadcast_msg>;
  return decode_envelope(data, size, limits, expect, cw::Envelope::Body::BROADCAST,
                         [](cw::Envelope::Body::Reader body, uint64_t) -> R {
                           broadcast_msg m;
                           capnp::Data::Reader payload;
                           if (auto st = read_broadcast(body, m, payload); !st) return st.error();
                           m.payload = to_vector(payload);
                           return m;
                         });
}

result<chunk_ref<broadcast_msg>> decode_broadcast_ref(const uint8_t* data, size_t size,
                                                      const decode_limits& limits,
                                                      const envelope_expect& expect) {
  return decode_ref<broadcast_msg>(
      data, size, limits, expect, cw::Envelope::Body::BROADCAST,
      [](cw::Envelope::Body::Reader body, uint64_t, broadcast_msg& m,
         capnp::Data::Reader& payload) { return read_broadcast(body, m, payload); });
}

result<reject_msg> decode_reject(const uint8_t* data, size_t size, const decode_limits& limits,
                                 const envelope_expect& expect) {
  using R = result<reject_msg>;
  return decode_envelope(data, size, limits, expect, cw::Envelope::Body::REJECT,
                         [](cw::Envelope::Body::Reader body, uint64_t) -> R {
                           auto r = body.getReject();
                           reject_msg m;
                           m.learner_id = r.getLearnerId();
                           m.fragment_id = r.getFragmentId();
                           auto reason = r.getReason();
                           if (!enum_in_range(reason, cw::RejectReason::IMPLAUSIBLE)) {
                             return R(errc::malformed, "reject.reason: unknown value " +
                                                           num(static_cast<uint16_t>(reason)));
                           }
                           m.reason = static_cast<reject_reason>(reason);
                           m.detail = r.getDetail();
                           m.current_version = r.getCurrentVersion();
                           m.transfer_id = r.getTransferId();
                           return m;
                         });
}

result<push_ack> decode_push_ack(const uint8_t* data, size_t size, const decode_limits& limits,
                                 const envelope_expect& expect) {
  using R = result<push_ack>;
  return decode_envelope(data, size, limits, expect, cw::Envelope::Body::ACK,
                         [](cw::Envelope::Body::Reader body, uint64_t) -> R {
                           auto r = body.getAck();
                           push_ack m;
                           m.learner_id = r.getLearnerId();
                           m.incarnation = r.getIncarnation();
                           m.fragment_id = r.getFragmentId();
                           m.transfer_id = r.getTransferId();
                           m.version = r.getVersion();
                           if (auto st = id_at_least("ack.learnerId", m.learner_id, 0); !st)
                             return st.error();
                           if (auto st = id_at_least("ack.fragmentId", m.fragment_id, 0); !st)
                             return st.error();
                           return m;
                         });
}

result<pull_request> decode_pull_request(const uint8_t* data, size_t size,
                                         const decode_limits& limits,
                                         const envelope_expect& expect) {
  using R = result<pull_request>;
  return decode_envelope(data, size, limits, expect, cw::Envelope::Body::PULL,
                         [](cw::Envelope::Body::Reader body, uint64_t sender_inc) -> R {
                           auto r = body.getPull();
                           pull_request m;
                           m.learner_id = r.getLearnerId();
                           m.incarnation = r.getIncarnation();
                           m.fragment_id = r.getFragmentId();
                           if (auto st = id_at_least("pull.learnerId", m.learner_id, -1); !st)
                             return st.error();
                           if (auto st = id_at_least("pull.fragmentId", m.fragment_id, 0); !st)
                             return st.error();
                           if (m.learner_id >= 0) {
                             if (auto st = same_incarnation("pull", sender_inc, m.incarnation); !st)
                               return st.error();
                           }
                           return m;
                         });
}

result<progress_msg> decode_progress(const uint8_t* data, size_t size, const decode_limits& limits,
                                     const envelope_expect& expect) {
  using R = result<progress_msg>;
  return decode_envelope(data, size, limits, expect, cw::Envelope::Body::PROGRESS,
                         [](cw::Envelope::Body::Reader body, uint64_t) -> R {
                           auto r = body.getProgress();
                           progress_msg m;
                           m.total_tokens = r.getTotalTokens();
                           m.live_learners = r.getLiveLearners();
                           m.step = r.getStep();
                           m.mean_step = r.getMeanStep();
                           return m;
                         });
}

}  // namespace dd
