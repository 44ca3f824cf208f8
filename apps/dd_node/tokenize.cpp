// apps/dd_node/tokenize.cpp — `dd-node tokenize [--train-tokenizer --vocab N | --tokenizer PATH]
// TEXT... --out DIR`: text files to token shards (llm.c format, runtime/token_files.hpp) with a
// SentencePiece unigram tokenizer (runtime/subword.hpp), trained here on the texts or given.
// Writes DIR/tokenizer.model (+ .vocab, when trained), DIR/tokenizer.json, and per text file
// DIR/<stem>_train.bin and DIR/<stem>_val.bin (the last --val-fraction of the file's bytes, cut
// at a newline), plus DIR/tokenize.json (files, tokens, bytes, MB/s). Progress goes to stderr.
// Exit codes: 0 ok, 1 runtime failure, 2 bad flags.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/subword.hpp"
#include "runtime/token_files.hpp"
#include "util/files.hpp"
#include "util/flags.hpp"
#include "util/parse.hpp"

namespace dd::app {

/// Entry point of `dd-node tokenize`; argv[0] is "tokenize".
int tokenize_main(int argc, char** argv) {
  bool train = false;
  int vocab = 0;
  double val_fraction = 0.1;
  std::string tokenizer, out;
  std::vector<std::string> texts;
  util::flag_table table(
      "dd-node tokenize",
      "--train-tokenizer --vocab N TEXT... --out DIR [--val-fraction F]\n"
      "       dd-node tokenize --tokenizer PATH TEXT... --out DIR [--val-fraction F]",
      "Encodes text files into llm.c token shards (data.kind = \"tokens\") with a SentencePiece\n"
      "unigram tokenizer: trained here on the TEXT files (--train-tokenizer), or an existing one.\n"
      "Writes DIR/tokenizer.model, DIR/tokenizer.json (Hugging Face tokenizers), and for each\n"
      "TEXT DIR/<name>_train.bin and DIR/<name>_val.bin, and DIR/tokenize.json (counts, MB/s).");
  table.positionals(&texts, 0, 1 << 20, "TEXT...", "the text files")
      .toggle("--train-tokenizer", &train, "train a new tokenizer on the TEXT files")
      .count("--vocab", &vocab, 16, 1 << 20, "N",
             "its vocabulary size, 16..1048576 (with --train-tokenizer)")
      .text("--tokenizer", &tokenizer, "PATH",
            "use this SentencePiece model (file, or a directory holding tokenizer.model) instead")
      .text("--out", &out, "DIR", "where everything is written (created)")
      .custom("--val-fraction", "F",
              "the last F of each text (cut at a line end) goes to _val.bin, in [0, 1) (default "
              "0.1; 0 writes no _val.bin)",
              [&](const std::string& v) -> std::string {
                if (util::parse_number(v, val_fraction) && val_fraction >= 0 && val_fraction < 1)
                  return {};
                return "needs a number in [0, 1), got '" + v + "'";
              })
      .epilog("Exit status: 0 ok; 1 runtime failure; 2 bad flags.\n");
  if (auto rc = table.parse(argc, argv)) return *rc;
  std::string why;
  if (texts.empty())
    why = "no TEXT file given";
  else if (out.empty())
    why = "--out DIR is required";
  else if (train == !tokenizer.empty())
    why = "give either --train-tokenizer --vocab N or --tokenizer PATH";
  else if (train && vocab == 0)
    why = "--train-tokenizer needs --vocab N";
  else if (!train && vocab != 0)
    why = "--vocab applies to --train-tokenizer only";
  if (!why.empty()) {
    std::fprintf(stderr, "dd-node tokenize: %s\n", why.c_str());
    table.print_help(stderr);
    return 2;
  }
  namespace fs = std::filesystem;
  try {
    if (auto st = util::make_dirs(out); !st) throw std::runtime_error(st.message);
    const auto t0 = std::chrono::steady_clock::now();
    auto since = [](auto t) {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
    };
    if (train) {
      std::fprintf(stderr,
                   "dd-node tokenize: training a unigram tokenizer of %d pieces on %zu "
                   "file(s)...\n",
                   vocab, texts.size());
      train_subword_tokenizer(texts, vocab, out);
      std::fprintf(stderr, "dd-node tokenize: trained in %.1f s\n", since(t0));
      tokenizer = out;
    }
    const subword_tokenizer tok(tokenizer);
    {
      const std::string j = tok.hf_tokenizer_json().dump(2) + "\n";
      if (auto st = util::write_file_atomic((fs::path(out) / "tokenizer.json").string(), j); !st)
        throw std::runtime_error(st.message);
    }
    if (!train) {
      std::error_code ec;
      if (fs::absolute(tok.path()) != fs::absolute(fs::path(out) / "tokenizer.model"))
        fs::copy_file(tok.path(), fs::path(out) / "tokenizer.model",
                      fs::copy_options::overwrite_existing, ec);
      if (ec)
        throw std::runtime_error(fmt::format("cannot copy '{}': {}", tok.path(), ec.message()));
    }
    nlohmann::json report = {{"tokenizer", (fs::path(out) / "tokenizer.model").string()},
                             {"vocab", tok.vocab_size()},
                             {"files", nlohmann::json::array()}};
    size_t total_bytes = 0, total_tokens = 0;
    const auto t_enc = std::chrono::steady_clock::now();
    for (const auto& path : texts) {
      std::string text;
      if (auto st = util::read_file(path, text); !st) throw std::runtime_error(st.message);
      size_t cut = text.size();
      if (val_fraction > 0) {
        cut = static_cast<size_t>(static_cast<double>(text.size()) * (1.0 - val_fraction));
        const size_t nl = text.rfind('\n', cut);
        if (nl != std::string::npos && nl > 0) cut = nl + 1;
      }
      const std::string stem = fs::path(path).stem().string();
      const auto t_file = std::chrono::steady_clock::now();
      double last = 0;
      auto progress = [&](size_t done) {
        const double s = since(t_file);
        if (s - last < 2.0) return;
        last = s;
        std::fprintf(stderr, "dd-node tokenize: %s: %.1f / %.1f MB, %.2f MB/s\n", path.c_str(),
                     static_cast<double>(done) / 1e6, static_cast<double>(text.size()) / 1e6,
                     static_cast<double>(done) / 1e6 / s);
      };
      nlohmann::json entry = {{"text", path}, {"bytes", text.size()}};
      for (int part = 0; part < (cut < text.size() ? 2 : 1); ++part) {
        const std::string piece = part == 0 ? text.substr(0, cut) : text.substr(cut);
        const auto ids = tok.encode(piece, progress);
        const std::string bin =
            (fs::path(out) / (stem + (part == 0 ? "_train.bin" : "_val.bin"))).string();
        write_token_file(bin, ids, token_format::llmc);
        entry[part == 0 ? "train" : "val"] = {
            {"file", bin}, {"bytes", piece.size()}, {"tokens", ids.size()}};
        total_tokens += ids.size();
      }
      total_bytes += text.size();
      report["files"].push_back(entry);
    }
    const double secs = since(t_enc);
    const double mbps = secs > 0 ? static_cast<double>(total_bytes) / 1e6 / secs : 0.0;
    report["bytes"] = total_bytes;
    report["tokens"] = total_tokens;
    report["bytes_per_token"] =
        total_tokens > 0 ? static_cast<double>(total_bytes) / static_cast<double>(total_tokens)
                         : 0.0;
    report["encode_seconds"] = secs;
    report["mb_per_second"] = mbps;
    if (auto st = util::write_file_atomic((fs::path(out) / "tokenize.json").string(),
                                          report.dump(2) + "\n");
        !st)
      throw std::runtime_error(st.message);
    std::printf(
        "tokenized %zu bytes into %zu tokens (%.2f bytes/token, vocab %d) at %.2f MB/s; "
        "shards and tokenizer in %s\n",
        total_bytes, total_tokens,
        total_tokens > 0 ? static_cast<double>(total_bytes) / static_cast<double>(total_tokens)
                         : 0.0,
        tok.vocab_size(), mbps, out.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dd-node tokenize: %s\n", e.what());
    return 1;
  }
}

}  // namespace dd::app
