// tests/fuzz/config_fuzz.cpp — libFuzzer target for the experiment DSL loader
// (dd::config::load_string: the sandboxed Lua run, snapshot, overrides, validation, resolution).
//
// Input: Lua source. Leading lines of the form "--@set key=value" (Lua comments, so the script
// still runs) are also passed as load_options::overrides, so the `--set` parser is fuzzed too.
// The script runs in this process (load_options::evaluate_in_process, so libFuzzer sees the
// coverage of the evaluation; dd-node evaluates in a child killed at --script-timeout) with
// small limits (8 MiB, 200k VM instructions, 1 s of wall clock) and without file checks
// (data.file need not exist). In-process, the wall-clock limit is checked by the Lua hook,
// between instructions: it stops Lua loops, also loops of library calls (the corpus holds
// tests/config/bad/hang_gsub.lua). It cannot stop one long library call (a backtracking
// string.find, also inside an xpcall handler or a table.sort comparator) nor a __gc finalizer
// (Lua runs finalizers with hooks off); stopping those needs the child process, whose coverage
// libFuzzer would not see, so hang_pattern/hang_error_handler/hang_sort/hang_finalizer
// (tests/config/hang/) are not in this corpus (tests/config covers them through the child) and such
// an input found by mutation is reported by libFuzzer's -timeout. Properties: load_string never
// throws; a load either yields experiments or errors, not both; every resolved experiment's
// to_json() prints as JSON text and reads back through load_json() to the same JSON.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>

#include "runtime/config/loader.hpp"
#include "tests/fuzz/fuzz_check.hpp"

using dd::fuzz::violated;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view script(reinterpret_cast<const char*>(data), size);
  dd::config::load_options options;
  options.check_files = false;
  options.memory_limit = std::size_t{8} << 20;
  options.instruction_limit = 200'000;
  options.script_timeout = 1.0;        // per input; checked between Lua instructions (see above)
  options.evaluate_in_process = true;  // coverage of the evaluation, in this process
  constexpr std::string_view tag = "--@set ";
  size_t at = 0;
  while (script.substr(at, tag.size()) == tag && options.overrides.size() < 8) {
    const size_t end = script.find('\n', at);
    const size_t stop = end == std::string_view::npos ? script.size() : end;
    options.overrides.emplace_back(script.substr(at + tag.size(), stop - at - tag.size()));
    if (end == std::string_view::npos) break;
    at = end + 1;
  }
  try {
    const dd::config::load_result r = dd::config::load_string(script, "fuzz.lua", options);
    if (!r.ok() && !r.experiments.empty()) violated("errors and experiments both returned");
    for (const auto& e : r.experiments) {
      const nlohmann::json j = dd::config::to_json(e);
      (void)j.dump(2);  // what `dd-node resolve` prints and `run` writes (throws on bad UTF-8)
      dd::config::load_options back_options;
      back_options.check_files = false;
      const dd::config::load_result back = dd::config::load_json(j, back_options);
      if (!back.ok() || back.experiments.size() != 1)
        violated("to_json does not read back", j.dump() + "\n" + back.error_text());
      if (dd::config::to_json(back.experiments[0]) != j)
        violated("to_json -> load_json -> to_json changed the experiment",
                 j.dump() + "\n" + dd::config::to_json(back.experiments[0]).dump());
    }
  } catch (const std::exception& e) {
    violated("exception escaped load_string", e.what());
  }
  return 0;
}
