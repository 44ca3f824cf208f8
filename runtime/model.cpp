// runtime/model.cpp — see model.hpp.
#include "runtime/model.hpp"

#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "runtime/gpt.hpp"
#include "runtime/moe_gpt.hpp"
#include "runtime/vit.hpp"

namespace dd {

namespace {

constexpr const char* k_kinds = "\"gpt\", \"moe_gpt\", \"vit\"";

bool known_kind(const std::string& k) { return k == "gpt" || k == "moe_gpt" || k == "vit"; }

}  // namespace

void moe_config::validate() const {
  if (experts < 2)
    throw std::invalid_argument(fmt::format("model.experts must be >= 2, got {}", experts));
  if (top_k != 1 && top_k != 2)
    throw std::invalid_argument(fmt::format("model.top_k must be 1 or 2, got {}", top_k));
  if (top_k > experts)
    throw std::invalid_argument(
        fmt::format("model.top_k ({}) exceeds model.experts ({})", top_k, experts));
  if (!(capacity_factor > 0.0) || !std::isfinite(capacity_factor))
    throw std::invalid_argument(
        fmt::format("model.capacity_factor must be > 0, got {}", capacity_factor));
  if (!(aux_loss >= 0.0) || !std::isfinite(aux_loss))
    throw std::invalid_argument(fmt::format("model.aux_loss must be >= 0, got {}", aux_loss));
}

void model_config::validate() const {
  if (!known_kind(kind))
    throw std::invalid_argument(
        fmt::format("model config: unknown kind '{}' (known: {})", kind, k_kinds));
  gpt_config::validate();
  if (kind == "moe_gpt") moe.validate();
  if (kind == "vit") vit_shape().validate();
}

nlohmann::json model_config::to_json() const {
  nlohmann::json j = gpt_config::to_json();
  j["kind"] = kind;
  if (kind == "moe_gpt") {
    j["experts"] = moe.experts;
    j["top_k"] = moe.top_k;
    j["capacity_factor"] = moe.capacity_factor;
    j["aux_loss"] = moe.aux_loss;
  }
  if (kind == "vit") {
    for (const char* f : {"rows", "cols", "patch", "classes", "pooling"}) j[f] = vit.to_json()[f];
  }
  return j;
}

model_config model_config::from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw std::invalid_argument("model config: expected a JSON object");
  model_config c(gpt_config::from_json(j));
  if (auto it = j.find("kind"); it != j.end()) {
    if (!it->is_string())
      throw std::invalid_argument("model config: field 'kind' must be a string");
    c.kind = it->get<std::string>();
  }
  if (c.kind == "moe_gpt") {
    auto field = [&](const char* name) -> const nlohmann::json& {
      auto f = j.find(name);
      if (f == j.end())
        throw std::invalid_argument(fmt::format("model config: missing field '{}'", name));
      if (!f->is_number())
        throw std::invalid_argument(fmt::format("model config: field '{}' must be a number", name));
      return *f;
    };
    for (const char* name : {"experts", "top_k"})
      if (!field(name).is_number_integer())
        throw std::invalid_argument(
            fmt::format("model config: field '{}' must be an integer", name));
    c.moe.experts = field("experts").get<int>();
    c.moe.top_k = field("top_k").get<int>();
    c.moe.capacity_factor = field("capacity_factor").get<double>();
    c.moe.aux_loss = field("aux_loss").get<double>();
  }
  if (c.kind == "vit") {
    nlohmann::json v = j;  // vit_config::from_json reads layers/heads/width too: the shared ones
    c.vit = vit_config::from_json(v);
  }
  c.validate();
  return c;
}

vit_config model_config::vit_shape() const {
  vit_config v = vit;
  v.layers = layers;
  v.heads = heads;
  v.width = width;
  return v;
}

bool model_config::operator==(const model_config& o) const {
  return kind == o.kind && gpt_config::operator==(o) && (kind != "moe_gpt" || moe == o.moe) &&
         (kind != "vit" || vit_shape() == o.vit_shape());
}

model::model(kernels::backend& be, std::vector<tensor_info> tensors)
    : be_(&be), tensors_(std::move(tensors)) {
  const size_t n = tensors_.empty() ? 0 : tensors_.back().offset + tensors_.back().numel;
  params_ = be.alloc<float>(n);
  grads_ = be.alloc<float>(n);
}

const tensor_info& model::tensor(const std::string& name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return t;
  throw std::out_of_range(fmt::format("model: no tensor named '{}'", name));
}

std::vector<float> model::get_parameters() const {
  std::vector<float> host(num_params());
  be_->download(host.data(), params_.data(), host.size());
  return host;
}

void model::set_parameters(const std::vector<float>& host) {
  if (host.size() != num_params())
    throw std::invalid_argument(fmt::format("model::set_parameters: got {} floats, model has {}",
                                            host.size(), num_params()));
  be_->upload(params_.data(), host.data(), host.size());
}

void model::read_parameters(size_t offset, size_t n, float* host) const {
  if (offset > num_params() || n > num_params() - offset)
    throw std::out_of_range(
        fmt::format("model::read_parameters: range [{}, {}) exceeds {} parameters", offset,
                    offset + n, num_params()));
  be_->download(host, params_.data() + offset, n);
}

void model::write_parameters(size_t offset, size_t n, const float* host) {
  if (offset > num_params() || n > num_params() - offset)
    throw std::out_of_range(
        fmt::format("model::write_parameters: range [{}, {}) exceeds {} parameters", offset,
                    offset + n, num_params()));
  be_->upload(params_.data() + offset, host, n);
}

std::vector<float> model::get_gradients() const {
  std::vector<float> host(num_params());
  be_->download(host.data(), grads_.data(), host.size());
  return host;
}

void model::zero_grad() { be_->zero(grads_.data(), grads_.size()); }

std::vector<tensor_info> model_tensors(const model_config& cfg) {
  cfg.validate();
  if (cfg.kind == "moe_gpt") return moe_gpt_tensors(cfg);
  if (cfg.kind == "vit") return vit_tensors(cfg.vit_shape());
  return gpt_tensors(cfg);
}

std::unique_ptr<model> make_model(kernels::backend& be, const model_config& cfg) {
  cfg.validate();
  if (cfg.kind == "gpt") return std::make_unique<gpt>(be, cfg);
  if (cfg.kind == "moe_gpt") return std::make_unique<moe_gpt>(be, cfg);
  if (cfg.kind == "vit") return std::make_unique<vit>(be, cfg);
  throw std::invalid_argument(
      fmt::format("model config: unknown kind '{}' (known: {})", cfg.kind, k_kinds));
}

}  // namespace dd
