// apps/dd_node/train.cpp — `dd-node train`: one learner alone (no syncer) on a text file.
// Prints its seed, live progress (step, train loss, tokens/s, ETA), periodic validation loss and
// a final summary; writes <out>/summary.json, <out>/loss.csv and <out>/checkpoint.safetensors.
// Every write is checked (util/files.hpp): a failed one ends the run with a message naming the
// file (summary.json and the checkpoint are replaced atomically, loss.csv grows by whole lines).
// Exit codes: 0 ok, 1 runtime failure (data, checkpoint, backend, a write), 2 bad flags.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kernels/all_backends.hpp"
#include "kernels/backend.hpp"
#include "runtime/config/run_dir_default.hpp"
#include "runtime/data.hpp"
#include "runtime/gpt.hpp"
#include "runtime/trainer.hpp"
#include "util/files.hpp"
#include "util/flags.hpp"

namespace dd::app {

namespace {

struct train_flags {
  std::string data = "datasets/tinyshakespeare/input.txt";
  std::string backend = "cpu";
  int threads = 0;
  int64_t steps = 1000;
  int batch = 16;
  int context = 128;
  int layers = 4;
  int heads = 4;
  int width = 128;
  int vocab = 256;
  double lr = 3e-3;
  int64_t warmup = 50;
  double min_lr_ratio = 0.1;
  double grad_clip = 1.0;
  double weight_decay = 0.1;
  int64_t eval_every = 200;
  int eval_batches = 20;
  uint64_t seed = 1337;
  std::string out = config::default_run_dir("train");
  int64_t checkpoint_every = 0;
  std::string resume;
  bool require_checksum = false;
  int64_t log_every = 10;
};

/// The flag table of `dd-node train`, writing into `f` (whose values are the defaults shown).
util::flag_table train_table(train_flags& f) {
  const train_flags d;
  auto def = [](const auto& v) { return fmt::format(" (default {})", v); };
  constexpr auto no_max = std::numeric_limits<int64_t>::max();
  constexpr int int_max = std::numeric_limits<int>::max();
  constexpr double inf = std::numeric_limits<double>::infinity();
  util::flag_table t("dd-node train", "[flags]",
                     "Trains one GPT learner alone (no syncer) on a byte-level text file.");
  t.text("--data", &f.data, "PATH", "text file" + def(d.data))
      .custom("--backend", "NAME", "cpu | reference | cuda" + def(d.backend),
              [&f](const std::string& v) -> std::string {
                if (v != "cpu" && v != "reference" && v != "cuda")
                  return "must be cpu, reference or cuda, got '" + v + "'";
                f.backend = v;
                return {};
              })
      .count("--threads", &f.threads, 0, int_max, "N",
             "CPU threads for the backend, 0 = all" + def(d.threads))
      .count("--steps", &f.steps, int64_t{1}, no_max, "N", "inner steps" + def(d.steps))
      .count("--batch", &f.batch, 1, int_max, "B", "sequences per step" + def(d.batch))
      .count("--context", &f.context, 1, int_max, "T",
             "sequence length = model context" + def(d.context))
      .count("--layers", &f.layers, 1, int_max, "L", "transformer blocks" + def(d.layers))
      .count("--heads", &f.heads, 1, int_max, "H", "attention heads" + def(d.heads))
      .count("--width", &f.width, 1, int_max, "C", "model width" + def(d.width))
      .count("--vocab", &f.vocab, 256, int_max, "V",
             "vocabulary size, >= 256; the data stays bytes, so V > 256 only sizes the embedding "
             "and LM head (speed at a tokenizer's vocabulary, e.g. 50257)" +
                 def(d.vocab))
      .number("--lr", &f.lr, -inf, inf, "X", "peak learning rate" + def(d.lr))
      .count("--warmup", &f.warmup, int64_t{0}, no_max, "N", "linear warmup steps" + def(d.warmup))
      .number("--min-lr-ratio", &f.min_lr_ratio, -inf, inf, "X",
              "cosine floor as a fraction of lr" + def(d.min_lr_ratio))
      .number("--grad-clip", &f.grad_clip, -inf, inf, "X",
              "global grad-norm clip, 0 = off" + def(d.grad_clip))
      .number("--weight-decay", &f.weight_decay, -inf, inf, "X",
              "AdamW weight decay on 2-D weights" + def(d.weight_decay))
      .count("--eval-every", &f.eval_every, int64_t{0}, no_max, "N",
             "validation every N steps, 0 = only at the end" + def(d.eval_every))
      .count("--eval-batches", &f.eval_batches, 1, int_max, "N",
             "validation batches of (B, T)" + def(d.eval_batches))
      .count("--seed", &f.seed, uint64_t{0}, std::numeric_limits<uint64_t>::max(), "N",
             "model init and data order" + def(d.seed))
      .text("--out", &f.out, "DIR", "run directory" + def(d.out))
      .count("--checkpoint-every", &f.checkpoint_every, int64_t{0}, no_max, "N",
             "checkpoint every N steps, 0 = only at the end" + def(d.checkpoint_every))
      .text("--resume", &f.resume, "FILE", "continue from a checkpoint written by this command")
      .toggle("--require-checksum", &f.require_checksum,
              "refuse a --resume file without a dd_crc32c checksum (one written by another "
              "tool; default: load it with a warning)")
      .count("--log-every", &f.log_every, int64_t{1}, no_max, "N",
             "progress line every N steps" + def(d.log_every))
      .epilog(
          "Exit status: 0 ok; 1 runtime failure (data, checkpoint, backend, a write); 2 bad "
          "flags.\n");
  return t;
}

std::string fmt_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const auto t = static_cast<long>(s + 0.5);
  return t >= 60 ? fmt::format("{}m{:02d}s", t / 60, static_cast<int>(t % 60))
                 : fmt::format("{}s", t);
}

/// Throws std::runtime_error carrying `st`'s message (names the file and errno's text).
void check(const util::io_status& st) {
  if (!st) throw std::runtime_error(st.message);
}

}  // namespace

int train_main(int argc, char** argv) {
  train_flags f;
  trainer_config cfg;
  auto table = train_table(f);
  if (auto rc = table.parse(argc, argv)) return *rc;
  try {
    cfg.model.vocab = f.vocab;
    cfg.model.context = f.context;
    cfg.model.layers = f.layers;
    cfg.model.heads = f.heads;
    cfg.model.width = f.width;
    cfg.batch = f.batch;
    cfg.seq_len = f.context;
    cfg.schedule.lr = f.lr;
    cfg.schedule.warmup = f.warmup;
    cfg.schedule.total = f.steps;
    cfg.schedule.min_lr_ratio = f.min_lr_ratio;
    cfg.optimizer.weight_decay = static_cast<float>(f.weight_decay);
    cfg.grad_clip = f.grad_clip;
    cfg.seed = f.seed;
    cfg.validate();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dd-node train: %s\n(see dd-node train --help)\n", e.what());
    return 2;
  }

  try {
    kernels::init_all_backends();
    kernels::backend_options bo;
    bo.threads = f.threads;
    auto be = kernels::make_backend(f.backend, bo);
    const auto data = text_dataset::from_file(f.data);
    trainer tr(*be, data, cfg);
    check(util::make_dirs(f.out));
    const std::string ckpt_path = f.out + "/checkpoint.safetensors";
    const std::string csv_path = f.out + "/loss.csv";
    if (!f.resume.empty()) {
      st_read_options ro;
      ro.require_checksum = f.require_checksum;
      const auto meta = tr.load(f.resume, ro);
      if (meta.count(st_checksum_key) == 0)
        std::fprintf(stderr,
                     "dd-node train: warning: %s carries no %s checksum (written by another "
                     "tool?): loaded unchecked (--require-checksum refuses such a file)\n",
                     f.resume.c_str(), st_checksum_key);
      std::printf("resumed from %s at step %lld\n", f.resume.c_str(),
                  static_cast<long long>(tr.steps_done()));
    }
    const size_t n_params = tr.model().num_params();
    std::printf(
        "%s",
        fmt::format(
            "dd-node train: seed {} | backend {} ({} threads) | data {} ({} train / {} val bytes)\n"
            "model: {} layers, {} heads, width {}, context {}, {} parameters | batch {}x{} | "
            "{} steps, lr {} warmup {} cosine to {}x\n",
            f.seed, be->name(), f.threads, f.data, data.train().size(), data.validation().size(),
            f.layers, f.heads, f.width, f.context, n_params, f.batch, f.context, f.steps, f.lr,
            f.warmup, f.min_lr_ratio)
            .c_str());
    std::fflush(stdout);

    util::append_file csv;
    check(csv.open(csv_path, /*truncate=*/f.resume.empty()));
    if (f.resume.empty()) check(csv.append("step,tokens,train_loss,val_loss,lr,elapsed_seconds\n"));

    const auto t_start = std::chrono::steady_clock::now();
    auto elapsed = [&] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
    };
    const int64_t first_step = tr.steps_done();
    int64_t tokens_run = 0;
    double compute_seconds = 0.0;
    double window_loss = 0.0;
    int window_n = 0;
    double last_val = NAN;
    int skipped = 0;
    while (tr.steps_done() < f.steps) {
      const step_result r = tr.step();
      tokens_run += r.tokens;
      compute_seconds += r.seconds;
      if (!r.applied) {
        ++skipped;
        std::fprintf(stderr, "step %lld: non-finite loss or gradient, update skipped\n",
                     static_cast<long long>(r.step));
        if (skipped > 10) throw std::runtime_error("more than 10 non-finite steps; giving up");
        continue;
      }
      window_loss += r.loss;
      ++window_n;
      const int64_t done = tr.steps_done();
      std::string val_field;
      if ((f.eval_every > 0 && done % f.eval_every == 0) || done == f.steps) {
        const auto t0 = std::chrono::steady_clock::now();
        last_val = tr.evaluate(f.eval_batches);
        const double es =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::printf("step %6lld | val loss %.4f nats/char (%d batches, %.1fs)\n",
                    static_cast<long long>(done), last_val, f.eval_batches, es);
        val_field = fmt::format("{:.6f}", last_val);
      }
      check(csv.append(fmt::format("{},{},{:.6f},{},{:.6g},{:.3f}\n", done, tr.tokens_seen(),
                                   r.loss, val_field, r.lr, elapsed())));
      if (done % f.log_every == 0 || done == f.steps) {
        const double tps = static_cast<double>(tokens_run) / compute_seconds;
        const double per_step = elapsed() / static_cast<double>(done - first_step);
        std::printf("step %6lld/%lld | loss %.4f | lr %.2e | %.0f tok/s | elapsed %s | ETA %s\n",
                    static_cast<long long>(done), static_cast<long long>(f.steps),
                    window_loss / window_n, r.lr, tps, fmt_duration(elapsed()).c_str(),
                    fmt_duration(per_step * static_cast<double>(f.steps - done)).c_str());
        std::fflush(stdout);
        window_loss = 0.0;
        window_n = 0;
      }
      if (f.checkpoint_every > 0 && done % f.checkpoint_every == 0 && done != f.steps)
        tr.save(ckpt_path);
    }
    check(csv.close());
    tr.save(ckpt_path);
    const double wall = elapsed();
    if (std::isnan(last_val)) last_val = tr.evaluate(f.eval_batches);
    nlohmann::json summary = {
        {"final_val_loss", last_val},
        {"tokens", tr.tokens_seen()},
        {"steps", tr.steps_done()},
        {"wall_seconds", wall},
        {"tokens_per_second", static_cast<double>(tokens_run) / wall},
        // Tokens over the time spent in training steps only (no evaluation, no checkpoint).
        {"compute_tokens_per_second", static_cast<double>(tokens_run) / compute_seconds},
        {"parameters", n_params},
        {"seed", f.seed},
        {"backend", be->name()},
        {"threads", f.threads},
        {"config",
         {{"model", cfg.model.to_json()},
          {"batch", f.batch},
          {"lr", f.lr},
          {"warmup", f.warmup},
          {"min_lr_ratio", f.min_lr_ratio},
          {"grad_clip", f.grad_clip},
          {"weight_decay", f.weight_decay},
          {"eval_batches", f.eval_batches},
          {"data", f.data}}},
    };
    const std::string summary_path = f.out + "/summary.json";
    check(util::write_file_atomic(summary_path, summary.dump(2) + "\n"));
    std::printf(
        "%s",
        fmt::format(
            "done: {} steps, {} tokens in {} ({:.0f} tok/s) | final val loss {:.4f} nats/char\n"
            "wrote {}, {}, {}\n",
            tr.steps_done(), tr.tokens_seen(), fmt_duration(wall),
            static_cast<double>(tokens_run) / wall, last_val, summary_path, csv_path, ckpt_path)
            .c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dd-node train: error: %s\n", e.what());
    return 1;
  }
}

}  // namespace dd::app
