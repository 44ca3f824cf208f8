// tests/fuzz/codec_fuzz.cpp — libFuzzer target for the wire codec (messages/codec.hpp,
// messages/control.hpp) and the chunk assembler.
//
// Input layout: byte 0 picks a mode, the rest is the payload.
//   mode % 14 in [0, 12): decode the payload as that message_kind (0 join_request ... 11 leave)
//   mode % 14 == 12:      peek_kind, then the decoder of whatever kind it names
//   mode % 14 == 13:      chunk reassembly — payload byte 0 picks pushes (bit 0 clear) or
//                         broadcasts (set); the rest is a sequence of frames [u16 little-endian
//                         length][length bytes], each decoded and fed to one chunk_assembler
//                         with small caps.
// Properties checked (a violation aborts, which libFuzzer reports as a crash): no decoder throws;
// whatever decodes satisfies the documented invariants; encode(decode(x)) decodes again and
// re-encodes to the same bytes; an assembled transfer tiles its payload exactly.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <vector>

#include "messages/codec.hpp"
#include "messages/control.hpp"

namespace {

[[noreturn]] void violated(const char* what) {
  std::fprintf(stderr, "codec_fuzz: property violated: %s\n", what);
  std::abort();
}
#define FUZZ_CHECK(cond)          \
  do {                            \
    if (!(cond)) violated(#cond); \
  } while (0)

// decode → encode → decode → encode: both encodings must be identical.
template <class Decode>
void round_trip(const dd::wire_bytes& first, Decode decode) {
  auto again = decode(first);
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(dd::encode(*again) == first);
}

void check_push(const dd::push_msg& p) {
  FUZZ_CHECK(p.chunk_count > 0 && p.chunk_index < p.chunk_count);
  FUZZ_CHECK(p.chunk_offset <= p.payload_bytes);
  FUZZ_CHECK(p.payload.size() <= p.payload_bytes - p.chunk_offset);
  auto want = dd::encoded_size(p.encoding, p.total_elements);
  FUZZ_CHECK(want && *want == p.payload_bytes);
}

void check_broadcast(const dd::broadcast_msg& b) {
  FUZZ_CHECK(b.chunk_count > 0 && b.chunk_index < b.chunk_count);
  FUZZ_CHECK(b.chunk_offset <= b.payload_bytes);
  FUZZ_CHECK(b.payload.size() <= b.payload_bytes - b.chunk_offset);
  auto want = dd::encoded_size(b.encoding, b.total_elements);
  FUZZ_CHECK(want && *want == b.payload_bytes);
}

void decode_as(int kind, const uint8_t* p, size_t n) {
  using dd::message_kind;
  const dd::wire_bytes copy(p, p + n);
  switch (static_cast<message_kind>(kind)) {
    case message_kind::join_request: {
      auto m = dd::decode_join_request(p, n);
      if (m.ok())
        round_trip(dd::encode(*m), [](const dd::wire_bytes& b) {
          return dd::decode_join_request(b.data(), b.size());
        });
      break;
    }
    case message_kind::join_reply: {
      auto m = dd::decode_join_reply(p, n);
      if (m.ok()) {
        FUZZ_CHECK(m->shard_index < m->shard_count);
        round_trip(dd::encode(*m), [](const dd::wire_bytes& b) {
          return dd::decode_join_reply(b.data(), b.size());
        });
      }
      break;
    }
    case message_kind::heartbeat: {
      auto m = dd::decode_heartbeat(p, n);
      if (m.ok())
        round_trip(dd::encode(*m), [](const dd::wire_bytes& b) {
          return dd::decode_heartbeat(b.data(), b.size());
        });
      break;
    }
    case message_kind::push: {
      auto m = dd::decode_push(p, n);
      if (m.ok()) {
        check_push(*m);
        round_trip(dd::encode(*m), [](const dd::wire_bytes& b) { return dd::decode_push(b); });
      }
      break;
    }
    case message_kind::broadcast: {
      auto m = dd::decode_broadcast(p, n);
      if (m.ok()) {
        check_broadcast(*m);
        round_trip(dd::encode(*m), [](const dd::wire_bytes& b) { return dd::decode_broadcast(b); });
      }
      break;
    }
    case message_kind::reject: {
      auto m = dd::decode_reject(p, n);
      if (m.ok()) {
        FUZZ_CHECK(m->reason <= dd::reject_reason::superseded);
        round_trip(dd::encode(*m),
                   [](const dd::wire_bytes& b) { return dd::decode_reject(b.data(), b.size()); });
      }
      break;
    }
    case message_kind::ack: {
      auto m = dd::decode_push_ack(p, n);
      if (m.ok()) {
        FUZZ_CHECK(m->learner_id >= 0 && m->fragment_id >= 0);
        round_trip(dd::encode(*m), [](const dd::wire_bytes& b) { return dd::decode_push_ack(b); });
      }
      break;
    }
    case message_kind::pull: {
      auto m = dd::decode_pull_request(p, n);
      if (m.ok()) {
        FUZZ_CHECK(m->learner_id >= -1 && m->fragment_id >= 0);
        round_trip(dd::encode(*m),
                   [](const dd::wire_bytes& b) { return dd::decode_pull_request(b); });
      }
      break;
    }
    case message_kind::progress: {
      auto m = dd::decode_progress(p, n);
      if (m.ok())
        round_trip(dd::encode(*m), [](const dd::wire_bytes& b) { return dd::decode_progress(b); });
      break;
    }
    case message_kind::node_join: {
      auto m = dd::decode_node_join(copy);
      if (m.ok()) {
        for (auto id : m->learner_ids) FUZZ_CHECK(id >= 0);
        round_trip(dd::encode(*m), [](const dd::wire_bytes& b) { return dd::decode_node_join(b); });
      }
      break;
    }
    case message_kind::node_join_reply: {
      auto m = dd::decode_node_join_reply(copy);
      if (m.ok()) {
        FUZZ_CHECK(!m->accepted || m->refusal == dd::node_refusal::none);
        round_trip(dd::encode(*m),
                   [](const dd::wire_bytes& b) { return dd::decode_node_join_reply(b); });
      }
      break;
    }
    case message_kind::leave: {
      auto m = dd::decode_leave(copy);
      if (m.ok()) {
        FUZZ_CHECK(m->learner_id >= 0);
        round_trip(dd::encode(*m), [](const dd::wire_bytes& b) { return dd::decode_leave(b); });
      }
      break;
    }
  }
}

// Feeds framed chunks to one assembler; checks every completed transfer.
void reassemble(bool broadcasts, const uint8_t* p, size_t n) {
  dd::chunk_limits limits;
  limits.max_chunk_bytes = 4096;
  limits.max_assembly_bytes = 1 << 16;
  limits.max_chunks = 64;
  limits.max_buffered_bytes = 1 << 17;
  limits.max_in_progress = 8;
  dd::chunk_assembler assembler(limits);
  size_t at = 0;
  while (at + 2 <= n) {
    const size_t len = std::min<size_t>(p[at] | (size_t{p[at + 1]} << 8), n - at - 2);
    const uint8_t* frame = p + at + 2;
    at += 2 + len;
    if (broadcasts) {
      auto m = dd::decode_broadcast(frame, len);
      if (!m.ok()) continue;
      auto r = assembler.add(std::move(*m));
      if (r.ok() && r->has_value()) {
        const dd::broadcast_msg& whole = **r;
        FUZZ_CHECK(whole.chunk_index == 0 && whole.chunk_count == 1 && whole.chunk_offset == 0);
        FUZZ_CHECK(whole.payload.size() == whole.payload_bytes);
        check_broadcast(whole);
      }
    } else {
      auto m = dd::decode_push(frame, len);
      if (!m.ok()) continue;
      auto r = assembler.add(std::move(*m));
      if (r.ok() && r->has_value()) {
        const dd::push_msg& whole = **r;
        FUZZ_CHECK(whole.chunk_index == 0 && whole.chunk_count == 1 && whole.chunk_offset == 0);
        FUZZ_CHECK(whole.payload.size() == whole.payload_bytes);
        check_push(whole);
      }
    }
    FUZZ_CHECK(assembler.in_progress() <= limits.max_in_progress);
    FUZZ_CHECK(assembler.buffered_bytes() <= limits.max_buffered_bytes);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int mode = data[0] % 14;
  const uint8_t* p = data + 1;
  const size_t n = size - 1;
  try {
    if (mode < 12) {
      decode_as(mode, p, n);
    } else if (mode == 12) {
      auto k = dd::peek_kind(p, n);
      if (k.ok()) {
        FUZZ_CHECK(*k <= dd::message_kind::leave);
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
