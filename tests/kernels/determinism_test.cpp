// tests/kernels/determinism_test.cpp — the CPU backend gives bit-identical results for the same
// inputs and thread count: a whole transformer-block forward/backward chain is run twice on two
// backend objects with 1 thread and with 2 threads and the outputs compared byte for byte.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "kernels/backend.hpp"
#include "tests/kernels/test_util.hpp"

namespace dd::kernels::test {
namespace {

// Runs layernorm → qkv matmul → attention → projection → GELU → loss and the backward of each
// at the default model's sizes (B=16... reduced to B=4 to keep the test fast) and returns every
// output and gradient concatenated.
std::vector<float> run_chain(backend& b) {
  const int B = 4, T = 128, C = 128, NH = 4, V = 256, N = B * T;
  const auto x0 = random_floats(size_t(N) * C, 201);
  const auto lw = random_floats(C, 202, 0.5f, 1.5f), lb = random_floats(C, 203);
  const auto wqkv = random_floats(size_t(3) * C * C, 204, -0.1f, 0.1f);
  const auto bqkv = random_floats(size_t(3) * C, 205);
  const auto wout = random_floats(size_t(V) * C, 206, -0.1f, 0.1f);
  const auto targets = random_ints(N, V, 207);
  dvec<float> x(b, x0), dlw(b, lw), dlb(b, lb), dwq(b, wqkv), dbq(b, bqkv), dwo(b, wout);
  dvec<int32_t> y(b, targets);
  dvec<float> ln(b, size_t(N) * C), mean(b, N), rstd(b, N), qkv(b, size_t(N) * 3 * C);
  dvec<float> att(b, size_t(B) * NH * T * T), ao(b, size_t(N) * C), ge(b, size_t(N) * C);
  dvec<float> logits(b, size_t(N) * V), probs(b, size_t(N) * V), losses(b, N);
  b.layernorm_forward(ln.data(), mean.data(), rstd.data(), x.data(), dlw.data(), dlb.data(), N, C);
  b.matmul_forward(qkv.data(), ln.data(), dwq.data(), dbq.data(), N, C, 3 * C);
  b.attention_forward(ao.data(), att.data(), qkv.data(), B, T, C, NH);
  b.gelu_forward(ge.data(), ao.data(), size_t(N) * C);
  b.matmul_forward(logits.data(), ge.data(), dwo.data(), nullptr, N, C, V);
  b.softmax_crossentropy_forward(losses.data(), probs.data(), logits.data(), y.data(), N, V);

  dvec<float> dlogits(b, size_t(N) * V), dge(b, size_t(N) * C), dwo_g(b, size_t(V) * C);
  dvec<float> dao(b, size_t(N) * C), dqkv(b, size_t(N) * 3 * C), scratch(b, att.size());
  dvec<float> dln(b, size_t(N) * C), dwq_g(b, wqkv.size()), dbq_g(b, bqkv.size());
  dvec<float> dx(b, size_t(N) * C), dlw_g(b, C), dlb_g(b, C);
  b.softmax_crossentropy_backward(dlogits.data(), probs.data(), y.data(), 1.0f / N, N, V);
  b.matmul_backward(dge.data(), dwo_g.data(), nullptr, dlogits.data(), ge.data(), dwo.data(), N, C,
                    V);
  b.gelu_backward(dao.data(), ao.data(), dge.data(), size_t(N) * C);
  b.attention_backward(dqkv.data(), scratch.data(), dao.data(), qkv.data(), att.data(), B, T, C,
                       NH);
  b.matmul_backward(dln.data(), dwq_g.data(), dbq_g.data(), dqkv.data(), ln.data(), dwq.data(), N,
                    C, 3 * C);
  b.layernorm_backward(dx.data(), dlw_g.data(), dlb_g.data(), dln.data(), x.data(), dlw.data(),
                       mean.data(), rstd.data(), N, C);
  // The fused residual + layer norm, and AdamW over segments of the qkv weight with a clip scale.
  dvec<float> res(b, size_t(N) * C), ln2(b, size_t(N) * C), mean2(b, N), rstd2(b, N);
  b.residual_layernorm_forward(res.data(), ln2.data(), mean2.data(), rstd2.data(), x.data(),
                               ao.data(), dlw.data(), dlb.data(), N, C);
  dvec<float> am(b, wqkv.size()), av(b, wqkv.size());
  const adamw_segment segs[] = {{0, 1000, 0.1f}, {1000, wqkv.size() - 1000, 0.0f}};
  adamw_params hp;
  b.adamw_update_segments(dwq.data(), dwq_g.data(), am.data(), av.data(), segs, 2, 0.5f, hp);
  std::vector<float> all;
  for (const dvec<float>* v : {&losses, &probs, &att, &qkv, &dx, &dlw_g, &dlb_g, &dwq_g, &dbq_g,
                               &dwo_g, &dqkv, &res, &ln2, &dwq, &am, &av}) {
    const auto h = v->host();
    all.insert(all.end(), h.begin(), h.end());
  }
  const float ss = static_cast<float>(b.sum_squares(dqkv.data(), dqkv.size()));
  all.push_back(ss);
  return all;
}

class determinism : public ::testing::TestWithParam<int> {};

TEST_P(determinism, same_inputs_same_threads_bit_identical) {
  backend_options opts;
  opts.threads = GetParam();
  auto a = make_backend("cpu", opts);
  auto b = make_backend("cpu", opts);
  const auto ra = run_chain(*a);
  const auto rb = run_chain(*b);
  const auto ra2 = run_chain(*a);
  ASSERT_EQ(ra.size(), rb.size());
  EXPECT_EQ(std::memcmp(ra.data(), rb.data(), ra.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(ra.data(), ra2.data(), ra.size() * sizeof(float)), 0);
  // The chain really computed something: a mean loss near log(V) for small random logits.
  double loss = 0;
  for (int i = 0; i < 4 * 128; ++i) loss += ra[i];
  EXPECT_NEAR(loss / (4 * 128), std::log(256.0), 0.5);
}

INSTANTIATE_TEST_SUITE_P(threads, determinism, ::testing::Values(1, 2));

}  // namespace
}  // namespace dd::kernels::test
