// tools/bench/bench_train.cpp — dd-bench-train: how close the training step gets to the
// machine's sgemm speed.
//
// Prints, from one run:
//  1. OpenBLAS cblas_sgemm GFLOP/s at each of the model's matmul shapes (forward orientation
//     out(N,OC) = in(N,IC)·W(OC,IC)ᵀ with N = B·T), with OpenBLAS using the same thread count as
//     training, and the time-weighted mix over one forward pass's matmuls;
//  2. the training step's achieved GFLOP/s = model FLOPs per token × tokens/s, with FLOPs per
//     token = 6·(L·12·C² + V·C) + 6·L·T·C (gpt_flops_per_token: matmul weights incl. the tied
//     LM head, attention counted causally — see runtime/gpt.hpp);
//  3. the ratio achieved / sgemm mix (target >= 0.8 at 10.8M and 25M parameters);
//  4. with --profile, the per-op profile of the timed steps (tools/bench/profiling_backend.hpp):
//     ms per step and share of the step for every backend op, matmuls by shape with their
//     GFLOP/s and that as a fraction of the sgemm GFLOP/s at the same shape from part 1 (forward
//     orientation; a backward matmul is two sgemms in other orientations).
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "kernels/all_backends.hpp"
#include "kernels/backend.hpp"
#include "runtime/data.hpp"
#include "runtime/gpt.hpp"
#include "runtime/trainer.hpp"
#include "tools/bench/bench_util.hpp"
#include "tools/bench/profiling_backend.hpp"
#include "util/flags.hpp"

namespace {

using dd::bench::now;

// Best-of-repeats seconds of one sgemm of the given shape.
double time_sgemm(int N, int IC, int OC, int repeats) {
  std::vector<float> a(static_cast<size_t>(N) * IC, 0.5f), w(static_cast<size_t>(OC) * IC, 0.25f),
      out(static_cast<size_t>(N) * OC);
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const double t0 = now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, IC, 1.0f, a.data(), IC, w.data(),
                IC, 0.0f, out.data(), OC);
    best = std::min(best, now() - t0);
  }
  return best;
}

/// The per-op table of --profile: ms per step, share of the step, and for matmuls GFLOP/s and
/// that over the sgemm GFLOP/s measured at the same (IC, OC) in part 1.
void print_profile(const dd::bench::profiling_backend& prof, double step_seconds, int steps,
                   const std::map<std::pair<int, int>, double>& sgemm_at) {
  std::vector<std::pair<std::string, dd::bench::profiling_backend::entry>> rows(
      prof.entries().begin(), prof.entries().end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  double in_ops = 0;
  for (const auto& r : rows) in_ops += r.second.seconds;
  std::printf("per-op profile (%d steps; %% of the trainer's step time):\n", steps);
  std::printf("  %-34s %8s %9s %7s %9s %9s\n", "op", "calls/st", "ms/step", "share", "GFLOP/s",
              "/sgemm");
  for (const auto& [name, e] : rows) {
    std::string gf = "", rel = "";
    if (e.flops > 0) {
      const double g = e.flops / e.seconds * 1e-9;
      gf = fmt::format("{:.1f}", g);
      int ic = 0, oc = 0;
      if (std::sscanf(name.c_str(), "%*s %d->%d", &ic, &oc) == 2) {
        auto it = sgemm_at.find({ic, oc});
        if (it != sgemm_at.end()) rel = fmt::format("{:.2f}", g / it->second);
      }
    }
    std::printf("  %-34s %8.1f %9.2f %6.1f%% %9s %9s\n", name.c_str(),
                static_cast<double>(e.calls) / steps, e.seconds / steps * 1e3,
                100.0 * e.seconds / step_seconds, gf.c_str(), rel.c_str());
  }
  std::printf("  %-34s %8s %9.2f %6.1f%%\n", "outside backend ops", "",
              (step_seconds - in_ops) / steps * 1e3,
              100.0 * (step_seconds - in_ops) / step_seconds);
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, steps = 30;
  bool profile = false;
  dd::trainer_config cfg;
  cfg.batch = 16;
  cfg.model.context = 128;
  cfg.model.layers = 4;
  cfg.model.heads = 4;
  cfg.model.width = 128;
  constexpr int big = 1 << 20;
  dd::util::flag_table flags("dd-bench-train", "[flags]",
                             "CPU sgemm GFLOP/s at the model's shapes against the training step's "
                             "achieved GFLOP/s.");
  flags.count("--threads", &threads, 1, 4096, "N", "OpenBLAS threads (default 2)")
      .count("--steps", &steps, 1, big, "N", "training steps measured (default 30)")
      .count("--batch", &cfg.batch, 1, big, "B", "sequences per step (default 16)")
      .count("--context", &cfg.model.context, 1, big, "T", "sequence length (default 128)")
      .count("--layers", &cfg.model.layers, 1, 1024, "L", "transformer blocks (default 4)")
      .count("--heads", &cfg.model.heads, 1, 1024, "H", "attention heads (default 4)")
      .count("--width", &cfg.model.width, 1, big, "C", "model width (default 128)")
      .toggle("--profile", &profile, "per-op time of the timed steps, after the summary")
      .epilog("Exit status: 0 ok; 1 failure; 2 bad flags.\n");
  if (auto rc = flags.parse(argc, argv)) return *rc;
  cfg.seq_len = cfg.model.context;
  cfg.schedule = dd::lr_schedule{1e-3, 10, 1000, 0.1};
  try {
    dd::kernels::init_all_backends();
    auto be = dd::kernels::make_backend("cpu", {threads, 0});  // sets OpenBLAS to 1 thread
    const int N = cfg.batch * cfg.seq_len, C = cfg.model.width, V = cfg.model.vocab,
              L = cfg.model.layers;

    // ---- 1. sgemm at the model's shapes, OpenBLAS with `threads` threads ----
    openblas_set_num_threads(threads);
    struct shape {
      const char* what;
      int IC, OC, per_pass;
    };
    const shape shapes[] = {{"attn.qkv", C, 3 * C, L},
                            {"attn.proj", C, C, L},
                            {"mlp.fc", C, 4 * C, L},
                            {"mlp.proj", 4 * C, C, L},
                            {"lm_head", C, V, 1}};
    std::printf(
        "dd-bench-train: threads %d | model L=%d C=%d V=%d T=%d | batch %d (N = B*T = %d rows)\n",
        threads, L, C, V, cfg.seq_len, cfg.batch, N);
    std::printf("cblas_sgemm (OpenBLAS, %d threads), out(N,OC) = in(N,IC) * W^T:\n", threads);
    double mix_flops = 0, mix_seconds = 0;
    std::map<std::pair<int, int>, double> sgemm_at;  // (IC, OC) -> GFLOP/s
    for (const auto& s : shapes) {
      time_sgemm(N, s.IC, s.OC, 3);  // warm up
      const double t = time_sgemm(N, s.IC, s.OC, 20);
      const double fl = 2.0 * N * s.IC * s.OC;
      std::printf("  %-10s IC=%4d OC=%4d : %7.1f GFLOP/s\n", s.what, s.IC, s.OC, fl / t * 1e-9);
      sgemm_at[{s.IC, s.OC}] = fl / t * 1e-9;
      mix_flops += fl * s.per_pass;
      mix_seconds += t * s.per_pass;
    }
    const double sgemm_gflops = mix_flops / mix_seconds * 1e-9;
    std::printf("  mix of one forward pass       : %7.1f GFLOP/s\n", sgemm_gflops);
    openblas_set_num_threads(1);  // back to the cpu backend's setting

    // ---- 2. training steps ----
    const auto data = dd::text_dataset::from_file("datasets/tinyshakespeare/input.txt");
    // With --profile every op goes through a timing wrapper (one clock read pair per op).
    dd::bench::profiling_backend prof(*be);
    dd::kernels::backend& run_be = profile ? static_cast<dd::kernels::backend&>(prof) : *be;
    dd::trainer tr(run_be, data, cfg);
    for (int i = 0; i < 3; ++i) tr.step();  // warm up (allocation, caches)
    prof.reset();
    double secs = 0;
    int64_t tokens = 0;
    for (int i = 0; i < steps; ++i) {
      const auto r = tr.step();
      secs += r.seconds;
      tokens += r.tokens;
    }
    const double tps = static_cast<double>(tokens) / secs;
    const double fpt = dd::gpt_flops_per_token(cfg.model, cfg.seq_len);
    const double step_gflops = fpt * tps * 1e-9;
    std::printf("training step (cpu backend, %d threads, %d steps): %.0f tokens/s, %.0f ms/step\n",
                threads, steps, tps, secs / steps * 1e3);
    std::printf("model FLOPs/token = 6*(L*12*C^2 + V*C) + 6*L*T*C (causal attention) = %.3g\n",
                fpt);
    std::printf("achieved: %.1f GFLOP/s | sgemm mix: %.1f GFLOP/s | ratio %.2f (target >= 0.8)\n",
                step_gflops, sgemm_gflops, step_gflops / sgemm_gflops);
    if (profile) print_profile(prof, secs, steps, sgemm_at);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dd-bench-train: error: %s\n", e.what());
    return 1;
  }
}
