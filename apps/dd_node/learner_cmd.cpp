// apps/dd_node/learner_cmd.cpp — `dd-node learner --join HOST:PORT[,HOST:PORT...] [flags]`: a
// learner node. Joins the syncer's health monitor, receives its learner ids, the experiment and
// the run's identity, trains, and rejoins when the syncer comes back
// (actors/nodes/learner_node.hpp).
#include <cstdio>
#include <string>

#include "actors/nodes/learner_node.hpp"
#include "apps/dd_node/node_flags.hpp"
#include "kernels/all_backends.hpp"

namespace dd::app {

namespace {

void print_learner_help(FILE* f) {
  std::fprintf(
      f,
      "usage: dd-node learner --join HOST:PORT[,HOST:PORT...] [--learners N | --learner-ids I,J]\n"
      "                       [--threads N] [--data FILE] [--run-dir DIR] [--node-name NAME]\n"
      "                       [--run-id ID] [--join-deadline S] [--backoff-cap S]\n"
      "                       [--connect-timeout S] [--progress S] [--seed S]\n"
      "                       [--heartbeat S] [--connection-timeout S] [--compute-nice N]\n"
      "                       [--chaos-endpoint HOST:PORT [--message-faults-via-endpoint]]\n"
      "                       [--force-memory] [--http HOST:PORT]\n"
      "Runs learners of the syncer's run in this process. The syncer sends the experiment, the\n"
      "run id and this node's learner ids; the data file is read here (the experiment's\n"
      "data.file, or --data FILE) and must match the syncer's (size and training-split hash).\n"
      "  --join A[,B...]       the syncer's advertised address(es), tried in turn\n"
      "  --learners N          how many learners to run here (default 1; free ids are chosen)\n"
      "  --learner-ids I,J     run exactly these learner ids (a restarted node asks for its own)\n"
      "  --threads N           compute threads per learner (default cores / learners here).\n"
      "                        Several learner nodes on one host: give each --threads so that\n"
      "                        their learners x threads stay within the cores, or run one node\n"
      "                        with --learners N, or use dd-node launch (shared step admission)\n"
      "  --data FILE           this host's copy of the data file\n"
      "  --force-memory        start even when the learners' memory estimate (dd-node resolve\n"
      "                        prints it) exceeds this host's available memory or address-space\n"
      "                        limit; without it that exits 2 after the handshake\n"
      "  --run-dir DIR         where this node's events.jsonl goes\n"
      "                        (default runs/<experiment>/nodes/<node name>)\n"
      "  --node-name NAME      name in logs (default <hostname>-<pid>)\n"
      "  --run-id ID           belong to this run only (default: the syncer's run at first join;\n"
      "                        required from then on)\n"
      "  --join-deadline S     give up after S seconds without a syncer, at start or after\n"
      "                        losing it (default 0 = never): exit 6\n"
      "  --backoff-cap S       longest wait between connection attempts (default 5; attempts\n"
      "                        back off exponentially from 0.5 s with +-20%% jitter; keep it\n"
      "                        below the experiment's checkpoint.rebuild_wait_seconds)\n"
      "  --connect-timeout S   deadline of one connection attempt (default 3)\n"
      "  --progress S          progress line every S seconds (default 5; 0 = off)\n"
      "  --seed S              seed of the backoff jitter (default: from the node name; printed)\n"
      "  --heartbeat S, --connection-timeout S   middleman heartbeat (1) and timeout (10)\n"
      "  --compute-nice N      lower the learners' compute threads by N nice steps (0..19,\n"
      "                        default 0) below this node's network threads\n"
      "  --step-admission sysv:ID   share step admission with the other learner processes of\n"
      "                        this host (a System V semaphore; dd-node launch passes it)\n"
      "  --chaos-endpoint HOST:PORT   serve message faults (dd-chaos msg) on this loopback\n"
      "                        address (port 0 = any; printed); off by default\n"
      "  --message-faults-via-endpoint   do not apply the experiment's message faults (chaos\n"
      "                        events drop/dup/delay/reorder/corrupt_push, nan, fail) here:\n"
      "                        dd-chaos sends them through the chaos endpoint (dd-node launch)\n"
      "  --http HOST:PORT      serve /metrics (Prometheus), /healthz, /readyz and /status\n"
      "                        (JSON) on this loopback address (port 0 = any; printed); off by\n"
      "                        default\n"
      "While the syncer is unreachable the learners keep stepping; when it is back (same run)\n"
      "they rejoin with a new incarnation and keep their step and data cursor.\n"
      "Exit status: 0 every learner finished (or the run was over); 1 runtime failure;\n"
      "2 bad flags; 3 the syncer runs another run (an outer supervisor should stop retrying);\n"
      "4 protocol version mismatch; 5 this node's data differs from the syncer's; 6 no syncer\n"
      "reached, or no free learner id given, within --join-deadline; 130/143 interrupted\n"
      "(learners stopped and left).\n");
}

}  // namespace

/// Entry point of `dd-node learner`; argv[0] is "learner".
int learner_main(int argc, char** argv) {
  actors::learner_node_options o;
  flag_cursor f("dd-node learner", argc, argv);
  auto value = [&](const char* flag) { return f.value(flag); };
  auto seconds = [&](const char* flag, double& out) { return f.seconds(flag, out); };
  auto count = [&](const char* flag, int& out) { return f.count(flag, out); };
  while (f.next()) {
    const std::string a = f.arg();
    std::string error;
    if (a == "--help" || a == "-h") {
      print_learner_help(stdout);
      return 0;
    } else if (a == "--join") {
      const char* v = value("--join");
      if (v == nullptr) return 2;
      if (!parse_endpoints(v, o.join, error)) {
        std::fprintf(stderr, "dd-node learner: --join: %s\n", error.c_str());
        return 2;
      }
    } else if (a == "--learners") {
      if (!count("--learners", o.learners)) return 2;
    } else if (a == "--learner-ids") {
      const char* v = value("--learner-ids");
      if (v == nullptr) return 2;
      if (!parse_ids(v, o.learner_ids)) {
        std::fprintf(stderr, "dd-node learner: --learner-ids needs ids >= 0 like 0,2, got '%s'\n",
                     v);
        return 2;
      }
    } else if (a == "--force-memory") {
      o.force_memory = true;
    } else if (a == "--threads") {
      if (!count("--threads", o.threads)) return 2;
    } else if (a == "--data") {
      const char* v = value("--data");
      if (v == nullptr) return 2;
      o.data_file = v;
    } else if (a == "--run-dir") {
      const char* v = value("--run-dir");
      if (v == nullptr) return 2;
      o.run_dir = v;
    } else if (a == "--node-name") {
      const char* v = value("--node-name");
      if (v == nullptr) return 2;
      o.node_name = v;
    } else if (a == "--run-id") {
      const char* v = value("--run-id");
      if (v == nullptr) return 2;
      o.run_id = v;
    } else if (a == "--join-deadline") {
      if (!seconds("--join-deadline", o.join_deadline_s)) return 2;
    } else if (a == "--backoff-cap") {
      if (!seconds("--backoff-cap", o.backoff_cap_s)) return 2;
    } else if (a == "--connect-timeout") {
      if (!seconds("--connect-timeout", o.connect_timeout_s)) return 2;
    } else if (a == "--progress") {
      if (!seconds("--progress", o.progress_every_s)) return 2;
    } else if (a == "--heartbeat") {
      if (!seconds("--heartbeat", o.transport.heartbeat_s)) return 2;
    } else if (a == "--connection-timeout") {
      if (!seconds("--connection-timeout", o.transport.connection_timeout_s)) return 2;
    } else if (a == "--compute-nice") {
      if (!f.count("--compute-nice", o.compute_nice, 0, 19)) return 2;
    } else if (a == "--step-admission") {
      const char* v = value("--step-admission");
      if (v == nullptr) return 2;
      o.step_admission = v;
    } else if (a == "--chaos-endpoint") {
      const char* v = value("--chaos-endpoint");
      if (v == nullptr) return 2;
      std::pair<std::string, uint16_t> ep;
      if (!parse_endpoint(v, ep, error)) {
        std::fprintf(stderr, "dd-node learner: --chaos-endpoint: %s\n", error.c_str());
        return 2;
      }
      if (!is_loopback(ep.first)) {
        std::fprintf(stderr,
                     "dd-node learner: --chaos-endpoint %s is not a loopback address; the chaos "
                     "endpoint listens on 127.0.0.1 only until nodes authenticate\n",
                     v);
        return 2;
      }
      o.chaos_endpoint = ep;
    } else if (a == "--message-faults-via-endpoint") {
      o.message_faults_via_endpoint = true;
    } else if (a == "--http") {
      const char* v = value("--http");
      if (v == nullptr || !parse_http_flag("dd-node learner", v, false, o.http)) return 2;
    } else if (a == "--seed") {
      double d = 0;
      const char* v = value("--seed");
      if (v == nullptr || !parse_nonneg(v, d)) {
        std::fprintf(stderr, "dd-node learner: --seed needs a number >= 0\n");
        return 2;
      }
      o.seed = static_cast<uint64_t>(d);
    } else {
      std::fprintf(stderr, "dd-node learner: unknown argument '%s'\n", a.c_str());
      print_learner_help(stderr);
      return 2;
    }
  }
  if (o.message_faults_via_endpoint && o.chaos_endpoint.first.empty()) {
    std::fprintf(stderr,
                 "dd-node learner: --message-faults-via-endpoint needs --chaos-endpoint "
                 "HOST:PORT (the faults would reach nobody)\n");
    return 2;
  }
  if (o.join.empty()) {
    std::fprintf(stderr, "dd-node learner: --join HOST:PORT is required\n");
    print_learner_help(stderr);
    return 2;
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
