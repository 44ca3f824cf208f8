// actors/link/tls.hpp — mutual TLS between nodes, with OpenSSL (no crypto of our own): the
// contexts both ends use, what a certificate says (its names, its expiry), the learner ids a
// certificate grants, and a throwaway CA with per-node certificates (dd-node launch, dd-node
// certs).
//
// Every context: TLS 1.3 minimum (SSL_CTX_set_min_proto_version), this node's certificate and
// key (checked to match), the peer's certificate required and verified against the CA file.
//
// Names. A certificate's names are its subject CN and its DNS subjectAltNames. The syncer's
// certificate must name `syncer`; a learner node's names `learner-N` for each learner id N it
// may take (a node started with `--learners 2` gets two of them); an operator's (dd-node status,
// drain) names anything else, e.g. `operator`, and can take no id. docs/securing.md.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;

namespace dd::actors {

/// --tls-cert, --tls-key, --tls-ca (PEM files). All three or none.
struct tls_files {
  std::string cert, key, ca;
  bool any() const { return !cert.empty() || !key.empty() || !ca.empty(); }
  bool all() const { return !cert.empty() && !key.empty() && !ca.empty(); }
};

/// What a certificate says.
struct cert_info {
  std::string subject;             ///< one line, e.g. "CN=learner-0"
  std::vector<std::string> names;  ///< its CN, then its DNS subjectAltNames
  double seconds_to_expiry = 0;    ///< until notAfter, from now; negative: expired
  double seconds_since_start = 0;  ///< since notBefore; negative: not valid yet
};
/// Reads the first certificate of a PEM file. Throws std::runtime_error naming the file.
cert_info read_cert(const std::string& pem_file);
/// The names of the peer certificate of a completed handshake (empty: none).
std::vector<std::string> peer_names(SSL* ssl);

/// Learner ids a certificate's names grant: N for each name `learner-N` (N a decimal >= 0).
std::set<int32_t> learner_ids_of(const std::vector<std::string>& names);
/// The name the syncer's certificate carries.
inline constexpr const char* syncer_cert_name = "syncer";
/// Why a peer whose certificate says `names` may not make an operator's request (dd-node drain):
/// its certificate names a role (`syncer`, or a learner id: `learner-N`), so it is a node, not
/// an operator. Empty when it may (an operator's certificate names neither, e.g. `operator`).
std::string operator_refusal(const std::vector<std::string>& names);

/// A certificate is refused at start when it is expired or not valid yet, and warned about
/// when it expires within this many seconds (7 days).
inline constexpr double cert_warn_s = 7 * 24 * 3600.0;

/// An OpenSSL context of one end. Thread-safe once built (OpenSSL's SSL_CTX is).
class tls_context {
 public:
  enum class side { server, client };
  /// Loads `f` (all three files) for `s`. Throws std::runtime_error naming the file and
  /// OpenSSL's reason (a missing file, a key that does not match the certificate, an expired
  /// or not yet valid certificate).
  tls_context(const tls_files& f, side s);
  ~tls_context();
  tls_context(const tls_context&) = delete;
  tls_context& operator=(const tls_context&) = delete;
  SSL_CTX* get() const { return ctx_; }
  /// This node's own certificate.
  const cert_info& own() const { return own_; }

 private:
  SSL_CTX* ctx_ = nullptr;
  cert_info own_;
};

/// OpenSSL's error queue as one line (and cleared); `fallback` when empty.
std::string openssl_error(const std::string& fallback = "unknown error");

/// A throwaway CA and certificates signed by it (P-256 keys, SHA-256, valid from an hour ago for
/// `days`), written as PEM files with keys at mode 0600: DIR/ca.pem (and DIR/ca.key), and for
/// each node DIR/NAME.pem and DIR/NAME.key with CN = NAME and DNS subjectAltNames = its names.
struct cert_request {
  std::string file;                ///< file stem: DIR/<file>.pem, DIR/<file>.key
  std::vector<std::string> names;  ///< the first is the CN
};
/// Makes DIR (mode 0700) and the files; an existing DIR/ca.pem and ca.key are reused (so certs
/// made later are signed by the same CA). Throws std::runtime_error naming what failed.
void make_certs(const std::string& dir, const std::vector<cert_request>& nodes, int days = 30,
                const std::string& ca_name = "dd-run-ca");

}  // namespace dd::actors
