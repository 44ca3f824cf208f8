// tests/runtime/checkpoint_test.cpp — safetensors round trip and refusal of damaged or
// mismatched checkpoints, with the error message naming the file and the field.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "kernels/backend.hpp"
#include "runtime/adamw.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/gpt.hpp"
#include "tests/support/gpt_fixture.hpp"

namespace {

using ::testing::HasSubstr;

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_all(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// Rebuilds a file from a (possibly edited) header JSON and the original data bytes.
std::string with_header(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[i] = static_cast<char>((static_cast<uint64_t>(header.size()) >> (8 * i)) & 0xff);
  return out + header + data;
}

class Checkpoint : public dd::test::gpt_fixture {
 protected:
  Checkpoint() : gpt_fixture("cpu", 21) {}
  void SetUp() override {
    gpt_fixture::SetUp();
    path_ = ::testing::TempDir() + per_test_name("dd_ckpt_test_") + ".safetensors";
    dd::save_checkpoint(path_, *model_, nullptr, {{"step", "7"}});
    bytes_ = read_all(path_);
    uint64_t hlen = 0;
    for (int i = 0; i < 8; ++i)
      hlen |= static_cast<uint64_t>(static_cast<uint8_t>(bytes_[i])) << (8 * i);
    header_ = nlohmann::json::parse(bytes_.substr(8, hlen));
    data_ = bytes_.substr(8 + hlen);
  }
  void TearDown() override { std::remove(path_.c_str()); }

  // Expects loading path_ to fail with a message containing every fragment.
  void expect_refused(const std::vector<std::string>& fragments) {
    dd::gpt fresh(*be_, cfg_);
    fresh.init(1);
    const auto before = fresh.get_parameters();
    try {
      dd::load_checkpoint(path_, fresh, nullptr);
      ADD_FAILURE() << "damaged checkpoint was accepted";
    } catch (const std::runtime_error& e) {
      EXPECT_THAT(e.what(), HasSubstr("checkpoint '" + path_ + "'"));
      for (const auto& f : fragments) EXPECT_THAT(e.what(), HasSubstr(f));
    }
    EXPECT_EQ(fresh.get_parameters(), before);  // a refused load leaves the model untouched
  }

  std::string path_, bytes_, data_;
  nlohmann::json header_;
};

TEST_F(Checkpoint, RoundTripsParametersMomentsAndMetadata) {
  dd::adamw opt(*be_, model_->tensors(), model_->num_params());
  model_->zero_grad();
  std::vector<int32_t> tok(2 * 16, 3);
  model_->forward(tok, tok, 2, 16);
  model_->backward();
  opt.step(model_->params(), model_->grads(), 1e-3f);
  dd::save_checkpoint(path_, *model_, &opt, {{"step", "1"}});
  const auto h = dd::read_safetensors(path_);
  EXPECT_EQ(h.metadata.at("step"), "1");
  EXPECT_EQ(h.metadata.at("format"), "dd-gpt-1");
  ASSERT_NE(h.find("adamw.v.h.1.mlp.fc.weight"), nullptr);
  EXPECT_EQ(h.find("wpe")->shape, (std::vector<int64_t>{16, 16}));

  dd::gpt other(*be_, cfg_);
  dd::adamw opt2(*be_, other.tensors(), other.num_params());
  const auto meta = dd::load_checkpoint(path_, other, &opt2);
  EXPECT_EQ(meta.at("step"), "1");
  EXPECT_EQ(other.get_parameters(), model_->get_parameters());
  EXPECT_EQ(opt2.steps(), 1);
  std::vector<float> m1(opt.size()), m2(opt.size());
  be_->download(m1.data(), opt.v(), m1.size());
  be_->download(m2.data(), opt2.v(), m2.size());
  EXPECT_EQ(m1, m2);
  // No temporary file is left behind by the atomic write.
  std::ifstream tmp(path_ + ".tmp");
  EXPECT_FALSE(tmp.good());
}

TEST_F(Checkpoint, TruncatedFileIsRefused) {
  write_all(path_, bytes_.substr(0, bytes_.size() - 100));
  expect_refused({"out of range"});
  write_all(path_, bytes_.substr(0, 40));
  expect_refused({"exceeds the file size"});
  write_all(path_, bytes_.substr(0, 5));
  expect_refused({"shorter than the 8-byte header length"});
}

TEST_F(Checkpoint, AFileThatIsNotSafetensorsIsNamedSo) {
  write_all(path_,
            "{\n  \"final_val_loss\": 2.4588,\n  \"tokens\": 1234944\n}\n");  // a summary.json
  expect_refused({"not a safetensors file"});
}

TEST_F(Checkpoint, BadJsonIsRefused) {
  std::string h = header_.dump();
  h[h.find(':')] = '{';  // a structural character, wherever the keys fall
  write_all(path_, with_header(h, data_));
  expect_refused({"header is not valid JSON"});
}

TEST_F(Checkpoint, OffsetsOutOfRangeAreRefused) {
  auto h = header_;
  h["wpe"]["data_offsets"][1] = data_.size() + 4;
  write_all(path_, with_header(h.dump(), data_));
  expect_refused({"tensor 'wpe'", "out of range"});
}

// A shape whose byte size wraps to 0 (2^62 floats) with empty offsets: the old bound let it
// through and the reader asked for 2^62 floats (std::length_error instead of a refusal).
// Regression input of tests/fuzz/safetensors_fuzz (corpus/.../regress_shape_wraps).
TEST_F(Checkpoint, AShapeWhoseByteSizeOverflowsIsRefused) {
  for (const auto& shape : {nlohmann::json::array({uint64_t{1} << 62}),
                            nlohmann::json::array({uint64_t{1} << 31, uint64_t{1} << 31}),
                            nlohmann::json::array({uint64_t{1} << 62, 0, 4})}) {
    auto h = header_;
    h["wpe"]["shape"] = shape;
    h["wpe"]["data_offsets"] = {0, 0};
    write_all(path_, with_header(h.dump(), data_));
    if (shape.size() == 3) {
      // A zero dimension makes the tensor empty: no overflow, the offsets are what is wrong.
      expect_refused({"tensor '"});
    } else {
      expect_refused({"tensor 'wpe': shape", "is too large for the"});
    }
  }
}

TEST_F(Checkpoint, OverlappingOffsetsAreRefused) {
  auto h = header_;
  // Point ln_f.bias at the bytes of ln_f.weight (same size): overlap, and a hole elsewhere.
  h["ln_f.bias"]["data_offsets"] = h["ln_f.weight"]["data_offsets"];
  write_all(path_, with_header(h.dump(), data_));
  expect_refused({"overlap"});
}

TEST_F(Checkpoint, WrongDtypeIsRefused) {
  auto h = header_;
  h["h.0.ln_1.bias"]["dtype"] = "F16";
  write_all(path_, with_header(h.dump(), data_));
  expect_refused({"tensor 'h.0.ln_1.bias'", "dtype 'F16'"});
}

TEST_F(Checkpoint, WrongModelShapeIsRefused) {
  dd::gpt wide(*be_, dd::gpt_config{256, 16, 2, 2, 32});
  wide.init(3);
  dd::save_checkpoint(path_, wide, nullptr, {});
  expect_refused({"tensor 'wte' has shape [256, 32] but the model expects [256, 16]"});
}

TEST_F(Checkpoint, MissingTensorIsRefused) {
  dd::gpt shallow(*be_, dd::gpt_config{256, 16, 1, 2, 16});
  shallow.init(3);
  dd::save_checkpoint(path_, shallow, nullptr, {});
  expect_refused({"tensor 'h.1.ln_1.weight' is missing"});
}

TEST_F(Checkpoint, MissingMomentsAreRefusedWhenOptimizerRequested) {
  dd::gpt fresh(*be_, cfg_);
  dd::adamw opt(*be_, fresh.tensors(), fresh.num_params());
  try {
    dd::load_checkpoint(path_, fresh, &opt);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("tensor 'adamw.m.wte' is missing"));
  }
}

TEST_F(Checkpoint, EveryFileWeWriteCarriesTheCrc32cOfItsDataSection) {
  ASSERT_TRUE(header_["__metadata__"].contains("dd_crc32c"));
  const std::string crc = header_["__metadata__"]["dd_crc32c"];
  EXPECT_EQ(crc.size(), 8u);
  const auto f = dd::read_safetensors(path_);
  EXPECT_EQ(f.metadata.at("dd_crc32c"), crc);
}

TEST_F(Checkpoint, ADamagedDataSectionIsRefusedByItsChecksum) {
  // One bit of one float flips: every structural check still passes, only the checksum sees it.
  std::string damaged = bytes_;
  damaged[damaged.size() - 7] ^= 0x01;
  write_all(path_, damaged);
  expect_refused({"CRC32C", "dd_crc32c", "damaged"});
}

TEST_F(Checkpoint, AFileWithoutAChecksumLoadsUnlessOneIsRequired) {
  auto h = header_;
  h["__metadata__"].erase("dd_crc32c");  // as another tool writes it
  std::string text = h.dump();
  while (text.size() % 8 != 0) text.push_back(' ');
  write_all(path_, with_header(text, data_));
  dd::gpt fresh(*be_, cfg_);
  const auto meta = dd::load_checkpoint(path_, fresh, nullptr);
  EXPECT_EQ(meta.count("dd_crc32c"), 0u);  // the caller can tell, and warns
  EXPECT_EQ(fresh.get_parameters(), model_->get_parameters());
  dd::st_read_options strict;
  strict.require_checksum = true;
  try {
    dd::load_checkpoint(path_, fresh, nullptr, strict);
    ADD_FAILURE() << "a file without a checksum was accepted although one is required";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("checkpoint '" + path_ + "'"));
    EXPECT_THAT(e.what(), HasSubstr("no 'dd_crc32c' checksum"));
  }
}

TEST_F(Checkpoint, MissingFileIsRefused) {
  std::remove(path_.c_str());
  expect_refused({"cannot open"});
}

}  // namespace
