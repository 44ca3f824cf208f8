// runtime/tokenizer.hpp — the byte-level tokenizer (vocabulary 256: token id = byte value).
// Pure functions; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dd {

/// Vocabulary size of the byte tokenizer.
inline constexpr int byte_vocab_size = 256;

/// Encodes text as one token per byte: id = (unsigned char)byte, in [0, 256).
std::vector<int32_t> byte_encode(const std::string& text);

/// Decodes token ids back to bytes. Throws std::invalid_argument naming the position of an id
/// outside [0, 256).
std::string byte_decode(const std::vector<int32_t>& tokens);

}  // namespace dd
