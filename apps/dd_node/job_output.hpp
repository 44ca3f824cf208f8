// apps/dd_node/job_output.hpp — how `dd-node run` and `dd-node syncer` run a job and report it:
// the readable summary (actors/services/run_report.hpp summary_text) on stdout, and the
// failure's reason on stderr. main() thread only.
#pragma once

#include <optional>
#include <string>

#include "actors/nodes/job_runner.hpp"

namespace dd::app {

/// actors::run_job(exp, ro); nullopt after "`who`: NAME: WHY" on stderr when it throws.
std::optional<actors::run_result> run_job_or_say(const char* who, const config::experiment& exp,
                                                 const actors::run_options& ro);

/// Prints the job's summary (every key is in `run_dir`/summary.json; `logs_dir`, when not
/// empty, is named as where the nodes' logs are) and, for a failed run, "`who`: NAME failed:
/// REASON" on stderr. Returns r.failed.
bool report_job_result(const char* who, const std::string& name, const actors::run_result& r,
                       const std::string& run_dir, const std::string& logs_dir = {});

}  // namespace dd::app
