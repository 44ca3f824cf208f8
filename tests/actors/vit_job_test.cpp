// tests/actors/vit_job_test.cpp — the vision transformer trained by the cluster end to end
// (run_job, the job `dd-node run` starts; real scheduler): a tiny ViT on MNIST t10k
// (data.kind = "idx") with 2 learners and 2 fragments finishes, its final evaluation reports an
// accuracy above chance (summary.json final_val_accuracy, the eval event's val_accuracy), and
// model.safetensors holds the very model that evaluation scored (same loss and accuracy on the
// whole validation split when evaluated again).
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "actors/nodes/job_runner.hpp"
#include "kernels/backend.hpp"
#include "runtime/idx.hpp"
#include "runtime/model_file.hpp"
#include "runtime/vit.hpp"
#include "tests/actors/test_support.hpp"

namespace dd::actors {
namespace {

config::experiment tiny_vit(const std::string& name) {
  auto e = test::named_experiment(name, 5);
  e.data.kind = config::data_kind::idx;
  e.data.file.clear();
  e.data.images = std::string(DD_DATA_DIR) + "/mnist-t10k/t10k-images-idx3-ubyte.gz";
  e.data.labels = std::string(DD_DATA_DIR) + "/mnist-t10k/t10k-labels-idx1-ubyte.gz";
  e.data.train_fraction = 0.8;
  e.model.kind = config::model_kind::vit;
  e.model.layers = 1;
  e.model.width = 32;
  e.model.heads = 2;
  e.model.pooling = "mean";
  test::set_small_training(e, 2, 32, 10, 8, 600);
  e.eval.every_seconds = 0;
  e.restart.backoff_base_s = 0.01;
  return e;
}

nlohmann::json read_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

TEST(vit_job, trains_mnist_reports_accuracy_and_writes_the_model) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / "dd_vit_job";
  std::filesystem::remove_all(dir);
  run_options ro;
  ro.progress_every_s = 0;
  ro.run_dir = dir.string();
  const auto e = tiny_vit("vit_tiny");
  std::printf("vit_job: seed %llu\n", static_cast<unsigned long long>(e.seed));
  auto r = run_job(e, ro);
  ASSERT_TRUE(r.finished);
  ASSERT_FALSE(r.failed) << r.failure_reason;
  const auto summary = read_json(dir / "summary.json");
  ASSERT_TRUE(summary.contains("final_val_accuracy")) << summary.dump();
  const double acc = summary["final_val_accuracy"].get<double>();
  const double loss = summary["final_val_loss"].get<double>();
  std::printf("vit_job: final_val_loss %.4f final_val_accuracy %.4f\n", loss, acc);
  // 10 classes: chance is 0.1 and ln 10 = 2.303 nats. 2 x 600 steps x 32 images (4.8 epochs of
  // the 8,000 train images) get well past both.
  EXPECT_GT(acc, 0.5);
  EXPECT_LT(loss, 2.0);
  // Every learner step counts its batch of images as "tokens".
  EXPECT_EQ(summary["tokens"].get<uint64_t>(), 2u * 600u * 32u);
  const auto fe = summary["final_eval"];
  EXPECT_EQ(fe["data_kind"], "idx");
  EXPECT_EQ(fe["validation_first"], 8000);
  EXPECT_EQ(fe["validation_samples"], 2000);
  EXPECT_EQ(fe["batch"], 32);
  EXPECT_EQ(fe["covers_split"], true);
  EXPECT_EQ(summary["model_file"], "model.safetensors");

  // The eval event carries the accuracy too.
  bool eval_seen = false;
  std::ifstream ev(dir / "events.jsonl");
  for (std::string line; std::getline(ev, line);) {
    auto j = nlohmann::json::parse(line);
    if (j.value("event", std::string()) != "eval") continue;
    eval_seen = true;
    ASSERT_TRUE(j.contains("val_accuracy")) << line;
    EXPECT_GE(j["val_accuracy"].get<double>(), 0.0);
    EXPECT_LE(j["val_accuracy"].get<double>(), 1.0);
  }
  EXPECT_TRUE(eval_seen);

  // The model file: kind vit, its metadata's loss and accuracy are the summary's, and the model
  // evaluated again on the same backend (cpu, 1 thread, as the evaluator) gives both to the bit.
  auto be = kernels::make_backend("cpu", {1, 0});
  auto m = read_any_model_file(dir.string(), *be);
  EXPECT_EQ(m.metadata.at("model_kind"), "vit");
  EXPECT_EQ(m.model->config().kind, "vit");
  EXPECT_EQ(std::stod(m.metadata.at("val_loss")), loss);
  EXPECT_EQ(std::stod(m.metadata.at("val_accuracy")), acc);
  EXPECT_EQ(nlohmann::json::parse(m.metadata.at("eval")), fe);
  const auto data = image_dataset::from_files(e.data.images, e.data.labels, 0.8, 10);
  const auto again = dynamic_cast<vit&>(*m.model).evaluate(data, 32);
  EXPECT_EQ(again.loss, loss);
  EXPECT_EQ(again.accuracy, acc);
  EXPECT_EQ(again.samples, 2000u);
}

}  // namespace
}  // namespace dd::actors
