// actors/roles/learner_faults.cpp — see learner_faults.hpp.
#include "actors/roles/learner_faults.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

#include "actors/services/compute_gate.hpp"
#include "actors/services/run_log.hpp"

namespace dd::actors {

wire_bytes damaged_copy(const wire_bytes& chunk) {
  wire_bytes out = chunk;
  // Our own chunk: decoded against the run it was stamped with.
  auto header = peek_envelope(chunk);
  auto m = header ? decode_push(chunk, {}, envelope_expect{header->run_id, 0}) : decode_push(chunk);
  if (!m || m->payload.empty()) {
    if (!out.empty()) out.back() ^= 0x01;
    return out;
  }
  auto at = std::search(out.begin(), out.end(), m->payload.begin(), m->payload.end());
  if (at == out.end()) return out;
  *(at + static_cast<std::ptrdiff_t>(m->payload.size() / 2)) ^= 0x10;
  return out;
}

learner_actions learner_faults::route(learner_core& core, due_push d) {
  auto held = std::exchange(held_push_, std::nullopt);
  learner_actions out;
  if (d.push) out = send_with_fate(core, d.fragment, d.step, std::move(*d.push));
  if (held) {
    out.push_back(learner_do::push_chunks{held->first, std::move(held->second), 0.0});
    core.mark_sent(held->first);
  }
  return out;
}

learner_actions learner_faults::send_with_fate(learner_core& core, int32_t p, uint64_t step,
                                               inflight_push push) {
  push_fault fate;
  if (hooks_ != nullptr) fate = hooks_->on_push(core.id(), core.incarnation(), p, step);
  const nlohmann::json where = {{"learner", core.id()}, {"fragment", p}, {"step", step}};
  if (fate.drop) {
    if (log_ != nullptr) {
      log_->emit("push_dropped", where);
      log_->update([](run_counters& c) { c.pushes_dropped += 1; });
    }
    core.track(p, std::move(push), /*sent=*/true);  // the learner cannot tell
    return {};
  }
  if (fate.delay_s <= 0 && !fate.reorder && !fate.duplicate && !fate.corrupt)
    return core.enqueue(p, std::move(push));
  std::vector<wire_bytes> bytes = push.chunks;
  if (fate.corrupt) bytes.front() = damaged_copy(bytes.front());
  if (fate.reorder) {
    if (log_ != nullptr) log_->emit("push_held", where);
    if (fate.duplicate) bytes.insert(bytes.end(), bytes.begin(), bytes.end());
    held_push_.emplace(p, std::move(bytes));
    core.track(p, std::move(push), /*sent=*/false);
    return {};
  }
  learner_actions out;
  for (int copy = 0; copy < (fate.duplicate ? 2 : 1); ++copy)
    out.push_back(learner_do::push_chunks{p, bytes, fate.delay_s});
  core.track(p, std::move(push), /*sent=*/true);
  return out;
}

step_faults learner_faults::at_step(int32_t id, uint64_t incarnation, uint64_t step) {
  step_faults sf;
  if (hooks_ != nullptr) sf = hooks_->on_learner_step(id, incarnation, step);
  slow_factor_ = std::max(1.0, sf.slow_factor);
  return sf;
}

void learner_faults::before_heartbeat(const step_faults& sf, learner_core& core, uint64_t step) {
  if (!sf.corrupt_held) return;
  const int32_t fragment = core.corrupt_held_value();
  if (log_ != nullptr)
    log_->emit("held_value_corrupted", {{"learner", core.id()},
                                        {"incarnation", core.incarnation()},
                                        {"step", step},
                                        {"fragment", fragment}});
}

bool learner_faults::after_heartbeat(const step_faults& sf, model& m, const fragment_plan& plan,
                                     int32_t id, uint64_t incarnation, uint64_t step,
                                     step_admission* gate) {
  const nlohmann::json who = {{"learner", id}, {"incarnation", incarnation}, {"step", step}};
  if (sf.nan) {
    const float bad = std::numeric_limits<float>::quiet_NaN();
    for (const auto& layout : plan.fragments)
      if (!layout.tensors.empty()) m.write_parameters(layout.tensors.front().flat_offset, 1, &bad);
    poison_next_step_ = true;
    if (log_ != nullptr) log_->emit("nan_injected", who);
  }
  if (!sf.fail && !sf.kill) return true;
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
  return false;
}

}  // namespace dd::actors
