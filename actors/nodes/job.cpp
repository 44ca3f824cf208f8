// actors/nodes/job.cpp — see job.hpp.
//
// Job actor:
//
//   start (spawn the syncer node: monitor, owners, evaluator; then the learner node)
//     --budget spent (monitor: tokens; timer: seconds) or interrupted (stop_atom, reason)-->
//       stopping (stop every learner)
//     --all learners done--> final evaluation --> finished (shut everything down, report)
#include "actors/nodes/job.hpp"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <string>

#include <caf/all.hpp>

#include "actors/link/atoms.hpp"
#include "actors/nodes/experiment_views.hpp"
#include "actors/nodes/learner_node.hpp"
#include "actors/nodes/syncer_node.hpp"
#include "actors/roles/fragment_owner.hpp"
#include "actors/roles/supervisor.hpp"
#include "actors/services/run_report.hpp"
#include "runtime/eval.hpp"
#include "runtime/model_file.hpp"

namespace dd::actors {

namespace fs = std::filesystem;

namespace {

struct job_state {
  monitor_hdl monitor;
  supervisor_hdl owner_sup, learner_sup;
  evaluator_hdl eval;
  bool stopping = false;
  bool finalizing = false;
  bool finalized = false;
  double start_s = 0.0;
  double training_end_s = -1.0;
  std::string interrupted;  ///< the interrupt's reason; empty = not interrupted
  bool owner_lost = false;  ///< a fragment owner stayed down: no final evaluation possible
  double interrupted_at_s = 0.0;
  /// The evaluator's last validation loss (eval_atom after each evaluation); < 0 before the
  /// first. Stands in for the final evaluation when that cannot run or is cut short.
  double last_val_loss = -1.0;
  /// Learners this node's supervisor gave up on (child_given_up_atom).
  int learners_given_up = 0;
  static inline const char* name = "job";
};

using job_actor = job_hdl::stateful_base<job_state>;

void begin_stop(job_actor* self, job_setup& setup, const std::string& why) {
  auto& st = self->state;
  if (st.stopping) return;
  st.stopping = true;
  st.training_end_s = setup.log->now();
  setup.log->freeze_uptime();
  setup.log->emit("stop", {{"reason", why}});
  // In-process learners stop through their supervisor; remote ones through the monitor.
  if (st.learner_sup)
    self->send(st.learner_sup, atoms::stop_atom_v);
  else
    self->send(st.monitor, atoms::stop_atom_v);
}

void finalize(job_actor* self, std::shared_ptr<job_setup> setup, caf::actor reply_to, double loss,
              uint64_t digest) {
  auto& st = self->state;
  if (st.finalized) return;  // an interrupt cut the final evaluation short; its answer came late
  st.finalized = true;
  setup->stop_evaluation->store(true);  // one still running stops at its next batch
  const double end = setup->log->now();
  const double training_s = st.training_end_s - st.start_s;
  run_facts f;
  f.experiment = setup->exp.name;
  f.learners = setup->exp.learners.count;
  f.fragments = setup->plan.num_fragments();
  f.sync_interval = setup->exp.sync.interval;
  f.synchronous = synchronous(setup->exp);
  f.resumed = setup->options.resume;
  f.seconds_before = setup->seconds_before;
  f.before = setup->before;
  f.interrupted = st.interrupted;
  f.allow_degraded = setup->exp.checkpoint.allow_degraded;
  f.write_failure = setup->log->write_failure();
  f.faults_fired = setup->faults->fired().size();
  run_result result = make_run_result(f, *setup->log, loss, digest, end - st.start_s, training_s);
  // The windows final_val_loss was scored on; the model file holds their starts too. Without
  // the final evaluation's answer (digest 0: interrupted, timed out, an owner lost) the loss is
  // the last periodic evaluation's, on its windows.
  auto& fe = result.summary["final_eval"];
  fe = setup->final_eval;
  fe.erase("window_starts");
  const bool periodic = digest == 0 && loss >= 0;
  fe["evaluation"] = digest != 0 ? "final" : periodic ? "last periodic" : "none";
  if (periodic && fe.contains("windows") && fe.contains("validation_tokens")) {
    const auto n = periodic_eval_windows(setup->exp);
    fe["windows"] = n;
    fe["covers_split"] =
        n >= windows_in_split(fe["validation_tokens"].get<size_t>(), setup->exp.model.context);
  }
  if (auto it = setup->final_eval.find("bits_per_byte_per_nat");
      it != setup->final_eval.end() && it->is_number() && loss >= 0)
    result.summary["final_val_bpb"] = loss * it->get<double>();
  // The evaluator writes the final model before scoring it: an interrupt that cut the scoring
  // short leaves the file (its metadata "evaluation" says it was not scored).
  std::error_code ec;
  if ((digest != 0 || setup->final_model_written->load()) &&
      fs::exists(fs::path(setup->run_dir) / model_file_name, ec))
    result.summary["model_file"] = model_file_name;
  setup->log->emit("finished",
                   {{"final_val_loss", loss >= 0 ? nlohmann::json(loss) : nlohmann::json(nullptr)},
                    {"digest", digest}});
  if (st.learner_sup) self->send_exit(st.learner_sup, caf::exit_reason::user_shutdown);
  if (st.owner_sup) self->send_exit(st.owner_sup, caf::exit_reason::user_shutdown);
  if (st.eval) self->send_exit(st.eval, caf::exit_reason::user_shutdown);
  if (st.monitor) self->send_exit(st.monitor, caf::exit_reason::user_shutdown);
  if (reply_to) send_untyped(self, reply_to, atoms::finished_atom_v, std::move(result));
  self->quit();
}

/// Asks every fragment owner the monitor knows to write a checkpoint of its current state
/// (checkpoint_atom), then calls `next` once each answered, failed or passed `limit_s` seconds.
/// A run interrupted before its first periodic checkpoint (checkpoint.every_versions) once
/// resumed every fragment from the initial weights, and any run lost the merges since its last
/// periodic checkpoint.
void checkpoint_owners(job_actor* self, double limit_s, std::function<void()> next) {
  auto& s = self->state;
  if (!s.monitor) {
    next();
    return;
  }
  auto done = std::make_shared<std::function<void()>>(std::move(next));
  self->request(s.monitor, span(limit_s), caf::get_atom_v, atoms::owners_atom_v)
      .then(
          [=](const std::vector<uint8_t>&, const std::vector<owner_hdl>& owners) {
            auto left = std::make_shared<size_t>(0);
            for (const auto& o : owners)
              if (o) ++*left;
            if (*left == 0) {
              (*done)();
              return;
            }
            auto one = [=] {
              if (--*left == 0) (*done)();
            };
            for (const auto& o : owners)
              if (o)
                self->request(o, span(limit_s), atoms::checkpoint_atom_v)
                    .then([=](bool) { one(); }, [=](caf::error&) { one(); });
          },
          [=](caf::error&) { (*done)(); });
}

/// Every learner is done (or, interrupted, `timed_out`: the interrupt deadline passed): the
/// owners' final checkpoints, the final evaluation, then finalize.
void final_evaluation(job_actor* self, std::shared_ptr<job_setup> setup, caf::actor reply_to,
                      bool timed_out) {
  auto& s = self->state;
  if (s.finalizing) return;
  if (!s.stopping) {
    s.stopping = true;
    s.training_end_s = setup->log->now();
    setup->log->freeze_uptime();
    setup->log->emit("stop", {{"reason", "every learner finished"}});
  }
  s.finalizing = true;
  // Interrupted: the final evaluation gets what is left of interrupt_timeout_s (at least 1
  // s), else the last periodic validation loss stands in.
  auto left_s = [self, setup] {
    const auto& st = self->state;
    return st.interrupted.empty()
               ? 600.0
               : std::max(1.0, st.interrupted_at_s + setup->options.interrupt_timeout_s -
                                   setup->log->now());
  };
  const double limit_s = left_s();
  // Every learner given up (each failed its restarts: e.g. a model too big to allocate): nothing
  // trained the model the evaluator would score, and the evaluator would likely fail the same
  // way, or take its 600 s: the run ends now, failed, with the last periodic validation loss.
  const bool none_left = s.learners_given_up >= setup->exp.learners.count;
  if (none_left)
    setup->log->warn("every learner was given up: no final evaluation; the run failed");
  if (timed_out || s.owner_lost || none_left) {
    checkpoint_owners(self, 5.0,
                      [=] { finalize(self, setup, reply_to, self->state.last_val_loss, 0); });
    return;
  }
  checkpoint_owners(self, std::min(limit_s, 30.0), [=] {
    self->request(self->state.eval, span(left_s()), atoms::final_eval_atom_v)
        .then([=](double loss, uint64_t digest) { finalize(self, setup, reply_to, loss, digest); },
              [=](caf::error&) {
                const auto& st = self->state;
                finalize(self, setup, reply_to, st.interrupted.empty() ? -1.0 : st.last_val_loss,
                         0);
              });
  });
}

job_hdl::behavior_type job(job_actor* self, std::shared_ptr<job_setup> setup, caf::actor reply_to) {
  drop_unexpected(self, setup->log.get(), "job");
  auto& st = self->state;
  const auto& e = setup->exp;
  const int M = e.learners.count;
  const int P = setup->plan.num_fragments();
  st.start_s = setup->log->now();
  setup->log->emit(setup->options.resume ? "resume" : "start",
                   {{"experiment", e.name},
                    {"run_id", setup->run_id},
                    {"learners", M},
                    {"fragments", P},
                    {"sync_interval", e.sync.interval},
                    {"synchronous", synchronous(e)},
                    {"steps_per_learner", setup->steps_per_learner}});

  const job_hdl job = caf::actor_cast<job_hdl>(self);
  auto syncer = spawn_syncer_node(self, job, *setup);
  st.monitor = syncer.monitor;
  st.owner_sup = syncer.owner_sup;
  st.eval = syncer.eval;
  const bool remote = setup->options.role == node_role::syncer;
  if (remote && reply_to) send_untyped(self, reply_to, atoms::publish_atom_v, st.monitor);
  // Learners (a syncer node has none: they join from their own processes).
  if (!remote) st.learner_sup = spawn_local_learners(self, job, *setup, st.monitor);
  // A resumed run counts the seconds its earlier parts trained.
  if (e.budget.kind == config::budget_kind::seconds && e.budget.seconds > 0)
    self->delayed_send(self, span(std::max(0.0, e.budget.seconds - setup->seconds_before)),
                       atoms::budget_spent_atom_v);

  return {
      [=](atoms::budget_spent_atom) { begin_stop(self, *setup, "budget spent"); },
      // Interrupted (SIGINT/SIGTERM in dd-node run): stop like a spent budget, but give the
      // learners and the final evaluation at most interrupt_timeout_s.
      // An interrupt during the final evaluation bounds it too: whatever state the job is in,
      // it finalizes within interrupt_timeout_s of the signal.
      [=](atoms::stop_atom, const std::string& reason) {
        auto& s = self->state;
        if (!s.interrupted.empty() || s.finalized) return;
        s.interrupted = reason;
        s.interrupted_at_s = setup->log->now();
        if (!s.finalizing) begin_stop(self, *setup, "interrupted (" + reason + ")");
        self->delayed_send(self, span(setup->options.interrupt_timeout_s),
                           atoms::interrupt_timeout_atom_v);
      },
      [=](atoms::eval_atom, double val_loss) { self->state.last_val_loss = val_loss; },
      // A role's write failed: the node's write-failure policy, set on its run log, decides what
      // it means (the console line, `degraded`, or the run's write failure) and the role is told
      // what to do by message.
      [=](atoms::write_trouble_atom, const std::string& file, const std::string& message) {
        const write_verdict verdict = setup->log->write_trouble(file, message);
        send_untyped(self, caf::actor_cast<caf::actor>(self->current_sender()),
                     atoms::write_verdict_atom_v, file, verdict);
      },
      [=](atoms::child_given_up_atom, child_kind kind, int32_t, const std::string&) {
        // A lost learner: the quorum absorbs it (the run is marked failed at the end). A lost
        // owner: without it the global model cannot be assembled again: stop the learners; the
        // run fails (finalize) and reports the last periodic validation loss.
        if (kind == child_kind::learner) ++self->state.learners_given_up;
        if (kind != child_kind::owner) return;
        self->state.owner_lost = true;
        begin_stop(self, *setup, "a fragment owner exhausted its restart budget");
      },
      [=](atoms::children_done_atom, child_kind kind) {
        if (kind == child_kind::learner) final_evaluation(self, setup, reply_to, false);
      },
      [=](atoms::interrupt_timeout_atom) {
        auto& s = self->state;
        if (s.interrupted.empty() || s.finalized) return;
        if (s.finalizing)  // the final evaluation (or the owners' checkpoints) still runs
          finalize(self, setup, reply_to, s.last_val_loss, 0);
        else
          final_evaluation(self, setup, reply_to, true);
      },
  };
}

}  // namespace

job_hdl spawn_job(caf::actor_system& sys, std::shared_ptr<job_setup> setup, caf::actor reply_to) {
  if (setup->options.simulated_time) {
    const double t0 = clock_seconds(sys.clock().now());
    setup->log->set_clock([&sys, t0] { return clock_seconds(sys.clock().now()) - t0; });
  }
  return sys.spawn(job, setup, reply_to);
}

}  // namespace dd::actors
