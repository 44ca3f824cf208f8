// messages/codec.cpp — C++ values <-> flat Cap'n Proto bytes, chunking, checkpoint files.
//
// Every decode runs inside one try block that catches kj::Exception (and anything else): Cap'n
// Proto validates pointers lazily, so reading any field of hostile bytes may throw.
#include "messages/codec.hpp"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <type_traits>

#include "messages/detail/envelope.hpp"
#include "messages/wire.capnp.h"
#include "util/assert.hpp"
#include "util/crc32c.hpp"
#include "util/files.hpp"

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
  }
  return "unknown";
}

namespace {

constexpr uint64_t not_received = std::numeric_limits<uint64_t>::max();

using namespace detail;

// Shared checks of a payload chunk's header fields.
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

/// errc::malformed naming `field` when the id `v` is below `min`.
status id_at_least(const char* field, int32_t v, int32_t min) {
  if (v >= min) return {};
  return {errc::malformed,
          std::string(field) + " " + std::to_string(v) +
              (min == 0 ? std::string(" is negative") : " is below " + std::to_string(min))};
}

/// Writes a merged-push list (broadcast or checkpoint).
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

}  // namespace

// ---- encode ---------------------------------------------------------------------------------

wire_bytes encode(const join_request& m) {
  capnp::MallocMessageBuilder b;
  auto r = b.initRoot<cw::Envelope>().getBody().initJoinRequest();
  r.setRequestedLearnerId(m.requested_learner_id);
  r.setHost(m.host);
  auto devs = r.initDevices(static_cast<unsigned>(m.devices.size()));
  for (size_t i = 0; i < m.devices.size(); ++i) devs.set(static_cast<unsigned>(i), m.devices[i]);
  r.setLive(m.live);
  r.setStep(m.step);
  r.setTokens(m.tokens);
  r.setIncarnation(m.incarnation);
  return flatten(b);
}

wire_bytes encode(const join_reply& m) {
  capnp::MallocMessageBuilder b(
      first_segment_words(m.experiment_config_json.size() + m.data_cursor.size()));
  auto r = b.initRoot<cw::Envelope>().getBody().initJoinReply();
  r.setLearnerId(m.learner_id);
  r.setIncarnation(m.incarnation);
  r.setExperimentConfigJson(m.experiment_config_json);
  r.setShardIndex(m.shard_index);
  r.setShardCount(m.shard_count);
  r.setResumeStep(m.resume_step);
  r.setDataCursor(as_bytes(m.data_cursor));
  return flatten(b);
}

wire_bytes encode(const heartbeat_msg& m) {
  capnp::MallocMessageBuilder b;
  auto r = b.initRoot<cw::Envelope>().getBody().initHeartbeat();
  r.setLearnerId(m.learner_id);
  r.setIncarnation(m.incarnation);
  r.setStep(m.step);
  r.setTokens(m.tokens);
  r.setStepTimeEmaSeconds(m.step_time_ema_s);
  r.setDataCursor(as_bytes(m.data_cursor));
  r.setLoss(m.loss);
  r.setComputeSeconds(m.compute_s);
  r.setLr(m.lr);
  return flatten(b);
}

wire_bytes encode(const push_msg& m) {
  capnp::MallocMessageBuilder b(first_segment_words(m.payload.size()));
  auto r = b.initRoot<cw::Envelope>().getBody().initPush();
  r.setLearnerId(m.learner_id);
  r.setIncarnation(m.incarnation);
  r.setFragmentId(m.fragment_id);
  r.setBaseVersion(m.base_version);
  r.setSteps(m.steps);
  r.setTokens(m.tokens);
  r.setEncoding(static_cast<cw::PayloadEncoding>(m.encoding));
  r.setTotalElements(m.total_elements);
  r.setChunkIndex(m.chunk_index);
  r.setChunkCount(m.chunk_count);
  r.setPayload(as_bytes(m.payload));
  r.setTransferId(m.transfer_id);
  r.setPayloadBytes(m.payload_bytes);
  r.setChunkOffset(m.chunk_offset);
  r.setContainsFrom(m.contains_from);
  r.setPayloadCrc32c(util::crc32c(m.payload.data(), m.payload.size()));
  return flatten(b);
}

wire_bytes encode(const broadcast_msg& m) {
  capnp::MallocMessageBuilder b(first_segment_words(m.payload.size()));
  auto r = b.initRoot<cw::Envelope>().getBody().initBroadcast();
  r.setFragmentId(m.fragment_id);
  r.setVersion(m.version);
  r.setTotalElements(m.total_elements);
  r.setEncoding(static_cast<cw::PayloadEncoding>(m.encoding));
  r.setChunkIndex(m.chunk_index);
  r.setChunkCount(m.chunk_count);
  r.setPayload(as_bytes(m.payload));
  r.setPayloadBytes(m.payload_bytes);
  r.setChunkOffset(m.chunk_offset);
  set_merged(r.initMerged(static_cast<unsigned>(m.merged.size())), m.merged);
  r.setPayloadCrc32c(util::crc32c(m.payload.data(), m.payload.size()));
  return flatten(b);
}

wire_bytes encode(const reject_msg& m) {
  capnp::MallocMessageBuilder b;
  auto r = b.initRoot<cw::Envelope>().getBody().initReject();
  r.setLearnerId(m.learner_id);
  r.setFragmentId(m.fragment_id);
  r.setReason(static_cast<cw::RejectReason>(m.reason));
  r.setDetail(m.detail);
  r.setCurrentVersion(m.current_version);
  r.setTransferId(m.transfer_id);
  return flatten(b);
}

wire_bytes encode(const push_ack& m) {
  capnp::MallocMessageBuilder b;
  auto r = b.initRoot<cw::Envelope>().getBody().initAck();
  r.setLearnerId(m.learner_id);
  r.setIncarnation(m.incarnation);
  r.setFragmentId(m.fragment_id);
  r.setTransferId(m.transfer_id);
  r.setVersion(m.version);
  return flatten(b);
}

wire_bytes encode(const pull_request& m) {
  capnp::MallocMessageBuilder b;
  auto r = b.initRoot<cw::Envelope>().getBody().initPull();
  r.setLearnerId(m.learner_id);
  r.setIncarnation(m.incarnation);
  r.setFragmentId(m.fragment_id);
  return flatten(b);
}

wire_bytes encode(const progress_msg& m) {
  capnp::MallocMessageBuilder b;
  auto r = b.initRoot<cw::Envelope>().getBody().initProgress();
  r.setTotalTokens(m.total_tokens);
  r.setLiveLearners(m.live_learners);
  r.setStep(m.step);
  r.setMeanStep(m.mean_step);
  return flatten(b);
}

// ---- decode ---------------------------------------------------------------------------------

result<message_kind> peek_kind(const uint8_t* data, size_t size, const decode_limits& limits) {
  using R = result<message_kind>;
  if (size > limits.max_message_bytes) {
    return R(errc::too_large, "message of " + num(size) + " bytes exceeds max_message_bytes " +
                                  num(limits.max_message_bytes));
  }
  return with_reader(data, size, limits.nesting_limit, [](capnp::MessageReader& reader) -> R {
    auto which = reader.getRoot<cw::Envelope>().getBody().which();
    if (static_cast<uint16_t>(which) > static_cast<uint16_t>(cw::Envelope::Body::FRAGMENT_HELD)) {
      return R(errc::malformed,
               "envelope body: unknown message kind " + num(static_cast<uint16_t>(which)));
    }
    return R(static_cast<message_kind>(static_cast<uint16_t>(which)));
  });
}

result<join_request> decode_join_request(const uint8_t* data, size_t size,
                                         const decode_limits& limits) {
  using R = result<join_request>;
  return decode_envelope(data, size, limits, cw::Envelope::Body::JOIN_REQUEST,
                         [](cw::Envelope::Body::Reader body) -> R {
                           auto r = body.getJoinRequest();
                           join_request m;
                           m.requested_learner_id = r.getRequestedLearnerId();
                           m.host = r.getHost();
                           for (int32_t d : r.getDevices()) m.devices.push_back(d);
                           m.live = r.getLive();
                           m.step = r.getStep();
                           m.tokens = r.getTokens();
                           m.incarnation = r.getIncarnation();
                           return m;
                         });
}

result<join_reply> decode_join_reply(const uint8_t* data, size_t size,
                                     const decode_limits& limits) {
  using R = result<join_reply>;
  return decode_envelope(
      data, size, limits, cw::Envelope::Body::JOIN_REPLY, [](cw::Envelope::Body::Reader body) -> R {
        auto r = body.getJoinReply();
        join_reply m;
        m.learner_id = r.getLearnerId();
        m.incarnation = r.getIncarnation();
        m.experiment_config_json = r.getExperimentConfigJson();
        m.shard_index = r.getShardIndex();
        m.shard_count = r.getShardCount();
        m.resume_step = r.getResumeStep();
        m.data_cursor = to_vector(r.getDataCursor());
        if (m.shard_count == 0) {
          return R(errc::malformed, "joinReply.shardCount is 0");
        }
        if (m.shard_index >= m.shard_count) {
          return R(errc::malformed, "joinReply.shardIndex " + num(m.shard_index) +
                                        " is not below shardCount " + num(m.shard_count));
        }
        return m;
      });
}

result<heartbeat_msg> decode_heartbeat(const uint8_t* data, size_t size,
                                       const decode_limits& limits) {
  using R = result<heartbeat_msg>;
  return decode_envelope(data, size, limits, cw::Envelope::Body::HEARTBEAT,
                         [](cw::Envelope::Body::Reader body) -> R {
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
                           return m;
                         });
}

result<push_msg> decode_push(const uint8_t* data, size_t size, const decode_limits& limits) {
  using R = result<push_msg>;
  return decode_envelope(
      data, size, limits, cw::Envelope::Body::PUSH, [](cw::Envelope::Body::Reader body) -> R {
        auto r = body.getPush();
        push_msg m;
        m.learner_id = r.getLearnerId();
        m.incarnation = r.getIncarnation();
        m.fragment_id = r.getFragmentId();
        m.base_version = r.getBaseVersion();
        m.steps = r.getSteps();
        m.tokens = r.getTokens();
        m.transfer_id = r.getTransferId();
        m.encoding = static_cast<payload_encoding>(r.getEncoding());
        m.total_elements = r.getTotalElements();
        m.payload_bytes = r.getPayloadBytes();
        m.chunk_index = r.getChunkIndex();
        m.chunk_count = r.getChunkCount();
        m.chunk_offset = r.getChunkOffset();
        m.contains_from = r.getContainsFrom();
        m.payload_crc32c = r.getPayloadCrc32c();
        auto payload = r.getPayload();
        if (auto st =
                check_chunk_fields("push", m.encoding, m.total_elements, m.payload_bytes,
                                   m.chunk_index, m.chunk_count, m.chunk_offset, payload.size());
            !st) {
          return st.error();
        }
        m.payload = to_vector(payload);
        return m;
      });
}

result<broadcast_msg> decode_broadcast(const uint8_t* data, size_t size,
                                       const decode_limits& limits) {
  using R = result<broadcast_msg>;
  return decode_envelope(
      data, size, limits, cw::Envelope::Body::BROADCAST, [](cw::Envelope::Body::Reader body) -> R {
        auto r = body.getBroadcast();
        broadcast_msg m;
        m.fragment_id = r.getFragmentId();
        m.version = r.getVersion();
        m.encoding = static_cast<payload_encoding>(r.getEncoding());
        m.total_elements = r.getTotalElements();
        m.payload_bytes = r.getPayloadBytes();
        m.chunk_index = r.getChunkIndex();
        m.chunk_count = r.getChunkCount();
        m.chunk_offset = r.getChunkOffset();
        m.merged = get_merged(r.getMerged());
        m.payload_crc32c = r.getPayloadCrc32c();
        auto payload = r.getPayload();
        if (auto st =
                check_chunk_fields("broadcast", m.encoding, m.total_elements, m.payload_bytes,
                                   m.chunk_index, m.chunk_count, m.chunk_offset, payload.size());
            !st) {
          return st.error();
        }
        m.payload = to_vector(payload);
        return m;
      });
}

result<reject_msg> decode_reject(const uint8_t* data, size_t size, const decode_limits& limits) {
  using R = result<reject_msg>;
  return decode_envelope(
      data, size, limits, cw::Envelope::Body::REJECT, [](cw::Envelope::Body::Reader body) -> R {
        auto r = body.getReject();
        reject_msg m;
        m.learner_id = r.getLearnerId();
        m.fragment_id = r.getFragmentId();
        auto reason = r.getReason();
        if (!enum_in_range(reason, cw::RejectReason::SUPERSEDED)) {
          return R(errc::malformed,
                   "reject.reason: unknown value " + num(static_cast<uint16_t>(reason)));
        }
        m.reason = static_cast<reject_reason>(reason);
        m.detail = r.getDetail();
        m.current_version = r.getCurrentVersion();
        m.transfer_id = r.getTransferId();
        return m;
      });
}

result<push_ack> decode_push_ack(const uint8_t* data, size_t size, const decode_limits& limits) {
  using R = result<push_ack>;
  return decode_envelope(data, size, limits, cw::Envelope::Body::ACK,
                         [](cw::Envelope::Body::Reader body) -> R {
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
                                         const decode_limits& limits) {
  using R = result<pull_request>;
  return decode_envelope(data, size, limits, cw::Envelope::Body::PULL,
                         [](cw::Envelope::Body::Reader body) -> R {
                           auto r = body.getPull();
                           pull_request m;
                           m.learner_id = r.getLearnerId();
                           m.incarnation = r.getIncarnation();
                           m.fragment_id = r.getFragmentId();
                           if (auto st = id_at_least("pull.learnerId", m.learner_id, -1); !st)
                             return st.error();
                           if (auto st = id_at_least("pull.fragmentId", m.fragment_id, 0); !st)
                             return st.error();
                           return m;
                         });
}

result<progress_msg> decode_progress(const uint8_t* data, size_t size,
                                     const decode_limits& limits) {
  using R = result<progress_msg>;
  return decode_envelope(data, size, limits, cw::Envelope::Body::PROGRESS,
                         [](cw::Envelope::Body::Reader body) -> R {
                           auto r = body.getProgress();
                           progress_msg m;
                           m.total_tokens = r.getTotalTokens();
                           m.live_learners = r.getLiveLearners();
                           m.step = r.getStep();
                           m.mean_step = r.getMeanStep();
                           return m;
                         });
}

// ---- chunking -------------------------------------------------------------------------------

namespace {

template <class Msg>
result<std::vector<Msg>> split_impl(const Msg& whole, size_t chunk_bytes, const char* what) {
  using R = result<std::vector<Msg>>;
  if (chunk_bytes == 0) return R(errc::invalid_argument, "chunk_bytes must be > 0");
  if (whole.payload.size() != whole.payload_bytes) {
    return R(errc::size_mismatch, std::string(what) + ".payload holds " +
                                      num(whole.payload.size()) + " bytes, payload_bytes says " +
                                      num(whole.payload_bytes));
  }
  const size_t total = whole.payload.size();
  const size_t count = total == 0 ? 1 : (total + chunk_bytes - 1) / chunk_bytes;
  if (count > std::numeric_limits<uint32_t>::max()) {
    return R(errc::too_large, std::string(what) + ": " + num(count) + " chunks do not fit u32");
  }
  std::vector<Msg> out;
  out.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    Msg c;
    c = whole;  // header fields; payload replaced below
    c.payload.clear();
    const size_t off = i * chunk_bytes;
    const size_t len = std::min(chunk_bytes, total - off);
    c.chunk_index = static_cast<uint32_t>(i);
    c.chunk_count = static_cast<uint32_t>(count);
    c.chunk_offset = off;
    c.payload.assign(whole.payload.begin() + static_cast<std::ptrdiff_t>(off),
                     whole.payload.begin() + static_cast<std::ptrdiff_t>(off + len));
    c.payload_crc32c = util::crc32c(c.payload.data(), c.payload.size());
    out.push_back(std::move(c));
  }
  return out;
}

bool same_transfer_header(const push_msg& a, const push_msg& b) {
  return a.learner_id == b.learner_id && a.incarnation == b.incarnation &&
         a.fragment_id == b.fragment_id && a.base_version == b.base_version && a.steps == b.steps &&
         a.tokens == b.tokens && a.transfer_id == b.transfer_id && a.encoding == b.encoding &&
         a.total_elements == b.total_elements && a.payload_bytes == b.payload_bytes &&
         a.chunk_count == b.chunk_count && a.contains_from == b.contains_from;
}

bool same_transfer_header(const broadcast_msg& a, const broadcast_msg& b) {
  return a.fragment_id == b.fragment_id && a.version == b.version && a.encoding == b.encoding &&
         a.total_elements == b.total_elements && a.payload_bytes == b.payload_bytes &&
         a.chunk_count == b.chunk_count;
}

std::tuple<uint64_t, uint64_t> order_of(const push_msg& m) {
  return {m.incarnation, m.transfer_id};
}
std::tuple<uint64_t, uint64_t> order_of(const broadcast_msg& m) { return {m.version, 0}; }

const char* name_of(const push_msg&) { return "push"; }
const char* name_of(const broadcast_msg&) { return "broadcast"; }

std::string describe(const push_msg& m) {
  return "push (learner " + std::to_string(m.learner_id) + ", fragment " +
         std::to_string(m.fragment_id) + ", transfer " + num(m.transfer_id) + ")";
}
std::string describe(const broadcast_msg& m) {
  return "broadcast (fragment " + std::to_string(m.fragment_id) + ", version " + num(m.version) +
         ")";
}

}  // namespace

result<std::vector<push_msg>> split_push(const push_msg& whole, size_t chunk_bytes) {
  return split_impl(whole, chunk_bytes, "push");
}

result<std::vector<broadcast_msg>> split_broadcast(const broadcast_msg& whole, size_t chunk_bytes) {
  return split_impl(whole, chunk_bytes, "broadcast");
}

chunk_assembler::chunk_assembler(chunk_limits limits) : limits_(limits) {}

template <class Msg>
void chunk_assembler::release(assembly<Msg>& a) noexcept {
  buffered_ -= a.bytes.size();
  a.bytes = {};
}

template <class Msg, class Key>
result<std::optional<Msg>> chunk_assembler::add_impl(std::map<Key, assembly<Msg>>& table,
                                                     const Key& key, Msg chunk) {
  using R = result<std::optional<Msg>>;
  const std::string what = describe(chunk);
  // A chunk damaged in transit is refused before it can touch any transfer.
  if (chunk.payload_crc32c != 0) {
    const uint32_t crc = util::crc32c(chunk.payload.data(), chunk.payload.size());
    if (crc != chunk.payload_crc32c) {
      char buf[96];
      std::snprintf(buf, sizeof buf, ": chunk %u of %u: payload CRC32C %08x does not match %08x",
                    chunk.chunk_index, chunk.chunk_count, crc, chunk.payload_crc32c);
      return R(errc::checksum_mismatch, what + buf + " sent with it (damaged in transit)");
    }
  }
  auto it = table.find(key);
  const auto order = order_of(chunk);
  if (it != table.end()) {
    if (order < it->second.order) {
      return R(errc::chunk_stale, what + ": chunk of an older transfer than the one in progress");
    }
    if (order > it->second.order) {  // newest transfer wins
      release(it->second);
      table.erase(it);
      it = table.end();
    }
  }
  // From here on an error for this transfer discards its partial assembly.
  auto fail = [&](errc code, const std::string& msg) -> R {
    if (it != table.end()) {
      release(it->second);
      table.erase(it);
    }
    return R(code, what + ": " + msg);
  };

  if (auto st = check_chunk_fields(name_of(chunk), chunk.encoding, chunk.total_elements,
                                   chunk.payload_bytes, chunk.chunk_index, chunk.chunk_count,
                                   chunk.chunk_offset, chunk.payload.size());
      !st) {
    errc code = st.code() == errc::malformed ? errc::chunk_inconsistent : st.code();
    return fail(code, st.error().message);
  }
  if (chunk.chunk_count > limits_.max_chunks) {
    return fail(errc::too_large, "chunkCount " + num(chunk.chunk_count) + " exceeds max_chunks " +
                                     num(limits_.max_chunks));
  }
  if (chunk.payload.size() > limits_.max_chunk_bytes) {
    return fail(errc::too_large, "chunk of " + num(chunk.payload.size()) +
                                     " bytes exceeds max_chunk_bytes " +
                                     num(limits_.max_chunk_bytes));
  }
  if (chunk.payload_bytes > limits_.max_assembly_bytes) {
    return fail(errc::too_large, "payloadBytes " + num(chunk.payload_bytes) +
                                     " exceeds max_assembly_bytes " +
                                     num(limits_.max_assembly_bytes));
  }
  if (chunk.payload.empty() && chunk.payload_bytes != 0) {
    return fail(errc::chunk_inconsistent,
                "empty chunk " + num(chunk.chunk_index) + " of a non-empty payload");
  }
  if (chunk.payload_bytes == 0 && chunk.chunk_count != 1) {
    return fail(errc::chunk_inconsistent,
                "an empty payload must travel as 1 chunk, not " + num(chunk.chunk_count));
  }
  if (chunk.chunk_count > 1 && chunk.chunk_count > chunk.payload_bytes) {
    return fail(errc::chunk_inconsistent, "chunkCount " + num(chunk.chunk_count) +
                                              " exceeds payloadBytes " + num(chunk.payload_bytes));
  }

  if (it == table.end()) {
    if (in_progress() >= limits_.max_in_progress) {
      return R(errc::too_large, what + ": " + num(in_progress()) +
                                    " transfers already in progress (max_in_progress)");
    }
    if (chunk.payload_bytes >
        limits_.max_buffered_bytes - std::min(buffered_, limits_.max_buffered_bytes)) {
      return R(errc::too_large, what + ": " + num(chunk.payload_bytes) +
                                    " more bytes would exceed "
                                    "max_buffered_bytes " +
                                    num(limits_.max_buffered_bytes) + " (" + num(buffered_) +
                                    " buffered)");
    }
    assembly<Msg> a;
    a.order = order;
    a.bytes.resize(static_cast<size_t>(chunk.payload_bytes));
    a.offsets.assign(chunk.chunk_count, not_received);
    a.lengths.assign(chunk.chunk_count, 0);
    a.header = chunk;
    a.header.payload.clear();
    a.header.chunk_index = 0;
    a.header.chunk_offset = 0;
    buffered_ += a.bytes.size();
    it = table.emplace(key, std::move(a)).first;
  } else if (!same_transfer_header(it->second.header, chunk)) {
    return fail(errc::chunk_inconsistent,
                "chunk " + num(chunk.chunk_index) +
                    " disagrees with the transfer's first chunk (header fields differ)");
  }

  assembly<Msg>& a = it->second;
  if (a.offsets[chunk.chunk_index] != not_received) {
    return R(errc::chunk_duplicate,
             what + ": chunk " + num(chunk.chunk_index) + " arrived twice; the copy is ignored");
  }
  if (!chunk.payload.empty()) {
    std::memcpy(a.bytes.data() + chunk.chunk_offset, chunk.payload.data(), chunk.payload.size());
  }
  a.offsets[chunk.chunk_index] = chunk.chunk_offset;
  a.lengths[chunk.chunk_index] = chunk.payload.size();
  a.received += 1;
  if (a.received < a.header.chunk_count) return R(std::optional<Msg>{});

  // All chunks in: they must tile [0, payload_bytes) in index order.
  uint64_t expected = 0;
  for (uint32_t i = 0; i < a.header.chunk_count; ++i) {
    if (a.offsets[i] != expected) {
      return fail(errc::chunk_inconsistent, "chunk " + num(i) + " starts at byte " +
                                                num(a.offsets[i]) + ", expected " + num(expected));
    }
    expected += a.lengths[i];
  }
  if (expected != a.header.payload_bytes) {
    return fail(errc::chunk_inconsistent, "chunks cover " + num(expected) + " of " +
                                              num(a.header.payload_bytes) + " payload bytes");
  }
  Msg whole = std::move(a.header);
  whole.chunk_index = 0;
  whole.chunk_count = 1;
  whole.chunk_offset = 0;
  whole.payload_crc32c = 0;  // every chunk was checked; the whole payload's CRC is not computed
  buffered_ -= a.bytes.size();
  whole.payload = std::move(a.bytes);
  table.erase(it);
  return R(std::optional<Msg>(std::move(whole)));
}

result<std::optional<push_msg>> chunk_assembler::add(push_msg chunk) {
  const auto key = std::make_pair(chunk.learner_id, chunk.fragment_id);
  return add_impl(pushes_, key, std::move(chunk));
}

result<std::optional<broadcast_msg>> chunk_assembler::add(broadcast_msg chunk) {
  const int32_t key = chunk.fragment_id;
  return add_impl(broadcasts_, key, std::move(chunk));
}

size_t chunk_assembler::drop_learner(int32_t learner_id) {
  size_t n = 0;
  for (auto it = pushes_.begin(); it != pushes_.end();) {
    if (it->first.first == learner_id) {
      release(it->second);
      it = pushes_.erase(it);
      ++n;
    } else {
      ++it;
    }
  }
  return n;
}

size_t chunk_assembler::drop_broadcast(int32_t fragment_id) {
  auto it = broadcasts_.find(fragment_id);
  if (it == broadcasts_.end()) return 0;
  release(it->second);
  broadcasts_.erase(it);
  return 1;
}

void chunk_assembler::clear() {
  pushes_.clear();
  broadcasts_.clear();
  buffered_ = 0;
}

// ---- checkpoints ----------------------------------------------------------------------------

namespace {

constexpr char checkpoint_magic[8] = {'D', 'D', 'O', 'W', 'N', 'C', 'K', '1'};
constexpr size_t checkpoint_header_bytes = 24;

void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

uint32_t crc32_of(const uint8_t* data, size_t size) {
  uLong crc = ::crc32(0L, Z_NULL, 0);
  while (size > 0) {
    uInt n = static_cast<uInt>(std::min<size_t>(size, size_t{1} << 30));
    crc = ::crc32(crc, data, n);
    data += n;
    size -= n;
  }
  return static_cast<uint32_t>(crc);
}

}  // namespace

std::vector<uint8_t> encode_checkpoint(const owner_checkpoint& c) {
  DD_ASSERT(c.momentum.size() == c.value.size(), "momentum and value differ in length");
  size_t bytes = (c.value.size() + c.momentum.size()) * sizeof(float);
  for (const auto& a : c.anchors) {
    DD_ASSERT(a.value.size() == c.value.size(), "an anchor differs in length from the value");
    bytes += a.value.size() * sizeof(float);
  }
  capnp::MallocMessageBuilder b(first_segment_words(bytes + 64 * c.anchors.size()));
  auto r = b.initRoot<cw::OwnerCheckpoint>();
  r.setFragmentId(c.fragment_id);
  r.setVersion(c.version);
  r.setValue(float_bytes(c.value));
  r.setMomentum(float_bytes(c.momentum));
  r.setXiStepSeconds(c.xi_step_s);
  r.setXiQuorumSeconds(c.xi_quorum_s);
  r.setXiSyncSeconds(c.xi_sync_s);
  auto anchors = r.initAnchors(static_cast<unsigned>(c.anchors.size()));
  for (size_t i = 0; i < c.anchors.size(); ++i) {
    anchors[static_cast<unsigned>(i)].setVersion(c.anchors[i].version);
    anchors[static_cast<unsigned>(i)].setValue(float_bytes(c.anchors[i].value));
  }
  set_merged(r.initMerged(static_cast<unsigned>(c.merged.size())), c.merged);
  wire_bytes body = flatten(b);
  std::vector<uint8_t> out(checkpoint_header_bytes + body.size());
  std::memcpy(out.data(), checkpoint_magic, sizeof(checkpoint_magic));
  put_u32(out.data() + 8, checkpoint_format_version);
  put_u32(out.data() + 12, crc32_of(body.data(), body.size()));
  put_u64(out.data() + 16, body.size());
  std::memcpy(out.data() + checkpoint_header_bytes, body.data(), body.size());
  return out;
}

result<owner_checkpoint> decode_checkpoint(const uint8_t* data, size_t size) {
  using R = result<owner_checkpoint>;
  if (data == nullptr || size < checkpoint_header_bytes) {
    return R(errc::corrupt, "checkpoint of " + num(size) + " bytes is shorter than its " +
                                num(checkpoint_header_bytes) + "-byte header");
  }
  if (std::memcmp(data, checkpoint_magic, sizeof(checkpoint_magic)) != 0) {
    return R(errc::corrupt, "checkpoint magic is not DDOWNCK1");
  }
  const uint32_t version = get_u32(data + 8);
  if (version != checkpoint_format_version) {
    return R(errc::corrupt, "checkpoint format version " + num(version) +
                                " is not supported (this build reads " +
                                num(checkpoint_format_version) + ")");
  }
  const uint32_t crc = get_u32(data + 12);
  const uint64_t body_len = get_u64(data + 16);
  if (body_len != size - checkpoint_header_bytes) {
    return R(errc::corrupt, "checkpoint body length " + num(body_len) + " does not match the " +
                                num(size - checkpoint_header_bytes) + " bytes present");
  }
  const uint8_t* body = data + checkpoint_header_bytes;
  if (crc32_of(body, static_cast<size_t>(body_len)) != crc) {
    return R(errc::corrupt, "checkpoint CRC32 mismatch: the file is damaged");
  }
  return with_reader(
      body, static_cast<size_t>(body_len), 16, [](capnp::MessageReader& reader) -> R {
        auto r = reader.getRoot<cw::OwnerCheckpoint>();
        owner_checkpoint c;
        c.fragment_id = r.getFragmentId();
        c.version = r.getVersion();
        auto value = to_floats(r.getValue());
        auto momentum = to_floats(r.getMomentum());
        if (!value) return R(errc::malformed, "checkpoint.value is not a float32 array");
        if (!momentum) return R(errc::malformed, "checkpoint.momentum is not a float32 array");
        if (momentum->size() != value->size()) {
          return R(errc::malformed, "checkpoint.momentum has " + num(momentum->size()) +
                                        " elements, value has " + num(value->size()));
        }
        c.value = std::move(*value);
        c.momentum = std::move(*momentum);
        c.xi_step_s = r.getXiStepSeconds();
        c.xi_quorum_s = r.getXiQuorumSeconds();
        c.xi_sync_s = r.getXiSyncSeconds();
        auto anchors = r.getAnchors();
        for (unsigned i = 0; i < anchors.size(); ++i) {
          auto v = to_floats(anchors[i].getValue());
          if (!v || v->size() != c.value.size()) {
            return R(errc::malformed, "checkpoint.anchors[" + num(i) + "].value does not hold " +
                                          num(c.value.size()) + " float32 elements");
          }
          c.anchors.push_back(anchor_entry{anchors[i].getVersion(), std::move(*v)});
        }
        c.merged = get_merged(r.getMerged());
        return c;
      });
}

status write_file_atomic(const std::string& path, const uint8_t* data, size_t size) {
  auto st =
      util::write_file_atomic(path, std::string_view(reinterpret_cast<const char*>(data), size));
  if (!st) return {errc::io, st.message};
  return {};
}

result<std::vector<uint8_t>> read_file(const std::string& path, size_t max_bytes) {
  using R = result<std::vector<uint8_t>>;
  std::string bytes;
  auto st = util::read_file(path, bytes, max_bytes);
  if (!st) return R(st.error == EFBIG ? errc::too_large : errc::io, st.message);
  return std::vector<uint8_t>(bytes.begin(), bytes.end());
}

status save_checkpoint(const std::string& path, const owner_checkpoint& c) {
  std::vector<uint8_t> bytes = encode_checkpoint(c);
  return write_file_atomic(path, bytes.data(), bytes.size());
}

result<owner_checkpoint> load_checkpoint(const std::string& path) {
  auto bytes = read_file(path);
  if (!bytes) return bytes.error();
  auto c = decode_checkpoint(bytes->data(), bytes->size());
  if (!c) return wire_error{c.code(), path + ": " + c.error().message};
  return c;
}

}  // namespace dd
