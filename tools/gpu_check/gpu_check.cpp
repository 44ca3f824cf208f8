// tools/gpu_check/gpu_check.cpp — dd-gpu-check: checks every op of the CUDA backend against the
// reference backend over many shapes, then benchmarks sgemm and a whole GPT training step
// against the CPU backend. See docs/gpu.md.
//
//   dd-gpu-check [--require-device] [--quick] [--no-bench] [--device N] [--threads N]
//                [--backend cuda|cpu]       (flags() is the flag table; --help prints it)
//
// `--backend cpu` runs the same checks on the CPU backend (no device needed): it validates the
// harness itself and gives kernels/cpu a second, shape-heavy check.
//
// Exit status: 0 when every check passes, 1 when a check fails or a backend throws, 2 for a bad
// command line; with no CUDA device: 77 ("skipped" — ctest's SKIP_RETURN_CODE, so the gpu_check
// test is reported as skipped, not passed), or 3 when --require-device is given.
//
// How the check runs: each case is a function of a backend that draws its inputs from a fixed
// seed, runs one op and downloads its outputs. The reference backend runs the cases on a pool
// of host threads (it is naive and single-threaded per case) while the main thread runs them
// on the CUDA backend; then each output is compared. Error measure: max |cuda - ref| over the
// tensor, divided by max |ref| ("normwise relative error"); a case passes when that is at most
// the op's tolerance for every output (docs/gpu.md explains the tolerances).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/reference/reference_backend.hpp"
#include "tests/support/random_data.hpp"
#include "tools/gpu_check/gpt_workload.hpp"
#include "util/flags.hpp"
#include "util/parse.hpp"

namespace dd::gpu_check {
namespace {

using kernels::backend;
using kernels::buffer;

/// Outputs of one case on one backend, each tensor widened to double.
using outputs = std::vector<std::vector<double>>;

/// One checked op at one shape.
struct check_case {
  std::string op;
  std::string shape;
  double tol;  // normwise relative error tolerance (0: must be bit-equal)
  std::function<outputs(backend&)> run;
};

// ---- helpers ---------------------------------------------------------------------------------

using test::random_floats;
using test::random_ints;

template <class T>
buffer<T> to_dev(backend& be, const std::vector<T>& h) {
  auto b = be.alloc<T>(h.size());
  be.upload(b.data(), h.data(), h.size());
  return b;
}

std::vector<double> from_dev(backend& be, const float* p, size_t n) {
  std::vector<float> h(n);
  be.download(h.data(), p, n);
  return std::vector<double>(h.begin(), h.end());
}

std::vector<double> from_dev(backend& be, const buffer<float>& b) {
  return from_dev(be, b.data(), b.size());
}

std::string dims(std::initializer_list<std::pair<const char*, long long>> kv) {
  std::string s;
  for (const auto& [k, v] : kv) {
    if (!s.empty()) s += ' ';
    s += k;
    s += '=';
    s += std::to_string(v);
  }
  return s;
}

/// Result of comparing one case.
struct comparison {
  double max_abs = 0.0;
  double max_rel = 0.0;  // normwise: max_abs / max|ref| per output, worst output
  bool pass = true;
  std::string note;
};

comparison compare(const outputs& got, const outputs& ref, double tol) {
  comparison c;
  if (got.size() != ref.size()) {
    c.pass = false;
    c.note = "output count differs";
    return c;
  }
  for (size_t o = 0; o < got.size(); ++o) {
    if (got[o].size() != ref[o].size()) {
      c.pass = false;
      c.note = "output size differs";
      return c;
    }
    double max_ref = 0.0, max_abs = 0.0;
    bool nonfinite = false;
    for (size_t i = 0; i < ref[o].size(); ++i) {
      const double r = ref[o][i], g = got[o][i];
      if (std::isfinite(r)) max_ref = std::max(max_ref, std::fabs(r));
      if (std::isfinite(r) != std::isfinite(g)) {
        nonfinite = true;
      } else if (std::isfinite(r)) {
        max_abs = std::max(max_abs, std::fabs(g - r));
      } else if (!(std::isnan(r) && std::isnan(g)) && g != r) {
        nonfinite = true;
      }
    }
    const double rel = nonfinite ? INFINITY : (max_ref > 0 ? max_abs / max_ref : max_abs);
    c.max_abs = std::max(c.max_abs, nonfinite ? INFINITY : max_abs);
    c.max_rel = std::max(c.max_rel, rel);
    const bool ok = tol == 0.0 ? (!nonfinite && max_abs == 0.0) : rel <= tol;
    if (!ok) {
      c.pass = false;
      if (c.note.empty()) c.note = "output " + std::to_string(o) + (nonfinite ? " non-finite" : "");
    }
  }
  return c;
}

// ---- tolerances (normwise relative; docs/gpu.md, "Tolerances") -------------------------------
// Elementwise ops computed in double on the device, or exact in float: a few float ulps.
constexpr double tol_exact = 1e-6;
// Transcendental elementwise (tanhf, expf, logf in float): a few ulps, amplified by one product.
constexpr double tol_transcendental = 1e-5;
// Row reductions in float over C elements (layer norm statistics).
constexpr double tol_row = 2e-5;
// Softmax over a row of V (up to 50257) in float: the row sum's error grows like sqrt(V)·eps
// (1.3e-5 at V = 50257) and expf adds a few ulps.
constexpr double tol_softmax = 1e-4;
// fp32 cuBLAS products and float column reductions: error grows like sqrt(K)·eps (K up to 16384).
constexpr double tol_gemm = 1e-4;
// Attention backward: products of products (datt, softmax backward, dq/dk).
constexpr double tol_attention_bwd = 2e-4;
// Double reductions with a different summation tree than the sequential reference.
constexpr double tol_double = 1e-9;

// ---- the cases ------------------------------------------------------------------------------

void add_encoder_cases(std::vector<check_case>& cases, bool quick) {
  struct s {
    int B, T, C, V;
    size_t N() const { return static_cast<size_t>(B) * T; }
    /// B x T token ids below V, from `seed`.
    buffer<int32_t> tokens(backend& be, uint64_t seed) const {
      return to_dev(be, random_ints(N(), V, seed));
    }
    /// The (V, C) token table from `seed` and the (T, C) position table from seed + 1.
    std::pair<buffer<float>, buffer<float>> tables(backend& be, uint64_t seed) const {
      return {to_dev(be, random_floats(static_cast<size_t>(V) * C, seed)),
              to_dev(be, random_floats(static_cast<size_t>(T) * C, seed + 1))};
    }
  };
  std::vector<s> shapes = {{1, 1, 8, 16}, {2, 127, 24, 50}, {4, 128, 128, 256}, {3, 5, 33, 3}};
  if (!quick) shapes.push_back({8, 1024, 768, 8192});
  uint64_t seed = 100;
  for (const auto& sh : shapes) {
    const std::string shape = dims({{"B", sh.B}, {"T", sh.T}, {"C", sh.C}, {"V", sh.V}});
    const uint64_t sd = seed++;
    cases.push_back({"encoder_forward", shape, tol_exact, [sh, sd](backend& be) {
                       auto tok = sh.tokens(be, sd);
                       auto [wte, wpe] = sh.tables(be, sd + 1);
                       auto out = be.alloc<float>(sh.N() * sh.C);
                       be.encoder_forward(out.data(), tok.data(), wte.data(), wpe.data(), sh.B,
                                          sh.T, sh.C);
                       return outputs{from_dev(be, out)};
                     }});
    cases.push_back({"encoder_backward", shape, tol_exact, [sh, sd](backend& be) {
                       auto tok = sh.tokens(be, sd);
                       auto [dwte, dwpe] = sh.tables(be, sd + 3);
                       auto dout = to_dev(be, random_floats(sh.N() * sh.C, sd + 5));
                       be.encoder_backward(dwte.data(), dwpe.data(), dout.data(), tok.data(), sh.B,
                                           sh.T, sh.C);
                       return outputs{from_dev(be, dwte), from_dev(be, dwpe)};
                     }});
  }
}

void add_layernorm_cases(std::vector<check_case>& cases, bool quick) {
  std::vector<std::pair<int, int>> shapes = {{1, 8}, {7, 33}, {256, 128}, {100, 1}, {3, 1000}};
  if (!quick) {
    shapes.push_back({4096, 768});
    shapes.push_back({16384, 128});
  }
  uint64_t seed = 200;
  for (const auto& [N, C] : shapes) {
    const std::string shape = dims({{"N", N}, {"C", C}});
    const uint64_t sd = seed++;
    const size_t n = static_cast<size_t>(N), c = static_cast<size_t>(C);
    cases.push_back({"layernorm_forward", shape, tol_row, [n, c, sd](backend& be) {
                       auto x = random_floats(n * c, sd, -2.0f, 3.0f);
                       auto inp = to_dev(be, x);
                       auto w = to_dev(be, random_floats(c, sd + 1, 0.5f, 1.5f));
                       auto b = to_dev(be, random_floats(c, sd + 2));
                       auto out = be.alloc<float>(n * c);
                       auto mean = be.alloc<float>(n);
                       auto rstd = be.alloc<float>(n);
                       be.layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(),
                                            w.data(), b.data(), static_cast<int>(n),
                                            static_cast<int>(c));
                       return outputs{from_dev(be, out), from_dev(be, mean), from_dev(be, rstd)};
                     }});
    cases.push_back({"layernorm_backward", shape, tol_gemm, [n, c, sd](backend& be) {
                       auto x = random_floats(n * c, sd, -2.0f, 3.0f);
                       // mean and rstd computed on the host in double: identical inputs for both.
                       std::vector<float> mean(n), rstd(n);
                       for (size_t r = 0; r < n; ++r) {
                         double m = 0, v = 0;
                         for (size_t j = 0; j < c; ++j) m += x[r * c + j];
                         m /= static_cast<double>(c);
                         for (size_t j = 0; j < c; ++j)
                           v += (x[r * c + j] - m) * (x[r * c + j] - m);
                         v /= static_cast<double>(c);
                         mean[r] = static_cast<float>(m);
                         rstd[r] = static_cast<float>(1.0 / std::sqrt(v + 1e-5));
                       }
                       auto inp = to_dev(be, x);
                       auto dm = to_dev(be, mean);
                       auto dr = to_dev(be, rstd);
                       auto w = to_dev(be, random_floats(c, sd + 1, 0.5f, 1.5f));
                       auto dout = to_dev(be, random_floats(n * c, sd + 3));
                       auto dinp = to_dev(be, random_floats(n * c, sd + 4));
                       auto dw = to_dev(be, random_floats(c, sd + 5));
                       auto db = to_dev(be, random_floats(c, sd + 6));
                       be.layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(),
                                             inp.data(), w.data(), dm.data(), dr.data(),
                                             static_cast<int>(n), static_cast<int>(c));
                       return outputs{from_dev(be, dinp), from_dev(be, dw), from_dev(be, db)};
                     }});
  }
}

void add_matmul_cases(std::vector<check_case>& cases, bool quick) {
  struct s {
    int N, IC, OC;
  };
  std::vector<s> shapes = {{1, 8, 8},        {7, 13, 5},       {127, 33, 65},
                           {2048, 128, 384}, {2048, 128, 256}, {2048, 512, 128}};
  if (!quick) {
    shapes.push_back({1024, 768, 3072});
    shapes.push_back({2048, 768, 768});
  }
  uint64_t seed = 300;
  for (const auto& sh : shapes) {
    for (bool with_bias : {true, false}) {
      const std::string shape =
          dims({{"N", sh.N}, {"IC", sh.IC}, {"OC", sh.OC}}) + (with_bias ? " bias" : " nobias");
      const uint64_t sd = seed++;
      const size_t N = sh.N, IC = sh.IC, OC = sh.OC;
      cases.push_back({"matmul_forward", shape, tol_gemm, [=](backend& be) {
                         auto inp = to_dev(be, random_floats(N * IC, sd));
                         auto w = to_dev(be, random_floats(OC * IC, sd + 1));
                         auto b = to_dev(be, random_floats(OC, sd + 2));
                         auto out = be.alloc<float>(N * OC);
                         be.matmul_forward(out.data(), inp.data(), w.data(),
                                           with_bias ? b.data() : nullptr, sh.N, sh.IC, sh.OC);
                         return outputs{from_dev(be, out)};
                       }});
      cases.push_back({"matmul_backward", shape, tol_gemm, [=](backend& be) {
                         auto inp = to_dev(be, random_floats(N * IC, sd));
                         auto w = to_dev(be, random_floats(OC * IC, sd + 1));
                         auto dout = to_dev(be, random_floats(N * OC, sd + 3));
                         auto dinp = to_dev(be, random_floats(N * IC, sd + 4));
                         auto dw = to_dev(be, random_floats(OC * IC, sd + 5));
                         auto db = to_dev(be, random_floats(OC, sd + 6));
                         be.matmul_backward(dinp.data(), dw.data(), with_bias ? db.data() : nullptr,
                                            dout.data(), inp.data(), w.data(), sh.N, sh.IC, sh.OC);
                         return outputs{from_dev(be, dinp), from_dev(be, dw), from_dev(be, db)};
                       }});
    }
  }
}

/// Causal attention probabilities (B,NH,T,T): random positive rows, normalized, zero above the
/// diagonal — a valid input for attention_backward.
std::vector<float> random_att(int B, int NH, int T, uint64_t seed) {
  auto a = random_floats(static_cast<size_t>(B) * NH * T * T, seed, 0.05f, 1.0f);
  for (size_t row = 0; row < static_cast<size_t>(B) * NH * T; ++row) {
    const int t = static_cast<int>(row % T);
    float* r = a.data() + row * T;
    double s = 0;
    for (int j = 0; j <= t; ++j) s += r[j];
    for (int j = 0; j < T; ++j) r[j] = j <= t ? static_cast<float>(r[j] / s) : 0.0f;
  }
  return a;
}

void add_attention_cases(std::vector<check_case>& cases, bool quick) {
  struct s {
    int B, T, C, NH;
  };
  std::vector<s> shapes = {{1, 1, 8, 1},      {2, 5, 12, 3},   {2, 127, 64, 4},
                           {16, 128, 128, 4}, {3, 33, 96, 12}, {1, 128, 32, 8}};
  if (!quick) {
    shapes.push_back({2, 1024, 256, 4});
    shapes.push_back({1, 1024, 768, 12});
  }
  uint64_t seed = 400;
  for (const auto& sh : shapes) {
    const std::string shape = dims({{"B", sh.B}, {"T", sh.T}, {"C", sh.C}, {"NH", sh.NH}});
    const uint64_t sd = seed++;
    const size_t qkv_n = static_cast<size_t>(sh.B) * sh.T * 3 * sh.C;
    const size_t out_n = static_cast<size_t>(sh.B) * sh.T * sh.C;
    const size_t att_n = static_cast<size_t>(sh.B) * sh.NH * sh.T * sh.T;
    cases.push_back({"attention_forward", shape, tol_gemm, [=](backend& be) {
                       auto qkv = to_dev(be, random_floats(qkv_n, sd, -2.0f, 2.0f));
                       auto out = be.alloc<float>(out_n);
                       auto att = be.alloc<float>(att_n);
                       be.attention_forward(out.data(), att.data(), qkv.data(), sh.B, sh.T, sh.C,
                                            sh.NH);
                       return outputs{from_dev(be, out), from_dev(be, att)};
                     }});
    cases.push_back({"attention_backward", shape, tol_attention_bwd, [=](backend& be) {
                       auto qkv = to_dev(be, random_floats(qkv_n, sd, -2.0f, 2.0f));
                       auto att = to_dev(be, random_att(sh.B, sh.NH, sh.T, sd + 1));
                       auto dout = to_dev(be, random_floats(out_n, sd + 2));
                       auto dqkv = to_dev(be, random_floats(qkv_n, sd + 3));
                       auto scratch = be.alloc<float>(att_n);
                       be.attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(),
                                             att.data(), sh.B, sh.T, sh.C, sh.NH);
                       return outputs{from_dev(be, dqkv)};
                     }});
  }
}

void add_softmax_cases(std::vector<check_case>& cases, bool quick) {
  struct s {
    int N, V;
    float range;
  };
  std::vector<s> shapes = {
      {1, 2, 1.0f}, {3, 7, 4.0f}, {127, 256, 4.0f}, {2048, 256, 4.0f}, {5, 1000, 60.0f}};
  if (!quick) shapes.push_back({64, 50257, 8.0f});
  uint64_t seed = 500;
  for (const auto& sh : shapes) {
    const std::string shape =
        dims({{"N", sh.N}, {"V", sh.V}}) + " |z|<=" + std::to_string(static_cast<int>(sh.range));
    const uint64_t sd = seed++;
    const size_t n = static_cast<size_t>(sh.N) * sh.V;
    cases.push_back({"softmax_crossentropy_forward", shape, tol_softmax, [=](backend& be) {
                       auto logits = to_dev(be, random_floats(n, sd, -sh.range, sh.range));
                       auto tg = to_dev(be, random_ints(static_cast<size_t>(sh.N), sh.V, sd + 1));
                       auto losses = be.alloc<float>(static_cast<size_t>(sh.N));
                       auto probs = be.alloc<float>(n);
                       be.softmax_crossentropy_forward(losses.data(), probs.data(), logits.data(),
                                                       tg.data(), sh.N, sh.V);
                       return outputs{from_dev(be, losses), from_dev(be, probs)};
                     }});
    cases.push_back({"softmax_crossentropy_backward", shape, tol_exact, [=](backend& be) {
                       auto probs = to_dev(be, random_floats(n, sd + 2, 0.0f, 1.0f));
                       auto tg = to_dev(be, random_ints(static_cast<size_t>(sh.N), sh.V, sd + 1));
                       auto dlogits = to_dev(be, random_floats(n, sd + 3));  // must be overwritten
                       be.softmax_crossentropy_backward(dlogits.data(), probs.data(), tg.data(),
                                                        1.0f / sh.N, sh.N, sh.V);
                       return outputs{from_dev(be, dlogits)};
                     }});
  }
}

void add_elementwise_cases(std::vector<check_case>& cases, bool quick) {
  std::vector<size_t> sizes = {1, 7, 1000, (size_t{1} << 20) + 3};
  if (!quick) sizes.push_back(size_t{24} << 20);
  uint64_t seed = 600;
  for (size_t n : sizes) {
    const std::string shape = dims({{"n", static_cast<long long>(n)}});
    const uint64_t sd = seed++;
    cases.push_back({"gelu_forward", shape, tol_transcendental, [=](backend& be) {
                       auto inp = to_dev(be, random_floats(n, sd, -6.0f, 6.0f));
                       auto out = be.alloc<float>(n);
                       be.gelu_forward(out.data(), inp.data(), n);
                       return outputs{from_dev(be, out)};
                     }});
    cases.push_back({"gelu_backward", shape, tol_transcendental, [=](backend& be) {
                       auto inp = to_dev(be, random_floats(n, sd, -6.0f, 6.0f));
                       auto dout = to_dev(be, random_floats(n, sd + 1));
                       auto dinp = to_dev(be, random_floats(n, sd + 2));
                       be.gelu_backward(dinp.data(), inp.data(), dout.data(), n);
                       return outputs{from_dev(be, dinp)};
                     }});
    cases.push_back({"residual_forward", shape, tol_exact, [=](backend& be) {
                       auto a = to_dev(be, random_floats(n, sd));
                       auto b = to_dev(be, random_floats(n, sd + 1));
                       auto out = be.alloc<float>(n);
                       be.residual_forward(out.data(), a.data(), b.data(), n);
                       be.residual_forward(a.data(), a.data(), b.data(), n);  // aliased out == a
                       return outputs{from_dev(be, out), from_dev(be, a)};
                     }});
    cases.push_back({"scale", shape, tol_exact, [=](backend& be) {
                       auto x = to_dev(be, random_floats(n, sd));
                       be.scale(x.data(), -0.37f, n);
                       return outputs{from_dev(be, x)};
                     }});
    cases.push_back({"axpy", shape, tol_exact, [=](backend& be) {
                       auto y = to_dev(be, random_floats(n, sd));
                       auto x = to_dev(be, random_floats(n, sd + 1));
                       be.axpy(y.data(), 0.7f, x.data(), n);
                       return outputs{from_dev(be, y)};
                     }});
    cases.push_back({"nesterov_update", shape, tol_exact, [=](backend& be) {
                       auto th = to_dev(be, random_floats(n, sd));
                       auto mom = to_dev(be, random_floats(n, sd + 1, -0.1f, 0.1f));
                       auto delta = to_dev(be, random_floats(n, sd + 2, -0.01f, 0.01f));
                       be.nesterov_update(th.data(), mom.data(), delta.data(), 0.7f, 0.9f, n);
                       be.nesterov_update(th.data(), mom.data(), delta.data(), 0.7f, 0.9f, n);
                       return outputs{from_dev(be, th), from_dev(be, mom)};
                     }});
    for (int64_t step : {int64_t{1}, int64_t{100}}) {
      cases.push_back(
          {"adamw_update", shape + " t=" + std::to_string(step), tol_exact, [=](backend& be) {
             auto p = to_dev(be, random_floats(n, sd));
             auto g = to_dev(be, random_floats(n, sd + 1, -0.1f, 0.1f));
             auto m = to_dev(be, random_floats(n, sd + 2, -0.01f, 0.01f));
             auto v = to_dev(be, random_floats(n, sd + 3, 0.0f, 1e-4f));
             kernels::adamw_params ap;
             ap.lr = 3e-4f;
             ap.weight_decay = 0.1f;
             ap.step = step;
             be.adamw_update(p.data(), g.data(), m.data(), v.data(), n, ap);
             return outputs{from_dev(be, p), from_dev(be, m), from_dev(be, v)};
           }});
    }
    cases.push_back({"sum_squares", shape, tol_double, [=](backend& be) {
                       auto x = to_dev(be, random_floats(n, sd, -3.0f, 3.0f));
                       return outputs{{be.sum_squares(x.data(), n)}};
                     }});
    cases.push_back({"all_finite", shape + " clean/nan/inf/-inf", 0.0, [=](backend& be) {
                       auto h = random_floats(n, sd);
                       auto x = to_dev(be, h);
                       std::vector<double> r;
                       r.push_back(be.all_finite(x.data(), n) ? 1.0 : 0.0);
                       const float specials[] = {NAN, INFINITY, -INFINITY};
                       const size_t where[] = {n / 2, n - 1, 0};
                       for (int i = 0; i < 3; ++i) {
                         auto hh = h;
                         hh[where[i]] = specials[i];
                         auto y = to_dev(be, hh);
                         r.push_back(be.all_finite(y.data(), n) ? 1.0 : 0.0);
                       }
                       return outputs{r};
                     }});
    for (int k : {1, 3, 16, 17, 40}) {
      if (n > (size_t{1} << 21) && k > 3) continue;
      cases.push_back(
          {"weighted_sum", shape + " k=" + std::to_string(k), tol_exact, [=](backend& be) {
             std::vector<buffer<float>> ins;
             std::vector<const float*> ptrs;
             for (int j = 0; j < k; ++j) {
               ins.push_back(to_dev(be, random_floats(n, sd + 10 + j)));
               ptrs.push_back(ins.back().data());
             }
             auto w = random_floats(static_cast<size_t>(k), sd + 5, 0.0f, 2.0f);
             auto out = to_dev(be, random_floats(n, sd + 6));  // must be overwritten
             be.weighted_sum(out.data(), ptrs.data(), w.data(), k, n);
             return outputs{from_dev(be, out)};
           }});
    }
  }
}

/// The GPT step at the default shape: loss and gradient Σx² after forward + backward.
void add_gpt_case(std::vector<check_case>& cases) {
  const gpt_shape shape{};
  cases.push_back(
      {"gpt forward+backward", shape.str() + " (loss, |g|^2)", tol_gemm, [shape](backend& be) {
         gpt_workload w(be, shape, 7);
         w.forward_backward();
         return outputs{{w.mean_loss(), w.grad_sum_squares()}};
       }});
}

// ---- determinism ----------------------------------------------------------------------------

/// Cases whose CUDA result must be bit-equal between two runs (reductions, scatter-adds).
std::vector<check_case> determinism_cases(const std::vector<check_case>& all) {
  std::vector<check_case> out;
  const char* ops[] = {"encoder_backward",    "layernorm_backward",           "matmul_backward",
                       "attention_backward",  "softmax_crossentropy_forward", "sum_squares",
                       "gpt forward+backward"};
  for (const char* op : ops) {
    const check_case* last = nullptr;
    for (const auto& c : all) {
      if (c.op == op) last = &c;  // the last shape listed (the largest in full mode)
    }
    if (last != nullptr)
      out.push_back({std::string("determinism ") + op, last->shape, 0.0, last->run});
  }
  return out;
}

// ---- table ----------------------------------------------------------------------------------

void print_header() {
  std::printf("%-40s %-46s %12s %12s %9s  %s\n", "op", "shape", "max abs err", "max rel err", "tol",
              "result");
  std::printf("%s\n", std::string(132, '-').c_str());
}

void print_row(const std::string& op, const std::string& shape, const comparison& c, double tol) {
  std::printf("%-40s %-46s %12.3e %12.3e %9.1e  %s%s%s\n", op.c_str(), shape.c_str(), c.max_abs,
              c.max_rel, tol, c.pass ? "PASS" : "FAIL", c.note.empty() ? "" : "  ", c.note.c_str());
  std::fflush(stdout);
}

/// Runs every case on the CUDA backend (this thread) and the reference backend (a pool of
/// `ref_threads` host threads). Returns the number of failures.
int run_checks(backend& cuda, const std::vector<check_case>& cases, int ref_threads) {
  std::vector<std::promise<outputs>> promises(cases.size());
  std::vector<std::future<outputs>> futures;
  for (auto& p : promises) futures.push_back(p.get_future());
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < ref_threads; ++t) {
    pool.emplace_back([&] {
      auto ref = kernels::make_reference_backend();
      for (size_t i = next++; i < cases.size(); i = next++) {
        try {
          promises[i].set_value(cases[i].run(*ref));
        } catch (...) {
          promises[i].set_exception(std::current_exception());
        }
      }
    });
  }
  int failures = 0;
  print_header();
  for (size_t i = 0; i < cases.size(); ++i) {
    comparison c;
    try {
      outputs got = cases[i].run(cuda);
      outputs ref = futures[i].get();
      c = compare(got, ref, cases[i].tol);
    } catch (const std::exception& e) {
      c.pass = false;
      c.max_abs = c.max_rel = INFINITY;
      c.note = std::string("exception: ") + e.what();
    }
    if (!c.pass) ++failures;
    print_row(cases[i].op, cases[i].shape, c, cases[i].tol);
  }
  for (auto& th : pool) th.join();
  return failures;
}

int run_determinism(backend& cuda, const std::vector<check_case>& cases) {
  int failures = 0;
  for (const auto& dc : cases) {
    comparison c;
    try {
      outputs a = dc.run(cuda);
      outputs b = dc.run(cuda);
      c = compare(a, b, 0.0);
    } catch (const std::exception& e) {
      c.pass = false;
      c.note = std::string("exception: ") + e.what();
    }
    if (!c.pass) ++failures;
    print_row(dc.op, dc.shape, c, 0.0);
  }
  return failures;
}

// ---- benchmarks -----------------------------------------------------------------------------

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

/// GFLOP/s of matmul_forward (2·N·IC·OC flops) and matmul_backward (4·N·IC·OC) on `be`.
std::pair<double, double> sgemm_gflops(backend& be, int N, int IC, int OC, int iters) {
  auto inp = to_dev(be, random_floats(static_cast<size_t>(N) * IC, 1));
  auto w = to_dev(be, random_floats(static_cast<size_t>(OC) * IC, 2));
  auto b = to_dev(be, random_floats(static_cast<size_t>(OC), 3));
  auto out = be.alloc<float>(static_cast<size_t>(N) * OC);
  auto dinp = be.alloc<float>(static_cast<size_t>(N) * IC);
  auto dw = be.alloc<float>(static_cast<size_t>(OC) * IC);
  auto db = be.alloc<float>(static_cast<size_t>(OC));
  be.matmul_forward(out.data(), inp.data(), w.data(), b.data(), N, IC, OC);  // warm-up
  be.matmul_backward(dinp.data(), dw.data(), db.data(), out.data(), inp.data(), w.data(), N, IC,
                     OC);
  be.synchronize();
  const double flops = 2.0 * N * IC * OC;
  auto t0 = clock_type::now();
  for (int i = 0; i < iters; ++i) {
    be.matmul_forward(out.data(), inp.data(), w.data(), b.data(), N, IC, OC);
  }
  be.synchronize();
  const double fwd = flops * iters / seconds_since(t0) / 1e9;
  t0 = clock_type::now();
  for (int i = 0; i < iters; ++i) {
    be.matmul_backward(dinp.data(), dw.data(), db.data(), out.data(), inp.data(), w.data(), N, IC,
                       OC);
  }
  be.synchronize();
  const double bwd = 2.0 * flops * iters / seconds_since(t0) / 1e9;
  return {fwd, bwd};
}

void bench_sgemm(backend& cuda, backend& cpu, const gpt_shape& s, int cpu_iters) {
  const int N = s.B * s.model.context, C = s.model.width;
  struct g {
    const char* name;
    int IC, OC;
  };
  const g shapes[] = {{"qkv", C, 3 * C},
                      {"attproj", C, C},
                      {"fc", C, 4 * C},
                      {"fcproj", 4 * C, C},
                      {"lm_head", C, s.model.vocab}};
  std::printf("\nsgemm at %s (N = B*T = %d)\n", s.str().c_str(), N);
  std::printf("%-10s %-22s %14s %14s %14s %14s %9s\n", "layer", "N x IC -> OC", "cuda fwd GF/s",
              "cuda bwd GF/s", "cpu fwd GF/s", "cpu bwd GF/s", "fwd ratio");
  for (const auto& x : shapes) {
    const auto [cf, cb] = sgemm_gflops(cuda, N, x.IC, x.OC, 50);
    const auto [pf, pb] = sgemm_gflops(cpu, N, x.IC, x.OC, cpu_iters);
    const std::string sh =
        std::to_string(N) + "x" + std::to_string(x.IC) + "->" + std::to_string(x.OC);
    std::printf("%-10s %-22s %14.1f %14.1f %14.1f %14.1f %8.1fx\n", x.name, sh.c_str(), cf, cb, pf,
                pb, cf / pf);
    std::fflush(stdout);
  }
}

/// Seconds per training step (forward, backward, AdamW) after `warmup` steps.
double time_steps(backend& be, const gpt_shape& s, int warmup, int iters, double* loss) {
  gpt_workload w(be, s, 11);
  for (int i = 0; i < warmup; ++i) {
    w.forward_backward();
    w.optimizer_step();
  }
  be.synchronize();
  const auto t0 = clock_type::now();
  for (int i = 0; i < iters; ++i) {
    w.forward_backward();
    w.optimizer_step();
  }
  be.synchronize();
  const double dt = seconds_since(t0) / iters;
  *loss = w.mean_loss();
  return dt;
}

void bench_step(backend& cuda, backend& cpu, const gpt_shape& s, int cuda_iters, int cpu_iters) {
  double lc = 0, lp = 0;
  const double tc = time_steps(cuda, s, 2, cuda_iters, &lc);
  const double tp = time_steps(cpu, s, 1, cpu_iters, &lp);
  const double tok = static_cast<double>(s.tokens());
  std::printf("%-44s %12.0f %12.0f %9.1fx   (ms/step cuda %.2f, cpu %.1f; loss %.4f / %.4f)\n",
              s.str().c_str(), tok / tc, tok / tp, tp / tc, tc * 1e3, tp * 1e3, lc, lp);
  std::fflush(stdout);
}

// ---- main -----------------------------------------------------------------------------------

struct cli {
  bool require_device = false;
  bool quick = false;
  bool bench = true;
  int device = 0;
  int threads = 0;
  std::string backend = "cuda";
};

/// Exit status without a device (and without --require-device): GNU/automake's "skipped",
/// registered as the ctest's SKIP_RETURN_CODE (tools/gpu_check/CMakeLists.txt).
constexpr int k_exit_skipped = 77;

/// The flag table of dd-gpu-check, writing into `opt`: the one source of its parsing and --help.
util::flag_table flags(cli& opt) {
  util::flag_table t("dd-gpu-check", "[flags]",
                     "Every op of the CUDA backend against the reference backend over many "
                     "shapes, then sgemm and\nGPT training-step benchmarks against the CPU "
                     "backend (docs/gpu.md).");
  auto ordinal = [](int* out) {
    return [out](const std::string& v) -> std::string {
      if (util::parse_number_in(v, *out, 0, 4096)) return {};
      return "expects a whole number in [0, 4096], got '" + v + "'";
    };
  };
  t.toggle("--require-device", &opt.require_device,
           "exit 3 (instead of 77, \"skipped\") when no CUDA device is present")
      .toggle("--quick", &opt.quick, "small shapes only (no large cases)")
      .action("--no-bench", "skip the sgemm and training-step benchmarks",
              [&opt] { opt.bench = false; })
      .custom("--device", "N", "CUDA device ordinal (default " + std::to_string(opt.device) + ")",
              ordinal(&opt.device))
      .custom("--threads", "N",
              "CPU threads for the cpu backend and the reference pool (default 0: one per "
              "hardware thread)",
              ordinal(&opt.threads))
      .custom("--backend", "NAME",
              "backend under test: cuda (default) or cpu (no device needed; checks only, no "
              "benchmarks)",
              [&opt](const std::string& v) -> std::string {
                if (v != "cuda" && v != "cpu") return "expects cuda or cpu, got '" + v + "'";
                opt.backend = v;
                return {};
              })
      .epilog(
          "Exit status: 0 every check passed; 1 a check failed or a backend threw; 2 a bad "
          "command line;\nwith no CUDA device 77 (\"skipped\", the gpu_check test's "
          "SKIP_RETURN_CODE), or 3 with\n--require-device.");
  return t;
}

int main_impl(int argc, char** argv) {
  cli opt;
  if (auto rc = flags(opt).parse(argc, argv)) return *rc;
  const bool on_cuda = opt.backend == "cuda";
  if (on_cuda && !kernels::cuda_device_present()) {
    std::printf("no CUDA device: skipped\n");
    return opt.require_device ? 3 : k_exit_skipped;
  }
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = opt.threads > 0 ? opt.threads : hw;
  kernels::backend_options bo;
  bo.device = opt.device;
  bo.threads = threads;
  std::unique_ptr<backend> cuda;
  if (on_cuda) {
    std::printf("dd-gpu-check: device %d: %s; %d host threads\n", opt.device,
                kernels::cuda_device_description(opt.device).c_str(), threads);
    cuda = kernels::make_cuda_backend(bo);
  } else {
    std::printf("dd-gpu-check: backend under test: cpu (%d threads)\n", threads);
    cuda = kernels::make_cpu_backend(bo);
  }

  std::vector<check_case> cases;
  add_gpt_case(cases);  // first: the slowest reference case starts early
  add_encoder_cases(cases, opt.quick);
  add_layernorm_cases(cases, opt.quick);
  add_matmul_cases(cases, opt.quick);
  add_attention_cases(cases, opt.quick);
  add_softmax_cases(cases, opt.quick);
  add_elementwise_cases(cases, opt.quick);

  const auto t0 = clock_type::now();
  int failures = run_checks(*cuda, cases, threads);
  std::printf("\ndeterminism (two runs of the backend under test, bit-equal)\n");
  failures += run_determinism(*cuda, determinism_cases(cases));
  std::printf("\n%zu checks, %d failed (%.1f s)\n", cases.size(), failures, seconds_since(t0));

  if (opt.bench && on_cuda) {
    auto cpu = kernels::make_cpu_backend(bo);
    const gpt_shape small{};
    gpt_shape large;
    large.B = 4;
    large.model.context = 1024;
    large.model.width = 768;
    large.model.heads = 12;
    large.model.vocab = 8192;
    bench_sgemm(*cuda, *cpu, small, 10);
    bench_sgemm(*cuda, *cpu, large, 2);
    std::printf("\ntraining step (forward + backward + AdamW), cuda vs cpu (%d threads)\n",
                threads);
    std::printf("%-44s %12s %12s %10s\n", "shape", "cuda tok/s", "cpu tok/s", "ratio");
    bench_step(*cuda, *cpu, small, 20, 3);
    bench_step(*cuda, *cpu, large, 5, 1);
  }
  std::printf("\n%s\n", failures == 0 ? "ALL PASS" : "SOME CHECKS FAILED");
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace dd::gpu_check

int main(int argc, char** argv) {
  try {
    return dd::gpu_check::main_impl(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dd-gpu-check: %s\n", e.what());
    return 1;
  }
}
