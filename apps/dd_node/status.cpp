// apps/dd_node/status.cpp — `dd-node status RUN_DIR|HOST:PORT` (the live view of a running
// cluster: learners, incarnations, leases, fragment versions) and `dd-node drain learner:N
// RUN_DIR|HOST:PORT` (remove a learner gracefully: it stops at its next step, its final pushes
// are merged, it leaves; under dd-node launch its process exits 0 and is not restarted). Both
// reach the syncer's health monitor over the middleman like a learner node does (a bounded
// connect first), so they work from any host that reaches the syncer.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>
#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <nlohmann/json.hpp>

#include "actors/atoms.hpp"
#include "actors/learner_node.hpp"
#include "actors/node_config.hpp"
#include "apps/dd_node/node_flags.hpp"

namespace dd::app {

namespace {

namespace fs = std::filesystem;

/// RUN_DIR (its nodes.json names the syncer) or HOST:PORT → the syncer's address.
bool syncer_address(const std::string& where, std::pair<std::string, uint16_t>& out,
                    nlohmann::json* nodes, std::string& error) {
  std::error_code ec;
  if (fs::is_directory(where, ec)) {
    std::ifstream in(fs::path(where) / "nodes.json");
    if (!in) {
      error = "'" + where +
              "' holds no nodes.json (not started by dd-node launch?); give the "
              "syncer's HOST:PORT instead";
      return false;
    }
    try {
      *nodes = nlohmann::json::parse(in);
      for (const auto& n : (*nodes)["nodes"])
        if (n["role"] == "syncer")
          return parse_endpoint(n["listen"].get<std::string>(), out, error);
    } catch (const std::exception& e) {
      error = std::string("nodes.json: ") + e.what();
      return false;
    }
    error = "nodes.json names no syncer";
    return false;
  }
  return parse_endpoint(where, out, error);
}

template <class... Ts>
int ask_monitor(const char* who, const std::string& where, nlohmann::json* nodes,
                std::string* reply, Ts... msg) {
  std::pair<std::string, uint16_t> addr;
  std::string error;
  if (!syncer_address(where, addr, nodes, error)) {
    std::fprintf(stderr, "dd-node %s: %s\n", who, error.c_str());
    return 2;
  }
  if (!actors::tcp_reachable(addr.first, addr.second, 3.0, &error)) {
    std::fprintf(stderr, "dd-node %s: the syncer is not reachable: %s\n", who, error.c_str());
    return 1;
  }
  actors::node_config cfg;
  caf::actor_system sys{cfg};
  auto monitor = sys.middleman().remote_actor(addr.first, addr.second);
  if (!monitor) {
    std::fprintf(stderr, "dd-node %s: %s:%u: %s\n", who, addr.first.c_str(), addr.second,
                 sys.render(monitor.error()).c_str());
    return 1;
  }
  caf::scoped_actor self{sys};
  int rc = 0;
  self->request(*monitor, std::chrono::seconds(10), msg...)
      .receive([&](const std::string& s) { *reply = s; },
               [&](caf::error& e) {
                 std::fprintf(stderr, "dd-node %s: %s\n", who, sys.render(e).c_str());
                 rc = 1;
               });
  return rc;
}

}  // namespace

/// Entry point of `dd-node status`.
int status_main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::fprintf(argc < 2 ? stderr : stdout,
                 "usage: dd-node status RUN_DIR|HOST:PORT [--json]\n"
                 "Prints the live view of a running cluster from its syncer's health monitor:\n"
                 "run id, learners (incarnation, live, node, step, tokens, seconds since the last\n"
                 "heartbeat), fragment versions; with a run directory also every process of the\n"
                 "nodes file. --json prints the monitor's JSON. Exit status: 0 ok, 1 syncer not\n"
                 "reachable, 2 bad arguments.\n");
    return argc < 2 ? 2 : 0;
  }
  const bool as_json = argc > 2 && std::string(argv[2]) == "--json";
  nlohmann::json nodes;
  std::string reply;
  if (int rc = ask_monitor("status", argv[1], &nodes, &reply, atoms::status_atom_v); rc != 0)
    return rc;
  auto s = nlohmann::json::parse(reply);
  if (as_json) {
    std::printf("%s\n", s.dump(2).c_str());
    return 0;
  }
  std::printf("run %s: %zu of %d learners known, %s, %llu tokens, mean step %.1f\n",
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
  if (nodes.is_object())
    for (const auto& n : nodes["nodes"])
      std::printf("process %-12s %-8s pid %-7d incarnation %d  %s\n",
                  n["name"].get<std::string>().c_str(), n["state"].get<std::string>().c_str(),
                  n["pid"].get<int>(), n["incarnation"].get<int>(),
                  n["log"].get<std::string>().c_str());
  return 0;
}

/// Entry point of `dd-node drain`.
int drain_main(int argc, char** argv) {
  if (argc < 3 || std::string(argv[1]) == "--help") {
    std::fprintf(argc < 3 && !(argc > 1 && std::string(argv[1]) == "--help") ? stderr : stdout,
                 "usage: dd-node drain learner:N RUN_DIR|HOST:PORT\n"
                 "Removes learner N gracefully: it stops at its next step, waits until its final\n"
                 "pushes are merged, and leaves (a learner process whose learners all left exits\n"
                 "0; dd-node launch does not restart it). Exit status: 0 asked, 1 syncer not\n"
                 "reachable or the learner is not live, 2 bad arguments.\n");
    return argc < 3 ? 2 : 0;
  }
  const std::string target = argv[1];
  std::vector<int32_t> ids;
  if (target.rfind("learner:", 0) != 0 || !parse_ids(target.substr(8), ids) || ids.size() != 1) {
    std::fprintf(stderr, "dd-node drain: the target must be learner:N, got '%s'\n", target.c_str());
    return 2;
  }
  nlohmann::json nodes;
  std::string reply;
  if (int rc = ask_monitor("drain", argv[2], &nodes, &reply, atoms::drain_atom_v, ids.front());
      rc != 0)
    return rc;
  std::printf("dd-node drain: %s\n", reply.c_str());
  return reply.find("not live") != std::string::npos ? 1 : 0;
}

}  // namespace dd::app
