// runtime/subword.cpp — see subword.hpp.
#include "runtime/subword.hpp"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <filesystem>
#include <stdexcept>
#include <unordered_map>

#include <fmt/format.h>

namespace dd {

namespace fs = std::filesystem;

namespace {
const std::string k_meta = "\xe2\x96\x81";  // U+2581 "▁", SentencePiece's space

std::string model_file(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return (fs::path(path) / "tokenizer.model").string();
  return path;
}
}  // namespace

subword_tokenizer::subword_tokenizer(const std::string& path)
    : path_(model_file(path)), sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
  const auto st = sp_->Load(path_);
  if (!st.ok())
    throw std::runtime_error(fmt::format("tokenizer '{}': cannot load the SentencePiece model: {}",
                                         path_, st.ToString()));
}

subword_tokenizer::~subword_tokenizer() = default;
subword_tokenizer::subword_tokenizer(subword_tokenizer&&) noexcept = default;
subword_tokenizer& subword_tokenizer::operator=(subword_tokenizer&&) noexcept = default;

int subword_tokenizer::vocab_size() const { return sp_->GetPieceSize(); }

std::vector<int32_t> subword_tokenizer::encode(const std::string& text,
                                               const std::function<void(size_t)>& progress) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3);
  constexpr size_t k_chunk = size_t{1} << 20;
  size_t pos = 0;
  std::vector<int> ids;
  while (pos < text.size()) {
    // Cut after a newline (no piece spans one), else take the rest.
    size_t end = std::min(text.size(), pos + k_chunk);
    if (end < text.size()) {
      const size_t nl = text.rfind('\n', end);
      if (nl != std::string::npos && nl >= pos) end = nl + 1;
    }
    const auto st = sp_->Encode(std::string_view(text.data() + pos, end - pos), &ids);
    if (!st.ok())
      throw std::runtime_error(fmt::format("tokenizer '{}': encode: {}", path_, st.ToString()));
    out.insert(out.end(), ids.begin(), ids.end());
    pos = end;
    if (progress) progress(pos);
  }
  return out;
}

std::string subword_tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::vector<int> v(ids.begin(), ids.end());
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] < 0 || v[i] >= vocab_size())
      throw std::invalid_argument(
          fmt::format("tokenizer '{}': token {} at position {} is outside "
                      "its vocabulary [0, {})",
                      path_, v[i], i, vocab_size()));
  std::string out;
  const auto st = sp_->Decode(v, &out);
  if (!st.ok())
    throw std::runtime_error(fmt::format("tokenizer '{}': decode: {}", path_, st.ToString()));
  return out;
}

std::vector<int> subword_tokenizer::token_bytes() const {
  std::vector<int> out(static_cast<size_t>(vocab_size()), 0);
  for (int i = 0; i < vocab_size(); ++i) {
    if (sp_->IsByte(i)) {
      out[static_cast<size_t>(i)] = 1;
      continue;
    }
    if (sp_->IsControl(i) || sp_->IsUnknown(i) || sp_->IsUnused(i)) continue;
    std::string p = sp_->IdToPiece(i);
    size_t n = 0;
    for (size_t at = 0; at < p.size();) {
      if (p.compare(at, k_meta.size(), k_meta) == 0) {
        ++n;  // "▁" decodes to one space
        at += k_meta.size();
      } else {
        ++n;
        ++at;
      }
    }
    out[static_cast<size_t>(i)] = static_cast<int>(n);
  }
  return out;
}

nlohmann::json subword_tokenizer::hf_tokenizer_json() const {
  nlohmann::json vocab = nlohmann::json::array();
  int unk = 0;
  for (int i = 0; i < vocab_size(); ++i) {
    vocab.push_back({sp_->IdToPiece(i), sp_->IsUnknown(i) ? 0.0 : sp_->GetScore(i)});
    if (sp_->IsUnknown(i)) unk = i;
  }
  nlohmann::json added = nlohmann::json::array();
  for (int i = 0; i < vocab_size(); ++i)
    if (sp_->IsControl(i) || sp_->IsUnknown(i))
      added.push_back({{"id", i},
                       {"content", sp_->IdToPiece(i)},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", true}});
  return {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Metaspace"},
        {"replacement", k_meta},
        {"prepend_scheme", "never"},
        {"split", true}}},
      {"post_processor", nullptr},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         {{{"type", "Replace"}, {"pattern", {{"String", k_meta}}}, {"content", " "}},
          {{"type", "ByteFallback"}},
          {{"type", "Fuse"}}}}}},
      {"model", {{"type", "Unigram"}, {"unk_id", unk}, {"vocab", vocab}, {"byte_fallback", true}}}};
}

void train_subword_tokenizer(const std::vector<std::string>& texts, int vocab,
                             const std::string& out_dir) {
  if (texts.empty()) throw std::runtime_error("tokenize: no text file given");
  std::string inputs;
  for (const auto& t : texts) inputs += (inputs.empty() ? "" : ",") + t;
  const std::unordered_map<std::string, std::string> args = {
      {"input", inputs},
      {"model_prefix", (fs::path(out_dir) / "tokenizer").string()},
      {"vocab_size", std::to_string(vocab)},
      {"model_type", "unigram"},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"add_dummy_prefix", "false"},
      {"byte_fallback", "true"},
      {"character_coverage", "1.0"},
      {"unk_id", "0"},
      {"bos_id", "-1"},
      {"eos_id", "-1"},
      {"pad_id", "-1"},
      {"num_threads", "1"},
      {"minloglevel", "2"},
      {"train_extremely_large_corpus", "false"}};
  const auto st = sentencepiece::SentencePieceTrainer::Train(args);
  if (!st.ok())
    throw std::runtime_error(
        fmt::format("tokenize: SentencePiece training failed: {}", st.ToString()));
}

nlohmann::json hf_byte_tokenizer_json() {
  // GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the rest to U+0100+n.
  nlohmann::json vocab = nlohmann::json::object();
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae);
    const int cp = printable ? b : 256 + n++;
    std::string u;
    if (cp < 0x80) {
      u.push_back(static_cast<char>(cp));
    } else {
      u.push_back(static_cast<char>(0xc0 | (cp >> 6)));
      u.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    }
    vocab[u] = b;
  }
  const nlohmann::json byte_level = {{"type", "ByteLevel"},
                                     {"add_prefix_space", false},
                                     {"trim_offsets", false},
                                     {"use_regex", false}};
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", nlohmann::json::array()},
          {"normalizer", nullptr},
          {"pre_tokenizer", byte_level},
          {"post_processor", nullptr},
          {"decoder", byte_level},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"ignore_merges", false},
            {"vocab", vocab},
            {"merges", nlohmann::json::array()}}}};
}

nlohmann::json hf_tokenizer_config_json(int model_max_length) {
  return {{"tokenizer_class", "PreTrainedTokenizerFast"},
          {"model_max_length", model_max_length},
          {"clean_up_tokenization_spaces", false},
          {"add_prefix_space", false}};
}

}  // namespace dd
