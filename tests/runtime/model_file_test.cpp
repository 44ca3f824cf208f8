// tests/runtime/model_file_test.cpp — the model file a run leaves behind (runtime/model_file.hpp),
// the evaluation windows it records, gpt::logits and the sampler (runtime/sample.hpp).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "kernels/backend.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/eval.hpp"
#include "runtime/gpt.hpp"
#include "runtime/model.hpp"
#include "runtime/model_file.hpp"
#include "runtime/rng.hpp"
#include "runtime/sample.hpp"
#include "tests/support/error_of.hpp"
#include "tests/support/expect_contains.hpp"
#include "tests/support/gpt_fixture.hpp"

namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class ModelFile : public dd::test::gpt_fixture {
 protected:
  ModelFile() : gpt_fixture("reference", 5) {}
  void SetUp() override {
    gpt_fixture::SetUp();
    dir_ = fs::path(::testing::TempDir()) / per_test_name("dd_model_file_");
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path dir_;
};

TEST_F(ModelFile, RoundTripKeepsEveryParameterAndTheMetadata) {
  const auto path = (dir_ / dd::model_file_name).string();
  dd::write_model_file(path, *model_, {{"val_loss", "2.5"}, {"run_id", "abc"}});
  // Found through the directory (a run directory) and through the file itself.
  EXPECT_EQ(dd::resolve_model_path(dir_.string()), path);
  auto m = dd::read_any_model_file(dir_.string(), *be_);
  EXPECT_EQ(m.backend, nullptr);  // the caller's backend
  EXPECT_EQ(m.path, path);
  EXPECT_EQ(m.model->config(), dd::model_config(cfg_));
  EXPECT_EQ(m.model->get_parameters(), model_->get_parameters());
  EXPECT_EQ(m.metadata.at("model_kind"), "gpt");
  EXPECT_EQ(m.metadata.at("format"), "dd-gpt-1");
  EXPECT_EQ(nlohmann::json::parse(m.metadata.at("config")), dd::model_config(cfg_).to_json());
  EXPECT_EQ(m.metadata.at("val_loss"), "2.5");
  EXPECT_EQ(m.metadata.at("run_id"), "abc");
  EXPECT_EQ(m.metadata.count(dd::st_checksum_key), 1u);
  // Only the model's tensors: no optimizer state, names as gpt_tensors().
  const auto f = dd::read_safetensors(path);
  ASSERT_EQ(f.tensors.size(), model_->tensors().size());
  for (size_t i = 0; i < f.tensors.size(); ++i) {
    EXPECT_EQ(f.tensors[i].name, model_->tensors()[i].name);
    EXPECT_EQ(f.tensors[i].shape, model_->tensors()[i].shape);
  }
}

TEST_F(ModelFile, ATrainingCheckpointIsReadWithoutItsOptimizerState) {
  dd::save_checkpoint((dir_ / "checkpoint.safetensors").string(), *model_, nullptr, {});
  auto m = dd::read_any_model_file(dir_.string(), *be_);
  EXPECT_EQ(m.path, (dir_ / "checkpoint.safetensors").string());
  EXPECT_EQ(m.model->get_parameters(), model_->get_parameters());
}

TEST_F(ModelFile, RefusalsNameTheFileAndWhatIsWrong) {
  // An empty directory.
  dd::test::expect_contains_all(
      dd::test::error_of<std::runtime_error>([&] { dd::resolve_model_path(dir_.string()); }),
      {dir_.string(), "model.safetensors", "checkpoint.safetensors"});
  EXPECT_THROW(dd::resolve_model_path((dir_ / "nope").string()), std::runtime_error);
  // An unknown model kind, and a file without a config.
  const auto path = (dir_ / "other.safetensors").string();
  auto bogus = dd::model_config(cfg_).to_json();
  bogus["kind"] = "bogus";
  dd::write_safetensors(path, {{{"x", {1}, {1.0f}}}, {{"config", bogus.dump()}}});
  const auto refusal = [&] {
    return dd::test::error_of<std::runtime_error>([&] { dd::read_any_model_file(path, *be_); });
  };
  dd::test::expect_contains_all(refusal(), {path, "'bogus'"});
  dd::write_safetensors(path, {{{"x", {1}, {1.0f}}}, {}});
  dd::test::expect_contains_all(refusal(), {path, "metadata 'config'"});
  // load_model refuses a backend it cannot make before it reads anything.
  EXPECT_THROW(dd::load_model(path, "no-such-backend", 1), dd::kernels::backend_error);
}

TEST_F(ModelFile, LoadModelMakesTheBackendAndReadsAnyKind) {
  // A gpt run directory: the model on a backend of its own, parameters as written.
  dd::write_model_file((dir_ / dd::model_file_name).string(), *model_, {{"val_loss", "2.5"}});
  auto g = dd::load_model(dir_.string(), "cpu", 1);
  ASSERT_NE(g.backend, nullptr);
  EXPECT_EQ(g.backend->name(), "cpu");
  EXPECT_EQ(g.path, (dir_ / dd::model_file_name).string());
  EXPECT_EQ(g.model->config().kind, "gpt");
  EXPECT_NE(dynamic_cast<dd::gpt*>(g.model.get()), nullptr);
  EXPECT_EQ(g.model->get_parameters(), model_->get_parameters());
  EXPECT_EQ(g.metadata.at("val_loss"), "2.5");
  // A mixture-of-experts GPT file reads back as a moe_gpt with the same parameters.
  dd::model_config mc(cfg_);
  mc.kind = "moe_gpt";
  mc.moe.experts = 3;
  mc.moe.top_k = 2;
  auto moe = dd::make_model(*be_, mc);
  moe->init(7);
  const auto moe_path = (dir_ / "moe.safetensors").string();
  dd::write_model_file(moe_path, *moe, {});
  auto m = dd::load_model(moe_path, "reference", 1);
  EXPECT_EQ(m.backend->name(), "reference");
  EXPECT_EQ(m.model->config(), mc);
  EXPECT_EQ(m.metadata.at("model_kind"), "moe_gpt");
  EXPECT_EQ(m.model->get_parameters(), moe->get_parameters());
  // What `dd-node eval` computes on it: the same loss as the model that was written.
  std::vector<int32_t> split(64);
  for (size_t i = 0; i < split.size(); ++i) split[i] = static_cast<int32_t>((i * 37 + 11) % 256);
  EXPECT_EQ(dd::evaluate_loss(*m.model, split, 2, 8, 2), dd::evaluate_loss(*moe, split, 2, 8, 2));
}

TEST(EvalSpec, WindowsAreTheOnesEvaluateLossScores) {
  dd::eval_spec s;
  s.validation_tokens = 100;  // W = 99 / 8 = 12 windows
  s.batch = 5;
  s.seq_len = 8;
  s.windows = 15;
  const auto starts = s.window_starts();
  ASSERT_EQ(starts.size(), 15u);
  EXPECT_EQ(starts[0], 0u);
  EXPECT_EQ(starts[4], 32u);
  EXPECT_EQ(starts[11], 88u);  // window 11
  EXPECT_EQ(starts[12], 0u);   // wraps: (12 mod 12)·8
  EXPECT_EQ(starts[14], 16u);
  EXPECT_TRUE(s.covers_split());
  s.windows = 10;
  EXPECT_FALSE(s.covers_split());

  // evaluate_loss on a model equals the mean over batches of forward() on exactly these windows.
  auto be = dd::kernels::make_backend("reference", {1, 0});
  dd::gpt model(*be, {256, 8, 1, 2, 8});
  model.init(3);
  std::vector<int32_t> split(100);
  for (size_t i = 0; i < split.size(); ++i) split[i] = static_cast<int32_t>((i * 37 + 11) % 256);
  s.windows = 15;
  double want = 0;
  for (int b = 0; b < 3; ++b) {
    std::vector<int32_t> in, tg;
    for (int r = 0; r < s.batch; ++r)
      for (int t = 0; t < s.seq_len; ++t) {
        in.push_back(split[starts[static_cast<size_t>(b * s.batch + r)] + t]);
        tg.push_back(split[starts[static_cast<size_t>(b * s.batch + r)] + t + 1]);
      }
    want += model.forward(in, tg, s.batch, s.seq_len);
  }
  EXPECT_EQ(dd::evaluate_loss(model, split, s.batch, s.seq_len, 3), want / 3);
  EXPECT_EQ(dd::evaluate_windows(model, split, s.batch, s.seq_len, s.windows), want / 3);

  const auto j = s.to_json();
  EXPECT_EQ(j.at("window_starts").get<std::vector<size_t>>(), starts);
  EXPECT_EQ(j.at("split"), "validation");
  EXPECT_EQ(j.at("windows"), 15);
  const auto back = dd::eval_spec::from_json(j);
  EXPECT_EQ(back.batch, 5);
  EXPECT_EQ(back.seq_len, 8);
  EXPECT_EQ(back.windows, 15);
  EXPECT_EQ(back.validation_tokens, 100u);
  auto broken = j;
  broken.erase("seq_len");
  EXPECT_THAT([&] { dd::eval_spec::from_json(broken); },
              ::testing::ThrowsMessage<std::invalid_argument>(HasSubstr("'seq_len'")));
  // A record written before the windows were counted apart from the batch: batches · batch.
  auto old_record = j;
  old_record.erase("windows");
  old_record["batches"] = 2;
  EXPECT_EQ(dd::eval_spec::from_json(old_record).windows, 10);
}

TEST(EvalWindows, TheBatchChangesNoWindowAndEveryWindowWeighsTheSame) {
  auto be = dd::kernels::make_backend("reference", {1, 0});
  dd::gpt model(*be, {256, 8, 1, 2, 8});
  model.init(5);
  std::vector<int32_t> split(100);  // W = 12 windows of 8 + 1 tokens
  for (size_t i = 0; i < split.size(); ++i) split[i] = static_cast<int32_t>((i * 53 + 7) % 256);
  auto window_loss = [&](size_t w) {
    std::vector<int32_t> in(split.begin() + static_cast<long>(w * 8),
                            split.begin() + static_cast<long>(w * 8 + 8));
    std::vector<int32_t> tg(split.begin() + static_cast<long>(w * 8 + 1),
                            split.begin() + static_cast<long>(w * 8 + 9));
    return model.forward(in, tg, 1, 8);
  };
  double all = 0, first10 = 0;
  for (size_t w = 0; w < 12; ++w) {
    all += window_loss(w);
    if (w < 10) first10 += window_loss(w);
  }
  all /= 12;
  first10 /= 10;
  // 0 = the whole split; B = 1, 3 (batches of 3, 3, 3, 3), 5 (5, 5, 2: the last batch partial).
  for (int B : {1, 3, 5, 12, 16})
    EXPECT_NEAR(dd::evaluate_windows(model, split, B, 8, 0), all, 1e-6) << "B " << B;
  for (int B : {1, 4, 7})
    EXPECT_NEAR(dd::evaluate_windows(model, split, B, 8, 10), first10, 1e-6) << "B " << B;
  EXPECT_EQ(dd::windows_in_split(split.size(), 8), 12);
  EXPECT_THROW(dd::evaluate_windows(model, split, 0, 8, 4), std::invalid_argument);
  EXPECT_THROW(dd::evaluate_windows(model, split, 2, 8, -1), std::invalid_argument);
}

TEST(EvalSpec, ScoringDifferenceNamesTheFirstFieldThatChangesAWindow) {
  dd::eval_spec a;
  a.data_file = "input.txt";
  a.validation_offset = 900;
  a.validation_tokens = 100;
  a.seq_len = 8;
  a.windows = 12;
  a.batch = 16;
  auto b = a;
  b.batch = 64;  // another training batch: the same windows
  b.backend = "reference";
  EXPECT_EQ(dd::scoring_difference(a.to_json(), b.to_json()), "");
  b.windows = 10;
  EXPECT_EQ(dd::scoring_difference(a.to_json(), b.to_json()), "windows: 12 vs 10");
  b = a;
  b.seq_len = 4;
  EXPECT_THAT(dd::scoring_difference(a.to_json(), b.to_json()), HasSubstr("seq_len"));
  EXPECT_THAT(dd::scoring_difference(a.to_json(), nlohmann::json()), HasSubstr("absent"));
}

TEST(GptLogits, CrossEntropyOfTheLogitsIsTheForwardLoss) {
  auto be = dd::kernels::make_backend("reference", {1, 0});
  dd::gpt model(*be, {256, 8, 1, 2, 8});
  model.init(9);
  EXPECT_THROW(model.logits(0), std::logic_error);
  const std::vector<int32_t> in = {1, 2, 3, 4, 5, 6}, tg = {2, 3, 4, 5, 6, 7};
  const double loss = model.forward(in, tg, 2, 3);
  double sum = 0;
  for (size_t row = 0; row < 6; ++row) {
    const auto z = model.logits(row);
    ASSERT_EQ(z.size(), 256u);
    double m = -INFINITY, s = 0;
    for (float v : z) m = std::max(m, double(v));
    for (float v : z) s += std::exp(double(v) - m);
    sum += std::log(s) + m - z[static_cast<size_t>(tg[row])];
  }
  EXPECT_NEAR(sum / 6, loss, 1e-6);
  EXPECT_THROW(model.logits(6), std::out_of_range);
}

TEST(Sample, GreedyTopKAndTemperature) {
  dd::rng r(1);
  const std::vector<float> z = {0.0f, 3.0f, 3.0f, 1.0f};
  dd::sample_options greedy;
  greedy.temperature = 0.0;
  EXPECT_EQ(dd::sample_next(z, greedy, r), 1);  // tie between 1 and 2: the lower id
  dd::sample_options top1;
  top1.top_k = 1;
  for (int i = 0; i < 20; ++i) EXPECT_EQ(dd::sample_next(z, top1, r), 1);
  // top-2 keeps ids 1 and 2 only, each drawn about half the time.
  dd::sample_options top2;
  top2.top_k = 2;
  std::map<int32_t, int> counts;
  for (int i = 0; i < 2000; ++i) counts[dd::sample_next(z, top2, r)]++;
  EXPECT_EQ(counts.size(), 2u);
  EXPECT_NEAR(counts[1], 1000, 100);
  // Temperature 1 over all four: p ∝ e^z, so id 0 about 1/(2e^3 + e + 1) ≈ 2.3% of the time.
  dd::sample_options all;
  counts.clear();
  for (int i = 0; i < 20000; ++i) counts[dd::sample_next(z, all, r)]++;
  const double p0 = 1.0 / (2 * std::exp(3.0) + std::exp(1.0) + 1.0);
  EXPECT_NEAR(counts[0] / 20000.0, p0, 0.006);
  dd::sample_options bad;
  bad.temperature = -1;
  EXPECT_THROW(dd::sample_next(z, bad, r), std::invalid_argument);
  bad = {};
  bad.top_k = -2;
  EXPECT_THROW(dd::sample_next(z, bad, r), std::invalid_argument);
  EXPECT_THROW(dd::sample_next({}, all, r), std::invalid_argument);
}

TEST(Sample, SameSeedSameTextPromptsLongerThanTheContextAreCropped) {
  auto be = dd::kernels::make_backend("reference", {1, 0});
  dd::gpt model(*be, {256, 8, 1, 2, 8});
  model.init(4);
  std::vector<int32_t> prompt(20);  // longer than the context (8)
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(65 + i);
  dd::sample_options o;
  o.tokens = 12;
  o.seed = 42;
  const auto a = dd::sample_tokens(model, prompt, o);
  const auto b = dd::sample_tokens(model, prompt, o);
  ASSERT_EQ(a.size(), 12u);
  EXPECT_EQ(a, b);
  o.seed = 43;
  EXPECT_NE(dd::sample_tokens(model, prompt, o), a);
  for (auto t : a) EXPECT_TRUE(t >= 0 && t < 256);
  EXPECT_THROW(dd::sample_tokens(model, {}, o), std::invalid_argument);
  EXPECT_THAT(
      [&] {
        dd::sample_tokens(model, {1, 300}, o);
      },
      ::testing::ThrowsMessage<std::invalid_argument>(HasSubstr("position 1")));
}

}  // namespace

TEST(EvalSpec, NamesWhereItsValidationSplitComesFrom) {
  dd::eval_spec text;
  text.data_file = "datasets/tinyshakespeare/input.txt";
  text.validation_offset = 1003854;
  text.validation_tokens = 111540;
  EXPECT_EQ(
      text.split_description(),
      "the validation split of datasets/tinyshakespeare/input.txt (tokens [1003854, 1115394), "
      "train_fraction 0.9)");

  dd::eval_spec split = text;  // token files split by train_fraction
  split.data_file = "shards/train_000.bin";
  split.token_files = {"shards/train_000.bin", "shards/train_001.bin", "shards/train_002.bin"};
  split.train_fraction = 0.95;
  EXPECT_EQ(split.split_description(),
            "the validation split of shards/train_000.bin and 2 more token files (tokens "
            "[1003854, 1115394), train_fraction 0.95)");

  // The run named its own validation files: no train_fraction and no offset into the train
  // files (a run's validation files were once described as the train file's split).
  dd::eval_spec own = split;
  own.token_files = {"corpus_train.bin"};
  own.data_file = "corpus_train.bin";
  own.token_validation_files = {"corpus_val.bin"};
  own.validation_offset = 267623;
  own.validation_tokens = 31904;
  EXPECT_EQ(own.split_description(), "the validation files corpus_val.bin (31904 tokens)");
  own.token_validation_files.push_back("extra_val.bin");
  EXPECT_EQ(own.split_description(),
            "the validation files corpus_val.bin, extra_val.bin (31904 tokens)");
}
