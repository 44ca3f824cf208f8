// actors/link/join_auth.hpp — the join token: a shared secret that every node of a run and every
// operator action that changes the run must prove it knows, by an HMAC-SHA256 challenge–response
// (OpenSSL's HMAC; no crypto of our own).
//
// The secret is read from a file (`--join-token-file`) or the environment (DD_JOIN_TOKEN), never
// from argv, and never logged. `dd-node launch` writes a fresh one into `<run_dir>/join_token`
// (mode 0600) and hands its children the file.
//
// Every proof is HMAC-SHA256(token, purpose "\n" context), where the context holds the run id,
// what is asked for, and a nonce the verifying side issued itself a moment ago (a challenge):
//   node handshake   purpose "dd-node-join/1"   context run id, node name, CAF node id, ids, nonce
//   tensor channel   purpose "dd-tchan/2"       context run id, the client's CAF node id, nonce
//   dd-node drain    purpose "dd-drain/1"       context run id, learner id, nonce
//   operator lines   purpose "dd-operator/1"    context nonce, the request line
// A challenge is good for one proof within `ttl_s`: a recorded handshake, greeting or request
// names a nonce that is spent or expired, so replaying it is refused.
//
// The decision — is this proof valid, is this nonce fresh — is challenge_book and judge():
// sans IO (the caller supplies the clock and the nonces), not thread-safe (one owner), table
// tests in tests/actors/join_auth_test.cpp. docs/securing.md "The join token".
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace dd::actors {

/// Bytes of a challenge nonce.
inline constexpr size_t join_nonce_bytes = 32;
/// Bytes of a proof (HMAC-SHA256).
inline constexpr size_t join_proof_bytes = 32;
/// The environment variable a node reads the token from when no --join-token-file is given.
inline constexpr const char* join_token_env = "DD_JOIN_TOKEN";
/// The file `dd-node launch` writes into the run directory.
inline constexpr const char* join_token_file_name = "join_token";
/// A token shorter than this is refused (it could be guessed).
inline constexpr size_t join_token_min_bytes = 16;

/// The token of a node: read from `file` when it is not empty, else from `env_value` (the
/// value of DD_JOIN_TOKEN, or null). One trailing newline is dropped. `error` is set (naming
/// the file, never the secret) when the file cannot be read, is readable by group or others,
/// or the token is shorter than join_token_min_bytes; `token` is empty when neither is given.
struct join_token {
  std::string token;
  std::string source;  ///< "FILE" or "DD_JOIN_TOKEN"; empty when none
  std::string error;
};
join_token load_join_token(const std::string& file, const char* env_value);

/// A fresh random token (hex of 32 random bytes, OpenSSL's RAND_bytes).
std::string make_join_token();
/// `n` random bytes (RAND_bytes). Throws std::runtime_error if OpenSSL cannot supply them.
std::vector<uint8_t> random_nonce(size_t n = join_nonce_bytes);

/// HMAC-SHA256(token, purpose "\n" context).
std::vector<uint8_t> join_proof(const std::string& token, std::string_view purpose,
                                std::string_view context);
/// Lower-case hex of `b`; and back (false for odd length or a non-hex digit).
std::string to_hex(const std::vector<uint8_t>& b);
bool from_hex(std::string_view text, std::vector<uint8_t>& out);

/// What a verifier makes of a proof.
enum class auth_verdict {
  accepted,           ///< the proof is right and its challenge was fresh (now spent)
  no_proof,           ///< no proof given (the challenge is left as it was)
  unknown_challenge,  ///< the nonce was never issued here (or was evicted)
  expired,            ///< issued more than ttl_s ago
  reused,             ///< already spent by an earlier proof (a replay)
  wrong_proof,        ///< the HMAC differs: another token (the challenge is spent)
};
/// "accepted", "no proof", "unknown challenge", "expired challenge", "challenge already used
/// (a replay)", "wrong join token".
std::string_view to_string(auth_verdict v) noexcept;

/// The challenges a verifier has issued: each good for one proof within ttl_s. At most
/// `capacity` are remembered (the oldest is forgotten first, and then reads as unknown).
class challenge_book {
 public:
  explicit challenge_book(double ttl_s = 30.0, size_t capacity = 4096);
  /// Remembers `nonce` (issued at `now`).
  void issue(const std::vector<uint8_t>& nonce, double now);
  /// Whether `nonce` may be answered now (accepted, unknown_challenge, expired, reused); does
  /// not spend it.
  auth_verdict check(const std::vector<uint8_t>& nonce, double now) const;
  /// Spends `nonce`: a later check says reused (until it is forgotten).
  void spend(const std::vector<uint8_t>& nonce);
  size_t size() const { return issued_.size(); }

 private:
  struct entry {
    double at = 0;
    bool spent = false;
  };
  double ttl_s_;
  size_t capacity_;
  std::map<std::vector<uint8_t>, entry> issued_;
  std::deque<std::vector<uint8_t>> order_;
};

/// The whole decision on one proof: an empty token here accepts everything (no token
/// configured); otherwise no proof → no_proof; then the challenge's state (book.check); then the
/// HMAC, compared in constant time. Any verdict but no_proof and unknown_challenge spends the
/// challenge (a wrong guess cannot be retried on it).
auth_verdict judge(challenge_book& book, const std::string& token,
                   const std::vector<uint8_t>& challenge, const std::vector<uint8_t>& proof,
                   std::string_view purpose, std::string_view context, double now);

/// The contexts of the proofs above (every side builds them with these).
std::string node_join_context(const std::string& run_id, const std::string& node_name,
                              const std::string& origin, const std::vector<int32_t>& ids,
                              uint32_t count, const std::vector<uint8_t>& nonce);
std::string channel_context(const std::string& run_id, const std::vector<uint8_t>& node_id,
                            const std::vector<uint8_t>& nonce);
std::string drain_context(const std::string& run_id, int32_t learner_id,
                          const std::vector<uint8_t>& nonce);
std::string operator_context(const std::string& nonce_hex, const std::string& line);

inline constexpr std::string_view node_join_purpose = "dd-node-join/1";
inline constexpr std::string_view channel_purpose = "dd-tchan/2";
inline constexpr std::string_view drain_purpose = "dd-drain/1";
inline constexpr std::string_view operator_purpose = "dd-operator/1";

}  // namespace dd::actors
