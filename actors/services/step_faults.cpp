// actors/services/step_faults.cpp — see step_faults.hpp.
#include "actors/services/step_faults.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

#include "actors/roles/supervisor.hpp"
#include "actors/services/compute_gate.hpp"
#include "actors/services/run_log.hpp"

namespace dd::actors {

step_faults learner_step_faults::at_step(int32_t id, uint64_t incarnation, uint64_t step) {
  step_faults sf;
  if (hooks_ != nullptr) sf = hooks_->on_learner_step(id, incarnation, step);
  slow_factor_ = std::max(1.0, sf.slow_factor);
  return sf;
}

void learner_step_faults::before_heartbeat(const step_faults& sf, learner_core& core,
                                           uint64_t step) {
  if (!sf.corrupt_held) return;
  const int32_t fragment = core.corrupt_held_value();
  if (log_ != nullptr)
    log_->emit("held_value_corrupted", {{"learner", core.id()},
                                        {"incarnation", core.incarnation()},
                                        {"step", step},
                                        {"fragment", fragment}});
}

caf::error learner_step_faults::after_heartbeat(const step_faults& sf, model& m,
                                                const fragment_plan& plan, int32_t id,
                                                uint64_t incarnation, uint64_t step,
                                                step_admission* gate) {
  const nlohmann::json who = {{"learner", id}, {"incarnation", incarnation}, {"step", step}};
  if (sf.nan) {
    const float bad = std::numeric_limits<float>::quiet_NaN();
    for (const auto& layout : plan.fragments)
      if (!layout.tensors.empty()) m.write_parameters(layout.tensors.front().flat_offset, 1, &bad);
    poison_next_step_ = true;
    if (log_ != nullptr) log_->emit("nan_injected", who);
  }
  if (!sf.fail && !sf.kill) return {};
  if (log_ != nullptr) {
    auto ev = who;
    if (sf.fail) ev["reason"] = "fail_step";
    log_->emit("crash", ev);
    log_->set_stepping(id, false);
  }
  if (gate != nullptr) gate->leave(id);
  if (sf.fail)
    throw std::runtime_error("fault injected: learner " + std::to_string(id) + " fails at step " +
                             std::to_string(step));
  return with_downtime(caf::make_error(caf::sec::runtime_error, "fault injected: kill learner"),
                       sf.kill_downtime_s);
}

}  // namespace dd::actors
