// apps/dd_node/resolve.cpp — `dd-node resolve <experiment.lua> [--name N]... [--set k=v]...`:
// print the fully resolved configuration of each experiment as JSON (exit 0), or every error as
// "file:line: key.path: reason" (exit 2). The logic lives in runtime/config/resolve_command.hpp.
#include <iostream>
#include <string>
#include <vector>

#include "runtime/config/resolve_command.hpp"

namespace dd::app {

/// Entry point of `dd-node resolve`; argv[0] is "resolve".
int resolve_main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  return dd::config::resolve_command(args, std::cout, std::cerr);
}

}  // namespace dd::app
