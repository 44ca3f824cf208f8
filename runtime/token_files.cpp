// runtime/token_files.cpp — see token_files.hpp.
#include "runtime/token_files.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <fmt/format.h>

#include "util/endian.hpp"

namespace dd {

namespace fs = std::filesystem;

const char* to_string(token_format f) {
  switch (f) {
    case token_format::llmc: return "llmc";
    case token_format::uint16: return "uint16";
    case token_format::uint32: return "uint32";
  }
  return "?";
}

token_format parse_token_format(const std::string& s) {
  if (s == "llmc") return token_format::llmc;
  if (s == "uint16") return token_format::uint16;
  if (s == "uint32") return token_format::uint32;
  throw std::invalid_argument(
      fmt::format("unknown token format '{}'; expected one of llmc, uint16, uint32", s));
}

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw std::runtime_error(
        fmt::format("token file '{}': cannot open ({})", path, std::strerror(errno)));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw std::runtime_error(fmt::format("token file '{}': read error", path));
  return bytes;
}

void decode(const std::string& path, const uint8_t* p, size_t n, size_t width, int vocab,
            std::vector<int32_t>& out) {
  out.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t v =
        width == 2 ? util::load_le<uint16_t>(p + 2 * i) : util::load_le<uint32_t>(p + 4 * i);
    if (v > 0x7fffffffu || (vocab > 0 && v >= static_cast<uint32_t>(vocab)))
      throw std::runtime_error(
          fmt::format("token file '{}': token id {} at position {} is not below model.vocab = {}",
                      path, v, i, vocab));
    out[i] = static_cast<int32_t>(v);
  }
}

}  // namespace

std::vector<int32_t> read_token_file(const std::string& path, token_format format, int vocab) {
  const std::string bytes = slurp(path);
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  std::vector<int32_t> out;
  if (format == token_format::llmc) {
    const size_t header = llmc_header_words * 4;
    if (bytes.size() < header)
      throw std::runtime_error(fmt::format(
          "token file '{}': truncated: {} bytes, shorter than the llm.c header of {} bytes", path,
          bytes.size(), header));
    const int32_t magic = util::load_le<int32_t>(p);
    if (magic != llmc_magic)
      throw std::runtime_error(fmt::format(
          "token file '{}': wrong magic {} (an llm.c shard starts with {}; for a plain token "
          "array set data.format = \"uint16\" or \"uint32\")",
          path, magic, llmc_magic));
    const int32_t version = util::load_le<int32_t>(p + 4);
    if (version != 1 && version != 2)
      throw std::runtime_error(fmt::format(
          "token file '{}': llm.c version {} is not supported (1: uint16 tokens, 2: uint32)", path,
          version));
    const int32_t count = util::load_le<int32_t>(p + 8);
    const size_t width = version == 1 ? 2 : 4;
    if (count < 0)
      throw std::runtime_error(
          fmt::format("token file '{}': the header's token count {} is negative", path, count));
    const size_t want = header + static_cast<size_t>(count) * width;
    if (bytes.size() < want)
      throw std::runtime_error(fmt::format(
          "token file '{}': truncated: the header announces {} tokens ({} bytes) but the file "
          "has {} bytes",
          path, count, want, bytes.size()));
    if (bytes.size() > want)
      throw std::runtime_error(
          fmt::format("token file '{}': {} bytes after the {} tokens the header announces", path,
                      bytes.size() - want, count));
    decode(path, p + header, static_cast<size_t>(count), width, vocab, out);
  } else {
    const size_t width = format == token_format::uint16 ? 2 : 4;
    if (bytes.size() % width != 0)
      throw std::runtime_error(fmt::format(
          "token file '{}': truncated: {} bytes is not a whole number of {}-byte tokens ({})", path,
          bytes.size(), width, to_string(format)));
    decode(path, p, bytes.size() / width, width, vocab, out);
  }
  if (out.empty()) throw std::runtime_error(fmt::format("token file '{}': holds no tokens", path));
  return out;
}

void write_token_file(const std::string& path, const std::vector<int32_t>& tokens,
                      token_format format) {
  bool wide = format == token_format::uint32;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || (format == token_format::uint16 && tokens[i] > 0xffff))
      throw std::invalid_argument(
          fmt::format("token file '{}': token id {} at position {} does "
                      "not fit {}",
                      path, tokens[i], i, to_string(format)));
    if (tokens[i] > 0xffff) wide = true;
  }
  std::string out;
  if (format == token_format::llmc) {
    out.assign(llmc_header_words * 4, '\0');
    auto put32 = [&](size_t word, int32_t v) {
      for (int b = 0; b < 4; ++b)
        out[word * 4 + b] = static_cast<char>((static_cast<uint32_t>(v) >> (8 * b)) & 0xff);
    };
    put32(0, llmc_magic);
    put32(1, wide ? 2 : 1);
    put32(2, static_cast<int32_t>(tokens.size()));
  }
  const size_t width = wide ? 4 : 2;
  out.reserve(out.size() + tokens.size() * width);
  for (int32_t t : tokens)
    for (size_t b = 0; b < width; ++b)
      out.push_back(static_cast<char>((static_cast<uint32_t>(t) >> (8 * b)) & 0xff));
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f)
      throw std::runtime_error(
          fmt::format("token file '{}': cannot create ({})", tmp, std::strerror(errno)));
    f.write(out.data(), static_cast<std::streamsize>(out.size()));
    f.flush();
    if (!f) throw std::runtime_error(fmt::format("token file '{}': write error", tmp));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec)
    throw std::runtime_error(
        fmt::format("token file '{}': cannot rename from {}: {}", path, tmp, ec.message()));
}

}  // namespace dd
