// actors/services/write_policy.cpp — see write_policy.hpp.
#include "actors/services/write_policy.hpp"

#include <fmt/format.h>

namespace dd::actors {

const char* to_string(write_verdict v) {
  switch (v) {
    case write_verdict::go_on: return "go_on";
    case write_verdict::retry_degraded: return "retry_degraded";
    case write_verdict::end_the_run: return "end_the_run";
  }
  return "?";
}

write_verdict write_policy::on_failing(double failing_s) const noexcept {
  if (!(failing_s > 0)) return write_verdict::go_on;
  if (!retry_ || failing_s > max_failing_s_) return write_verdict::end_the_run;
  return write_verdict::retry_degraded;
}

std::string write_policy::limit_message(double failing_s, const std::string& files) const {
  return fmt::format("writes kept failing for {:.0f} s (checkpoint.max_failing_seconds = {:g}): {}",
                     failing_s, max_failing_s_, files);
}

}  // namespace dd::actors
