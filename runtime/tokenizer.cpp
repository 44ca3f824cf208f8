// runtime/tokenizer.cpp — see tokenizer.hpp.
#include "runtime/tokenizer.hpp"

#include <stdexcept>

#include <fmt/format.h>

namespace dd {

std::vector<int32_t> byte_encode(const std::string& text) {
  std::vector<int32_t> out(text.size());
  for (size_t i = 0; i < text.size(); ++i) out[i] = static_cast<unsigned char>(text[i]);
  return out;
}

std::string byte_decode(const std::vector<int32_t>& tokens) {
  std::string out(tokens.size(), '\0');
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= byte_vocab_size)
      throw std::invalid_argument(
          fmt::format("byte_decode: token {} at position {} is outside [0, 256)", tokens[i], i));
    out[i] = static_cast<char>(static_cast<unsigned char>(tokens[i]));
  }
  return out;
}

}  // namespace dd
