// runtime/token_files.hpp — pre-tokenized corpora (data.kind = "tokens"): llm.c `.bin` shards and
// plain little-endian token arrays, read into token ids and checked against the vocabulary.
//
// Formats:
//  * llmc: karpathy/llm.c's shard (dev/data/data_common.py): a header of 256 little-endian
//    int32 — [0] magic 20240520, [1] version (1: uint16 tokens, 2: uint32 tokens), [2] token
//    count n — then n tokens. nanoGPT-style `.bin` files without a header are `uint16`.
//  * uint16 / uint32: the whole file is little-endian tokens, nothing else.
// Every error names the file: cannot open, wrong magic or version, truncated (fewer bytes than
// the header announces, or a size that is not a whole number of tokens), trailing bytes, no
// tokens, a token id >= the vocabulary (with its position).
// Pure functions; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dd {

/// What the bytes of a token file are.
enum class token_format : uint8_t { llmc, uint16, uint32 };

/// "llmc", "uint16", "uint32".
const char* to_string(token_format f);
/// Parses a spelling of to_string(); throws std::invalid_argument naming the allowed values.
token_format parse_token_format(const std::string& s);

/// llm.c's shard magic and header size (int32 words).
inline constexpr int32_t llmc_magic = 20240520;
inline constexpr size_t llmc_header_words = 256;

/// Reads every token of `path`. Throws std::runtime_error naming the file for any of the errors
/// listed above; `vocab` > 0 checks every id < vocab (the message names "model.vocab").
std::vector<int32_t> read_token_file(const std::string& path, token_format format, int vocab);

/// Writes `tokens` as an llm.c shard (version 1, uint16, when every id < 65536; else version 2,
/// uint32) or as a plain array of `format`. Atomic (temp file + rename). Throws
/// std::runtime_error naming the file on an I/O error, std::invalid_argument when an id does
/// not fit the format.
void write_token_file(const std::string& path, const std::vector<int32_t>& tokens,
                      token_format format);

}  // namespace dd
