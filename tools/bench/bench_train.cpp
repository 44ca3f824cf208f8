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
//  3. the ratio achieved / sgemm mix (the foundation issue's target is >= 0.4).
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kernels/all_backends.hpp"
#include "kernels/backend.hpp"
#include "runtime/data.hpp"
#include "runtime/gpt.hpp"
#include "runtime/trainer.hpp"
#include "tools/bench/bench_flags.hpp"

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

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

using dd::bench::arg_int;

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--help") {
      std::printf(
          "usage: dd-bench-train [--threads N (default 2)] [--steps N (default 30)] [--batch B "
          "(16)]\n"
          "                      [--context T (128)] [--layers L (4)] [--heads H (4)] [--width C "
          "(128)]\n");
      return 0;
    }
  {
    using dd::bench::flag_spec;
    dd::bench::check_flags("dd-bench-train", argc, argv,
                           {{"--threads", flag_spec::number},
                            {"--steps", flag_spec::number},
                            {"--batch", flag_spec::number},
                            {"--context", flag_spec::number},
                            {"--layers", flag_spec::number},
                            {"--heads", flag_spec::number},
                            {"--width", flag_spec::number}});
  }
  const int threads = arg_int(argc, argv, "--threads", 2);
  const int steps = arg_int(argc, argv, "--steps", 30);
  dd::trainer_config cfg;
  cfg.batch = arg_int(argc, argv, "--batch", 16);
  cfg.model.context = cfg.seq_len = arg_int(argc, argv, "--context", 128);
  cfg.model.layers = arg_int(argc, argv, "--layers", 4);
  cfg.model.heads = arg_int(argc, argv, "--heads", 4);
  cfg.model.width = arg_int(argc, argv, "--width", 128);
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
    for (const auto& s : shapes) {
      time_sgemm(N, s.IC, s.OC, 3);  // warm up
      const double t = time_sgemm(N, s.IC, s.OC, 20);
      const double fl = 2.0 * N * s.IC * s.OC;
      std::printf("  %-10s IC=%4d OC=%4d : %7.1f GFLOP/s\n", s.what, s.IC, s.OC, fl / t * 1e-9);
      mix_flops += fl * s.per_pass;
      mix_seconds += t * s.per_pass;
    }
    const double sgemm_gflops = mix_flops / mix_seconds * 1e-9;
    std::printf("  mix of one forward pass       : %7.1f GFLOP/s\n", sgemm_gflops);
    openblas_set_num_threads(1);  // back to the cpu backend's setting

    // ---- 2. training steps ----
    const auto data = dd::text_dataset::from_file("../shared/data/tinyshakespeare/input.txt");
    dd::trainer tr(*be, data, cfg);
    for (int i = 0; i < 3; ++i) tr.step();  // warm up (allocation, caches)
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
    std::printf("achieved: %.1f GFLOP/s | sgemm mix: %.1f GFLOP/s | ratio %.2f (target >= 0.4)\n",
                step_gflops, sgemm_gflops, step_gflops / sgemm_gflops);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dd-bench-train: error: %s\n", e.what());
    return 1;
  }
}
