// apps/dd_node/certs.cpp — `dd-node certs DIR NAME|FILE=NAME[,NAME...]...`: a throwaway CA and
// certificates signed by it for mutual TLS between nodes (actors/link/tls.hpp make_certs):
// DIR/ca.pem (give it to every node as --tls-ca), DIR/ca.key (keep it; a later call signs new
// certificates with it), and per argument DIR/FILE.pem + DIR/FILE.key (keys mode 0600).
#include <cstdio>
#include <string>
#include <vector>

#include "actors/link/tls.hpp"
#include "apps/dd_node/node_flags.hpp"
#include "util/flags.hpp"

namespace dd::app {

/// Entry point of `dd-node certs`; argv[0] is "certs".
int certs_main(int argc, char** argv) {
  std::vector<std::string> args;
  int days = 30;
  util::flag_table t(
      "dd-node certs", "DIR NAME|FILE=NAME[,NAME...]...",
      "Makes a certificate authority in DIR (ca.pem, ca.key; reused when DIR has them) and a\n"
      "certificate and key per argument, signed by it, for mutual TLS between nodes\n"
      "(--tls-cert, --tls-key, --tls-ca; docs/securing.md). NAME makes DIR/NAME.pem and\n"
      "DIR/NAME.key naming NAME; FILE=A,B makes DIR/FILE.pem naming A (its CN) and B. The\n"
      "syncer's certificate must name `syncer`; a learner node's names learner-N for each\n"
      "learner id N it may take; dd-node status and drain use any other name (e.g. operator).");
  t.positionals(&args, 2, 100000, "DIR NAME...", "the directory, then one entry per certificate")
      .count("--days", &days, 1, 3650, "N", "validity in days (default 30)")
      .epilog(
          "Example: dd-node certs tls syncer host-a=learner-0,learner-1 host-b=learner-2 operator\n"
          "Exit status: 0 written; 1 OpenSSL or the file system failed; 2 bad arguments.\n");
  if (auto rc = t.parse(argc, argv)) return *rc;
  std::vector<actors::cert_request> reqs;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    actors::cert_request r;
    const auto eq = a.find('=');
    r.file = eq == std::string::npos ? a : a.substr(0, eq);
    std::string names = eq == std::string::npos ? a : a.substr(eq + 1);
    size_t start = 0;
    while (start <= names.size()) {
      const auto comma = names.find(',', start);
      const std::string n =
          names.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      if (!n.empty()) r.names.push_back(n);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    bool ok = !r.file.empty() && !r.names.empty() && r.file.find('/') == std::string::npos &&
              r.file != "ca";
    for (const auto& n : r.names)
      for (char c : n)
        ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '.' || c == '_');
    if (!ok) {
      std::fprintf(stderr,
                   "dd-node certs: '%s' is not NAME or FILE=NAME[,NAME...] (names of letters, "
                   "digits, '-', '.', '_'; FILE not 'ca')\n",
                   a.c_str());
      return 2;
    }
    reqs.push_back(std::move(r));
  }
  try {
    actors::make_certs(args[0], reqs, days);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dd-node certs: %s\n", e.what());
    return 1;
  }
  std::printf("dd-node certs: %s/ca.pem", args[0].c_str());
  for (const auto& r : reqs) std::printf(", %s/%s.pem", args[0].c_str(), r.file.c_str());
  std::printf(" (valid %d days)\n", days);
  return 0;
}

}  // namespace dd::app
