// runtime/config/loader.hpp — load experiments from the config DSL (Lua 5.4, sandboxed).
//
// An experiment file is a Lua script that calls `experiment { ... }` once per experiment (loops
// make sweeps). The script runs in a fresh sandboxed interpreter: only the base (without dofile,
// loadfile, require, collectgarbage; `load` takes text only), string (without dump), table, math
// and utf8 libraries, undefined globals are errors, and memory and instruction limits stop bombs
// and endless loops; the script runs in a forked child process that is killed at a wall-clock
// limit (load_options::script_timeout), so no script can hang its caller. Each experiment table is
// then snapshotted, the experiments named by `--name` are selected, `--set` overrides are applied
// to them, and each is validated and resolved against docs/ALGORITHM.md's defaults into
// dd::config::experiment. Nothing is started here: a caller gets either every selected experiment
// or every error found. Pure library code (no globals); callable from any thread, one load per
// call. docs/config.md is the reference for every key.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/config/experiment.hpp"

namespace dd::config {

/// One problem in an experiment file or override. `file` is the path as given (or "--set k=v"
/// for an override, "<json>" for load_json); `line` is 1-based, 0 when unknown; `key_path` is the
/// dotted path such as "sync.min_quorum" or "chaos.events[2].target" ("" for script errors).
struct config_error {
  std::string file;
  int line = 0;
  std::string key_path;
  std::string message;

  /// "file:line: key.path: message" (parts that are empty or 0 are left out). A key path longer
  /// than 200 bytes is shown cut: its first 120 bytes, "…" and its length.
  std::string to_string() const;
};

/// Knobs of a load; the defaults suit `dd-node`.
struct load_options {
  /// Overrides "key.path=value", applied to every selected experiment (see `names`). The value
  /// is read as a Lua expression (number, string, boolean, table, fraction(x)); text that is not
  /// a valid expression is taken as a plain string, so `--set data.file=x.txt` works unquoted.
  std::vector<std::string> overrides;
  /// Experiments to keep, by name; empty keeps all. A name that matches none is an error.
  /// Selection comes first: only the selected experiments get the overrides and are validated
  /// and resolved, so an override that does not fit an unselected experiment does not matter.
  /// The name used for selection is the one written in the file (or its default, stem-N), or the
  /// value of a `name=...` override.
  std::vector<std::string> names;
  /// When non-empty, replaces `run_dir` of every selected experiment, taken as given (not read
  /// as Lua), before the defaults derived from it: a `checkpoint.dir` the experiment does not set
  /// then defaults to <run_dir>/checkpoints; an explicit one is kept. Errors name it
  /// "--run-dir DIR". This is `dd-node run --run-dir`.
  std::string run_dir;
  /// Extra directories where a relative data.file is looked for after the experiment file's
  /// directory and the current directory.
  std::vector<std::string> search_dirs;
  /// Check that data.file exists (and resolve it to the path found).
  bool check_files = true;
  /// Memory the script's interpreter may hold, bytes.
  std::size_t memory_limit = std::size_t{64} << 20;
  /// Lua VM instructions the script may execute.
  std::uint64_t instruction_limit = 20'000'000;
  /// Wall-clock seconds the whole evaluation (the script and every --set expression) may take,
  /// > 0. The script runs in a child process that is killed at the limit, whatever it is doing;
  /// the error names the file, the line it had reached and the limit. `--script-timeout S`.
  double script_timeout = 10.0;
  /// Evaluate the script and the --set expressions in the calling process instead of the
  /// child (the memory and instruction caps still apply; script_timeout is checked only
  /// between Lua instructions, so one long library call or a __gc finalizer is not stopped:
  /// see detail::sandbox_limits::in_process). Only for the fuzz target
  /// tests/fuzz/config_fuzz.cpp; dd-node never sets it.
  bool evaluate_in_process = false;
};

/// Parses the value of `--script-timeout` (seconds, a finite number > 0 and at most one day).
/// Returns false with `error` set ("--script-timeout: ...") when it is not one.
bool parse_script_timeout(const std::string& text, double& seconds, std::string& error);

/// What a load produced: the selected experiments in file order, or the errors (then
/// `experiments` is empty: nothing may start).
/// Most errors a load reports in full (per experiment and in all); the rest are counted.
inline constexpr std::size_t max_errors_shown = 100;

struct load_result {
  std::vector<experiment> experiments;
  /// At most max_errors_shown errors, each once.
  std::vector<config_error> errors;
  /// Errors found past those, counted only.
  std::size_t more_errors = 0;
  /// What loaded but should be written otherwise: an old spelling that still works (a chaos
  /// action renamed in runtime/config/fault_kind.hpp), naming the new one. The commands print
  /// them to stderr.
  std::vector<config_error> warnings;

  /// True when there are no errors.
  bool ok() const { return errors.empty(); }
  /// Every error's to_string(), one per line, then "… and N more errors" when some were cut.
  std::string error_text() const;
  /// Every warning's to_string() prefixed "warning: ", one per line ("" when none).
  std::string warning_text() const;
};

/// Runs the experiment file at `path` in the sandbox and resolves its experiments.
/// Relative data files are looked for next to the file first (see load_options::search_dirs).
load_result load_file(const std::string& path, const load_options& options = {});

/// As load_file, for a script held in memory; `display_name` names it in errors, and its
/// directory (if any) is where relative data files are looked for first.
load_result load_string(std::string_view script, const std::string& display_name,
                        const load_options& options = {});

/// Validates and resolves experiments given as JSON (one object, or an array of them) in the
/// DSL's keys, e.g. the output of to_json(); errors name the file "<json>".
load_result load_json(const nlohmann::json& value, const load_options& options = {});

/// Every key path the DSL accepts, dotted ("sync.grace.gamma"; list items as
/// "chaos.events[].at_step").
const std::vector<std::string>& known_key_paths();

}  // namespace dd::config
