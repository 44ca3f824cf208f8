// tests/fuzz/codec_fuzz.cpp — libFuzzer target for the wire codec (messages/codec.hpp,
// messages/control.hpp), the envelope checks and the chunk assembler.
//
// Input layout: byte 0 picks a mode, the rest is the payload. Every message the target decodes
// is first sealed (seal_message rewrites its last 8 bytes into a valid checksum trailer), so the
// mutations reach the envelope and body rather than dying at the checksum; the raw, unsealed
// bytes are also peeked once, which exercises the trailer checks themselves.
//   mode % 25 in [0, 23): decode the payload as that message_kind (0 join_request ... 22
//                         node_events), against the run its envelope names
//   mode % 25 == 23:      peek_kind, then the decoder of whatever kind it names
//   mode % 25 == 24:      chunk reassembly — payload byte 0 picks pushes (bit 0 clear) or
//                         broadcasts (set); the rest is a sequence of frames [u16 little-endian
//                         length][length bytes], each decoded and fed to one chunk_assembler
//                         with small caps.
// Properties checked (a violation aborts, which libFuzzer reports as a crash): no decoder throws;
// whatever decodes satisfies the documented invariants; the same bytes decoded by a receiver of
// another run are refused as other_run, and by one that knows a newer sender incarnation as
// stale_incarnation; encode(decode(x)) with the same stamp decodes again and re-encodes to the
// same bytes; an assembled transfer tiles its payload exactly.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <string>
#include <vector>

#include "messages/codec.hpp"
#include "messages/control.hpp"
#include "tests/fuzz/fuzz_check.hpp"
#include "tests/support/wire_msgs.hpp"

namespace {

constexpr int kinds = 23;  // members of Envelope.body

/// The chunk invariants a decoded push or broadcast holds: its chunk lies inside the payload,
/// and the payload size is what the encoding takes for the element count.
template <class Msg>
void check_chunk(const Msg& m) {
  FUZZ_CHECK(m.chunk_count > 0 && m.chunk_index < m.chunk_count);
  FUZZ_CHECK(m.chunk_offset <= m.payload_bytes);
  FUZZ_CHECK(m.payload.size() <= m.payload_bytes - m.chunk_offset);
  auto want = dd::encoded_size(m.encoding, m.total_elements);
  FUZZ_CHECK(want && *want == m.payload_bytes);
}

// The invariants each decoded value must hold (docs/wire.md).
void check(const dd::join_request&) {}
void check(const dd::join_reply& m) { FUZZ_CHECK(m.shard_index < m.shard_count); }
void check(const dd::heartbeat_msg&) {}
void check(const dd::push_msg& m) { check_chunk(m); }
void check(const dd::broadcast_msg& m) { check_chunk(m); }
void check(const dd::reject_msg& m) { FUZZ_CHECK(m.reason <= dd::reject_reason::implausible); }
void check(const dd::push_ack& m) { FUZZ_CHECK(m.learner_id >= 0 && m.fragment_id >= 0); }
void check(const dd::pull_request& m) { FUZZ_CHECK(m.learner_id >= -1 && m.fragment_id >= 0); }
void check(const dd::progress_msg&) {}
void check(const dd::node_join& m) {
  for (auto id : m.learner_ids) FUZZ_CHECK(id >= 0);
}
void check(const dd::node_join_reply& m) {
  FUZZ_CHECK(!m.accepted || m.refusal == dd::node_refusal::none);
}
void check(const dd::leave_msg& m) { FUZZ_CHECK(m.learner_id >= 0); }
void check(const dd::fragment_query& m) { FUZZ_CHECK(m.fragment_id >= 0); }
void check(const dd::fragment_held& m) {
  FUZZ_CHECK(m.learner_id >= 0 && m.fragment_id >= 0 && (m.have || m.version == 0));
}
void check(const dd::live_view_msg& m) {
  FUZZ_CHECK(m.learners.size() <= dd::max_control_entries);
  for (size_t i = 0; i < m.learners.size(); ++i) {
    FUZZ_CHECK(m.learners[i].learner_id >= 0);
    FUZZ_CHECK(std::isfinite(m.learners[i].step_time_ema_s) && m.learners[i].step_time_ema_s >= 0);
    if (i > 0) FUZZ_CHECK(m.learners[i - 1].learner_id < m.learners[i].learner_id);
  }
}
void check(const dd::owner_directory& m) {
  FUZZ_CHECK(m.fragment_ids.size() <= dd::max_control_entries);
  for (auto id : m.fragment_ids) FUZZ_CHECK(id >= 0);
}
void check(const dd::subscribe_msg& m) { FUZZ_CHECK(m.fragment_id >= 0); }
void check(const dd::stop_msg& m) { FUZZ_CHECK(m.reason.size() <= 4096); }
void check(const dd::status_request&) {}
void check(const dd::status_reply& m) { FUZZ_CHECK(m.json.size() <= (size_t{16} << 20)); }
void check(const dd::drain_msg& m) { FUZZ_CHECK(m.learner_id >= 0); }
void check(const dd::drain_reply& m) { FUZZ_CHECK(m.detail.size() <= 4096); }
void check(const dd::node_events& m) {
  FUZZ_CHECK(!m.node.empty() && m.node.size() <= 64);
  FUZZ_CHECK(m.lines.size() <= (size_t{1} << 20));
}

// Decodes `bytes` against the run its envelope names; on success checks the value, that a
// receiver of another run and one that knows a newer incarnation refuse the same bytes, and that
// decode → encode (same stamp) → decode → encode gives identical bytes.
template <class Decode>
void decode_checked(const dd::wire_bytes& bytes, Decode decode) {
  auto header = dd::peek_envelope(bytes);
  const dd::envelope_expect expect{header ? header->run_id : std::string(), 0};
  auto m = decode(bytes, expect);
  if (!m.ok()) return;
  FUZZ_CHECK(header.ok());
  FUZZ_CHECK(header->schema_version == dd::wire_schema_version);
  check(*m);
  auto other = decode(bytes, dd::envelope_expect{header->run_id + "x", 0});
  FUZZ_CHECK(!other.ok() && other.code() == dd::errc::other_run);
  if (header->sender_incarnation < std::numeric_limits<uint64_t>::max()) {
    auto stale = decode(bytes, dd::envelope_expect{header->run_id, header->sender_incarnation + 1});
    FUZZ_CHECK(!stale.ok() && stale.code() == dd::errc::stale_incarnation);
  }
  const dd::envelope_stamp stamp{header->run_id, header->sender_incarnation};
  const dd::wire_bytes first = dd::encode(*m, stamp);
  auto again = decode(first, expect);
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(dd::encode(*again, stamp) == first);
}

#define DECODER(fn) \
  [](const dd::wire_bytes& b, const dd::envelope_expect& e) { return dd::fn(b, {}, e); }

// `p[0, n)` with its last 8 bytes rewritten into a valid checksum trailer (as they are when the
// length allows one; unchanged otherwise).
dd::wire_bytes sealed(const uint8_t* p, size_t n) {
  dd::wire_bytes b(p, p + n);
  if (n >= 2 * dd::seal_bytes && n % 8 == 0) dd::seal_message(b);
  return b;
}

void decode_as(int kind, const uint8_t* p, size_t n) {
  using dd::message_kind;
  (void)dd::peek_envelope(p, n);  // raw: the trailer checks see the mutated trailer
  const dd::wire_bytes b = sealed(p, n);
  switch (static_cast<message_kind>(kind)) {
    case message_kind::join_request: decode_checked(b, DECODER(decode_join_request)); break;
    case message_kind::join_reply: decode_checked(b, DECODER(decode_join_reply)); break;
    case message_kind::heartbeat: decode_checked(b, DECODER(decode_heartbeat)); break;
    case message_kind::push: decode_checked(b, DECODER(decode_push)); break;
    case message_kind::broadcast: decode_checked(b, DECODER(decode_broadcast)); break;
    case message_kind::reject: decode_checked(b, DECODER(decode_reject)); break;
    case message_kind::ack: decode_checked(b, DECODER(decode_push_ack)); break;
    case message_kind::pull: decode_checked(b, DECODER(decode_pull_request)); break;
    case message_kind::progress: decode_checked(b, DECODER(decode_progress)); break;
    case message_kind::node_join: decode_checked(b, DECODER(decode_node_join)); break;
    case message_kind::node_join_reply: decode_checked(b, DECODER(decode_node_join_reply)); break;
    case message_kind::leave: decode_checked(b, DECODER(decode_leave)); break;
    case message_kind::fragment_query: decode_checked(b, DECODER(decode_fragment_query)); break;
    case message_kind::fragment_held: decode_checked(b, DECODER(decode_fragment_held)); break;
    case message_kind::live_view: decode_checked(b, DECODER(decode_live_view)); break;
    case message_kind::owner_directory: decode_checked(b, DECODER(decode_owner_directory)); break;
    case message_kind::subscribe: decode_checked(b, DECODER(decode_subscribe)); break;
    case message_kind::stop: decode_checked(b, DECODER(decode_stop)); break;
    case message_kind::status_request: decode_checked(b, DECODER(decode_status_request)); break;
    case message_kind::status_reply: decode_checked(b, DECODER(decode_status_reply)); break;
    case message_kind::drain: decode_checked(b, DECODER(decode_drain)); break;
    case message_kind::drain_reply: decode_checked(b, DECODER(decode_drain_reply)); break;
    case message_kind::node_events: decode_checked(b, DECODER(decode_node_events)); break;
  }
}

// Adds a decoded chunk (if it decoded) to `assembler`; a transfer it completes is whole, tiles its
// payload exactly and passes `check`.
template <class Decoded, class Msg>
void add_chunk(dd::chunk_assembler& assembler, Decoded m, void (*check)(const Msg&)) {
  if (!m.ok()) return;
  auto r = assembler.add(std::move(*m));
  if (r.ok() && r->has_value()) {
    const Msg& whole = **r;
    FUZZ_CHECK(whole.chunk_index == 0 && whole.chunk_count == 1 && whole.chunk_offset == 0);
    FUZZ_CHECK(whole.payload.size() == whole.payload_bytes);
    check(whole);
  }
}

// Feeds framed chunks to one assembler; checks every completed transfer.
void reassemble(bool broadcasts, const uint8_t* p, size_t n) {
  const dd::chunk_limits limits = dd::test::limits_of(4096, 1 << 16, 64, 1 << 17, 8);
  dd::chunk_assembler assembler(limits);
  size_t at = 0;
  while (at + 2 <= n) {
    const size_t len = std::min<size_t>(p[at] | (size_t{p[at + 1]} << 8), n - at - 2);
    const dd::wire_bytes frame = sealed(p + at + 2, len);
    at += 2 + len;
    auto header = dd::peek_envelope(frame);
    const dd::envelope_expect expect{header ? header->run_id : std::string(), 0};
    if (broadcasts) {
      add_chunk(assembler, dd::decode_broadcast(frame, {}, expect), check_chunk<dd::broadcast_msg>);
    } else {
      add_chunk(assembler, dd::decode_push(frame, {}, expect), check_chunk<dd::push_msg>);
    }
    FUZZ_CHECK(assembler.in_progress() <= limits.max_in_progress);
    FUZZ_CHECK(assembler.buffered_bytes() <= limits.max_buffered_bytes);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int mode = data[0] % (kinds + 2);
  const uint8_t* p = data + 1;
  const size_t n = size - 1;
  try {
    if (mode < kinds) {
      decode_as(mode, p, n);
    } else if (mode == kinds) {
      auto k = dd::peek_kind(sealed(p, n));
      if (k.ok()) {
        FUZZ_CHECK(static_cast<int>(*k) < kinds);
        decode_as(static_cast<int>(*k), p, n);
      }
    } else {
      if (n < 1) return 0;
      reassemble((p[0] & 1) != 0, p + 1, n - 1);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "codec_fuzz: exception escaped: %s\n", e.what());
    std::abort();
  }
  return 0;
}
