// Robustness: random bytes, truncations, bit flips and huge announced sizes must give error
// values (or a valid decode), never an exception or a crash. Seeded, so failures reproduce.
// Every decoder checks the CRC-32C trailer before it reads anything, and random bytes or a few
// flipped bits never pass it: the random-input tests re-seal what they feed (sealed(), as
// tests/fuzz/codec_fuzz.cpp does), so the envelope and body decoders really run, and count the
// inputs that decode to prove it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "messages/codec.hpp"
#include "messages/control.hpp"
#include "tests/support/wire_msgs.hpp"

namespace dd {
namespace {

// `b` with its last 8 bytes rewritten into a valid checksum trailer when its length allows one
// (a whole number of words, at least two), else unchanged.
std::vector<uint8_t> sealed(std::vector<uint8_t> b) {
  if (b.size() >= 2 * seal_bytes && b.size() % 8 == 0) seal_message(b);
  return b;
}

// Runs every decoder over `b`; checks invariants of whatever decodes successfully. Adds 1 to
// `*ok_count` when some decoder accepts `b`.
void decode_all(const std::vector<uint8_t>& b, int* ok_count) {
  const uint8_t* p = b.data();
  const size_t n = b.size();
  EXPECT_NO_THROW({
    auto k = peek_kind(p, n);
    auto jq = decode_join_request(p, n);
    auto jr = decode_join_reply(p, n);
    auto hb = decode_heartbeat(p, n);
    auto pu = decode_push(p, n);
    auto br = decode_broadcast(p, n);
    auto rj = decode_reject(p, n);
    auto ac = decode_push_ack(p, n);
    auto pl = decode_pull_request(p, n);
    auto pg = decode_progress(p, n);
    auto ck = decode_checkpoint(p, n);
    const std::vector<uint8_t> copy(p, p + n);
    auto nj = decode_node_join(copy);
    auto nr = decode_node_join_reply(copy);
    auto lv = decode_leave(copy);
    auto fq = decode_fragment_query(copy);
    auto fh = decode_fragment_held(copy);
    auto vw = decode_live_view(copy);
    auto od = decode_owner_directory(copy);
    auto sb = decode_subscribe(copy);
    auto st = decode_stop(copy);
    auto sq = decode_status_request(copy);
    auto sr = decode_status_reply(copy);
    auto dr = decode_drain(copy);
    auto dp = decode_drain_reply(copy);
    auto ne = decode_node_events(copy);
    auto eh = peek_envelope(copy);
    if (eh.ok()) {
      EXPECT_LE(eh->run_id.size(), 256u);
    }
    if (vw.ok()) {
      for (size_t i = 0; i < vw->learners.size(); ++i) {
        EXPECT_GE(vw->learners[i].learner_id, 0);
        EXPECT_TRUE(std::isfinite(vw->learners[i].step_time_ema_s));
        if (i > 0) {
          EXPECT_LT(vw->learners[i - 1].learner_id, vw->learners[i].learner_id);
        }
      }
    }
    if (od.ok()) {
      for (auto id : od->fragment_ids) EXPECT_GE(id, 0);
    }
    if (sb.ok()) {
      EXPECT_GE(sb->fragment_id, 0);
    }
    if (st.ok()) {
      EXPECT_LE(st->reason.size(), 4096u);
    }
    if (dr.ok()) {
      EXPECT_GE(dr->learner_id, 0);
    }
    if (ne.ok()) {
      EXPECT_FALSE(ne->node.empty());
      EXPECT_LE(ne->lines.size(), size_t{1} << 20);
    }
    // At most one decoder accepts any input: the envelope names one kind.
    const int control_kinds =
        vw.ok() + od.ok() + sb.ok() + st.ok() + sq.ok() + sr.ok() + dr.ok() + dp.ok() + ne.ok();
    EXPECT_LE(control_kinds, 1);
    if (fq.ok()) {
      EXPECT_GE(fq->fragment_id, 0);
    }
    if (fh.ok()) {
      EXPECT_GE(fh->learner_id, 0);
      EXPECT_GE(fh->fragment_id, 0);
      EXPECT_TRUE(fh->have || fh->version == 0);
    }
    if (nj.ok()) {
      for (auto id : nj->learner_ids) EXPECT_GE(id, 0);
    }
    if (nr.ok()) {
      EXPECT_TRUE(!nr->accepted || nr->refusal == node_refusal::none);
    }
    if (lv.ok()) {
      EXPECT_GE(lv->learner_id, 0);
    }
    if (pu.ok()) {
      EXPECT_LT(pu->chunk_index, pu->chunk_count);
      EXPECT_LE(pu->chunk_offset + pu->payload.size(), pu->payload_bytes);
      EXPECT_EQ(*encoded_size(pu->encoding, pu->total_elements), pu->payload_bytes);
    }
    if (br.ok()) {
      EXPECT_LT(br->chunk_index, br->chunk_count);
      EXPECT_LE(br->chunk_offset + br->payload.size(), br->payload_bytes);
    }
    if (jr.ok()) {
      EXPECT_LT(jr->shard_index, jr->shard_count);
    }
    if (rj.ok()) {
      EXPECT_LE(static_cast<int>(rj->reason), static_cast<int>(reject_reason::implausible));
    }
    if (ck.ok()) {
      EXPECT_EQ(ck->value.size(), ck->momentum.size());
    }
    if (ac.ok()) {
      EXPECT_GE(ac->learner_id, 0);
      EXPECT_GE(ac->fragment_id, 0);
    }
    if (pl.ok()) {
      EXPECT_GE(pl->learner_id, -1);
      EXPECT_GE(pl->fragment_id, 0);
    }
    // At most one kind can decode.
    int kinds = jq.ok() + jr.ok() + hb.ok() + pu.ok() + br.ok() + rj.ok() + ac.ok() + pl.ok() +
                pg.ok() + nj.ok() + nr.ok() + lv.ok() + fq.ok() + fh.ok() + control_kinds;
    EXPECT_LE(kinds, 1);
    // (the checkpoint file format has no envelope: it is counted apart from the kinds)
    if (kinds + ck.ok() > 0) ++*ok_count;
    if (kinds == 1) {
      EXPECT_TRUE(k.ok());
    }
    if (k.ok()) {
      // peek_kind agrees with the one decoder that accepts the bytes.
      const message_kind kind = *k;
      if (ac.ok()) {
        EXPECT_EQ(kind, message_kind::ack);
      }
      if (pl.ok()) {
        EXPECT_EQ(kind, message_kind::pull);
      }
      if (pg.ok()) {
        EXPECT_EQ(kind, message_kind::progress);
      }
      EXPECT_LE(static_cast<int>(kind), static_cast<int>(message_kind::node_events));
      if (fq.ok()) {
        EXPECT_EQ(kind, message_kind::fragment_query);
      }
      if (fh.ok()) {
        EXPECT_EQ(kind, message_kind::fragment_held);
      }
    }
  });
}

std::vector<std::vector<uint8_t>> valid_messages() {
  push_msg p = test::push_header(1, 0, 2, 0, 0, 0, 0);
  // 130 int4 values: 3 blocks, 36 + 36 + 4 + 1 = 77 bytes.
  test::set_payload_bytes(p, payload_encoding::int4, 130, [](size_t) { return 0x5A; });
  broadcast_msg b;
  b.version = 3;
  test::set_payload_bytes(b, payload_encoding::fp32, 4, [](size_t) { return 1; });
  owner_checkpoint c;
  c.value = {1, 2, 3};
  c.momentum = {0, 0, 1};
  c.anchors.push_back({2, {1, 1, 1}});
  return {
      encode(join_request{3, "host", {0, 1}}), encode(join_reply{1, 2, "{}", 0, 2, 10, {9, 9}}),
      encode(heartbeat_msg{1, 2, 3, 4, 0.5, {7}}, {"", 2}), encode(p), encode(b),
      encode(reject_msg{1, 2, reject_reason::stale, "old", 5}), encode(push_ack{1, 2, 3, 4, 5}),
      encode(pull_request{1, 2, 3}, {"", 2}), encode(progress_msg{123456789, 4}),
      encode(node_join{"run", protocol_version, "node-a", "host", {0, 2}, 2, 1024, "abc"}),
      encode(node_join_reply{true, node_refusal::none, "", "run", "{}", "e", {1}, 10, "d", 5}),
      encode(node_join_reply{false, node_refusal::other_run, "other", "run", "", "", {}, 0, "", 0}),
      encode(leave_msg{3, 1}, {"", 1}), encode(fragment_query{2, 17, true}),
      encode(fragment_held{1, 4, 2, 17, true, 12}, {"", 4}),
      encode(live_view_msg{5, {{0, 1, 0.5}, {2, 1, 0.25}}}), encode(owner_directory{{0, 1}}),
      encode(subscribe_msg{1}), encode(stop_msg{"stop"}), encode(status_request{}),
      encode(status_reply{"{}"}), encode(drain_msg{2}), encode(drain_reply{true, "ok"}),
      encode(node_events{"node-a", "{}\n", "", 0}),
      // Stamped: every decoder above (which names no run) refuses them as another run's.
      encode(stop_msg{"stop"}, {"0123abcd", 3}), encode(push_ack{1, 2, 3, 4, 5}, {"0123abcd", 3}),
      encode_checkpoint(c)};
}

TEST(Fuzz, RandomBytesNeverCrash) {
  // Three families, each sealed: bytes all random; random words behind a plausible segment table
  // (one segment of the right size); and a valid message whose tail from a random word on is
  // random (its segment table and leading pointers intact, so the body decoders get far).
  std::mt19937_64 rng(12345);
  const auto valid = valid_messages();
  int ok = 0;
  for (int i = 0; i < 2000; ++i) {
    std::vector<uint8_t> b;
    if (i % 4 == 1) {
      b = valid[rng() % valid.size()];
      const size_t words = b.size() / 8;
      for (size_t at = 8 * (1 + rng() % (words - 1)); at < b.size(); ++at)
        b[at] = static_cast<uint8_t>(rng());
    } else {
      size_t n = rng() % 400;
      if (i % 2 == 0) n &= ~size_t{7};  // half of them word-aligned sizes
      b.resize(n);
      for (auto& x : b) x = static_cast<uint8_t>(rng());
      if (i % 4 == 0 && n >= 8) {  // plausible segment table: 1 segment of the right size
        uint32_t zero = 0;
        uint32_t words = static_cast<uint32_t>(n / 8 - 1);
        std::memcpy(b.data(), &zero, 4);
        std::memcpy(b.data() + 4, &words, 4);
      }
    }
    decode_all(sealed(std::move(b)), &ok);
  }
  std::printf("Fuzz.RandomBytesNeverCrash: %d of 2000 sealed random inputs decoded\n", ok);
  EXPECT_GT(ok, 0) << "no random input got past the decoders: they did not run";
}

TEST(Fuzz, TruncationsAreErrors) {
  int ok = 0;
  for (const auto& msg : valid_messages()) {
    for (size_t len = 0; len < msg.size(); ++len) {
      std::vector<uint8_t> b(msg.begin(), msg.begin() + static_cast<std::ptrdiff_t>(len));
      decode_all(b, &ok);
      // Our encoder writes one segment, so every strict prefix misses part of it: refused.
      EXPECT_FALSE(peek_kind(b.data(), b.size()).ok()) << "prefix of " << len << " bytes";
      EXPECT_FALSE(decode_checkpoint(b.data(), b.size()).ok());
    }
  }
}

TEST(Fuzz, BitFlipsNeverCrash) {
  // One to three flipped bits, then sealed again (the checksum would catch every such flip):
  // the decoders read damaged envelopes and bodies.
  std::mt19937_64 rng(777);
  int ok = 0, total = 0;
  for (const auto& msg : valid_messages()) {
    for (int i = 0; i < 400; ++i) {
      std::vector<uint8_t> b = msg;
      int flips = 1 + static_cast<int>(rng() % 3);
      for (int f = 0; f < flips; ++f) {
        // Within the message, before its trailer (which sealing rewrites).
        size_t bit = rng() % ((b.size() - seal_bytes) * 8);
        b[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
      }
      decode_all(sealed(std::move(b)), &ok);
      ++total;
    }
  }
  std::printf("Fuzz.BitFlipsNeverCrash: %d of %d sealed bit-flipped messages decoded\n", ok, total);
  EXPECT_GT(ok, 0) << "no flipped message got past the decoders: they did not run";
}

TEST(Fuzz, CheckpointBitFlipsAreRefused) {
  owner_checkpoint c;
  c.fragment_id = 1;
  c.version = 5;
  c.value = {1, 2, 3, 4};
  c.momentum = {4, 3, 2, 1};
  auto bytes = encode_checkpoint(c);
  // CRC32 detects every single-bit error in the body; magic/version/length checks catch the
  // header. So every single flip must be refused.
  for (size_t bit = 0; bit < bytes.size() * 8; ++bit) {
    auto b = bytes;
    b[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    auto d = decode_checkpoint(b.data(), b.size());
    EXPECT_FALSE(d.ok()) << "bit " << bit;
  }
}

TEST(Fuzz, HugeAnnouncedSizesAreErrors) {
  int ok = 0;
  // Segment table announcing 2^32 segments, or one segment of 2^31 words.
  for (uint32_t count_minus_one : {0xFFFFFFFFu, 1000000u, 0u}) {
    for (uint32_t words : {0x7FFFFFFFu, 0xFFFFFFFFu, 1u << 20}) {
      std::vector<uint8_t> b(64, 0);
      std::memcpy(b.data(), &count_minus_one, 4);
      std::memcpy(b.data() + 4, &words, 4);
      decode_all(b, &ok);
      EXPECT_FALSE(peek_kind(b.data(), b.size()).ok());
    }
  }
  // Every word of valid messages overwritten with a pointer whose size field is huge.
  for (const auto& msg : valid_messages()) {
    for (size_t w = 0; w + 8 <= msg.size(); w += 8) {
      for (uint32_t hi : {0xFFFFFFFDu, 0x7FFFFFFDu, 0xFFFFFFFFu}) {
        std::vector<uint8_t> b = msg;
        std::memcpy(b.data() + w + 4, &hi, 4);
        decode_all(b, &ok);
        // Sealed again, so the decoders meet the huge size rather than the checksum.
        if (w + 8 < msg.size()) decode_all(sealed(b), &ok);
      }
    }
  }
  // A checkpoint header announcing a huge body is refused before reading it.
  std::vector<uint8_t> ck = valid_messages().back();
  uint64_t huge = ~uint64_t{0};
  std::memcpy(ck.data() + 16, &huge, 8);
  auto d = decode_checkpoint(ck.data(), ck.size());
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.code(), errc::corrupt);
}

}  // namespace
}  // namespace dd
