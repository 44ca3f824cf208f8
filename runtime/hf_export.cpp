// runtime/hf_export.cpp — see hf_export.hpp.
#include "runtime/hf_export.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "runtime/gpt.hpp"

namespace dd {

namespace fs = std::filesystem;

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// transformers' name of one of our tensors, and whether its layout is transposed (Conv1D).
std::pair<std::string, bool> hf_name(const std::string& ours) {
  if (ours == "wte") return {"transformer.wte.weight", false};
  if (ours == "wpe") return {"transformer.wpe.weight", false};
  std::string n = ours;
  bool transpose = false;
  auto swap = [&](const char* from, const char* to) {
    const auto at = n.find(from);
    if (at == std::string::npos) return false;
    n.replace(at, std::string(from).size(), to);
    return true;
  };
  if (swap("attn.qkv.", "attn.c_attn.") || swap("attn.proj.", "attn.c_proj.") ||
      swap("mlp.fc.", "mlp.c_fc.") || swap("mlp.proj.", "mlp.c_proj."))
    transpose = ends_with(n, ".weight");
  return {"transformer." + n, transpose};
}

std::vector<float> transposed(const std::vector<float>& a, int64_t rows, int64_t cols) {
  std::vector<float> t(a.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      t[static_cast<size_t>(c * rows + r)] = a[static_cast<size_t>(r * cols + c)];
  return t;
}

}  // namespace

nlohmann::json hf_gpt2_config(const model_config& cfg) {
  if (cfg.kind == "moe_gpt")
    throw std::invalid_argument(
        "export --format hf: model.kind \"moe_gpt\" is not supported: transformers' GPT-2 has no "
        "mixture-of-experts MLP (router, experts) to map it to");
  if (cfg.kind == "vit")
    throw std::invalid_argument(
        "export --format hf: model.kind \"vit\" is not supported: a vision transformer "
        "classifier is not a causal language model (AutoModelForCausalLM)");
  if (cfg.kind != "gpt")
    throw std::invalid_argument(
        fmt::format("export --format hf: model.kind \"{}\" is not supported", cfg.kind));
  return {{"architectures", {"GPT2LMHeadModel"}},
          {"model_type", "gpt2"},
          {"vocab_size", cfg.vocab},
          {"n_positions", cfg.context},
          {"n_ctx", cfg.context},
          {"n_embd", cfg.width},
          {"n_layer", cfg.layers},
          {"n_head", cfg.heads},
          {"n_inner", nullptr},                 // 4·n_embd, as ours
          {"activation_function", "gelu_new"},  // tanh approximation, as kernels' gelu
          {"layer_norm_epsilon", 1e-5},
          {"resid_pdrop", 0.0},
          {"embd_pdrop", 0.0},
          {"attn_pdrop", 0.0},
          {"scale_attn_weights", true},
          {"scale_attn_by_inverse_layer_idx", false},
          {"reorder_and_upcast_attn", false},
          {"add_cross_attention", false},
          {"tie_word_embeddings", true},
          {"initializer_range", 0.02},
          {"bos_token_id", nullptr},
          {"eos_token_id", nullptr},
          {"use_cache", true},
          {"torch_dtype", "float32"}};
}

std::vector<st_tensor> to_hf_tensors(const model_config& cfg, const st_file& ours) {
  hf_gpt2_config(cfg);  // refuses what does not map
  std::vector<st_tensor> out;
  for (const auto& t : gpt_tensors(cfg)) {
    const st_tensor* src = ours.find(t.name);
    if (src == nullptr)
      throw std::runtime_error(fmt::format("export: the model file has no tensor '{}'", t.name));
    if (src->shape != t.shape)
      throw std::runtime_error(fmt::format("export: tensor '{}' has the wrong shape", t.name));
    auto [name, transpose] = hf_name(t.name);
    st_tensor h;
    h.name = name;
    if (transpose) {
      h.shape = {t.shape[1], t.shape[0]};
      h.data = transposed(src->data, t.shape[0], t.shape[1]);
    } else {
      h.shape = t.shape;
      h.data = src->data;
    }
    out.push_back(std::move(h));
  }
  return out;
}

model_config read_hf_gpt2_config(const std::string& dir) {
  const std::string path = (fs::path(dir) / "config.json").string();
  std::ifstream in(path);
  if (!in)
    throw std::invalid_argument(fmt::format(
        "{}: cannot open (model.init_from names a transformers GPT-2 directory: config.json "
        "and model.safetensors, as `dd-node export --format hf` writes)",
        path));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw std::invalid_argument(fmt::format("{}: not JSON: {}", path, e.what()));
  }
  auto bad = [&](const char* field, const std::string& why) {
    return std::invalid_argument(fmt::format("{}: field '{}' {}", path, field, why));
  };
  if (j.value("model_type", std::string()) != "gpt2")
    throw bad("model_type",
              fmt::format("is {}; only \"gpt2\" maps to model.kind \"gpt\"",
                          j.contains("model_type") ? j["model_type"].dump() : "missing"));
  auto integer = [&](const char* field, int def, bool required) {
    auto it = j.find(field);
    if (it == j.end() || it->is_null()) {
      if (required) throw bad(field, "is missing");
      return def;
    }
    if (!it->is_number_integer()) throw bad(field, "must be an integer, is " + it->dump());
    return it->get<int>();
  };
  model_config c;
  c.kind = "gpt";
  c.vocab = integer("vocab_size", 50257, true);
  c.context = integer("n_positions", 1024, true);
  c.width = integer("n_embd", 768, true);
  c.layers = integer("n_layer", 12, true);
  c.heads = integer("n_head", 12, true);
  if (auto inner = integer("n_inner", 4 * c.width, false); inner != 4 * c.width)
    throw bad("n_inner", fmt::format("is {}; our MLP is 4·n_embd = {}", inner, 4 * c.width));
  const std::string act = j.value("activation_function", std::string("gelu_new"));
  if (act != "gelu_new" && act != "gelu_pytorch_tanh")
    throw bad("activation_function",
              fmt::format("is \"{}\"; ours is the tanh-approximated GELU (\"gelu_new\")", act));
  if (auto it = j.find("layer_norm_epsilon");
      it != j.end() && it->is_number() && std::fabs(it->get<double>() - 1e-5) > 1e-12)
    throw bad("layer_norm_epsilon", fmt::format("is {}; ours is 1e-5", it->get<double>()));
  for (auto [field, want] : {std::pair{"scale_attn_weights", true},
                             {"scale_attn_by_inverse_layer_idx", false},
                             {"reorder_and_upcast_attn", false},
                             {"add_cross_attention", false},
                             {"tie_word_embeddings", true}})
    if (auto it = j.find(field); it != j.end() && it->is_boolean() && it->get<bool>() != want)
      throw bad(field, fmt::format("is {}; ours is {}", it->dump(), want));
  try {
    c.validate();
  } catch (const std::exception& e) {
    throw std::invalid_argument(fmt::format("{}: {}", path, e.what()));
  }
  return c;
}

std::vector<float> read_hf_gpt2_weights(const std::string& dir, const model_config& cfg) {
  const std::string path = (fs::path(dir) / "model.safetensors").string();
  const st_file f = read_safetensors(path);
  std::map<std::string, const st_tensor*> by;
  for (const auto& t : f.tensors) {
    std::string n = t.name;
    if (n.rfind("transformer.", 0) == 0) n = n.substr(12);
    by[n] = &t;
  }
  const auto layout = gpt_tensors(cfg);
  size_t total = 0;
  for (const auto& t : layout) total += t.numel;
  std::vector<float> flat(total);
  for (const auto& t : layout) {
    auto [name, transpose] = hf_name(t.name);
    const std::string key = name.substr(12);
    auto it = by.find(key);
    if (it == by.end())
      throw std::runtime_error(
          fmt::format("{}: tensor '{}' (ours: '{}') is missing", path, name, t.name));
    const st_tensor& src = *it->second;
    const std::vector<int64_t> want =
        transpose ? std::vector<int64_t>{t.shape[1], t.shape[0]} : t.shape;
    if (src.shape != want)
      throw std::runtime_error(
          fmt::format("{}: tensor '{}' has shape [{}], the experiment's "
                      "model needs [{}]",
                      path, name, fmt::join(src.shape, ","), fmt::join(want, ",")));
    const std::vector<float> v = transpose ? transposed(src.data, want[0], want[1]) : src.data;
    std::copy(v.begin(), v.end(), flat.begin() + static_cast<std::ptrdiff_t>(t.offset));
  }
  if (auto it = by.find("lm_head.weight"); it != by.end()) {
    const st_tensor* wte = by.at("wte.weight");
    if (it->second->data != wte->data)
      throw std::runtime_error(fmt::format(
          "{}: lm_head.weight differs from wte.weight; ours ties the LM head to wte", path));
  }
  return flat;
}

void check_hf_fits(const std::string& dir, const model_config& have, const model_config& want) {
  for (auto [field, a, b] : {std::tuple{"model.vocab", have.vocab, want.vocab},
                             {"model.context", have.context, want.context},
                             {"model.layers", have.layers, want.layers},
                             {"model.heads", have.heads, want.heads},
                             {"model.width", have.width, want.width}})
    if (a != b)
      throw std::invalid_argument(
          fmt::format("model.init_from '{}': {} is {} in the experiment but {} in its config.json",
                      dir, field, b, a));
}

}  // namespace dd
