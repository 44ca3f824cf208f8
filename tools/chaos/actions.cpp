// tools/chaos/actions.cpp — see actions.hpp.
//
// A process fault on one hit:
//
//   resolve target ──> verify pid + start time ──refused──> report, nothing signalled
//                              │ ok
//                              ├─ kill/term --for D, launcher:  hold NODE D ──> signal
//                              ├─ kill/term --for D, no launcher: signal ──> reverter: sleep D, re-exec argv
//                              ├─ pause --for D: SIGSTOP ──> reverter: sleep D, SIGCONT
//                              ├─ slow --for D: reverter: STOP/CONT duty cycle for D, then CONT
//                              └─ restart: launcher `restart NODE`, else TERM (KILL after 10 s), re-exec argv
//
// Every pending revert is recorded in the state file before its reverter starts, and removed by
// the reverter when done; `heal` applies whatever is still recorded.
#include "tools/chaos/actions.hpp"

#include <algorithm>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tools/chaos/common.hpp"
#include "tools/chaos/msg.hpp"
#include "tools/chaos/net.hpp"
#include "tools/chaos/proc.hpp"
#include "tools/chaos/state.hpp"

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

bool is_process_kind(const std::string& k) {
  return k == "kill" || k == "term" || k == "pause" || k == "resume" || k == "slow" ||
         k == "restart";
}

bool is_net_kind(const std::string& k) {
  return k == "latency" || k == "bandwidth" || k == "reset" || k == "blackhole" ||
         k == "corrupt" || k == "slice" || k == "close_after";
}

void tape_append(const chaos_env& env, json record) {
  const std::string path = env.tape_path();
  if (env.dry_run || path.empty()) return;
  const double t = wall_now();
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
  return fmt::format("{}-{}-{}-{}", kind, node, static_cast<long long>(wall_now() * 1000), getpid());
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

// Starts a node again from its recorded command line; returns the new pid.
int respawn(const chaos_env& env, const node_entry& n) {
  const int pid = spawn_detached(n.argv, n.log);
  const auto st = read_proc_stat(pid);
  update_node(env, n.name, pid, st ? st->start_time : 0, "running", true);
  return pid;
}

void block_sigterm() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigprocmask(SIG_BLOCK, &set, nullptr);
}

// Records `p`, starts the reverter running `body`, then records the reverter's identity.
void start_reverter(const chaos_env& env, pending_revert p, int keep_fd,
                    const std::function<void()>& body) {
  const state_store store(env.run_dir);
  store.add(p);
  const std::string id = p.id;
  const int rpid = spawn_detached_fn(
      [&] {
        block_sigterm();
        body();
        try {
          store.remove(id);
        } catch (...) {
        }
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
                         vp ? "SIGTERM (SIGKILL after 10s), then " : "",
                         fmt::join(n.argv, " "), n.log.empty() ? "/dev/null" : n.log));
    if (env.dry_run) return dry();
    if (vp) {
      vp->signal(SIGCONT);  // a paused process cannot act on SIGTERM
      vp->signal(SIGTERM);
      if (!wait_gone(n.pid, n.start_time, 10.0)) {
        vp->signal(SIGKILL);
        wait_gone(n.pid, n.start_time, 5.0);
      }
    }
    const int pid = respawn(env, n);
    say(env, fmt::format("  {} restarted as pid {}", n.name, pid));
    r["result"] = "ok";
    r["new_pid"] = pid;
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
      plan = fmt::format("{}, then re-exec after {} (no launcher)", name, format_duration(f.duration));
    else if (!nf.launcher)
      plan = fmt::format("{} (no launcher: it stays down; `dd-chaos restart` brings it back)", name);
    say(env, fmt::format("{}: {}", what, plan));
    if (env.dry_run) return dry();
    if (f.duration > 0 && nf.launcher) {
      const json rep =
          control_request(nf.launcher->control, fmt::format("hold {} {:g}", n.name, f.duration));
      if (!rep.value("ok", false))
        return refuse("launcher refused hold: " + rep.value("error", rep.dump()));
      pending_revert p;
      p.id = unique_id("hold", n.name);
      p.kind = "hold";
      p.node = n.name;
      p.until = wall_now() + f.duration;
      state_store(env.run_dir).add(p);
    }
    if (sig == SIGTERM) vp->signal(SIGCONT);  // a stopped process would not act on SIGTERM
    if (!vp->signal(sig)) return refuse(fmt::format("signal failed: {}", std::strerror(errno)));
    if (!nf.launcher) {
      if (sig == SIGKILL) wait_gone(n.pid, n.start_time, 2.0);
      update_node(env, n.name, 0, 0, "down", false);
      if (f.duration > 0 && !n.argv.empty()) {
        pending_revert p;
        p.id = unique_id("restart", n.name);
        p.kind = "restart";
        p.node = n.name;
        p.until = wall_now() + f.duration;
        const double d = f.duration;
        const node_entry copy = n;
        start_reverter(env, p, -1, [&env, d, copy] {
          if (sleep_or_sigterm(d)) return;  // stopped by heal, which restarts it itself
          try {
            wait_gone(copy.pid, copy.start_time, 10.0);
            respawn(env, copy);
          } catch (...) {
          }
        });
      } else if (f.duration > 0) {
        say(env, "  no argv recorded: it stays down");
      }
    }
    r["result"] = "ok";
    return r;
  }

  if (f.kind == "pause") {
    say(env, fmt::format("{}: SIGSTOP{}", what,
                         f.duration > 0 ? fmt::format(", SIGCONT after {}", format_duration(f.duration))
                                        : std::string(" (until resume or heal)")));
    if (env.dry_run) return dry();
    pending_revert p;
    p.id = unique_id("pause", n.name);
    p.kind = "pause";
    p.node = n.name;
    p.pid = n.pid;
    p.start_time = n.start_time;
    p.until = f.duration > 0 ? wall_now() + f.duration : 0;
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
    say(env, fmt::format("{}: SIGSTOP/SIGCONT duty cycle, stopped {:g}% of every {}, {}", what,
                         f.duty * 100, format_duration(f.period),
                         f.duration > 0 ? "for " + format_duration(f.duration)
                                        : std::string("until resume or heal")));
    if (env.dry_run) return dry();
    pending_revert p;
    p.id = unique_id("slow", n.name);
    p.kind = "slow";
    p.node = n.name;
    p.pid = n.pid;
    p.start_time = n.start_time;
    p.until = f.duration > 0 ? wall_now() + f.duration : 0;
    const double d = f.duration > 0 ? f.duration : 1e12, duty = f.duty, period = f.period;
    const verified_process* target = &*vp;
    start_reverter(env, p, vp->fd(), [d, duty, period, target] {
      const double end = mono_now() + d;
      while (mono_now() < end) {
        if (!target->signal(SIGSTOP)) return;  // it exited
        const bool stop_now =
            sleep_or_sigterm(std::min(duty * period, std::max(0.0, end - mono_now())));
        target->signal(SIGCONT);
        if (stop_now || sleep_or_sigterm(std::min((1 - duty) * period, std::max(0.0, end - mono_now()))))
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
    state_store(env.run_dir).update([&](std::vector<pending_revert>& e) {
      for (const auto& p : e)
        if (p.node == n.name && (p.kind == "pause" || p.kind == "slow")) stop_reverter(p);
      e.erase(std::remove_if(e.begin(), e.end(),
                             [&](const pending_revert& p) {
                               return p.node == n.name && (p.kind == "pause" || p.kind == "slow");
                             }),
              e.end());
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
    const bool target_like = item == "learners" || item == "nodes" ||
                             item.rfind("node:", 0) == 0 || item.rfind("learner:", 0) == 0 ||
                             item.rfind("owner:", 0) == 0;
    if (!target_like) {
      out.push_back(item);
      continue;
    }
    target_options o = f.picks;
    o.exact = false;
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
      const json rep = control_request(addr, line);
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

}  // namespace

json fire(chaos_env& env, const fault_spec& f) {
  json result;
  json params = f.net;
  if (f.kind == "slow") params.update({{"duty", f.duty}, {"period", f.period}});
  if (is_net_kind(f.kind)) {
    result = net_fault(env, f);
  } else if (is_process_kind(f.kind)) {
    const nodes_file& nf = need_nodes(env);
    const auto sel = resolve_targets(nf, parse_targets(f.target), f.picks);
    for (const auto& note : sel.notes) say(env, "note: " + note);
    json hits = json::array();
    bool ok = true;
    for (const auto& h : sel.hits) {
      json r = process_fault_on(env, f, h);
      if (r.value("result", "") == "refused") ok = false;
      hits.push_back(r);
    }
    result = {{"ok", ok}, {"hits", hits}};
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
  for (const auto& h : result["hits"]) targets.push_back(h.contains("node") ? h["node"] : h["link"]);
  tape_append(env, {{"kind", f.kind},
                    {"target", f.target},
                    {"targets", targets},
                    {"duration", f.duration > 0 ? json(f.duration) : json(nullptr)},
                    {"params", params},
                    {"result", result["ok"].get<bool>() ? "ok" : "refused"},
                    {"hits", result["hits"]}});
  return result;
}

json heal(chaos_env& env) {
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
    if (env.dry_run) {
      if (std::filesystem::exists(store.path())) pending = store.list();
    } else {
      // Stop every reverter first so none acts (e.g. a duty cycle's next SIGSTOP) after heal.
      store.update([&](std::vector<pending_revert>& e) {
        for (const auto& p : e) stop_reverter(p);
        pending = e;
        e.clear();
      });
    }
    for (const auto& p : pending) {
      if (p.kind == "pause" || p.kind == "slow") {
        std::string why;
        auto vp = verified_process::open(p.pid, p.start_time, &why);
        if (vp) {
          if (!env.dry_run) vp->signal(SIGCONT);
          act(fmt::format("SIGCONT node {} pid {} ({} recorded in the state file)", p.node, p.pid, p.kind));
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
      } else if (p.kind == "hold") {
        held.push_back(p.node);
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
      if (n.state == "held") held.push_back(n.name);
    }
  }
  // Message faults: every node's chaos endpoint ends its live faults (after the SIGCONTs
  // above, so a node that was paused can answer).
  msg_clear_all(env, act);
  std::sort(held.begin(), held.end());
  held.erase(std::unique(held.begin(), held.end()), held.end());
  if (env.nodes && env.nodes->launcher) {
    for (const auto& h : held) {
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
  } catch (const chaos_error&) {
  }
  if (!addr.empty()) {
    if (env.dry_run) {
      act(fmt::format("proxy {} `heal`", addr));
    } else {
      try {
        const json rep = control_request(addr, "heal");
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
