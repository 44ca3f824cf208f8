// apps/dd_node/commands.hpp — the table of dd-node subcommands. Each subcommand is defined in
// its own .cpp file (train.cpp, run.cpp, resolve.cpp, ...) and listed in commands.cpp.
#pragma once

#include <vector>

namespace dd::app {

/// One subcommand: argv[0] is the command name; returns the process exit code
/// (0 ok, 1 runtime failure, 2 bad usage or bad configuration).
struct command {
  const char* name;
  const char* summary;
  int (*main)(int argc, char** argv);
};

/// Every subcommand this build has.
const std::vector<command>& commands();

/// From inside a catch block: says "`who`: what()" on stderr and returns the exit status of the
/// exception in flight: 2 for std::invalid_argument (bad input), 1 for any other.
int exit_status_of_exception(const char* who);

}  // namespace dd::app
