// actors/link/join_auth.cpp — see join_auth.hpp.
#include "actors/link/join_auth.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

namespace dd::actors {

join_token load_join_token(const std::string& file, const char* env_value) {
  join_token out;
  std::string text;
  if (!file.empty()) {
    out.source = file;
    struct stat st {};
    if (::stat(file.c_str(), &st) != 0) {
      out.error = fmt::format("join token file '{}': {}", file, std::strerror(errno));
      return out;
    }
    if ((st.st_mode & 077) != 0) {
      out.error = fmt::format(
          "join token file '{}' is readable or writable by group or others (mode {:o}); "
          "chmod 600 it",
          file, st.st_mode & 0777);
      return out;
    }
    std::ifstream in(file, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    if (!in) {
      out.error = fmt::format("join token file '{}' cannot be read", file);
      return out;
    }
    text = ss.str();
  } else if (env_value != nullptr && *env_value != '\0') {
    out.source = join_token_env;
    text = env_value;
  } else {
    return out;
  }
  if (!text.empty() && text.back() == '\n') text.pop_back();
  if (!text.empty() && text.back() == '\r') text.pop_back();
  if (text.size() < join_token_min_bytes) {
    out.error = fmt::format("the join token from {} has {} bytes; at least {} are needed",
                            out.source, text.size(), join_token_min_bytes);
    return out;
  }
  out.token = std::move(text);
  return out;
}

std::vector<uint8_t> random_nonce(size_t n) {
  std::vector<uint8_t> b(n);
  if (RAND_bytes(b.data(), static_cast<int>(n)) != 1)
    throw std::runtime_error("OpenSSL RAND_bytes failed");
  return b;
}

std::string make_join_token() { return to_hex(random_nonce(32)); }

std::vector<uint8_t> join_proof(const std::string& token, std::string_view purpose,
                                std::string_view context) {
  std::string msg;
  msg.reserve(purpose.size() + 1 + context.size());
  msg.append(purpose).push_back('\n');
  msg.append(context);
  std::vector<uint8_t> out(EVP_MAX_MD_SIZE);
  unsigned len = 0;
  HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()),
       reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), out.data(), &len);
  out.resize(len);
  return out;
}

std::string to_hex(const std::vector<uint8_t>& b) {
  static const char* digits = "0123456789abcdef";
  std::string s(b.size() * 2, '0');
  for (size_t i = 0; i < b.size(); ++i) {
    s[2 * i] = digits[b[i] >> 4];
    s[2 * i + 1] = digits[b[i] & 15];
  }
  return s;
}

bool from_hex(std::string_view text, std::vector<uint8_t>& out) {
  if (text.size() % 2 != 0) return false;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::vector<uint8_t> b(text.size() / 2);
  for (size_t i = 0; i < b.size(); ++i) {
    const int hi = nibble(text[2 * i]), lo = nibble(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    b[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  out = std::move(b);
  return true;
}

std::string_view to_string(auth_verdict v) noexcept {
  switch (v) {
    case auth_verdict::accepted: return "accepted";
    case auth_verdict::no_proof: return "no proof";
    case auth_verdict::unknown_challenge: return "unknown challenge";
    case auth_verdict::expired: return "expired challenge";
    case auth_verdict::reused: return "challenge already used (a replay)";
    case auth_verdict::wrong_proof: return "wrong join token";
  }
  return "unknown";
}

challenge_book::challenge_book(double ttl_s, size_t capacity)
    : ttl_s_(ttl_s), capacity_(capacity == 0 ? 1 : capacity) {}

void challenge_book::issue(const std::vector<uint8_t>& nonce, double now) {
  if (issued_.count(nonce) != 0) return;
  while (issued_.size() >= capacity_ && !order_.empty()) {
    issued_.erase(order_.front());
    order_.pop_front();
  }
  issued_[nonce] = entry{now, false};
  order_.push_back(nonce);
}

auth_verdict challenge_book::check(const std::vector<uint8_t>& nonce, double now) const {
  auto it = issued_.find(nonce);
  if (it == issued_.end()) return auth_verdict::unknown_challenge;
  if (it->second.spent) return auth_verdict::reused;
  if (now - it->second.at > ttl_s_ || now < it->second.at) return auth_verdict::expired;
  return auth_verdict::accepted;
}

void challenge_book::spend(const std::vector<uint8_t>& nonce) {
  auto it = issued_.find(nonce);
  if (it != issued_.end()) it->second.spent = true;
}

auth_verdict judge(challenge_book& book, const std::string& token,
                   const std::vector<uint8_t>& challenge, const std::vector<uint8_t>& proof,
                   std::string_view purpose, std::string_view context, double now) {
  if (token.empty()) return auth_verdict::accepted;
  if (proof.empty()) return auth_verdict::no_proof;
  const auto state = book.check(challenge, now);
  if (state == auth_verdict::unknown_challenge) return state;
  book.spend(challenge);
  if (state != auth_verdict::accepted) return state;
  const auto want = join_proof(token, purpose, context);
  if (proof.size() != want.size() || CRYPTO_memcmp(proof.data(), want.data(), want.size()) != 0)
    return auth_verdict::wrong_proof;
  return auth_verdict::accepted;
}

std::string node_join_context(const std::string& run_id, const std::string& node_name,
                              const std::string& origin, const std::vector<int32_t>& ids,
                              uint32_t count, const std::vector<uint8_t>& nonce) {
  std::string id_list;
  for (size_t i = 0; i < ids.size(); ++i) id_list += (i ? "," : "") + std::to_string(ids[i]);
  return fmt::format("run {}\nnode {}\norigin {}\nids {}\ncount {}\nnonce {}", run_id, node_name,
                     origin, id_list, count, to_hex(nonce));
}

std::string channel_context(const std::string& run_id, const std::vector<uint8_t>& node_id,
                            const std::vector<uint8_t>& nonce) {
  return fmt::format("run {}\nnode {}\nnonce {}", run_id, to_hex(node_id), to_hex(nonce));
}

std::string drain_context(const std::string& run_id, int32_t learner_id,
                          const std::vector<uint8_t>& nonce) {
  return fmt::format("run {}\nlearner {}\nnonce {}", run_id, learner_id, to_hex(nonce));
}

std::string operator_context(const std::string& nonce_hex, const std::string& line) {
  return fmt::format("nonce {}\n{}", nonce_hex, line);
}

}  // namespace dd::actors
