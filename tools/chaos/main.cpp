// tools/chaos/main.cpp — dd-chaos: inject real faults into a running cluster (docs/chaos.md).
//
//   dd-chaos pause learner:1 --for 10s --run-dir runs/x
//   dd-chaos proxy --control 127.0.0.1:0 --link learner-0=127.0.0.1:0->127.0.0.1:7000
//   dd-chaos random --mtbf 30s --recovery lognormal:5s,0.5 --seed 7 --duration 5m --run-dir runs/x
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "actors/link/join_auth.hpp"
#include "tools/chaos/actions.hpp"
#include "tools/chaos/common.hpp"
#include "tools/chaos/dsl.hpp"
#include "tools/chaos/msg.hpp"
#include "tools/chaos/net.hpp"
#include "tools/chaos/proc.hpp"
#include "tools/chaos/proxy.hpp"
#include "tools/chaos/report.hpp"
#include "tools/chaos/runner.hpp"
#include "tools/chaos/schedule.hpp"
#include "util/flags.hpp"
#include "util/parse.hpp"

namespace {

using namespace dd::chaos;
using nlohmann::json;

/// Every flag of dd-chaos: its value's name ("" for a switch) and its help line.
struct flag_doc {
  const char* name;
  const char* value;
  const char* help;
};
const std::vector<flag_doc> flag_docs = {
    {"--run-dir", "DIR",
     "cluster from DIR/nodes.json; tape DIR/chaos.jsonl, state DIR/chaos-state.json"},
    {"--nodes", "FILE", "a nodes file given by hand (its folder plays the run dir)"},
    {"--dry-run", "", "print exactly what would be done; touch nothing (no signal, no tape)"},
    {"--tape", "FILE", "append the tape here instead of RUN_DIR/chaos.jsonl"},
    {"--for", "D", "duration (250ms, 10s, 2m); the fault is reverted after it"},
    {"--pick", "MODE",
     "one | minority | majority | all (default: all for named targets, one for groups)"},
    {"--seed", "S", "seed of every random choice (printed; default: drawn and printed)"},
    {"--protect", "SPEC", "never touch these (repeatable); the syncer is protected unless named"},
    {"--exact", "", "refuse an actor target whose process hosts other actors"},
    {"--duty", "F", "slow: the stopped fraction (default 0.5)"},
    {"--period", "P", "slow: the period (default 200ms)"},
    {"--via", "HOW", "slow: cgroup | signals | auto (default auto: cgroup v1 cpu where writable)"},
    {"--proxy", "ADDR", "the proxy's control socket (overrides the nodes file)"},
    {"--control", "HOST:PORT", "proxy: its control socket (default 127.0.0.1:0; loopback only)"},
    {"--link", "NAME=LHOST:LPORT->THOST:TPORT", "proxy: a link (repeatable; port 0 picks one)"},
    {"--ports-file", "F", "proxy: write {\"control\":...,\"links\":{...}} here once listening"},
    {"--mtbf", "D", "random: mean time between faults (default 30s)"},
    {"--recovery", "DIST",
     "random: time to recovery: lognormal:5s,0.5 (default), fixed:D, exponential:D, weibull:D,K"},
    {"--duration", "D", "random: how long the session runs (default 5m)"},
    {"--kinds", "LIST", "random: fault kinds to draw (default kill,pause)"},
    {"--targets", "SPEC", "random: targets to draw from (default learners)"},
    {"--max-concurrent", "N", "random: faults at once at most (default 1)"},
    {"--min-gap", "D", "random: least time between two faults (default 0)"},
    {"--no-heal", "", "leave the faults in place at the end of the session"},
    {"--ms", "N", "latency / delay in milliseconds"},
    {"--jitter", "N", "latency jitter in milliseconds"},
    {"--rate", "BYTES_PER_S", "bandwidth limit"},
    {"--p", "P", "corrupt: the probability a byte is flipped"},
    {"--size", "B", "slice: the slice size in bytes"},
    {"--delay-us", "U", "slice: the delay between slices in microseconds"},
    {"--bytes", "N", "close_after: close the link after N bytes"},
    {"--dir", "up|down|both", "which direction of the link (default both)"},
    {"--baseline", "CLEAN_RUN_DIR", "report: compare with a run without faults"},
    {"--json", "OUT", "report: where the JSON report goes (default RUN_DIR/chaos_report.json)"},
    {"--loss-tolerance", "F",
     "report: how much worse the loss may be than the baseline's (default 0.03)"},
    {"--keep", "BYTES", "disk truncate: bytes kept (default: half)"},
    {"--count", "N", "disk corrupt: bytes flipped (default 16); msg: messages faulted"},
    {"--factor", "F", "msg scale-push: what every pushed value is multiplied by (default 1000)"},
    {"--max-fill", "BYTES", "disk full: only a tmpfs of at most this size (default 1 GiB)"},
    {"--reserve", "BYTES", "disk full: bytes left free (default 1 MiB)"},
    {"--set", "K=V", "run EXPERIMENT.lua: override a key (repeatable)"},
    {"--name", "N", "run EXPERIMENT.lua: select an experiment (repeatable)"},
    {"--script-timeout", "S", "run: wall-clock limit of evaluating the file (default 10)"},
};

/// One command: its usage after "dd-chaos NAME", its entry in the usage (its lines, starting
/// "  NAME ..."), and the flags it takes beyond the common ones (--run-dir, --nodes, --dry-run,
/// --tape).
struct command_doc {
  std::string name;
  const char* usage;
  const char* entry;
  std::vector<std::string> flags;
};
/// The commands under one heading of the usage.
struct command_group {
  const char* heading;
  std::vector<command_doc> commands;
};
/// The knobs of every process fault; `slow` alone also takes its duty cycle (--duty, --period,
/// --via): the other commands refuse those with exit 2 like any flag they do not take.
const std::vector<std::string> process_knobs = {"--for", "--pick", "--seed", "--protect",
                                                "--exact"};
const std::vector<std::string> slow_knobs = {"--duty", "--period", "--via"};
const std::vector<std::string> net_knobs = {"--ms",   "--jitter",   "--rate",  "--p",
                                            "--size", "--delay-us", "--bytes", "--dir"};
std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}
const std::vector<command_group>& command_groups() {
  static const std::vector<command_group> groups = {
      {"Process faults (TARGET: learner:N, owner:N, node:NAME, learners, nodes; comma lists)",
       {{"kill", "TARGET [flags]",
         "  kill TARGET      SIGKILL; with --for D under a launcher: `hold NODE D` first (kept "
         "down D);\n"
         "                   without a launcher: re-exec its argv after D (a dd-node syncer/run "
         "with\n"
         "                   --resume) and wait for it; exit 1 if it exits within 2 s\n",
         process_knobs},
        {"term", "TARGET [flags]", "  term TARGET      SIGTERM (a graceful leave); --for as kill\n",
         process_knobs},
        {"pause", "TARGET [flags]",
         "  pause TARGET     SIGSTOP; SIGCONT after --for D (a detached reverter does it), else on "
         "resume/heal\n",
         process_knobs},
        {"resume", "TARGET [flags]",
         "  resume TARGET    SIGCONT, and stop its pending pause/slow reverters\n", process_knobs},
        {"slow", "TARGET [flags]",
         "  slow TARGET      for --for D: --duty F (stopped fraction, 0.5) --period P (200ms); "
         "through\n"
         "                   the cgroup v1 cpu controller where /sys/fs/cgroup/cpu is writable (a "
         "quota of\n"
         "                   (1-F)*P per P), else a SIGSTOP/SIGCONT duty cycle; --via "
         "cgroup|signals forces\n",
         with(process_knobs, slow_knobs)},
        {"restart", "TARGET [flags]",
         "  restart TARGET   launcher `restart NODE`; without one: SIGTERM (SIGKILL after 10s), "
         "re-exec argv\n"
         "                   (as kill --for); exit 1 if it exits within 2 s\n",
         process_knobs}}},
      {"Network faults (through the fault proxy of the nodes file, or --proxy HOST:PORT)",
       {{"net", "FAULT TARGET [flags]",
         "  net FAULT TARGET FAULT: latency --ms N [--jitter N] | bandwidth --rate BYTES_PER_S | "
         "reset\n"
         "                   | blackhole | corrupt --p P [--seed S] | slice [--size B] "
         "[--delay-us U]\n"
         "                   | close_after --bytes N;  [--dir up|down|both] --for D\n"
         "                   TARGET: learner:N / node:NAME (its link learner-N to the syncer), "
         "learners,\n"
         "                   or link names as the proxy knows them\n",
         with({"--for", "--pick", "--seed", "--protect", "--proxy"}, net_knobs)},
        {"partition",
         "TARGET [flags]",
         "  partition TARGET same as `net blackhole TARGET --dir both`\n",
         {"--for", "--pick", "--seed", "--protect", "--proxy"}},
        {"proxy",
         "--link NAME=LISTEN->TARGET... [flags]",
         "  proxy            run the fault proxy: --control HOST:PORT (127.0.0.1:0), --link\n"
         "                   NAME=LHOST:LPORT->THOST:TPORT (repeatable; port 0 picks one), "
         "--ports-file F,\n"
         "                   --seed S; prints {\"control\":...,\"links\":{...}} on one line once "
         "listening\n",
         {"--control", "--link", "--ports-file", "--seed"}}}},
      {"Message faults (through each node's chaos endpoint, nodes.json endpoints.chaos)",
       {{"msg",
         "FAULT TARGET [flags] | msg status",
         "  msg FAULT TARGET FAULT: drop-push | dup-push | delay-push --ms N | reorder-push | "
         "corrupt-push\n"
         "                   | scale-push [--factor F] | random-push [--seed S]\n"
         "                   | drop-broadcast | dup-broadcast | delay-broadcast --ms N | "
         "reorder-broadcast\n"
         "                   (each --for D and/or --count N: the node reverts it after that)\n"
         "                   | nan | fail (one step; --count N for more)\n"
         "                   TARGET: learner:N, owner:N (a fragment), node:NAME, learners; comma "
         "lists\n"
         "  msg status       every endpoint's live faults\n",
         {"--for", "--ms", "--count", "--factor", "--seed"}}}},
      {"Disk faults (the target's host)",
       {{"disk",
         "truncate|corrupt owner:N | disk full TARGET [flags]",
         "  disk truncate owner:N  cut the owner's checkpoint file to --keep BYTES (default: "
         "half)\n"
         "  disk corrupt owner:N   xor --count N (16) bytes of it at offsets drawn from --seed\n"
         "  disk full TARGET       fill the tmpfs holding the node's run directory with a "
         "ballast file\n"
         "                   (leaving --reserve BYTES, 1 MiB) for --for D, or until heal; skipped "
         "unless\n"
         "                   that directory is on a tmpfs of at most --max-fill BYTES (1 GiB)\n",
         {"--for", "--pick", "--seed", "--protect", "--keep", "--count", "--max-fill",
          "--reserve"}}}},
      {"Sessions",
       {{"random", "[flags]",
         "  random           --mtbf D (30s) --recovery DIST (lognormal:5s,0.5; also fixed:D, "
         "exponential:D,\n"
         "                   weibull:D,K) --seed S --duration D (5m) --kinds LIST (kill,pause)\n"
         "                   --targets SPEC (learners) --max-concurrent N (1) --min-gap D (0) "
         "[--no-heal]\n",
         with({"--mtbf", "--recovery", "--seed", "--duration", "--kinds", "--targets",
               "--max-concurrent", "--min-gap", "--no-heal", "--protect", "--proxy", "--duty",
               "--period"},
              net_knobs)},
        {"replay",
         "TAPE [flags]",
         "  replay TAPE      fire every fault of a tape (chaos.jsonl) at the same offset "
         "[--no-heal]\n",
         {"--no-heal", "--proxy"}},
        {"run",
         "SCENARIO.lua|EXPERIMENT.lua [flags]",
         "  run SCENARIO.lua a Lua list of {at=S, kind=K, target=T, for_=S, knobs...} "
         "[--no-heal]\n"
         "  run EXPERIMENT.lua  an experiment file: its chaos section's process, network and disk "
         "events,\n"
         "                   chaos.random.cluster_mtbf_seconds faults, and its message events "
         "through the\n"
         "                   chaos endpoints when nodes.json has \"message_faults\": \"endpoint\" "
         "(dd-node\n"
         "                   launch; step-keyed ones armed for their step) [--set k=v]... [--name "
         "N]\n"
         "                   run evaluates the file in a child process killed after "
         "--script-timeout S\n"
         "                   (10); a scenario sees only Lua's base, string, table and math "
         "libraries\n",
         {"--no-heal", "--proxy", "--set", "--name", "--script-timeout"}}}},
      {"Verdict",
       {{"report",
         "RUN_DIR [flags]",
         "  report RUN_DIR   judge a run from its events and tape: per-fault times, run figures "
         "and\n"
         "                   invariants; --baseline CLEAN_RUN_DIR, --json OUT "
         "(RUN_DIR/chaos_report.json),\n"
         "                   --loss-tolerance F (0.03); exit 1 when an invariant is invalid\n",
         {"--baseline", "--json", "--loss-tolerance"}}}},
      {"Other",
       {{"heal",
         "[flags]",
         "  heal             revert everything: stop reverters, SIGCONT every paused node, pending "
         "restarts,\n"
         "                   proxy heal, launcher release\n",
         {"--proxy"}},
        {"status",
         "[flags]",
         "  status           the nodes file, each pid checked against /proc, the proxy's links "
         "and faults\n",
         {"--proxy"}}}},
  };
  return groups;
}

const flag_doc& doc_of(const std::string& name) {
  for (const auto& d : flag_docs)
    if (name == d.name) return d;
  throw std::logic_error("dd-chaos: no doc for flag " + name);
}

/// The command named `name` and its group's heading; nullptr for a word that names none.
const command_doc* command_of(const std::string& name, const char** heading = nullptr) {
  for (const auto& g : command_groups())
    for (const auto& c : g.commands)
      if (c.name == name) {
        if (heading != nullptr) *heading = g.heading;
        return &c;
      }
  return nullptr;
}

const char* exit_status =
    "Exit status: 0 done; 1 a fault was refused or failed (e.g. a reused pid); 2 bad flags.\n";

/// `dd-chaos --help`: every command's entry under its heading, then every flag.
std::string usage() {
  std::string u =
      "dd-chaos — inject real faults into a running Decoupled DiLoCo cluster (docs/chaos.md).\n\n"
      "Usage: dd-chaos COMMAND [ARGS] [FLAGS]; `dd-chaos COMMAND --help` (or `dd-chaos help\n"
      "COMMAND`) prints that command's entry and flags.\n\n";
  for (const auto& g : command_groups()) {
    u += std::string(g.heading) + "\n";
    for (const auto& c : g.commands) u += c.entry;
  }
  u += "Flags (common to every command: --run-dir, --nodes, --dry-run, --tape)\n";
  for (const auto& d : flag_docs) {
    const std::string left = fmt::format("  {}{}{}", d.name, *d.value == '\0' ? "" : " ", d.value);
    u += left.size() + 1 > 19 ? fmt::format("{}\n{:19}{}\n", left, "", d.help)
                              : fmt::format("{:<19}{}\n", left, d.help);
  }
  return u + exit_status;
}

struct args {
  std::string command;
  std::vector<std::string> positional;
  std::map<std::string, std::vector<std::string>> flags;
  bool has(const std::string& f) const { return flags.count(f) > 0; }
  std::string get(const std::string& f, const std::string& dflt = "") const {
    const auto it = flags.find(f);
    return it == flags.end() ? dflt : it->second.back();
  }
};

/// The flag table of `command` (nullptr: every flag, for the arguments before a command),
/// writing into `a`.
dd::util::flag_table table_of(const command_doc* command, const std::string& name, args& a) {
  std::vector<std::string> flags = {"--run-dir", "--nodes", "--dry-run", "--tape"};
  if (command != nullptr)
    flags.insert(flags.end(), command->flags.begin(), command->flags.end());
  else
    for (const auto& d : flag_docs)
      if (std::find(flags.begin(), flags.end(), d.name) == flags.end()) flags.push_back(d.name);
  const char* heading = "";
  if (command != nullptr) command_of(name, &heading);
  dd::util::flag_table t(command ? "dd-chaos " + name : "dd-chaos",
                         command ? command->usage : "COMMAND [ARGS] [FLAGS]",
                         command ? std::string(heading) + "\n" + command->entry : std::string());
  for (const auto& f : flags) {
    const auto& d = doc_of(f);
    if (*d.value == '\0')
      t.action(f, d.help, [&a, f] { a.flags[f].push_back("1"); });
    else
      t.custom(f, d.value, d.help, [&a, f](const std::string& v) {
        a.flags[f].push_back(v);
        return std::string();
      });
  }
  t.positionals(&a.positional, 0, 64, "ARGS", "").epilog(exit_status);
  return t;
}

/// Parses argv: the first argument that is neither a flag nor a flag's value is the command;
/// the rest against the command's table. Returns the exit status when parsing ends the run.
std::optional<int> parse_args(int argc, char** argv, args& a) {
  std::vector<std::string> rest;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    if (a.command.empty() && s.rfind("-", 0) != 0) {
      a.command = s;
      continue;
    }
    rest.push_back(s);
    if (a.command.empty() && s.find('=') == std::string::npos)
      for (const auto& d : flag_docs)
        if (s == d.name && *d.value != '\0' && i + 1 < argc) rest.push_back(argv[++i]);
  }
  // `dd-chaos help COMMAND` is `dd-chaos COMMAND --help`; `dd-chaos help`, `dd-chaos --help`.
  if (a.command == "help") {
    a.command.clear();
    if (!rest.empty() && rest.front().rfind("-", 0) != 0) {
      a.command = rest.front();
      rest.clear();
    }
    rest.push_back("--help");
  }
  const command_doc* c = a.command.empty() ? nullptr : command_of(a.command);
  if (!a.command.empty() && c == nullptr)
    throw usage_error(fmt::format("unknown command '{}' (see dd-chaos --help)", a.command));
  auto t = table_of(c, a.command, a);
  std::string out, err;
  auto rc = t.parse(rest, out, err);
  if (rc && *rc == 0 && c == nullptr) out = usage();
  std::fputs(out.c_str(), stdout);
  std::fputs(err.c_str(), stderr);
  if (!rc && c == nullptr) {
    std::fputs(usage().c_str(), stdout);
    return 2;
  }
  return rc;
}

uint64_t parse_u64(const std::string& s, const std::string& what) {
  unsigned long long v = 0;
  if (!dd::util::parse_number(s, v))
    throw usage_error(fmt::format("{}: '{}' must be a non-negative integer", what, s));
  return v;
}

double parse_number(const std::string& s, const std::string& what) {
  double v = 0;
  if (!dd::util::parse_number(s, v))
    throw usage_error(fmt::format("{}: '{}' must be a finite number", what, s));
  return v;
}

chaos_env make_env(const args& a, bool need_nodes) {
  chaos_env env;
  env.dry_run = a.has("--dry-run");
  env.tape = a.get("--tape");
  env.proxy = a.get("--proxy");
  if (env.proxy.size()) parse_host_port(env.proxy, "--proxy");
  if (a.has("--run-dir") && a.has("--nodes"))
    throw usage_error("give --run-dir or --nodes, not both");
  std::string path;
  if (a.has("--run-dir")) path = a.get("--run-dir") + "/nodes.json";
  if (a.has("--nodes")) path = a.get("--nodes");
  if (path.empty()) {
    if (need_nodes)
      throw usage_error(fmt::format("{}: needs --run-dir DIR or --nodes FILE", a.command));
    return env;
  }
  try {
    env.nodes = read_nodes_file(path);
  } catch (const chaos_error& e) {
    // Only `dd-node launch` writes DIR/nodes.json: nodes started by hand need a file of their own.
    if (a.has("--run-dir") && ::access(path.c_str(), F_OK) != 0)
      throw chaos_error(fmt::format(
          "{}; a hand-started cluster has no nodes.json: give --nodes FILE (docs/chaos.md)",
          e.what()));
    throw;
  }
  env.run_dir = env.nodes->run_dir;
  // The run's join token, for the requests that change the run (the launcher's control socket,
  // the nodes' chaos endpoints): DD_JOIN_TOKEN, else the run directory's join_token.
  {
    const char* tok = std::getenv(dd::actors::join_token_env);
    const std::string file = env.run_dir + "/" + dd::actors::join_token_file_name;
    const bool from_env = tok != nullptr && *tok != '\0';
    if (from_env || ::access(file.c_str(), F_OK) == 0) {
      auto t = dd::actors::load_join_token(from_env ? std::string() : file, tok);
      if (!t.error.empty()) throw usage_error(t.error);
      set_operator_token(t.token);
    }
  }
  return env;
}

uint64_t seed_of(const args& a) {
  if (a.has("--seed")) return parse_u64(a.get("--seed"), "--seed");
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32 | rd()) % 1000000000ULL;
}

fault_spec make_spec(const args& a, const std::string& kind, const std::string& target) {
  fault_spec f;
  f.kind = kind;
  f.target = target;
  if (a.has("--for")) f.duration = parse_duration(a.get("--for"), "--for");
  if (a.has("--duty")) f.duty = parse_number(a.get("--duty"), "--duty");
  if (a.has("--period")) f.period = parse_duration(a.get("--period"), "--period");
  if (a.has("--pick")) {
    f.picks.pick = parse_pick(a.get("--pick"));
    f.picks.pick_given = true;
  }
  f.picks.seed = seed_of(a);
  if (a.has("--protect")) f.picks.protect = a.flags.at("--protect");
  f.picks.exact = a.has("--exact");
  static const std::map<std::string, std::string> knobs = {
      {"--ms", "ms"},     {"--jitter", "jitter"},     {"--rate", "rate"},   {"--p", "p"},
      {"--size", "size"}, {"--delay-us", "delay_us"}, {"--bytes", "bytes"}, {"--dir", "dir"}};
  for (const auto& [flag, key] : knobs)
    if (a.has(flag)) {
      if (key == "dir") {
        const auto d = a.get(flag);
        if (d != "up" && d != "down" && d != "both")
          throw usage_error(fmt::format("--dir: '{}' must be up, down or both", d));
        f.net[key] = d;
      } else {
        f.net[key] = parse_number(a.get(flag), flag);
      }
    }
  if (is_net_kind(kind) && a.has("--seed")) f.net["seed"] = f.picks.seed;
  if (a.has("--via")) f.via = a.get("--via");
  if (f.via != "auto" && f.via != "cgroup" && f.via != "signals")
    throw usage_error(fmt::format("--via: '{}' must be cgroup, signals or auto", f.via));
  if (a.has("--keep")) f.keep = static_cast<int64_t>(parse_u64(a.get("--keep"), "--keep"));
  if (a.has("--count")) {
    f.count = static_cast<int>(parse_u64(a.get("--count"), "--count"));
    if (f.count < 1) throw usage_error("--count: must be at least 1");
  }
  if (a.has("--max-fill")) f.max_fill = parse_u64(a.get("--max-fill"), "--max-fill");
  if (a.has("--reserve")) f.reserve = parse_u64(a.get("--reserve"), "--reserve");
  return f;
}

std::string one_positional(const args& a, const std::string& what) {
  if (a.positional.size() != 1)
    throw usage_error(
        fmt::format("{}: expected exactly one {} (got {})", a.command, what, a.positional.size()));
  return a.positional[0];
}

fault_proxy* g_proxy = nullptr;
void stop_proxy(int) {
  if (g_proxy) g_proxy->stop();
}

int cmd_proxy(const args& a) {
  if (!a.positional.empty()) throw usage_error("proxy: takes no positional arguments");
  proxy_config cfg;
  cfg.control = parse_host_port(a.get("--control", "127.0.0.1:0"), "--control");
  if (cfg.control.host != "127.0.0.1" && cfg.control.host != "localhost")
    throw usage_error(
        "--control: must be a loopback address (127.0.0.1:PORT); nodes do not authenticate");
  if (a.has("--link"))
    for (const auto& l : a.flags.at("--link")) cfg.links.push_back(parse_link_spec(l));
  if (cfg.links.empty()) throw usage_error("proxy: give at least one --link NAME=LISTEN->TARGET");
  if (a.has("--seed")) cfg.seed = parse_u64(a.get("--seed"), "--seed");
  if (a.has("--dry-run")) {
    for (const auto& l : cfg.links)
      std::printf("[dry-run] link %s: listen %s -> %s\n", l.name.c_str(), l.listen.str().c_str(),
                  l.target.str().c_str());
    return 0;
  }
  fault_proxy proxy(cfg);
  const std::string ports = proxy.ports().dump();
  if (a.has("--ports-file")) write_file_atomic(a.get("--ports-file"), ports + "\n");
  std::printf("%s\n", ports.c_str());
  std::fflush(stdout);
  g_proxy = &proxy;
  std::signal(SIGINT, stop_proxy);
  std::signal(SIGTERM, stop_proxy);
  std::signal(SIGPIPE, SIG_IGN);
  proxy.run();
  g_proxy = nullptr;
  return 0;
}

int cmd_status(const args& a) {
  chaos_env env = make_env(a, true);
  const nodes_file& nf = *env.nodes;
  // The launcher writes the nodes file before the syncer has chosen the run id.
  std::printf(
      "nodes file %s (run %s)\n", nf.path.c_str(),
      nf.run_id.empty() ? "id unknown yet: the syncer has not written it" : nf.run_id.c_str());
  if (nf.launcher)
    std::printf("launcher pid %d control %s\n", nf.launcher->pid, nf.launcher->control.c_str());
  for (const auto& n : nf.nodes) {
    std::string why = "down";
    const char* live = "-";
    if (n.pid) {
      auto vp = verified_process::open(n.pid, n.start_time, &why);
      if (vp) {
        const auto st = read_proc_stat(n.pid);
        why = st && (st->state == 'T' || st->state == 't') ? "stopped (paused)" : "alive";
        live = "ok";
      }
    }
    std::printf("  %-12s %-8s pid %-7d %-3s %-18s %-8s incarnation %d  [%s]\n", n.name.c_str(),
                n.role.c_str(), n.pid, live, why.c_str(), n.state.c_str(), n.incarnation,
                fmt::format("{}", fmt::join(n.actors, ",")).c_str());
  }
  std::string addr = env.proxy.empty() && nf.proxy ? nf.proxy->control : env.proxy;
  if (!addr.empty()) {
    try {
      std::printf("proxy %s: %s\n", addr.c_str(),
                  control_request(addr, "status", 5.0, /*prove=*/false).dump().c_str());
    } catch (const chaos_error& e) {
      std::printf("proxy %s: %s\n", addr.c_str(), e.what());
    }
  }
  return 0;
}

int cmd_random(const args& a) {
  if (!a.positional.empty()) throw usage_error("random: takes no positional arguments");
  schedule_config cfg;
  cfg.mtbf = parse_duration(a.get("--mtbf", "30s"), "--mtbf");
  cfg.recovery = recovery_dist::parse(a.get("--recovery", "lognormal:5s,0.5"));
  cfg.seed = seed_of(a);
  cfg.duration = parse_duration(a.get("--duration", "5m"), "--duration");
  for (const auto& k : split(a.get("--kinds", "kill,pause"), ','))
    if (!k.empty()) {
      if (!is_process_kind(k) && !is_net_kind(k))
        throw usage_error(fmt::format("--kinds: unknown fault kind '{}'", k));
      if (k == "resume" || k == "restart")
        throw usage_error(fmt::format("--kinds: '{}' is not a fault with a recovery time", k));
      cfg.kinds.push_back(k);
    }
  cfg.max_concurrent =
      static_cast<int>(parse_u64(a.get("--max-concurrent", "1"), "--max-concurrent"));
  cfg.min_gap = parse_duration(a.get("--min-gap", "0"), "--min-gap");
  fault_spec knobs = make_spec(a, "kill", "");
  for (const auto& k : cfg.kinds)
    if (is_net_kind(k)) check_net_knobs(k, knobs.net, false);
  const auto target_spec = parse_targets(a.get("--targets", "learners"));
  chaos_env env = make_env(a, true);
  env.source = "random";
  target_options topt;
  topt.pick = pick_mode::all;
  topt.pick_given = true;
  if (a.has("--protect")) topt.protect = a.flags.at("--protect");
  const auto sel = resolve_targets(*env.nodes, target_spec, topt);
  for (const auto& n : sel.notes) std::printf("note: %s\n", n.c_str());
  for (const auto& h : sel.hits) cfg.targets.push_back(h.node);
  std::printf("random: seed %llu, mtbf %s, recovery %s, duration %s, targets %s\n",
              static_cast<unsigned long long>(cfg.seed), format_duration(cfg.mtbf).c_str(),
              cfg.recovery.str().c_str(), format_duration(cfg.duration).c_str(),
              fmt::format("{}", fmt::join(cfg.targets, ",")).c_str());
  const auto schedule = make_schedule(cfg);
  json info = {{"seed", cfg.seed},         {"mtbf", cfg.mtbf},   {"recovery", cfg.recovery.str()},
               {"duration", cfg.duration}, {"kinds", cfg.kinds}, {"targets", cfg.targets}};
  return run_session(env, from_schedule(schedule, knobs), !a.has("--no-heal"), info);
}

int run(int argc, char** argv) {
  args a;
  if (auto rc = parse_args(argc, argv, a)) return *rc;
  const std::string& c = a.command;
  if (c == "proxy") return cmd_proxy(a);
  if (c == "status") return cmd_status(a);
  if (c == "random") return cmd_random(a);
  if (c == "heal") {
    if (!a.positional.empty()) throw usage_error("heal: takes no positional arguments");
    chaos_env env = make_env(a, a.get("--proxy").empty());
    return heal(env).value("ok", false) ? 0 : 1;
  }
  if (c == "replay" || c == "run") {
    double script_timeout = 10.0;
    if (a.has("--script-timeout")) {
      script_timeout = parse_number(a.get("--script-timeout"), "--script-timeout");
      if (!(script_timeout > 0 && script_timeout <= 86400))
        throw usage_error("--script-timeout: needs seconds in (0, 86400]");
    }
    const std::string file = one_positional(a, c == "replay" ? "TAPE" : "SCENARIO.lua");
    chaos_env env = make_env(a, true);
    env.source = c == "replay" ? "replay" : "scenario";
    // Started with the cluster (dd-node launch), a session may reach a node before its chaos
    // endpoint is up: message faults wait for it.
    env.endpoint_wait_s = 60;
    if (c == "replay")
      return run_session(env, read_tape(file), !a.has("--no-heal"), {{"file", file}});
    const std::vector<std::string> none;
    const auto sets = a.has("--set") ? a.flags.at("--set") : none;
    const auto names = a.has("--name") ? a.flags.at("--name") : none;
    if (sets.empty() && names.empty()) {
      std::vector<timed_fault> faults;
      std::string scenario_error;
      try {
        faults = read_scenario(file, script_timeout);
      } catch (const chaos_error& e) {
        scenario_error = e.what();
      }
      if (scenario_error.empty())
        return run_session(env, faults, !a.has("--no-heal"), {{"file", file}});
      // Not a scenario list: an experiment file whose `chaos` section is the scenario.
      dsl_session s;
      try {
        s = read_experiment_chaos(file, sets, names, *env.nodes, script_timeout);
      } catch (const chaos_error& e) {
        throw chaos_error(fmt::format("{} is neither a scenario ({}) nor an experiment file:\n{}",
                                      file, scenario_error, e.what()));
      }
      return run_session(env, s.faults, !a.has("--no-heal"), s.info);
    }
    // --set / --name: an experiment file (only the config loader knows them).
    const auto s = read_experiment_chaos(file, sets, names, *env.nodes, script_timeout);
    return run_session(env, s.faults, !a.has("--no-heal"), s.info);
  }
  if (c == "report") {
    report_options o;
    o.run_dir = one_positional(a, "RUN_DIR");
    o.baseline_dir = a.get("--baseline");
    if (a.has("--loss-tolerance")) {
      o.loss_tolerance = parse_number(a.get("--loss-tolerance"), "--loss-tolerance");
      if (!(o.loss_tolerance >= 0)) throw usage_error("--loss-tolerance: must be >= 0");
    }
    const std::string out = a.get("--json", o.run_dir + "/chaos_report.json");
    const auto r = build_report(o);
    std::fputs(format_report(r).c_str(), stdout);
    if (a.has("--dry-run")) {
      std::printf("[dry-run] would write %s\n", out.c_str());
    } else {
      write_file_atomic(out, r.dump(2) + "\n");
      std::printf("report written to %s\n", out.c_str());
    }
    return report_exit_status(r);
  }
  if (c == "disk") {
    if (a.positional.size() != 2)
      throw usage_error(
          "disk: expected FAULT TARGET: `disk truncate owner:N`, `disk corrupt "
          "owner:N`, `disk full node:NAME --for 30s`");
    const std::string kind = "disk_" + a.positional[0];
    if (!is_disk_kind(kind))
      throw usage_error(
          fmt::format("disk: unknown fault '{}' (truncate, corrupt, full)", a.positional[0]));
    // Flags first: a bad flag is a usage error (exit 2) before the nodes file is read.
    fault_spec f = make_spec(a, kind, a.positional[1]);
    if (kind != "disk_full" && f.duration > 0)
      throw usage_error(
          fmt::format("disk {}: --for does not apply (a checkpoint is not restored; "
                      "the owner's next checkpoint replaces it)",
                      a.positional[0]));
    chaos_env env = make_env(a, true);
    if (kind == "disk_corrupt")
      std::printf("seed %llu\n", static_cast<unsigned long long>(f.picks.seed));
    return fire(env, f).value("ok", false) ? 0 : 1;
  }
  if (is_process_kind(c)) {
    const std::string target = one_positional(a, "TARGET");
    fault_spec f = make_spec(a, c, target);
    if ((c == "resume" || c == "restart") && f.duration > 0)
      throw usage_error(fmt::format("{}: --for does not apply", c));
    parse_targets(target);
    chaos_env env = make_env(a, true);
    if (f.picks.pick_given || target.find("learners") != std::string::npos ||
        target.find("nodes") != std::string::npos)
      std::printf("seed %llu\n", static_cast<unsigned long long>(f.picks.seed));
    const json r = fire(env, f);
    // Without a launcher, `kill/term --for D` waits for its reverter's re-exec: a node that
    // does not come back fails the command.
    const bool back = env.dry_run || await_reverts(env, r);
    return r.value("ok", false) && back ? 0 : 1;
  }
  if (c == "msg") {
    if (a.positional.size() == 1 && a.positional[0] == "status") {
      chaos_env env = make_env(a, true);
      std::printf("%s\n", msg_status(env).dump(2).c_str());
      return 0;
    }
    if (a.positional.size() != 2)
      throw usage_error("msg: expected FAULT TARGET, e.g. `msg drop-push learner:1 --for 10s`");
    fault_spec f;
    f.kind = msg_kind_from_cli(a.positional[0]);
    f.target = a.positional[1];
    if (a.has("--for")) f.duration = parse_duration(a.get("--for"), "--for");
    if (a.has("--ms")) f.net["ms"] = parse_number(a.get("--ms"), "--ms");
    if (a.has("--count")) f.net["count"] = parse_u64(a.get("--count"), "--count");
    if (a.has("--factor")) f.net["factor"] = parse_number(a.get("--factor"), "--factor");
    if (a.has("--seed")) f.net["seed"] = parse_u64(a.get("--seed"), "--seed");
    check_msg_spec(f);
    chaos_env env = make_env(a, true);
    return fire(env, f).value("ok", false) ? 0 : 1;
  }
  if (c == "net" || c == "partition") {
    std::string kind, target;
    if (c == "partition") {
      kind = "blackhole";
      target = one_positional(a, "TARGET");
    } else {
      if (a.positional.size() != 2)
        throw usage_error(
            "net: expected FAULT TARGET, e.g. `net latency learner:0 --ms 200 --for 10s`");
      kind = a.positional[0];
      target = a.positional[1];
      if (!is_net_kind(kind))
        throw usage_error(
            fmt::format("net: unknown fault '{}' (latency, bandwidth, reset, blackhole, corrupt, "
                        "slice, close_after)",
                        kind));
    }
    fault_spec f = make_spec(a, kind, target);
    if (c == "partition" && !f.net.contains("dir")) f.net["dir"] = "both";
    check_net_knobs(kind, f.net, true);
    chaos_env env = make_env(a, a.get("--proxy").empty());
    return fire(env, f).value("ok", false) ? 0 : 1;
  }
  throw usage_error(fmt::format("unknown command '{}' (see dd-chaos --help)", c));
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const usage_error& e) {
    std::fprintf(stderr, "dd-chaos: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dd-chaos: %s\n", e.what());
    return 1;
  }
}
