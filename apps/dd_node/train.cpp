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
#include <functional>
#include <map>
#include <stdexcept>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kernels/all_backends.hpp"
#include "kernels/backend.hpp"
#include "runtime/data.hpp"
#include "runtime/gpt.hpp"
#include "runtime/trainer.hpp"
#include "util/files.hpp"
#include "util/parse.hpp"

namespace dd::app {

namespace {

struct train_flags {
  std::string data = "../shared/data/tinyshakespeare/input.txt";
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
  std::string out = "runs/train";
  int64_t checkpoint_every = 0;
  std::string resume;
  bool require_checksum = false;
  int64_t log_every = 10;
};

void print_help(FILE* f) {
  const train_flags d;
  std::fprintf(
      f, "%s",
      fmt::format(
          "usage: dd-node train [flags]\n"
          "Trains one GPT learner alone (no syncer) on a byte-level text file.\n\n"
          "  --data PATH            text file (default {})\n"
          "  --backend NAME         cpu | reference | cuda (default {})\n"
          "  --threads N            CPU threads for the backend, 0 = all (default {})\n"
          "  --steps N              inner steps (default {})\n"
          "  --batch B              sequences per step (default {})\n"
          "  --context T            sequence length = model context (default {})\n"
          "  --layers L             transformer blocks (default {})\n"
          "  --heads H              attention heads (default {})\n"
          "  --width C              model width (default {})\n"
          "  --vocab V              vocabulary size, >= 256; the data stays bytes, so V > 256\n"
          "                         only sizes the embedding and LM head (speed at a\n"
          "                         tokenizer's vocabulary, e.g. 50257) (default {})\n"
          "  --lr X                 peak learning rate (default {})\n"
          "  --warmup N             linear warmup steps (default {})\n"
          "  --min-lr-ratio X       cosine floor as a fraction of lr (default {})\n"
          "  --grad-clip X          global grad-norm clip, 0 = off (default {})\n"
          "  --weight-decay X       AdamW weight decay on 2-D weights (default {})\n"
          "  --eval-every N         validation every N steps, 0 = only at the end (default {})\n"
          "  --eval-batches N       validation batches of (B, T) (default {})\n"
          "  --seed N               model init and data order (default {})\n"
          "  --out DIR              run directory (default {})\n"
          "  --checkpoint-every N   checkpoint every N steps, 0 = only at the end (default {})\n"
          "  --resume FILE          continue from a checkpoint written by this command\n"
          "  --require-checksum     refuse a --resume file without a dd_crc32c checksum\n"
          "                         (one written by another tool; default: load it\n"
          "                         with a warning)\n"
          "  --log-every N          progress line every N steps (default {})\n"
          "  --help                 this text\n",
          d.data, d.backend, d.threads, d.steps, d.batch, d.context, d.layers, d.heads, d.width,
          d.vocab, d.lr, d.warmup, d.min_lr_ratio, d.grad_clip, d.weight_decay, d.eval_every,
          d.eval_batches, d.seed, d.out, d.checkpoint_every, d.log_every)
          .c_str());
}

struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

int64_t parse_int(const std::string& flag, const std::string& v, int64_t lo) {
  long long x = 0;
  if (!util::parse_number(v, x))
    throw usage_error(fmt::format("{} expects an integer, got '{}'", flag, v));
  if (x < lo) throw usage_error(fmt::format("{} must be >= {}, got {}", flag, lo, x));
  return x;
}

double parse_double(const std::string& flag, const std::string& v) {
  double x = 0;
  if (!util::parse_number(v, x)) {
    const bool non_finite = v.find_first_of("0123456789") != std::string::npos || v == "nan" ||
                            v == "inf" || v == "-inf" || v == "infinity";
    throw usage_error(
        fmt::format("{} expects a {}number, got '{}'", flag, non_finite ? "finite " : "", v));
  }
  return x;
}

// Returns false when --help was given.
bool parse_flags(int argc, char** argv, train_flags& f) {
  std::map<std::string, std::function<void(const std::string&)>> setters = {
      {"--data", [&](const std::string& v) { f.data = v; }},
      {"--backend",
       [&](const std::string& v) {
         if (v != "cpu" && v != "reference" && v != "cuda")
           throw usage_error(fmt::format("--backend must be cpu, reference or cuda, got '{}'", v));
         f.backend = v;
       }},
      {"--threads",
       [&](const std::string& v) { f.threads = static_cast<int>(parse_int("--threads", v, 0)); }},
      {"--steps", [&](const std::string& v) { f.steps = parse_int("--steps", v, 1); }},
      {"--batch",
       [&](const std::string& v) { f.batch = static_cast<int>(parse_int("--batch", v, 1)); }},
      {"--context",
       [&](const std::string& v) { f.context = static_cast<int>(parse_int("--context", v, 1)); }},
      {"--layers",
       [&](const std::string& v) { f.layers = static_cast<int>(parse_int("--layers", v, 1)); }},
      {"--heads",
       [&](const std::string& v) { f.heads = static_cast<int>(parse_int("--heads", v, 1)); }},
      {"--vocab",
       [&](const std::string& v) { f.vocab = static_cast<int>(parse_int("--vocab", v, 256)); }},
      {"--width",
       [&](const std::string& v) { f.width = static_cast<int>(parse_int("--width", v, 1)); }},
      {"--lr", [&](const std::string& v) { f.lr = parse_double("--lr", v); }},
      {"--warmup", [&](const std::string& v) { f.warmup = parse_int("--warmup", v, 0); }},
      {"--min-lr-ratio",
       [&](const std::string& v) { f.min_lr_ratio = parse_double("--min-lr-ratio", v); }},
      {"--grad-clip", [&](const std::string& v) { f.grad_clip = parse_double("--grad-clip", v); }},
      {"--weight-decay",
       [&](const std::string& v) { f.weight_decay = parse_double("--weight-decay", v); }},
      {"--eval-every",
       [&](const std::string& v) { f.eval_every = parse_int("--eval-every", v, 0); }},
      {"--eval-batches",
       [&](const std::string& v) {
         f.eval_batches = static_cast<int>(parse_int("--eval-batches", v, 1));
       }},
      {"--seed",
       [&](const std::string& v) { f.seed = static_cast<uint64_t>(parse_int("--seed", v, 0)); }},
      {"--out", [&](const std::string& v) { f.out = v; }},
      {"--checkpoint-every",
       [&](const std::string& v) { f.checkpoint_every = parse_int("--checkpoint-every", v, 0); }},
      {"--resume", [&](const std::string& v) { f.resume = v; }},
      {"--log-every", [&](const std::string& v) { f.log_every = parse_int("--log-every", v, 1); }},
  };
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") return false;
    if (a == "--require-checksum") {
      f.require_checksum = true;
      continue;
    }
    std::string value;
    bool has_value = false;
    if (auto eq = a.find('='); eq != std::string::npos && a.rfind("--", 0) == 0) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
      has_value = true;
    }
    auto it = setters.find(a);
    if (it == setters.end()) throw usage_error(fmt::format("unknown flag '{}'", a));
    if (!has_value) {
      if (i + 1 >= argc) throw usage_error(fmt::format("{} needs a value", a));
      value = argv[++i];
    }
    it->second(value);
  }
  return true;
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
  try {
    if (!parse_flags(argc, argv, f)) {
      print_help(stdout);
      return 0;
    }
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
