// tools/chaos/msg.hpp — message faults through the nodes' chaos endpoints
// (actors/services/chaos_endpoint.hpp): `dd-chaos msg drop-push learner:1 --for 10s`, ...,
// `dd-chaos msg nan learner:2`. Each request goes to the endpoint port recorded in the nodes file
// (`endpoints.chaos`) of the node that hosts the target; the fault reverts itself inside the node
// after its duration or count. dd-chaos's single thread.
#pragma once

#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "tools/chaos/actions.hpp"

namespace dd::chaos {

/// True for the message kinds, as the tape and scenarios spell them: drop_push dup_push
/// delay_push reorder_push corrupt_push scale_push random_push drop_broadcast dup_broadcast
/// delay_broadcast reorder_broadcast nan_step fail_step.
bool is_msg_kind(const std::string& kind);

/// The tape spelling of a `msg` command's fault name: "drop-push" → "drop_push", "nan" →
/// "nan_step", "fail" → "fail_step" (a tape spelling is returned as is). Throws usage_error
/// naming the known names.
std::string msg_kind_from_cli(const std::string& name);

/// Checks a message fault's knobs before anything is contacted (a delay kind needs "ms" > 0,
/// others take none; "factor" only for scale_push, finite and not 0; "seed" only for
/// random_push; "count" >= 1; push and broadcast kinds need f.duration or a count).
/// Throws usage_error naming the kind and the flag.
void check_msg_spec(const fault_spec& f);

/// Resolves `target` for message fault `kind` against `nodes` as msg_fault does, touching
/// nothing (dry runs). Throws as msg_fault does for a target no node hosts.
void check_msg_targets(const nodes_file& nodes, const std::string& kind, const std::string& target);

/// One endpoint request per node the target reaches. TARGET: `learner:N` (push and step kinds:
/// the node hosting learner N; broadcast kinds: the syncer, broadcasts to learner N only),
/// `owner:N` (broadcast kinds: the owner of fragment N; push kinds: every learner node, pushes
/// of fragment N only), `node:NAME`, `learners` (every learner node; broadcast kinds: the
/// syncer, to every learner); comma lists. Knobs in f.net: "ms" (delay kinds, > 0), "factor"
/// (scale_push, default 1000), "seed" (random_push, default 0), "count" (matches before it
/// reverts). Push and broadcast kinds need f.duration or a count; nan_step
/// and fail_step default to one step. Returns {"ok", "hits":[{"node","endpoint","request",
/// "result","reply"|"error"}]}. Throws usage_error for bad knobs, chaos_error for a target no
/// node hosts or a node without an endpoint.
nlohmann::json msg_fault(chaos_env& env, const fault_spec& f);

/// Sends {"op":"clear"} to the endpoint of every running node of the nodes file (heal); one
/// action line each through `act(text, ok)`. A node that is down is skipped.
void msg_clear_all(chaos_env& env, const std::function<void(const std::string&, bool)>& act);

/// {"op":"status"} to every running node's endpoint: {"node": reply or {"error"}}.
nlohmann::json msg_status(chaos_env& env);

}  // namespace dd::chaos
