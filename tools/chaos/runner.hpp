// tools/chaos/runner.hpp — timed fault lists: a random schedule, a replayed tape, a Lua
// scenario. Each becomes a list of timed_fault fired at its offset from the session start, with
// a final heal. dd-chaos's single thread.
#pragma once

#include <string>
#include <vector>

#include "tools/chaos/actions.hpp"
#include "tools/chaos/schedule.hpp"

namespace dd::chaos {

/// A fault (or a heal: kind "heal") at an offset in seconds from the session start.
struct timed_fault {
  double at = 0;
  fault_spec spec;
};

/// The schedule's faults as timed faults on `node:NAME` targets; `net` gives the knobs of
/// network kinds (e.g. {"ms":200} for latency), `duty`/`period` those of slow.
std::vector<timed_fault> from_schedule(const std::vector<scheduled_fault>& s,
                                       const fault_spec& knobs);

/// Reads a tape (chaos.jsonl): every fault and heal record, at its offset (the record's
/// "offset", else its time after the tape's first record). Throws chaos_error naming FILE:LINE.
std::vector<timed_fault> read_tape(const std::string& path);

/// Reads a Lua scenario: the file returns (or sets the global `scenario` to) a list of
/// {at = seconds, kind = "...", target = "...", for_ = seconds, ...knobs}. Throws chaos_error
/// naming FILE and the entry.
/// The script runs with base, string, table and math only, and is first evaluated in a child
/// process killed after `timeout_s` wall-clock seconds (chaos_error "did not finish within").
std::vector<timed_fault> read_scenario(const std::string& path, double timeout_s = 10.0);

/// Fires each fault at its offset (sorted), re-reading the nodes file before each; a fault
/// that fails is printed and taped and the session goes on. Ends with a heal unless `final_heal`
/// is false or dry-run (which prints the list and returns at once). SIGINT/SIGTERM stop the
/// session early (then heal). Returns 0 when every fault fired, 1 otherwise.
int run_session(chaos_env& env, std::vector<timed_fault> faults, bool final_heal,
                const nlohmann::json& session_info);

}  // namespace dd::chaos
