// tests/runtime/model_test.cpp — the model interface (runtime/model.hpp): config round trips
// through JSON (checkpoint metadata), the factory by kind, GPT seen through the interface, and a
// checkpoint written and read through it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "kernels/backend.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/gpt.hpp"
#include "runtime/model.hpp"

namespace {

using ::testing::HasSubstr;

// ---- docs/models.md's smallest example, compiled here so the page cannot rot ----------------
// A bigram language model: logits[n, :] = W[token[n], :], one (V, V) tensor "w" (an embedding:
// merged by average), loss = mean softmax cross-entropy of the next token.
class bigram : public dd::model {
 public:
  bigram(dd::kernels::backend& be, int vocab)
      : dd::model(be, {{"w", 0, size_t(vocab) * vocab, {vocab, vocab}, true, -1, false}}),
        V_(vocab) {}
  dd::model_config config() const override {
    dd::model_config c;
    c.kind = "bigram";  // (a built-in kind is also listed in make_model and model_config)
    c.vocab = V_;
    return c;
  }
  void init(uint64_t) override {}  // all zeros: uniform next-token distribution
  double flops_per_sample(int T) const override { return 0.0 * T; }  // no matmul
  double forward(const dd::model_batch& b) override {
    auto& be = backend();
    const size_t N = size_t(b.B) * b.T;
    tokens_ = be.alloc<int32_t>(N);
    targets_ = be.alloc<int32_t>(N);
    zero_pos_ = be.alloc<float>(size_t(b.T) * V_);  // encoder_forward adds a position row
    logits_ = be.alloc<float>(N * V_);
    probs_ = be.alloc<float>(N * V_);
    losses_ = be.alloc<float>(N);
    be.upload(tokens_.data(), b.inputs.data(), N);
    be.upload(targets_.data(), b.targets.data(), N);
    be.encoder_forward(logits_.data(), tokens_.data(), p(0), zero_pos_.data(), b.B, b.T, V_);
    be.softmax_crossentropy_forward(losses_.data(), probs_.data(), logits_.data(), targets_.data(),
                                    int(N), V_);
    std::vector<float> l(N);
    be.download(l.data(), losses_.data(), N);
    double sum = 0;
    for (float x : l) sum += x;
    B_ = b.B;
    T_ = b.T;
    return sum / double(N);
  }
  void backward() override {
    if (B_ == 0) throw std::logic_error("bigram::backward: no forward()");
    auto& be = backend();
    const int N = B_ * T_;
    be.softmax_crossentropy_backward(logits_.data(), probs_.data(), targets_.data(),
                                     1.0f / float(N), N, V_);  // dlogits, reusing logits_
    be.encoder_backward(g(0), zero_pos_.data(), logits_.data(), tokens_.data(), B_, T_, V_);
  }

 private:
  int V_, B_ = 0, T_ = 0;
  dd::kernels::buffer<int32_t> tokens_, targets_;
  dd::kernels::buffer<float> zero_pos_, logits_, probs_, losses_;
};
// ---- end of the example ----------------------------------------------------------------------

TEST(Model, SmallestExampleTrainsAndHasExactGradient) {
  auto be = dd::kernels::make_backend("reference");
  bigram m(*be, 5);
  EXPECT_EQ(m.num_params(), 25u);
  EXPECT_TRUE(m.tensor("w").is_embedding);
  dd::model_batch b;
  b.B = 1;
  b.T = 4;
  b.inputs = {0, 1, 2, 3};
  b.targets = {1, 2, 3, 4};
  EXPECT_NEAR(m.forward(b), std::log(5.0), 1e-6);  // zeros: uniform over 5 tokens
  m.zero_grad();
  m.backward();
  const auto gr = m.get_gradients();
  // d loss / d w[0][1] = (p - 1)/N = (0.2 - 1)/4; d/d w[0][0] = 0.2/4; row 4 unused: 0.
  EXPECT_NEAR(gr[0 * 5 + 1], -0.8 / 4, 1e-6);
  EXPECT_NEAR(gr[0 * 5 + 0], 0.2 / 4, 1e-6);
  EXPECT_EQ(gr[4 * 5 + 2], 0.0f);
}

TEST(ModelConfig, JsonRoundTripCarriesKind) {
  dd::model_config c(dd::gpt_config{256, 16, 2, 2, 32});
  const auto j = c.to_json();
  EXPECT_EQ(j.at("kind"), "gpt");
  EXPECT_EQ(j.at("width"), 32);
  EXPECT_EQ(j.at("layers"), 2);
  const auto back = dd::model_config::from_json(j);
  EXPECT_EQ(back, c);
  EXPECT_EQ(back.kind, "gpt");
}

TEST(ModelConfig, MissingKindIsGpt) {
  // A checkpoint written before model kinds existed has only the five GPT fields.
  const auto j =
      nlohmann::json::parse(R"({"vocab":256,"context":16,"layers":2,"heads":2,"width":32})");
  const auto c = dd::model_config::from_json(j);
  EXPECT_EQ(c.kind, "gpt");
  EXPECT_EQ(c.context, 16);
}

TEST(ModelConfig, UnknownKindAndBadFieldsAreNamed) {
  auto j = dd::model_config{}.to_json();
  j["kind"] = "mamba";
  try {
    (void)dd::model_config::from_json(j);
    FAIL() << "unknown kind accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("unknown kind 'mamba'"));
  }
  j["kind"] = 3;
  try {
    (void)dd::model_config::from_json(j);
    FAIL() << "numeric kind accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("'kind' must be a string"));
  }
  auto k = dd::model_config{}.to_json();
  k.erase("width");
  try {
    (void)dd::model_config::from_json(k);
    FAIL() << "missing width accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("'width'"));
  }
}

TEST(Model, FactoryMakesGptWithItsLayout) {
  auto be = dd::kernels::make_backend("reference");
  dd::model_config c(dd::gpt_config{256, 8, 1, 2, 8});
  auto m = dd::make_model(*be, c);
  ASSERT_NE(dynamic_cast<dd::gpt*>(m.get()), nullptr);
  EXPECT_EQ(m->config(), c);
  const auto expect = dd::gpt_tensors(c);
  ASSERT_EQ(m->tensors().size(), expect.size());
  ASSERT_EQ(dd::model_tensors(c).size(), expect.size());
  for (size_t i = 0; i < expect.size(); ++i) {
    EXPECT_EQ(m->tensors()[i].name, expect[i].name);
    EXPECT_EQ(m->tensors()[i].offset, expect[i].offset);
    EXPECT_EQ(dd::model_tensors(c)[i].offset, expect[i].offset);
  }
  EXPECT_EQ(m->num_params(), dd::gpt_num_params(c));
  // 6·(L·12·C² + V·C) + 6·L·T·C per token, times T = 8 tokens.
  EXPECT_DOUBLE_EQ(m->flops_per_sample(8), 8.0 * (6.0 * (12.0 * 64 + 256.0 * 8) + 6.0 * 8 * 8));
  dd::model_config bad = c;
  bad.kind = "nope";
  EXPECT_THROW((void)dd::make_model(*be, bad), std::invalid_argument);
}

TEST(Model, InterfaceForwardMatchesGptForward) {
  auto be = dd::kernels::make_backend("reference");
  dd::gpt_config c{256, 8, 1, 2, 8};
  dd::gpt direct(*be, c);
  direct.init(5);
  auto via = dd::make_model(*be, c);
  via->init(5);
  EXPECT_EQ(via->get_parameters(), direct.get_parameters());
  dd::model_batch b;
  b.B = 2;
  b.T = 8;
  for (int i = 0; i < 16; ++i) {
    b.inputs.push_back((i * 37) % 256);
    b.targets.push_back((i * 53 + 1) % 256);
  }
  const double l1 = direct.forward(b.inputs, b.targets, 2, 8);
  const double l2 = via->forward(b);
  EXPECT_EQ(l1, l2);
  const auto metric = via->evaluate(b);
  EXPECT_EQ(metric.loss, l1);
  EXPECT_TRUE(std::isnan(metric.accuracy));
  // Near-uniform logits at init: loss close to ln 256.
  EXPECT_NEAR(l1, std::log(256.0), 0.05);
}

TEST(Model, CheckpointThroughInterfaceStoresKind) {
  auto be = dd::kernels::make_backend("reference");
  dd::model_config c(dd::gpt_config{256, 8, 1, 2, 8});
  auto m = dd::make_model(*be, c);
  m->init(9);
  const auto path = (std::filesystem::temp_directory_path() / "dd_model_test.safetensors").string();
  dd::save_checkpoint(path, *m, nullptr, {});
  const auto f = dd::read_safetensors(path);
  EXPECT_EQ(f.metadata.at("format"), "dd-gpt-1");
  EXPECT_EQ(dd::model_config::from_json(nlohmann::json::parse(f.metadata.at("config"))), c);
  auto fresh = dd::make_model(*be, c);
  (void)dd::load_checkpoint(path, *fresh, nullptr);
  EXPECT_EQ(fresh->get_parameters(), m->get_parameters());
  std::remove(path.c_str());
}

}  // namespace
