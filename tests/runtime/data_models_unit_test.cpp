// tests/runtime/data_models_unit_test.cpp — token files (llm.c shards, plain arrays) and their
// errors, the token-data split, bits per byte, and the transformers GPT-2 mapping both ways.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "kernels/backend.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/data.hpp"
#include "runtime/eval.hpp"
#include "runtime/gpt.hpp"
#include "runtime/hf_export.hpp"
#include "runtime/token_files.hpp"
#include "tests/support/error_of.hpp"

namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string scratch(const std::string& name) {
  const fs::path d = fs::path(::testing::TempDir()) / "data_models_unit";
  fs::create_directories(d);
  return (d / name).string();
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

using dd::test::error_of;

TEST(TokenFiles, LlmcShardRoundTripsWithItsHeader) {
  const std::string p = scratch("a.bin");
  const std::vector<int32_t> t = {0, 1, 255, 65535, 7};
  dd::write_token_file(p, t, dd::token_format::llmc);
  const std::string raw = read_bytes(p);
  ASSERT_EQ(raw.size(), 1024u + 2 * t.size());
  int32_t header[3];
  std::memcpy(header, raw.data(), sizeof header);
  EXPECT_EQ(header[0], 20240520);
  EXPECT_EQ(header[1], 1);
  EXPECT_EQ(header[2], 5);
  EXPECT_EQ(dd::read_token_file(p, dd::token_format::llmc, 65536), t);
}

TEST(TokenFiles, PlainArraysReadLittleEndian) {
  const std::string p16 = scratch("p16.bin"), p32 = scratch("p32.bin");
  write_bytes(p16, std::string("\x01\x00\x00\x01", 4));
  EXPECT_EQ(dd::read_token_file(p16, dd::token_format::uint16, 300),
            (std::vector<int32_t>{1, 256}));
  write_bytes(p32, std::string("\x05\x00\x00\x00\x00\x00\x01\x00", 8));
  EXPECT_EQ(dd::read_token_file(p32, dd::token_format::uint32, 70000),
            (std::vector<int32_t>{5, 65536}));
}

TEST(TokenFiles, ErrorsNameTheFile) {
  const std::string bad = scratch("bad.bin");
  write_bytes(bad, std::string(2048, 'x'));
  EXPECT_THAT(error_of([&] { dd::read_token_file(bad, dd::token_format::llmc, 256); }),
              HasSubstr("token file '" + bad + "': wrong magic"));
  const std::string shard = scratch("s.bin");
  dd::write_token_file(shard, std::vector<int32_t>(100, 3), dd::token_format::llmc);
  const std::string cut = scratch("cut.bin");
  write_bytes(cut, read_bytes(shard).substr(0, 1024 + 150));
  EXPECT_THAT(error_of([&] { dd::read_token_file(cut, dd::token_format::llmc, 256); }),
              HasSubstr("token file '" + cut + "': truncated: the header announces 100 tokens"));
  const std::string odd = scratch("odd.bin");
  write_bytes(odd, "abc");
  EXPECT_THAT(error_of([&] { dd::read_token_file(odd, dd::token_format::uint16, 0); }),
              HasSubstr("token file '" + odd + "': truncated: 3 bytes"));
  const std::string big = scratch("big.bin");
  dd::write_token_file(big, {1, 2, 256}, dd::token_format::uint16);
  EXPECT_THAT(error_of([&] { dd::read_token_file(big, dd::token_format::uint16, 256); }),
              HasSubstr("token file '" + big +
                        "': token id 256 at position 2 is not below model.vocab = 256"));
  const std::string empty = scratch("empty.bin");
  write_bytes(empty, "");
  EXPECT_THAT(error_of([&] { dd::read_token_file(empty, dd::token_format::uint16, 0); }),
              HasSubstr("holds no tokens"));
  EXPECT_THAT(error_of([&] {
                dd::text_dataset::from_token_files({}, {}, dd::token_format::llmc, 256, 0.9);
              }),
              HasSubstr("the list of files is empty"));
}

TEST(TokenFiles, SplitByFilesOrByFraction) {
  const std::string a = scratch("ta.bin"), b = scratch("tb.bin"), v = scratch("tv.bin");
  std::vector<int32_t> ta(60), tb(40), tv(20, 9);
  for (int i = 0; i < 60; ++i) ta[static_cast<size_t>(i)] = i;
  for (int i = 0; i < 40; ++i) tb[static_cast<size_t>(i)] = 100 + i;
  dd::write_token_file(a, ta, dd::token_format::llmc);
  dd::write_token_file(b, tb, dd::token_format::llmc);
  dd::write_token_file(v, tv, dd::token_format::llmc);
  const auto by_files =
      dd::text_dataset::from_token_files({a, b}, {v}, dd::token_format::llmc, 256, 0.9);
  ASSERT_EQ(by_files.train().size(), 100u);
  EXPECT_EQ(by_files.train()[60], 100);  // b follows a
  EXPECT_EQ(by_files.validation(), tv);
  const auto by_fraction =
      dd::text_dataset::from_token_files({a, b}, {}, dd::token_format::llmc, 256, 0.9);
  EXPECT_EQ(by_fraction.train().size(), 90u);
  ASSERT_EQ(by_fraction.validation().size(), 10u);
  EXPECT_EQ(by_fraction.validation().front(), 130);
}

TEST(BitsPerByte, ByteTokensAreOneOverLn2AndPiecesCountTheirBytes) {
  std::vector<int32_t> split(65);
  for (size_t i = 0; i < split.size(); ++i) split[i] = static_cast<int32_t>(i % 3);
  EXPECT_DOUBLE_EQ(dd::bits_per_byte_per_nat(split, 8, 6, {}), 1.0 / std::log(2.0));
  // Every id stands for 4 bytes: a quarter of that.
  EXPECT_DOUBLE_EQ(dd::bits_per_byte_per_nat(split, 8, 6, {4, 4, 4}), 0.25 / std::log(2.0));
  EXPECT_THROW(dd::bits_per_byte_per_nat(split, 8, 6, {1, 1}), std::invalid_argument);
}

TEST(HfExport, ConfigRefusesMoeAndVit) {
  dd::model_config moe;
  moe.kind = "moe_gpt";
  EXPECT_THAT(error_of([&] { dd::hf_gpt2_config(moe); }),
              HasSubstr("\"moe_gpt\" is not supported"));
  dd::model_config vit;
  vit.kind = "vit";
  EXPECT_THAT(error_of([&] { dd::hf_gpt2_config(vit); }), HasSubstr("\"vit\" is not supported"));
  const auto j = dd::hf_gpt2_config(dd::model_config{});
  EXPECT_EQ(j["activation_function"], "gelu_new");
  EXPECT_EQ(j["n_embd"], 128);
}

TEST(HfExport, WeightsRoundTripWithConv1dTransposes) {
  dd::gpt_config g;
  g.vocab = 20;
  g.context = 8;
  g.layers = 2;
  g.heads = 2;
  g.width = 8;
  const dd::model_config cfg(g);
  auto be = dd::kernels::make_backend("reference", {});
  dd::gpt m(*be, g);
  m.init(5);
  const std::string dir = scratch("hf");
  fs::create_directories(dir);
  dd::save_checkpoint(dir + "/ours.safetensors", m, nullptr, {});
  const dd::st_file ours = dd::read_safetensors(dir + "/ours.safetensors");
  dd::st_file hf;
  hf.tensors = dd::to_hf_tensors(cfg, ours);
  hf.metadata["format"] = "pt";
  // qkv (3C, C) becomes c_attn (C, 3C) with element [r][c] at [c][r].
  const dd::st_tensor* qkv = ours.find("h.1.attn.qkv.weight");
  const dd::st_tensor* c_attn = hf.find("transformer.h.1.attn.c_attn.weight");
  ASSERT_NE(c_attn, nullptr);
  EXPECT_EQ(c_attn->shape, (std::vector<int64_t>{8, 24}));
  EXPECT_EQ(c_attn->data[3 * 24 + 17], qkv->data[17 * 8 + 3]);
  dd::write_safetensors(dir + "/model.safetensors", hf);
  std::ofstream(dir + "/config.json") << dd::hf_gpt2_config(cfg).dump();
  const dd::model_config back = dd::read_hf_gpt2_config(dir);
  EXPECT_EQ(back, cfg);
  EXPECT_EQ(dd::read_hf_gpt2_weights(dir, back), m.get_parameters());
  dd::model_config wider = cfg;
  wider.width = 16;
  EXPECT_THAT(error_of([&] { dd::check_hf_fits(dir, back, wider); }),
              HasSubstr("model.width is 16 in the experiment but 8 in its config.json"));
  auto j = dd::hf_gpt2_config(cfg);
  j["activation_function"] = "relu";
  std::ofstream(dir + "/config.json") << j.dump();
  EXPECT_THAT(error_of([&] { dd::read_hf_gpt2_config(dir); }),
              HasSubstr("field 'activation_function' is \"relu\""));
}

}  // namespace
