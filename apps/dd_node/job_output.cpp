// apps/dd_node/job_output.cpp — see job_output.hpp.
#include "apps/dd_node/job_output.hpp"

#include <cstdio>

#include "actors/services/run_report.hpp"

namespace dd::app {

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
