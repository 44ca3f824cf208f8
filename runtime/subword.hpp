// runtime/subword.hpp — subword tokenization with SentencePiece (Debian's libsentencepiece-dev),
// and the Hugging Face `tokenizer.json` forms of our two tokenizers.
//
// Training (`dd-node tokenize --train-tokenizer`): a unigram model (Kudo 2018) with the identity
// normalization — text is not rewritten: no NFKC, no whitespace folding, no dummy prefix; a space
// becomes "▁" inside pieces — and byte fallback, so every byte sequence encodes and decodes back
// to itself. unk = id 0; no BOS/EOS/PAD ids. Lines are the training sentences, so no piece holds
// a newline: a newline encodes as its byte piece <0x0A>.
//
// The tokenizer.json is the same model for the `tokenizers` library (transformers'
// AutoTokenizer, PreTrainedTokenizerFast, no custom code): a Unigram model with the same pieces,
// scores and ids, byte_fallback on; pre-tokenizer Metaspace("▁", prepend_scheme "never",
// split on); decoder Replace("▁" → " "), ByteFallback, Fuse. Unigram's Viterbi over the same
// scores gives the same ids (tests/apps/data_models_check.py compares them on the validation
// text).
//
// The byte tokenizer's tokenizer.json (256 symbols, id = byte value, as runtime/tokenizer.hpp):
// a BPE model without merges over GPT-2's byte-to-unicode alphabet behind a ByteLevel
// pre-tokenizer (no regex split, no prefix space) and a ByteLevel decoder.
// Objects are used by one thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace dd {

/// A loaded SentencePiece model.
class subword_tokenizer {
 public:
  /// Loads `path` (a .model file, or a directory holding tokenizer.model). Throws
  /// std::runtime_error naming the file.
  explicit subword_tokenizer(const std::string& path);
  ~subword_tokenizer();
  subword_tokenizer(subword_tokenizer&&) noexcept;
  subword_tokenizer& operator=(subword_tokenizer&&) noexcept;

  /// Token ids of `text`, encoded line by line (exact: no piece spans a newline).
  /// `progress(done_bytes)` is called after each chunk when given.
  std::vector<int32_t> encode(const std::string& text,
                              const std::function<void(size_t)>& progress = {}) const;
  /// The text of `ids`. Throws std::invalid_argument naming an id outside the vocabulary.
  std::string decode(const std::vector<int32_t>& ids) const;
  /// Number of pieces (ids 0..vocab_size()-1).
  int vocab_size() const;
  /// Bytes of text each id stands for when decoded ("▁" = one byte, <0xNN> = one byte,
  /// unk/control = 0): what bits per byte divides by.
  std::vector<int> token_bytes() const;
  /// The tokenizer.json described in the file comment.
  nlohmann::json hf_tokenizer_json() const;
  /// The model file it was loaded from.
  const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
};

/// Trains a unigram model of `vocab` pieces on the concatenated `texts` (files) and writes
/// `out_dir`/tokenizer.model (+ tokenizer.vocab). Throws std::runtime_error with
/// SentencePiece's message (e.g. a vocabulary larger than the text allows).
void train_subword_tokenizer(const std::vector<std::string>& texts, int vocab,
                             const std::string& out_dir);

/// The byte tokenizer's tokenizer.json (file comment).
nlohmann::json hf_byte_tokenizer_json();

/// tokenizer_config.json for either: PreTrainedTokenizerFast, model_max_length, no cleanup of
/// spaces (decoding must give the bytes back unchanged).
nlohmann::json hf_tokenizer_config_json(int model_max_length);

}  // namespace dd
