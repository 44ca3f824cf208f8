// Owner checkpoint files: round trip, corruption refused, atomic write.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include <unistd.h>

#include "messages/codec.hpp"

namespace dd {
namespace {

owner_checkpoint sample() {
  owner_checkpoint c;
  c.fragment_id = 3;
  c.version = 120;
  c.value = {0.5f, -1.25f, 3.0f, 1e-8f, -0.0f};
  c.momentum = {0.1f, 0.2f, -0.3f, 0.0f, 7.0f};
  c.xi_step_s = 0.25;
  c.xi_quorum_s = 0.01;
  c.xi_sync_s = 0.002;
  c.anchors.push_back({119, {1, 2, 3, 4, 5}});
  c.anchors.push_back({120, {0.5f, -1.25f, 3.0f, 1e-8f, -0.0f}});
  c.merged = {{0, 2, 480, 118}, {3, 0, 504, 120}};
  return c;
}

void expect_equal(const owner_checkpoint& a, const owner_checkpoint& b) {
  EXPECT_EQ(a.fragment_id, b.fragment_id);
  EXPECT_EQ(a.version, b.version);
  EXPECT_EQ(a.value, b.value);
  EXPECT_EQ(a.momentum, b.momentum);
  EXPECT_EQ(a.xi_step_s, b.xi_step_s);
  EXPECT_EQ(a.xi_quorum_s, b.xi_quorum_s);
  EXPECT_EQ(a.xi_sync_s, b.xi_sync_s);
  ASSERT_EQ(a.anchors.size(), b.anchors.size());
  for (size_t i = 0; i < a.anchors.size(); ++i) {
    EXPECT_EQ(a.anchors[i].version, b.anchors[i].version);
    EXPECT_EQ(a.anchors[i].value, b.anchors[i].value);
  }
  EXPECT_EQ(a.merged, b.merged);
}

TEST(Checkpoint, RoundTrip) {
  auto bytes = encode_checkpoint(sample());
  EXPECT_EQ(std::string(bytes.begin(), bytes.begin() + 8), "DDOWNCK1");
  auto d = decode_checkpoint(bytes.data(), bytes.size());
  ASSERT_TRUE(d.ok()) << d.error().message;
  expect_equal(*d, sample());
}

TEST(Checkpoint, CorruptionIsRefused) {
  auto bytes = encode_checkpoint(sample());
  auto body_flip = bytes;
  body_flip[bytes.size() - 3] ^= 0x10;
  auto d = decode_checkpoint(body_flip.data(), body_flip.size());
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.code(), errc::corrupt);
  EXPECT_NE(d.error().message.find("CRC32"), std::string::npos);

  auto version = bytes;
  version[8] = 2;
  d = decode_checkpoint(version.data(), version.size());
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.error().message.find("format version 2"), std::string::npos);

  auto truncated = bytes;
  truncated.resize(bytes.size() - 8);
  d = decode_checkpoint(truncated.data(), truncated.size());
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.code(), errc::corrupt);
}

TEST(Checkpoint, AtomicSaveAndLoad) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("dd_ckpt_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "owner_3.ckpt").string();
  ASSERT_TRUE(save_checkpoint(path, sample()).ok());
  owner_checkpoint next = sample();
  next.version = 121;
  ASSERT_TRUE(save_checkpoint(path, next).ok());  // overwrites by rename
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  auto d = load_checkpoint(path);
  ASSERT_TRUE(d.ok()) << d.error().message;
  expect_equal(*d, next);

  // A damaged file is refused, naming the path.
  {
    std::FILE* f = std::fopen(path.c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    std::fseek(f, 40, SEEK_SET);
    int byte = std::fgetc(f);
    std::fseek(f, 40, SEEK_SET);
    std::fputc(byte ^ 0xFF, f);
    std::fclose(f);
  }
  d = load_checkpoint(path);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.code(), errc::corrupt);
  EXPECT_NE(d.error().message.find(path), std::string::npos);

  auto missing = load_checkpoint((dir / "nope.ckpt").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.code(), errc::io);
  auto unwritable = save_checkpoint((dir / "no_dir" / "x.ckpt").string(), sample());
  EXPECT_EQ(unwritable.code(), errc::io);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace dd
