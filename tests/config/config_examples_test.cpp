// tests/config/config_examples_test.cpp — every examples/*.lua parses and resolves; the resolved
// JSON reads back to the same experiment; a file naming only its data gets ALGORITHM.md's defaults.
#include <algorithm>
#include <filesystem>
#include <sstream>

#include <gtest/gtest.h>

#include "runtime/config/loader.hpp"
#include "runtime/config/resolve_command.hpp"
#include "tests/config/config_test_util.hpp"

namespace dd::config {
namespace {

std::vector<std::string> example_files() {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(test::repo_path("examples")))
    if (e.path().extension() == ".lua") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

TEST(ConfigExamples, EveryExampleResolves) {
  const auto files = example_files();
  ASSERT_GE(files.size(), 5u) << "examples/ should hold the main job, a K sweep, heterogeneous, "
                                 "chaos and baselines";
  for (const auto& f : files) {
    const load_result r = load_file(f, test::repo_options());
    EXPECT_TRUE(r.ok()) << f << ":\n" << r.error_text();
    EXPECT_FALSE(r.experiments.empty()) << f;
    for (const auto& e : r.experiments) {
      EXPECT_EQ(e.learners.speed.size(), static_cast<std::size_t>(e.learners.count)) << e.name;
      if (e.data.kind == data_kind::idx) {
        EXPECT_TRUE(std::filesystem::is_regular_file(e.data.images)) << e.data.images;
        EXPECT_TRUE(std::filesystem::is_regular_file(e.data.labels)) << e.data.labels;
      } else {
        EXPECT_TRUE(std::filesystem::is_regular_file(e.data.file)) << e.data.file;
      }
    }
  }
}

TEST(ConfigExamples, ResolveCommandPrintsEveryExperiment) {
  for (const auto& f : example_files()) {
    // The command resolves relative data paths from the current directory: run from the root.
    const auto cwd = std::filesystem::current_path();
    std::filesystem::current_path(DD_SOURCE_DIR);
    std::ostringstream out, err;
    const int rc = resolve_command({f}, out, err);
    std::filesystem::current_path(cwd);
    ASSERT_EQ(rc, 0) << f << ": " << err.str();
    const auto j = nlohmann::json::parse(out.str());
    ASSERT_TRUE(j.is_array());
    const load_result r = load_file(f, test::repo_options());
    ASSERT_EQ(j.size(), r.experiments.size()) << f;
    for (std::size_t i = 0; i < j.size(); ++i) EXPECT_EQ(j[i], to_json(r.experiments[i])) << f;
  }
}

TEST(ConfigExamples, ResolvedJsonReadsBackToTheSameExperiment) {
  for (const auto& f : example_files()) {
    const load_result r = load_file(f, test::repo_options());
    ASSERT_TRUE(r.ok()) << r.error_text();
    for (const auto& e : r.experiments) {
      const nlohmann::json j = to_json(e);
      const load_result back = load_json(j);
      ASSERT_TRUE(back.ok()) << e.name << ": " << back.error_text();
      ASSERT_EQ(back.experiments.size(), 1u);
      EXPECT_EQ(to_json(back.experiments[0]), j) << e.name;
    }
  }
}

TEST(ConfigExamples, DataOnlyFileGetsAlgorithmDefaults) {
  const std::string script = std::string("experiment { ") + test::k_data + " }\n";
  const load_result r = load_string(script, "defaults.lua", test::repo_options());
  ASSERT_TRUE(r.ok()) << r.error_text();
  ASSERT_EQ(r.experiments.size(), 1u);
  const experiment& e = r.experiments[0];
  EXPECT_EQ(e.name, "defaults");
  EXPECT_EQ(e.run_dir, "runs/defaults");
  EXPECT_EQ(e.checkpoint.dir, "runs/defaults/checkpoints");
  EXPECT_EQ(e.seed, 1234u);
  EXPECT_EQ(e.learners.count, 4);
  EXPECT_EQ(e.learners.speed, std::vector<double>(4, 1.0));
  EXPECT_EQ(e.sync.fragments, 4);
  EXPECT_EQ(e.sync.interval, 24);
  EXPECT_EQ(e.sync.overlap, 2);
  EXPECT_EQ(e.sync.max_inflight, 2);
  EXPECT_FALSE(e.sync.final_push);
  EXPECT_EQ(e.sync.window_chunks, 8);             // dd::policy::default_window_chunks
  EXPECT_DOUBLE_EQ(e.sync.max_norm_ratio, 10.0);  // the plausibility gate, generous
  EXPECT_FALSE(e.sync.push_clock.has_value());
  EXPECT_EQ(e.push_clock(), schedule_clock::global);  // K = 1 < M
  EXPECT_EQ(e.restart.max_restarts, 5u);
  EXPECT_DOUBLE_EQ(e.restart.window_s, 60.0);
  EXPECT_DOUBLE_EQ(e.restart.backoff_base_s, 0.5);
  EXPECT_DOUBLE_EQ(e.restart.backoff_cap_s, 30.0);
  EXPECT_FALSE(e.sync.min_quorum.is_fraction());
  EXPECT_EQ(e.sync.min_quorum.count, 1u);
  EXPECT_EQ(e.sync.grace.mode, grace_mode::adaptive);
  EXPECT_DOUBLE_EQ(e.sync.grace.gamma, 0.8);
  EXPECT_DOUBLE_EQ(e.sync.grace.max_factor, 2.0);
  EXPECT_DOUBLE_EQ(e.sync.ema, 0.2);
  EXPECT_EQ(e.sync.wire, wire_format::fp32);
  EXPECT_EQ(e.sync.broadcast_wire, wire_format::fp32);
  EXPECT_EQ(e.sync.strategy, fragment_strategy_kind::balanced);
  EXPECT_EQ(e.outer.kind, outer_kind::nesterov);
  EXPECT_DOUBLE_EQ(e.outer.lr, 0.7);
  EXPECT_DOUBLE_EQ(e.outer.momentum, 0.9);
  EXPECT_EQ(e.outer.merge, merge_kind::rda);
  EXPECT_EQ(e.outer.embedding_merge, merge_kind::average);
  EXPECT_EQ(e.outer.anchor, anchor_kind::current);
  EXPECT_DOUBLE_EQ(e.outer.mixing_alpha, 0.0);
  EXPECT_EQ(e.outer.max_staleness, 4);
  EXPECT_TRUE(e.outer.token_weighting);
  EXPECT_DOUBLE_EQ(e.inner.beta1, 0.9);
  EXPECT_DOUBLE_EQ(e.inner.beta2, 0.95);
  EXPECT_DOUBLE_EQ(e.inner.weight_decay, 0.1);
  EXPECT_EQ(e.budget.kind, budget_kind::steps);
  EXPECT_EQ(e.budget.steps, 600);
  EXPECT_EQ(e.inner.decay_steps, 600);  // cosine over the step budget
  EXPECT_TRUE(e.chaos.events.empty());
  EXPECT_DOUBLE_EQ(e.chaos.random.mtbf_seconds, 0.0);
  EXPECT_EQ(e.chaos.random.seed, 1234u);
  EXPECT_EQ(std::filesystem::path(e.data.file).filename(), "input.txt");
}

TEST(ConfigExamples, PushClockDefaultsByQuorumAndAnExplicitValueWins) {
  auto one = [](const std::string& sync) {
    const std::string script =
        std::string("experiment { ") + test::k_data + ", sync = { " + sync + " } }";
    load_result r = load_string(script, "pc.lua", test::repo_options());
    EXPECT_TRUE(r.ok()) << r.error_text();
    return r.ok() ? r.experiments[0] : experiment{};
  };
  // Synchronous (K = M, as a count or as fraction(1)): lockstep on the learner's own step.
  EXPECT_EQ(one("min_quorum = 4").push_clock(), schedule_clock::learner);
  EXPECT_EQ(one("min_quorum = fraction(1)").push_clock(), schedule_clock::learner);
  // Asynchronous: the global mean step.
  EXPECT_EQ(one("min_quorum = 3").push_clock(), schedule_clock::global);
  EXPECT_EQ(one("min_quorum = fraction(0.5)").push_clock(), schedule_clock::global);
  // Explicit either way.
  EXPECT_EQ(one("min_quorum = 4, push_clock = 'global'").push_clock(), schedule_clock::global);
  EXPECT_EQ(one("min_quorum = 1, push_clock = 'learner'").push_clock(), schedule_clock::learner);
  // The resolved JSON names the clock in use.
  EXPECT_EQ(to_json(one("min_quorum = 4"))["sync"]["push_clock"], "learner");
  EXPECT_EQ(to_json(one("min_quorum = 2"))["sync"]["push_clock"], "global");
}

TEST(ConfigExamples, FinalPushIsReadAndRoundTrips) {
  const std::string script =
      std::string("experiment { ") + test::k_data + ", sync = { final_push = true } }";
  load_result r = load_string(script, "fp.lua", test::repo_options());
  ASSERT_TRUE(r.ok()) << r.error_text();
  EXPECT_TRUE(r.experiments[0].sync.final_push);
  EXPECT_EQ(to_json(r.experiments[0])["sync"]["final_push"], true);
  const std::string bad =
      std::string("experiment { ") + test::k_data + ",\n sync = { final_push = 'yes' } }";
  load_result rb = load_string(bad, "fp.lua", test::repo_options());
  ASSERT_EQ(rb.errors.size(), 1u) << rb.error_text();
  EXPECT_NE(rb.errors[0].to_string().find("sync.final_push"), std::string::npos)
      << rb.errors[0].to_string();
}

TEST(ConfigExamples, BroadcastWireIsReadAndRoundTrips) {
  const std::string script = std::string("experiment { ") + test::k_data +
                             ", sync = { wire = 'int4', broadcast_wire = 'bf16' } }";
  load_result r = load_string(script, "bw.lua", test::repo_options());
  ASSERT_TRUE(r.ok()) << r.error_text();
  const experiment& e = r.experiments[0];
  EXPECT_EQ(e.sync.wire, wire_format::int4);
  EXPECT_EQ(e.sync.broadcast_wire, wire_format::bf16);
  EXPECT_EQ(to_json(e)["sync"]["broadcast_wire"], "bf16");
  const std::string bad =
      std::string("experiment { ") + test::k_data + ",\n sync = { broadcast_wire = 'fp16' } }";
  load_result rb = load_string(bad, "bw.lua", test::repo_options());
  ASSERT_EQ(rb.errors.size(), 1u) << rb.error_text();
  EXPECT_NE(
      rb.errors[0].to_string().find(
          "sync.broadcast_wire: unknown value 'fp16'; expected one of fp32, bf16, int8, int4"),
      std::string::npos)
      << rb.errors[0].to_string();
}

TEST(ConfigExamples, RestartSectionIsRead) {
  const std::string script =
      std::string("experiment { ") + test::k_data +
      ", restart = { max_restarts = 0, window_seconds = 10, backoff_seconds = 1, "
      "backoff_cap_seconds = 4 } }";
  const load_result r = load_string(script, "r.lua", test::repo_options());
  ASSERT_TRUE(r.ok()) << r.error_text();
  const experiment& e = r.experiments[0];
  EXPECT_EQ(e.restart.max_restarts, 0u);
  EXPECT_DOUBLE_EQ(e.restart.window_s, 10.0);
  EXPECT_DOUBLE_EQ(e.restart.backoff_base_s, 1.0);
  EXPECT_DOUBLE_EQ(e.restart.backoff_cap_s, 4.0);
  EXPECT_EQ(to_json(e)["restart"]["backoff_cap_seconds"], 4.0);
}

TEST(ConfigExamples, TokenBudgetSetsTheScheduleLength) {
  // 4 learners x 16 sequences x 128 tokens = 8192 tokens per step of the whole run.
  const std::string script =
      std::string("experiment { ") + test::k_data + ", budget = { tokens = 8192 * 300 + 1 } }";
  const load_result r = load_string(script, "t.lua", test::repo_options());
  ASSERT_TRUE(r.ok()) << r.error_text();
  EXPECT_EQ(r.experiments[0].budget.kind, budget_kind::tokens);
  EXPECT_EQ(r.experiments[0].inner.decay_steps, 301);
}

TEST(ConfigExamples, QuorumResolvesAgainstLiveLearners) {
  quorum k = quorum::of_fraction(0.5);
  EXPECT_EQ(k.resolve(4), 2u);
  EXPECT_EQ(k.resolve(3), 2u);
  EXPECT_EQ(k.resolve(1), 1u);
  k = quorum::of_count(3);
  EXPECT_EQ(k.resolve(4), 3u);
  EXPECT_EQ(k.resolve(2), 2u);  // never more than the live learners
}

TEST(ConfigExamples, IdxDataResolvesAndRoundTrips) {
  const std::string script =
      "experiment { name = 'mn', model = { kind = 'vit', layers = 2, width = 64, pooling = 'mean' "
      "},\n"
      "  data = { kind = 'idx', train_fraction = 0.8,\n"
      "  images = 'datasets/mnist-t10k/t10k-images-idx3-ubyte.gz',\n"
      "  labels = 'datasets/mnist-t10k/t10k-labels-idx1-ubyte.gz' } }\n";
  const load_result r = load_string(script, "mn.lua", test::repo_options());
  ASSERT_TRUE(r.ok()) << r.error_text();
  const experiment& e = r.experiments[0];
  EXPECT_EQ(e.data.kind, data_kind::idx);
  EXPECT_TRUE(e.data.file.empty());
  EXPECT_EQ(std::filesystem::path(e.data.images).filename(), "t10k-images-idx3-ubyte.gz");
  EXPECT_EQ(std::filesystem::path(e.data.labels).filename(), "t10k-labels-idx1-ubyte.gz");
  EXPECT_DOUBLE_EQ(e.data.train_fraction, 0.8);
  EXPECT_EQ(e.model.kind, model_kind::vit);
  EXPECT_EQ(e.model.pooling, "mean");
  EXPECT_EQ(e.model.patch, 7);
  const nlohmann::json j = to_json(e);
  EXPECT_EQ(j["model"]["pooling"], "mean");
  EXPECT_EQ(j["model"]["classes"], 10);
  EXPECT_EQ(j["data"]["kind"], "idx");
  EXPECT_FALSE(j["data"].contains("file"));
  const load_result back = load_json(j);
  ASSERT_TRUE(back.ok()) << back.error_text();
  EXPECT_EQ(to_json(back.experiments[0]), j);
  // A text experiment prints no kind (its JSON is what it was before kinds existed).
  const load_result t = load_string(std::string("experiment { ") + test::k_data + " }\n", "t.lua",
                                    test::repo_options());
  ASSERT_TRUE(t.ok()) << t.error_text();
  EXPECT_EQ(t.experiments[0].data.kind, data_kind::text);
  EXPECT_FALSE(to_json(t.experiments[0])["data"].contains("kind"));
}

TEST(ConfigExamples, KnownKeyPathsCoverTheSections) {
  const auto& keys = known_key_paths();
  for (const char* k :
       {"sync.min_quorum", "sync.grace.gamma", "outer.mixing_alpha", "chaos.events[].at_fraction",
        "chaos.random.recovery.dist", "budget.tokens", "learners.speed",
        "checkpoint.every_versions", "data.kind", "data.images", "data.labels"})
    EXPECT_NE(std::find(keys.begin(), keys.end(), k), keys.end()) << k;
}

}  // namespace
}  // namespace dd::config
