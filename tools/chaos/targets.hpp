// tools/chaos/targets.hpp — what a fault hits: target specs (`learner:2`, `owner:0`,
// `node:learner-1`, `learners`, `nodes`, comma lists), resolved against the nodes file to the
// processes that host them, then a seeded pick (one / minority / majority / all) and the
// protected set. Pure; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/chaos/nodes_file.hpp"

namespace dd::chaos {

/// One item of a target spec.
struct target_item {
  enum class kind { actor, node, learners, nodes };
  kind k = kind::actor;
  std::string text;  ///< as written: "learner:2", "node:syncer", "learners"
  std::string name;  ///< actor name ("learner:2", "owner:0") or node name
  bool is_group() const { return k == kind::learners || k == kind::nodes; }
};

/// Parses "learner:2,owner:0,node:NAME,learners,nodes". Throws usage_error on a bad item.
std::vector<target_item> parse_targets(const std::string& spec);

enum class pick_mode { one, minority, majority, all };

/// "one" | "minority" | "majority" | "all". Throws usage_error.
pick_mode parse_pick(const std::string& text);
const char* to_string(pick_mode m);

/// How many of `n` candidates a pick takes: one 1, minority floor((n-1)/2) (the largest set
/// smaller than half), majority floor(n/2)+1, all n (each at most n).
size_t pick_count(pick_mode m, size_t n);

/// Options of target resolution.
struct target_options {
  pick_mode pick = pick_mode::all;
  bool pick_given = false;           ///< false: `all` for named targets, `one` for groups
  uint64_t seed = 1;                 ///< drives the pick
  std::vector<std::string> protect;  ///< target specs never touched (--protect)
  bool exact = false;                ///< refuse when a hit process hosts several actors
};

/// A process a fault will hit.
struct target_hit {
  std::string node;                 ///< node name
  std::vector<std::string> named;   ///< the spec items that led here ("learner:0")
  std::vector<std::string> others;  ///< the process's other actors, also hit by a process fault
};

/// The resolved selection, in nodes-file order.
struct selection {
  std::vector<target_hit> hits;
  std::vector<std::string> notes;  ///< e.g. "node syncer protected (default), not picked"
};

/// Resolves `items` against `nodes`. The syncer is protected when only reached through a group
/// (`learners`/`nodes`) unless named; --protect applies always, and naming a protected process
/// is an error. Throws chaos_error for a target no node hosts (listing what exists), for an
/// --exact refusal, for a protected named target and for an empty pick.
selection resolve_targets(const nodes_file& nodes, const std::vector<target_item>& items,
                          const target_options& opt);

}  // namespace dd::chaos
