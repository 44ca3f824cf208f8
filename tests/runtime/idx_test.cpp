// tests/runtime/idx_test.cpp — the IDX reader (plain and gzip; refusals), the image dataset's
// split, the per-learner shards and the resumable cursor; and the real MNIST t10k files.
#include <gtest/gtest.h>

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "runtime/idx.hpp"
#include "tests/support/error_of.hpp"

namespace {

namespace fs = std::filesystem;

/// IDX bytes of unsigned-byte type with the given sizes; values v[i] = (i·7 + salt) mod 251.
std::vector<uint8_t> idx_bytes(const std::vector<uint32_t>& dims, int salt = 0) {
  std::vector<uint8_t> b = {0, 0, 0x08, static_cast<uint8_t>(dims.size())};
  size_t n = 1;
  for (auto d : dims) {
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(d >> s));
    n *= d;
  }
  for (size_t i = 0; i < n; ++i) b.push_back(static_cast<uint8_t>((i * 7 + salt) % 251));
  return b;
}

class IdxFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("dd_idx_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
            "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string plain(const std::string& name, const std::vector<uint8_t>& b) {
    const auto p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary)
        .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    return p;
  }
  std::string gz(const std::string& name, const std::vector<uint8_t>& b) {
    const auto p = (dir_ / name).string();
    gzFile f = gzopen(p.c_str(), "wb");
    EXPECT_NE(f, nullptr);
    EXPECT_EQ(gzwrite(f, b.data(), static_cast<unsigned>(b.size())), static_cast<int>(b.size()));
    gzclose(f);
    return p;
  }
  fs::path dir_;
};

using dd::test::error_of;

TEST_F(IdxFiles, ReadsPlainAndGzipIdentically) {
  const auto b = idx_bytes({5, 3, 2});
  const auto a1 = dd::read_idx(plain("x.idx", b));
  const auto a2 = dd::read_idx(gz("x.idx.gz", b));
  EXPECT_EQ(a1.dims, (std::vector<uint32_t>{5, 3, 2}));
  EXPECT_EQ(a2.dims, a1.dims);
  ASSERT_EQ(a1.data.size(), 30u);
  EXPECT_EQ(a1.data[0], 0);
  EXPECT_EQ(a1.data[29], (29 * 7) % 251);
  EXPECT_EQ(a2.data, a1.data);
}

TEST_F(IdxFiles, RefusesBadFilesNamingFileAndProblem) {
  auto b = idx_bytes({4, 2, 2});
  // Truncated data (plain and gzip), truncated header.
  auto cut = b;
  cut.resize(cut.size() - 3);
  const auto p1 = plain("cut.idx", cut);
  auto e = error_of([&] { dd::read_idx(p1); });
  EXPECT_NE(e.find(p1), std::string::npos) << e;
  EXPECT_NE(e.find("truncated: the header announces 16 values, the file holds 13"),
            std::string::npos)
      << e;
  e = error_of([&] { dd::read_idx(gz("cut.idx.gz", cut)); });
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  // A gzip stream cut in the middle (the compressed bytes, not the payload).
  {
    const auto full = gz("full.gz", idx_bytes({50, 10, 10}));
    std::ifstream in(full, std::ios::binary);
    std::vector<char> z((std::istreambuf_iterator<char>(in)), {});
    z.resize(z.size() / 2);
    const auto p = (dir_ / "halfz.gz").string();
    std::ofstream(p, std::ios::binary).write(z.data(), static_cast<std::streamsize>(z.size()));
    e = error_of([&] { dd::read_idx(p); });
    EXPECT_NE(e.find(p), std::string::npos) << e;
  }
  e = error_of([&] { dd::parse_idx({0, 0, 8, 3, 0, 0}, "h"); });
  EXPECT_NE(e.find("truncated header"), std::string::npos) << e;
  // Trailing bytes.
  auto more = b;
  more.push_back(1);
  e = error_of([&] { dd::parse_idx(more, "m"); });
  EXPECT_NE(e.find("1 trailing bytes"), std::string::npos) << e;
  // Wrong magic, wrong type, zero dims, zero size.
  auto magic = b;
  magic[0] = 0x1f;
  e = error_of([&] { dd::read_idx(plain("magic.idx", magic)); });
  EXPECT_NE(e.find("magic.idx': wrong magic 1f 00 08 03"), std::string::npos) << e;
  auto type = b;
  type[2] = 0x0d;  // float
  e = error_of([&] { dd::parse_idx(type, "t"); });
  EXPECT_NE(e.find("data type 0x0d"), std::string::npos) << e;
  e = error_of([&] { dd::parse_idx({0, 0, 8, 0}, "z"); });
  EXPECT_NE(e.find("zero dimensions"), std::string::npos) << e;
  e = error_of([&] { dd::parse_idx(idx_bytes({3, 0}), "zs"); });
  EXPECT_NE(e.find("dimension 1 has size 0"), std::string::npos) << e;
  // Missing file.
  e = error_of([&] { dd::read_idx((dir_ / "absent").string()); });
  EXPECT_NE(e.find("cannot open"), std::string::npos) << e;
}

TEST_F(IdxFiles, DatasetRefusesMismatchedPairs) {
  auto labels = idx_bytes({10});
  // Labels 0..9: overwrite the values.
  for (size_t i = 0; i < 10; ++i) labels[8 + i] = static_cast<uint8_t>(i);
  const auto img = plain("img", idx_bytes({10, 4, 4}));
  const auto lab = plain("lab", labels);
  const auto d = dd::image_dataset::from_files(img, lab, 0.8);
  EXPECT_EQ(d.train_size(), 8u);
  EXPECT_EQ(d.validation_size(), 2u);
  EXPECT_EQ(d.rows(), 4);
  EXPECT_EQ(d.label(9), 9);

  auto e = error_of([&] { dd::image_dataset::from_files(img, plain("l9", idx_bytes({9}))); });
  EXPECT_NE(e.find("10 images but 9 labels"), std::string::npos) << e;
  EXPECT_NE(e.find("img"), std::string::npos) << e;
  e = error_of([&] { dd::image_dataset::from_files(plain("i2", idx_bytes({10, 16})), lab); });
  EXPECT_NE(e.find("images must have 3 dimensions (n, rows, cols), it has 2"), std::string::npos)
      << e;
  e = error_of([&] { dd::image_dataset::from_files(img, plain("l2", idx_bytes({10, 1}))); });
  EXPECT_NE(e.find("labels must have 1 dimension (n), it has 2"), std::string::npos) << e;
  auto bad = labels;
  bad[8 + 3] = 10;
  e = error_of([&] { dd::image_dataset::from_files(img, plain("l10", bad)); });
  EXPECT_NE(e.find("label 10 of sample 3 is not below 10"), std::string::npos) << e;
  e = error_of([&] { dd::image_dataset::from_files(img, lab, 0.05); });
  EXPECT_NE(e.find("empty split"), std::string::npos) << e;
}

dd::image_dataset small_dataset(size_t n, double f = 0.75) {
  dd::idx_array img{{static_cast<uint32_t>(n), 2, 3}, {}}, lab{{static_cast<uint32_t>(n)}, {}};
  for (size_t i = 0; i < n; ++i) {
    for (int k = 0; k < 6; ++k) img.data.push_back(static_cast<uint8_t>(i % 256));
    lab.data.push_back(static_cast<uint8_t>(i % 10));
  }
  return dd::image_dataset::from_arrays(img, lab, f, 10, "img", "lab");
}

TEST(ImageStream, ShardsAreDisjointAndEpochsCoverThem) {
  const auto d = small_dataset(100);  // 75 train
  for (auto layout : {dd::shard_layout::contiguous, dd::shard_layout::interleaved}) {
    std::set<int> all;
    size_t total = 0;
    for (int i = 0; i < 3; ++i) {
      dd::image_stream s(d, i, 3, 7, layout);
      EXPECT_EQ(s.shard_size(), 25u);
      std::vector<int32_t> px, lab;
      s.next(25, px, lab);  // one epoch exactly
      std::set<int> mine;
      for (int b = 0; b < 25; ++b) {
        const int sample = px[static_cast<size_t>(b) * 6];  // pixel value = sample index
        EXPECT_EQ(lab[static_cast<size_t>(b)], sample % 10);
        EXPECT_LT(sample, 75);  // never a validation sample
        mine.insert(sample);
      }
      EXPECT_EQ(mine.size(), 25u);  // a permutation of the shard
      if (layout == dd::shard_layout::contiguous) {
        EXPECT_EQ(*mine.begin(), 25 * i);
      } else {
        for (int v : mine) EXPECT_EQ(v % 3, i);
      }
      total += mine.size();
      all.insert(mine.begin(), mine.end());
    }
    EXPECT_EQ(total, 75u);
    EXPECT_EQ(all.size(), 75u);
  }
}

TEST(ImageStream, CursorResumesExactly) {
  const auto d = small_dataset(100);
  const uint64_t seed = 12345;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  dd::image_stream a(d, 1, 2, seed);
  std::vector<int32_t> px, lab, px2, lab2;
  a.next(30, px, lab);  // crosses into epoch 1 (learner 1 of 2: samples [37, 75), 38)
  a.next(20, px, lab);
  const auto c = a.cursor();
  EXPECT_EQ(c.epoch, 1);
  EXPECT_EQ(c.position, 12);
  EXPECT_EQ(c.seq_len, 6);
  // Through both serialized forms.
  const auto c2 = dd::data_cursor::from_bytes(dd::data_cursor::from_json(c.to_json()).to_bytes());
  EXPECT_EQ(c2, c);
  a.next(40, px, lab);
  dd::image_stream b(d, 1, 2, seed);
  b.restore(c2);
  b.next(40, px2, lab2);
  EXPECT_EQ(px2, px);
  EXPECT_EQ(lab2, lab);
  // Another seed gives another order.
  dd::image_stream other(d, 1, 2, seed + 1);
  other.restore([&] {
    auto x = c;
    x.seed = seed + 1;
    return x;
  }());
  other.next(40, px2, lab2);
  EXPECT_NE(px2, px);

  auto bad = c;
  bad.seq_len = 784;
  auto e = error_of([&] { b.restore(bad); });
  EXPECT_NE(e.find("field 'seq_len (pixels per image)' is 784 but this stream has 6"),
            std::string::npos)
      << e;
  bad = c;
  bad.learner = 0;
  e = error_of([&] { b.restore(bad); });
  EXPECT_NE(e.find("field 'learner' is 0"), std::string::npos) << e;
  bad = c;
  bad.position = 39;
  e = error_of([&] { b.restore(bad); });
  EXPECT_NE(e.find("'position' is 39 but the shard has 38"), std::string::npos) << e;
}

TEST(ImageStream, ValidationBatchIsTheTail) {
  const auto d = small_dataset(100);
  std::vector<int32_t> px, lab;
  d.validation_batch(0, 25, px, lab);
  ASSERT_EQ(lab.size(), 25u);
  EXPECT_EQ(px[0], 75);
  EXPECT_EQ(lab[24], 99 % 10);
  EXPECT_THROW(d.validation_batch(20, 6, px, lab), std::out_of_range);
}

TEST(MnistT10k, RealFilesLoadAndSplit) {
  const std::string dir = std::string(DD_DATA_DIR) + "/mnist-t10k/";
  const auto d = dd::image_dataset::from_files(dir + "t10k-images-idx3-ubyte.gz",
                                               dir + "t10k-labels-idx1-ubyte.gz", 0.8);
  EXPECT_EQ(d.rows(), 28);
  EXPECT_EQ(d.cols(), 28);
  EXPECT_EQ(d.train_size(), 8000u);
  EXPECT_EQ(d.validation_size(), 2000u);
  // The first t10k labels are 7, 2, 1, 0, 4 (the well-known first test digits).
  EXPECT_EQ(d.label(0), 7);
  EXPECT_EQ(d.label(1), 2);
  EXPECT_EQ(d.label(2), 1);
  EXPECT_EQ(d.label(3), 0);
  EXPECT_EQ(d.label(4), 4);
  // Every class occurs in both splits; pixels span 0..255.
  std::vector<int> train_count(10, 0), val_count(10, 0);
  for (size_t i = 0; i < 10000; ++i) (i < 8000 ? train_count : val_count)[d.label(i)]++;
  for (int c = 0; c < 10; ++c) {
    EXPECT_GT(train_count[c], 600) << c;
    EXPECT_GT(val_count[c], 150) << c;
  }
  const uint8_t* img = d.image(0);
  EXPECT_EQ(*std::max_element(img, img + 784), 255);
  EXPECT_EQ(*std::min_element(img, img + 784), 0);
}

}  // namespace
