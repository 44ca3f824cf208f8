// runtime/config/resolve_command.hpp — the `resolve` command: load an experiment file and print
// every selected experiment fully resolved, as JSON. `dd-node resolve` calls it; tests call it
// directly to check exit codes and messages. Callable from any thread (no global state).
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace dd::config {

/// Usage text of the resolve command.
extern const char* const resolve_usage;

/// Runs `resolve <file> [--name N]... [--set key.path=value]... [--no-check-files]` with `args`
/// (the arguments after the command name). On success prints a JSON array of resolved
/// experiments to `out` and returns 0; on a bad file, override or usage prints one error per line
/// ("file:line: key.path: reason") to `err` and returns 2.
int resolve_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace dd::config
