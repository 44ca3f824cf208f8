// tests/support/wire_expect.hpp — comparisons of two pushes or two broadcasts (a decoded message
// against the one encoded, or two encodings of one message), so that every field a codec or
// chunker carries is checked. Each kind's fields are compared as one tuple (a failure prints both
// tuples), the payload bytes on their own.
#pragma once

#include <gtest/gtest.h>

#include <tuple>

#include "messages/codec.hpp"

namespace dd::test {

/// The fields a push and a broadcast share, but the payload bytes themselves and the payload's
/// CRC (the encoder sets that: a decoded message carries one the message encoded may lack).
template <class Msg>
auto payload_fields(const Msg& m) {
  return std::tie(m.encoding, m.total_elements, m.payload_bytes, m.chunk_index, m.chunk_count,
                  m.chunk_offset);
}

/// The fields of a push that are not its payload's.
inline auto push_fields(const push_msg& m) {
  return std::tie(m.learner_id, m.incarnation, m.fragment_id, m.base_version, m.steps, m.tokens,
                  m.transfer_id, m.contains_from);
}

/// The fields of a broadcast that are not its payload's.
inline auto broadcast_fields(const broadcast_msg& m) {
  return std::tie(m.fragment_id, m.version, m.merged, m.value_digest);
}

/// The payloads of `a` and `b` (a push or a broadcast each), and every field describing them,
/// are equal.
template <class Msg>
void expect_same_payload(const Msg& a, const Msg& b) {
  EXPECT_EQ(payload_fields(a), payload_fields(b));
  EXPECT_EQ(a.payload, b.payload);
}

/// Every field of two pushes but the payload CRC, and their payloads, are equal.
inline void expect_same_push(const push_msg& a, const push_msg& b) {
  EXPECT_EQ(push_fields(a), push_fields(b));
  expect_same_payload(a, b);
}

/// Every field of two broadcasts but the payload CRC, and their payloads, are equal.
inline void expect_same_broadcast(const broadcast_msg& a, const broadcast_msg& b) {
  EXPECT_EQ(broadcast_fields(a), broadcast_fields(b));
  expect_same_payload(a, b);
}

}  // namespace dd::test
