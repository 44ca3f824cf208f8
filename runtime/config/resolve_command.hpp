// runtime/config/resolve_command.hpp — the `resolve` command: load an experiment file and print
// every selected experiment fully resolved, as JSON. `dd-node resolve` calls it; tests call it
// directly to check exit codes and messages. Callable from any thread (no global state).
#pragma once

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "runtime/config/experiment.hpp"

namespace dd::config {

/// Usage text of the resolve command (its flag table's help).
std::string resolve_usage();

/// Runs `resolve <file> [--name N]... [--set key.path=value]... [--no-check-files]` with `args`
/// (the arguments after the command name). On success prints a JSON array of resolved
/// experiments to `out` and returns 0; on a bad file, override or usage prints one error per line
/// ("file:line: key.path: reason") to `err` and returns 2.
/// `check`, when given, is called for each resolved experiment with what the loader cannot know
/// (the model's tensors, the machine): it writes notes (e.g. the memory estimate) to `notes`
/// and returns errors, each "key.path: reason"; any error refuses the file (exit 2), printed as
/// "file: experiment 'NAME': key.path: reason".
using resolve_check =
    std::function<std::vector<std::string>(const experiment& e, std::ostream& notes)>;
int resolve_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                    const resolve_check& check = {});

}  // namespace dd::config
