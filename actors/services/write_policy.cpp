// actors/services/write_policy.cpp — see write_policy.hpp.
#include "actors/services/write_policy.hpp"

#include <cstddef>
#include <iterator>

#include <fmt/format.h>

namespace dd::actors {

const char* to_string(write_verdict v) {
  static const char* const names[] = {"go_on", "retry_degraded", "end_the_run"};  // enum order
  const auto i = static_cast<size_t>(v);
  return i < std::size(names) ? names[i] : "?";
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
