// tests/kernels/vit_ops_test.cpp — the vision transformer's ops (kernels/backend.hpp): the cpu
// backend's bidirectional attention against the reference over odd shapes (tolerances argued as
// in backend_compare_test.cpp's causal attention), the token assembly and pooling ops against
// hand-computed values on both host backends, and the base class's refusal.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/reference/reference_backend.hpp"
#include "tests/kernels/test_util.hpp"
#include "tests/support/backend_pair.hpp"

namespace dd::kernels::test {
namespace {

class vit_attention : public backend_pair_test<attn_shape> {};

TEST_P(vit_attention, bidirectional_cpu_matches_reference) {
  const auto s = GetParam();
  const int B = s.B, T = s.T, NH = s.NH;
  const auto ref = run_attention(*ref_, s, 21, true);
  expect_attention_close(run_attention(*cpu_, s, 21, true), ref, s, "bidirectional");
  const auto& ratt = ref.att;
  // Every row is a full distribution: sums to 1 and (T > 1) puts weight above the diagonal.
  for (size_t row = 0; row < size_t(B) * NH * T; ++row) {
    double sum = 0, above = 0;
    const size_t t = row % T;
    for (int t2 = 0; t2 < T; ++t2) {
      sum += ratt[row * T + t2];
      if (size_t(t2) > t) above += ratt[row * T + t2];
    }
    ASSERT_NEAR(sum, 1.0, 1e-6) << "row " << row;
    if (t + 1 < size_t(T)) {
      ASSERT_GT(above, 0.0) << "row " << row;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(shapes, vit_attention,
                         ::testing::Values(attn_shape{1, 1, 4, 1}, attn_shape{2, 3, 6, 2},
                                           attn_shape{1, 5, 8, 4}, attn_shape{2, 17, 24, 3},
                                           attn_shape{3, 31, 40, 5}, attn_shape{2, 33, 64, 4},
                                           attn_shape{1, 50, 72, 6}, attn_shape{2, 65, 32, 1},
                                           attn_shape{2, 77, 200, 4}),
                         attn_shape_name);

// At T = 1 there is nothing to mask: both attentions give the same result.
TEST(vit_attention_single, equals_causal_at_one_position) {
  auto ref = make_reference_backend();
  const auto qkv = random_floats(2 * 1 * 24, 5);
  dvec<float> q(*ref, qkv), o1(*ref, 16), o2(*ref, 16), a1(*ref, 4), a2(*ref, 4);
  ref->attention_forward(o1.data(), a1.data(), q.data(), 2, 1, 8, 2);
  ref->attention_forward_bidirectional(o2.data(), a2.data(), q.data(), 2, 1, 8, 2);
  EXPECT_EQ(o1.host(), o2.host());
  EXPECT_EQ(a2.host(), std::vector<float>(4, 1.0f));
}

class vit_glue : public ::testing::TestWithParam<std::string> {};

TEST_P(vit_glue, embed_and_pool_hand_values) {
  auto be = make_backend(GetParam(), {1, 0});
  const int B = 2, P = 2, C = 3;
  // patches[b,i,c] = 100b + 10i + c; cls = {-1,-2,-3}; pos[t,c] = 0.5·t.
  std::vector<float> patches, cls = {-1, -2, -3}, pos;
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < P; ++i)
      for (int c = 0; c < C; ++c) patches.push_back(100.0f * b + 10.0f * i + c);
  for (int t = 0; t < 3; ++t)
    for (int c = 0; c < C; ++c) pos.push_back(0.5f * t);
  dvec<float> dp(*be, patches), dc(*be, cls), dpos(*be, pos), out(*be, size_t(B) * 3 * C);
  be->vit_embed_forward(out.data(), dp.data(), dc.data(), dpos.data(), B, P, C, 1);
  const std::vector<float> want = {-1, -2, -3, 0.5f,   1.5f,   2.5f,   11,  12,  13,
                                   -1, -2, -3, 100.5f, 101.5f, 102.5f, 111, 112, 113};
  EXPECT_EQ(out.host(), want);
  // Without a cls token: T = P.
  dvec<float> out0(*be, size_t(B) * P * C);
  be->vit_embed_forward(out0.data(), dp.data(), nullptr, dpos.data(), B, P, C, 0);
  EXPECT_EQ(out0.host(), (std::vector<float>{0, 1, 2, 10.5f, 11.5f, 12.5f, 100, 101, 102, 110.5f,
                                             111.5f, 112.5f}));

  // Backward accumulates: dpatches += dout at patch positions; dcls, dpos += Σ_b.
  std::vector<float> dout(size_t(B) * 3 * C);
  for (size_t i = 0; i < dout.size(); ++i) dout[i] = float(i);
  dvec<float> ddout(*be, dout), gp(*be, std::vector<float>(size_t(B) * P * C, 1.0f)),
      gc(*be, std::vector<float>(C, 1.0f)), gpos(*be, std::vector<float>(3 * C, 1.0f));
  be->vit_embed_backward(gp.data(), gc.data(), gpos.data(), ddout.data(), B, P, C, 1);
  EXPECT_EQ(gc.host(), (std::vector<float>{1 + 0 + 9, 1 + 1 + 10, 1 + 2 + 11}));
  EXPECT_EQ(gpos.host(), (std::vector<float>{10, 12, 14, 16, 18, 20, 22, 24, 26}));
  EXPECT_EQ(gp.host(), (std::vector<float>{4, 5, 6, 7, 8, 9, 13, 14, 15, 16, 17, 18}));

  // Pooling: [0, 1) takes token 0; [0, 3) averages.
  dvec<float> pooled(*be, size_t(B) * C);
  be->token_mean_forward(pooled.data(), ddout.data(), B, 3, C, 0, 1);
  EXPECT_EQ(pooled.host(), (std::vector<float>{0, 1, 2, 9, 10, 11}));
  be->token_mean_forward(pooled.data(), ddout.data(), B, 3, C, 0, 3);
  EXPECT_EQ(pooled.host(), (std::vector<float>{3, 4, 5, 12, 13, 14}));
  dvec<float> dpool(*be, std::vector<float>{3, 6, 9, 0, 0, 3}),
      dinp(*be, std::vector<float>(size_t(B) * 3 * C, 1.0f));
  be->token_mean_backward(dinp.data(), dpool.data(), B, 3, C, 1, 3);  // tokens 1, 2: / 2
  EXPECT_EQ(dinp.host(), (std::vector<float>{1, 1, 1, 2.5f, 4, 5.5f, 2.5f, 4, 5.5f, 1, 1, 1, 1, 1,
                                             2.5f, 1, 1, 2.5f}));
}

INSTANTIATE_TEST_SUITE_P(host, vit_glue, ::testing::Values("reference", "cpu"));

TEST(vit_ops_base, refuse_naming_backend_and_op) {
  bare_backend b;
  try {
    b.attention_forward_bidirectional(nullptr, nullptr, nullptr, 1, 1, 1, 1);
    FAIL() << "no exception";
  } catch (const backend_error& e) {
    EXPECT_NE(std::string(e.what()).find("backend \"bare\" has no attention_forward_bidirectional"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(b.vit_embed_forward(nullptr, nullptr, nullptr, nullptr, 1, 1, 1, 0), backend_error);
  EXPECT_THROW(b.token_mean_backward(nullptr, nullptr, 1, 1, 1, 0, 1), backend_error);
}

}  // namespace
}  // namespace dd::kernels::test
