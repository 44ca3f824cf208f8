// Round trips of every wire message through the codec, and decode-side field validation.
#include <gtest/gtest.h>

#include <cstring>
#include <optional>

#include "messages/codec.hpp"
#include "messages/control.hpp"
#include "tests/support/wire_expect.hpp"
#include "tests/support/wire_msgs.hpp"

namespace dd {
namespace {

/// Expects the decode result `d` refused with `code`, its message naming `what`.
template <class Result>
void expect_refused(const Result& d, errc code, const std::string& what) {
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.code(), code);
  EXPECT_NE(d.error().message.find(what), std::string::npos) << d.error().message;
}

/// Expects `bytes` to peek as a message of `kind`, and `d`, what they decoded to, not refused.
template <class Result>
void expect_decoded_as(const wire_bytes& bytes, message_kind kind, const Result& d) {
  const auto peeked = peek_kind(bytes);
  ASSERT_TRUE(peeked.ok()) << peeked.error().message;
  EXPECT_EQ(*peeked, kind);
  ASSERT_TRUE(d.ok()) << d.error().message;
}

push_msg sample_push() {
  push_msg m = test::push_header(3, 7, 5, 41, 24, 24 * 4096, 99);
  // int8: 2 blocks -> 2*4 + 100 = 108 bytes
  test::set_payload_bytes(m, payload_encoding::int8, 100, [](size_t i) { return i * 7 + 1; });
  return m;
}

TEST(Codec, JoinRequestRoundTrip) {
  join_request m{12, "node-b.example", {0, 1, 3}};
  auto bytes = encode(m);
  ASSERT_EQ(bytes.size() % 8, 0u);
  auto d = decode_join_request(bytes.data(), bytes.size());
  ASSERT_NO_FATAL_FAILURE(expect_decoded_as(bytes, message_kind::join_request, d));
  EXPECT_EQ(d->requested_learner_id, 12);
  EXPECT_EQ(d->host, "node-b.example");
  EXPECT_EQ(d->devices, (std::vector<int32_t>{0, 1, 3}));
}

// A live rejoin says where its incarnation is: step, tokens and compute seconds (the monitor
// counts them; the compute seconds were once missing from the wire).
TEST(Codec, LiveJoinRequestRoundTripCarriesStepTokensAndComputeSeconds) {
  join_request m;
  m.requested_learner_id = 2;
  m.live = true;
  m.step = 91;
  m.tokens = 91 * 128;
  m.incarnation = 3;
  m.compute_s = 12.625;
  m.tokens_total = 300 * 128;
  m.compute_total_s = 40.5;
  auto d = decode_join_request(encode(m, {"", 3}), {}, {"", 0});
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_TRUE(d->live);
  EXPECT_EQ(d->step, 91u);
  EXPECT_EQ(d->tokens, 91u * 128u);
  EXPECT_EQ(d->incarnation, 3u);
  EXPECT_DOUBLE_EQ(d->compute_s, 12.625);
  // Protocol 5: its totals over every incarnation (what a crashed syncer may not have recorded).
  EXPECT_EQ(d->tokens_total, 300u * 128u);
  EXPECT_DOUBLE_EQ(d->compute_total_s, 40.5);
}

TEST(Codec, JoinRequestDefaultAsksForAnyId) {
  join_request m;
  auto bytes = encode(m);
  auto d = decode_join_request(bytes.data(), bytes.size());
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->requested_learner_id, -1);
  EXPECT_TRUE(d->host.empty());
  EXPECT_TRUE(d->devices.empty());
}

TEST(Codec, JoinReplyRoundTrip) {
  join_reply m;
  m.learner_id = 2;
  m.incarnation = 4;
  m.experiment_config_json = R"({"model":{"layers":4},"fragments":4})";
  m.shard_index = 2;
  m.shard_count = 4;
  m.resume_step = 1234;
  m.data_cursor = {1, 2, 3, 250, 0, 9};
  m.tokens_before = 5000 * 128;
  m.compute_before_s = 77.25;
  auto bytes = encode(m);
  auto d = decode_join_reply(bytes.data(), bytes.size());
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_EQ(d->learner_id, 2);
  EXPECT_EQ(d->incarnation, 4u);
  EXPECT_EQ(d->experiment_config_json, m.experiment_config_json);
  EXPECT_EQ(d->shard_index, 2u);
  EXPECT_EQ(d->shard_count, 4u);
  EXPECT_EQ(d->resume_step, 1234u);
  EXPECT_EQ(d->data_cursor, m.data_cursor);
  EXPECT_EQ(d->tokens_before, 5000u * 128u);
  EXPECT_DOUBLE_EQ(d->compute_before_s, 77.25);
}

TEST(Codec, JoinReplyRejectsShardOutOfRange) {
  join_reply m;
  m.shard_index = 4;
  m.shard_count = 4;
  auto bytes = encode(m);
  auto d = decode_join_reply(bytes.data(), bytes.size());
  expect_refused(d, errc::malformed, "shardIndex");
}

TEST(Codec, HeartbeatRoundTrip) {
  heartbeat_msg m{9, 2, 500, 500 * 2048, 0.125, {42, 43}};
  auto bytes = encode(m, {"", m.incarnation});  // a learner stamps its own incarnation
  auto d = decode_heartbeat(bytes.data(), bytes.size());
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_EQ(d->learner_id, 9);
  EXPECT_EQ(d->incarnation, 2u);
  EXPECT_EQ(d->step, 500u);
  EXPECT_EQ(d->tokens, 500u * 2048u);
  EXPECT_EQ(d->step_time_ema_s, 0.125);
  EXPECT_EQ(d->data_cursor, (std::vector<uint8_t>{42, 43}));
  EXPECT_EQ(d->lr, 0.0);
  EXPECT_EQ(d->step_end_unix_s, 0.0);  // not sent: the syncer stamps the row itself
  m.loss = 2.5;
  m.compute_s = 1.25;
  m.lr = 3e-3;
  m.step_end_unix_s = 1796598000.125;
  const auto bytes2 = encode(m, {"", m.incarnation});
  auto again = decode_heartbeat(bytes2.data(), bytes2.size());
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_EQ(again->loss, 2.5);
  EXPECT_EQ(again->compute_s, 1.25);
  EXPECT_EQ(again->lr, 3e-3);
  EXPECT_EQ(again->step_end_unix_s, 1796598000.125);
}

TEST(Codec, PushRoundTrip) {
  push_msg m = sample_push();
  auto bytes = encode(m, {"", m.incarnation});
  auto d = decode_push(bytes);
  ASSERT_NO_FATAL_FAILURE(expect_decoded_as(bytes, message_kind::push, d));
  // Every field sample_push() sets (learner 3, incarnation 7, fragment 5, base 41, 24 steps of
  // 4096 tokens, transfer 99, 100 int8 values in 108 bytes, one whole chunk) comes back.
  ASSERT_EQ(m.payload_bytes, 108u);
  test::expect_same_push(*d, m);
  EXPECT_EQ(d->contains_from, 0u);  // default: holds no earlier transfer
  m.contains_from = 75;
  auto d2 = decode_push(encode(m, {"", m.incarnation}));
  ASSERT_TRUE(d2.ok()) << d2.error().message;
  EXPECT_EQ(d2->contains_from, 75u);
}

TEST(Codec, BroadcastMergedListTravelsWithEveryChunk) {
  broadcast_msg m;
  m.fragment_id = 2;
  m.version = 9;
  m.total_elements = 10;
  m.payload.resize(40);  // 10 fp32 elements
  for (size_t i = 0; i < m.payload.size(); ++i) m.payload[i] = static_cast<uint8_t>(i);
  m.payload_bytes = m.payload.size();
  m.merged = {{0, 1, 48, 8}, {2, 0, 24, 9}};
  auto parts = split_broadcast(m, 16);
  ASSERT_TRUE(parts.ok());
  ASSERT_EQ(parts->size(), 3u);
  chunk_assembler asm_;
  std::optional<broadcast_msg> whole;
  for (const auto& c : *parts) {
    auto d = decode_broadcast(encode(c));
    ASSERT_TRUE(d.ok()) << d.error().message;
    EXPECT_EQ(d->merged, m.merged);
    auto r = asm_.add(std::move(*d));
    ASSERT_TRUE(r.ok()) << r.error().message;
    if (r->has_value()) whole = std::move(**r);
  }
  ASSERT_TRUE(whole.has_value());
  EXPECT_EQ(whole->merged, m.merged);
  EXPECT_EQ(whole->payload, m.payload);
}

TEST(Codec, BroadcastRoundTrip) {
  broadcast_msg m;
  m.fragment_id = 1;
  m.version = 17;
  m.encoding = payload_encoding::bf16;
  m.total_elements = 10;
  m.payload_bytes = 20;
  m.chunk_index = 1;
  m.chunk_count = 2;
  m.chunk_offset = 12;
  m.payload = {1, 2, 3, 4, 5, 6, 7, 8};
  auto bytes = encode(m);
  auto d = decode_broadcast(bytes);
  ASSERT_TRUE(d.ok()) << d.error().message;
  test::expect_same_broadcast(*d, m);
}

TEST(Codec, RejectRoundTripEveryReason) {
  for (int r = 0; r <= static_cast<int>(reject_reason::implausible); ++r) {
    reject_msg m{4, 2, static_cast<reject_reason>(r), "base_version 3 is 6 behind", 9, 480};
    auto bytes = encode(m);
    auto d = decode_reject(bytes.data(), bytes.size());
    ASSERT_TRUE(d.ok()) << d.error().message;
    EXPECT_EQ(d->learner_id, 4);
    EXPECT_EQ(d->fragment_id, 2);
    EXPECT_EQ(d->reason, static_cast<reject_reason>(r));
    EXPECT_EQ(d->detail, m.detail);
    EXPECT_EQ(d->current_version, 9u);
    EXPECT_EQ(d->transfer_id, 480u);
  }
  EXPECT_EQ(to_string(reject_reason::shape_mismatch), "shapeMismatch");
  EXPECT_EQ(to_string(reject_reason::superseded), "superseded");
  EXPECT_EQ(to_string(reject_reason::implausible), "implausible");
}

TEST(Codec, PushAckRoundTrip) {
  push_ack m{3, 7, 5, 99, 41};
  auto bytes = encode(m);
  auto d = decode_push_ack(bytes);
  ASSERT_NO_FATAL_FAILURE(expect_decoded_as(bytes, message_kind::ack, d));
  EXPECT_EQ(d->learner_id, 3);
  EXPECT_EQ(d->incarnation, 7u);
  EXPECT_EQ(d->fragment_id, 5);
  EXPECT_EQ(d->transfer_id, 99u);
  EXPECT_EQ(d->version, 41u);
}

TEST(Codec, PullRequestRoundTrip) {
  pull_request m{2, 4, 6};
  auto bytes = encode(m, {"", m.incarnation});
  auto d = decode_pull_request(bytes);
  ASSERT_NO_FATAL_FAILURE(expect_decoded_as(bytes, message_kind::pull, d));
  EXPECT_EQ(d->learner_id, 2);
  EXPECT_EQ(d->incarnation, 4u);
  EXPECT_EQ(d->fragment_id, 6);
  // The evaluator's pull: learner id -1 (also the default of a value and of the schema).
  EXPECT_EQ(pull_request{}.learner_id, -1);
  auto e = decode_pull_request(encode(pull_request{-1, 0, 0}));
  ASSERT_TRUE(e.ok()) << e.error().message;
  EXPECT_EQ(e->learner_id, -1);
}

TEST(Codec, ProgressRoundTrip) {
  progress_msg m{uint64_t{1} << 40, 12, 987654321, 1234.25};
  auto bytes = encode(m);
  auto d = decode_progress(bytes);
  ASSERT_NO_FATAL_FAILURE(expect_decoded_as(bytes, message_kind::progress, d));
  EXPECT_EQ(d->total_tokens, uint64_t{1} << 40);
  EXPECT_EQ(d->live_learners, 12u);
  EXPECT_EQ(d->step, 987654321u);
  EXPECT_DOUBLE_EQ(d->mean_step, 1234.25);
}

// The kinds keep the Envelope's union order; new members only append (wire.capnp header).
TEST(Codec, MessageKindsFollowTheUnionOrdinals) {
  EXPECT_EQ(static_cast<int>(message_kind::reject), 5);
  EXPECT_EQ(static_cast<int>(message_kind::ack), 6);
  EXPECT_EQ(static_cast<int>(message_kind::pull), 7);
  EXPECT_EQ(static_cast<int>(message_kind::progress), 8);
}

TEST(Codec, AckAndPullFieldChecks) {
  auto expect_malformed = [](const auto& d, const char* field) {
    expect_refused(d, errc::malformed, field);
  };
  expect_malformed(decode_push_ack(encode(push_ack{0, 0, -1, 1, 0})), "ack.fragmentId");
  expect_malformed(decode_push_ack(encode(push_ack{-1, 0, 0, 1, 0})), "ack.learnerId");
  expect_malformed(decode_pull_request(encode(pull_request{0, 0, -2})), "pull.fragmentId");
  expect_malformed(decode_pull_request(encode(pull_request{-2, 0, 0})), "pull.learnerId");
}

TEST(Codec, NewKindsRefuseOtherKinds) {
  auto hb = encode(heartbeat_msg{});
  auto a = decode_push_ack(hb);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.error().message.find("expected 'ack'"), std::string::npos) << a.error().message;
  auto p = decode_pull_request(encode(push_ack{}));
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error().message.find("'ack', expected 'pull'"), std::string::npos)
      << p.error().message;
  auto g = decode_progress(encode(pull_request{}));
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.error().message.find("'pull', expected 'progress'"), std::string::npos)
      << g.error().message;
  EXPECT_FALSE(decode_heartbeat(encode(progress_msg{}).data(), encode(progress_msg{}).size()).ok());
  EXPECT_FALSE(decode_push(encode(progress_msg{5, 1})).ok());
  decode_limits lim;
  lim.max_message_bytes = 8;
  auto big = decode_progress(encode(progress_msg{}), lim);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.code(), errc::too_large);
}

TEST(Codec, WrongKindIsMalformedNamingBoth) {
  auto bytes = encode(heartbeat_msg{});
  auto d = decode_push(bytes);
  expect_refused(d, errc::malformed, "heartbeat");
  EXPECT_NE(d.error().message.find("push"), std::string::npos);
}

TEST(Codec, UnalignedInputDecodes) {
  auto bytes = encode(sample_push(), {"", sample_push().incarnation});
  std::vector<uint8_t> shifted(bytes.size() + 1);
  std::memcpy(shifted.data() + 1, bytes.data(), bytes.size());
  auto d = decode_push(shifted.data() + 1, bytes.size());
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_EQ(d->payload, sample_push().payload);
}

TEST(Codec, UnknownEnumValuesAreMalformed) {
  push_msg p = sample_push();
  p.encoding = static_cast<payload_encoding>(9);
  auto dp = decode_push(encode(p));
  expect_refused(dp, errc::malformed, "encoding");

  reject_msg r;
  r.reason = static_cast<reject_reason>(42);
  auto bytes = encode(r);
  auto dr = decode_reject(bytes.data(), bytes.size());
  expect_refused(dr, errc::malformed, "reason");
}

TEST(Codec, PushFieldChecks) {
  {
    push_msg p = sample_push();
    p.chunk_count = 0;
    auto d = decode_push(encode(p));
    ASSERT_FALSE(d.ok());
    EXPECT_NE(d.error().message.find("chunkCount"), std::string::npos);
  }
  {
    push_msg p = sample_push();
    p.chunk_index = 3;
    p.chunk_count = 3;
    auto d = decode_push(encode(p));
    ASSERT_FALSE(d.ok());
    EXPECT_NE(d.error().message.find("chunkIndex"), std::string::npos);
  }
  {
    push_msg p = sample_push();
    p.chunk_offset = 1;  // 1 + 108 > 108
    auto d = decode_push(encode(p));
    ASSERT_FALSE(d.ok());
    EXPECT_NE(d.error().message.find("chunkOffset"), std::string::npos);
  }
  {
    push_msg p = sample_push();
    p.total_elements = 101;  // int8 101 elements = 109 bytes, not 108
    auto d = decode_push(encode(p));
    expect_refused(d, errc::size_mismatch, "payloadBytes");
  }
}

TEST(Codec, MessageSizeCap) {
  auto bytes = encode(sample_push());
  decode_limits lim;
  lim.max_message_bytes = bytes.size() - 8;
  auto d = decode_push(bytes, lim);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.code(), errc::too_large);
  auto k = peek_kind(bytes, lim);
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.code(), errc::too_large);
}

TEST(Codec, LargePayloadStaysOneFlatMessage) {
  push_msg p = sample_push();
  p.encoding = payload_encoding::fp32;
  p.total_elements = 1 << 20;  // 4 MiB, the default chunk
  p.payload_bytes = 4u << 20;
  p.payload.assign(4u << 20, 0xAB);
  auto bytes = encode(p, {"", p.incarnation});
  EXPECT_LT(bytes.size(), p.payload.size() + 512);
  auto d = decode_push(bytes);
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_EQ(d->payload.size(), 4u << 20);
  EXPECT_EQ(d->payload[12345], 0xAB);
}

TEST(Encoding, SizesAreExact) {
  EXPECT_EQ(*encoded_size(payload_encoding::fp32, 10), 40u);
  EXPECT_EQ(*encoded_size(payload_encoding::bf16, 10), 20u);
  EXPECT_EQ(*encoded_size(payload_encoding::int8, 0), 0u);
  EXPECT_EQ(*encoded_size(payload_encoding::int8, 64), 68u);
  EXPECT_EQ(*encoded_size(payload_encoding::int8, 65), 73u);
  EXPECT_EQ(*encoded_size(payload_encoding::int4, 64), 36u);
  EXPECT_EQ(*encoded_size(payload_encoding::int4, 65), 41u);
  EXPECT_EQ(*encoded_size(payload_encoding::int4, 67), 42u);
  EXPECT_FALSE(encoded_size(payload_encoding::fp32, ~size_t{0}).has_value());
  EXPECT_EQ(parse_payload_encoding("int4"), payload_encoding::int4);
  EXPECT_FALSE(parse_payload_encoding("int2").has_value());
}

}  // namespace
}  // namespace dd

namespace dd {
namespace {

// Envelope.schemaVersion is stored XOR its default (1) in the root struct's first data word: for
// a single-segment message that is byte 16 (8 bytes of segment table, 8 of root pointer).
TEST(Codec, AnEnvelopeOfAnotherSchemaVersionIsRefusedNamingBothVersions) {
  heartbeat_msg hb;
  hb.learner_id = 1;
  auto bytes = encode(hb);
  ASSERT_TRUE(decode_heartbeat(bytes.data(), bytes.size()).ok());
  EXPECT_EQ(bytes[16], 1 ^ 3);  // this build writes schemaVersion 3
  bytes[16] = 1 ^ 4;            // schemaVersion 4, sealed by its writer
  seal_message(bytes);
  auto r = decode_heartbeat(bytes.data(), bytes.size());
  expect_refused(r, errc::schema_mismatch, "schemaVersion 4 (this build reads version 3)");
  // Schema 2 wrote no checksum trailer: told by its version, not refused as damaged.
  bytes.resize(bytes.size() - seal_bytes);
  bytes[16] = 1 ^ 2;
  auto two = decode_heartbeat(bytes.data(), bytes.size());
  expect_refused(two, errc::schema_mismatch, "schemaVersion 2 (this build reads version 3)");
  bytes[16] = 1 ^ 1;  // schemaVersion 1: a writer from before the envelope named its run
  auto old = decode_heartbeat(bytes.data(), bytes.size());
  expect_refused(old, errc::schema_mismatch, "schemaVersion 1 (this build reads version 3)");
  // This build's version without a trailer: malformed, named.
  bytes[16] = 1 ^ 3;
  auto bare = decode_heartbeat(bytes.data(), bytes.size());
  expect_refused(bare, errc::malformed, "no checksum trailer");
}

// A node_join damaged on the way (a link
// that corrupts bytes) was read as a node with other data and refused for good as
// dataMismatch. Every single-bit flip anywhere in a sealed message is now refused, never read.
TEST(Codec, EveryBitFlippedAnywhereInASealedMessageIsRefusedNeverRead) {
  node_join j{"2b316cba75d1af90", protocol_version, "learner-2", "host-a", {2}, 1, 1115394,
              "115aa378f1943265"};
  const auto sealed = encode(j, {"2b316cba75d1af90", 0});
  ASSERT_TRUE(decode_node_join(sealed, {}, {"2b316cba75d1af90", 0}).ok());
  size_t refused_by_checksum = 0;
  for (size_t byte = 0; byte < sealed.size(); ++byte)
    for (int bit = 0; bit < 8; ++bit) {
      auto damaged = sealed;
      damaged[byte] ^= static_cast<uint8_t>(1u << bit);
      auto r = decode_node_join(damaged, {}, {"2b316cba75d1af90", 0});
      ASSERT_FALSE(r.ok()) << "byte " << byte << " bit " << bit << " was read as a node_join";
      if (r.code() == errc::checksum_mismatch) ++refused_by_checksum;
      EXPECT_TRUE(r.code() == errc::checksum_mismatch || r.code() == errc::malformed)
          << "byte " << byte << " bit " << bit << ": " << r.error().message;
    }
  // Only a flip in the trailer's tag (its last 4 bytes) is "no trailer" (malformed).
  EXPECT_EQ(refused_by_checksum, 8 * (sealed.size() - 4));
  // peek_kind and peek_envelope refuse damage too (a learner reads a reply's run with them).
  auto damaged = sealed;
  damaged[sealed.size() / 2] ^= 0x10;
  EXPECT_EQ(peek_kind(damaged).code(), errc::checksum_mismatch);
  EXPECT_EQ(peek_envelope(damaged).code(), errc::checksum_mismatch);
  // A message too short for a segment and its trailer.
  const wire_bytes tiny(8, 0);
  EXPECT_EQ(decode_node_join(tiny).code(), errc::malformed);
  // seal_message refuses a buffer without room for the trailer.
  wire_bytes none(4, 0);
  EXPECT_THROW(seal_message(none), std::invalid_argument);
}

TEST(Codec, ControlMessagesRoundTripAndRefuseNegativeIds) {
  node_join j{"abc", protocol_version, "node-a", "host-a", {0, 3}, 2, 4096, "feed"};
  auto back = decode_node_join(encode(j));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->run_id, "abc");
  EXPECT_EQ(back->learner_ids, (std::vector<int32_t>{0, 3}));
  EXPECT_EQ(back->data_bytes, 4096u);
  node_join_reply rep{false, node_refusal::data_mismatch, "differs", "abc", "", "", {}, 0, "", 0};
  auto rback = decode_node_join_reply(encode(rep));
  ASSERT_TRUE(rback.ok());
  EXPECT_EQ(rback->refusal, node_refusal::data_mismatch);
  EXPECT_EQ(rback->reason, "differs");
  j.learner_ids = {-1};
  auto bad = decode_node_join(encode(j));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("negative"), std::string::npos);
  EXPECT_FALSE(decode_leave(encode(leave_msg{-2, 0})).ok());
  EXPECT_TRUE(decode_leave(encode(leave_msg{2, 5}, {"", 5})).ok());
  // One kind is not another.
  EXPECT_FALSE(decode_leave(encode(j)).ok());
}

}  // namespace
}  // namespace dd

namespace dd {
namespace {

// Rebuild (docs/wire.md "Rebuild"): an owner's question for the learners' copies of its
// fragment, and the answer, round-trip through the codec; bad values are refused by name.
TEST(Codec, FragmentQueryAndHeldRoundTripAndRefuseBadValues) {
  fragment_query q{7, 0x1234567890ULL, true};
  auto bytes = encode(q);
  auto qb = decode_fragment_query(bytes);
  ASSERT_NO_FATAL_FAILURE(expect_decoded_as(bytes, message_kind::fragment_query, qb));
  EXPECT_EQ(qb->fragment_id, 7);
  EXPECT_EQ(qb->query_id, 0x1234567890ULL);
  EXPECT_TRUE(qb->send_value);

  fragment_held h{3, 9, 7, 0x1234567890ULL, true, 41};
  auto hbytes = encode(h, {"", h.incarnation});
  auto hb = decode_fragment_held(hbytes);
  ASSERT_NO_FATAL_FAILURE(expect_decoded_as(hbytes, message_kind::fragment_held, hb));
  EXPECT_EQ(hb->learner_id, 3);
  EXPECT_EQ(hb->incarnation, 9u);
  EXPECT_EQ(hb->fragment_id, 7);
  EXPECT_EQ(hb->query_id, 0x1234567890ULL);
  EXPECT_TRUE(hb->have);
  EXPECT_EQ(hb->version, 41u);

  auto neg = decode_fragment_query(encode(fragment_query{-1, 1, false}));
  ASSERT_FALSE(neg.ok());
  EXPECT_NE(neg.error().message.find("fragmentQuery.fragmentId is negative"), std::string::npos);
  auto negl = decode_fragment_held(encode(fragment_held{-2, 0, 1, 1, true, 3}));
  ASSERT_FALSE(negl.ok());
  EXPECT_NE(negl.error().message.find("fragmentHeld.learnerId"), std::string::npos);
  auto ghost = decode_fragment_held(encode(fragment_held{1, 0, 1, 1, false, 3}));
  ASSERT_FALSE(ghost.ok());
  EXPECT_NE(ghost.error().message.find("have is false"), std::string::npos);
  // One kind is not another.
  EXPECT_FALSE(decode_fragment_held(bytes).ok());
  EXPECT_FALSE(decode_fragment_query(hbytes).ok());
  EXPECT_FALSE(decode_leave(hbytes).ok());
}

}  // namespace
}  // namespace dd
