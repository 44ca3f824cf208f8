// runtime/model_file.cpp — see model_file.hpp.
#include "runtime/model_file.hpp"

#include <cmath>
#include <filesystem>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "runtime/checkpoint.hpp"
#include "runtime/eval.hpp"
#include "runtime/subword.hpp"
#include "runtime/token_files.hpp"

namespace dd {

namespace fs = std::filesystem;

std::vector<size_t> eval_spec::window_starts() const {
  if (windows < 1 || batch < 1 || seq_len < 1)
    throw std::invalid_argument(
        fmt::format("eval windows: windows {}, batch {}, seq_len {} must all be >= 1", windows,
                    batch, seq_len));
  if (validation_tokens < static_cast<size_t>(seq_len) + 1)
    throw std::invalid_argument(
        fmt::format("eval windows: the validation split has {} tokens, needs at least T+1 = {}",
                    validation_tokens, seq_len + 1));
  // The same windows as evaluate_windows (runtime/eval.cpp).
  const size_t W = (validation_tokens - 1) / static_cast<size_t>(seq_len);
  std::vector<size_t> out;
  out.reserve(static_cast<size_t>(windows));
  for (size_t w = 0; w < static_cast<size_t>(windows); ++w)
    out.push_back((w % W) * static_cast<size_t>(seq_len));
  return out;
}

bool eval_spec::covers_split() const {
  return windows >= windows_in_split(validation_tokens, seq_len);
}

std::string eval_spec::split_description() const {
  if (!token_validation_files.empty())
    return fmt::format("the validation files {} ({} tokens)",
                       fmt::join(token_validation_files, ", "), validation_tokens);
  const std::string files = token_files.size() > 1 ? fmt::format("{} and {} more token files",
                                                                 data_file, token_files.size() - 1)
                                                   : data_file;
  return fmt::format("the validation split of {} (tokens [{}, {}), train_fraction {})", files,
                     validation_offset, validation_offset + validation_tokens, train_fraction);
}

nlohmann::json eval_spec::to_json() const {
  const auto starts = window_starts();
  nlohmann::json j = {
      {"data_file", data_file},
      {"train_fraction", train_fraction},
      {"split", "validation"},
      {"validation_offset", validation_offset},
      {"validation_tokens", validation_tokens},
      {"batch", batch},
      {"seq_len", seq_len},
      {"windows", starts.size()},
      {"covers_split", covers_split()},
      {"backend", backend},
      {"window_rule",
       "window w (w = 0 .. windows-1) is the seq_len+1 tokens starting at token "
       "(w mod W)*seq_len of the validation split, W = (validation_tokens - 1) div seq_len; "
       "batch windows per forward pass; loss = mean over windows of the mean next-token "
       "cross-entropy"},
      {"window_starts", starts}};
  if (!token_files.empty()) {
    j["data_kind"] = "tokens";
    j["files"] = token_files;
    j["validation_files"] = token_validation_files;
    j["format"] = token_format;
    j["vocab"] = token_vocab;
  }
  j["tokenizer"] = tokenizer;
  return j;
}

double eval_spec::bits_per_byte_per_nat(const text_dataset& data) const {
  if (tokenizer == "byte") {
    if (!token_files.empty()) return std::nan("");
    return dd::bits_per_byte_per_nat(data.validation(), seq_len, windows, {});
  }
  const subword_tokenizer tok(tokenizer);
  return dd::bits_per_byte_per_nat(data.validation(), seq_len, windows, tok.token_bytes());
}

text_dataset eval_spec::load_data() const {
  if (token_files.empty()) return text_dataset::from_file(data_file, train_fraction);
  return text_dataset::from_token_files(token_files, token_validation_files,
                                        parse_token_format(token_format), token_vocab,
                                        train_fraction);
}

eval_spec eval_spec::from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw std::invalid_argument("eval spec: expected a JSON object");
  auto field = [&](const char* name) -> const nlohmann::json& {
    auto it = j.find(name);
    if (it == j.end()) throw std::invalid_argument(fmt::format("eval spec: missing '{}'", name));
    return *it;
  };
  auto integer = [&](const char* name) {
    const auto& v = field(name);
    if (!v.is_number_integer() || v.get<int64_t>() < 0)
      throw std::invalid_argument(
          fmt::format("eval spec: '{}' must be a non-negative integer", name));
    return v.get<uint64_t>();
  };
  eval_spec s;
  const auto& file = field("data_file");
  if (!file.is_string()) throw std::invalid_argument("eval spec: 'data_file' must be a string");
  s.data_file = file.get<std::string>();
  const auto& tf = field("train_fraction");
  if (!tf.is_number()) throw std::invalid_argument("eval spec: 'train_fraction' must be a number");
  s.train_fraction = tf.get<double>();
  s.validation_offset = integer("validation_offset");
  s.validation_tokens = integer("validation_tokens");
  s.batch = static_cast<int>(integer("batch"));
  s.seq_len = static_cast<int>(integer("seq_len"));
  s.windows = j.contains("windows") ? static_cast<std::int64_t>(integer("windows"))
                                    : static_cast<std::int64_t>(integer("batches")) * s.batch;
  for (const auto& [name, v] : {std::pair<const char*, std::int64_t>{"batch", s.batch},
                                {"seq_len", s.seq_len},
                                {"windows", s.windows}})
    if (v < 1)
      throw std::invalid_argument(fmt::format("eval spec: '{}' must be >= 1, got {}", name, v));
  if (auto it = j.find("backend"); it != j.end() && it->is_string())
    s.backend = it->get<std::string>();
  if (auto it = j.find("tokenizer"); it != j.end() && it->is_string())
    s.tokenizer = it->get<std::string>();
  if (j.value("data_kind", std::string()) == "tokens") {
    auto strings = [&](const char* name) {
      const auto& v = field(name);
      if (!v.is_array())
        throw std::invalid_argument(fmt::format("eval spec: '{}' must be a list", name));
      std::vector<std::string> out;
      for (const auto& x : v) {
        if (!x.is_string())
          throw std::invalid_argument(fmt::format("eval spec: '{}' must list strings", name));
        out.push_back(x.get<std::string>());
      }
      return out;
    };
    s.token_files = strings("files");
    s.token_validation_files = strings("validation_files");
    const auto& f = field("format");
    if (!f.is_string()) throw std::invalid_argument("eval spec: 'format' must be a string");
    s.token_format = f.get<std::string>();
    s.token_vocab = static_cast<int>(integer("vocab"));
  }
  return s;
}

std::string scoring_difference(const nlohmann::json& a, const nlohmann::json& b) {
  static const char* const fields[] = {"data_kind",
                                       "data_file",
                                       "files",
                                       "validation_files",
                                       "train_fraction",
                                       "validation_offset",
                                       "validation_tokens",
                                       "seq_len",
                                       "windows",
                                       "images",
                                       "labels",
                                       "validation_first",
                                       "validation_samples"};
  auto at = [](const nlohmann::json& j, const char* k) {
    if (!j.is_object()) return nlohmann::json();
    auto it = j.find(k);
    return it == j.end() ? nlohmann::json() : *it;
  };
  for (const char* k : fields) {
    const auto x = at(a, k), y = at(b, k);
    if (x != y)
      return fmt::format("{}: {} vs {}", k, x.is_null() ? "absent" : x.dump(),
                         y.is_null() ? "absent" : y.dump());
  }
  return {};
}

void write_model_file(const std::string& path, const model& model,
                      const std::map<std::string, std::string>& metadata) {
  auto md = metadata;
  md["model_kind"] = model.config().kind;
  // save_checkpoint adds format and config; no optimizer state.
  save_checkpoint(path, model, nullptr, md);
}

std::string resolve_model_path(const std::string& where) {
  std::error_code ec;
  if (!fs::is_directory(where, ec)) {
    if (!fs::exists(where, ec))
      throw std::runtime_error(
          fmt::format("model '{}': no such file or directory (give a run directory or a "
                      "model.safetensors / checkpoint.safetensors file)",
                      where));
    return where;
  }
  for (const char* name : {model_file_name, "checkpoint.safetensors"}) {
    const auto p = fs::path(where) / name;
    if (fs::is_regular_file(p, ec)) return p.string();
  }
  throw std::runtime_error(fmt::format(
      "model '{}': the directory holds neither {} (written at the end of `dd-node run`, "
      "`syncer` and `launch` runs whose final evaluation ran) nor checkpoint.safetensors (of "
      "`dd-node train`)",
      where, model_file_name));
}

loaded_any_model read_any_model_file(const std::string& where, kernels::backend& be) {
  loaded_any_model out;
  out.path = resolve_model_path(where);
  const st_file f = read_safetensors(out.path);
  auto cfg_it = f.metadata.find("config");
  if (cfg_it == f.metadata.end())
    throw std::runtime_error(fmt::format(
        "model '{}': metadata 'config' (the model config as JSON) is missing", out.path));
  try {
    out.model = make_model(be, model_config::from_json(nlohmann::json::parse(cfg_it->second)));
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format("model '{}': metadata 'config': {}", out.path, e.what()));
  }
  out.metadata = load_checkpoint(out.path, *out.model, nullptr);
  return out;
}

loaded_any_model load_model(const std::string& where, const std::string& backend, int threads) {
  kernels::backend_options bo;
  bo.threads = threads;
  auto be = kernels::make_backend(backend, bo);
  loaded_any_model out = read_any_model_file(where, *be);
  out.backend = std::move(be);
  return out;
}

}  // namespace dd
