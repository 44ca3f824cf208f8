// tools/chaos/runner.cpp — see runner.hpp.
#include "tools/chaos/runner.hpp"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <fstream>

#include <fmt/format.h>
#include <lua.hpp>

#include "tools/chaos/common.hpp"
#include "tools/chaos/msg.hpp"
#include "util/child.hpp"

namespace dd::chaos {

using nlohmann::json;

namespace {
volatile std::sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

// Knobs of network and message faults (`at_step`, `at_fraction`: a message fault armed for a
// learner's step, as dd-node launch's sessions send the experiment's step-keyed events).
const char* net_knobs[] = {"ms",       "jitter", "rate", "p",     "seed",    "size",
                           "delay_us", "bytes",  "dir",  "count", "at_step", "at_fraction"};
}  // namespace

std::vector<timed_fault> from_schedule(const std::vector<scheduled_fault>& s,
                                       const fault_spec& knobs) {
  std::vector<timed_fault> out;
  for (const auto& f : s) {
    timed_fault t;
    t.at = f.at;
    t.spec = knobs;
    t.spec.kind = f.kind;
    t.spec.target = "node:" + f.target;
    t.spec.duration = f.duration;
    if (!is_net_kind(f.kind)) t.spec.net = json::object();
    out.push_back(t);
  }
  return out;
}

std::vector<timed_fault> read_tape(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw chaos_error(fmt::format("{}: cannot read the tape", path));
  std::vector<timed_fault> out;
  std::string line;
  int lineno = 0;
  double first_t = -1;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty()) continue;
    json j;
    try {
      j = json::parse(line);
    } catch (const json::parse_error& e) {
      throw chaos_error(fmt::format("{}:{}: not JSON: {}", path, lineno, e.what()));
    }
    const double t = j.value("t", 0.0);
    if (first_t < 0) first_t = t;
    const std::string kind = j.value("kind", "");
    // "revert": a reverter's report on its re-exec, not a fault.
    if (kind == "session" || kind == "revert" || kind.empty()) continue;
    if (kind != "heal" && !is_process_kind(kind) && !is_net_kind(kind) && !is_disk_kind(kind) &&
        !is_msg_kind(kind))
      throw chaos_error(fmt::format("{}:{}: unknown kind '{}'", path, lineno, kind));
    timed_fault tf;
    tf.at = j.contains("offset") ? j["offset"].get<double>() : t - first_t;
    tf.spec.kind = kind;
    if (kind != "heal") {
      // Re-fire at the processes / links that were hit, by name (pids differ in a new run).
      std::string targets;
      for (const auto& x : j.value("targets", json::array())) {
        if (!targets.empty()) targets += ",";
        const std::string name = x.get<std::string>();
        // links and disk targets (owner:N, node:NAME) are taped as given; processes by name
        targets += is_net_kind(kind) || is_disk_kind(kind) ? name : "node:" + name;
      }
      // Message faults name actors (learner:N, owner:N), stable across runs: keep the spec.
      if (targets.empty() || is_msg_kind(kind)) targets = j.value("target", "");
      tf.spec.target = targets;
      if (j.contains("duration") && j["duration"].is_number()) tf.spec.duration = j["duration"];
      const json params = j.value("params", json::object());
      tf.spec.duty = params.value("duty", 0.5);
      tf.spec.period = params.value("period", 0.2);
      tf.spec.via = params.value("via", std::string("auto"));
      tf.spec.keep = params.value("keep", int64_t{-1});
      tf.spec.count = params.value("count", 16);
      if (is_disk_kind(kind) && params.contains("seed")) tf.spec.picks.seed = params["seed"];
      for (const char* k : net_knobs)
        if (params.contains(k) && (is_net_kind(kind) || is_msg_kind(kind)))
          tf.spec.net[k] = params[k];
    }
    out.push_back(tf);
  }
  return out;
}

namespace {

/// A Lua state with only the libraries a scenario needs: base, string, table, math (no io, os,
/// package, debug: a scenario describes faults, it does not touch files or the clock).
lua_State* scenario_state() {
  lua_State* L = luaL_newstate();
  if (L == nullptr) throw chaos_error("out of memory creating a Lua state");
  const luaL_Reg libs[] = {{LUA_GNAME, luaopen_base},
                           {LUA_STRLIBNAME, luaopen_string},
                           {LUA_TABLIBNAME, luaopen_table},
                           {LUA_MATHLIBNAME, luaopen_math}};
  for (const auto& lib : libs) {
    luaL_requiref(L, lib.name, lib.func, 1);
    lua_pop(L, 1);
  }
  for (const char* unsafe : {"dofile", "loadfile", "load", "require", "collectgarbage"}) {
    lua_pushnil(L);
    lua_setglobal(L, unsafe);
  }
  return L;
}

/// Evaluates the scenario file once in a child process under a wall-clock limit, so a script
/// that never finishes (a loop, a pattern that backtracks for ever, a finalizer) is killed
/// instead of hanging dd-chaos. The script cannot read the clock or files, so one that finished
/// in the child finishes the same way in the parent. Throws chaos_error naming the file.
void check_scenario_finishes(const std::string& path, double timeout_s) {
  util::child_limits limits;
  limits.deadline = std::chrono::steady_clock::now() +
                    std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                        std::chrono::duration<double>(timeout_s));
  limits.extra_address_space = std::size_t{1} << 30;
  limits.cpu_seconds = static_cast<unsigned>(timeout_s) + 1;
  const auto r = util::run_in_child(
      [&](volatile int*) -> std::string {
        lua_State* L = scenario_state();
        const bool ok = luaL_loadfile(L, path.c_str()) == LUA_OK && lua_pcall(L, 0, 1, 0) == LUA_OK;
        lua_close(L);
        return ok ? "ok" : "error";
      },
      limits);
  using st = util::child_outcome::status;
  if (r.state == st::timed_out)
    throw chaos_error(fmt::format("{}: the scenario did not finish within {} s (--script-timeout)",
                                  path, timeout_s));
  if (r.state == st::died)
    throw chaos_error(fmt::format("{}: evaluating the scenario failed: {}", path, r.detail));
  if (r.state == st::failed)
    throw chaos_error(fmt::format("{}: cannot evaluate the scenario: {}", path, r.detail));
}

}  // namespace

std::vector<timed_fault> read_scenario(const std::string& path, double timeout_s) {
  check_scenario_finishes(path, timeout_s);
  lua_State* L = scenario_state();
  std::vector<timed_fault> out;
  auto fail = [&](const std::string& why) {
    lua_close(L);
    throw chaos_error(fmt::format("{}: {}", path, why));
  };
  if (luaL_loadfile(L, path.c_str()) != LUA_OK || lua_pcall(L, 0, 1, 0) != LUA_OK)
    fail(lua_tostring(L, -1) ? lua_tostring(L, -1) : "cannot run");
  if (!lua_istable(L, -1)) {
    lua_pop(L, 1);
    lua_getglobal(L, "scenario");
    if (!lua_istable(L, -1)) fail("must return a list of faults (or set `scenario = {...}`)");
  }
  const lua_Integer n = luaL_len(L, -1);
  for (lua_Integer i = 1; i <= n; ++i) {
    lua_geti(L, -1, i);
    const std::string where = fmt::format("entry {}", i);
    if (!lua_istable(L, -1)) fail(where + ": must be a table {at=..., kind=..., target=...}");
    auto field = [&](const char* key) {
      lua_getfield(L, -1, key);
      return lua_type(L, -1);
    };
    auto number = [&](const char* key, bool required, double dflt) {
      const int t = field(key);
      double v = dflt;
      if (t == LUA_TNUMBER)
        v = lua_tonumber(L, -1);
      else if (t == LUA_TSTRING) {
        try {
          v = parse_duration(lua_tostring(L, -1), key);
        } catch (const usage_error& e) {
          lua_pop(L, 1);
          fail(fmt::format("{}: {}", where, e.what()));
        }
      } else if (t != LUA_TNIL || required) {
        lua_pop(L, 1);
        fail(fmt::format("{}: {} must be a number of seconds", where, key));
      }
      lua_pop(L, 1);
      return v;
    };
    auto string = [&](const char* key, bool required) {
      const int t = field(key);
      std::string v;
      if (t == LUA_TSTRING)
        v = lua_tostring(L, -1);
      else if (t != LUA_TNIL || required) {
        lua_pop(L, 1);
        fail(fmt::format("{}: {} must be a string", where, key));
      }
      lua_pop(L, 1);
      return v;
    };
    timed_fault tf;
    tf.at = number("at", true, 0);
    tf.spec.kind = string("kind", true);
    if (tf.spec.kind != "heal" && !is_process_kind(tf.spec.kind) && !is_net_kind(tf.spec.kind) &&
        !is_disk_kind(tf.spec.kind) && !is_msg_kind(tf.spec.kind))
      fail(fmt::format("{}: unknown kind '{}'", where, tf.spec.kind));
    tf.spec.target = string("target", tf.spec.kind != "heal");
    tf.spec.duration = number("for_", false, 0);
    tf.spec.duty = number("duty", false, 0.5);
    tf.spec.period = number("period", false, 0.2);
    if (const std::string via = string("via", false); !via.empty()) tf.spec.via = via;
    tf.spec.keep = static_cast<int64_t>(number("keep", false, -1));
    tf.spec.count = static_cast<int>(number("count", false, 16));
    for (const char* k : net_knobs) {
      // `count` is a message fault's knob here (disk faults read it above as spec.count).
      if (std::string(k) == "count" && !is_msg_kind(tf.spec.kind)) continue;
      if (std::string(k).rfind("at_", 0) == 0 && !is_msg_kind(tf.spec.kind)) continue;
      const int t = field(k);
      if (t == LUA_TNUMBER)
        tf.spec.net[k] = lua_tonumber(L, -1);
      else if (t == LUA_TSTRING)
        tf.spec.net[k] = std::string(lua_tostring(L, -1));
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
    out.push_back(tf);
  }
  lua_close(L);
  return out;
}

int run_session(chaos_env& env, std::vector<timed_fault> faults, bool final_heal,
                const json& session_info) {
  std::stable_sort(faults.begin(), faults.end(),
                   [](const timed_fault& a, const timed_fault& b) { return a.at < b.at; });
  std::fprintf(env.out, "%s%zu faults:\n", env.dry_run ? "[dry-run] " : "", faults.size());
  for (const auto& f : faults)
    std::fprintf(env.out, "  +%-9s %-10s %-24s %s\n", format_duration(f.at).c_str(),
                 f.spec.kind.c_str(), f.spec.target.c_str(),
                 f.spec.duration > 0 ? ("for " + format_duration(f.spec.duration)).c_str() : "");
  std::fflush(env.out);
  if (env.dry_run) {
    // Nothing is fired, but every target is checked against the nodes file as it would be.
    int rc = 0;
    for (const auto& f : faults) {
      try {
        check_targets(env, f.spec);
      } catch (const std::exception& e) {
        std::fprintf(env.out, "[dry-run] +%s %s %s: %s\n", format_duration(f.at).c_str(),
                     f.spec.kind.c_str(), f.spec.target.c_str(), e.what());
        rc = 1;
      }
    }
    return rc;
  }
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  const double start_mono = mono_now();
  env.session_start = wall_now();
  json info = session_info;
  info["kind"] = "session";
  info["faults"] = faults.size();
  tape_append(env, info);
  int rc = 0;
  double last_revert = 0;
  std::vector<json> fired;  // results whose reverters may re-exec a node (await_reverts)
  for (const auto& f : faults) {
    while (!g_stop && mono_now() - start_mono < f.at)
      sleep_for(std::min(0.05, f.at - (mono_now() - start_mono)));
    if (g_stop) break;
    try {
      env.reload();
      const json r = f.spec.kind == "heal" ? heal(env) : fire(env, f.spec);
      if (!r.value("ok", false)) rc = 1;
      if (r.contains("hits")) fired.push_back(r);
    } catch (const std::exception& e) {
      std::fprintf(env.out, "+%s %s %s failed: %s\n", format_duration(f.at).c_str(),
                   f.spec.kind.c_str(), f.spec.target.c_str(), e.what());
      tape_append(env, {{"kind", f.spec.kind},
                        {"target", f.spec.target},
                        {"result", "error"},
                        {"error", e.what()}});
      rc = 1;
    }
    last_revert = std::max(last_revert, f.at + f.spec.duration);
  }
  if (!g_stop && final_heal) {
    // Let the last fault run its course, then make sure nothing stays applied.
    while (!g_stop && mono_now() - start_mono < last_revert + 0.2) sleep_for(0.05);
    // A node re-executed without a launcher that exited at once fails the session.
    for (const auto& r : fired)
      if (!g_stop && !await_reverts(env, r)) rc = 1;
  }
  if (final_heal || g_stop) {
    std::fprintf(env.out, "%s; final heal\n", g_stop ? "interrupted" : "session done");
    try {
      // A session that ran its course leaves its message faults to end by themselves (each is
      // bounded by a duration or a count inside its node, and one bounded by a count may not
      // have met its message yet); an interrupted one ends them now.
      // It releases only its own running holds: a longer hold placed by another dd-chaos stays.
      heal(env, g_stop != 0, true);
    } catch (const std::exception& e) {
      std::fprintf(env.out, "heal failed: %s\n", e.what());
      rc = 1;
    }
  }
  return g_stop ? 130 : rc;
}

}  // namespace dd::chaos
