// apps/dd_node/learner_cmd.cpp — `dd-node learner --join HOST:PORT[,HOST:PORT...] [flags]`: a
// learner node. Joins the syncer's health monitor, receives its learner ids, the experiment and
// the run's identity, trains, and rejoins when the syncer comes back
// (actors/nodes/learner_node.hpp).
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "actors/link/tls_tunnel.hpp"
#include "actors/nodes/learner_node.hpp"
#include "actors/nodes/node_connector.hpp"
#include "apps/dd_node/node_flags.hpp"
#include "kernels/all_backends.hpp"

namespace dd::app {

/// Entry point of `dd-node learner`; argv[0] is "learner".
int learner_main(int argc, char** argv) {
  actors::learner_node_options o;
  std::string http_text, token_file;
  actors::tls_files tls_files;
  bool insecure = false;
  util::flag_table t(
      "dd-node learner", "--join HOST:PORT[,HOST:PORT...] [flags]",
      "Runs learners of the syncer's run in this process. The syncer sends the experiment, the\n"
      "run id and this node's learner ids; the data file is read here (the experiment's\n"
      "data.file, or --data FILE) and must match the syncer's (size and training-split hash).");
  t.custom("--join", "A[,B...]", "the syncer's advertised address(es), tried in turn",
           [&](const std::string& v) -> std::string {
             std::string error;
             return parse_endpoints(v, o.join, error) ? std::string() : "--join: " + error;
           })
      .count("--learners", &o.learners, 1, 4096, "N",
             "how many learners to run here (default 1; free ids are chosen)")
      .custom("--learner-ids", "I,J",
              "run exactly these learner ids (a restarted node asks for its own)",
              [&](const std::string& v) -> std::string {
                return parse_ids(v, o.learner_ids) ? std::string()
                                                   : "needs ids >= 0 like 0,2, got '" + v + "'";
              })
      .count("--threads", &o.threads, 1, 4096, "N",
             "compute threads per learner (default cores / learners here). Several learner "
             "nodes on one host: give each --threads so that their learners x threads stay "
             "within the cores, or run one node with --learners N, or use dd-node launch (shared "
             "step admission)")
      .text("--data", &o.data_file, "FILE", "this host's copy of the data file");
  add_force_memory_flag(t, &o.force_memory, "the learners' memory estimate",
                        "that exits 2 after the handshake");
  t.text("--run-dir", &o.run_dir, "DIR",
         "where this node's events.jsonl goes (default runs/<experiment>/nodes/<node name>)")
      .text("--node-name", &o.node_name, "NAME", "name in logs (default <hostname>-<pid>)")
      .text("--run-id", &o.run_id, "ID",
            "belong to this run only (default: the syncer's run at first join; required from "
            "then on)")
      .seconds("--join-deadline", &o.join_deadline_s,
               "give up after S seconds without a syncer, at start or after losing it (default 0 "
               "= never): exit 6")
      .seconds("--backoff-cap", &o.backoff_cap_s,
               "longest wait between connection attempts (default 5; attempts back off "
               "exponentially from 0.5 s with +-20% jitter; keep it below the experiment's "
               "checkpoint.rebuild_wait_seconds)")
      .seconds("--connect-timeout", &o.connect_timeout_s,
               "deadline of one connection attempt (default 3)")
      .seconds("--progress", &o.progress_every_s,
               "progress line every S seconds (default 5; 0 = off)")
      .count("--seed", &o.seed, uint64_t{0}, std::numeric_limits<uint64_t>::max(), "S",
             "seed of the backoff jitter (default: from the node name; printed)");
  add_transport_flags(t, o.transport);
  t.count("--compute-nice", &o.compute_nice, 0, 19, "N",
          "lower the learners' compute threads by N nice steps (default 0) below this node's "
          "network threads")
      .text("--step-admission", &o.step_admission, "sysv:ID",
            "share step admission with the other learner processes of this host (a System V "
            "semaphore; dd-node launch passes it)");
  add_chaos_endpoint_flags(t, &o.chaos_endpoint, &o.message_faults_via_endpoint, "message faults",
                           "drop/dup/delay/reorder/corrupt_push, nan, fail");
  add_http_flag(t, &http_text, "Loopback only");
  add_join_token_flag(t, &token_file,
                      "the run's join token, proven (HMAC over a fresh challenge) at every "
                      "handshake and tensor channel hello when the syncer asks for one; its "
                      "chaos endpoint then asks for it too.");
  add_tls_flags(t, &tls_files,
                "every connection to the syncer (CAF and the tensor channel) then goes through "
                "a local TLS forwarder; the syncer's certificate must be signed by --tls-ca and "
                "name `syncer`, and the syncer gives this node only the learner ids its "
                "certificate names (learner-N).");
  t.toggle("--insecure", &insecure,
           "join a non-loopback address without TLS (anyone on the path can read and alter the "
           "run's traffic; the join token still decides who joins)");
  t.epilog(
      "While the syncer is unreachable the learners keep stepping; when it is back (same run)\n"
      "they rejoin with a new incarnation and keep their step and data cursor.\n"
      "Exit status: 0 every learner finished (or the run was over); 1 runtime failure;\n"
      "2 bad flags; 3 the syncer runs another run (an outer supervisor should stop retrying);\n"
      "4 protocol version mismatch; 5 this node's data differs from the syncer's; 6 no syncer\n"
      "reached, or no free learner id given, within --join-deadline; 7 the syncer refused\n"
      "this node's join token (or it has none); 130/143 interrupted (learners stopped and\n"
      "left).\n");
  if (auto rc = t.parse(argc, argv)) return *rc;
  if (!read_join_token("dd-node learner", token_file, o.join_token)) return 2;
  std::shared_ptr<actors::tls_context> tls;
  if (!load_tls("dd-node learner", tls_files, actors::tls_context::side::client, tls)) return 2;
  if (!tls && !insecure)
    for (const auto& j : o.join)
      if (!is_loopback(j.first)) {
        std::fprintf(stderr,
                     "dd-node learner: --join %s:%u is not a loopback address; give it TLS "
                     "(--tls-cert, --tls-key, --tls-ca; docs/securing.md) or add --insecure to "
                     "join in the clear\n",
                     j.first.c_str(), j.second);
        return 2;
      }
  if (!http_text.empty() && !parse_http_flag("dd-node learner", http_text, false, o.http)) return 2;
  if (!check_chaos_endpoint_flags("dd-node learner", o.chaos_endpoint,
                                  o.message_faults_via_endpoint))
    return 2;
  if (o.join.empty()) {
    std::fprintf(stderr, "dd-node learner: --join HOST:PORT is required\n");
    t.print_help(stderr);
    return 2;
  }
  // TLS: one local forwarder per syncer address; the node's CAF connections and its tensor
  // channel dial the forwarder on loopback, which wraps each in TLS (tls_tunnel.hpp).
  std::vector<std::unique_ptr<actors::tls_tunnel>> tunnels;
  // A failed attempt names the syncer (not its local forwarder) and, with TLS, the forwarder's
  // refusal when its handshake failed (actors/nodes/node_connector.hpp join_failure_text).
  struct behind {
    std::string syncer;
    actors::tls_tunnel* tunnel;
    uint64_t seen;
  };
  auto forwarders = std::make_shared<std::map<uint16_t, behind>>();
  o.explain_join_failure = [forwarders](const std::pair<std::string, uint16_t>& addr,
                                        const std::string& error, bool reached) {
    auto it = forwarders->find(addr.second);
    if (addr.first != "127.0.0.1" || it == forwarders->end())
      return actors::join_failure_text(error, "", "", "", reached);
    const uint64_t refused = it->second.tunnel->refused();
    const std::string refusal = refused > it->second.seen ? it->second.tunnel->last_refusal() : "";
    it->second.seen = refused;
    return actors::join_failure_text(error, fmt::format("127.0.0.1:{}", addr.second),
                                     it->second.syncer, refusal);
  };
  if (tls) {
    for (auto& j : o.join) {
      actors::tls_tunnel::options to;
      to.what = actors::tls_tunnel::mode::originate;
      to.listen_host = "127.0.0.1";
      to.target_host = j.first;
      to.target_port = j.second;
      to.ctx = tls;
      to.expect_peer_name = actors::syncer_cert_name;
      to.handshake_timeout_s = std::max(1.0, o.connect_timeout_s);
      to.on_refused = [](const std::string& what) {
        std::fprintf(stderr, "dd-node learner: %s\n", what.c_str());
        std::fflush(stderr);
      };
      try {
        tunnels.push_back(std::make_unique<actors::tls_tunnel>(std::move(to)));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "dd-node learner: TLS forwarder: %s\n", e.what());
        return 1;
      }
      std::printf("dd-node learner: TLS to %s:%u through 127.0.0.1:%u\n", j.first.c_str(), j.second,
                  tunnels.back()->port());
      (*forwarders)[tunnels.back()->port()] = {fmt::format("{}:{}", j.first, j.second),
                                               tunnels.back().get(), 0};
      j = {"127.0.0.1", tunnels.back()->port()};
    }
    std::fflush(stdout);
    o.tls_not_after_unix = static_cast<double>(std::time(nullptr)) + tls->own().seconds_to_expiry;
  }
  kernels::init_all_backends();
  install_node_stop_handlers("dd-node learner");
  o.interrupt = &g_node_interrupt;
  try {
    return actors::run_learner_node(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dd-node learner: %s\n", e.what());
    return 1;
  }
}

}  // namespace dd::app
