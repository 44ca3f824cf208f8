// runtime/config/detail/sandbox.hpp — runs an experiment script in a sandboxed Lua 5.4 state.
// Private to runtime/config/ (loader.cpp is the only caller). Each call builds a fresh interpreter
// and closes it before returning; nothing is shared between calls, so any thread may call.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace dd::config::detail {

/// Resource caps of one script run. Every run happens in a forked child process (util/child.hpp)
/// that the caller SIGKILLs at the wall-clock deadline, whatever the script is doing (Lua code,
/// a library function such as string.find, a __gc finalizer, an error handler).
struct sandbox_limits {
  std::size_t memory = std::size_t{64} << 20;  ///< bytes the interpreter may hold
  std::uint64_t instructions = 20'000'000;     ///< VM instructions before the run is stopped
  /// The wall-clock limit in seconds, as the user gave it (--script-timeout); named in errors.
  double wall_seconds = 10.0;
  /// When the child is killed; a default-constructed value means now + wall_seconds.
  std::chrono::steady_clock::time_point deadline{};
  /// Evaluate in the calling process, without the child (the memory and instruction caps still
  /// apply). The wall-clock deadline is then checked by the Lua hook only: it stops Lua code
  /// (loops, calls of many short library functions) but not one long library call
  /// (string.find with a backtracking pattern, table.sort inside such a comparator call) nor a
  /// __gc finalizer (Lua runs finalizers with hooks off). Only for the fuzz target
  /// (tests/fuzz/config_fuzz.cpp), which needs the coverage of the evaluation in its own
  /// process; never set by dd-node.
  bool in_process = false;
};

/// "did not finish within S s (--script-timeout)" for a wall-clock limit of `seconds`.
std::string timeout_message(double seconds);

/// One `experiment { ... }` call, snapshotted when it was made.
struct raw_experiment {
  nlohmann::json value;  ///< the table as JSON (lists → arrays, named keys → objects)
  int line = 0;          ///< line of the call in the script
  /// Values that cannot be configuration (functions, mixed tables): (key path, reason).
  std::vector<std::pair<std::string, std::string>> problems;
};

/// What running a script produced.
struct script_outcome {
  std::vector<raw_experiment> experiments;  ///< in call order
  bool failed = false;                      ///< the script raised an error or hit a limit
  int line = 0;                             ///< where it failed (0 = unknown)
  std::string message;                      ///< why it failed, without a file:line prefix
};

/// Runs `script` (Lua source text; binary chunks are refused) and records its experiment calls.
/// A run past the deadline fails with line = the last line of the main chunk it reached and
/// message "the script did not finish within S s (--script-timeout)"; a child that dies (memory
/// exhausted outside the interpreter's own cap) fails with a message saying so.
script_outcome run_script(std::string_view script, const sandbox_limits& limits);

/// Evaluates the Lua expression `expr` in an empty sandbox (only fraction() is defined) and
/// returns its value as JSON, or nullopt when it is not a valid expression or has no JSON form.
/// `problem` (when given) receives why a value that did evaluate is unusable, e.g. "is not a
/// finite number" for 0/0 or 1e309, or "did not finish within S s (--script-timeout)".
std::optional<nlohmann::json> eval_expression(std::string_view expr, const sandbox_limits& limits,
                                              std::string* problem = nullptr);

}  // namespace dd::config::detail
