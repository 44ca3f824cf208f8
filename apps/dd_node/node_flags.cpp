// apps/dd_node/node_flags.cpp — see node_flags.hpp.
#include "apps/dd_node/node_flags.hpp"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace dd::app {

bool parse_endpoint(const std::string& text, std::pair<std::string, uint16_t>& out,
                    std::string& error) {
  std::string host, port;
  if (!text.empty() && text[0] == '[') {
    const auto close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      error = "'" + text + "' is not [IPV6]:PORT";
      return false;
    }
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string::npos || colon == 0) {
      error = "'" + text + "' is not HOST:PORT";
      return false;
    }
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || errno != 0 || v < 0 || v > 65535) {
    error = "'" + text + "': the port must be a number in 0..65535";
    return false;
  }
  out = {host, static_cast<uint16_t>(v)};
  return true;
}

bool parse_endpoints(const std::string& text, std::vector<std::pair<std::string, uint16_t>>& out,
                     std::string& error) {
  size_t start = 0;
  while (start <= text.size()) {
    const auto comma = text.find(',', start);
    const std::string one =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    std::pair<std::string, uint16_t> e;
    if (!parse_endpoint(one, e, error)) return false;
    out.push_back(e);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return !out.empty();
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

bool parse_http_flag(const char* who, const std::string& text, bool insecure,
                     std::pair<std::string, uint16_t>& out) {
  std::string error;
  if (!parse_endpoint(text, out, error)) {
    std::fprintf(stderr, "%s: --http: %s\n", who, error.c_str());
    return false;
  }
  if (!is_loopback(out.first) && !insecure) {
    std::fprintf(stderr,
                 "%s: --http %s is not a loopback address; the HTTP listener has no "
                 "authentication%s\n",
                 who, text.c_str(),
                 std::string(who).find("syncer") != std::string::npos ||
                         std::string(who).find("launch") != std::string::npos
                     ? ": add --insecure to listen there anyway"
                     : " and this command serves it on loopback only");
    return false;
  }
  return true;
}

bool parse_nonneg(const std::string& text, double& out) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(v) || v < 0) return false;
  out = v;
  return true;
}

bool parse_ids(const std::string& text, std::vector<int32_t>& out) {
  size_t start = 0;
  while (true) {
    const auto comma = text.find(',', start);
    const std::string one =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(one.c_str(), &end, 10);
    if (one.empty() || *end != '\0' || errno != 0 || v < 0 || v > 1000000) return false;
    out.push_back(static_cast<int32_t>(v));
    if (comma == std::string::npos) return true;
    start = comma + 1;
  }
}

const char* flag_cursor::value(const std::string& flag) {
  if (i_ + 1 >= argc_) {
    std::fprintf(stderr, "%s: %s needs a value\n", who_, flag.c_str());
    return nullptr;
  }
  return argv_[++i_];
}

bool flag_cursor::seconds(const std::string& flag, double& out) {
  const char* v = value(flag);
  if (v == nullptr) return false;
  if (!parse_nonneg(v, out)) {
    std::fprintf(stderr, "%s: %s needs a number of seconds >= 0, got '%s'\n", who_, flag.c_str(),
                 v);
    return false;
  }
  return true;
}

bool flag_cursor::count(const std::string& flag, int& out, int lo, int hi) {
  const char* v = value(flag);
  if (v == nullptr) return false;
  double d = 0;
  if (!parse_nonneg(v, d) || d < lo || d > hi || d != static_cast<double>(static_cast<int>(d))) {
    std::fprintf(stderr, "%s: %s needs a whole number in %d..%d, got '%s'\n", who_, flag.c_str(),
                 lo, hi, v);
    return false;
  }
  out = static_cast<int>(d);
  return true;
}

bool flag_cursor::port(const std::string& flag, uint16_t& out) {
  int p = 0;
  if (!count(flag, p, 0, 65535)) return false;
  out = static_cast<uint16_t>(p);
  return true;
}

bool model_args::take(flag_cursor& f, const std::string& a, void (*help)(FILE*)) {
  if (a == "--backend") {
    const char* v = f.value("--backend");
    if (v == nullptr) return false;
    backend = v;
  } else if (a == "--threads") {
    return f.count("--threads", threads, 0, 4096);
  } else if (!a.empty() && a[0] == '-') {
    std::fprintf(stderr, "%s: unknown flag '%s'\n", f.who(), a.c_str());
    help(stderr);
    return false;
  } else if (where.empty()) {
    where = a;
  } else {
    std::fprintf(stderr, "%s: more than one model given ('%s', '%s')\n", f.who(), where.c_str(),
                 a.c_str());
    return false;
  }
  return true;
}

std::atomic<int> g_node_interrupt{0};

namespace {
std::atomic<int> g_signals{0};
const char* g_who = "dd-node";

extern "C" void on_node_signal(int sig) {
  if (g_signals.fetch_add(1) >= 1) {
    static const char msg[] = ": second signal, exiting at once\n";
    ssize_t a = ::write(STDERR_FILENO, g_who, std::strlen(g_who));
    ssize_t b = ::write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)a;
    (void)b;
    ::_exit(128 + sig);
  }
  g_node_interrupt.store(sig);
}
}  // namespace

void install_node_stop_handlers(const char* who) {
  g_who = who;
  struct sigaction sa {};
  sa.sa_handler = on_node_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

}  // namespace dd::app
