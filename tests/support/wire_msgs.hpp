// tests/support/wire_msgs.hpp — the wire messages the codec, chunking, actor and fuzz-seed code
// under tests/ builds: a push's header, a heartbeat, a live rejoin, and a whole payload given as
// bytes or as fp32 values (one piece of code for pushes and broadcasts: their payload fields are
// the same), and a chunk assembler's caps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "messages/chunking.hpp"
#include "messages/codec.hpp"
#include "runtime/quantize.hpp"

namespace dd::test {

/// A push of `learner` (incarnation `incarnation`) to `fragment`: `steps` inner steps of `tokens`
/// tokens from `base_version`, transfer `transfer_id`; no payload yet.
inline push_msg push_header(int32_t learner, uint64_t incarnation, int32_t fragment,
                            uint64_t base_version, uint64_t steps, uint64_t tokens,
                            uint64_t transfer_id) {
  push_msg m;
  m.learner_id = learner;
  m.incarnation = incarnation;
  m.fragment_id = fragment;
  m.base_version = base_version;
  m.steps = steps;
  m.tokens = tokens;
  m.transfer_id = transfer_id;
  return m;
}

/// Learner `learner`'s heartbeat (incarnation `incarnation`) at `step` with `tokens` tokens and a
/// step-time EMA of `ema` seconds.
inline heartbeat_msg heartbeat(int32_t learner, uint64_t incarnation, uint64_t step,
                               uint64_t tokens, double ema) {
  heartbeat_msg hb;
  hb.learner_id = learner;
  hb.incarnation = incarnation;
  hb.step = step;
  hb.tokens = tokens;
  hb.step_time_ema_s = ema;
  return hb;
}

/// Learner `learner`'s live rejoin (its link dropped and healed; it stepped on meanwhile) as
/// incarnation `incarnation`, at `step` with `tokens` tokens in that incarnation.
inline join_request live_rejoin(int32_t learner, uint64_t incarnation, uint64_t step,
                                uint64_t tokens) {
  join_request r;
  r.requested_learner_id = learner;
  r.live = true;
  r.incarnation = incarnation;
  r.step = step;
  r.tokens = tokens;
  return r;
}

/// Gives `m` (a push or a broadcast) a whole payload of `elements` values in `encoding`: byte i
/// of the payload is `byte(i)`, its size what the encoding takes for `elements` values.
template <class Msg, class ByteOf>
void set_payload_bytes(Msg& m, payload_encoding encoding, uint64_t elements, ByteOf byte) {
  m.encoding = encoding;
  m.total_elements = elements;
  m.payload_bytes = *encoded_size(encoding, elements);
  m.payload.resize(m.payload_bytes);
  for (size_t i = 0; i < m.payload.size(); ++i) m.payload[i] = static_cast<uint8_t>(byte(i));
}

/// Gives `m` (a push or a broadcast) the whole fp32 payload of `values`.
template <class Msg>
void set_fp32_payload(Msg& m, const std::vector<float>& values) {
  m.encoding = payload_encoding::fp32;
  m.total_elements = values.size();
  m.payload = encode_payload(payload_encoding::fp32, values.data(), values.size());
  m.payload_bytes = m.payload.size();
}

/// A chunk assembler's caps: chunks of at most `chunk_bytes`; a transfer of at most
/// `assembly_bytes` in at most `chunks` chunks; at most `buffered_bytes` buffered and
/// `in_progress` transfers under way in all.
inline chunk_limits limits_of(size_t chunk_bytes, size_t assembly_bytes, uint32_t chunks,
                              size_t buffered_bytes, size_t in_progress) {
  chunk_limits lim;
  lim.max_chunk_bytes = chunk_bytes;
  lim.max_assembly_bytes = assembly_bytes;
  lim.max_chunks = chunks;
  lim.max_buffered_bytes = buffered_bytes;
  lim.max_in_progress = in_progress;
  return lim;
}

/// A whole push of `delta` (fp32).
inline push_msg make_push(int32_t learner, uint64_t incarnation, uint64_t base_version,
                          uint64_t steps, uint64_t tokens, uint64_t transfer_id,
                          const std::vector<float>& delta, int32_t fragment = 0) {
  push_msg m =
      push_header(learner, incarnation, fragment, base_version, steps, tokens, transfer_id);
  set_fp32_payload(m, delta);
  return m;
}

}  // namespace dd::test
