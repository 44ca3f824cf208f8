// apps/dd_node/resolve.cpp — `dd-node resolve <experiment.lua> [--name N]... [--set k=v]...`:
// print the fully resolved configuration of each experiment as JSON (exit 0), or every error as
// "file:line: key.path: reason" (exit 2). The logic lives in runtime/config/resolve_command.hpp;
// this adds what needs the model (the fragment plan, refused when it cannot be made) and the
// memory estimate (actors/nodes/memory_check.hpp, on stderr).
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "actors/nodes/experiment_views.hpp"
#include "actors/nodes/memory_check.hpp"
#include "runtime/config/resolve_command.hpp"

namespace dd::app {

/// Entry point of `dd-node resolve`; argv[0] is "resolve".
int resolve_main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  const auto limits = actors::read_memory_limits();
  return dd::config::resolve_command(
      args, std::cout, std::cerr,
      [&](const config::experiment& e, std::ostream& notes) -> std::vector<std::string> {
        if (auto why = actors::fragment_plan_error(e); !why.empty()) return {why};
        const int threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
        notes << "dd-node resolve: experiment '" << e.name << "':\n"
              << actors::describe(actors::estimate_memory(e), limits, threads);
        return {};
      });
}

}  // namespace dd::app
