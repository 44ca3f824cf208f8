// tools/chaos/msg.cpp — see msg.hpp.
#include "tools/chaos/msg.hpp"

#include "runtime/config/fault_kind.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>

#include <fmt/format.h>

#include "tools/chaos/common.hpp"
#include "tools/chaos/net.hpp"
#include "tools/chaos/proc.hpp"

namespace dd::chaos {

using nlohmann::json;

namespace {

bool is_broadcast(const std::string& k) {
  const auto f = config::fault_kind_from(k);
  return f && config::is_broadcast_fault(*f);
}
bool is_step(const std::string& k) {
  const auto f = config::fault_kind_from(k);
  return f && config::is_step_message_fault(*f);
}

void say(const chaos_env& env, const std::string& text) {
  std::fprintf(env.out, "%s%s\n", env.dry_run ? "[dry-run] " : "", text.c_str());
  std::fflush(env.out);
}

int parse_index(const std::string& item, const std::string& prefix) {
  const std::string n = item.substr(prefix.size());
  if (n.empty() || n.size() > 6 || !std::all_of(n.begin(), n.end(), [](char c) {
        return std::isdigit(static_cast<unsigned char>(c)) != 0;
      }))
    throw usage_error(fmt::format("target '{}': expected {}N with N >= 0", item, prefix));
  return std::stoi(n);
}

/// (node name, learner, fragment) requests a target reaches.
struct msg_hit {
  std::string node;
  int learner = -1;
  int fragment = -1;
};

std::vector<msg_hit> resolve(const nodes_file& nf, const std::string& kind,
                             const std::string& target) {
  std::vector<msg_hit> out;
  const bool bcast = is_broadcast(kind);
  auto syncer = [&]() -> const node_entry& {
    for (const auto& n : nf.nodes)
      if (n.role == "syncer") return n;
    throw chaos_error(fmt::format("{}: no syncer node (broadcast faults act there)", nf.path));
  };
  auto learner_nodes = [&] {
    std::vector<const node_entry*> v;
    for (const auto& n : nf.nodes)
      if (n.role == "learner") v.push_back(&n);
    if (v.empty()) throw chaos_error(fmt::format("{}: no learner node", nf.path));
    return v;
  };
  for (const auto& item : split(target, ',')) {
    if (item.empty()) continue;
    if (item.rfind("learner:", 0) == 0) {
      const int id = parse_index(item, "learner:");
      if (bcast) {
        out.push_back({syncer().name, id, -1});
        continue;
      }
      const node_entry* host = nullptr;
      for (const auto& n : nf.nodes)
        if (n.hosts(item)) host = &n;
      if (host == nullptr) {
        std::string known;
        for (const auto& n : nf.nodes)
          for (const auto& a : n.actors)
            if (a.rfind("learner:", 0) == 0) known += (known.empty() ? "" : ", ") + a;
        throw chaos_error(fmt::format("target {}: no node hosts it (learners: {})", item, known));
      }
      out.push_back({host->name, id, -1});
    } else if (item.rfind("owner:", 0) == 0) {
      const int frag = parse_index(item, "owner:");
      if (!syncer().hosts(item))
        throw chaos_error(fmt::format("target {}: the syncer hosts no such owner", item));
      if (bcast)
        out.push_back({syncer().name, -1, frag});
      else if (is_step(kind))
        throw usage_error(
            fmt::format("{}: acts on a learner's step; name learner:N, not {}", kind, item));
      else
        for (const auto* n : learner_nodes()) out.push_back({n->name, -1, frag});
    } else if (item.rfind("node:", 0) == 0) {
      const std::string name = item.substr(5);
      const node_entry* n = nf.find(name);
      if (n == nullptr) throw chaos_error(fmt::format("target {}: no node named '{}'", item, name));
      if (bcast != (n->role == "syncer"))
        throw usage_error(fmt::format(
            "{}: {} node '{}' does not {}", kind, n->role, name,
            bcast ? "broadcast (name the syncer)" : "push or step (name a learner node)"));
      out.push_back({name, -1, -1});
    } else if (item == "learners") {
      if (bcast)
        out.push_back({syncer().name, -1, -1});
      else
        for (const auto* n : learner_nodes()) out.push_back({n->name, -1, -1});
    } else {
      throw usage_error(
          fmt::format("target '{}': expected learner:N, owner:N, node:NAME or learners", item));
    }
  }
  if (out.empty()) throw usage_error("no target given");
  return out;
}

// Seconds since `pid` started (/proc/PID/stat field 22 against /proc/uptime); -1 if unknown.
double process_age(int pid) {
  const auto st = read_proc_stat(pid);
  double uptime = -1;
  if (FILE* f = std::fopen("/proc/uptime", "r")) {
    if (std::fscanf(f, "%lf", &uptime) != 1) uptime = -1;
    std::fclose(f);
  }
  const long hz = ::sysconf(_SC_CLK_TCK);
  if (!st || uptime < 0 || hz <= 0) return -1;
  return uptime - static_cast<double>(st->start_time) / static_cast<double>(hz);
}

std::string endpoint_of(const node_entry& n) {
  if (n.chaos_port == 0)
    throw chaos_error(fmt::format(
        "node {} has no chaos endpoint (endpoints.chaos is 0: start it with --chaos-endpoint "
        "127.0.0.1:PORT, as dd-node launch does)",
        n.name));
  return fmt::format("127.0.0.1:{}", n.chaos_port);
}

}  // namespace

bool is_msg_kind(const std::string& kind) {
  const auto f = config::fault_kind_from(kind);
  return f && config::is_live_fault(*f);
}

std::string msg_kind_from_cli(const std::string& name) {
  // `nan` and `fail` are the command line's short words for nan_step and fail_step.
  if (name == "nan") return config::to_string(config::fault_kind::nan_step);
  if (name == "fail") return config::to_string(config::fault_kind::fail_step);
  std::string k = name;
  std::replace(k.begin(), k.end(), '-', '_');
  if (is_msg_kind(k)) return k;
  throw usage_error(fmt::format(
      "msg: unknown fault '{}' (drop-push, dup-push, delay-push, reorder-push, corrupt-push, "
      "scale-push, random-push, drop-broadcast, dup-broadcast, delay-broadcast, reorder-broadcast, "
      "nan, fail)",
      name));
}

void check_msg_targets(const nodes_file& nodes, const std::string& kind,
                       const std::string& target) {
  resolve(nodes, kind, target);
}

void check_msg_spec(const fault_spec& f) {
  const std::string& kind = f.kind;
  const bool delay = kind == "delay_push" || kind == "delay_broadcast";
  const double ms = f.net.value("ms", 0.0);
  const int64_t count = f.net.contains("count") ? f.net["count"].get<int64_t>() : -1;
  if (delay && !(ms > 0)) throw usage_error(fmt::format("{}: give --ms N (> 0), the delay", kind));
  if (!delay && f.net.contains("ms"))
    throw usage_error(fmt::format("{}: --ms applies to delay faults only", kind));
  const bool scale = kind == "scale_push";
  if (scale && f.net.contains("factor")) {
    const double factor = f.net["factor"].get<double>();
    if (!(std::isfinite(factor) && factor != 0))
      throw usage_error(fmt::format("{}: --factor must be finite and not 0", kind));
  }
  if (!scale && f.net.contains("factor"))
    throw usage_error(fmt::format("{}: --factor applies to scale-push only", kind));
  if (kind != "random_push" && f.net.contains("seed"))
    throw usage_error(fmt::format("{}: --seed applies to random-push only", kind));
  if (f.net.contains("count") && count <= 0)
    throw usage_error(fmt::format("{}: --count must be >= 1", kind));
  if (!is_step(kind) && f.duration <= 0 && count < 0)
    throw usage_error(
        fmt::format("{}: give --for D or --count N (the node reverts the fault after it)", kind));
}

json msg_fault(chaos_env& env, const fault_spec& f) {
  if (!env.nodes) throw usage_error("msg: needs --run-dir DIR or --nodes FILE");
  check_msg_spec(f);
  const std::string& kind = f.kind;
  const bool delay = kind == "delay_push" || kind == "delay_broadcast";
  const double ms = f.net.value("ms", 0.0);
  const int64_t count = f.net.contains("count") ? f.net["count"].get<int64_t>() : -1;
  json hits = json::array();
  bool ok = true;
  for (const auto& h : resolve(*env.nodes, kind, f.target)) {
    // A session started with the cluster (dd-node launch) may find a node not started yet, or
    // its endpoint not up yet: it waits for it up to env.endpoint_wait_s.
    const double deadline = mono_now() + env.endpoint_wait_s;
    while (!env.dry_run && env.nodes->find(h.node)->pid == 0 && mono_now() < deadline) {
      sleep_for(0.2);
      env.reload();
    }
    const node_entry* n = env.nodes->find(h.node);
    json req = {{"op", "fault"}, {"kind", kind}, {"learner", h.learner}, {"fragment", h.fragment}};
    if (f.duration > 0) req["for_s"] = f.duration;
    if (count > 0) req["count"] = count;
    if (delay) req["delay_s"] = ms / 1000.0;
    // scale-push multiplies by 1000 unless told; random-push draws from seed 0 unless told (the
    // request, printed below and on the tape, carries the seed).
    if (kind == "scale_push") req["factor"] = f.net.value("factor", 1000.0);
    if (kind == "random_push") req["seed"] = f.net.value("seed", uint64_t{0});
    for (const char* at : {"at_step", "at_fraction"})
      if (f.net.contains(at)) req[at] = f.net[at];
    json hit = {{"node", h.node}, {"request", req}};
    std::string addr;
    try {
      addr = endpoint_of(*n);
    } catch (const chaos_error& e) {
      hit["result"] = "refused";
      hit["error"] = e.what();
      say(env, fmt::format("{} {}: {}", kind, h.node, e.what()));
      ok = false;
      hits.push_back(hit);
      continue;
    }
    hit["endpoint"] = addr;
    say(env, fmt::format("{} node {}: endpoint {} `{}`", kind, h.node, addr, req.dump()));
    if (env.dry_run) {
      hit["result"] = "dry-run";
    } else if (n->pid == 0) {
      hit["result"] = "refused";
      hit["error"] = fmt::format("node {} is down ({})", h.node, n->state);
      ok = false;
      say(env, "  refused: " + hit["error"].get<std::string>());
    } else {
      try {
        json rep;
        for (;;) {
          try {
            rep = control_request(addr, req.dump(), 5.0);
            break;
          } catch (const chaos_error& e) {
            if (mono_now() >= deadline ||
                std::string(e.what()).find(std::strerror(ECONNREFUSED)) == std::string::npos)
              throw;
            sleep_for(0.2);
          }
        }
        hit["reply"] = rep;
        if (rep.value("ok", false)) {
          hit["result"] = "ok";
          if (rep.value("armed", false))
            say(env, fmt::format("  ok: armed in node {} for learner {}'s step {}", h.node,
                                 h.learner, rep.value("at_step", 0)));
          else
            say(env, fmt::format("  ok: fault {} in node {}", rep.value("id", 0), h.node));
        } else {
          hit["result"] = "refused";
          hit["error"] = rep.value("error", rep.dump());
          ok = false;
          say(env, "  refused: " + hit["error"].get<std::string>());
        }
      } catch (const chaos_error& e) {
        hit["result"] = "error";
        hit["error"] = e.what();
        ok = false;
        say(env, fmt::format("  error: {}", e.what()));
      }
    }
    hits.push_back(hit);
  }
  return {{"ok", ok}, {"hits", hits}};
}

void msg_clear_all(chaos_env& env, const std::function<void(const std::string&, bool)>& act) {
  if (!env.nodes) return;
  for (const auto& n : env.nodes->nodes) {
    if (n.chaos_port == 0 || n.pid == 0) continue;
    const std::string addr = fmt::format("127.0.0.1:{}", n.chaos_port);
    if (env.dry_run) {
      act(fmt::format("endpoint {} of node {}: clear", addr, n.name), true);
      continue;
    }
    try {
      const json rep = control_request(addr, json{{"op", "clear"}}.dump(), 3.0);
      const bool good = rep.value("ok", false);
      if (!good || rep.value("cleared", 0) > 0)
        act(fmt::format("endpoint {} of node {}: clear: {}", addr, n.name, rep.dump()), good);
    } catch (const chaos_error& e) {
      // A node that died since the nodes file was written has no live fault left to clear.
      if (::kill(n.pid, 0) != 0 && errno == ESRCH)
        act(fmt::format("endpoint {} of node {}: the process is gone (nothing to clear)", addr,
                        n.name),
            true);
      // Nobody listens: a process restarted (by the launcher or dd-chaos) that has not opened
      // its endpoint yet. Live faults exist only inside the endpoint's process, so a process
      // without one has none: restarting, not a failure to heal.
      else if (std::string(e.what()).find(std::strerror(ECONNREFUSED)) != std::string::npos)
        act(fmt::format("endpoint {} of node {}: restarting (pid {}, started {:.1f} s ago, "
                        "incarnation {}; its endpoint is not up yet, so it has no live fault)",
                        addr, n.name, n.pid, process_age(n.pid), n.incarnation),
            true);
      else
        act(fmt::format("endpoint {} of node {}: clear failed: {}", addr, n.name, e.what()), false);
    }
  }
}

json msg_status(chaos_env& env) {
  json out = json::object();
  if (!env.nodes) return out;
  for (const auto& n : env.nodes->nodes) {
    if (n.chaos_port == 0 || n.pid == 0) continue;
    try {
      out[n.name] = control_request(fmt::format("127.0.0.1:{}", n.chaos_port),
                                    json{{"op", "status"}}.dump(), 3.0);
    } catch (const chaos_error& e) {
      out[n.name] = {{"ok", false}, {"error", e.what()}};
    }
  }
  return out;
}

}  // namespace dd::chaos
