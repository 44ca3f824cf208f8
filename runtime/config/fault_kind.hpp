// runtime/config/fault_kind.hpp — the one vocabulary of faults: one enum and one name table
// shared by the experiment DSL (chaos.events, chaos.random.kinds), dd-chaos (its commands, tape
// and scenarios), the nodes' fault hooks (actors/services/fault_hooks.hpp) and their chaos
// endpoint (actors/services/chaos_endpoint.hpp).
//
// Each fault has one name; two faults that differ have different names: `kill_learner` stops a
// learner actor inside its node, `kill` sends SIGKILL to a node process. The DSL spells the
// process faults `kill` and `slow` as `kill_process` and `slow_process` (dsl_name) because its
// old spellings `kill` and `slow` still mean the in-process faults, with a warning
// (dsl_fault_kind): an experiment file written for the old names keeps its meaning.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dd::config {

/// Every fault a run can be given, grouped by where it acts (fault_layer_of).
enum class fault_kind : std::uint8_t {
  // In process, at a learner's step (the node's step hook).
  kill_learner,  ///< the learner actor dies; its supervisor respawns it after the downtime
  slow_learner,  ///< the learner sleeps (factor − 1) × its step time after each step
  nan_step,      ///< a NaN is written into the learner's model after a step
  fail_step,     ///< the learner's step throws
  corrupt_held,  ///< the learner's stored copy of a global value is altered (divergence check)
  // In process, at an owner's merge.
  kill_owner,  ///< the fragment owner actor dies (optionally damaging its checkpoint)
  // In process, on the link: chunk messages as they leave a node (push: the learner's node;
  // broadcast: the syncer).
  drop_push,
  delay_push,
  dup_push,
  reorder_push,
  corrupt_push,
  scale_push,   ///< the pushed pseudo-gradient multiplied by a factor (finite but absurd)
  random_push,  ///< the pushed pseudo-gradient replaced by N(0, 1) draws (seeded)
  drop_broadcast,
  delay_broadcast,
  dup_broadcast,
  reorder_broadcast,
  // A node process, by signal (dd-chaos).
  kill,     ///< SIGKILL (DSL: kill_process)
  term,     ///< SIGTERM
  pause,    ///< SIGSTOP until healed or for a duration
  resume,   ///< SIGCONT (dd-chaos only)
  slow,     ///< stopped a duty fraction of every period (DSL: slow_process)
  restart,  ///< SIGKILL, then the launcher starts it again
  // The network, through the fault proxy (dd-chaos).
  latency,
  bandwidth,
  reset,
  blackhole,
  partition,  ///< a blackhole in both directions
  corrupt,
  slice,
  close_after,
  // Files of the run directory (dd-chaos).
  disk_truncate,
  disk_corrupt,
  disk_full
};

/// Where a fault acts.
enum class fault_layer : std::uint8_t {
  in_process,  ///< inside the node (fault hooks; under launch also reachable by the endpoint)
  process,     ///< signals to a node process (dd-chaos)
  network,     ///< the fault proxy (dd-chaos; needs `dd-node launch --via-proxy`)
  disk         ///< files of the run directory: an owner checkpoint, a full disk (dd-chaos)
};

/// The fault's one name ("kill_learner", "drop_push", "kill", ...): events, dd-chaos, the
/// endpoint, the hooks.
const char* to_string(fault_kind k);
/// Its DSL spelling: the name, except kill → "kill_process" and slow → "slow_process"; nullptr
/// for a fault the DSL does not schedule (resume).
const char* dsl_name(fault_kind k);
/// The fault named `name` (to_string's spelling); nullopt when none is.
std::optional<fault_kind> fault_kind_from(std::string_view name);
/// The fault a DSL action names: a dsl_name, or an old spelling (kill, slow, nan, fail), for
/// which `warning` (when given) is set to a sentence naming the new one. nullopt: unknown.
std::optional<fault_kind> dsl_fault_kind(std::string_view name, std::string* warning = nullptr);
/// Every DSL spelling, in enum order (messages, suggestions).
std::vector<std::string> dsl_fault_names();
/// Every fault, in enum order.
std::vector<fault_kind> all_fault_kinds();

/// The layer of `k`.
fault_layer fault_layer_of(fault_kind k);
/// True for the faults on pushes (drop_push .. random_push).
bool is_push_fault(fault_kind k);
/// True for the faults on broadcasts (drop_broadcast .. reorder_broadcast; applied by the
/// syncer's node).
bool is_broadcast_fault(fault_kind k);
/// True for nan_step and fail_step (the step kinds a live fault can start).
bool is_step_message_fault(fault_kind k);
/// True for the kinds a live fault can be (the push and broadcast kinds, nan_step, fail_step):
/// those the chaos endpoint and `dd-chaos msg` start.
bool is_live_fault(fault_kind k);
/// True for the live kinds a DSL event starts as a window (is_live_fault less drop_push and
/// delay_push, which a DSL event applies to one push).
bool starts_live_window(fault_kind k);

}  // namespace dd::config
