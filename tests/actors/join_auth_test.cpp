// tests/actors/join_auth_test.cpp — the join token's decision (actors/link/join_auth.hpp): is
// this proof valid, is this challenge fresh; and reading the token from a file or the
// environment. A manual clock; nonces are fixed bytes.
#include "actors/link/join_auth.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace dd::actors {
namespace {

const std::string token = "0123456789abcdef0123456789abcdef";
std::vector<uint8_t> nonce(uint8_t b) { return std::vector<uint8_t>(join_nonce_bytes, b); }

TEST(JoinAuth, ProofIsHmacSha256OfPurposeAndContext) {
  // The value `printf 'what do ya want\nfor nothing?' | openssl dgst -sha256 -hmac Jefe` prints
  // (RFC 4231's test case 2 key and text, with the purpose's newline).
  EXPECT_EQ(to_hex(join_proof("Jefe", "what do ya want", "for nothing?")),
            "50ff9fd552ba6f7d7aea9a88e93f2ebee2870bf860cfd7a2b6cf2cbbed92a13e");
}

struct row {
  const char* what;
  double issued_at;           // < 0: never issued
  bool spent_before;          // an earlier proof spent it
  const char* proof_token;    // the token the prover used; nullptr: no proof
  const char* proof_context;  // the context the prover signed
  double now;
  auth_verdict want;
  bool spent_after;  // a second, right proof is then refused as reused
};

TEST(JoinAuth, JudgeTable) {
  const std::string ctx = node_join_context("feedface", "n1", "origin", {1, 2}, 2, nonce(7));
  const row rows[] = {
      {"the right token, fresh", 0.0, false, token.c_str(), ctx.c_str(), 1.0,
       auth_verdict::accepted, true},
      {"no proof", 0.0, false, nullptr, ctx.c_str(), 1.0, auth_verdict::no_proof, false},
      {"a wrong token", 0.0, false, "another token of 32 bytes......", ctx.c_str(), 1.0,
       auth_verdict::wrong_proof, true},
      {"the right token over another context (other ids)", 0.0, false, token.c_str(),
       "run feedface\nnode n1\norigin origin\nids 1,3\ncount 2\nnonce x", 1.0,
       auth_verdict::wrong_proof, true},
      {"a challenge never issued", -1.0, false, token.c_str(), ctx.c_str(), 1.0,
       auth_verdict::unknown_challenge, false},
      {"a spent challenge (replay)", 0.0, true, token.c_str(), ctx.c_str(), 1.0,
       auth_verdict::reused, true},
      {"an expired challenge", 0.0, false, token.c_str(), ctx.c_str(), 31.0, auth_verdict::expired,
       true},
      {"at the ttl exactly: still fresh", 0.0, false, token.c_str(), ctx.c_str(), 30.0,
       auth_verdict::accepted, true},
      {"a clock before the issue", 5.0, false, token.c_str(), ctx.c_str(), 1.0,
       auth_verdict::expired, true},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.what);
    challenge_book book(30.0);
    if (r.issued_at >= 0) book.issue(nonce(7), r.issued_at);
    if (r.spent_before) book.spend(nonce(7));
    const std::vector<uint8_t> proof =
        r.proof_token ? join_proof(r.proof_token, node_join_purpose, r.proof_context)
                      : std::vector<uint8_t>{};
    EXPECT_EQ(judge(book, token, nonce(7), proof, node_join_purpose, ctx, r.now), r.want);
    const auto right = join_proof(token, node_join_purpose, ctx);
    const auto again = judge(book, token, nonce(7), right, node_join_purpose, ctx, r.now);
    if (r.spent_after)
      EXPECT_EQ(again, auth_verdict::reused);
    else
      EXPECT_NE(again, auth_verdict::reused);
  }
}

TEST(JoinAuth, NoTokenHereAcceptsAnything) {
  challenge_book book;
  EXPECT_EQ(judge(book, "", nonce(1), {}, drain_purpose, "x", 0.0), auth_verdict::accepted);
}

TEST(JoinAuth, PurposeSeparatesProofs) {
  // A proof made for the tensor channel does not pass as a drain's over the same text.
  challenge_book book;
  book.issue(nonce(3), 0.0);
  const auto p = join_proof(token, channel_purpose, "same");
  EXPECT_EQ(judge(book, token, nonce(3), p, drain_purpose, "same", 0.0), auth_verdict::wrong_proof);
}

TEST(JoinAuth, BookForgetsTheOldestPastCapacity) {
  challenge_book book(30.0, 2);
  book.issue(nonce(1), 0.0);
  book.issue(nonce(2), 0.0);
  book.issue(nonce(3), 0.0);
  EXPECT_EQ(book.size(), 2u);
  EXPECT_EQ(book.check(nonce(1), 0.0), auth_verdict::unknown_challenge);
  EXPECT_EQ(book.check(nonce(2), 0.0), auth_verdict::accepted);
  EXPECT_EQ(book.check(nonce(3), 0.0), auth_verdict::accepted);
}

TEST(JoinAuth, HexRoundTrip) {
  std::vector<uint8_t> b;
  ASSERT_TRUE(from_hex("00ff10Ab", b));
  EXPECT_EQ(to_hex(b), "00ff10ab");
  EXPECT_FALSE(from_hex("abc", b));
  EXPECT_FALSE(from_hex("zz", b));
  EXPECT_EQ(make_join_token().size(), 64u);
  EXPECT_NE(random_nonce(), random_nonce());
}

std::string write_tmp(const std::string& text, mode_t mode) {
  char path[] = "/tmp/dd_join_token_XXXXXX";
  const int fd = ::mkstemp(path);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  ::close(fd);
  ::chmod(path, mode);
  return path;
}

TEST(JoinAuth, TokenFromFileOrEnvironment) {
  const std::string good = write_tmp(token + "\n", 0600);
  auto t = load_join_token(good, "ignored-because-the-file-wins");
  EXPECT_EQ(t.error, "");
  EXPECT_EQ(t.token, token);  // the trailing newline dropped
  EXPECT_EQ(t.source, good);

  const std::string open_to_all = write_tmp(token, 0644);
  t = load_join_token(open_to_all, nullptr);
  EXPECT_NE(t.error.find("readable or writable by group or others (mode 644)"), std::string::npos)
      << t.error;
  EXPECT_EQ(t.error.find(token), std::string::npos);  // never the secret
  EXPECT_EQ(t.token, "");

  const std::string short_one = write_tmp("short", 0600);
  t = load_join_token(short_one, nullptr);
  EXPECT_NE(t.error.find("has 5 bytes; at least 16"), std::string::npos) << t.error;

  t = load_join_token("/nonexistent/dd_token", nullptr);
  EXPECT_NE(t.error.find("/nonexistent/dd_token"), std::string::npos);

  t = load_join_token("", token.c_str());
  EXPECT_EQ(t.token, token);
  EXPECT_EQ(t.source, "DD_JOIN_TOKEN");
  t = load_join_token("", nullptr);
  EXPECT_EQ(t.token, "");
  EXPECT_EQ(t.error, "");
  for (const auto& p : {good, open_to_all, short_one}) std::remove(p.c_str());
}

}  // namespace
}  // namespace dd::actors
