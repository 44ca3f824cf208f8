// actors/link/tls.cpp — see tls.hpp.
#include "actors/link/tls.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <functional>
#include <stdexcept>

#include <fmt/format.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

namespace dd::actors {

namespace {

/// Seconds from now to `t` (negative: in the past).
double seconds_until(const ASN1_TIME* t) {
  int days = 0, secs = 0;
  if (ASN1_TIME_diff(&days, &secs, nullptr, t) != 1) return 0;
  return days * 86400.0 + secs;
}

cert_info info_of(X509* x) {
  cert_info c;
  char line[512] = {0};
  X509_NAME_oneline(X509_get_subject_name(x), line, sizeof line - 1);
  c.subject = line;
  char cn[256] = {0};
  if (X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, cn, sizeof cn - 1) > 0)
    c.names.emplace_back(cn);
  auto* sans =
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(x, NID_subject_alt_name, nullptr, nullptr));
  if (sans != nullptr) {
    for (int i = 0; i < sk_GENERAL_NAME_num(sans); ++i) {
      const GENERAL_NAME* g = sk_GENERAL_NAME_value(sans, i);
      if (g->type != GEN_DNS) continue;
      const auto* s = g->d.dNSName;
      std::string name(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                       static_cast<size_t>(ASN1_STRING_length(s)));
      bool seen = false;
      for (const auto& n : c.names) seen = seen || n == name;
      if (!seen) c.names.push_back(name);
    }
    GENERAL_NAMES_free(sans);
  }
  c.seconds_to_expiry = seconds_until(X509_get0_notAfter(x));
  c.seconds_since_start = -seconds_until(X509_get0_notBefore(x));
  return c;
}

}  // namespace

std::string openssl_error(const std::string& fallback) {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? fallback : out;
}

cert_info read_cert(const std::string& pem_file) {
  FILE* f = std::fopen(pem_file.c_str(), "r");
  if (f == nullptr)
    throw std::runtime_error(fmt::format("certificate '{}': {}", pem_file, std::strerror(errno)));
  X509* x = PEM_read_X509(f, nullptr, nullptr, nullptr);
  std::fclose(f);
  if (x == nullptr)
    throw std::runtime_error(
        fmt::format("certificate '{}' is not a PEM certificate: {}", pem_file, openssl_error()));
  auto c = info_of(x);
  X509_free(x);
  return c;
}

std::vector<std::string> peer_names(SSL* ssl) {
  X509* x = SSL_get1_peer_certificate(ssl);
  if (x == nullptr) return {};
  auto c = info_of(x);
  X509_free(x);
  return c.names;
}

std::set<int32_t> learner_ids_of(const std::vector<std::string>& names) {
  std::set<int32_t> out;
  for (const auto& n : names) {
    if (n.rfind("learner-", 0) != 0 || n.size() == 8 || n.size() > 15) continue;
    bool digits = true;
    for (size_t i = 8; i < n.size(); ++i) digits = digits && n[i] >= '0' && n[i] <= '9';
    if (digits) out.insert(static_cast<int32_t>(std::stol(n.substr(8))));
  }
  return out;
}

std::string operator_refusal(const std::vector<std::string>& names) {
  std::string roles;
  for (const auto& n : names)
    if (n == syncer_cert_name || !learner_ids_of({n}).empty())
      roles += (roles.empty() ? "" : ", ") + n;
  if (roles.empty()) return {};
  return fmt::format(
      "the certificate it came with names {} (a node's role); only an operator's certificate (one "
      "that names neither syncer nor learner-N, e.g. operator) may drain",
      roles);
}

tls_context::tls_context(const tls_files& f, side s) {
  if (!f.all()) throw std::runtime_error("TLS needs --tls-cert, --tls-key and --tls-ca together");
  ctx_ = SSL_CTX_new(s == side::server ? TLS_server_method() : TLS_client_method());
  if (ctx_ == nullptr) throw std::runtime_error("OpenSSL: " + openssl_error());
  auto fail = [&](const std::string& what) {
    const std::string why = openssl_error();
    SSL_CTX_free(ctx_);
    ctx_ = nullptr;
    throw std::runtime_error(fmt::format("{}: {}", what, why));
  };
  SSL_CTX_set_min_proto_version(ctx_, TLS1_3_VERSION);
  SSL_CTX_set_mode(ctx_, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  if (SSL_CTX_use_certificate_chain_file(ctx_, f.cert.c_str()) != 1)
    fail(fmt::format("--tls-cert '{}'", f.cert));
  if (SSL_CTX_use_PrivateKey_file(ctx_, f.key.c_str(), SSL_FILETYPE_PEM) != 1) {
    // OpenSSL checks the key against the certificate as it loads it ("key values mismatch").
    const unsigned long e = ERR_peek_last_error();
    fail(ERR_GET_REASON(e) == X509_R_KEY_VALUES_MISMATCH
             ? fmt::format("--tls-key '{}' does not match --tls-cert '{}'", f.key, f.cert)
             : fmt::format("--tls-key '{}'", f.key));
  }
  if (SSL_CTX_check_private_key(ctx_) != 1)
    fail(fmt::format("--tls-key '{}' does not match --tls-cert '{}'", f.key, f.cert));
  if (SSL_CTX_load_verify_locations(ctx_, f.ca.c_str(), nullptr) != 1)
    fail(fmt::format("--tls-ca '{}'", f.ca));
  SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  if (s == side::server) {
    // The CA's name in the certificate request, so a client picks a certificate of this CA.
    if (STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(f.ca.c_str()))
      SSL_CTX_set_client_CA_list(ctx_, names);
    SSL_CTX_set_session_cache_mode(ctx_, SSL_SESS_CACHE_OFF);
    SSL_CTX_set_num_tickets(ctx_, 0);
  }
  try {
    own_ = read_cert(f.cert);
  } catch (const std::exception& e) {
    SSL_CTX_free(ctx_);
    ctx_ = nullptr;
    throw;
  }
  if (own_.seconds_to_expiry <= 0 || own_.seconds_since_start < 0) {
    SSL_CTX_free(ctx_);
    ctx_ = nullptr;
    throw std::runtime_error(
        fmt::format("--tls-cert '{}' ({}) is {}; make a new one (docs/securing.md)", f.cert,
                    own_.subject, own_.seconds_to_expiry <= 0 ? "expired" : "not valid yet"));
  }
}

tls_context::~tls_context() {
  if (ctx_ != nullptr) SSL_CTX_free(ctx_);
}

namespace {

struct pkey_ptr {
  EVP_PKEY* p = nullptr;
  ~pkey_ptr() { EVP_PKEY_free(p); }
};
struct x509_ptr {
  X509* p = nullptr;
  ~x509_ptr() { X509_free(p); }
};

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error(fmt::format("making certificates: {}: {}", what, openssl_error()));
}

EVP_PKEY* new_key() {
  EVP_PKEY* k = EVP_EC_gen("P-256");
  if (k == nullptr) fail("a P-256 key");
  return k;
}

void write_pem(const std::string& path, bool secret, const std::function<int(FILE*)>& emit) {
  ::unlink(path.c_str());
  const int fd =
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, secret ? 0600 : 0644);
  if (fd < 0)
    throw std::runtime_error(fmt::format("cannot create {}: {}", path, std::strerror(errno)));
  FILE* f = ::fdopen(fd, "w");
  const bool ok = emit(f) == 1;
  if (std::fclose(f) != 0 || !ok) throw std::runtime_error("cannot write " + path);
}

X509* sign(EVP_PKEY* key, const std::string& cn, const std::vector<std::string>& sans, X509* issuer,
           EVP_PKEY* issuer_key, int days, bool ca) {
  X509* x = X509_new();
  X509_set_version(x, 2);
  unsigned char serial[16];
  RAND_bytes(serial, sizeof serial);
  serial[0] &= 0x7f;
  BIGNUM* bn = BN_bin2bn(serial, sizeof serial, nullptr);
  BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x));
  BN_free(bn);
  X509_gmtime_adj(X509_getm_notBefore(x), -3600);
  X509_gmtime_adj(X509_getm_notAfter(x), static_cast<long>(days) * 86400);
  X509_set_pubkey(x, key);
  X509_NAME* name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509_set_issuer_name(x, issuer != nullptr ? X509_get_subject_name(issuer) : name);
  X509V3_CTX v3;
  X509V3_set_ctx_nodb(&v3);
  X509V3_set_ctx(&v3, issuer != nullptr ? issuer : x, x, nullptr, nullptr, 0);
  auto add = [&](int nid, const std::string& value) {
    X509_EXTENSION* e = X509V3_EXT_conf_nid(nullptr, &v3, nid, value.c_str());
    if (e == nullptr) fail(value);
    X509_add_ext(x, e, -1);
    X509_EXTENSION_free(e);
  };
  if (ca) {
    add(NID_basic_constraints, "critical,CA:TRUE");
    add(NID_key_usage, "critical,keyCertSign,cRLSign");
  } else {
    add(NID_basic_constraints, "critical,CA:FALSE");
    add(NID_key_usage, "critical,digitalSignature");
    add(NID_ext_key_usage, "serverAuth,clientAuth");
    std::string alt;
    for (const auto& s : sans) alt += (alt.empty() ? "DNS:" : ",DNS:") + s;
    if (!alt.empty()) add(NID_subject_alt_name, alt);
  }
  add(NID_subject_key_identifier, "hash");
  if (X509_sign(x, issuer_key != nullptr ? issuer_key : key, EVP_sha256()) == 0) fail("signing");
  return x;
}

}  // namespace

void make_certs(const std::string& dir, const std::vector<cert_request>& nodes, int days,
                const std::string& ca_name) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::runtime_error(fmt::format("cannot make {}: {}", dir, ec.message()));
  ::chmod(dir.c_str(), 0700);
  const std::string ca_pem = (fs::path(dir) / "ca.pem").string();
  const std::string ca_key = (fs::path(dir) / "ca.key").string();
  pkey_ptr cak;
  x509_ptr cax;
  if (fs::exists(ca_pem) && fs::exists(ca_key)) {
    FILE* f = std::fopen(ca_pem.c_str(), "r");
    if (f != nullptr) {
      cax.p = PEM_read_X509(f, nullptr, nullptr, nullptr);
      std::fclose(f);
    }
    f = std::fopen(ca_key.c_str(), "r");
    if (f != nullptr) {
      cak.p = PEM_read_PrivateKey(f, nullptr, nullptr, nullptr);
      std::fclose(f);
    }
    if (cax.p == nullptr || cak.p == nullptr) fail("reading " + ca_pem + " and " + ca_key);
  } else {
    cak.p = new_key();
    cax.p = sign(cak.p, ca_name, {}, nullptr, nullptr, days, /*ca=*/true);
    write_pem(ca_key, true, [&](FILE* f) {
      return PEM_write_PrivateKey(f, cak.p, nullptr, nullptr, 0, nullptr, nullptr);
    });
    write_pem(ca_pem, false, [&](FILE* f) { return PEM_write_X509(f, cax.p); });
  }
  for (const auto& n : nodes) {
    if (n.names.empty()) throw std::runtime_error("making certificates: " + n.file + ": no name");
    pkey_ptr k;
    k.p = new_key();
    x509_ptr x;
    x.p = sign(k.p, n.names.front(), n.names, cax.p, cak.p, days, /*ca=*/false);
    write_pem((fs::path(dir) / (n.file + ".key")).string(), true, [&](FILE* f) {
      return PEM_write_PrivateKey(f, k.p, nullptr, nullptr, 0, nullptr, nullptr);
    });
    write_pem((fs::path(dir) / (n.file + ".pem")).string(), false,
              [&](FILE* f) { return PEM_write_X509(f, x.p); });
  }
}

}  // namespace dd::actors
