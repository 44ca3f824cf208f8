// apps/dd_node/eval.cpp — `dd-node eval RUN_DIR|FILE [--data FILE] [...]`: the validation loss
// of a trained model on the windows its run scored (runtime/model_file.hpp, eval_spec). The
// windows come from the model file's metadata "eval" (written by every run's final
// evaluation), else from RUN_DIR/summary.json's "final_eval", else from the flags' defaults;
// --data evaluates on another file's validation split with the same batch shape. Prints one
// line with the loss, the windows and, when the run recorded one, the run's own loss and the
// difference. Exit codes: 0 ok, 1 runtime failure (model, data, backend), 2 bad flags.
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "apps/dd_node/commands.hpp"
#include "apps/dd_node/node_flags.hpp"
#include "kernels/all_backends.hpp"
#include "kernels/backend.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/data.hpp"
#include "runtime/eval.hpp"
#include "runtime/idx.hpp"
#include "runtime/model_file.hpp"
#include "runtime/vit.hpp"
#include "util/flags.hpp"
#include "util/parse.hpp"

namespace dd::app {

namespace {

/// The run's windows: the model file's "eval" metadata, else summary.json's "final_eval" next
/// to it; nullopt when neither is there. Throws std::runtime_error for one that is malformed.
std::optional<eval_spec> recorded_spec(const std::string& path,
                                       const std::map<std::string, std::string>& metadata) {
  if (auto it = metadata.find("eval"); it != metadata.end()) {
    try {
      return eval_spec::from_json(nlohmann::json::parse(it->second));
    } catch (const std::exception& e) {
      throw std::runtime_error(fmt::format("model '{}': metadata 'eval': {}", path, e.what()));
    }
  }
  const auto summary = std::filesystem::path(path).parent_path() / "summary.json";
  std::ifstream in(summary);
  if (!in) return std::nullopt;
  auto j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("final_eval")) return std::nullopt;
  try {
    return eval_spec::from_json(j["final_eval"]);
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format("'{}': final_eval: {}", summary.string(), e.what()));
  }
}

/// A ViT model file (model_kind "vit"): loss and accuracy over the whole validation split of the
/// IDX pair its run's "eval" metadata names (actors/nodes/job_runner.hpp final_eval_json), in
/// batches of the run's batch (or --batch). --data / --batches do not apply. Returns the exit
/// status.
int eval_vit(const std::string& path, const std::map<std::string, std::string>& metadata,
             const std::string& backend, int threads, std::optional<double> train_fraction,
             std::optional<int> batch) {
  auto it = metadata.find("eval");
  if (it == metadata.end())
    throw std::invalid_argument(
        fmt::format("model '{}' (kind vit) records no evaluation (no metadata 'eval')", path));
  nlohmann::json ev;
  std::string images, labels;
  double fraction = 0.8;
  int B = 32;
  std::string run_backend = "cpu";
  try {
    ev = nlohmann::json::parse(it->second);
    images = ev.at("images").get<std::string>();
    labels = ev.at("labels").get<std::string>();
    fraction = ev.at("train_fraction").get<double>();
    B = ev.at("batch").get<int>();
    run_backend = ev.value("backend", std::string("cpu"));
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format("model '{}': metadata 'eval': {}", path, e.what()));
  }
  const bool same = !train_fraction && !batch;
  if (train_fraction) fraction = *train_fraction;
  if (batch) B = *batch;
  auto m = load_model(path, !backend.empty() ? backend : run_backend, threads);
  const auto cfg = m.model->config().vit;
  const auto ds = image_dataset::from_files(images, labels, fraction, cfg.classes);
  const auto r = dynamic_cast<vit&>(*m.model).evaluate(ds, B);
  std::string line = fmt::format(
      "val_loss {:.6f} nats/image, val_accuracy {:.4f} on the {} validation images of {} "
      "(samples [{}, {}), train_fraction {}), batch {}, backend {}",
      r.loss, r.accuracy, r.samples, images, ds.train_size(), ds.train_size() + r.samples, fraction,
      B, m.backend->name());
  double run_loss = 0, run_acc = 0;
  auto l = m.metadata.find("val_loss"), a = m.metadata.find("val_accuracy");
  if (same && l != m.metadata.end() && a != m.metadata.end() &&
      util::parse_number(l->second, run_loss) && util::parse_number(a->second, run_acc))
    line += fmt::format("; the run recorded {:.6f} / {:.4f} (differences {:.2e} / {:.2e})",
                        run_loss, run_acc, r.loss - run_loss, r.accuracy - run_acc);
  std::printf("%s\n", line.c_str());
  return 0;
}

}  // namespace

/// Entry point of `dd-node eval`; argv[0] is "eval".
int eval_main(int argc, char** argv) {
  std::string data;
  std::optional<double> train_fraction;
  std::optional<int> batch, batches;
  std::optional<std::int64_t> windows;
  model_args m_args;  // backend "": the one the run evaluated on, else cpu
  // A whole number in 1..2^20 into an optional (unset: the run's value).
  auto optional_count = [](std::optional<int>* out) {
    return [out](const std::string& v) -> std::string {
      int n = 0;
      if (!util::parse_number_in(v, n, 1, 1 << 20))
        return "needs a whole number in 1..1048576, got '" + v + "'";
      *out = n;
      return {};
    };
  };
  util::flag_table t(
      "dd-node eval", "RUN_DIR|FILE [flags]",
      "Reports the validation loss (nats/token) of a trained GPT or MoE GPT — RUN_DIR's\n"
      "model.safetensors (dd-node run / syncer / launch) or checkpoint.safetensors\n"
      "(dd-node train), or the safetensors FILE given — on the windows its run's final\n"
      "evaluation scored: the file's metadata \"eval\" (else RUN_DIR/summary.json\n"
      "\"final_eval\"): data file, train fraction, sequence length T, windows.");
  add_model_flags(t, m_args, "the backend the run evaluated on, else cpu");
  t.text("--data", &data, "FILE", "evaluate on this text file's validation split instead")
      .custom("--train-fraction", "X",
              "split point of the data, in (0, 1) (default: the run's, else 0.9)",
              [&](const std::string& v) -> std::string {
                double x = 0;
                if (!util::parse_number(v, x) || !(x > 0.0 && x < 1.0))
                  return "needs a number in (0, 1), got '" + v + "'";
                train_fraction = x;
                return {};
              })
      .custom("--batch", "B",
              "windows per forward pass; changes no window (default: the run's, else 16)",
              optional_count(&batch))
      .custom("--windows", "N",
              "score the first N windows of T + 1 tokens; 0 = the whole validation split "
              "(default: the run's, else 0)",
              [&](const std::string& v) -> std::string {
                std::int64_t n = 0;
                if (!util::parse_number_in(v, n, std::int64_t{0}, std::int64_t{1} << 30))
                  return "needs a whole number in 0..1073741824, got '" + v + "'";
                windows = n;
                return {};
              })
      .custom("--batches", "N", "deprecated: N x B windows (use --windows)",
              optional_count(&batches))
      .epilog(
          "T is the model's context unless the run recorded another. Output: one line,\n"
          "\"val_loss X nats/token on N windows ...\", and the run's recorded loss when known.\n"
          "A vit model (data.kind = \"idx\") is evaluated on the whole validation split of the\n"
          "IDX images and labels its run recorded: \"val_loss X nats/image, val_accuracy Y ...\"\n"
          "(--train-fraction, --batch, --backend, --threads apply; --data, --batches do not).\n"
          "Exit status: 0 ok; 1 unreadable model or data, backend failure; 2 bad flags.\n");
  if (auto rc = t.parse(argc, argv)) return *rc;
  const std::string& where = m_args.where.front();
  const std::string& backend = m_args.backend;
  const int threads = m_args.threads;
  try {
    kernels::init_all_backends();
    // The metadata first: it names the windows and the backend the run evaluated on.
    const std::string path = resolve_model_path(where);
    const auto file_meta = read_safetensors(path).metadata;
    if (auto k = file_meta.find("model_kind"); k != file_meta.end() && k->second == "vit") {
      if (!data.empty() || batches || windows)
        throw std::invalid_argument(
            "--data, --windows and --batches do not apply to a vit model: it is evaluated on "
            "the whole "
            "validation split of the IDX pair its run recorded");
      return eval_vit(path, file_meta, backend, threads, train_fraction, batch);
    }
    const std::optional<eval_spec> rec = recorded_spec(path, file_meta);
    auto m = load_model(path,
                        !backend.empty() ? backend
                        : rec            ? rec->backend
                                         : std::string("cpu"),
                        threads);
    eval_spec spec;
    if (rec) spec = *rec;
    spec.seq_len = rec ? rec->seq_len : m.model->config().context;
    if (!data.empty()) spec.data_file = data;
    if (train_fraction) spec.train_fraction = *train_fraction;
    if (batch) spec.batch = *batch;
    if (!rec) spec.windows = 0;
    if (batches) {
      spec.windows = static_cast<std::int64_t>(*batches) * spec.batch;
      std::fprintf(stderr,
                   "dd-node eval: warning: --batches is deprecated: it scores %d x %d = %lld "
                   "windows; write --windows %lld\n",
                   *batches, spec.batch, static_cast<long long>(spec.windows),
                   static_cast<long long>(spec.windows));
    }
    if (windows) spec.windows = *windows;
    if (spec.data_file.empty())
      throw std::invalid_argument(fmt::format(
          "model '{}' records no evaluation (no metadata 'eval', no summary.json final_eval): "
          "pass --data FILE",
          m.path));
    const text_dataset ds = [&] {
      try {
        if (!data.empty()) {  // --data names a text file
          spec.token_files.clear();
          return text_dataset::from_file(spec.data_file, spec.train_fraction);
        }
        return spec.load_data();
      } catch (const std::exception& e) {
        throw std::runtime_error(fmt::format(
            "{}{}", e.what(),
            data.empty() ? " (the file the run evaluated on; pass --data FILE to name it here)"
                         : ""));
      }
    }();
    const bool same_split = rec && ds.train().size() == rec->validation_offset &&
                            ds.validation().size() == rec->validation_tokens;
    spec.validation_offset = ds.train().size();
    spec.validation_tokens = ds.validation().size();
    if (spec.windows == 0) spec.windows = windows_in_split(spec.validation_tokens, spec.seq_len);
    const double loss =
        evaluate_windows(*m.model, ds.validation(), spec.batch, spec.seq_len, spec.windows);
    const double bpb = loss * spec.bits_per_byte_per_nat(ds);
    std::string line = fmt::format(
        "val_loss {:.6f} nats/token{} on {} windows of {} tokens{} of {}, backend {}", loss,
        std::isfinite(bpb) ? fmt::format(" ({:.6f} bits/byte)", bpb) : std::string(), spec.windows,
        spec.seq_len, spec.covers_split() ? " (the whole split)" : "", spec.split_description(),
        m.backend->name());
    if (auto it = m.metadata.find("val_loss"); it != m.metadata.end() && rec) {
      double run_loss = 0;
      if (util::parse_number(it->second, run_loss) && same_split && spec.windows == rec->windows &&
          spec.seq_len == rec->seq_len)
        line += fmt::format("; the run recorded {:.6f} on these windows (difference {:.2e})",
                            run_loss, loss - run_loss);
      else if (!same_split)
        line +=
            fmt::format("; not the run's windows (the run's split: tokens [{}, {}))",
                        rec->validation_offset, rec->validation_offset + rec->validation_tokens);
    }
    std::printf("%s\n", line.c_str());
    return 0;
  } catch (const std::exception&) {
    return exit_status_of_exception("dd-node eval");
  }
}

}  // namespace dd::app
