// tools/chaos/dsl.hpp — the `chaos` section of an experiment file (runtime/config, docs/config.md)
// as a dd-chaos session: `dd-chaos run EXPERIMENT.lua` and the dd-chaos child of `dd-node launch`
// fire its process and network events at their times, and draw its whole-cluster random faults
// (chaos.random.cluster_mtbf_seconds) with make_schedule. The message kinds are fired from here
// (through the chaos endpoints) when the nodes leave them to dd-chaos (dd-node launch); the other
// in-process kinds (kill, slow, kill_owner) the nodes apply themselves. dd-chaos's single thread.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/config/fault_kind.hpp"
#include "tools/chaos/nodes_file.hpp"
#include "tools/chaos/runner.hpp"

namespace dd::chaos {

/// A session read from an experiment file.
struct dsl_session {
  std::vector<timed_fault> faults;  ///< events and drawn faults, at offsets from the start
  nlohmann::json info;              ///< the tape's session line (file, experiment, seed, ...)
};

/// The message kind (msg.hpp) of fault `k`: its name for the live kinds, "" for the others.
std::string msg_kind_of(config::fault_kind k);
/// The dd-chaos command kind of fault `k` of the process, network or disk layer: its name
/// (partition → "blackhole", fired with dir both); "" for an in-process fault.
std::string chaos_kind_of(config::fault_kind k);

/// The message kind (msg.hpp) of a DSL message action: "nan" → "nan_step", "fail" →
/// "fail_step", drop_push ... reorder_broadcast as spelled; "" for any other action.
std::string msg_kind_of_action(const std::string& action);

/// The dd-chaos fault kind of a DSL action of the process or network layer ("kill_process" →
/// "kill", "slow_process" → "slow", "partition" → "blackhole", others as spelled); "" for an
/// in-process action.
std::string chaos_kind_of_action(const std::string& action);

/// Loads `path` with the config loader (`overrides` as --set, `names` as --name; exactly one
/// experiment must be selected) and turns its chaos section into a session against `nodes`:
/// every process/network event at its at_time (or at_fraction × a seconds budget), and, when
/// chaos.random.cluster_mtbf_seconds > 0, the schedule make_schedule draws from its seed over
/// the processes of chaos.random.target (learners: every learner process; owners: the syncer;
/// any: both). When the nodes file says the nodes leave the experiment's message faults to
/// dd-chaos (`message_faults: "endpoint"`, dd-node launch), its message events too: at their
/// at_time / at_fraction of a seconds budget, and step-keyed ones (at_step, at_fraction of a
/// steps or tokens budget) at the start, armed in the node with "at_step" / "at_fraction";
/// drop_push and delay_push one push each, the others `duration` seconds or `count` matches
/// (default one). The file is evaluated like every experiment (a child process killed after
/// `script_timeout_s`). Throws chaos_error with the loader's errors (file:line: key: message).
dsl_session read_experiment_chaos(const std::string& path,
                                  const std::vector<std::string>& overrides,
                                  const std::vector<std::string>& names, const nodes_file& nodes,
                                  double script_timeout_s = 10.0);

}  // namespace dd::chaos
