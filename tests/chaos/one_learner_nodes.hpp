// tests/chaos/one_learner_nodes.hpp — the nodes file of the small cluster the chaos process tests
// fake (chaos_process_test, chaos_disk_test): a syncer node that is down and one running learner
// node, a real process of the test.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/nodes_file.hpp"

namespace dd::test {

/// Run `run_id`: node "syncer" (monitor, owner:0) down, and node "learner-0" (learner:0) running
/// as process `pid`, started at `start_time` (clock ticks since boot) by `argv`.
inline nodes_file syncer_down_one_learner(const std::string& run_id, int pid,
                                          std::uint64_t start_time, std::vector<std::string> argv) {
  nodes_file f;
  f.run_id = run_id;
  node_entry s;
  s.name = "syncer";
  s.role = "syncer";
  s.actors = {"monitor", "owner:0"};
  s.state = "down";
  node_entry l;
  l.name = "learner-0";
  l.role = "learner";
  l.actors = {"learner:0"};
  l.pid = pid;
  l.start_time = start_time;
  l.argv = std::move(argv);
  l.state = "running";
  f.nodes = {s, l};
  return f;
}

}  // namespace dd::test
