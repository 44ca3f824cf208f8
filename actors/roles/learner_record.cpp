// actors/roles/learner_record.cpp — see learner_record.hpp.
#include "actors/roles/learner_record.hpp"

#include <algorithm>
#include <string>
#include <type_traits>
#include <utility>

#include "actors/link/wire_refusal.hpp"
#include "actors/services/compute_gate.hpp"
#include "actors/services/run_log.hpp"

namespace dd::actors {

namespace {

namespace act = learner_do;

void count(const act::count& x, int32_t id, event_sink& log) {
  if (x.which == act::counter::discarded_step)
    log.update([&](run_counters& c) { c.learners[id].discarded_steps += 1; });
  else
    log.update([](run_counters& c) { c.chunks_refused += 1; });
}

void step_stats(const act::step_stats& x, int32_t id, event_sink& log) {
  log.update([&](run_counters& c) {
    auto& ls = c.learners[id];
    ls.step = x.step;
    // Counted up in this process, but never below the learner's total over its incarnations:
    // a node process started again begins at 0 here and resumes from the monitor's count (its
    // step does too). In one process the sum already holds every incarnation's steps (some the
    // monitor never heard of, between the last heartbeat and a crash), so it stays.
    ls.tokens = std::max(ls.tokens + x.tokens, x.tokens_total);
    ls.loss = x.loss;
    ls.compute_s += x.step_s;
    ls.steps_per_s = x.steps_per_s;
    ls.incarnation = x.incarnation;
    ls.alive = true;
    ls.last_report_s = log.now();
  });
  log.note_step(id, x.step_s);
}

}  // namespace

bool record(learner_action& a, int32_t id, event_sink* log, step_admission* gate) {
  return std::visit(
      [&](auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, act::gate>) {
          if (gate != nullptr) x.join ? gate->join(id) : gate->leave(id);
          return true;
        } else if constexpr (std::is_same_v<T, act::event>) {
          if (log != nullptr) log->emit(x.name, std::move(x.fields));
          return true;
        } else if constexpr (std::is_same_v<T, act::refused>) {
          log_refused_message(log, x.what.c_str(), x.error, {{"learner", id}});
          return true;
        } else if constexpr (std::is_same_v<T, act::stepping>) {
          if (log != nullptr) log->set_stepping(id, x.on);
          return true;
        } else if constexpr (std::is_same_v<T, act::training_over>) {
          if (log != nullptr) log->learner_finished(id);
          return true;
        } else if constexpr (std::is_same_v<T, act::step_stats>) {
          if (log != nullptr) step_stats(x, id, *log);
          return true;
        } else if constexpr (std::is_same_v<T, act::count>) {
          if (log != nullptr) count(x, id, *log);
          return true;
        } else {
          return false;
        }
      },
      a);
}

void record_model_stats(model& m, uint64_t step, int sync_interval, const learner_core& learner,
                        event_sink& log) {
  if (sync_interval <= 0 || step % static_cast<uint64_t>(sync_interval) != 0) return;
  auto stats = m.take_stats();
  if (!stats.is_object() || !stats.contains("event")) return;
  const std::string kind = stats["event"].get<std::string>();
  stats.erase("event");
  stats["learner"] = learner.id();
  stats["incarnation"] = learner.incarnation();
  stats["step"] = step;
  log.emit(kind, std::move(stats));
}

}  // namespace dd::actors
