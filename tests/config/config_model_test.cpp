// tests/config/config_model_test.cpp — the `model` section's kinds: moe_gpt's keys, defaults and
// round trip; its keys refused for another kind; the CUDA backend refused for moe_gpt.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>

#include "runtime/config/experiment.hpp"
#include "runtime/config/loader.hpp"
#include "tests/config/config_test_util.hpp"

namespace dd::config {
namespace {

using ::testing::HasSubstr;

/// Expects the experiment with `body` refused, its errors naming every one of `parts`.
void expect_refused(const std::string& body, std::initializer_list<const char*> parts) {
  const auto r = test::load_one(body);
  ASSERT_FALSE(r.ok()) << body;
  for (const char* part : parts) EXPECT_THAT(r.error_text(), HasSubstr(part));
}

TEST(ConfigModel, MoeGptKeysDefaultsAndRoundTrip) {
  const auto d = test::load_one("model = { kind = \"moe_gpt\" }");
  ASSERT_TRUE(d.ok()) << d.error_text();
  const auto& m = d.experiments[0].model;
  EXPECT_EQ(m.kind, model_kind::moe_gpt);
  EXPECT_EQ(m.experts, 4);
  EXPECT_EQ(m.top_k, 1);
  EXPECT_DOUBLE_EQ(m.capacity_factor, 1.25);
  EXPECT_DOUBLE_EQ(m.aux_loss, 0.01);
  const auto r = test::load_one(
      "model = { kind = \"moe_gpt\", experts = 6, top_k = 2, capacity_factor = 2.0, "
      "aux_loss = 0.05 }");
  ASSERT_TRUE(r.ok()) << r.error_text();
  const auto j = to_json(r.experiments[0]);
  EXPECT_EQ(j["model"]["kind"], "moe_gpt");
  EXPECT_EQ(j["model"]["experts"], 6);
  EXPECT_EQ(j["model"]["top_k"], 2);
  EXPECT_EQ(j["model"]["capacity_factor"], 2.0);
  EXPECT_EQ(j["model"]["aux_loss"], 0.05);
  const auto back = load_json(j);
  ASSERT_TRUE(back.ok()) << back.error_text();
  EXPECT_EQ(to_json(back.experiments[0]), j);
  // A dense GPT's resolved JSON carries no MoE keys.
  const auto g = test::load_one("model = { kind = \"gpt\" }");
  ASSERT_TRUE(g.ok());
  EXPECT_FALSE(to_json(g.experiments[0])["model"].contains("experts"));
}

// eval.windows and eval.periodic_windows count windows, whatever the batch; the old
// eval.batches still loads, with a warning naming the new keys, and survives the round trip.
TEST(ConfigEval, WindowsDefaultToTheWholeSplitAndBatchesWarns) {
  auto r = test::load_one("", "e.lua");
  ASSERT_TRUE(r.ok()) << r.error_text();
  EXPECT_EQ(r.experiments[0].eval.windows, 0);
  EXPECT_EQ(r.experiments[0].eval.periodic_windows, 128);
  EXPECT_EQ(r.experiments[0].eval.batches, 0);
  EXPECT_TRUE(r.warnings.empty()) << r.warning_text();

  r = test::load_one("eval = { windows = 300, periodic_windows = 40 }", "e.lua");
  ASSERT_TRUE(r.ok()) << r.error_text();
  EXPECT_EQ(r.experiments[0].eval.windows, 300);
  EXPECT_EQ(r.experiments[0].eval.periodic_windows, 40);
  const auto j = to_json(r.experiments[0]);
  EXPECT_EQ(j["eval"]["windows"], 300);
  EXPECT_FALSE(j["eval"].contains("batches"));

  r = test::load_one("eval = { batches = 3 }", "old.lua");
  ASSERT_TRUE(r.ok()) << r.error_text();
  EXPECT_EQ(r.experiments[0].eval.batches, 3);
  ASSERT_EQ(r.warnings.size(), 1u) << r.warning_text();
  EXPECT_EQ(r.warnings[0].key_path, "eval.batches");
  EXPECT_THAT(r.warnings[0].message, HasSubstr("use eval.windows"));
  EXPECT_EQ(to_json(r.experiments[0])["eval"]["batches"], 3);

  r = test::load_one("eval = { windows = -1 }", "bad.lua");
  EXPECT_FALSE(r.ok());
  EXPECT_THAT(r.error_text(), HasSubstr("eval.windows"));
}

// A warmup as long as the schedule never reaches the peak learning rate: loaded, with a
// warning that names the key and both numbers; a warmup below the schedule's length says nothing.
TEST(ConfigInner, WarmupAsLongAsTheScheduleWarns) {
  auto r = test::load_one("budget = { steps = 40 }");  // the default warmup is 100
  ASSERT_TRUE(r.ok()) << r.error_text();
  ASSERT_EQ(r.warnings.size(), 1u) << r.warning_text();
  EXPECT_EQ(r.warnings[0].key_path, "inner.warmup");
  EXPECT_THAT(r.warnings[0].message, HasSubstr("100 warmup steps are at least the 40 inner steps"));
  EXPECT_THAT(r.warnings[0].message, HasSubstr("below 40"));
  // A token budget: the schedule's length is tokens / (M x batch x context) = 8 steps.
  r = test::load_one(
      "learners = { count = 2, batch = 4 }, model = { context = 32 }, "
      "budget = { tokens = 2048 }, inner = { warmup = 8 }");
  ASSERT_TRUE(r.ok()) << r.error_text();
  ASSERT_EQ(r.warnings.size(), 1u) << r.warning_text();
  EXPECT_THAT(r.warnings[0].message, HasSubstr("the 8 inner steps"));
  r = test::load_one("budget = { steps = 40 }, inner = { warmup = 39 }");
  ASSERT_TRUE(r.ok()) << r.error_text();
  EXPECT_TRUE(r.warnings.empty()) << r.warning_text();
  // A constant schedule compares with the step budget.
  r = test::load_one("budget = { steps = 40 }, inner = { schedule = \"constant\", warmup = 40 }");
  ASSERT_TRUE(r.ok()) << r.error_text();
  EXPECT_EQ(r.warnings.size(), 1u) << r.warning_text();
}

TEST(ConfigModel, MoeKeysRefusedForGpt) {
  expect_refused("model = { kind = \"gpt\", experts = 4 }",
                 {"model.experts", "applies to model.kind = \"moe_gpt\" only"});
}

TEST(ConfigModel, OutOfRangeMoeValuesNamed) {
  expect_refused("model = { kind = \"moe_gpt\", experts = 2, top_k = 3 }", {"model.top_k"});
  expect_refused("model = { kind = \"moe_gpt\", experts = 1 }", {"model.experts"});
  expect_refused("model = { kind = \"moe_gpt\", capacity_factor = 0 }", {"model.capacity_factor"});
}

TEST(ConfigModel, CudaRefusedForMoeGpt) {
  expect_refused("model = { kind = \"moe_gpt\" }, learners = { backend = \"cuda\" }",
                 {"learners.backend", "no kernels for model.kind = \"moe_gpt\""});
  // The dense GPT on CUDA is still accepted at config time.
  const auto g = test::load_one("learners = { backend = \"cuda\" }");
  EXPECT_TRUE(g.ok()) << g.error_text();
}

}  // namespace
}  // namespace dd::config

namespace dd::config {
namespace {

load_result load_tokens(const std::string& data, const std::string& rest = "") {
  return load_string("experiment { data = { kind = \"tokens\", " + data + " }" +
                         (rest.empty() ? "" : ", " + rest) + " }\n",
                     "t.lua", test::repo_options());
}

// data.kind = "tokens": a glob's matches sorted, the list round-trips through JSON, and the
// errors name the key: an empty list, a pattern matching nothing, a bad format, text keys.
TEST(ConfigTokens, FilesGlobsFormatAndErrors) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(::testing::TempDir()) / "config_tokens";
  fs::create_directories(dir);
  for (const char* n : {"b_001.bin", "b_000.bin", "v.bin"}) std::ofstream(dir / n) << "x";
  const std::string glob = (dir / "b_*.bin").string();
  const auto ok = load_tokens("files = \"" + glob + "\", validation_files = \"" +
                              (dir / "v.bin").string() + "\", format = \"uint16\"");
  ASSERT_TRUE(ok.ok()) << ok.error_text();
  const auto& d = ok.experiments[0].data;
  EXPECT_EQ(d.kind, data_kind::tokens);
  EXPECT_EQ(d.files,
            (std::vector<std::string>{(dir / "b_000.bin").string(), (dir / "b_001.bin").string()}));
  EXPECT_EQ(d.format, "uint16");
  const auto back = load_json(to_json(ok.experiments[0]), test::repo_options());
  ASSERT_TRUE(back.ok()) << back.error_text();
  EXPECT_EQ(to_json(back.experiments[0]), to_json(ok.experiments[0]));

  EXPECT_THAT(load_tokens("files = {}").error_text(),
              HasSubstr("data.files: the list of token files is empty"));
  EXPECT_THAT(load_tokens("files = \"" + (dir / "none_*.bin").string() + "\"").error_text(),
              HasSubstr("matches no file"));
  EXPECT_THAT(load_tokens("files = \"" + glob + "\", format = \"u8\"").error_text(),
              HasSubstr("data.format: unknown value 'u8'"));
  EXPECT_THAT(load_tokens("files = \"" + glob + "\", file = \"x\"").error_text(),
              HasSubstr("data.file: is not read by data.kind = \"tokens\""));
  EXPECT_THAT(load_tokens("").error_text(), HasSubstr("data.files: required key is missing"));
  EXPECT_THAT(load_tokens("files = \"" + glob + "\"", "model = { init_from = \"/nonexistent/hf\" }")
                  .error_text(),
              HasSubstr("model.init_from: directory '/nonexistent/hf' not found"));
}

}  // namespace
}  // namespace dd::config
