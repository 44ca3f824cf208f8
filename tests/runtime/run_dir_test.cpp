// runtime/run_dir.hpp: what a resume may change of the run's experiment.
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "runtime/run_dir.hpp"
#include "tests/support/fresh_dir.hpp"

namespace {

namespace fs = std::filesystem;

nlohmann::json experiment_at(const std::string& run_dir, const std::string& checkpoint_dir) {
  return {{"name", "tiny"},
          {"run_dir", run_dir},
          {"model", {{"width", 32}}},
          {"checkpoint", {{"dir", checkpoint_dir}, {"every", 1}}}};
}

fs::path run_dir_with(const std::string& name, const nlohmann::json& experiment) {
  const fs::path dir = dd::test::fresh_dir(name);
  std::ofstream(dir / "experiment.json") << experiment.dump(2);
  return dir;
}

}  // namespace

// Regression: a run directory copied elsewhere names its old place in checkpoint.dir; resuming
// the copy is not refused as another experiment ("/checkpoint/dir: runs/a/checkpoints in the
// run, runs/b/checkpoints now").
TEST(run_dir, a_copied_run_directory_resumes_its_checkpoint_dir_is_relative_to_it) {
  const fs::path dir = run_dir_with("copied", experiment_at("runs/a", "runs/a/checkpoints"));
  EXPECT_EQ(dd::experiment_change_on_resume(
                dir.string(), experiment_at("/elsewhere/b", "/elsewhere/b/checkpoints")),
            "");
  EXPECT_EQ(dd::experiment_change_on_resume(dir.string(),
                                            experiment_at("runs/b/", "runs/b/./checkpoints")),
            "");
  // A checkpoint directory outside the run directory stays as it was named, and another one
  // inside it is another place.
  const auto moved_out =
      dd::experiment_change_on_resume(dir.string(), experiment_at("runs/b", "/data/checkpoints"));
  EXPECT_NE(moved_out.find("/checkpoint/dir: \"<run_dir>/checkpoints\" in the run, "
                           "\"/data/checkpoints\" now"),
            std::string::npos)
      << moved_out;
  EXPECT_NE(dd::experiment_change_on_resume(dir.string(), experiment_at("runs/b", "runs/b/ck")),
            "");
  const fs::path outside = run_dir_with("outside", experiment_at("runs/a", "/shared/ck"));
  EXPECT_EQ(
      dd::experiment_change_on_resume(outside.string(), experiment_at("runs/b", "/shared/ck")), "");
  EXPECT_NE(dd::experiment_change_on_resume(outside.string(), experiment_at("runs/b", "/other/ck")),
            "");
}
