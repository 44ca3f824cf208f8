// apps/dd_node/status.cpp — `dd-node status RUN_DIR|HOST:PORT` (the live view of a running
// cluster: learners, incarnations, leases, fragment versions) and `dd-node drain learner:N
// RUN_DIR|HOST:PORT` (remove a learner gracefully: it stops at its next step, its final pushes
// are merged, it leaves; under dd-node launch its process exits 0 and is not restarted). Both
// reach the syncer's health monitor over the middleman like a learner node does (a bounded
// connect first; through TLS the forwarder's own, bounded, and no other connection), so they
// work from any host that reaches the syncer.
#include <sys/stat.h>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <nlohmann/json.hpp>

#include "actors/link/atoms.hpp"
#include "actors/link/join_auth.hpp"
#include "actors/link/tls_tunnel.hpp"
#include "actors/nodes/learner_node.hpp"
#include "actors/nodes/node_config.hpp"
#include "apps/dd_node/node_flags.hpp"
#include "messages/control.hpp"
#include "runtime/nodes_file.hpp"

namespace dd::app {

namespace {

namespace fs = std::filesystem;

/// When the run in `dir` finished (its summary.json's modification time, UTC), with
/// " (interrupted)" when summary.json says so; empty when `dir` holds no summary.json.
std::string finished_at(const fs::path& dir) {
  std::error_code ec;
  const fs::path summary = dir / "summary.json";
  if (!fs::exists(summary, ec)) return {};
  std::string when = "an unknown time";
  struct stat sb {};
  if (::stat(summary.c_str(), &sb) == 0) {
    std::tm tm{};
    char buf[64];
    if (::gmtime_r(&sb.st_mtime, &tm) != nullptr &&
        std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm) > 0)
      when = buf;
  }
  bool interrupted = false;
  try {
    std::ifstream in(summary);
    interrupted = nlohmann::json::parse(in).value("interrupted", false);
  } catch (const std::exception&) {}
  return when + (interrupted ? " (interrupted)" : "");
}

/// The line for a run directory whose run finished ("the run in 'DIR' finished at ..."), or
/// empty when `where` is no directory or holds no summary.json. A resumed part removes the
/// earlier part's summary.json when it starts; this is said only when no syncer answers.
std::string finished_note(const std::string& where) {
  std::error_code ec;
  if (!fs::is_directory(where, ec)) return {};
  const std::string at = finished_at(where);
  return at.empty()
             ? std::string()
             : "the run in '" + where + "' finished at " + at + " (summary.json); no syncer to ask";
}

/// The address of the newest `listening` event in a run directory's events.jsonl (a syncer
/// writes one each time it starts; a wildcard host is asked on the loopback), if any.
std::optional<std::pair<std::string, uint16_t>> last_listening(const fs::path& events) {
  std::ifstream in(events);
  std::optional<std::pair<std::string, uint16_t>> found;
  std::string line;
  while (std::getline(in, line)) {
    if (line.find("\"event\":\"listening\"") == std::string::npos) continue;
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("port") || !j["port"].is_number_unsigned()) continue;
    const auto port = j["port"].get<uint64_t>();
    if (port == 0 || port > 65535) continue;
    std::string host = j.value("host", std::string());
    if (host.empty() || host == "0.0.0.0" || host == "::") host = "127.0.0.1";
    found = std::make_pair(host, static_cast<uint16_t>(port));
  }
  return found;
}

/// RUN_DIR (its nodes.json names the syncer, or, for a syncer started by hand, its newest
/// `listening` event) or HOST:PORT → the syncer's address. False with
/// `error` set and `rc` the exit status: 2 for no run there (a missing directory, or one that
/// holds no run), 1 for a run that finished (nothing is live to ask).
bool syncer_address(const std::string& where, std::pair<std::string, uint16_t>& out,
                    std::optional<dd::nodes_file>* nodes, std::string& error, int& rc) {
  std::error_code ec;
  rc = 2;
  if (fs::is_directory(where, ec)) {
    const bool have_nodes = fs::exists(fs::path(where) / "nodes.json", ec);
    if (!have_nodes && fs::exists(fs::path(where) / "summary.json", ec)) {
      error = finished_note(where);
      rc = 1;
      return false;
    }
    if (!have_nodes && !fs::exists(fs::path(where) / "events.jsonl", ec)) {
      error = "no run in '" + where + "' (no nodes.json, events.jsonl or summary.json)";
      return false;
    }
    if (!have_nodes) {
      // events.jsonl without summary.json: a run still going, or one a crash or a second
      // signal ended (a resumed part removes the earlier part's summary.json when it starts).
      // A syncer started by hand (dd-node syncer --run-dir) writes no nodes.json; its events
      // say where it listens.
      if (auto at = last_listening(fs::path(where) / "events.jsonl")) {
        out = *at;
        return true;
      }
      error = "the run in '" + where +
              "' is unfinished (events.jsonl, no summary.json: still running, or ended by a "
              "crash or a second signal; --resume continues it) and holds no nodes.json and no "
              "syncer's listening event; give the syncer's HOST:PORT to ask a live one";
      return false;
    }
    try {
      *nodes = dd::load_nodes_file((fs::path(where) / "nodes.json").string());
      for (const auto& n : (*nodes)->nodes)
        if (n.role == "syncer") return parse_endpoint(n.listen, out, error);
    } catch (const dd::nodes_file_error& e) {
      // A finished run's leftover nodes file is not asked, readable or not.
      error = finished_note(where);
      rc = error.empty() ? 2 : 1;
      if (error.empty()) error = e.what();
      return false;
    }
    error = finished_note(where);
    if (!error.empty()) {
      rc = 1;
      return false;
    }
    error = "nodes.json names no syncer";
    return false;
  }
  if (parse_endpoint(where, out, error)) return true;
  if (where.find(':') == std::string::npos || fs::exists(where, ec))
    error = "no run in '" + where + "' (" +
            (fs::exists(where, ec) ? "not a directory" : "no such directory") +
            "), and it is not a syncer's HOST:PORT";
  return false;
}

/// Mutual TLS of dd-node status / drain (null: plain TCP): each question goes through a local
/// TLS forwarder to the syncer (actors/link/tls_tunnel.hpp).
std::shared_ptr<actors::tls_context> g_operator_tls;

/// --tls-* of status / drain into g_operator_tls; with none given and RUN_DIR holding the
/// certificates dd-node launch made (RUN_DIR/tls), the operator's certificate there. False
/// after a line on stderr.
bool operator_tls(const char* who, actors::tls_files f, const std::string& where) {
  std::error_code ec;
  const fs::path dir = fs::path(where) / "tls";
  if (!f.any() && fs::is_directory(where, ec) && fs::exists(dir / "operator.pem", ec))
    f = {(dir / "operator.pem").string(), (dir / "operator.key").string(),
         (dir / "ca.pem").string()};
  return load_tls(who, f, actors::tls_context::side::client, g_operator_tls);
}

/// Asks the monitor one (atom, request bytes) and hands back the reply's bytes.
template <class Atom>
int ask_monitor(const char* who, const std::string& where, std::optional<dd::nodes_file>* nodes,
                wire_bytes* reply, Atom atom, const wire_bytes& request) {
  std::pair<std::string, uint16_t> addr;
  std::string error;
  int rc = 2;
  if (!syncer_address(where, addr, nodes, error, rc)) {
    std::fprintf(stderr, "dd-node %s: %s\n", who, error.c_str());
    return rc;
  }
  auto unreachable = [&](const std::string& why) {
    if (const std::string note = finished_note(where); !note.empty())
      std::fprintf(stderr, "dd-node %s: %s\n", who, note.c_str());
    else
      std::fprintf(stderr, "dd-node %s: the syncer is not reachable: %s\n", who, why.c_str());
    return 1;
  };
  // Plain TCP: a bounded connect first (CAF's own has no deadline). Through TLS the forwarder's
  // connect is bounded (its handshake timeout) and is the only connection: a probe of the
  // syncer's TLS port would be one that closes before its handshake.
  if (!g_operator_tls && !actors::tcp_reachable(addr.first, addr.second, 3.0, &error))
    return unreachable(error);
  std::unique_ptr<actors::tls_tunnel> tunnel;
  struct failure {
    std::mutex m;
    std::string why;
  };
  auto dial_failure = std::make_shared<failure>();
  if (g_operator_tls) {
    actors::tls_tunnel::options to;
    to.what = actors::tls_tunnel::mode::originate;
    to.target_host = addr.first;
    to.target_port = addr.second;
    to.ctx = g_operator_tls;
    to.expect_peer_name = actors::syncer_cert_name;
    to.on_refused = [who](const std::string& what) {
      std::fprintf(stderr, "dd-node %s: %s\n", who, what.c_str());
    };
    to.on_unreachable = [dial_failure](const std::string& why) {
      std::lock_guard<std::mutex> g(dial_failure->m);
      dial_failure->why = why;
    };
    tunnel = std::make_unique<actors::tls_tunnel>(std::move(to));
    addr = {"127.0.0.1", tunnel->port()};
  }
  actors::node_config cfg;
  caf::actor_system sys{cfg};
  auto monitor = sys.middleman().remote_actor<actors::monitor_hdl>(addr.first, addr.second);
  if (!monitor) {
    std::string dial_why;
    {
      std::lock_guard<std::mutex> g(dial_failure->m);
      dial_why = dial_failure->why;
    }
    if (!dial_why.empty()) return unreachable(dial_why);
    const std::string why = sys.render(monitor.error());
    // A syncer that listens with TLS closes a plaintext connection during CAF's handshake.
    const char* hint =
        !g_operator_tls && why.find("disconnect_during_handshake") != std::string::npos
            ? ": the syncer closed the connection during the handshake — a syncer that listens "
              "with TLS does so to a client without a certificate: give --tls-cert, --tls-key "
              "and --tls-ca (docs/securing.md)"
            : "";
    std::fprintf(stderr, "dd-node %s: %s:%u: %s%s\n", who, addr.first.c_str(), addr.second,
                 why.c_str(), hint);
    return 1;
  }
  caf::scoped_actor self{sys};
  rc = 0;
  self->request(*monitor, std::chrono::seconds(10), atom, request)
      .receive([&](const std::vector<uint8_t>& bytes) { *reply = bytes; },
               [&](caf::error& e) {
                 std::fprintf(stderr, "dd-node %s: %s\n", who, sys.render(e).c_str());
                 rc = 1;
               });
  return rc;
}

/// dd-node status's question: it names no run (the operator may not know it; the monitor
/// answers a read-only status request of no run). The reply's envelope names the run.
int ask_status(const char* who, const std::string& where, std::optional<dd::nodes_file>* nodes,
               status_reply* out, std::string* run_id) {
  wire_bytes bytes;
  if (int rc = ask_monitor(who, where, nodes, &bytes, atoms::status_atom_v,
                           encode(status_request{}, {"", 0}));
      rc != 0)
    return rc;
  auto header = peek_envelope(bytes);
  auto rep = decode_status_reply(bytes, {}, {header ? header->run_id : std::string(), 0});
  if (!rep) {
    std::fprintf(stderr, "dd-node %s: the syncer's status reply does not decode: %s\n", who,
                 rep.error().message.c_str());
    return 1;
  }
  *run_id = header->run_id;
  *out = std::move(*rep);
  return 0;
}

}  // namespace

/// Entry point of `dd-node status`.
int status_main(int argc, char** argv) {
  std::vector<std::string> where;
  bool as_json = false;
  actors::tls_files tls_files;
  util::flag_table t(
      "dd-node status", "RUN_DIR|HOST:PORT [--json]",
      "Prints the live view of a running cluster from its syncer's health monitor:\n"
      "run id, learners (incarnation, live, node, step, tokens, seconds since the last\n"
      "heartbeat), fragment versions; with a run directory also every process of the\n"
      "nodes file.");
  t.positionals(&where, 1, 1, "RUN_DIR|HOST:PORT",
                "a run directory (dd-node launch's nodes.json, or a hand-started syncer's "
                "events.jsonl, names the syncer) or the "
                "syncer's address")
      .toggle("--json", &as_json, "print the monitor's JSON");
  add_tls_flags(t, &tls_files,
                "for a syncer that listens with TLS (default: RUN_DIR/tls/operator.pem of "
                "dd-node launch).");
  t.epilog(
      "Exit status: 0 ok, 1 syncer not reachable or the run finished (\"run finished at\n"
      "...\"), 2 bad arguments or no run in RUN_DIR.\n");
  if (auto rc = t.parse(argc, argv)) return *rc;
  if (!operator_tls("dd-node status", tls_files, where.front())) return 2;
  std::optional<dd::nodes_file> nodes;
  status_reply reply;
  std::string run_id;
  if (int rc = ask_status("status", where.front(), &nodes, &reply, &run_id); rc != 0) return rc;
  auto s = nlohmann::json::parse(reply.json);
  if (as_json) {
    std::printf("%s\n", s.dump(2).c_str());
    return 0;
  }
  std::printf("run %s: %zu of %d learners known, %s, %llu tokens, push clock (mean step) %.1f\n",
              s["run_id"].get<std::string>().c_str(), s["learners"].size(),
              s["learners_expected"].get<int>(),
              s["stopping"].get<bool>() ? "stopping" : "training",
              static_cast<unsigned long long>(s["total_tokens"].get<uint64_t>()),
              s["mean_step"].get<double>());
  std::printf("%-8s %-5s %-9s %-14s %8s %10s %9s\n", "learner", "inc", "state", "node", "step",
              "tokens", "lease_age");
  for (const auto& l : s["learners"])
    std::printf("%-8d %-5llu %-9s %-14s %8llu %10llu %8.2fs\n", l["learner"].get<int>(),
                static_cast<unsigned long long>(l["incarnation"].get<uint64_t>()),
                l["alive"].get<bool>()      ? (l["straggler"].get<bool>() ? "straggler" : "live")
                : l["finished"].get<bool>() ? "finished"
                                            : "down",
                l["node"].get<std::string>().c_str(),
                static_cast<unsigned long long>(l["step"].get<uint64_t>()),
                static_cast<unsigned long long>(l["tokens"].get<uint64_t>()),
                l["lease_age_s"].get<double>());
  if (s.contains("fragment_versions")) {
    std::string v;
    for (auto& [p, ver] : s["fragment_versions"].items())
      v += fmt::format(" {}:v{}", p, ver.get<uint64_t>());
    std::printf("fragments:%s\n", v.c_str());
  }
  if (nodes)
    for (const auto& n : nodes->nodes)
      std::printf("process %-12s %-8s pid %-7d incarnation %d  %s\n", n.name.c_str(),
                  observed_state(n).c_str(), n.pid, n.incarnation, n.log.c_str());
  return 0;
}

/// Entry point of `dd-node drain`.
int drain_main(int argc, char** argv) {
  std::vector<std::string> args;
  std::string token_file;
  actors::tls_files tls_files;
  util::flag_table t(
      "dd-node drain", "learner:N RUN_DIR|HOST:PORT",
      "Removes learner N gracefully: it stops at its next step, waits until its final\n"
      "pushes are merged, and leaves (a learner process whose learners all left exits\n"
      "0; dd-node launch does not restart it).");
  t.positionals(&args, 2, 2, "learner:N RUN_DIR|HOST:PORT",
                "the learner, and a run directory of dd-node launch or the syncer's address");
  add_join_token_flag(t, &token_file,
                      "the run's join token, proven over the syncer's status reply's challenge "
                      "(default: RUN_DIR/join_token when RUN_DIR is given).");
  add_tls_flags(t, &tls_files,
                "for a syncer that listens with TLS (default: RUN_DIR/tls/operator.pem of "
                "dd-node launch).");
  t.epilog(
      "Exit status: 0 asked, 1 syncer not reachable, the run finished, or the learner cannot\n"
      "be drained (no such learner, not joined, finished, or not connected: its link is\n"
      "down), 2 bad arguments or no run in RUN_DIR.\n");
  if (auto rc = t.parse(argc, argv)) return *rc;
  const std::string target = args[0];
  const std::string where = args[1];
  std::vector<int32_t> ids;
  if (target.rfind("learner:", 0) != 0 || !parse_ids(target.substr(8), ids) || ids.size() != 1) {
    std::fprintf(stderr, "dd-node drain: the target must be learner:N, got '%s'\n", target.c_str());
    return 2;
  }
  // A drain changes the run: it names the run, learned from a status reply first.
  if (!operator_tls("dd-node drain", tls_files, where)) return 2;
  std::string token;
  if (!read_join_token("dd-node drain", token_file, token,
                       (std::filesystem::path(where) / actors::join_token_file_name).string()))
    return 2;
  std::optional<dd::nodes_file> nodes;
  status_reply status;
  std::string run_id;
  if (int rc = ask_status("drain", where, &nodes, &status, &run_id); rc != 0) return rc;
  drain_msg req;
  req.learner_id = ids.front();
  if (!status.challenge.empty()) {
    if (token.empty()) {
      std::fprintf(stderr,
                   "dd-node drain: the syncer asks for the run's join token and none was given "
                   "(--join-token-file FILE, DD_JOIN_TOKEN, or RUN_DIR/join_token)\n");
      return 2;
    }
    req.challenge = status.challenge;
    req.proof = actors::join_proof(token, actors::drain_purpose,
                                   actors::drain_context(run_id, req.learner_id, req.challenge));
  }
  wire_bytes bytes;
  if (int rc = ask_monitor("drain", where, &nodes, &bytes, atoms::drain_atom_v,
                           encode(req, {run_id, 0}));
      rc != 0)
    return rc;
  auto reply = decode_drain_reply(bytes, {}, {run_id, 0});
  if (!reply) {
    std::fprintf(stderr, "dd-node drain: the syncer's reply does not decode: %s\n",
                 reply.error().message.c_str());
    return 1;
  }
  std::printf("dd-node drain: %s\n", reply->detail.c_str());
  return reply->accepted ? 0 : 1;
}

}  // namespace dd::app
