// tools/chaos/actions.cpp — see actions.hpp.
//
// A process fault on one hit:
//
//   resolve target ──> verify pid + start time ──refused──> report, nothing signalled
//                              │ ok
//                              ├─ kill/term --for D, launcher:  hold NODE D ──> signal
//                              ├─ kill/term --for D, no launcher: signal ──> reverter: sleep D,
//                              re-exec argv ├─ pause --for D: SIGSTOP ──> reverter: sleep D,
//                              SIGCONT ├─ slow --for D: reverter: STOP/CONT duty cycle for D, then
//                              CONT └─ restart: launcher `restart NODE`, else TERM (KILL after 10
//                              s), re-exec argv
//
// Every pending revert is recorded in the state file before its reverter starts, and removed by
// the reverter when done; `heal` applies whatever is still recorded.
#include "tools/chaos/actions.hpp"

#include "runtime/config/fault_kind.hpp"

#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tools/chaos/common.hpp"
#include "tools/chaos/msg.hpp"
#include "tools/chaos/net.hpp"
#include "tools/chaos/proc.hpp"
#include "tools/chaos/state.hpp"
#include "tools/chaos/sysfs.hpp"
#include "util/parse.hpp"

namespace dd::chaos {

using nlohmann::json;

std::string chaos_env::tape_path() const {
  if (!tape.empty()) return tape;
  return run_dir.empty() ? std::string() : run_dir + "/chaos.jsonl";
}

void chaos_env::reload() {
  if (nodes) {
    const std::string path = nodes->path;
    nodes = read_nodes_file(path);
  }
}

namespace {

/// True when `k` names a fault (runtime/config/fault_kind.hpp) of layer `layer`.
bool in_layer(const std::string& k, config::fault_layer layer) {
  const auto f = config::fault_kind_from(k);
  return f && config::fault_layer_of(*f) == layer;
}

}  // namespace

bool is_process_kind(const std::string& k) { return in_layer(k, config::fault_layer::process); }

bool is_disk_kind(const std::string& k) { return in_layer(k, config::fault_layer::disk); }

bool is_net_kind(const std::string& k) {
  // A partition is the DSL's blackhole in both directions (dsl.cpp): dd-chaos's command is
  // `net blackhole --dir both`.
  return k != "partition" && in_layer(k, config::fault_layer::network);
}

void check_net_knobs(const std::string& kind, const json& net, bool only_own) {
  static const std::map<std::string, std::pair<std::vector<std::string>, std::string>> knobs = {
      {"latency", {{"ms", "jitter"}, "ms"}},
      {"bandwidth", {{"rate"}, "rate"}},
      {"reset", {{}, ""}},
      {"blackhole", {{}, ""}},
      {"corrupt", {{"p", "seed"}, "p"}},
      {"slice", {{"size", "delay_us"}, ""}},
      {"close_after", {{"bytes"}, "bytes"}}};
  const auto it = knobs.find(kind);
  if (it == knobs.end()) throw usage_error(fmt::format("net: unknown fault '{}'", kind));
  auto flag = [](std::string k) {
    std::replace(k.begin(), k.end(), '_', '-');
    return "--" + k;
  };
  const auto& [own, required] = it->second;
  if (!required.empty() && !net.contains(required))
    throw usage_error(fmt::format("net {} needs {}", kind, flag(required)));
  auto number = [&](const std::string& k) {
    const json& v = net.at(k);
    if (v.is_number()) return v.get<double>();
    double d = 0;
    if (v.is_string() && util::parse_number(v.get<std::string>(), d)) return d;
    throw usage_error(fmt::format("net {}: {} must be a number", kind, flag(k)));
  };
  for (const auto& [k, v] : net.items()) {
    if (k == "dir") continue;
    const bool mine = std::find(own.begin(), own.end(), k) != own.end();
    if (!mine) {
      if (only_own) throw usage_error(fmt::format("net {}: {} does not apply", kind, flag(k)));
      continue;
    }
    if (k == "seed") continue;
    const double x = number(k);
    if ((k == "ms" || k == "jitter" || k == "bytes" || k == "delay_us") && !(x >= 0))
      throw usage_error(fmt::format("net {}: {} must be >= 0", kind, flag(k)));
    if (k == "rate" && !(x > 0))
      throw usage_error(fmt::format("net {}: --rate must be > 0 bytes/s", kind));
    if (k == "p" && !(x >= 0 && x <= 1))
      throw usage_error(fmt::format("net {}: --p must be in [0, 1]", kind));
    if (k == "size" && !(x >= 1))
      throw usage_error(fmt::format("net {}: --size must be >= 1", kind));
  }
}

void tape_append(const chaos_env& env, json record) {
  const std::string path = env.tape_path();
  if (env.dry_run || path.empty()) return;
  // A fault's record carries the time its injection began (fire); other records are stamped now.
  const double t =
      record.contains("t") && record["t"].is_number() ? record["t"].get<double>() : wall_now();
  json line = {{"t", t}};
  if (env.session_start > 0) line["offset"] = t - env.session_start;
  line["source"] = env.source;
  line.update(record);
  append_line(path, line.dump());
}

namespace {

void say(const chaos_env& env, const std::string& text) {
  std::fprintf(env.out, "%s%s\n", env.dry_run ? "[dry-run] " : "", text.c_str());
  std::fflush(env.out);
}

std::string unique_id(const std::string& kind, const std::string& node) {
  return fmt::format("{}-{}-{}-{}", kind, node, static_cast<long long>(wall_now() * 1000),
                     getpid());
}

const nodes_file& need_nodes(const chaos_env& env) {
  if (!env.nodes) throw usage_error("this command needs --run-dir DIR or --nodes FILE");
  return *env.nodes;
}

// Without a launcher dd-chaos keeps the (hand-written) nodes file current after it kills or
// restarts a node. Under the state lock, so concurrent reverters do not lose each other's edits.
void update_node(const chaos_env& env, const std::string& name, int pid, uint64_t start_time,
                 const std::string& state, bool new_incarnation) {
  const nodes_file& nf = need_nodes(env);
  if (nf.launcher) return;  // the launcher owns the file
  state_store(env.run_dir).update([&](std::vector<pending_revert>&) {
    nodes_file fresh = read_nodes_file(nf.path);
    node_entry* n = fresh.find(name);
    if (!n) return;
    n->pid = pid;
    n->start_time = start_time;
    n->state = state;
    if (new_incarnation) ++n->incarnation;
    write_nodes_file(fresh.path, fresh);
  });
}

// Starts a node again from its recorded command line (reexec_argv: a syncer continues its run);
// returns the new pid.
int respawn(const chaos_env& env, const node_entry& n) {
  const int pid = spawn_detached(reexec_argv(n.argv), n.log);
  const auto st = read_proc_stat(pid);
  update_node(env, n.name, pid, st ? st->start_time : 0, "running", true);
  return pid;
}

/// How long a re-executed node is watched: one that exits within it did not come back (a
/// syncer refusing its run directory exits at once).
constexpr double k_reexec_watch_s = 2.0;

/// respawn, watched for k_reexec_watch_s: "result" "ok" with "new_pid", or "failed" with the
/// process's "exit_status" and an "error" naming it (the nodes file then says it is down).
json respawn_watched(const chaos_env& env, const node_entry& n) {
  const std::vector<std::string> argv = reexec_argv(n.argv);
  json r = {{"node", n.name}, {"argv", argv}};
  const int pid = spawn_child(argv, n.log);
  const auto st = read_proc_stat(pid);
  update_node(env, n.name, pid, st ? st->start_time : 0, "running", true);
  r["new_pid"] = pid;
  if (const auto status = exited_within(pid, k_reexec_watch_s)) {
    update_node(env, n.name, 0, 0, "down", false);
    r["result"] = "failed";
    r["exit_status"] = *status;
    r["error"] =
        fmt::format("{} re-executed as pid {} exited with status {} within {:g} s (log {})", n.name,
                    pid, *status, k_reexec_watch_s, n.log.empty() ? "/dev/null" : n.log);
  } else {
    r["result"] = "ok";
  }
  return r;
}

/// The record of a fault of `kind` (id `id`) on node n — on its process when `on_process` —
/// reverted `duration` seconds from now (0: when resumed or healed).
pending_revert revert_record(std::string id, const char* kind, const node_entry& n, bool on_process,
                             double duration) {
  pending_revert p;
  p.id = std::move(id);
  p.kind = kind;
  p.node = n.name;
  if (on_process) {
    p.pid = n.pid;
    p.start_time = n.start_time;
  }
  p.until = duration > 0 ? wall_now() + duration : 0;
  return p;
}

void block_sigterm() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigprocmask(SIG_BLOCK, &set, nullptr);
}

// Records `p`, starts the reverter running `body`, then records the reverter's identity.
// `recorded`: the caller already added `p` (it records before it applies the fault itself).
void start_reverter(const chaos_env& env, pending_revert p, int keep_fd,
                    const std::function<void()>& body, bool recorded = false) {
  const state_store store(env.run_dir);
  if (!recorded) store.add(p);
  const std::string id = p.id;
  const int rpid = spawn_detached_fn(
      [&] {
        block_sigterm();
        body();
        try {
          store.remove(id);
        } catch (...) {}
      },
      keep_fd);
  const auto st = read_proc_stat(rpid);
  store.update([&](std::vector<pending_revert>& e) {
    for (auto& x : e)
      if (x.id == id) {
        x.reverter_pid = rpid;
        x.reverter_start_time = st ? st->start_time : 0;
      }
  });
}

// Stops the reverter of `p` (after its identity check) so that it cannot act again.
void stop_reverter(const pending_revert& p) {
  if (p.reverter_pid <= 0) return;
  std::string why;
  if (auto r = verified_process::open(p.reverter_pid, p.reverter_start_time, &why)) {
    r->signal(SIGKILL);
    wait_gone(p.reverter_pid, p.reverter_start_time, 2.0);
  }
}

json process_fault_on(chaos_env& env, const fault_spec& f, const target_hit& hit) {
  const nodes_file& nf = need_nodes(env);
  const node_entry& n = *nf.find(hit.node);
  json r = {{"node", n.name}, {"pid", n.pid}};
  const std::string also =
      hit.others.empty() ? "" : fmt::format(" (also hits {})", fmt::join(hit.others, ", "));
  const std::string via = hit.named.empty() ? "" : fmt::format("{} → ", fmt::join(hit.named, ","));
  const std::string what = fmt::format("{} {}node {} pid {}{}", f.kind, via, n.name, n.pid, also);
  auto refuse = [&](const std::string& why) {
    say(env, fmt::format("{}: refused: {}", what, why));
    r["result"] = "refused";
    r["error"] = why;
    return r;
  };
  auto dry = [&] {
    r["result"] = "dry-run";
    return r;
  };

  if (f.kind == "restart") {
    if (nf.launcher) {
      say(env, fmt::format("{}: launcher {} `restart {}`", what, nf.launcher->control, n.name));
      if (env.dry_run) return dry();
      const json rep = control_request(nf.launcher->control, "restart " + n.name);
      if (!rep.value("ok", false)) return refuse("launcher: " + rep.value("error", rep.dump()));
      r["result"] = "ok";
      return r;
    }
    if (n.argv.empty()) return refuse("no argv recorded in the nodes file; cannot restart");
    std::string why;
    auto vp = verified_process::open(n.pid, n.start_time, &why);
    say(env, fmt::format("{}: {}re-exec {} (log {})", what,
                         vp ? "SIGTERM (SIGKILL after 10s), then " : "", fmt::join(n.argv, " "),
                         n.log.empty() ? "/dev/null" : n.log));
    if (env.dry_run) return dry();
    if (vp) {
      vp->signal(SIGCONT);  // a paused process cannot act on SIGTERM
      vp->signal(SIGTERM);
      if (!wait_gone(n.pid, n.start_time, 10.0)) {
        vp->signal(SIGKILL);
        wait_gone(n.pid, n.start_time, 5.0);
      }
    }
    const json back = respawn_watched(env, n);
    r["new_pid"] = back["new_pid"];
    r["result"] = back["result"];
    if (back["result"] == "failed") {
      r["exit_status"] = back["exit_status"];
      r["error"] = back["error"];
      say(env, fmt::format("  restart failed: {}", back["error"].get<std::string>()));
    } else {
      say(env, fmt::format("  {} restarted as pid {}", n.name, back["new_pid"].get<int>()));
    }
    return r;
  }

  std::string why;
  identity_check check{};
  auto vp = verified_process::open(n.pid, n.start_time, &why, &check);
  if (!vp) return refuse(why);

  if (f.kind == "kill" || f.kind == "term") {
    const int sig = f.kind == "kill" ? SIGKILL : SIGTERM;
    const char* name = f.kind == "kill" ? "SIGKILL" : "SIGTERM";
    std::string plan = name;
    if (f.duration > 0 && nf.launcher)
      plan = fmt::format("launcher `hold {} {:g}`, then {}", n.name, f.duration, name);
    else if (f.duration > 0)
      plan =
          fmt::format("{}, then re-exec after {} (no launcher)", name, format_duration(f.duration));
    else if (!nf.launcher)
      plan =
          fmt::format("{} (no launcher: it stays down; `dd-chaos restart` brings it back)", name);
    say(env, fmt::format("{}: {}", what, plan));
    if (env.dry_run) return dry();
    if (f.duration > 0 && nf.launcher) {
      const json rep =
          control_request(nf.launcher->control, fmt::format("hold {} {:g}", n.name, f.duration));
      if (!rep.value("ok", false))
        return refuse("launcher refused hold: " + rep.value("error", rep.dump()));
      const pending_revert p =
          revert_record(unique_id("hold", n.name), "hold", n, false, f.duration);
      state_store(env.run_dir).add(p);
      env.placed_holds.insert(p.id);
    }
    if (sig == SIGTERM) vp->signal(SIGCONT);  // a stopped process would not act on SIGTERM
    if (!vp->signal(sig)) return refuse(fmt::format("signal failed: {}", std::strerror(errno)));
    if (!nf.launcher) {
      if (sig == SIGKILL) wait_gone(n.pid, n.start_time, 2.0);
      update_node(env, n.name, 0, 0, "down", false);
      if (f.duration > 0 && !n.argv.empty()) {
        const pending_revert p =
            revert_record(unique_id("restart", n.name), "restart", n, false, f.duration);
        const double d = f.duration;
        const node_entry copy = n;
        const std::string kind = f.kind;
        // The reverter tapes how the re-exec went (a "revert" record with the fault's id): a
        // node that exits at once is a failed revert, which the waiting dd-chaos reports.
        start_reverter(env, p, -1, [&env, d, copy, kind, id = p.id] {
          if (sleep_or_sigterm(d)) return;  // stopped by heal, which restarts it itself
          json rec;
          try {
            wait_gone(copy.pid, copy.start_time, 10.0);
            rec = respawn_watched(env, copy);
          } catch (const std::exception& e) {
            rec = {{"node", copy.name}, {"result", "error"}, {"error", e.what()}};
          }
          rec.update({{"kind", "revert"},
                      {"of", kind},
                      {"id", id},
                      {"target", "node:" + copy.name},
                      {"targets", {copy.name}}});
          try {
            tape_append(env, rec);
          } catch (...) {}
        });
        r["revert_id"] = p.id;
        r["revert_until"] = p.until;
      } else if (f.duration > 0) {
        say(env, "  no argv recorded: it stays down");
      }
    }
    r["result"] = "ok";
    return r;
  }

  if (f.kind == "pause") {
    say(env,
        fmt::format("{}: SIGSTOP{}", what,
                    f.duration > 0 ? fmt::format(", SIGCONT after {}", format_duration(f.duration))
                                   : std::string(" (until resume or heal)")));
    if (env.dry_run) return dry();
    const pending_revert p =
        revert_record(unique_id("pause", n.name), "pause", n, true, f.duration);
    // Recorded first, then applied: a dd-chaos killed at any point leaves either nothing applied
    // or a recorded fault. With a duration the reverter applies it too, so that no instant
    // exists where the process is stopped and no reverter is alive.
    if (f.duration > 0) {
      const double d = f.duration;
      const verified_process* target = &*vp;
      start_reverter(env, p, vp->fd(), [d, target] {
        if (!target->signal(SIGSTOP)) return;
        sleep_or_sigterm(d);
        target->signal(SIGCONT);
      });
      // Return once it is stopped, so that the caller sees the fault applied.
      const double end = mono_now() + 1.0;
      for (auto st = read_proc_stat(n.pid); st && st->state != 'T' && mono_now() < end;
           st = read_proc_stat(n.pid))
        sleep_for(0.002);
    } else {
      state_store(env.run_dir).add(p);
      if (!vp->signal(SIGSTOP))
        return refuse(fmt::format("SIGSTOP failed: {}", std::strerror(errno)));
    }
    r["result"] = "ok";
    return r;
  }

  if (f.kind == "slow") {
    if (!(f.duty > 0 && f.duty < 1)) throw usage_error("--duty must be in (0, 1)");
    if (!(f.period > 0)) throw usage_error("--period must be > 0");
    if (f.via != "auto" && f.via != "cgroup" && f.via != "signals")
      throw usage_error(fmt::format("--via: '{}' must be cgroup, signals or auto", f.via));
    std::string no_cgroup;
    const std::string root = f.via == "signals" ? std::string() : cgroup_cpu_root(&no_cgroup);
    if (f.via == "cgroup" && root.empty()) return refuse(no_cgroup);
    if (!root.empty()) {
      // cfs_period_us must lie in [1 ms, 1 s]; the quota is the running share of one CPU.
      const auto period_us = static_cast<uint64_t>(std::clamp(f.period, 0.001, 1.0) * 1e6);
      const auto quota_us =
          std::max<uint64_t>(1000, static_cast<uint64_t>((1 - f.duty) * period_us));
      std::string origin;
      try {
        origin = cgroup_cpu_of(n.pid, root);
      } catch (const chaos_error& e) {
        return refuse(e.what());
      }
      const std::string id = unique_id("slow_cgroup", n.name);
      const std::string dir = fmt::format("{}/dd-chaos/{}", root, id);
      say(env,
          fmt::format("{}: cgroup v1 cpu {}: cfs_quota_us {} per cfs_period_us {} ({:g}% of one "
                      "CPU), {}; then back to {}",
                      what, dir, quota_us, period_us, 100.0 * quota_us / period_us,
                      f.duration > 0 ? "for " + format_duration(f.duration)
                                     : std::string("until resume or heal"),
                      origin));
      if (env.dry_run) return dry();
      pending_revert p = revert_record(id, "slow_cgroup", n, true, f.duration);
      p.path = dir;
      p.origin = origin;
      // Recorded first (heal can undo a half-made group), then the group, then the move.
      state_store(env.run_dir).add(p);
      try {
        cgroup_create(dir, period_us, quota_us);
        if (!vp->alive()) throw chaos_error(fmt::format("pid {} exited", n.pid));
        cgroup_move(n.pid, dir);
      } catch (const chaos_error& e) {
        cgroup_release(dir, origin);
        state_store(env.run_dir).remove(id);
        return refuse(e.what());
      }
      if (f.duration > 0) {
        const double d = f.duration;
        start_reverter(
            env, p, vp->fd(),
            [d, dir, origin] {
              if (sleep_or_sigterm(d)) return;  // heal or resume took over
              cgroup_release(dir, origin);
            },
            true);
      }
      r["result"] = "ok";
      r["cgroup"] = dir;
      return r;
    }
    if (f.via == "auto")
      say(env, fmt::format("note: {}; slow uses the SIGSTOP/SIGCONT duty cycle", no_cgroup));
    say(env, fmt::format("{}: SIGSTOP/SIGCONT duty cycle, stopped {:g}% of every {}, {}", what,
                         f.duty * 100, format_duration(f.period),
                         f.duration > 0 ? "for " + format_duration(f.duration)
                                        : std::string("until resume or heal")));
    if (env.dry_run) return dry();
    const pending_revert p = revert_record(unique_id("slow", n.name), "slow", n, true, f.duration);
    const double d = f.duration > 0 ? f.duration : 1e12, duty = f.duty, period = f.period;
    const verified_process* target = &*vp;
    start_reverter(env, p, vp->fd(), [d, duty, period, target] {
      const double end = mono_now() + d;
      while (mono_now() < end) {
        if (!target->signal(SIGSTOP)) return;  // it exited
        const bool stop_now =
            sleep_or_sigterm(std::min(duty * period, std::max(0.0, end - mono_now())));
        target->signal(SIGCONT);
        if (stop_now ||
            sleep_or_sigterm(std::min((1 - duty) * period, std::max(0.0, end - mono_now()))))
          return;
      }
      target->signal(SIGCONT);
    });
    r["result"] = "ok";
    return r;
  }

  if (f.kind == "resume") {
    say(env, fmt::format("{}: stop its reverters, SIGCONT", what));
    if (env.dry_run) return dry();
    auto mine = [&](const pending_revert& p) {
      return p.node == n.name && (p.kind == "pause" || p.kind == "slow" || p.kind == "slow_cgroup");
    };
    state_store(env.run_dir).update([&](std::vector<pending_revert>& e) {
      for (const auto& p : e)
        if (mine(p)) {
          stop_reverter(p);
          if (p.kind == "slow_cgroup") {
            const std::string err = cgroup_release(p.path, p.origin);
            if (!err.empty()) say(env, "  " + err);
          }
        }
      e.erase(std::remove_if(e.begin(), e.end(), mine), e.end());
    });
    vp->signal(SIGCONT);
    r["result"] = "ok";
    return r;
  }
  throw usage_error(fmt::format("unknown process fault '{}'", f.kind));
}

std::string proxy_address(const chaos_env& env) {
  if (!env.proxy.empty()) return env.proxy;
  if (env.nodes && env.nodes->proxy) return env.nodes->proxy->control;
  throw chaos_error(
      fmt::format("no fault proxy: {} has no \"proxy\" (start the cluster with `dd-node launch "
                  "--via-proxy`, or give --proxy HOST:PORT)",
                  env.nodes ? env.nodes->path : std::string("no nodes file")));
}

// Link names for a network target: learner:N / node:NAME map to the hosting node's name (the link
// of learner process learner-N to the syncer is named learner-N); anything else is a link name.
std::vector<std::string> links_of(const chaos_env& env, const fault_spec& f) {
  std::vector<std::string> out;
  for (const auto& item : split(f.target, ',')) {
    const bool target_like = item == "learners" || item == "nodes" || item.rfind("node:", 0) == 0 ||
                             item.rfind("learner:", 0) == 0 || item.rfind("owner:", 0) == 0;
    if (!target_like) {
      out.push_back(item);
      continue;
    }
    target_options o = f.picks;
    o.exact = false;
    // A group names every link of its kind here ("learners" = every learner link); --pick
    // still narrows it. (Process faults on a group pick one by default.)
    if (!o.pick_given) {
      o.pick = pick_mode::all;
      o.pick_given = true;
    }
    const auto sel = resolve_targets(need_nodes(env), parse_targets(item), o);
    for (const auto& h : sel.hits) {
      if (need_nodes(env).find(h.node)->role == "syncer")
        throw chaos_error(fmt::format(
            "target {}: the syncer has no link of its own; name the learner links (learner-N)",
            item));
      out.push_back(h.node);
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

json net_fault(chaos_env& env, const fault_spec& f) {
  check_net_knobs(f.kind, f.net, false);
  const std::string addr = proxy_address(env);
  json hits = json::array();
  bool ok = true;
  for (const auto& link : links_of(env, f)) {
    std::string line = fmt::format("{} {}", f.kind, link);
    for (const auto& [k, v] : f.net.items())
      line += fmt::format(" {}={}", k, v.is_string() ? v.get<std::string>() : v.dump());
    if (f.duration > 0) line += fmt::format(" for={:g}", f.duration);
    say(env, fmt::format("{} link {}: proxy {} `{}`", f.kind, link, addr, line));
    json h = {{"link", link}};
    if (env.dry_run) {
      h["result"] = "dry-run";
    } else {
      const json rep = control_request(addr, line, 5.0, /*prove=*/false);
      if (rep.value("ok", false)) {
        h["result"] = "ok";
      } else {
        ok = false;
        h["result"] = "refused";
        h["error"] = rep.value("error", rep.dump());
        say(env, fmt::format("  refused: {}", h["error"].get<std::string>()));
      }
    }
    hits.push_back(h);
  }
  return {{"ok", ok}, {"hits", hits}};
}

// Disk faults: an owner's checkpoint file truncated or with bytes flipped (no revert: the
// owner's next checkpoint replaces the file), or the tmpfs of a node's run directory filled.
json disk_fault(chaos_env& env, const fault_spec& f) {
  const nodes_file& nf = need_nodes(env);
  json hits = json::array();
  bool ok = true;
  auto refuse = [&](json h, const std::string& what, const std::string& why) {
    say(env, fmt::format("{}: refused: {}", what, why));
    h["result"] = "refused";
    h["error"] = why;
    hits.push_back(h);
    ok = false;
  };
  if (f.kind == "disk_truncate" || f.kind == "disk_corrupt") {
    for (const auto& item : split(f.target, ',')) {
      int frag = -1;
      try {
        size_t used = 0;
        if (item.rfind("owner:", 0) == 0) frag = std::stoi(item.substr(6), &used);
        if (used == 0 || used != item.size() - 6 || frag < 0) frag = -1;
      } catch (const std::exception&) {
        frag = -1;
      }
      if (frag < 0)
        throw usage_error(
            fmt::format("{}: target '{}' must be owner:N (a fragment owner's checkpoint)",
                        f.kind == "disk_truncate" ? "disk truncate" : "disk corrupt", item));
      const std::string path = owner_checkpoint_path(nf, frag);
      const std::string what = fmt::format("{} {} ({})", f.kind, item, path);
      json h = {{"target", item}, {"file", path}};
      std::error_code ec;
      if (!std::filesystem::is_regular_file(path, ec)) {
        refuse(h, what,
               "no checkpoint file yet (checkpoint.every_versions = 0, or no merge so far)");
        continue;
      }
      const auto size = static_cast<uint64_t>(std::filesystem::file_size(path, ec));
      if (f.kind == "disk_truncate") {
        const uint64_t keep =
            f.keep >= 0 ? std::min<uint64_t>(static_cast<uint64_t>(f.keep), size) : size / 2;
        say(env, fmt::format("{}: truncate {} → {} bytes (in place; the owner's next checkpoint "
                             "replaces it)",
                             what, size, keep));
        h["bytes_before"] = size;
        h["bytes_after"] = keep;
        if (!env.dry_run) truncate_file(path, keep);
      } else {
        say(env, fmt::format("{}: xor {} bytes of {} at seeded offsets (seed {})", what, f.count,
                             size, f.picks.seed));
        if (!env.dry_run) h["offsets"] = corrupt_file(path, f.count, f.picks.seed);
      }
      h["result"] = env.dry_run ? "dry-run" : "ok";
      hits.push_back(h);
    }
    return {{"ok", ok}, {"hits", hits}};
  }
  // disk_full: the node's run directory must be on a tmpfs the tool may fill.
  const auto sel = resolve_targets(nf, parse_targets(f.target), f.picks);
  for (const auto& note : sel.notes) say(env, "note: " + note);
  for (const auto& hit : sel.hits) {
    const node_entry& n = *nf.find(hit.node);
    const std::string dir = node_run_dir(nf, n);
    const std::string what = fmt::format("disk_full node {} ({})", n.name, dir);
    json h = {{"target", "node:" + n.name}, {"dir", dir}};
    fs_info fi;
    try {
      fi = filesystem_of(dir);
    } catch (const chaos_error& e) {
      refuse(h, what, e.what());
      continue;
    }
    if (!fi.tmpfs) {
      refuse(
          h, what,
          fmt::format("skipped: {} is on {}, not a tmpfs; dd-chaos fills only a tmpfs (mount one "
                      "for the run directory before the run, e.g. `mount -t tmpfs -o size=256m "
                      "tmpfs DIR`; needs root)",
                      dir, fi.type));
      continue;
    }
    if (fi.size > f.max_fill) {
      refuse(h, what,
             fmt::format("skipped: the tmpfs holding {} has {} bytes, more than --max-fill {} "
                         "(a tmpfs is memory: filling it would take that much RAM)",
                         dir, fi.size, f.max_fill));
      continue;
    }
    const std::string id = unique_id("disk_full", n.name);
    const std::string ballast = dir + "/.dd-chaos-ballast-" + id;
    say(env, fmt::format("{}: fill the tmpfs ({} of {} bytes free) with {}, leaving {} bytes; {}",
                         what, fi.free, fi.size, ballast, f.reserve,
                         f.duration > 0 ? "removed after " + format_duration(f.duration)
                                        : std::string("removed by heal")));
    if (env.dry_run) {
      h["result"] = "dry-run";
      hits.push_back(h);
      continue;
    }
    pending_revert p = revert_record(id, "disk_full", n, false, f.duration);
    p.path = ballast;
    state_store(env.run_dir).add(p);  // recorded first: heal removes a half-written ballast too
    uint64_t written = 0;
    try {
      written = fill_with_ballast(ballast);
      if (written > f.reserve &&
          ::truncate(ballast.c_str(), static_cast<off_t>(written - f.reserve)) == 0)
        written -= f.reserve;
    } catch (const chaos_error& e) {
      ::unlink(ballast.c_str());
      state_store(env.run_dir).remove(id);
      refuse(h, what, e.what());
      continue;
    }
    if (f.duration > 0) {
      const double d = f.duration;
      // The nodes write to the same file system and may have used up the reserve already: on
      // a failed write of our own state, give 1 MiB of the ballast back and try again.
      for (int attempt = 0;; ++attempt) {
        try {
          start_reverter(
              env, p, -1,
              [d, ballast] {
                if (sleep_or_sigterm(d)) return;
                ::unlink(ballast.c_str());
              },
              true);
          break;
        } catch (const chaos_error& e) {
          const uint64_t back = uint64_t{1} << 20;
          if (attempt >= 8 || written <= back ||
              ::truncate(ballast.c_str(), static_cast<off_t>(written - back)) != 0)
            throw;
          written -= back;
          say(env, fmt::format("  {}: gave 1 MiB of the ballast back and tried again", e.what()));
        }
      }
    }
    h["result"] = "ok";
    h["ballast"] = ballast;
    h["bytes"] = written;
    say(env, fmt::format("  {} bytes of ballast; {} bytes free", written, filesystem_of(dir).free));
    hits.push_back(h);
  }
  return {{"ok", ok}, {"hits", hits}};
}

}  // namespace

void check_targets(const chaos_env& env, const fault_spec& f) {
  if (f.kind == "heal") return;
  if (is_net_kind(f.kind)) {
    if (env.nodes) links_of(env, f);
    return;
  }
  const nodes_file& nf = need_nodes(env);
  if (is_msg_kind(f.kind)) return check_msg_targets(nf, f.kind, f.target);
  target_options o = f.picks;
  o.exact = false;
  resolve_targets(nf, parse_targets(f.target), o);
}

json fire(chaos_env& env, const fault_spec& f) {
  // The tape's time is when the injection began: a `kill --for` holds the node before the
  // signal, so its restart comes at least the hold after this (stamped after every hit, a 1 s hold
  // under load could show as a restart 0.85 s after the kill).
  const double began = wall_now();
  json result;
  json params = f.net;
  if (f.kind == "slow") params.update({{"duty", f.duty}, {"period", f.period}});
  if (f.kind == "slow") params["via"] = f.via;
  if (f.kind == "disk_truncate" && f.keep >= 0) params["keep"] = f.keep;
  if (f.kind == "disk_corrupt") params.update({{"count", f.count}, {"seed", f.picks.seed}});
  if (is_net_kind(f.kind)) {
    result = net_fault(env, f);
  } else if (is_disk_kind(f.kind)) {
    result = disk_fault(env, f);
  } else if (is_process_kind(f.kind)) {
    const nodes_file& nf = need_nodes(env);
    const auto sel = resolve_targets(nf, parse_targets(f.target), f.picks);
    for (const auto& note : sel.notes) say(env, "note: " + note);
    json hits = json::array();
    bool ok = true;
    bool failed = false;
    for (const auto& h : sel.hits) {
      json r = process_fault_on(env, f, h);
      if (r.value("result", "") == "refused") ok = false;
      if (r.value("result", "") == "failed") failed = true;
      hits.push_back(r);
    }
    result = {{"ok", ok && !failed}, {"hits", hits}};
    if (ok && failed) result["failed"] = true;
    const bool group = f.target.find("learners") != std::string::npos ||
                       f.target.find("nodes") != std::string::npos;
    if (f.picks.pick_given) params["pick"] = to_string(f.picks.pick);
    if (f.picks.pick_given || group) params["seed"] = f.picks.seed;
  } else if (is_msg_kind(f.kind)) {
    result = msg_fault(env, f);
  } else {
    throw usage_error(fmt::format("unknown fault kind '{}'", f.kind));
  }
  json targets = json::array();
  for (const auto& h : result["hits"])
    targets.push_back(h.contains("target") ? h["target"]
                      : h.contains("node") ? h["node"]
                                           : h["link"]);
  tape_append(env, {{"t", began},
                    {"kind", f.kind},
                    {"target", f.target},
                    {"targets", targets},
                    {"duration", f.duration > 0 ? json(f.duration) : json(nullptr)},
                    {"params", params},
                    {"result", result["ok"].get<bool>()        ? "ok"
                               : result.value("failed", false) ? "failed"
                                                               : "refused"},
                    {"hits", result["hits"]}});
  return result;
}

bool await_reverts(chaos_env& env, const json& result) {
  bool ok = true;
  for (const auto& h : result.value("hits", json::array())) {
    if (!h.contains("revert_id")) continue;
    const std::string id = h["revert_id"];
    const double until = h.value("revert_until", 0.0);
    // The reverter removes its state entry when done: after D, the wait for the old process to
    // be gone (10 s at most) and the watch of the new one.
    const double give_up = std::max(until, wall_now()) + 10.0 + k_reexec_watch_s + 5.0;
    const state_store store(env.run_dir);
    auto pending = [&] {
      for (const auto& p : store.list())
        if (p.id == id) return true;
      return false;
    };
    while (pending() && wall_now() < give_up) sleep_for(0.05);
    json rec;
    const std::string tape = env.tape_path();
    if (!tape.empty() && std::filesystem::exists(tape))
      for (const auto& line : split(read_file(tape), '\n')) {
        if (line.find(id) == std::string::npos) continue;
        try {
          const json j = json::parse(line);
          if (j.value("kind", "") == "revert" && j.value("id", "") == id) rec = j;
        } catch (const std::exception&) {}
      }
    const std::string node = h.value("node", "?");
    if (rec.is_null()) {
      if (pending()) {
        say(env,
            fmt::format("{}: its re-exec did not report within {:.0f} s", node, give_up - until));
        ok = false;
      }  // else healed before D: heal restarted it
      continue;
    }
    if (rec.value("result", "") == "ok") {
      say(env, fmt::format("{}: re-executed as pid {} ({})", node, rec.value("new_pid", 0),
                           fmt::join(rec.value("argv", std::vector<std::string>{}), " ")));
    } else {
      say(env, fmt::format("{}: re-exec failed: {}", node, rec.value("error", rec.dump())));
      ok = false;
    }
  }
  return ok;
}

json heal(chaos_env& env, bool clear_messages, bool own_holds) {
  json actions = json::array();
  bool ok = true;
  auto act = [&](const std::string& text, bool good = true) {
    say(env, text);
    actions.push_back(text);
    if (!good) ok = false;
  };
  std::vector<std::string> held;
  if (!env.run_dir.empty()) {
    const state_store store(env.run_dir);
    std::vector<pending_revert> pending;
    // Ballast first: the state file itself may live on the filled file system.
    if (!env.dry_run && std::filesystem::exists(store.path()))
      for (const auto& p : store.list())
        if (p.kind == "disk_full") ::unlink(p.path.c_str());
    if (env.dry_run) {
      if (std::filesystem::exists(store.path())) pending = store.list();
    } else {
      // Stop every reverter first so none acts (e.g. a duty cycle's next SIGSTOP) after heal.
      store.update([&](std::vector<pending_revert>& e) {
        std::vector<pending_revert> kept;  // holds another invocation placed (own_holds)
        for (const auto& p : e) {
          if (own_holds && p.kind == "hold" && env.placed_holds.count(p.id) == 0) {
            kept.push_back(p);
            continue;
          }
          stop_reverter(p);
          pending.push_back(p);
        }
        e = kept;
      });
      for (const auto& p : store.list())
        if (p.kind == "hold")
          act(fmt::format("node {}: held by another dd-chaos ({:.1f} s left): left alone", p.node,
                          std::max(0.0, p.until - wall_now())));
    }
    for (const auto& p : pending) {
      if (p.kind == "pause" || p.kind == "slow") {
        std::string why;
        auto vp = verified_process::open(p.pid, p.start_time, &why);
        if (vp) {
          if (!env.dry_run) vp->signal(SIGCONT);
          act(fmt::format("SIGCONT node {} pid {} ({} recorded in the state file)", p.node, p.pid,
                          p.kind));
        } else {
          act(fmt::format("skip node {} pid {}: {}", p.node, p.pid, why));
        }
      } else if (p.kind == "restart" && env.nodes) {
        env.reload();
        const node_entry* n = env.nodes->find(p.node);
        std::string why;
        if (n && verified_process::open(n->pid, n->start_time, &why)) {
          act(fmt::format("node {} is already running (pid {})", p.node, n->pid));
        } else if (n) {
          if (env.dry_run) {
            act(fmt::format("re-exec node {} now (a restart was pending)", p.node));
          } else {
            try {
              const int pid = respawn(env, *n);
              act(fmt::format("re-exec node {} now (a restart was pending): pid {}", p.node, pid));
            } catch (const chaos_error& e) {
              act(fmt::format("re-exec node {} failed: {}", p.node, e.what()), false);
            }
          }
        }
      } else if (p.kind == "hold" && own_holds && p.until <= wall_now()) {
        // Our hold ran its course: the launcher restarts the node (or did) by itself.
        act(
            fmt::format("node {}: this session's hold ended {:.1f} s ago; the launcher restarts "
                        "it by itself (nothing to release)",
                        p.node, wall_now() - p.until));
      } else if (p.kind == "hold") {
        held.push_back(p.node);
      } else if (p.kind == "slow_cgroup") {
        const std::string err = env.dry_run ? std::string() : cgroup_release(p.path, p.origin);
        act(err.empty() ? fmt::format("node {}: back to cgroup {}, {} removed (slow)", p.node,
                                      p.origin, p.path)
                        : err,
            err.empty());
      } else if (p.kind == "disk_full") {
        act(fmt::format("node {}: ballast {} removed (disk_full)", p.node, p.path));
      }
    }
  }
  if (env.nodes) {
    env.reload();
    for (const auto& n : env.nodes->nodes) {
      if (n.pid == 0) continue;
      std::string why;
      identity_check c{};
      auto vp = verified_process::open(n.pid, n.start_time, &why, &c);
      if (vp) {
        const auto st = read_proc_stat(n.pid);
        if (!env.dry_run) vp->signal(SIGCONT);
        if (st && (st->state == 'T' || st->state == 't'))
          act(fmt::format("SIGCONT node {} pid {} (was stopped)", n.name, n.pid));
      } else if (c == identity_check::reused) {
        act(fmt::format("skip node {}: {}", n.name, why));
      }
      if (n.state == "held" && !own_holds) held.push_back(n.name);
    }
  }
  // Message faults: every node's chaos endpoint ends its live faults (after the SIGCONTs
  // above, so a node that was paused can answer).
  if (clear_messages) msg_clear_all(env, act);
  std::sort(held.begin(), held.end());
  held.erase(std::unique(held.begin(), held.end()), held.end());
  if (env.nodes && env.nodes->launcher) {
    // A launcher that has exited holds nothing: its holds ended with it and its control socket is
    // gone, so heal does not ask it.
    const int lpid = env.nodes->launcher->pid;
    const bool launcher_gone = lpid > 0 && ::kill(lpid, 0) != 0 && errno == ESRCH;
    for (const auto& h : held) {
      if (launcher_gone) {
        act(
            fmt::format("node {}: the launcher (pid {}) has exited, and its hold with it "
                        "(nothing to release)",
                        h, lpid));
        continue;
      }
      if (env.dry_run) {
        act(fmt::format("launcher {} `release {}`", env.nodes->launcher->control, h));
        continue;
      }
      try {
        const json rep = control_request(env.nodes->launcher->control, "release " + h);
        act(fmt::format("launcher `release {}`: {}", h, rep.dump()), rep.value("ok", false));
      } catch (const chaos_error& e) {
        act(fmt::format("launcher `release {}` failed: {}", h, e.what()), false);
      }
    }
  }
  std::string addr;
  try {
    addr = proxy_address(env);
  } catch (const chaos_error&) {}
  if (!addr.empty()) {
    if (env.dry_run) {
      act(fmt::format("proxy {} `heal`", addr));
    } else {
      try {
        const json rep = control_request(addr, "heal", 5.0, /*prove=*/false);
        act(fmt::format("proxy {} `heal`: {}", addr, rep.dump()), rep.value("ok", false));
      } catch (const chaos_error& e) {
        act(fmt::format("proxy `heal` failed: {}", e.what()), false);
      }
    }
  }
  if (actions.empty()) act("nothing to heal");
  tape_append(env, {{"kind", "heal"}, {"result", ok ? "ok" : "partial"}, {"actions", actions}});
  return {{"ok", ok}, {"actions", actions}};
}

}  // namespace dd::chaos
