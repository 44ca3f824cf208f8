// runtime/vit.cpp — see vit.hpp.
#include "runtime/vit.hpp"

#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "runtime/idx.hpp"
#include "runtime/json_fields.hpp"
#include "runtime/rng.hpp"

namespace dd {

const char* to_string(vit_pooling p) { return p == vit_pooling::cls ? "cls" : "mean"; }

vit_pooling vit_pooling_from_string(const std::string& s) {
  if (s == "cls") return vit_pooling::cls;
  if (s == "mean") return vit_pooling::mean;
  throw std::invalid_argument(
      fmt::format("vit config: pooling '{}' is not one of \"cls\", \"mean\"", s));
}

// The integer fields of vit_config, in the order they are read and checked.
constexpr int_field<vit_config> vit_fields[] = {
    {"rows", &vit_config::rows, 1},     {"cols", &vit_config::cols, 1},
    {"patch", &vit_config::patch, 1},   {"classes", &vit_config::classes, 2},
    {"layers", &vit_config::layers, 1}, {"heads", &vit_config::heads, 1},
    {"width", &vit_config::width, 1}};

void vit_config::validate() const {
  check_int_fields(*this, vit_fields, "vit config");
  if (rows % patch != 0 || cols % patch != 0)
    throw std::invalid_argument(fmt::format(
        "vit config: patch ({}) must divide rows ({}) and cols ({})", patch, rows, cols));
  if (width % heads != 0)
    throw std::invalid_argument(
        fmt::format("vit config: width ({}) must be divisible by heads ({})", width, heads));
}

nlohmann::json vit_config::to_json() const {
  nlohmann::json j = int_fields_json(*this, vit_fields);
  j["pooling"] = to_string(pooling);
  return j;
}

vit_config vit_config::from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw std::invalid_argument("vit config: expected a JSON object");
  vit_config c;
  read_int_fields(j, vit_fields, "vit config", c);
  auto it = j.find("pooling");
  if (it == j.end()) throw std::invalid_argument("vit config: missing field 'pooling'");
  if (!it->is_string()) throw std::invalid_argument("vit config: field 'pooling' must be a string");
  c.pooling = vit_pooling_from_string(it->get<std::string>());
  c.validate();
  return c;
}

std::vector<tensor_info> vit_tensors(const vit_config& cfg) {
  cfg.validate();
  const int64_t C = cfg.width, K = cfg.classes, T = cfg.tokens(),
                pp = static_cast<int64_t>(cfg.patch) * cfg.patch;
  tensor_layout out;
  out.add("patch_embed.weight", {C, pp}, -1, false, true);
  out.add("patch_embed.bias", {C}, -1, false, false);
  if (cfg.pooling == vit_pooling::cls) out.add("cls_token", {1, C}, -1, true, false);
  out.add("pos_embed", {T, C}, -1, true, false);
  for (int l = 0; l < cfg.layers; ++l) out.add_block(fmt::format("h.{}.", l), l, C);
  out.add("ln_f.weight", {C}, -1, false, false);
  out.add("ln_f.bias", {C}, -1, false, false);
  out.add("head.weight", {K, C}, -1, false, true);
  out.add("head.bias", {K}, -1, false, false);
  return out.take();
}

size_t vit_num_params(const vit_config& cfg) {
  size_t n = 0;
  for (const auto& t : vit_tensors(cfg)) n += t.numel;
  return n;
}

double vit_flops_per_sample(const vit_config& cfg) {
  const double L = cfg.layers, C = cfg.width, K = cfg.classes, T = cfg.tokens(), P = cfg.patches(),
               pp = static_cast<double>(cfg.patch) * cfg.patch;
  return 6.0 * (T * 12.0 * L * C * C + P * pp * C + C * K) + 12.0 * L * T * T * C;
}

namespace {
model_config model_config_of(const vit_config& v) {
  model_config m;
  m.kind = "vit";
  m.layers = v.layers;
  m.heads = v.heads;
  m.width = v.width;
  m.vit = v;
  return m;
}
}  // namespace

vit::vit(kernels::backend& be, const vit_config& cfg) : vit(be, model_config_of(cfg)) {}

vit::vit(kernels::backend& be, const model_config& cfg)
    : model(be, vit_tensors(cfg.vit_shape())), cfg_(cfg.vit_shape()), model_cfg_(cfg) {
  if (cfg.kind != "vit")
    throw std::invalid_argument(
        fmt::format("vit: model config of kind '{}', expected \"vit\"", cfg.kind));
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const auto& n = tensors_[i].name;
    if (n == "cls_token") i_cls_ = i;
    if (n == "pos_embed") i_pos_ = i;
    if (n == "h.0.ln_1.weight") i_blocks_ = i;
    if (n == "ln_f.weight") i_lnf_ = i;
    if (n == "head.weight") i_head_ = i;
  }
}

double vit::flops_per_sample(int /*T*/) const { return vit_flops_per_sample(cfg_); }

void vit::init(uint64_t seed) {
  rng r(seed);
  std::vector<float> host(num_params(), 0.0f);
  const double std_base = 0.02;
  const double std_resid = 0.02 / std::sqrt(2.0 * cfg_.layers);
  auto ends_with = [](const std::string& s, const char* suffix) {
    const std::string x(suffix);
    return s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  for (const auto& t : tensors_) {
    float* dst = host.data() + t.offset;
    if (t.shape.size() == 2) {
      const bool resid =
          ends_with(t.name, "attn.proj.weight") || ends_with(t.name, "mlp.proj.weight");
      const double s = resid ? std_resid : std_base;
      for (size_t i = 0; i < t.numel; ++i) dst[i] = static_cast<float>(r.normal() * s);
    } else if (t.name.find("ln_") != std::string::npos && ends_with(t.name, ".weight")) {
      for (size_t i = 0; i < t.numel; ++i) dst[i] = 1.0f;
    }  // biases stay 0
  }
  set_parameters(host);
}

void vit::ensure_activations(int B) {
  if (B == act_B_) return;
  auto& be = *be_;
  const int C = cfg_.width, NH = cfg_.heads, T = cfg_.tokens(), P = cfg_.patches(),
            K = cfg_.classes;
  const size_t BT = static_cast<size_t>(B) * T, BP = static_cast<size_t>(B) * P,
               pp = static_cast<size_t>(cfg_.patch) * cfg_.patch;
  labels_ = be.alloc<int32_t>(static_cast<size_t>(B));
  patches_in_ = be.alloc<float>(BP * pp);
  patch_emb_ = be.alloc<float>(BP * C);
  encoded_ = be.alloc<float>(BT * C);
  allocate_blocks(be, cfg_.layers, B, T, C, NH, acts_, scratch_);
  lnf_ = be.alloc<float>(BT * C);
  lnf_mean_ = be.alloc<float>(BT);
  lnf_rstd_ = be.alloc<float>(BT);
  pooled_ = be.alloc<float>(static_cast<size_t>(B) * C);
  logits_ = be.alloc<float>(static_cast<size_t>(B) * K);
  probs_ = be.alloc<float>(static_cast<size_t>(B) * K);
  losses_ = be.alloc<float>(static_cast<size_t>(B));
  dres_ = be.alloc<float>(BT * C);
  dpooled_ = be.alloc<float>(static_cast<size_t>(B) * C);
  dlogits_ = be.alloc<float>(static_cast<size_t>(B) * K);
  dpatch_emb_ = be.alloc<float>(BP * C);
  dpatches_in_ = be.alloc<float>(BP * pp);
  act_B_ = B;
}

double vit::forward(const std::vector<int32_t>& pixels, const std::vector<int32_t>& labels, int B) {
  have_forward_ = false;
  if (B < 1) throw std::invalid_argument(fmt::format("vit::forward: batch {} must be >= 1", B));
  const size_t HW = static_cast<size_t>(cfg_.rows) * cfg_.cols;
  if (pixels.size() != static_cast<size_t>(B) * HW)
    throw std::invalid_argument(
        fmt::format("vit::forward: pixels has {} values, expected B·rows·cols = {}·{}·{} = {}",
                    pixels.size(), B, cfg_.rows, cfg_.cols, static_cast<size_t>(B) * HW));
  std::vector<float> f(pixels.size());
  for (size_t i = 0; i < pixels.size(); ++i) {
    if (pixels[i] < 0 || pixels[i] > 255)
      throw std::invalid_argument(fmt::format(
          "vit::forward: pixel {} of image {} is {}, outside [0, 255]", i % HW, i / HW, pixels[i]));
    f[i] = static_cast<float>(pixels[i]);
  }
  return forward_pixels(f.data(), labels, B);
}

double vit::forward(const model_batch& batch) {
  have_forward_ = false;
  const int B = batch.B;
  if (B < 1) throw std::invalid_argument(fmt::format("vit::forward: batch {} must be >= 1", B));
  if (batch.T != 1)
    throw std::invalid_argument(
        fmt::format("vit::forward: batch.T is {}; an image batch has T = 1", batch.T));
  const size_t HW = static_cast<size_t>(cfg_.rows) * cfg_.cols;
  if (batch.features.size() != static_cast<size_t>(B) * HW)
    throw std::invalid_argument(
        fmt::format("vit::forward: features has {} values, expected B·rows·cols = {}·{}·{} = {}",
                    batch.features.size(), B, cfg_.rows, cfg_.cols, static_cast<size_t>(B) * HW));
  for (size_t i = 0; i < batch.features.size(); ++i) {
    const float v = batch.features[i];
    if (!(v >= 0.0f && v <= 255.0f))
      throw std::invalid_argument(fmt::format(
          "vit::forward: pixel {} of image {} is {}, outside [0, 255]", i % HW, i / HW, v));
  }
  return forward_pixels(batch.features.data(), batch.targets, B);
}

batch_metric vit::evaluate(const model_batch& batch) {
  batch_metric m;
  m.loss = forward(batch);
  m.accuracy = static_cast<double>(last_correct()) / batch.B;
  have_forward_ = false;
  return m;
}

double vit::forward_pixels(const float* pixels, const std::vector<int32_t>& labels, int B) {
  const size_t HW = static_cast<size_t>(cfg_.rows) * cfg_.cols;
  if (labels.size() != static_cast<size_t>(B))
    throw std::invalid_argument(
        fmt::format("vit::forward: {} labels, expected B = {}", labels.size(), B));
  for (int b = 0; b < B; ++b)
    if (labels[b] < 0 || labels[b] >= cfg_.classes)
      throw std::invalid_argument(fmt::format(
          "vit::forward: label {} of image {} is outside [0, {})", labels[b], b, cfg_.classes));
  ensure_activations(B);
  auto& be = *be_;
  const int C = cfg_.width, NH = cfg_.heads, T = cfg_.tokens(), P = cfg_.patches(),
            K = cfg_.classes, p_ = cfg_.patch, pp = p_ * p_, ncls = T - P;
  const int gx = cfg_.cols / p_;

  // Patches, row-major patch order, each flattened row-major, scaled to [0, 1].
  std::vector<float> host(static_cast<size_t>(B) * P * pp);
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < P; ++i) {
      const int py = i / gx, px = i % gx;
      float* dst = host.data() + (static_cast<size_t>(b) * P + i) * pp;
      for (int dy = 0; dy < p_; ++dy)
        for (int dx = 0; dx < p_; ++dx) {
          const size_t src = static_cast<size_t>(b) * HW +
                             static_cast<size_t>(py * p_ + dy) * cfg_.cols + (px * p_ + dx);
          dst[dy * p_ + dx] = pixels[src] / 255.0f;
        }
    }
  be.upload(patches_in_.data(), host.data(), host.size());
  host_labels_ = labels;
  be.upload(labels_.data(), labels.data(), labels.size());

  const int NP = B * P, N = B * T;
  be.matmul_forward(patch_emb_.data(), patches_in_.data(), p(0), p(1), NP, pp, C);
  be.vit_embed_forward(encoded_.data(), patch_emb_.data(), ncls ? p(i_cls_) : nullptr, p(i_pos_), B,
                       P, C, ncls);
  const float* residual = encoded_.data();
  for (int l = 0; l < cfg_.layers; ++l) {
    block_forward(be, block_weights::at(params_.data(), tensors_, i_blocks_ + k_block_tensors * l),
                  acts_[l], scratch_, residual, B, T, C, NH, attention_mask::bidirectional);
    residual = acts_[l].res3.data();
  }
  be.layernorm_forward(lnf_.data(), lnf_mean_.data(), lnf_rstd_.data(), residual, p(i_lnf_),
                       p(i_lnf_ + 1), N, C);
  be.token_mean_forward(pooled_.data(), lnf_.data(), B, T, C, 0, ncls ? 1 : T);
  be.matmul_forward(logits_.data(), pooled_.data(), p(i_head_), p(i_head_ + 1), B, C, K);
  be.softmax_crossentropy_forward(losses_.data(), probs_.data(), logits_.data(), labels_.data(), B,
                                  K);
  std::vector<float> losses(static_cast<size_t>(B));
  be.download(losses.data(), losses_.data(), losses.size());
  double sum = 0.0;
  for (float x : losses) sum += x;
  have_forward_ = true;
  return sum / B;
}

std::vector<float> vit::last_logits() const {
  std::vector<float> out(static_cast<size_t>(act_B_) * cfg_.classes);
  be_->download(out.data(), logits_.data(), out.size());
  return out;
}

int vit::last_correct() const {
  const auto logits = last_logits();
  const int K = cfg_.classes;
  int correct = 0;
  for (int b = 0; b < act_B_ && b < static_cast<int>(host_labels_.size()); ++b) {
    const float* row = logits.data() + static_cast<size_t>(b) * K;
    int best = 0;
    for (int k = 1; k < K; ++k)
      if (row[k] > row[best]) best = k;
    if (best == host_labels_[b]) ++correct;
  }
  return correct;
}

void vit::backward() {
  if (!have_forward_) throw std::logic_error("vit::backward: no forward() to differentiate");
  auto& be = *be_;
  const int B = act_B_, C = cfg_.width, NH = cfg_.heads, T = cfg_.tokens(), P = cfg_.patches(),
            K = cfg_.classes, pp = cfg_.patch * cfg_.patch, ncls = T - P;
  const size_t BT = static_cast<size_t>(B) * T;
  const int N = B * T, NP = B * P;

  be.softmax_crossentropy_backward(dlogits_.data(), probs_.data(), labels_.data(),
                                   1.0f / static_cast<float>(B), B, K);
  be.zero(dpooled_.data(), dpooled_.size());
  be.matmul_backward(dpooled_.data(), g(i_head_), g(i_head_ + 1), dlogits_.data(), pooled_.data(),
                     p(i_head_), B, C, K);
  float* dln = scratch_.dln.data();
  be.zero(dln, BT * C);
  be.token_mean_backward(dln, dpooled_.data(), B, T, C, 0, ncls ? 1 : T);
  const float* top = acts_.back().res3.data();
  be.zero(dres_.data(), BT * C);
  be.layernorm_backward(dres_.data(), g(i_lnf_), g(i_lnf_ + 1), dln, top, p(i_lnf_),
                        lnf_mean_.data(), lnf_rstd_.data(), N, C);
  for (int l = cfg_.layers - 1; l >= 0; --l) {
    const float* residual = l == 0 ? encoded_.data() : acts_[l - 1].res3.data();
    const size_t first = i_blocks_ + k_block_tensors * static_cast<size_t>(l);
    block_backward(be, block_weights::at(params_.data(), tensors_, first),
                   block_weights::at(grads_.data(), tensors_, first), acts_[l], scratch_, residual,
                   dres_.data(), B, T, C, NH, attention_mask::bidirectional);
  }
  be.zero(dpatch_emb_.data(), dpatch_emb_.size());
  be.vit_embed_backward(dpatch_emb_.data(), ncls ? g(i_cls_) : nullptr, g(i_pos_), dres_.data(), B,
                        P, C, ncls);
  be.zero(dpatches_in_.data(), dpatches_in_.size());
  be.matmul_backward(dpatches_in_.data(), g(0), g(1), dpatch_emb_.data(), patches_in_.data(), p(0),
                     NP, pp, C);
  have_forward_ = false;
}

classification_eval vit::evaluate(const image_dataset& data, int batch) {
  if (batch < 1)
    throw std::invalid_argument(fmt::format("vit::evaluate: batch {} must be >= 1", batch));
  if (data.rows() != cfg_.rows || data.cols() != cfg_.cols || data.classes() != cfg_.classes)
    throw std::invalid_argument(fmt::format(
        "vit::evaluate: data '{}' has {}x{} images of {} classes, the model {}x{} of {}",
        data.origin(), data.rows(), data.cols(), data.classes(), cfg_.rows, cfg_.cols,
        cfg_.classes));
  classification_eval ev;
  double loss_sum = 0.0;
  size_t correct = 0;
  const size_t n = data.validation_size();
  std::vector<int32_t> px, lab;
  for (size_t first = 0; first < n; first += static_cast<size_t>(batch)) {
    const size_t count = std::min(n - first, static_cast<size_t>(batch));
    px.clear();
    lab.clear();
    data.validation_batch(first, count, px, lab);
    loss_sum += forward(px, lab, static_cast<int>(count)) * static_cast<double>(count);
    correct += static_cast<size_t>(last_correct());
  }
  have_forward_ = false;
  ev.samples = n;
  ev.loss = loss_sum / static_cast<double>(n);
  ev.accuracy = static_cast<double>(correct) / static_cast<double>(n);
  return ev;
}

}  // namespace dd
