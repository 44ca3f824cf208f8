// tests/kernels/backend_compare_test.cpp — every op of the backend under test (DD_TEST_BACKEND:
// "cpu", or "cuda" in the CUDA test binary) against the naive reference backend, over shape
// regimes: tiny, odd, not multiples of 4/8/16/64, and the default model's sizes. Backward ops
// start from random (non-zero) gradients, so every comparison also checks that they accumulate.
//
// Tolerances: the reference accumulates in double; the backend in float32. A float32 sum of K
// terms is within about sqrt(K)·eps32·Σ|terms| of the exact value (random-signed rounding
// errors; see test_util.hpp dot_tolerance). Each test names its K and its magnitude.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/reference/reference_backend.hpp"
#include "tests/kernels/test_util.hpp"
#ifdef DD_TEST_INIT_ALL
#include "kernels/all_backends.hpp"
#endif

// Test suite names carry the backend (cpu_compare, cuda_matmul, ...) so the two binaries'
// ctest names never collide.
#define DD_PASTE_(a, b) a##_##b
#define DD_PASTE(a, b) DD_PASTE_(a, b)
#define DD_SUITE(x) DD_PASTE(DD_TEST_PREFIX, x)
// Expands DD_SUITE(...) before gtest pastes the suite name.
#define DD_INSTANTIATE(prefix, suite, ...) INSTANTIATE_TEST_SUITE_P(prefix, suite, __VA_ARGS__)

namespace dd::kernels::test {
namespace {

class compare : public ::testing::Test {
 protected:
  void SetUp() override {
#ifdef DD_TEST_INIT_ALL
    init_all_backends();
#endif
    const std::string name = DD_TEST_BACKEND;
    if (name == "cuda" && !cuda_available()) GTEST_SKIP() << "no CUDA device";
    backend_options opts;
    opts.threads = 2;  // exercise the parallel partitions on the CPU backend
    be_ = make_backend(name, opts);
    ref_ = make_reference_backend();
  }
  std::unique_ptr<backend> be_, ref_;
};

class DD_SUITE(compare) : public compare {};

// ---- matmul -------------------------------------------------------------------------------
struct mm_shape {
  int N, IC, OC;
  bool bias;
};

class DD_SUITE(matmul) : public compare, public ::testing::WithParamInterface<mm_shape> {};

TEST_P(DD_SUITE(matmul), forward_and_backward_match_reference) {
  const mm_shape s = GetParam();
  const int N = s.N, IC = s.IC, OC = s.OC;
  const bool has_bias = s.bias;
  const auto inp = random_floats(size_t(N) * IC, 1);
  const auto w = random_floats(size_t(OC) * IC, 2);
  const auto bias = random_floats(OC, 3);
  const auto dout = random_floats(size_t(N) * OC, 4);
  const auto g_inp = random_floats(size_t(N) * IC, 5);
  const auto g_w = random_floats(size_t(OC) * IC, 6);
  const auto g_b = random_floats(OC, 7);

  auto run = [&](backend& b, const std::vector<float>& x, const std::vector<float>& wt,
                 const std::vector<float>& bi, const std::vector<float>& dy,
                 const std::vector<float>& gi, const std::vector<float>& gw,
                 const std::vector<float>& gb) {
    dvec<float> dx(b, x), dw(b, wt), db(b, bi), ddy(b, dy), dgi(b, gi), dgw(b, gw), dgb(b, gb);
    dvec<float> out(b, size_t(N) * OC);
    b.matmul_forward(out.data(), dx.data(), dw.data(), has_bias ? db.data() : nullptr, N, IC, OC);
    b.matmul_backward(dgi.data(), dgw.data(), has_bias ? dgb.data() : nullptr, ddy.data(),
                      dx.data(), dw.data(), N, IC, OC);
    return std::make_tuple(out.host(), dgi.host(), dgw.host(), dgb.host());
  };
  const auto [out, gi, gw, gb] = run(*be_, inp, w, bias, dout, g_inp, g_w, g_b);
  const auto [rout, rgi, rgw, rgb] = run(*ref_, inp, w, bias, dout, g_inp, g_w, g_b);
  // Magnitudes Σ|a·b| (+ |initial gradient|): the same products on absolute values.
  const auto [mout, mgi, mgw, mgb] = run(*ref_, abs_of(inp), abs_of(w), abs_of(bias), abs_of(dout),
                                         abs_of(g_inp), abs_of(g_w), abs_of(g_b));
  expect_within(out, rout, dot_tolerance(mout, IC), "matmul_forward out (K = IC)");
  expect_within(gi, rgi, dot_tolerance(mgi, OC), "matmul_backward dinp (K = OC)");
  expect_within(gw, rgw, dot_tolerance(mgw, N), "matmul_backward dweight (K = N)");
  if (has_bias) {
    expect_within(gb, rgb, dot_tolerance(mgb, N), "matmul_backward dbias (K = N)");
  } else {
    EXPECT_EQ(gb, g_b) << "dbias must be untouched when null is passed";
  }
}

DD_INSTANTIATE(
    shapes, DD_SUITE(matmul),
    ::testing::Values(mm_shape{1, 1, 1, true}, mm_shape{1, 7, 3, false}, mm_shape{3, 5, 7, true},
                      mm_shape{17, 33, 65, true}, mm_shape{31, 1, 9, true},
                      mm_shape{64, 128, 384, true}, mm_shape{100, 129, 257, false},
                      mm_shape{1024, 384, 256, true},  // large: N=1024, C=384, V=256
                      mm_shape{512, 128, 512, true}),  // the default model's MLP shapes, N reduced
    [](const auto& param_info) {
      const auto& s = param_info.param;
      return "N" + std::to_string(s.N) + "_IC" + std::to_string(s.IC) + "_OC" +
             std::to_string(s.OC) + (s.bias ? "_bias" : "_nobias");
    });

// ---- attention ----------------------------------------------------------------------------
class DD_SUITE(attention) : public compare, public ::testing::WithParamInterface<attn_shape> {};

TEST_P(DD_SUITE(attention), forward_and_backward_match_reference) {
  const attn_shape s = GetParam();
  const int B = s.B, T = s.T, NH = s.NH;
  const auto got = run_attention(*be_, s, 11, false);
  expect_attention_close(got, run_attention(*ref_, s, 11, false), s, "attention");
  const auto& att = got.att;
  for (int b = 0; b < B; ++b) {  // the causal mask: exact zeros above the diagonal
    for (int h = 0; h < NH; ++h) {
      for (int t = 0; t < T; ++t) {
        for (int t2 = t + 1; t2 < T; ++t2) {
          ASSERT_EQ(att[((size_t(b) * NH + h) * T + t) * T + t2], 0.0f);
        }
      }
    }
  }
}

DD_INSTANTIATE(shapes, DD_SUITE(attention),
               ::testing::Values(attn_shape{1, 1, 4, 1}, attn_shape{2, 3, 6, 2},
                                 attn_shape{1, 5, 8, 4}, attn_shape{2, 17, 24, 3},
                                 attn_shape{3, 31, 40, 5}, attn_shape{2, 64, 64, 8},
                                 attn_shape{1, 100, 72, 6}, attn_shape{1, 128, 96, 1},
                                 attn_shape{2, 128, 128, 4},  // default model
                                 attn_shape{1, 127, 120, 8},
                                 // head size 50 (not a whole number of 16-float vectors) and T
                                 // not a multiple of the 8-row tile or the 32-column panel
                                 attn_shape{2, 77, 200, 4},
                                 attn_shape{1, 256, 384, 6}),  // the 10.8M model's head shape
               attn_shape_name);

// ---- layer norm ---------------------------------------------------------------------------
class DD_SUITE(layernorm)
    : public compare, public ::testing::WithParamInterface<std::pair<int, int>> {};

TEST_P(DD_SUITE(layernorm), forward_and_backward_match_reference) {
  const int N = GetParam().first, C = GetParam().second;
  const auto inp = random_floats(size_t(N) * C, 21, -3.0f, 3.0f);
  const auto w = random_floats(C, 22, 0.5f, 1.5f);
  const auto bias = random_floats(C, 23);
  const auto dout = random_floats(size_t(N) * C, 24);
  const auto g_inp = random_floats(size_t(N) * C, 25);
  const auto g_w = random_floats(C, 26);
  const auto g_b = random_floats(C, 27);
  auto run = [&](backend& b) {
    dvec<float> x(b, inp), dw(b, w), db(b, bias), dy(b, dout), gi(b, g_inp), gw(b, g_w), gb(b, g_b);
    dvec<float> out(b, size_t(N) * C), mean(b, N), rstd(b, N);
    b.layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), dw.data(), db.data(), N, C);
    b.layernorm_backward(gi.data(), gw.data(), gb.data(), dy.data(), x.data(), dw.data(),
                         mean.data(), rstd.data(), N, C);
    return std::make_tuple(out.host(), mean.host(), rstd.host(), gi.host(), gw.host(), gb.host());
  };
  const auto [out, mean, rstd, gi, gw, gb] = run(*be_);
  const auto [rout, rmean, rrstd, rgi, rgw, rgb] = run(*ref_);
  // mean, variance: float sums of C terms with |x| <= 3 → (4 sqrt(C)+1)·eps32·3 absolute for
  // the mean, relative (4 sqrt(C)+1)·eps32 for rstd (var is a sum of positive terms).
  const double k = (4.0 * std::sqrt(double(C)) + 1.0) * eps32;
  const float r_max = max_abs(rrstd);
  expect_close(mean, rmean, 3.0 * k, 0.0, "layernorm mean");
  expect_close(rstd, rrstd, 0.0, 2.0 * k, "layernorm rstd");
  // out = xhat·w + b with |xhat| = |x - mean|·rstd: error ~ (|x| + |mean|)·rstd·k·|w| + rounding.
  expect_close(out, rout, 6.0 * r_max * k * 1.5 + 4 * eps32, 4 * eps32, "layernorm out");
  // dinp = rstd·(w·dy - mean(w·dy) - xhat·mean(w·dy·xhat)) + g0: the two C-term means carry
  // random-signed errors ~sqrt(C)·eps32·max|term| (|w·dy| <= 1.5), the bracket a few roundings
  // of 1.5, all scaled by rstd; then the add to |g0| <= 1 (4 ulp). Measured: <= 2 ulp at C >= 7;
  // a 1e-4 relative error in the xhat·mean term already exceeds this.
  const double xhat_max = 6.0 * r_max;
  expect_close(gi, rgi, 2.0 * (std::sqrt(double(C)) + 1.0) * eps32 * 1.5 * r_max + 4 * eps32, 0.0,
               "layernorm dinp");
  // dweight, dbias: sums over N rows of |xhat·dy| <= xhat_max, |dy| <= 1.
  const double kn = (4.0 * std::sqrt(double(N)) + 1.0) * eps32;
  expect_close(gw, rgw, kn * N * xhat_max + 4 * eps32, 0.0, "layernorm dweight");
  expect_close(gb, rgb, kn * N + 4 * eps32, 0.0, "layernorm dbias");
}

TEST_P(DD_SUITE(layernorm), residual_layernorm_forward_matches_reference_and_separate_ops) {
  const int N = GetParam().first, C = GetParam().second;
  const size_t n = size_t(N) * C;
  const auto a = random_floats(n, 31, -2.0f, 2.0f), r = random_floats(n, 32);
  const auto w = random_floats(C, 33, 0.5f, 1.5f), bias = random_floats(C, 34);
  const auto garbage = random_floats(n, 35);
  auto fused = [&](backend& b) {
    dvec<float> da(b, a), dr(b, r), dw(b, w), db(b, bias), res(b, garbage), out(b, garbage);
    dvec<float> mean(b, N), rstd(b, N);
    b.residual_layernorm_forward(res.data(), out.data(), mean.data(), rstd.data(), da.data(),
                                 dr.data(), dw.data(), db.data(), N, C);
    return std::make_tuple(res.host(), out.host(), mean.host(), rstd.host());
  };
  const auto [res, out, mean, rstd] = fused(*be_);
  // The same bits as the two ops one after the other on the same backend.
  {
    dvec<float> da(*be_, a), dr(*be_, r), dw(*be_, w), db(*be_, bias), res2(*be_, n), out2(*be_, n),
        mean2(*be_, N), rstd2(*be_, N);
    be_->residual_forward(res2.data(), da.data(), dr.data(), n);
    be_->layernorm_forward(out2.data(), mean2.data(), rstd2.data(), res2.data(), dw.data(),
                           db.data(), N, C);
    EXPECT_EQ(res, res2.host());
    EXPECT_EQ(out, out2.host());
    EXPECT_EQ(mean, mean2.host());
    EXPECT_EQ(rstd, rstd2.host());
  }
  // Against the reference, with layernorm_forward_and_backward's tolerances (|res| <= 3).
  const auto [rres, rout, rmean, rrstd] = fused(*ref_);
  const double k = (4.0 * std::sqrt(double(C)) + 1.0) * eps32;
  const float r_max = max_abs(rrstd);
  EXPECT_EQ(res, rres) << "residual: one correctly rounded add";
  expect_close(mean, rmean, 3.0 * k, 0.0, "fused layernorm mean");
  expect_close(rstd, rrstd, 0.0, 2.0 * k, "fused layernorm rstd");
  expect_close(out, rout, 6.0 * r_max * k * 1.5 + 4 * eps32, 4 * eps32, "fused layernorm out");
}

DD_INSTANTIATE(shapes, DD_SUITE(layernorm),
               ::testing::Values(std::pair{1, 1}, std::pair{3, 7}, std::pair{5, 33},
                                 std::pair{64, 128}, std::pair{7, 1000}, std::pair{1024, 384},
                                 std::pair{2048, 128}));

// ---- encoder ------------------------------------------------------------------------------
class DD_SUITE(encoder)
    : public compare, public ::testing::WithParamInterface<std::tuple<int, int, int, int>> {};

TEST_P(DD_SUITE(encoder), forward_and_backward_match_reference) {
  const auto& p = GetParam();
  const int B = std::get<0>(p), T = std::get<1>(p), C = std::get<2>(p), V = std::get<3>(p);
  const auto tokens = random_ints(size_t(B) * T, V, 31);
  const auto wte = random_floats(size_t(V) * C, 32);
  const auto wpe = random_floats(size_t(T) * C, 33);
  const auto dout = random_floats(size_t(B) * T * C, 34);
  const auto g_te = random_floats(size_t(V) * C, 35);
  const auto g_pe = random_floats(size_t(T) * C, 36);
  auto run = [&](backend& b, const std::vector<float>& dy, const std::vector<float>& gte,
                 const std::vector<float>& gpe) {
    dvec<int32_t> tok(b, tokens);
    dvec<float> te(b, wte), pe(b, wpe), d(b, dy), gt(b, gte), gp(b, gpe);
    dvec<float> out(b, size_t(B) * T * C);
    b.encoder_forward(out.data(), tok.data(), te.data(), pe.data(), B, T, C);
    b.encoder_backward(gt.data(), gp.data(), d.data(), tok.data(), B, T, C);
    return std::make_tuple(out.host(), gt.host(), gp.host());
  };
  const auto [out, gte, gpe] = run(*be_, dout, g_te, g_pe);
  const auto [rout, rgte, rgpe] = run(*ref_, dout, g_te, g_pe);
  const auto [mout, mgte, mgpe] = run(*ref_, abs_of(dout), abs_of(g_te), abs_of(g_pe));
  // One float addition, correctly rounded in both: exact.
  EXPECT_EQ(out, rout) << "encoder_forward";
  // Sums over the positions sharing a token (K <= B·T) or a position (K = B).
  expect_within(gte, rgte, dot_tolerance(mgte, B * T), "encoder_backward dwte");
  expect_within(gpe, rgpe, dot_tolerance(mgpe, B), "encoder_backward dwpe");
}

DD_INSTANTIATE(shapes, DD_SUITE(encoder),
               ::testing::Values(std::tuple{1, 1, 1, 1}, std::tuple{2, 3, 5, 7},
                                 std::tuple{4, 17, 33, 3}, std::tuple{16, 128, 128, 256},
                                 std::tuple{3, 64, 384, 65}));

// ---- elementwise, loss, optimizer, syncer math ---------------------------------------------
TEST_F(DD_SUITE(compare), gelu_matches_reference) {
  for (size_t n : {size_t(1), size_t(7), size_t(1000), size_t(2048 * 512 + 3)}) {
    const auto x = random_floats(n, 41, -6.0f, 6.0f);
    const auto dy = random_floats(n, 42);
    const auto g0 = random_floats(n, 43);
    auto run = [&](backend& b) {
      dvec<float> dx(b, x), ddy(b, dy), g(b, g0), out(b, n);
      b.gelu_forward(out.data(), dx.data(), n);
      b.gelu_backward(g.data(), dx.data(), ddy.data(), n);
      return std::make_pair(out.host(), g.host());
    };
    const auto [out, g] = run(*be_);
    const auto [rout, rg] = run(*ref_);
    // A few float ops and one exp (<= 2 ulp): 16 ulp relative, plus 16·eps32 absolute near 0
    // where x·sigmoid(·) is computed from an O(1) x.
    expect_close(out, rout, 16 * eps32, 16 * eps32, "gelu_forward n=" + std::to_string(n));
    // gelu' has terms of size up to ~1.2 that cancel near x = -0.75 and x <= -3; with the
    // accumulated g0 (|g0| <= 1): 32·eps32 absolute.
    expect_close(g, rg, 32 * eps32, 16 * eps32, "gelu_backward n=" + std::to_string(n));
  }
}

TEST_F(DD_SUITE(compare), residual_scale_axpy_match_reference) {
  for (size_t n : {size_t(1), size_t(13), size_t(300001)}) {
    const auto a = random_floats(n, 51), b = random_floats(n, 52);
    auto run = [&](backend& be) {
      dvec<float> da(be, a), db(be, b), out(be, n);
      be.residual_forward(out.data(), da.data(), db.data(), n);
      be.scale(da.data(), 0.37f, n);
      be.axpy(db.data(), -1.7f, out.data(), n);
      return std::make_tuple(out.host(), da.host(), db.host());
    };
    const auto [out, sa, ax] = run(*be_);
    const auto [rout, rsa, rax] = run(*ref_);
    EXPECT_EQ(out, rout) << "residual_forward: one correctly rounded add";
    EXPECT_EQ(sa, rsa) << "scale: one correctly rounded multiply";
    // y + a·x: float rounds a·x then the sum (or fuses): <= 2 roundings of |y| + |a x| <= 4.4.
    expect_close(ax, rax, 2 * eps32 * 4.4, 0.0, "axpy");
  }
}

TEST_F(DD_SUITE(compare), softmax_crossentropy_matches_reference) {
  for (auto [N_, V_] :
       {std::pair{1, 1}, std::pair{3, 7}, std::pair{2048, 256}, std::pair{5, 1000}}) {
    const int N = N_, V = V_;  // a C++17 lambda cannot capture a binding (clang refuses)
    const auto logits = random_floats(size_t(N) * V, 61, -5.0f, 5.0f);
    const auto targets = random_ints(N, V, 62);
    const float dloss = 1.0f / N;
    auto run = [&](backend& b) {
      dvec<float> z(b, logits), probs(b, size_t(N) * V), losses(b, N), dz(b, size_t(N) * V);
      dvec<int32_t> y(b, targets);
      b.softmax_crossentropy_forward(losses.data(), probs.data(), z.data(), y.data(), N, V);
      b.softmax_crossentropy_backward(dz.data(), probs.data(), y.data(), dloss, N, V);
      return std::make_tuple(losses.host(), probs.host(), dz.host());
    };
    const auto [l, p, dz] = run(*be_);
    const auto [rl, rp, rdz] = run(*ref_);
    const std::string what = " N=" + std::to_string(N) + " V=" + std::to_string(V);
    // exp to 2 ulp, a V-term positive sum (relative (4 sqrt(V)+1) eps32), one division.
    const double k = (4.0 * std::sqrt(double(V)) + 4.0) * eps32;
    expect_close(p, rp, 0.0, k, "probs" + what);
    // loss = log(sum) + max - z[y], |terms| <= 5 + log V: absolute error k + 3 roundings.
    expect_close(l, rl, k + 3 * eps32 * (10.0 + std::log(double(V))), 0.0, "losses" + what);
    // dlogits = dloss·(p - onehot): p's relative error plus two roundings.
    expect_close(dz, rdz, 2 * eps32 * dloss, k, "dlogits" + what);
  }
}

TEST_F(DD_SUITE(compare), adamw_matches_reference) {
  for (int64_t step : {int64_t(1), int64_t(10), int64_t(1000)}) {
    const size_t n = 100003;
    const auto p0 = random_floats(n, 71), g = random_floats(n, 72, -0.1f, 0.1f);
    const auto m0 = random_floats(n, 73, -0.01f, 0.01f), v0 = random_floats(n, 74, 0.0f, 1e-3f);
    adamw_params hp;
    hp.lr = 3e-3f;
    hp.weight_decay = 0.1f;
    hp.step = step;
    auto run = [&](backend& b) {
      dvec<float> p(b, p0), dg(b, g), m(b, m0), v(b, v0);
      b.adamw_update(p.data(), dg.data(), m.data(), v.data(), n, hp);
      return std::make_tuple(p.host(), m.host(), v.host());
    };
    const auto [p, m, v] = run(*be_);
    const auto [rp, rm, rv] = run(*ref_);
    // m, v: two products and a sum, 3 roundings of terms <= |m0| + |g|.
    expect_close(m, rm, 3 * eps32 * 0.11, 0.0, "adamw m step " + std::to_string(step));
    expect_close(v, rv, 3 * eps32 * 1.1e-3, 0.0, "adamw v step " + std::to_string(step));
    // θ - lr·(m̂/(sqrt(v̂)+eps) + wd·θ): the update term is <= 1/sqrt(1-β2)·... ≈ 10 in size
    // at most here and carries ~8 roundings; scaled by lr, plus the final rounding of θ (<= 1).
    expect_close(p, rp, 8 * eps32 * 10.0 * hp.lr + 2 * eps32, 0.0,
                 "adamw params step " + std::to_string(step));
  }
}

// Segment sets over a flat buffer: odd lengths, an empty segment, decay and no decay alternating,
// one segment far larger than a chunk (the CPU backend cuts the concatenation into chunks that
// span segments).
std::vector<adamw_segment> test_segments(const std::vector<size_t>& lengths) {
  std::vector<adamw_segment> segs;
  size_t off = 0;
  for (size_t k = 0; k < lengths.size(); ++k) {
    segs.push_back({off, lengths[k], k % 2 == 0 ? 0.1f : 0.0f});
    off += lengths[k];
  }
  return segs;
}

TEST_F(DD_SUITE(compare), adamw_update_segments_matches_reference) {
  const std::vector<std::vector<size_t>> shapes = {
      {1}, {7, 0, 13}, {384, 384, 147456, 1152, 384, 0, 589824, 1}, {100003}, {3, 65537, 5, 99991}};
  for (const auto& lengths : shapes) {
    const auto segs = test_segments(lengths);
    const size_t n = segs.back().offset + segs.back().n;
    for (float gs : {1.0f, 0.37f}) {
      const auto p0 = random_floats(n, 171), g = random_floats(n, 172, -0.1f, 0.1f);
      const auto m0 = random_floats(n, 173, -0.01f, 0.01f);
      const auto v0 = random_floats(n, 174, 0.0f, 1e-3f);
      adamw_params hp;
      hp.lr = 3e-3f;
      hp.step = 10;
      auto run = [&](backend& b) {
        dvec<float> p(b, p0), dg(b, g), m(b, m0), v(b, v0);
        b.adamw_update_segments(p.data(), dg.data(), m.data(), v.data(), segs.data(), segs.size(),
                                gs, hp);
        return std::make_tuple(p.host(), m.host(), v.host());
      };
      const auto [p, m, v] = run(*be_);
      const auto [rp, rm, rv] = run(*ref_);
      // As adamw_matches_reference: both sides read float(gs · g) (the reference scales first).
      const std::string what = " n " + std::to_string(n) + " scale " + std::to_string(gs);
      expect_close(m, rm, 3 * eps32 * 0.11, 0.0, "segments m" + what);
      expect_close(v, rv, 3 * eps32 * 1.1e-3, 0.0, "segments v" + what);
      expect_close(p, rp, 8 * eps32 * 10.0 * hp.lr + 2 * eps32, 0.0, "segments params" + what);
    }
  }
}

TEST_F(DD_SUITE(compare), adamw_update_segments_equals_scale_then_per_segment_update) {
  // The documented bits: scale(grads, gs) then adamw_update per segment with its decay.
  const auto segs = test_segments({5, 40000, 0, 77, 123457, 64});
  const size_t n = segs.back().offset + segs.back().n;
  const auto p0 = random_floats(n, 181), g = random_floats(n, 182, -0.1f, 0.1f);
  const auto m0 = random_floats(n, 183, -0.01f, 0.01f), v0 = random_floats(n, 184, 0.0f, 1e-3f);
  for (float gs : {1.0f, 0.29f}) {
    adamw_params hp;
    hp.lr = 1e-3f;
    hp.step = 3;
    dvec<float> p(*be_, p0), dg(*be_, g), m(*be_, m0), v(*be_, v0);
    be_->adamw_update_segments(p.data(), dg.data(), m.data(), v.data(), segs.data(), segs.size(),
                               gs, hp);
    dvec<float> p2(*be_, p0), dg2(*be_, g), m2(*be_, m0), v2(*be_, v0);
    if (gs != 1.0f) be_->scale(dg2.data(), gs, n);
    for (const auto& s : segs) {
      adamw_params q = hp;
      q.weight_decay = s.weight_decay;
      be_->adamw_update(p2.data() + s.offset, dg2.data() + s.offset, m2.data() + s.offset,
                        v2.data() + s.offset, s.n, q);
    }
    EXPECT_EQ(p.host(), p2.host()) << "scale " << gs;
    EXPECT_EQ(m.host(), m2.host()) << "scale " << gs;
    EXPECT_EQ(v.host(), v2.host()) << "scale " << gs;
    EXPECT_NE(p.host(), p0);
  }
}

TEST_F(DD_SUITE(compare), reductions_match_reference) {
  for (size_t n : {size_t(0), size_t(1), size_t(17), size_t(1000003)}) {
    const auto x = random_floats(n, 81, -3.0f, 3.0f);
    dvec<float> a(*be_, x), r(*ref_, x);
    const double s = be_->sum_squares(a.data(), n), rs = ref_->sum_squares(r.data(), n);
    // Host backends accumulate the (exact) squares in double: relative error <= n·eps64. A
    // device backend may accumulate in float: the sqrt(n)·eps32 bound of dot_tolerance.
    const double rel =
        be_->name() == "cuda" ? (4.0 * std::sqrt(double(n)) + 1.0) * eps32 : 1e-15 * double(n);
    EXPECT_NEAR(s, rs, rel * std::max(rs, 1.0)) << "sum_squares n=" << n;
    EXPECT_TRUE(be_->all_finite(a.data(), n)) << n;
  }
  // all_finite must find a single inf or NaN anywhere, including the last element.
  const size_t n = 1000003;
  for (float bad : {INFINITY, -INFINITY, NAN}) {
    for (size_t pos : {size_t(0), size_t(n / 2 + 1), n - 1}) {
      auto x = random_floats(n, 82);
      x[pos] = bad;
      dvec<float> a(*be_, x);
      EXPECT_FALSE(be_->all_finite(a.data(), n)) << "value " << bad << " at " << pos;
    }
  }
  auto big = random_floats(n, 83);
  big[5] = 3.4e38f;  // the largest finite values are finite
  dvec<float> a(*be_, big);
  EXPECT_TRUE(be_->all_finite(a.data(), n));
}

TEST_F(DD_SUITE(compare), syncer_math_matches_reference) {
  for (size_t n : {size_t(1), size_t(9), size_t(200003)}) {
    for (int k : {1, 3, 8}) {
      std::vector<std::vector<float>> in;
      std::vector<float> w;
      for (int j = 0; j < k; ++j) {
        in.push_back(random_floats(n, 90 + j));
        w.push_back(0.1f + 0.3f * j);
      }
      auto run = [&](backend& b) {
        std::vector<dvec<float>> d;
        std::vector<const float*> ptrs;
        for (auto& v : in) d.emplace_back(b, v);
        for (auto& v : d) ptrs.push_back(v.data());
        dvec<float> out(b, n);
        b.weighted_sum(out.data(), ptrs.data(), w.data(), k, n);
        return out.host();
      };
      // k products and k-1 sums with Σ|w x| <= Σ w = at most 10: 2k roundings of that size.
      double sw = 0;
      for (float x : w) sw += x;
      expect_close(run(*be_), run(*ref_), 2.0 * k * eps32 * sw, 0.0,
                   "weighted_sum k=" + std::to_string(k) + " n=" + std::to_string(n));
    }
    const auto th = random_floats(n, 101), mo = random_floats(n, 102), de = random_floats(n, 103);
    auto run = [&](backend& b) {
      dvec<float> t(b, th), m(b, mo), d(b, de);
      b.nesterov_update(t.data(), m.data(), d.data(), 0.7f, 0.9f, n);
      return std::make_pair(t.host(), m.host());
    };
    const auto [t, m] = run(*be_);
    const auto [rt, rm] = run(*ref_);
    // b = mu·b + delta (|b| <= 1.9, 2 roundings); θ - lr(delta + mu b) (|θ| + 0.7·2.71, 4).
    expect_close(m, rm, 2 * eps32 * 1.9, 0.0, "nesterov momentum");
    expect_close(t, rt, 6 * eps32 * 2.9, 0.0, "nesterov theta");
  }
}

TEST_F(DD_SUITE(compare), backward_ops_accumulate) {
  // Running a backward op twice from zero gradients must give twice the gradient of one run
  // (exact: x + x is exact in float, and both runs see identical inputs).
  const int N = 37, IC = 19, OC = 23;
  const auto x = random_floats(size_t(N) * IC, 111), w = random_floats(size_t(OC) * IC, 112);
  const auto dy = random_floats(size_t(N) * OC, 113);
  dvec<float> dx(*be_, x), dw(*be_, w), ddy(*be_, dy);
  dvec<float> gi(*be_, size_t(N) * IC), gw(*be_, size_t(OC) * IC), gb(*be_, OC);
  be_->matmul_backward(gi.data(), gw.data(), gb.data(), ddy.data(), dx.data(), dw.data(), N, IC,
                       OC);
  const auto gi1 = gi.host(), gw1 = gw.host(), gb1 = gb.host();
  be_->matmul_backward(gi.data(), gw.data(), gb.data(), ddy.data(), dx.data(), dw.data(), N, IC,
                       OC);
  auto twice = [](std::vector<float> v) {
    for (auto& e : v) e *= 2.0f;
    return v;
  };
  EXPECT_EQ(gi.host(), twice(gi1));
  EXPECT_EQ(gw.host(), twice(gw1));
  EXPECT_EQ(gb.host(), twice(gb1));

  dvec<float> gg(*be_, size_t(N) * IC);
  be_->gelu_backward(gg.data(), dx.data(), dx.data(), size_t(N) * IC);
  const auto g1 = gg.host();
  be_->gelu_backward(gg.data(), dx.data(), dx.data(), size_t(N) * IC);
  EXPECT_EQ(gg.host(), twice(g1));
  // softmax_crossentropy_backward WRITES: a second call gives the same values, not twice.
  const auto targets = random_ints(N, OC, 114);
  dvec<int32_t> y(*be_, targets);
  dvec<float> probs(*be_, size_t(N) * OC), losses(*be_, N), dz(*be_, size_t(N) * OC);
  be_->softmax_crossentropy_forward(losses.data(), probs.data(), ddy.data(), y.data(), N, OC);
  be_->softmax_crossentropy_backward(dz.data(), probs.data(), y.data(), 0.5f, N, OC);
  const auto dz1 = dz.host();
  be_->softmax_crossentropy_backward(dz.data(), probs.data(), y.data(), 0.5f, N, OC);
  EXPECT_EQ(dz.host(), dz1);
}

TEST_F(DD_SUITE(compare), writing_backward_ops_equal_zeroing_then_accumulating) {
  // matmul_backward_writes_dinp and gelu_backward_writes ignore what dinp held and give the bits
  // of the accumulating op on a zeroed dinp; the weight gradients still accumulate. Large enough
  // that the CPU backend splits each op over its 2 threads.
  const int N = 300, IC = 96, OC = 160;
  const auto x = random_floats(size_t(N) * IC, 131), w = random_floats(size_t(OC) * IC, 132);
  const auto dy = random_floats(size_t(N) * OC, 133), garbage = random_floats(size_t(N) * IC, 134);
  const auto gw0 = random_floats(size_t(OC) * IC, 135), gb0 = random_floats(OC, 136);
  dvec<float> dx(*be_, x), dw(*be_, w), ddy(*be_, dy);
  dvec<float> gi_acc(*be_, size_t(N) * IC), gw_acc(*be_, gw0), gb_acc(*be_, gb0);
  dvec<float> gi_set(*be_, garbage), gw_set(*be_, gw0), gb_set(*be_, gb0);
  be_->matmul_backward(gi_acc.data(), gw_acc.data(), gb_acc.data(), ddy.data(), dx.data(),
                       dw.data(), N, IC, OC);
  be_->matmul_backward_writes_dinp(gi_set.data(), gw_set.data(), gb_set.data(), ddy.data(),
                                   dx.data(), dw.data(), N, IC, OC);
  EXPECT_EQ(gi_set.host(), gi_acc.host());
  EXPECT_EQ(gw_set.host(), gw_acc.host());
  EXPECT_EQ(gb_set.host(), gb_acc.host());
  EXPECT_NE(gw_set.host(), gw0) << "the weight gradient accumulated something";

  const size_t n = size_t(N) * IC;
  dvec<float> gg_acc(*be_, n), gg_set(*be_, garbage);
  be_->gelu_backward(gg_acc.data(), dx.data(), dx.data(), n);
  be_->gelu_backward_writes(gg_set.data(), dx.data(), dx.data(), n);
  EXPECT_EQ(gg_set.host(), gg_acc.host());
  EXPECT_NE(gg_set.host(), std::vector<float>(n, 0.0f));
}

TEST_F(DD_SUITE(compare), memory_roundtrip_and_zero_fill) {
  auto buf = be_->alloc<float>(1001);
  std::vector<float> h(1001, 1.0f);
  be_->download(h.data(), buf.data(), h.size());
  EXPECT_EQ(h, std::vector<float>(1001, 0.0f)) << "allocations are zero-filled";
  const auto x = random_floats(1001, 121);
  be_->upload(buf.data(), x.data(), x.size());
  auto other = be_->alloc<float>(1001);
  be_->copy(other.data(), buf.data(), 1001);
  be_->download(h.data(), other.data(), h.size());
  EXPECT_EQ(h, x);
  be_->zero(other.data(), 500);
  be_->download(h.data(), other.data(), h.size());
  EXPECT_EQ(h[499], 0.0f);
  EXPECT_EQ(h[500], x[500]);
  // A zero large enough to be split over the CPU backend's threads, ending mid-buffer.
  auto big = be_->alloc<float>(100001);
  const auto y = random_floats(100001, 122);
  be_->upload(big.data(), y.data(), y.size());
  be_->zero(big.data(), 99999);
  std::vector<float> hb(100001);
  be_->download(hb.data(), big.data(), hb.size());
  EXPECT_EQ(std::vector<float>(hb.begin(), hb.begin() + 99999), std::vector<float>(99999, 0.0f));
  EXPECT_EQ(hb[99999], y[99999]);
  EXPECT_EQ(hb[100000], y[100000]);
  auto empty = be_->alloc<float>(0);
  EXPECT_TRUE(empty.empty());
  EXPECT_NE(empty.data(), nullptr);
}

#ifdef DD_TEST_INIT_ALL
// With the real CUDA backend registered: on a machine without a usable GPU (no driver, or
// "driver version is insufficient"), make_backend("cuda") must throw a clear backend_error.
TEST(cuda_registration, real_factory_without_device_throws_clearly) {
  init_all_backends();
  ASSERT_TRUE(cuda_backend_compiled());
  if (cuda_available()) GTEST_SKIP() << "a CUDA device is present";
  try {
    make_backend("cuda");
    FAIL() << "make_backend(\"cuda\") succeeded without a device";
  } catch (const backend_error& e) {
    EXPECT_NE(std::string(e.what()).find("no usable CUDA device"), std::string::npos) << e.what();
  }
}
#endif

}  // namespace
}  // namespace dd::kernels::test
