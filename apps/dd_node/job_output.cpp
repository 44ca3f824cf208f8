// apps/dd_node/job_output.cpp — see job_output.hpp.
#include "apps/dd_node/job_output.hpp"

#include <cstdio>

#include "actors/services/run_report.hpp"

namespace dd::app {

std::optional<actors::run_result> run_job_or_say(const char* who, const config::experiment& exp,
                                                 const actors::run_options& ro) {
  try {
    return actors::run_job(exp, ro);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s: %s\n", who, exp.name.c_str(), e.what());
    return std::nullopt;
  }
}

bool report_job_result(const char* who, const std::string& name, const actors::run_result& r,
                       const std::string& run_dir, const std::string& logs_dir) {
  std::printf("%s", actors::summary_text(name, r, run_dir, logs_dir).c_str());
  std::fflush(stdout);
  if (r.failed) {
    std::fprintf(stderr, "%s: %s failed: %s\n", who, name.c_str(), r.failure_reason.c_str());
    std::fflush(stderr);
  }
  return r.failed;
}

}  // namespace dd::app
