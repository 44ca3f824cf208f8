// tools/chaos/fault_timing.hpp — the times `dd-chaos report` judges: for each fault, when it was
// noticed, the learner excluded, restarted, rejoined and first merged again; the link drops no
// fault explains; and the global downtime (spans in which no learner stepped, judged per step
// advance against the learner's local pace). Pure functions of the inputs; any thread.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/chaos/report_inputs.hpp"

namespace dd::chaos::report_detail {

/// Per-fault times (report.hpp describes the rows) and what follows from them.
struct fault_times {
  nlohmann::json rows = nlohmann::json::array();  ///< one per fault, in injection order
  /// "learner:N after KIND TARGET at +Ss" for each faulted learner never merged again.
  std::vector<std::string> unrecovered;
  size_t judged = 0;  ///< injected faults on learners
  /// Link drops (the monitor's `failure` of a learner, a node's `syncer_lost`) outside every
  /// window of a fault that can drop links and hits that learner or node.
  nlohmann::json unexplained = nlohmann::json::array();
};
fault_times time_faults(const report_inputs& in);

}  // namespace dd::chaos::report_detail
