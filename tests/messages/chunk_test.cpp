// Chunking and the chunk_assembler: order, duplicates, staleness, inconsistency, caps.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>

#include "messages/codec.hpp"
#include "tests/support/wire_expect.hpp"
#include "tests/support/wire_msgs.hpp"
#include "util/crc32c.hpp"

namespace dd {
namespace {

push_msg whole_push(size_t elements, uint64_t transfer = 1, int32_t learner = 1) {
  push_msg m = test::push_header(learner, 1, 0, 3, 4, 400, transfer);
  test::set_payload_bytes(m, payload_encoding::fp32, elements,
                          [&](size_t i) { return i * 31 + transfer; });
  return m;
}

/// A whole broadcast of `fragment` at `version`: `elements` values in `encoding` whose payload
/// byte i is `byte(i)`.
broadcast_msg whole_broadcast(int32_t fragment, uint64_t version, size_t elements,
                              const std::function<uint8_t(size_t)>& byte,
                              payload_encoding encoding = payload_encoding::fp32) {
  broadcast_msg b;
  b.fragment_id = fragment;
  b.version = version;
  test::set_payload_bytes(b, encoding, elements, byte);
  return b;
}

TEST(Chunks, SplitSizesAndOffsets) {
  auto chunks = split_push(whole_push(250), 300);  // 1000 bytes -> 300,300,300,100
  ASSERT_TRUE(chunks.ok());
  ASSERT_EQ(chunks->size(), 4u);
  EXPECT_EQ((*chunks)[0].payload.size(), 300u);
  EXPECT_EQ((*chunks)[3].payload.size(), 100u);
  EXPECT_EQ((*chunks)[3].chunk_offset, 900u);
  for (const auto& c : *chunks) EXPECT_EQ(c.chunk_count, 4u);
  EXPECT_EQ(split_push(whole_push(250), 0).code(), errc::invalid_argument);
  push_msg bad = whole_push(10);
  bad.payload.pop_back();
  EXPECT_EQ(split_push(bad).code(), errc::size_mismatch);
}

TEST(Chunks, ReassembleInAnyOrderThroughTheWire) {
  const push_msg whole = whole_push(1000);
  std::mt19937 rng(5);
  for (int trial = 0; trial < 20; ++trial) {
    auto chunks = *split_push(whole, 128 + trial * 37);
    std::shuffle(chunks.begin(), chunks.end(), rng);
    chunk_assembler a;
    std::optional<push_msg> done;
    for (size_t i = 0; i < chunks.size(); ++i) {
      auto bytes = encode(chunks[i], {"", chunks[i].incarnation});
      auto d = decode_push(bytes);
      ASSERT_TRUE(d.ok()) << d.error().message;
      auto r = a.add(std::move(*d));
      ASSERT_TRUE(r.ok()) << r.error().message;
      EXPECT_EQ(r->has_value(), i + 1 == chunks.size());
      if (r->has_value()) done = std::move(**r);
    }
    ASSERT_TRUE(done.has_value());
    EXPECT_EQ(done->payload, whole.payload);
    EXPECT_EQ(done->chunk_count, 1u);
    EXPECT_EQ(done->tokens, 400u);
    EXPECT_EQ(a.in_progress(), 0u);
    EXPECT_EQ(a.buffered_bytes(), 0u);
  }
}

TEST(Chunks, EmptyPayloadIsOneChunk) {
  auto chunks = *split_push(whole_push(0));
  ASSERT_EQ(chunks.size(), 1u);
  chunk_assembler a;
  auto r = a.add(chunks[0]);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->has_value());
  EXPECT_TRUE((*r)->payload.empty());
}

TEST(Chunks, DuplicateIsReportedAndTransferKept) {
  auto chunks = *split_push(whole_push(100), 100);  // 4 chunks
  chunk_assembler a;
  ASSERT_TRUE(a.add(chunks[0]).ok());
  auto dup = a.add(chunks[0]);
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.code(), errc::chunk_duplicate);
  EXPECT_EQ(a.in_progress(), 1u);
  for (size_t i = 1; i < chunks.size(); ++i) {
    auto r = a.add(chunks[i]);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->has_value(), i == 3);
  }
}

TEST(Chunks, NewerTransferReplacesOlderAndOldChunksAreStale) {
  auto old_chunks = *split_push(whole_push(100, 1), 100);
  auto new_chunks = *split_push(whole_push(100, 2), 100);
  chunk_assembler a;
  ASSERT_TRUE(a.add(old_chunks[0]).ok());
  ASSERT_TRUE(a.add(new_chunks[0]).ok());
  EXPECT_EQ(a.in_progress(), 1u);
  EXPECT_EQ(a.buffered_bytes(), 400u);
  auto stale = a.add(old_chunks[1]);
  ASSERT_FALSE(stale.ok());
  EXPECT_EQ(stale.code(), errc::chunk_stale);
  std::optional<push_msg> done;
  for (size_t i = 1; i < new_chunks.size(); ++i) {
    auto r = a.add(new_chunks[i]);
    ASSERT_TRUE(r.ok());
    if (r->has_value()) done = **r;
  }
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->transfer_id, 2u);
  EXPECT_EQ(done->payload, whole_push(100, 2).payload);
}

TEST(Chunks, ChangedHeaderDiscardsTransfer) {
  auto chunks = *split_push(whole_push(100), 100);
  chunk_assembler a;
  ASSERT_TRUE(a.add(chunks[0]).ok());
  chunks[1].tokens = 401;
  auto r = a.add(chunks[1]);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.code(), errc::chunk_inconsistent);
  EXPECT_EQ(a.in_progress(), 0u);
  EXPECT_EQ(a.buffered_bytes(), 0u);
}

TEST(Chunks, BadIndexSizeAndOffsetAreRefused) {
  chunk_assembler a;
  auto c = (*split_push(whole_push(100), 100))[1];
  auto bad_index = c;
  bad_index.chunk_index = 4;
  EXPECT_EQ(a.add(bad_index).code(), errc::chunk_inconsistent);
  auto bad_total = c;
  bad_total.total_elements = 99;  // 396 bytes, not 400
  EXPECT_EQ(a.add(bad_total).code(), errc::size_mismatch);
  auto past_end = c;
  past_end.chunk_offset = 350;  // 350 + 100 > 400
  EXPECT_EQ(a.add(past_end).code(), errc::chunk_inconsistent);
  auto empty = c;
  empty.payload.clear();
  empty.payload_crc32c = 0;  // no checksum: this case is about the chunk's consistency
  EXPECT_EQ(a.add(empty).code(), errc::chunk_inconsistent);
  EXPECT_EQ(a.in_progress(), 0u);
}

TEST(Chunks, OverlappingChunksFailAtCompletion) {
  auto chunks = *split_push(whole_push(100), 100);
  chunks[2].chunk_offset = 150;  // overlaps chunk 1 [100, 200); bytes [300, 350) never written
  chunk_assembler a;
  for (size_t i = 0; i + 1 < chunks.size(); ++i) ASSERT_TRUE(a.add(chunks[i]).ok());
  auto r = a.add(chunks[3]);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.code(), errc::chunk_inconsistent);
  EXPECT_NE(r.error().message.find("chunk 2"), std::string::npos);
  EXPECT_EQ(a.in_progress(), 0u);
}

TEST(Chunks, MissingChunkStaysPendingUntilDropped) {
  auto chunks = *split_push(whole_push(100, 1, 7), 100);
  chunk_assembler a;
  ASSERT_TRUE(a.add(chunks[0]).ok());
  ASSERT_TRUE(a.add(chunks[1]).ok());
  ASSERT_TRUE(a.add(chunks[3]).ok());
  EXPECT_EQ(a.in_progress(), 1u);
  EXPECT_EQ(a.buffered_bytes(), 400u);
  EXPECT_EQ(a.drop_learner(8), 0u);
  EXPECT_EQ(a.drop_learner(7), 1u);
  EXPECT_EQ(a.in_progress(), 0u);
  EXPECT_EQ(a.buffered_bytes(), 0u);
}

TEST(Chunks, CapsAreEnforced) {
  chunk_assembler a(test::limits_of(64, 1000, 8, 700, 2));
  EXPECT_EQ(a.add((*split_push(whole_push(100), 100))[0]).code(), errc::too_large);  // chunk
  auto big = (*split_push(whole_push(300), 64))[0];  // 1200-byte payload > max_assembly_bytes
  big.chunk_count = 8;
  auto rb = a.add(big);
  EXPECT_EQ(rb.code(), errc::too_large);
  EXPECT_NE(rb.error().message.find("max_assembly_bytes"), std::string::npos);
  EXPECT_EQ(a.add((*split_push(whole_push(200), 64))[0]).code(), errc::too_large);  // 13 chunks
  // Buffered bytes: two 400-byte transfers exceed 700.
  push_msg p1 = whole_push(100, 1, 1);
  push_msg p2 = whole_push(100, 1, 2);
  ASSERT_TRUE(a.add((*split_push(p1, 64))[0]).ok());
  auto r = a.add((*split_push(p2, 64))[0]);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.code(), errc::too_large);
  EXPECT_NE(r.error().message.find("max_buffered_bytes"), std::string::npos);
  // In-progress count.
  chunk_limits lim2;
  lim2.max_in_progress = 2;
  chunk_assembler b(lim2);
  ASSERT_TRUE(b.add((*split_push(whole_push(100, 1, 1), 100))[0]).ok());
  ASSERT_TRUE(b.add((*split_push(whole_push(100, 1, 2), 100))[0]).ok());
  EXPECT_EQ(b.add((*split_push(whole_push(100, 1, 3), 100))[0]).code(), errc::too_large);
}

TEST(Chunks, BroadcastsNewestVersionWins) {
  broadcast_msg w = whole_broadcast(
      2, 5, 50, [](size_t) { return 3; }, payload_encoding::bf16);
  ASSERT_EQ(w.payload_bytes, 100u);
  auto v5 = *split_broadcast(w, 40);
  w.version = 6;
  w.payload.assign(100, 4);
  auto v6 = *split_broadcast(w, 40);
  chunk_assembler a;
  ASSERT_TRUE(a.add(v5[0]).ok());
  ASSERT_TRUE(a.add(v6[2]).ok());
  EXPECT_EQ(a.add(v5[1]).code(), errc::chunk_stale);
  ASSERT_TRUE(a.add(v6[0]).ok());
  auto r = a.add(v6[1]);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ((*r)->version, 6u);
  EXPECT_EQ((*r)->payload, std::vector<uint8_t>(100, 4));
  EXPECT_EQ(a.drop_broadcast(2), 0u);
}

// A recycled buffer is the next fitting transfer's: its bytes are that transfer's alone (chunks
// in reverse order, so a gap is zero-filled first and overwritten later), at the same address;
// one far too large or too small for the next transfer is freed, not used.
TEST(Chunks, ARecycledBufferAssemblesTheNextTransferWithTheSameBytes) {
  auto bytes_of = [](uint8_t v) { return [v](size_t i) { return static_cast<uint8_t>(i + v); }; };
  chunk_assembler a;
  auto assemble = [&](const broadcast_msg& w, size_t chunk) {
    auto chunks = *split_broadcast(w, chunk);
    std::optional<broadcast_msg> done;
    for (size_t i = chunks.size(); i-- > 0;) {
      auto r = a.add(*decode_broadcast_ref(encode(chunks[i])));
      EXPECT_TRUE(r.ok()) << r.error().message;
      if (r.ok() && r->has_value()) done = std::move(**r);
    }
    EXPECT_TRUE(done.has_value());
    return done ? std::move(*done) : broadcast_msg{};
  };
  const broadcast_msg v1 = whole_broadcast(0, 1, 3000, bytes_of(1));
  broadcast_msg got = assemble(v1, 1000);
  EXPECT_EQ(got.payload, v1.payload);
  const uint8_t* buffer = got.payload.data();
  a.recycle(std::move(got.payload));
  EXPECT_GE(a.spare_bytes(), 12000u);
  const broadcast_msg v2 = whole_broadcast(0, 2, 3000, bytes_of(7));
  got = assemble(v2, 1000);
  EXPECT_EQ(got.payload, v2.payload);
  EXPECT_EQ(got.payload.data(), buffer);  // the same memory, every byte rewritten
  EXPECT_EQ(a.spare_bytes(), 0u);
  // Too large for a transfer of 1,000 bytes (12,000 > 2 × 1,000 + 4 KiB): freed, not used.
  a.recycle(std::move(got.payload));
  const broadcast_msg small = whole_broadcast(1, 3, 250, bytes_of(9));
  got = assemble(small, 100);
  EXPECT_EQ(got.payload, small.payload);
  EXPECT_EQ(a.spare_bytes(), 0u);
  // Too small for a transfer of 12,000 bytes: freed, and the transfer assembles as usual.
  a.recycle(std::move(got.payload));
  const broadcast_msg v3 = whole_broadcast(0, 4, 3000, bytes_of(3));
  got = assemble(v3, 1000);
  EXPECT_EQ(got.payload, v3.payload);
  EXPECT_EQ(a.spare_bytes(), 0u);
  EXPECT_EQ(a.buffered_bytes(), 0u);
}

}  // namespace
}  // namespace dd

namespace dd {
namespace {

/// The encoded chunk with one bit of its payload flipped (found by its bytes).
wire_bytes flip_payload_bit(wire_bytes bytes, const std::vector<uint8_t>& payload) {
  auto at = std::search(bytes.begin(), bytes.end(), payload.begin(), payload.end());
  EXPECT_NE(at, bytes.end());
  if (at != bytes.end()) *(at + static_cast<std::ptrdiff_t>(payload.size() / 2)) ^= 0x04;
  return bytes;
}

TEST(Chunks, EveryChunkCarriesTheCrc32cOfItsPayload) {
  auto chunks = *split_push(whole_push(250), 300);
  for (const auto& c : chunks) {
    auto d = decode_push(encode(c, {"", c.incarnation}));
    ASSERT_TRUE(d.ok()) << d.error().message;
    EXPECT_NE(d->payload_crc32c, 0u);
    EXPECT_EQ(d->payload_crc32c, c.payload_crc32c);  // split_push computed the same value
  }
  broadcast_msg b;
  b.total_elements = 4;
  b.payload_bytes = 16;
  b.payload.assign(16, 7);
  auto db = decode_broadcast(encode(b));  // encode computes it even when the value has none
  ASSERT_TRUE(db.ok());
  EXPECT_NE(db->payload_crc32c, 0u);
}

TEST(Chunks, AChunkDamagedInTransitIsRefusedAndARecentCopyCompletesTheTransfer) {
  const push_msg whole = whole_push(250);
  auto chunks = *split_push(whole, 300);
  chunk_assembler a;
  ASSERT_TRUE(a.add(*decode_push(encode(chunks[0], {"", chunks[0].incarnation}))).ok());
  // Chunk 1 damaged on the way: the message checksum refuses it before anything is read.
  auto damaged =
      flip_payload_bit(encode(chunks[1], {"", chunks[1].incarnation}), chunks[1].payload);
  auto in_transit = decode_push(damaged);
  ASSERT_FALSE(in_transit.ok());
  EXPECT_EQ(in_transit.code(), errc::checksum_mismatch);
  EXPECT_NE(in_transit.error().message.find("message checksum"), std::string::npos)
      << in_transit.error().message;
  // Damaged before it was sealed (in the sender's memory): only the payload's CRC-32C sees it,
  // and the assembler refuses it.
  seal_message(damaged);
  auto bad = decode_push(damaged);
  ASSERT_TRUE(bad.ok()) << "the header still decodes: " << bad.error().message;
  auto r = a.add(std::move(*bad));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.code(), errc::checksum_mismatch);
  EXPECT_NE(r.error().message.find("CRC32C"), std::string::npos) << r.error().message;
  EXPECT_EQ(a.in_progress(), 1u);  // the transfer is untouched
  // The sender sends it again, intact; the rest follows; the payload is exactly the original.
  std::optional<push_msg> done;
  for (size_t i = 1; i < chunks.size(); ++i) {
    auto rr = a.add(*decode_push(encode(chunks[i], {"", chunks[i].incarnation})));
    ASSERT_TRUE(rr.ok()) << rr.error().message;
    if (rr->has_value()) done = std::move(**rr);
  }
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->payload, whole.payload);
}

TEST(Chunks, ADamagedBroadcastChunkIsRefused) {
  broadcast_msg b =
      whole_broadcast(2, 5, 64, [](size_t i) { return static_cast<uint8_t>(i * 13); });
  auto damaged = flip_payload_bit(encode(b), b.payload);
  EXPECT_EQ(decode_broadcast(damaged).code(), errc::checksum_mismatch);  // in transit
  seal_message(damaged);  // damaged before sealing: the payload's CRC-32C sees it
  auto bad = decode_broadcast(damaged);
  ASSERT_TRUE(bad.ok());
  chunk_assembler a;
  auto r = a.add(std::move(*bad));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.code(), errc::checksum_mismatch);
  EXPECT_EQ(a.in_progress(), 0u);
  auto good = a.add(*decode_broadcast(encode(b)));
  ASSERT_TRUE(good.ok());
  ASSERT_TRUE(good->has_value());
  EXPECT_EQ((*good)->payload, b.payload);
}

TEST(Chunks, AChunkWithoutACrcFromAnOlderWriterIsStillAccepted) {
  push_msg m = whole_push(10);
  m.payload_crc32c = 0;  // the field an older writer did not set
  chunk_assembler a;
  auto r = a.add(m);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->has_value());
}

// decode_push_ref leaves the payload where it is: the view points into the encoded message, and
// every header field is what decode_push reads.
TEST(Chunks, ARefDecodedPushPointsIntoTheMessageAndMatchesDecodePush) {
  auto chunks = *split_push(whole_push(250), 300);
  const auto bytes = encode(chunks[1], {"", chunks[1].incarnation});
  auto copy = decode_push(bytes);
  auto ref = decode_push_ref(bytes);
  ASSERT_TRUE(copy.ok()) << copy.error().message;
  ASSERT_TRUE(ref.ok()) << ref.error().message;
  EXPECT_TRUE(ref->header.payload.empty());
  EXPECT_TRUE(ref->owned.empty());
  ASSERT_EQ(ref->payload_size, 300u);
  EXPECT_GE(ref->payload, bytes.data());
  EXPECT_LE(ref->payload + ref->payload_size, bytes.data() + bytes.size());
  EXPECT_EQ(std::vector<uint8_t>(ref->payload, ref->payload + ref->payload_size), copy->payload);
  EXPECT_EQ(ref->header.transfer_id, copy->transfer_id);
  EXPECT_EQ(ref->header.learner_id, copy->learner_id);
  EXPECT_EQ(ref->header.chunk_index, 1u);
  EXPECT_EQ(ref->header.chunk_offset, 300u);
  EXPECT_EQ(ref->header.payload_crc32c, chunks[1].payload_crc32c);
  EXPECT_EQ(ref->header.tokens, 400u);
  // The same refusals as decode_push: another run, a truncated message.
  EXPECT_EQ(decode_push_ref(encode(chunks[1], {"other", 1}), {}, {"mine", 0}).code(),
            errc::other_run);
  EXPECT_EQ(decode_push_ref(bytes.data(), bytes.size() - 8).code(), errc::malformed);
}

// decode_*_ref checks the trailer with one pass that also yields the payload's CRC-32C
// (prefix, payload and suffix combined): the CRC it hands on is the payload's, and one flipped
// bit anywhere in the message — before the payload, in it, after it, in the trailer's CRC — is
// still errc::checksum_mismatch, as decode_push and decode_broadcast say; with the check off
// (verify_checksum false) no CRC is handed on.
TEST(Chunks, ARefDecodeChecksTheTrailerInOnePassAndHandsOnThePayloadCrc) {
  auto chunks = *split_push(whole_push(2000), 4096);
  const auto bytes = encode(chunks[0], {"", chunks[0].incarnation});
  auto ref = decode_push_ref(bytes);
  ASSERT_TRUE(ref.ok()) << ref.error().message;
  ASSERT_TRUE(ref->payload_crc.has_value());
  EXPECT_EQ(*ref->payload_crc, chunks[0].payload_crc32c);
  EXPECT_EQ(*ref->payload_crc, util::crc32c(chunks[0].payload.data(), chunks[0].payload.size()));
  const auto at = static_cast<size_t>(ref->payload - bytes.data());
  ASSERT_GT(at, 0u);
  for (size_t pos : {size_t{0}, at / 2, at - 1, at, at + 2047, at + 4095, at + 4096,
                     bytes.size() - 9, bytes.size() - 8, bytes.size() - 5}) {
    ASSERT_LT(pos, bytes.size());
    auto damaged = bytes;
    damaged[pos] ^= 0x04;
    auto got = decode_push_ref(damaged);
    auto plain = decode_push(damaged);
    EXPECT_EQ(got.code(), errc::checksum_mismatch) << "bit flipped at byte " << pos;
    EXPECT_EQ(plain.code(), errc::checksum_mismatch) << "bit flipped at byte " << pos;
    if (!got.ok() && !plain.ok()) {
      EXPECT_EQ(got.error().message, plain.error().message);
    }
  }
  decode_limits unchecked;
  unchecked.verify_checksum = false;
  auto header = decode_push_ref(bytes, unchecked);
  ASSERT_TRUE(header.ok());
  EXPECT_FALSE(header->payload_crc.has_value());
  // A broadcast chunk the same way.
  broadcast_msg b =
      whole_broadcast(2, 5, 3000, [](size_t i) { return static_cast<uint8_t>(i * 13 + 5); });
  auto bchunks = *split_broadcast(b, 8192);
  const auto bb = encode(bchunks[0]);
  auto bref = decode_broadcast_ref(bb);
  ASSERT_TRUE(bref.ok()) << bref.error().message;
  ASSERT_TRUE(bref->payload_crc.has_value());
  EXPECT_EQ(*bref->payload_crc, bchunks[0].payload_crc32c);
  auto bdamaged = bb;
  bdamaged[static_cast<size_t>(bref->payload - bb.data()) + 100] ^= 0x80;
  EXPECT_EQ(decode_broadcast_ref(bdamaged).code(), errc::checksum_mismatch);
}

// An unaligned message is decoded from an aligned copy that dies with the decoder: the view
// then owns a copy of the payload instead of pointing into freed memory.
TEST(Chunks, ARefOfAnUnalignedMessageOwnsItsPayload) {
  broadcast_msg b =
      whole_broadcast(1, 9, 64, [](size_t i) { return static_cast<uint8_t>(i * 7 + 1); });
  const auto bytes = encode(b);
  std::vector<uint8_t> shifted(bytes.size() + 1);
  std::copy(bytes.begin(), bytes.end(), shifted.begin() + 1);
  const uint8_t* odd = shifted.data() + 1;
  ASSERT_NE(reinterpret_cast<uintptr_t>(odd) % 8, 0u);
  auto ref = decode_broadcast_ref(odd, bytes.size());
  ASSERT_TRUE(ref.ok()) << ref.error().message;
  ASSERT_EQ(ref->owned, b.payload);
  EXPECT_EQ(ref->payload, ref->owned.data());
  auto moved = std::move(*ref);  // the view stays valid when moved
  chunk_assembler a;
  auto r = a.add(moved);
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ((*r)->payload, b.payload);
  EXPECT_EQ((*r)->version, 9u);
}

// Chunks added as views, in reverse and shuffled order (each one past the filled end leaves a
// gap its missing chunks fill later), give exactly the payload add(push_msg) gives.
TEST(Chunks, RefChunksReassembleInAnyOrder) {
  const push_msg whole = whole_push(1000);
  std::mt19937 rng(11);
  for (int trial = 0; trial < 20; ++trial) {
    auto chunks = *split_push(whole, 96 + trial * 41);
    if (trial == 0)
      std::reverse(chunks.begin(), chunks.end());
    else
      std::shuffle(chunks.begin(), chunks.end(), rng);
    std::vector<wire_bytes> wire;
    for (const auto& c : chunks) wire.push_back(encode(c, {"", c.incarnation}));
    chunk_assembler a;
    std::optional<push_msg> done;
    for (size_t i = 0; i < wire.size(); ++i) {
      auto d = decode_push_ref(wire[i]);
      ASSERT_TRUE(d.ok()) << d.error().message;
      auto r = a.add(*d);
      ASSERT_TRUE(r.ok()) << r.error().message;
      EXPECT_EQ(r->has_value(), i + 1 == wire.size());
      if (r->has_value()) {
        done = std::move(**r);
      } else {
        EXPECT_EQ(a.buffered_bytes(), whole.payload_bytes);
      }
    }
    ASSERT_TRUE(done.has_value());
    EXPECT_EQ(done->payload, whole.payload) << "trial " << trial;
    EXPECT_EQ(done->transfer_id, whole.transfer_id);
    EXPECT_EQ(done->payload_crc32c, 0u);
    EXPECT_EQ(a.buffered_bytes(), 0u);
  }
}

TEST(Chunks, ADamagedRefChunkIsRefusedAndChangesNothing) {
  const push_msg whole = whole_push(250);
  auto chunks = *split_push(whole, 300);
  chunk_assembler a;
  const auto first = encode(chunks[0], {"", chunks[0].incarnation});
  ASSERT_TRUE(a.add(*decode_push_ref(first)).ok());
  auto damaged =
      flip_payload_bit(encode(chunks[2], {"", chunks[2].incarnation}), chunks[2].payload);
  EXPECT_EQ(decode_push_ref(damaged).code(), errc::checksum_mismatch);  // in transit
  seal_message(damaged);  // damaged before sealing: the payload's CRC-32C sees it
  auto bad = decode_push_ref(damaged);
  ASSERT_TRUE(bad.ok()) << bad.error().message;
  auto r = a.add(*bad);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.code(), errc::checksum_mismatch);
  EXPECT_EQ(a.in_progress(), 1u);
  std::optional<push_msg> done;
  for (size_t i = 1; i < chunks.size(); ++i) {
    const auto w = encode(chunks[i], {"", chunks[i].incarnation});
    auto rr = a.add(*decode_push_ref(w));
    ASSERT_TRUE(rr.ok()) << rr.error().message;
    if (rr->has_value()) done = std::move(**rr);
  }
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->payload, whole.payload);
}

// ---- the trailer's check left to the assembler (decode_limits::defer_payload_checksum) ------

decode_limits deferred_limits() {
  decode_limits l;
  l.defer_payload_checksum = true;
  return l;
}

/// A broadcast of fragment 2 at `version`: 3000 fp32 values (12,000 bytes), whose byte i
/// depends on the version and differs between the chunks at the same place; split into chunks
/// of 4096 bytes: 4096, 4096, 3808.
broadcast_msg deferred_whole(uint64_t version) {
  return whole_broadcast(2, version, 3000, [=](size_t i) {
    return static_cast<uint8_t>(i * 13 + i / 1000 + version * 7);
  });
}
std::vector<broadcast_msg> deferred_chunks(uint64_t version) {
  return *split_broadcast(deferred_whole(version), 4096);
}

/// An assembler that completed one transfer (version 1) and holds its buffer for the next: the
/// chunks of the following transfers are copied into place before their verdict.
chunk_assembler recycled_assembler() {
  chunk_assembler a;
  std::optional<broadcast_msg> done;
  for (const auto& c : deferred_chunks(1)) {
    const auto w = encode(c);
    auto r = a.add(*decode_broadcast_ref(w, deferred_limits()));
    EXPECT_TRUE(r.ok()) << r.error().message;
    if (r.ok() && r->has_value()) done = std::move(**r);
  }
  EXPECT_TRUE(done.has_value());
  if (done) a.recycle(std::move(done->payload));
  EXPECT_GE(a.spare_bytes(), 12000u);
  return a;
}

// The decoder leaves the payload's share of the trailer's check (seal, no payload CRC);
// check_pending_seal with the payload's CRC is the decoder's own check: the same verdict and,
// for a damaged payload, the same message.
TEST(ChunkDeferred, TheDecoderLeavesTheTrailersCheckWhoseVerdictIsTheDecoders) {
  const auto chunks = deferred_chunks(5);
  const auto bytes = encode(chunks[1]);
  auto ref = decode_broadcast_ref(bytes, deferred_limits());
  ASSERT_TRUE(ref.ok()) << ref.error().message;
  ASSERT_TRUE(ref->seal.has_value());
  EXPECT_FALSE(ref->payload_crc.has_value());
  EXPECT_EQ(ref->seal->payload_bytes, 4096u);
  EXPECT_TRUE(check_pending_seal(*ref->seal, chunks[1].payload_crc32c).ok());
  auto damaged = flip_payload_bit(bytes, chunks[1].payload);
  auto plain = decode_broadcast_ref(damaged);
  ASSERT_EQ(plain.code(), errc::checksum_mismatch);
  auto deferred = decode_broadcast_ref(damaged, deferred_limits());
  ASSERT_TRUE(deferred.ok()) << "the header decodes: " << deferred.error().message;
  ASSERT_TRUE(deferred->seal.has_value());
  auto st =
      check_pending_seal(*deferred->seal, util::crc32c(deferred->payload, deferred->payload_size));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), errc::checksum_mismatch);
  EXPECT_EQ(st.error().message, plain.error().message);
  // A message that fails to decode is checked whole first, as without deferring.
  auto other_run = decode_broadcast_ref(damaged, deferred_limits(), {"another run", 0});
  EXPECT_EQ(other_run.code(), errc::checksum_mismatch);
  EXPECT_EQ(decode_broadcast_ref(bytes, deferred_limits(), {"another run", 0}).code(),
            errc::other_run);
}

// Deferred chunks in any order, into a fresh buffer and into recycled ones (of the same size,
// smaller, larger), give exactly the payload, transfer after transfer.
TEST(ChunkDeferred, ReassemblesInAnyOrderIntoFreshAndRecycledBuffers) {
  chunk_assembler a;
  std::mt19937 rng(7);
  for (uint64_t version = 1; version <= 6; ++version) {
    // Version 4 is shorter than the recycled buffer (it shrinks); versions 5 and 6 are longer
    // than the bytes it then holds (their chunks past them are appended).
    const size_t elements = version == 4 ? 2000 : version == 5 ? 2800 : 3000;
    const broadcast_msg whole = whole_broadcast(
        2, version, elements, [=](size_t i) { return static_cast<uint8_t>(i * 29 + version); });
    auto chunks = *split_broadcast(whole, 1024);
    std::shuffle(chunks.begin(), chunks.end(), rng);
    std::optional<broadcast_msg> done;
    for (size_t i = 0; i < chunks.size(); ++i) {
      const auto w = encode(chunks[i]);
      auto ref = decode_broadcast_ref(w, deferred_limits());
      ASSERT_TRUE(ref.ok()) << ref.error().message;
      ASSERT_TRUE(ref->seal.has_value());
      auto r = a.add(*ref);
      ASSERT_TRUE(r.ok()) << r.error().message;
      EXPECT_EQ(r->has_value(), i + 1 == chunks.size());
      if (r->has_value()) done = std::move(**r);
    }
    ASSERT_TRUE(done.has_value());
    EXPECT_EQ(done->payload, whole.payload) << "version " << version;
    EXPECT_EQ(done->version, version);
    EXPECT_EQ(a.in_progress(), 0u);
    EXPECT_EQ(a.buffered_bytes(), 0u);
    a.recycle(std::move(done->payload));
  }
}

enum class damage {
  in_transit,  ///< a payload bit flipped after sealing: the trailer disagrees
  trailer,     ///< a bit of the trailer's CRC flipped in transit
  unsealed,    ///< a payload bit flipped before sealing: only payload_crc32c disagrees
};

struct damaged_case {
  const char* name;
  bool recycled;                   // a recycled buffer: the copy comes before the verdict
  std::vector<size_t> before;      // chunks of version 5 accepted first
  size_t index;                    // the damaged chunk's index, of `version`
  uint64_t version;                // its transfer
  std::optional<uint64_t> offset;  // its chunk_offset, changed before sealing
  bool other_shape;                // its header disagrees with the transfer's (one value more)
  damage how;
};

// A damaged chunk whose trailer's check was left to the assembler is refused as
// checksum_mismatch whatever else it would be refused for (stale, duplicate, inconsistent) or
// do (start a newer transfer, discard the older one), and changes nothing accepted: the
// transfer in progress keeps its chunks and buffered bytes, a recycled buffer stays the spare,
// the damaged slice is not marked received, and the intact chunks then complete the transfer
// to exactly its payload (so no accepted byte was overwritten, even by a chunk whose damaged
// offset pointed into an accepted slice).
TEST(ChunkDeferred, ADamagedChunkIsRefusedAndChangesNothingAccepted) {
  const damaged_case cases[] = {
      {"payload, recycled buffer", true, {0}, 1, 5, {}, false, damage::in_transit},
      {"payload, fresh buffer", false, {0}, 1, 5, {}, false, damage::in_transit},
      {"first chunk, recycled buffer", true, {}, 0, 5, {}, false, damage::in_transit},
      {"first chunk, fresh buffer", false, {}, 2, 5, {}, false, damage::in_transit},
      {"trailer, between accepted slices", true, {0, 2}, 1, 5, {}, false, damage::trailer},
      {"unsealed: payloadCrc32c differs", true, {0}, 1, 5, {}, false, damage::unsealed},
      {"unsealed, the last chunk", true, {0, 1}, 2, 5, {}, false, damage::unsealed},
      {"offset onto an accepted slice", true, {0}, 2, 5, 0, false, damage::trailer},
      {"offset across an accepted end", true, {1}, 2, 5, 4096 + 100, false, damage::trailer},
      {"duplicate of an accepted chunk", true, {0, 1}, 1, 5, {}, false, damage::in_transit},
      {"chunk of a newer transfer", true, {0}, 0, 6, {}, false, damage::in_transit},
      {"chunk of an older transfer", true, {0}, 1, 4, {}, false, damage::in_transit},
      {"header the transfer refuses", true, {0}, 1, 5, {}, true, damage::in_transit},
  };

  const auto intact = deferred_chunks(5);
  const broadcast_msg whole = deferred_whole(5);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    chunk_assembler a = c.recycled ? recycled_assembler() : chunk_assembler{};
    for (size_t i : c.before) {
      const auto w = encode(intact[i]);
      auto r = a.add(*decode_broadcast_ref(w, deferred_limits()));
      ASSERT_TRUE(r.ok()) << r.error().message;
      ASSERT_FALSE(r->has_value());
    }
    const size_t in_progress = a.in_progress();
    const size_t buffered = a.buffered_bytes();
    const size_t spare = a.spare_bytes();

    broadcast_msg bad = deferred_chunks(c.version)[c.index];
    if (c.offset) bad.chunk_offset = *c.offset;
    if (c.other_shape) {
      bad.total_elements += 1;
      bad.payload_bytes += 4;
    }
    auto bytes = encode(bad);
    switch (c.how) {
      case damage::in_transit: bytes = flip_payload_bit(bytes, bad.payload); break;
      case damage::trailer: bytes[bytes.size() - seal_bytes] ^= 0x10; break;
      case damage::unsealed:
        bytes = flip_payload_bit(bytes, bad.payload);
        seal_message(bytes);
        break;
    }
    auto ref = decode_broadcast_ref(bytes, deferred_limits());
    ASSERT_TRUE(ref.ok()) << "the header decodes: " << ref.error().message;
    ASSERT_TRUE(ref->seal.has_value());
    auto r = a.add(*ref);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.code(), errc::checksum_mismatch) << r.error().message;
    EXPECT_EQ(a.in_progress(), in_progress);
    EXPECT_EQ(a.buffered_bytes(), buffered);
    EXPECT_EQ(a.spare_bytes(), spare);

    // The chunks not accepted before, intact (the damaged one sent again among them).
    std::optional<broadcast_msg> done;
    for (size_t i = 0; i < intact.size(); ++i) {
      if (std::find(c.before.begin(), c.before.end(), i) != c.before.end()) continue;
      const auto w = encode(intact[i]);
      auto rr = a.add(*decode_broadcast_ref(w, deferred_limits()));
      ASSERT_TRUE(rr.ok()) << "chunk " << i << ": " << rr.error().message;
      if (rr->has_value()) done = std::move(**rr);
    }
    ASSERT_TRUE(done.has_value());
    EXPECT_EQ(done->version, 5u);
    EXPECT_EQ(done->payload, whole.payload);
    EXPECT_EQ(a.in_progress(), 0u);
    EXPECT_EQ(a.buffered_bytes(), 0u);
  }
}

// encode_push_chunks (each payload copied once, a 4 KiB+ word-aligned chunk as a segment of its
// own) gives what split_push + encode gives, for chunk sizes that take either path: word-sized
// chunks of 4 KiB and more, an odd-sized last chunk, and chunks too small for their own segment.
TEST(ChunkEncode, EncodingChunksDirectlyDecodesToWhatSplitThenEncodeGives) {
  for (const size_t chunk : {size_t{8192}, size_t{4096}, size_t{300}, size_t{5000}}) {
    push_msg whole = whole_push(5001);  // 20004 bytes: the last chunk is not whole words
    whole.contains_from = 7;
    whole.incarnation = 3;
    whole.fragment_id = 2;
    const envelope_stamp stamp{"0123abcd0123abcd", 3};
    auto direct = encode_push_chunks(whole, chunk, stamp);
    ASSERT_TRUE(direct.ok()) << direct.error().message;
    auto split = split_push(whole, chunk);
    ASSERT_TRUE(split.ok());
    ASSERT_EQ(direct->size(), split->size()) << "chunk " << chunk;
    chunk_assembler a;
    std::optional<push_msg> done;
    for (size_t i = 0; i < split->size(); ++i) {
      const envelope_expect expect{stamp.run_id, 0};
      auto d = decode_push((*direct)[i], {}, expect);
      auto s = decode_push(encode((*split)[i], stamp), {}, expect);
      ASSERT_TRUE(d.ok()) << d.error().message;
      ASSERT_TRUE(s.ok()) << s.error().message;
      test::expect_same_push(*d, *s);
      EXPECT_EQ(d->payload_crc32c, s->payload_crc32c);
      auto r = a.add(*decode_push_ref((*direct)[i], {}, expect));
      ASSERT_TRUE(r.ok()) << r.error().message;
      if (r->has_value()) done = std::move(**r);
    }
    ASSERT_TRUE(done.has_value());
    EXPECT_EQ(done->payload, whole.payload) << "chunk " << chunk;
  }
  // The same errors as split_push.
  EXPECT_EQ(encode_push_chunks(whole_push(10), 0, {}).code(), errc::invalid_argument);
}

// The trailer of a chunk message whose payload is a segment of its own takes the payload's CRC
// by crc32c_combine instead of a second pass over it: every encoded chunk, of either kind and
// either path (a payload segment of its own for whole words of 4 KiB or more, copied in
// otherwise), is byte for byte what sealing its bytes afresh gives.
TEST(ChunkEncode, TheTrailerTakesThePayloadCrcAndEqualsAFreshSeal) {
  for (const size_t chunk : {size_t{8192}, size_t{4096}, size_t{300}, size_t{5000}}) {
    auto pushes = encode_push_chunks(whole_push(5001), chunk, {"0123abcd0123abcd", 1});
    ASSERT_TRUE(pushes.ok());
    broadcast_msg b =
        whole_broadcast(3, 8, 5001, [](size_t i) { return static_cast<uint8_t>(i * 5 + 2); });
    b.merged = {{1, 2, 3, 4}, {5, 6, 7, 8}};
    b.value_digest = 99;
    auto bcasts = encode_broadcast_chunks(b, chunk, {"0123abcd0123abcd", 2});
    ASSERT_TRUE(bcasts.ok());
    for (const auto* list : {&*pushes, &*bcasts})
      for (const auto& m : *list) {
        auto fresh = m;
        seal_message(fresh);
        EXPECT_EQ(fresh, m) << "chunk bytes " << chunk;
      }
  }
  push_msg lying = whole_push(10);
  lying.payload_bytes = 41;
  EXPECT_EQ(encode_push_chunks(lying, 16, {}).code(), errc::size_mismatch);
}

TEST(ChunkEncode, BroadcastChunksCarryTheMergedListAndThePayload) {
  broadcast_msg b =
      whole_broadcast(1, 12, 3000, [](size_t i) { return static_cast<uint8_t>(i * 7 + 1); });
  b.merged = {{0, 1, 5, 11}, {2, 1, 9, 12}};
  auto direct = encode_broadcast_chunks(b, 4096, {"feed", 2});
  ASSERT_TRUE(direct.ok());
  ASSERT_EQ(direct->size(), 3u);
  chunk_assembler a;
  std::optional<broadcast_msg> done;
  for (const auto& bytes : *direct) {
    auto d = decode_broadcast(bytes, {}, {"feed", 0});
    ASSERT_TRUE(d.ok()) << d.error().message;
    EXPECT_EQ(d->version, 12u);
    EXPECT_EQ(d->merged.size(), 2u);
    EXPECT_EQ(d->merged[1].transfer_id, 9u);
    auto r = a.add(std::move(*d));
    ASSERT_TRUE(r.ok()) << r.error().message;
    if (r->has_value()) done = std::move(**r);
  }
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->payload, b.payload);
}

}  // namespace
}  // namespace dd
