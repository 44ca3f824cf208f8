// tools/chaos/actions.hpp — firing one fault (process or network) against a cluster found in a
// nodes file, healing everything, and the tape. Every signal goes through verified_process (pid
// + start time); every revert is owned by a detached reverter and recorded in the state file.
// Called from dd-chaos's single thread (reverters are forked).
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "tools/chaos/nodes_file.hpp"
#include "tools/chaos/targets.hpp"

namespace dd::chaos {

/// Where and how a command acts.
struct chaos_env {
  std::optional<nodes_file> nodes;  ///< absent only for `net` with --proxy and link names
  std::string run_dir;              ///< tape and state file folder ("" = none: no tape)
  std::string tape;                 ///< the tape path ("" = run_dir/chaos.jsonl)
  std::string proxy;                ///< --proxy override of nodes.proxy.control
  bool dry_run = false;
  std::string source = "cli";  ///< tape field: cli, random, replay, scenario
  double session_start = 0;    ///< wall seconds; tape offsets are from here (0 = none)
  /// Message faults: how long to wait for a node that is down or whose chaos endpoint is not
  /// listening yet (a session started with the cluster); 0 = refuse at once.
  double endpoint_wait_s = 0;
  std::FILE* out = stdout;
  /// The state-file ids of the launcher holds this process placed (`kill --for D` under a
  /// launcher: fire adds them). A session's final heal releases only these (heal's own_holds).
  std::set<std::string> placed_holds;

  std::string tape_path() const;
  /// Re-reads the nodes file (launchers rewrite it as nodes restart).
  void reload();
};

/// One fault to fire.
struct fault_spec {
  std::string kind;     ///< kill term pause resume slow restart | latency bandwidth reset
                        ///< blackhole corrupt slice close_after | disk_truncate disk_corrupt
                        ///< disk_full
  std::string target;   ///< as given: "learner:2", "node:syncer,learner:1", "learners", a link
  double duration = 0;  ///< --for, seconds; 0 = until healed (or none)
  double duty = 0.5;    ///< slow: fraction of each period the process is stopped
  double period = 0.2;  ///< slow: seconds
  nlohmann::json net = nlohmann::json::object();  ///< network knobs: ms jitter rate p seed size
                                                  ///< delay_us bytes dir
  std::string via = "auto";  ///< slow: "cgroup" (v1 cpu quota), "signals" (STOP/CONT duty cycle),
                             ///< "auto" (cgroup where /sys/fs/cgroup/cpu is writable)
  int64_t keep = -1;         ///< disk_truncate: bytes kept (< 0: half the file)
  int count = 16;            ///< disk_corrupt: bytes flipped
  uint64_t max_fill = uint64_t{1} << 30;  ///< disk_full: refuse a tmpfs larger than this (RAM)
  uint64_t reserve = 1024 * 1024;  ///< disk_full: bytes left free for dd-chaos's own tape/state
  target_options picks;
};

bool is_process_kind(const std::string& kind);
bool is_net_kind(const std::string& kind);
/// disk_truncate, disk_corrupt, disk_full.
bool is_disk_kind(const std::string& kind);

/// Checks the knobs of network fault `kind` (latency, bandwidth, ...) before anything is
/// contacted: the required one is given (latency: ms; bandwidth: rate; corrupt: p; close_after:
/// bytes) and in range (ms, jitter >= 0; rate > 0; p in [0, 1]; bytes >= 0; size >= 1). With
/// `only_own`, a knob of another kind (`net reset --ms 5`) is refused too. Throws usage_error
/// naming the command and the flag, e.g. "net latency needs --ms".
void check_net_knobs(const std::string& kind, const nlohmann::json& net, bool only_own);

/// Resolves the targets of `f` against the nodes file as fire() would, touching nothing: a
/// target no node hosts (`learner:99`), an unknown node or link owner, an owner that does not
/// exist. Used by the sessions' --dry-run, where the faults are only listed. Throws
/// chaos_error / usage_error with fire()'s messages. `heal` has no target.
void check_targets(const chaos_env& env, const fault_spec& f);

/// Fires `f`; prints what it does (or, with dry_run, would do) to env.out and appends one tape
/// record (not in dry-run). Returns {"ok":bool,"hits":[...],...}; "ok" is false when any hit was
/// refused (a reused pid, a down node, a launcher or proxy error) or failed (a restarted node
/// that exited within 2 s: "failed":true, the tape's result "failed"). Throws chaos_error for
/// targets that do not resolve, usage_error for bad knobs.
nlohmann::json fire(chaos_env& env, const fault_spec& f);

/// Waits for the reverters that `fire`'s result started to re-execute a killed node without a
/// launcher (`kill`/`term --for D`: its hits' "revert_id"), and prints how each went: the new pid,
/// or the re-executed process's exit status when it exited within 2 s (the reverter's "revert"
/// tape record). False when one failed or never reported; true when there was none to wait for
/// or heal restarted the node first.
bool await_reverts(chaos_env& env, const nlohmann::json& result);

/// Reverts everything: stops pending reverters, SIGCONT to every recorded and every known node
/// process (after the identity check), pending restarts done now, proxy `heal`, launcher
/// `release` for held nodes, and (with `clear_messages`) every node's live message faults
/// ended through its chaos endpoint. Returns {"ok":bool,"actions":[...]}.
/// `own_holds` (a `dd-chaos run` session's final heal): only the holds this process placed
/// (env.placed_holds) and that are still running are released; another invocation's hold (in
/// the state file, which keeps it, or a node the nodes file says is "held") is left alone, and
/// a hold of ours that already ended is not released (its node is restarting or back: the
/// launcher restarts it by itself; releasing it could only cut a newer hold short).
nlohmann::json heal(chaos_env& env, bool clear_messages = true, bool own_holds = false);

/// Appends `record` (plus "t", and "offset" when a session runs) to the tape, unless dry-run.
void tape_append(const chaos_env& env, nlohmann::json record);

}  // namespace dd::chaos
