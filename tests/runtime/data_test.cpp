// tests/runtime/data_test.cpp — data loading errors, split, shards, batches and cursors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <set>

#include "runtime/data.hpp"
#include "runtime/tokenizer.hpp"

namespace {

using ::testing::HasSubstr;

const std::string k_shakespeare = std::string(DD_DATA_DIR) + "/tinyshakespeare/input.txt";

std::string sample_text(size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s.push_back(static_cast<char>('a' + (i * 7 + i / 26) % 26));
  return s;
}

TEST(Tokenizer, RoundTripsBytes) {
  const std::string s = "Hi\n\xff\x01";
  const auto t = dd::byte_encode(s);
  EXPECT_EQ(t, (std::vector<int32_t>{72, 105, 10, 255, 1}));
  EXPECT_EQ(dd::byte_decode(t), s);
  EXPECT_THROW(dd::byte_decode({1, 300}), std::invalid_argument);
}

TEST(Data, MissingFileIsRefused) {
  try {
    dd::text_dataset::from_file("/nonexistent/dd/input.txt");
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("data file '/nonexistent/dd/input.txt': cannot open"));
  }
}

TEST(Data, EmptyFileIsRefused) {
  const std::string path = ::testing::TempDir() + "dd_empty_data.txt";
  { std::ofstream(path).flush(); }
  try {
    dd::text_dataset::from_file(path);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("file is empty"));
    EXPECT_THAT(e.what(), HasSubstr(path));
  }
  std::remove(path.c_str());
}

TEST(Data, SplitsShakespeareNinetyTen) {
  const auto d = dd::text_dataset::from_file(k_shakespeare);
  EXPECT_EQ(d.train().size() + d.validation().size(), 1115394u);
  EXPECT_EQ(d.train().size(), 1003854u);  // floor(0.9 · 1115394)
  EXPECT_EQ(dd::byte_decode({d.train().begin(), d.train().begin() + 14}), "First Citizen:");
}

TEST(Data, ShardsAreDisjointAndCover) {
  for (int M : {1, 3, 4, 7}) {
    size_t expect_begin = 0;
    for (int i = 0; i < M; ++i) {
      const auto s = dd::shard_of(1000003, i, M);
      EXPECT_EQ(s.begin, expect_begin);
      EXPECT_GE(s.size(), 1000003u / M);
      EXPECT_LE(s.size(), 1000003u / M + 1);
      expect_begin = s.end;
    }
    EXPECT_EQ(expect_begin, 1000003u);
  }
  EXPECT_THROW(dd::shard_of(10, 2, 2), std::invalid_argument);
}

TEST(Data, BatchesStayInShardAndShiftTargets) {
  const auto d = dd::text_dataset::from_text(sample_text(20000));
  const int M = 4, T = 16, B = 8;
  for (int i = 0; i < M; ++i) {
    dd::batch_stream s(d, i, M, T, 99);
    std::vector<int32_t> in, tg;
    for (int k = 0; k < 40; ++k) {  // crosses several epochs
      s.next(B, in, tg);
      ASSERT_EQ(in.size(), static_cast<size_t>(B * T));
      for (int b = 0; b < B; ++b) {
        // Targets are the inputs shifted by one within each window.
        for (int t = 0; t + 1 < T; ++t) EXPECT_EQ(tg[b * T + t], in[b * T + t + 1]);
      }
    }
    EXPECT_GT(s.cursor().epoch, 0);
  }
}

TEST(Data, ShardsYieldDisjointTokens) {
  // Two halves of distinct bytes: each learner of M = 2 must only ever see its own half.
  std::string text;
  for (int i = 0; i < 40000; ++i) text.push_back(static_cast<char>(i < 18000 ? 'a' : 'z'));
  const auto d = dd::text_dataset::from_text(text);
  dd::batch_stream s0(d, 0, 2, 8, 5), s1(d, 1, 2, 8, 5);
  std::vector<int32_t> in, tg;
  for (int k = 0; k < 50; ++k) {
    s0.next(4, in, tg);
    for (auto v : in) ASSERT_EQ(v, 'a');  // learner 0 owns [0, 18000) of the 36000 train bytes
    s1.next(4, in, tg);
    for (auto v : in) ASSERT_EQ(v, 'z');  // learner 1 owns [18000, 36000)
  }
}

TEST(Data, InterleavedShardsSpreadEveryLearnerOverTheWholeText) {
  // Two halves of distinct bytes: with interleaved windows every learner sees both halves.
  std::string text;
  for (int i = 0; i < 40000; ++i) text.push_back(static_cast<char>(i < 18000 ? 'a' : 'z'));
  const auto d = dd::text_dataset::from_text(text);
  for (int learner = 0; learner < 2; ++learner) {
    dd::batch_stream s(d, learner, 2, 8, 5, dd::shard_layout::interleaved);
    std::vector<int32_t> in, tg;
    int a = 0, z = 0;
    for (int k = 0; k < 200; ++k) {
      s.next(4, in, tg);
      for (auto v : in) (v == 'a' ? a : z) += 1;
    }
    EXPECT_GT(a, 1000) << "learner " << learner;
    EXPECT_GT(z, 1000) << "learner " << learner;
  }
}

TEST(Data, InterleavedWindowsOfOneEpochAreDisjointAndCoverTheSplit) {
  // Random bytes: every 8-byte window is unique, so a window's tokens give its start.
  std::string text;
  uint64_t x = 12345;
  for (int i = 0; i < 20000; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    text.push_back(static_cast<char>(x >> 56));
  }
  const auto d = dd::text_dataset::from_text(text);
  const auto& train = d.train();
  std::map<std::vector<int32_t>, size_t> start_of;
  for (size_t i = 0; i + 8 <= train.size(); ++i)
    start_of[std::vector<int32_t>(train.begin() + i, train.begin() + i + 8)] = i;
  const int M = 3, T = 8;
  std::set<size_t> seen;
  size_t total = 0, offset = T;
  for (int learner = 0; learner < M; ++learner) {
    dd::batch_stream s(d, learner, M, T, 9, dd::shard_layout::interleaved);
    const size_t n = s.windows_in_epoch();
    std::vector<int32_t> in, tg;
    for (size_t k = 0; k < n; ++k) {
      s.next(1, in, tg);
      auto it = start_of.find(in);
      ASSERT_NE(it, start_of.end());
      const size_t start = it->second;
      if (offset == static_cast<size_t>(T)) offset = start % T;
      EXPECT_EQ(start % T, offset) << "one offset for every learner";
      EXPECT_EQ(((start - offset) / T) % M, static_cast<size_t>(learner));  // k ≡ i (mod M)
      EXPECT_TRUE(seen.insert(start).second) << "window at " << start << " given twice";
    }
    total += n;
  }
  // Every whole window of the split (after the offset) went to exactly one learner.
  EXPECT_EQ(total, (train.size() - 1 - offset) / T);
  // Resuming from a cursor continues the same sequence.
  dd::batch_stream a(d, 1, M, T, 9, dd::shard_layout::interleaved);
  std::vector<int32_t> in, tg, in2, tg2;
  for (int k = 0; k < 500; ++k) a.next(2, in, tg);
  dd::batch_stream b(d, 1, M, T, 9, dd::shard_layout::interleaved);
  b.restore(a.cursor());
  for (int k = 0; k < 50; ++k) {
    a.next(2, in, tg);
    b.next(2, in2, tg2);
    ASSERT_EQ(in, in2);
  }
  // Too small a split for M learners is refused, naming the layout.
  const auto tiny = dd::text_dataset::from_text(sample_text(60));  // 54 train tokens < 73
  try {
    dd::batch_stream s(tiny, 0, 4, 8, 1, dd::shard_layout::interleaved);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("interleaved"));
  }
}

TEST(Data, CursorRoundTripsAndResumesExactly) {
  const auto d = dd::text_dataset::from_text(sample_text(30000));
  dd::batch_stream a(d, 1, 3, 32, 7);
  std::vector<int32_t> in, tg, in2, tg2;
  for (int k = 0; k < 37; ++k) a.next(5, in, tg);
  const dd::data_cursor c = a.cursor();
  EXPECT_EQ(dd::data_cursor::from_json(c.to_json()), c);
  EXPECT_EQ(dd::data_cursor::from_bytes(c.to_bytes()), c);
  EXPECT_EQ(c.to_bytes().size(), 40u);
  dd::batch_stream b(d, 1, 3, 32, 7);
  b.restore(dd::data_cursor::from_json(nlohmann::json::parse(c.to_json().dump())));
  for (int k = 0; k < 20; ++k) {
    a.next(5, in, tg);
    b.next(5, in2, tg2);
    ASSERT_EQ(in, in2) << "batch " << k;
    ASSERT_EQ(tg, tg2);
  }
  // A cursor of another learner or seed is refused with the field named.
  dd::data_cursor other = c;
  other.learner = 2;
  try {
    b.restore(other);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("'learner'"));
  }
  auto bytes = c.to_bytes();
  bytes[0] = 'X';
  EXPECT_THROW(dd::data_cursor::from_bytes(bytes), std::invalid_argument);
  nlohmann::json j = c.to_json();
  j.erase("epoch");
  try {
    dd::data_cursor::from_json(j);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("'epoch'"));
  }
}

TEST(Data, SeedsAndLearnersGiveDifferentOrders) {
  const auto d = dd::text_dataset::from_text(sample_text(30000));
  dd::batch_stream a(d, 0, 1, 32, 1), b(d, 0, 1, 32, 2);
  std::vector<int32_t> ia, ib, t;
  a.next(4, ia, t);
  b.next(4, ib, t);
  EXPECT_NE(ia, ib);
}

TEST(Data, TooSmallShardIsRefused) {
  const auto d = dd::text_dataset::from_text(sample_text(100));
  try {
    dd::batch_stream s(d, 0, 4, 32, 1);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("learner 0 of 4 has a shard of 22 tokens"));
  }
}

}  // namespace
