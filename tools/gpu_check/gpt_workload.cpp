// tools/gpu_check/gpt_workload.cpp — the GPT training step used by dd-gpu-check (see
// gpt_workload.hpp). Sequence of ops as in llm.c's train_gpt2.c.
#include "tools/gpu_check/gpt_workload.hpp"

#include <random>
#include <string>

namespace dd::gpu_check {

std::string gpt_shape::str() const {
  return "B=" + std::to_string(B) + " T=" + std::to_string(model.context) +
         " C=" + std::to_string(model.width) + " L=" + std::to_string(model.layers) +
         " NH=" + std::to_string(model.heads) + " V=" + std::to_string(model.vocab);
}

namespace {

/// Hands out consecutive slices of `base`; with base == nullptr it only counts.
struct bump {
  float* base;
  size_t used = 0;
  float* take(size_t n) {
    float* p = base != nullptr ? base + used : nullptr;
    used += n;
    return p;
  }
};

}  // namespace

size_t gpt_workload::bind_params(float* base, const gpt_shape& s, model_params& p) {
  bump b{base};
  const size_t C = s.model.width;
  p.wte = b.take(static_cast<size_t>(s.model.vocab) * C);
  p.wpe = b.take(static_cast<size_t>(s.model.context) * C);
  p.layers.resize(static_cast<size_t>(s.model.layers));
  for (auto& l : p.layers) {
    l.ln1w = b.take(C);
    l.ln1b = b.take(C);
    l.qkvw = b.take(3 * C * C);
    l.qkvb = b.take(3 * C);
    l.attprojw = b.take(C * C);
    l.attprojb = b.take(C);
    l.ln2w = b.take(C);
    l.ln2b = b.take(C);
    l.fcw = b.take(4 * C * C);
    l.fcb = b.take(4 * C);
    l.fcprojw = b.take(4 * C * C);
    l.fcprojb = b.take(C);
  }
  p.lnfw = b.take(C);
  p.lnfb = b.take(C);
  return b.used;
}

size_t gpt_workload::bind_acts(float* base, const gpt_shape& s, model_acts& a) {
  bump b{base};
  const size_t N = static_cast<size_t>(s.B) * s.model.context;
  const size_t C = s.model.width;
  a.encoded = b.take(N * C);
  a.layers.resize(static_cast<size_t>(s.model.layers));
  for (auto& l : a.layers) {
    l.ln1 = b.take(N * C);
    l.ln1_mean = b.take(N);
    l.ln1_rstd = b.take(N);
    l.qkv = b.take(3 * N * C);
    l.atty = b.take(N * C);
    l.att = b.take(static_cast<size_t>(s.B) * s.model.heads * s.model.context * s.model.context);
    l.attproj = b.take(N * C);
    l.res2 = b.take(N * C);
    l.ln2 = b.take(N * C);
    l.ln2_mean = b.take(N);
    l.ln2_rstd = b.take(N);
    l.fch = b.take(4 * N * C);
    l.fch_gelu = b.take(4 * N * C);
    l.fcproj = b.take(N * C);
    l.res3 = b.take(N * C);
  }
  a.lnf = b.take(N * C);
  a.lnf_mean = b.take(N);
  a.lnf_rstd = b.take(N);
  a.logits = b.take(N * s.model.vocab);
  a.probs = b.take(N * s.model.vocab);
  a.losses = b.take(N);
  return b.used;
}

gpt_workload::gpt_workload(kernels::backend& be, const gpt_shape& shape, uint64_t seed)
    : be_(be), shape_(shape) {
  model_params count_p;
  model_acts count_a;
  num_params_ = bind_params(nullptr, shape_, count_p);
  num_acts_ = bind_acts(nullptr, shape_, count_a);
  params_buf_ = be_.alloc<float>(num_params_);
  grads_buf_ = be_.alloc<float>(num_params_);
  m_buf_ = be_.alloc<float>(num_params_);
  v_buf_ = be_.alloc<float>(num_params_);
  acts_buf_ = be_.alloc<float>(num_acts_);
  dacts_buf_ = be_.alloc<float>(num_acts_);
  scratch_buf_ = be_.alloc<float>(static_cast<size_t>(shape_.B) * shape_.model.heads *
                                  shape_.model.context * shape_.model.context);
  bind_params(params_buf_.data(), shape_, params_);
  bind_params(grads_buf_.data(), shape_, grads_);
  bind_acts(acts_buf_.data(), shape_, acts_);
  bind_acts(dacts_buf_.data(), shape_, dacts_);

  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> w(-0.05f, 0.05f);
  std::vector<float> host(num_params_);
  for (auto& x : host) x = w(rng);
  be_.upload(params_buf_.data(), host.data(), host.size());
  std::vector<float> ones(static_cast<size_t>(shape_.model.width));
  for (auto& x : ones) x = 1.0f + 0.1f * w(rng);
  for (const auto& l : params_.layers) {
    be_.upload(l.ln1w, ones.data(), ones.size());
    be_.upload(l.ln2w, ones.data(), ones.size());
  }
  be_.upload(params_.lnfw, ones.data(), ones.size());

  const size_t N = static_cast<size_t>(shape_.tokens());
  std::uniform_int_distribution<int32_t> tok(0, shape_.model.vocab - 1);
  std::vector<int32_t> tokens(N), targets(N);
  for (size_t i = 0; i < N; ++i) {
    tokens[i] = tok(rng);
    targets[i] = tok(rng);
  }
  tokens_buf_ = be_.alloc<int32_t>(N);
  targets_buf_ = be_.alloc<int32_t>(N);
  be_.upload(tokens_buf_.data(), tokens.data(), N);
  be_.upload(targets_buf_.data(), targets.data(), N);
}

void gpt_workload::forward_backward() {
  const int B = shape_.B, T = shape_.model.context, C = shape_.model.width, NH = shape_.model.heads,
            V = shape_.model.vocab;
  const int N = B * T;
  const size_t NC = static_cast<size_t>(N) * C;
  const int32_t* tokens = tokens_buf_.data();
  const int32_t* targets = targets_buf_.data();

  // ---- forward
  be_.encoder_forward(acts_.encoded, tokens, params_.wte, params_.wpe, B, T, C);
  const float* residual = acts_.encoded;
  for (int li = 0; li < shape_.model.layers; ++li) {
    const layer_params& p = params_.layers[li];
    const layer_acts& a = acts_.layers[li];
    be_.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, residual, p.ln1w, p.ln1b, N, C);
    be_.matmul_forward(a.qkv, a.ln1, p.qkvw, p.qkvb, N, C, 3 * C);
    be_.attention_forward(a.atty, a.att, a.qkv, B, T, C, NH);
    be_.matmul_forward(a.attproj, a.atty, p.attprojw, p.attprojb, N, C, C);
    be_.residual_forward(a.res2, residual, a.attproj, NC);
    be_.layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, p.ln2w, p.ln2b, N, C);
    be_.matmul_forward(a.fch, a.ln2, p.fcw, p.fcb, N, C, 4 * C);
    be_.gelu_forward(a.fch_gelu, a.fch, 4 * NC);
    be_.matmul_forward(a.fcproj, a.fch_gelu, p.fcprojw, p.fcprojb, N, 4 * C, C);
    be_.residual_forward(a.res3, a.res2, a.fcproj, NC);
    residual = a.res3;
  }
  be_.layernorm_forward(acts_.lnf, acts_.lnf_mean, acts_.lnf_rstd, residual, params_.lnfw,
                        params_.lnfb, N, C);
  be_.matmul_forward(acts_.logits, acts_.lnf, params_.wte, nullptr, N, C, V);
  be_.softmax_crossentropy_forward(acts_.losses, acts_.probs, acts_.logits, targets, N, V);

  // ---- backward
  be_.zero(grads_buf_.data(), num_params_);
  be_.zero(dacts_buf_.data(), num_acts_);
  be_.softmax_crossentropy_backward(dacts_.logits, acts_.probs, targets, 1.0f / N, N, V);
  be_.matmul_backward(dacts_.lnf, grads_.wte, nullptr, dacts_.logits, acts_.lnf, params_.wte, N, C,
                      V);
  float* dresidual = dacts_.layers.back().res3;
  be_.layernorm_backward(dresidual, grads_.lnfw, grads_.lnfb, dacts_.lnf, residual, params_.lnfw,
                         acts_.lnf_mean, acts_.lnf_rstd, N, C);
  for (int li = shape_.model.layers - 1; li >= 0; --li) {
    const layer_params& p = params_.layers[li];
    const layer_params& g = grads_.layers[li];
    const layer_acts& a = acts_.layers[li];
    const layer_acts& d = dacts_.layers[li];
    const float* res_in = li == 0 ? acts_.encoded : acts_.layers[li - 1].res3;
    float* dres_in = li == 0 ? dacts_.encoded : dacts_.layers[li - 1].res3;
    // res3 = res2 + fcproj
    be_.axpy(d.res2, 1.0f, d.res3, NC);
    be_.axpy(d.fcproj, 1.0f, d.res3, NC);
    be_.matmul_backward(d.fch_gelu, g.fcprojw, g.fcprojb, d.fcproj, a.fch_gelu, p.fcprojw, N, 4 * C,
                        C);
    be_.gelu_backward(d.fch, a.fch, d.fch_gelu, 4 * NC);
    be_.matmul_backward(d.ln2, g.fcw, g.fcb, d.fch, a.ln2, p.fcw, N, C, 4 * C);
    be_.layernorm_backward(d.res2, g.ln2w, g.ln2b, d.ln2, a.res2, p.ln2w, a.ln2_mean, a.ln2_rstd, N,
                           C);
    // res2 = res_in + attproj
    be_.axpy(dres_in, 1.0f, d.res2, NC);
    be_.axpy(d.attproj, 1.0f, d.res2, NC);
    be_.matmul_backward(d.atty, g.attprojw, g.attprojb, d.attproj, a.atty, p.attprojw, N, C, C);
    be_.attention_backward(d.qkv, scratch_buf_.data(), d.atty, a.qkv, a.att, B, T, C, NH);
    be_.matmul_backward(d.ln1, g.qkvw, g.qkvb, d.qkv, a.ln1, p.qkvw, N, C, 3 * C);
    be_.layernorm_backward(dres_in, g.ln1w, g.ln1b, d.ln1, res_in, p.ln1w, a.ln1_mean, a.ln1_rstd,
                           N, C);
  }
  be_.encoder_backward(grads_.wte, grads_.wpe, dacts_.encoded, tokens, B, T, C);
}

void gpt_workload::optimizer_step() {
  kernels::adamw_params p;
  p.lr = 1e-4f;
  p.weight_decay = 0.1f;
  p.step = ++step_;
  be_.adamw_update(params_buf_.data(), grads_buf_.data(), m_buf_.data(), v_buf_.data(), num_params_,
                   p);
}

double gpt_workload::mean_loss() {
  const size_t N = static_cast<size_t>(shape_.tokens());
  std::vector<float> losses(N);
  be_.download(losses.data(), acts_.losses, N);
  double s = 0.0;
  for (float x : losses) s += x;
  return s / static_cast<double>(N);
}

double gpt_workload::grad_sum_squares() { return be_.sum_squares(grads_buf_.data(), num_params_); }

}  // namespace dd::gpu_check
