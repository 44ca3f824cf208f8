// tests/actors/implausible_push_test.cpp — the plausibility gate against a learner that pushes
// finite but absurd values: the main job (examples/shakespeare.lua, its model
// and sync) on a short steps budget, once clean and once each with one learner's push scaled by
// 1000 (scale_push) and replaced by random values of the right shape (random_push), both applied
// by the link's fault filter as the push leaves the learner's node. The owner refuses the push
// as implausible (counted in summary.json), the global model stays finite and the final loss
// stays within 1% of the clean run's at the same budget and seed. Three runs of about 25 s each
// on an idle machine.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "actors/nodes/job_runner.hpp"
#include "runtime/config/loader.hpp"

namespace dd::actors {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

/// The step budget: the fault strikes at step 48, after every fragment's owner has accepted at
/// least 4 pushes (the gate's median needs 4), and the run goes on for another merge round.
constexpr int steps = 72;
constexpr uint64_t fault_step = 48;

config::experiment main_job() {
  config::load_options lo;
  lo.overrides = {"budget={steps=" + std::to_string(steps) + "}", "eval.every_seconds=0",
                  "data.file=" + std::string(DD_DATA_DIR) + "/tinyshakespeare/input.txt"};
  const auto loaded =
      config::load_file(std::string(DD_SOURCE_DIR) + "/examples/shakespeare.lua", lo);
  EXPECT_TRUE(loaded.ok()) << loaded.error_text();
  return loaded.experiments.at(0);
}

struct outcome {
  json summary;
  size_t edited = 0;   ///< push_scaled / push_randomized events
  size_t refused = 0;  ///< pushes refused as implausible (events)
  double loss = 0.0;   ///< final validation loss
};

/// Runs the main job into a fresh `dir` with `action` (scale_push, random_push; none when
/// `edit_event` is empty) on learner 1's next push after step `fault_step`.
outcome run(const fs::path& dir, const std::string& action, const std::string& edit_event) {
  auto e = main_job();
  if (!action.empty()) {
    config::chaos_event ev;
    ev.trigger = config::chaos_trigger::at_step;
    ev.at = static_cast<double>(fault_step);
    ev.action = *config::fault_kind_from(action);
    ev.target = 1;
    ev.params["count"] = 1;
    if (ev.action == config::fault_kind::scale_push) ev.factor = 1000.0;
    if (ev.action == config::fault_kind::random_push) ev.params["seed"] = 7;
    e.chaos.events.push_back(ev);
  }
  fs::remove_all(dir);
  run_options ro;
  ro.progress_every_s = 0;
  ro.run_dir = dir.string();
  const auto r = run_job(e, ro);
  EXPECT_TRUE(r.finished);
  EXPECT_FALSE(r.failed) << r.failure_reason;
  outcome o;
  std::ifstream s(dir / "summary.json");
  o.summary = json::parse(s);
  o.loss = o.summary.value("final_val_loss", std::nan(""));
  std::ifstream in(dir / "events.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto ev = json::parse(line);
    if (!edit_event.empty() && ev.value("event", "") == edit_event) ++o.edited;
    if (ev.value("event", "") == "push" && ev.value("reason", "") == "implausible") ++o.refused;
  }
  return o;
}

TEST(implausible_push, scaled_and_random_pushes_are_refused_and_the_loss_stays_within_1_percent) {
  const fs::path base = fs::path(testing::TempDir()) / "implausible_push";
  const auto clean = run(base / "clean", "", "");
  const auto scaled = run(base / "scale", "scale_push", "push_scaled");
  const auto random = run(base / "random", "random_push", "push_randomized");
  std::printf(
      "final val loss: clean %.4f, scale_push x1000 %.4f (%+.2f%%), random_push %.4f "
      "(%+.2f%%); implausible pushes %llu / %llu\n",
      clean.loss, scaled.loss, 100.0 * (scaled.loss / clean.loss - 1.0), random.loss,
      100.0 * (random.loss / clean.loss - 1.0),
      static_cast<unsigned long long>(scaled.summary.value("pushes_implausible", 0)),
      static_cast<unsigned long long>(random.summary.value("pushes_implausible", 0)));
  EXPECT_EQ(clean.summary.value("pushes_implausible", 99), 0);
  EXPECT_EQ(clean.refused, 0u);
  for (const auto* o : {&scaled, &random}) {
    EXPECT_EQ(o->edited, 1u) << "the fault altered one push";
    EXPECT_EQ(o->summary.value("pushes_implausible", 0), 1) << "and its owner refused it";
    EXPECT_EQ(o->refused, 1u);
    EXPECT_TRUE(std::isfinite(o->loss));
    EXPECT_LT(std::abs(o->loss / clean.loss - 1.0), 0.01)
        << "clean " << clean.loss << ", faulted " << o->loss;
  }
}

}  // namespace
}  // namespace dd::actors
