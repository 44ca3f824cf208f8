// tests/config/config_sweep_test.cpp — sweeps expand to the expected experiments, names select
// (before overrides apply), --set overrides apply (and are validated like file keys, naming
// "--set"), --run-dir moves the default checkpoint directory.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/config/loader.hpp"
#include "tests/config/config_test_util.hpp"

namespace dd::config {
namespace {

/// Expects `r` loaded without errors, its experiments named `names` in order.
void expect_names(const load_result& r, const std::vector<std::string>& names) {
  ASSERT_TRUE(r.ok()) << r.error_text();
  std::vector<std::string> got;
  for (const auto& e : r.experiments) got.push_back(e.name);
  EXPECT_EQ(got, names);
}

TEST(ConfigSweep, KSweepExpandsInOrder) {
  const load_result r = load_file(test::repo_path("examples/k_sweep.lua"), test::repo_options());
  ASSERT_TRUE(r.ok()) << r.error_text();
  ASSERT_EQ(r.experiments.size(), 4u);
  const char* names[] = {"k_sweep-k1", "k_sweep-k2", "k_sweep-k4", "k_sweep-half"};
  const std::size_t counts[] = {1, 2, 4};
  for (std::size_t i = 0; i < 4; ++i) {
    const experiment& e = r.experiments[i];
    EXPECT_EQ(e.name, names[i]);
    EXPECT_EQ(e.learners.count, 4);
    EXPECT_EQ(e.budget.kind, budget_kind::tokens);
    EXPECT_EQ(e.budget.tokens, 4 * 16 * 128 * 600);
    if (i < 3) {
      EXPECT_FALSE(e.sync.min_quorum.is_fraction());
      EXPECT_EQ(e.sync.min_quorum.count, counts[i]);
    } else {
      EXPECT_TRUE(e.sync.min_quorum.is_fraction());
      EXPECT_DOUBLE_EQ(e.sync.min_quorum.fraction, 0.5);
    }
  }
}

TEST(ConfigSweep, SnapshotIsTakenAtTheCall) {
  // Mutating one table between calls must not change experiments already recorded.
  const std::string script = std::string("local t = { ") + test::k_data +
                             ", sync = { min_quorum = 1 } }\n"
                             "for k = 1, 3 do t.name = 'k' .. k; t.sync.min_quorum = k; "
                             "experiment(t) end\n";
  const load_result r = load_string(script, "snap.lua", test::repo_options());
  ASSERT_TRUE(r.ok()) << r.error_text();
  ASSERT_EQ(r.experiments.size(), 3u);
  for (int k = 1; k <= 3; ++k) {
    EXPECT_EQ(r.experiments[k - 1].name, "k" + std::to_string(k));
    EXPECT_EQ(r.experiments[k - 1].sync.min_quorum.count, static_cast<std::size_t>(k));
    EXPECT_EQ(r.experiments[k - 1].source, "snap.lua:2");
  }
}

TEST(ConfigSweep, UnnamedExperimentsAreNumbered) {
  const std::string one = std::string("experiment { ") + test::k_data + " }\n";
  const load_result r = load_string(one + one, "dir/grid.lua", test::repo_options());
  expect_names(r, {"grid-1", "grid-2"});
}

TEST(ConfigSweep, SelectByName) {
  load_options o = test::repo_options();
  o.names = {"k_sweep-k4", "k_sweep-k1"};
  const load_result r = load_file(test::repo_path("examples/k_sweep.lua"), o);
  expect_names(r, {"k_sweep-k4", "k_sweep-k1"});
}

TEST(ConfigSweep, UnknownNameSuggestsTheClosest) {
  load_options o = test::repo_options();
  o.names = {"k_sweep-k3"};
  const std::string path = test::repo_path("examples/k_sweep.lua");
  const load_result r = load_file(path, o);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_TRUE(r.experiments.empty());
  EXPECT_EQ(r.errors[0].to_string(),
            path +
                ": no experiment named 'k_sweep-k3'; did you mean 'k_sweep-k1'?; the file "
                "defines: k_sweep-k1, k_sweep-k2, k_sweep-k4, k_sweep-half");
}

TEST(ConfigSweep, OverridesApplyToEveryExperiment) {
  load_options o = test::repo_options();
  o.overrides = {"sync.fragments=2",
                 "learners.backend=cuda",
                 "outer.anchor=\"current\"",
                 "sync.grace.mode=off",
                 "inner.lr=1e-3",
                 "outer.token_weighting=false",
                 "learners.speed={1, 1, 1.25, 2}",
                 "seed=7"};
  const load_result r = load_file(test::repo_path("examples/k_sweep.lua"), o);
  ASSERT_TRUE(r.ok()) << r.error_text();
  ASSERT_EQ(r.experiments.size(), 4u);
  for (const auto& e : r.experiments) {
    EXPECT_EQ(e.sync.fragments, 2);
    EXPECT_EQ(e.learners.backend, backend_kind::cuda);  // unquoted text reads as a string
    EXPECT_EQ(e.outer.anchor, anchor_kind::current);
    EXPECT_EQ(e.sync.grace.mode, grace_mode::off);
    EXPECT_DOUBLE_EQ(e.inner.lr, 1e-3);
    EXPECT_FALSE(e.outer.token_weighting);
    EXPECT_EQ(e.learners.speed, (std::vector<double>{1, 1, 1.25, 2}));
    EXPECT_EQ(e.seed, 7u);
    EXPECT_EQ(e.chaos.random.seed, 7u);  // derived defaults follow the override
  }
  // File values that were not overridden stay.
  EXPECT_EQ(r.experiments[1].sync.min_quorum.count, 2u);
}

TEST(ConfigSweep, OverrideCanSetAFraction) {
  load_options o = test::repo_options();
  o.overrides = {"sync.min_quorum=fraction(0.75)"};
  const load_result r = load_file(test::repo_path("examples/shakespeare.lua"), o);
  ASSERT_TRUE(r.ok()) << r.error_text();
  EXPECT_TRUE(r.experiments[0].sync.min_quorum.is_fraction());
  EXPECT_DOUBLE_EQ(r.experiments[0].sync.min_quorum.fraction, 0.75);
  EXPECT_EQ(r.experiments[0].sync.min_quorum.resolve(4), 3u);
}

TEST(ConfigSweep, BadOverridesNameTheSetFlag) {
  struct bad_override {
    const char* set;
    const char* error;
  };
  const bad_override cases[] = {
      {"sync.min_quorm=2",
       "--set sync.min_quorm=2: sync.min_quorm: unknown key; did you mean 'min_quorum'?"},
      {"sync.min_quorum=9",
       "--set sync.min_quorum=9: sync.min_quorum: 9 exceeds "
       "learners.count (4)"},
      {"sync.fragments=48",
       "--set sync.fragments=48: sync.fragments: 48 fragments exceed "
       "sync.interval (24); P <= H is required"},
      {"nonsense", "--set nonsense: expected key.path=value, e.g. --set sync.min_quorum=2"},
      {"learners.count.x=1",
       "--set learners.count.x=1: learners.count.x: cannot set it: "
       "'learners.count' is number 4, not a table"},
      // A section the file does not name, made by the override: the flag, not the file's line.
      {"learner.count=3", "--set learner.count=3: learner: unknown key; did you mean 'learners'?"},
  };
  for (const auto& c : cases) {
    load_options o = test::repo_options();
    o.overrides = {c.set};
    const load_result r = load_file(test::repo_path("examples/shakespeare.lua"), o);
    ASSERT_EQ(r.errors.size(), 1u) << c.set << "\n" << r.error_text();
    EXPECT_EQ(r.errors[0].to_string(), c.error);
  }
}

// --name selects before --set applies: an override that does not fit an unselected experiment
// (min_quorum 4 > b's 2 learners) must not refuse the run of the selected one.
TEST(ConfigSweep, NameSelectsBeforeOverridesAreValidated) {
  const std::string script = std::string("experiment { name = 'a', ") + test::k_data +
                             ", learners = { count = 8 } }\n"
                             "experiment { name = 'b', " +
                             test::k_data + ", learners = { count = 2 } }\n";
  load_options o = test::repo_options();
  o.overrides = {"sync.min_quorum=4"};
  o.names = {"a"};
  load_result r = load_string(script, "two.lua", o);
  ASSERT_TRUE(r.ok()) << r.error_text();
  ASSERT_EQ(r.experiments.size(), 1u);
  EXPECT_EQ(r.experiments[0].name, "a");
  EXPECT_EQ(r.experiments[0].sync.min_quorum.count, 4u);

  // Selecting b, or nothing, still refuses with the override named.
  o.names = {"b"};
  r = load_string(script, "two.lua", o);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_TRUE(r.experiments.empty());
  EXPECT_EQ(r.errors[0].to_string(),
            "--set sync.min_quorum=4: sync.min_quorum: 4 exceeds learners.count (2)");
  o.names.clear();
  r = load_string(script, "two.lua", o);
  ASSERT_EQ(r.errors.size(), 1u) << r.error_text();
  EXPECT_EQ(r.errors[0].key_path, "sync.min_quorum");

  // An unselected experiment is not validated at all; unnamed experiments select by their
  // default names, and a name override is what --name matches.
  const std::string unnamed = std::string("experiment { ") + test::k_data + " }\n" +
                              "experiment { " + test::k_data + ", learners = { count = 0 } }\n";
  o.overrides.clear();
  o.names = {"grid-1"};
  r = load_string(unnamed, "grid.lua", o);
  ASSERT_TRUE(r.ok()) << r.error_text();
  ASSERT_EQ(r.experiments.size(), 1u);
  EXPECT_EQ(r.experiments[0].name, "grid-1");
  o.overrides = {"name=renamed"};
  o.names = {"renamed"};
  r = load_string(std::string("experiment { ") + test::k_data + " }\n", "one.lua", o);
  ASSERT_TRUE(r.ok()) << r.error_text();
  EXPECT_EQ(r.experiments[0].name, "renamed");
}

// load_options::run_dir (dd-node run --run-dir) moves run_dir and with it the default
// checkpoint directory; an explicit checkpoint.dir stays as written.
TEST(ConfigSweep, RunDirMovesTheDefaultCheckpointDir) {
  const std::string script = std::string("experiment { name = 'a', ") + test::k_data + " }\n" +
                             "experiment { name = 'b', " + test::k_data +
                             ", checkpoint = { dir = 'keep/ck' } }\n";
  load_options o = test::repo_options();
  load_result r = load_string(script, "ck.lua", o);
  ASSERT_TRUE(r.ok()) << r.error_text();
  EXPECT_EQ(r.experiments[0].run_dir, "runs/a");
  EXPECT_EQ(r.experiments[0].checkpoint.dir, "runs/a/checkpoints");
  o.run_dir = "elsewhere/r1";
  r = load_string(script, "ck.lua", o);
  ASSERT_TRUE(r.ok()) << r.error_text();
  EXPECT_EQ(r.experiments[0].run_dir, "elsewhere/r1");
  EXPECT_EQ(r.experiments[0].checkpoint.dir, "elsewhere/r1/checkpoints");
  EXPECT_EQ(r.experiments[1].run_dir, "elsewhere/r1");
  EXPECT_EQ(r.experiments[1].checkpoint.dir, "keep/ck");
  // Taken as given, not read as Lua (a path "1" stays the string "1").
  o.run_dir = "1";
  o.names = {"a"};
  r = load_string(script, "ck.lua", o);
  ASSERT_TRUE(r.ok()) << r.error_text();
  EXPECT_EQ(r.experiments[0].checkpoint.dir, "1/checkpoints");
}

// eval.every_steps and eval.every_seconds may both be set (whichever fires first).
TEST(ConfigSweep, EvalStepsAndSecondsTogether) {
  load_result r = test::load_one("eval = { every_steps = 50, every_seconds = 30 }", "ev.lua");
  ASSERT_TRUE(r.ok()) << r.error_text();
  EXPECT_EQ(r.experiments[0].eval.every_steps, 50);
  EXPECT_DOUBLE_EQ(r.experiments[0].eval.every_seconds, 30.0);
  r = test::load_one("eval = { every_steps = 50 }", "ev.lua");
  ASSERT_TRUE(r.ok()) << r.error_text();
  EXPECT_DOUBLE_EQ(r.experiments[0].eval.every_seconds, 0.0);
}

TEST(ConfigSweep, ExtendMergesNestedTables) {
  const std::string script = std::string("local base = { ") + test::k_data +
                             ", sync = { fragments = 2, interval = 12 } }\n"
                             "experiment(extend(base, { name = 'a', sync = { interval = 6 } }))\n";
  const load_result r = load_string(script, "ext.lua", test::repo_options());
  ASSERT_TRUE(r.ok()) << r.error_text();
  EXPECT_EQ(r.experiments[0].sync.fragments, 2);
  EXPECT_EQ(r.experiments[0].sync.interval, 6);
}

TEST(ConfigSweep, KeyLineIsFoundWhenTheTableIsBuiltAboveTheCall) {
  const std::string script = std::string("local base = {\n  ") + test::k_data +
                             ",\n  learners = {\n    jitter = 2,\n  },\n}\n"
                             "experiment(base)\n";
  const load_result r = load_string(script, "above.lua", test::repo_options());
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].to_string(),
            "above.lua:4: learners.jitter: 2 is out of range: must be in "
            "[0, 1)");
}

}  // namespace
}  // namespace dd::config
