// actors/roles/evaluator.hpp — assembles the global model from the fragment owners on a schedule
// and measures its validation loss on the held-out split.
//
// Promises: every `every_seconds` — stretched to 9 × the last evaluation's duration when that is
// longer, so evaluation takes at most ~10% of the machine —, each time the global step crosses a
// multiple of `every_steps` (whichever fires first when both are set), and on request, it asks
// the health monitor for the current owners, pulls every fragment, and when all have arrived
// writes them into its own model and scores fixed validation windows (runtime/eval.hpp: the
// first `windows` for a periodic evaluation, the first `final_windows` — by default the whole
// split — for the final one, whatever the training batch); each result is an "eval" event (val_loss
// in nats/token, the fragment versions, a digest of the global model, the global step). A pull that
// is not answered within `round_timeout_s` (an owner died) is retried. A request (final_eval_atom)
// is answered with (double val_loss, uint64 digest) after a fresh round; the round that answers it
// (the job's final evaluation) also writes the assembled global model to `model_path`
// (runtime/model_file.hpp; a "model_written" event, or a "failure" event and a write failure on the
// event sink when the write fails — the run then fails): before scoring it (metadata "evaluation"
// "none" or "last periodic", no val_loss; then `model_written` is set), so an interrupt that cuts
// the scoring short still leaves the final model, and again once scored ("evaluation" "final").
// Interface: evaluator_hdl (actors/link/protocol.hpp).
//
// Global step (the `every_steps` clock, docs/config.md): the mean of the learners' own inner-step
// counters, Σ_m step_m / M over the M learners of the run (the health monitor's
// membership::global_step, from the learners' heartbeats; a respawned learner resumes its
// counter, a learner not yet joined counts 0). The evaluator asks the monitor for it
// ((get_atom, progress_atom)) every `step_poll_s` and at the start of each round; when it has
// crossed one or more multiples of
// `every_steps` since the last poll, one evaluation starts (none when a round is already in
// flight: that round stands for it; with adaptive_cadence also none within 9 × the last
// evaluation's duration after it ended). Each "eval" event carries the global step as `step`.
// Blocking compute: spawn it detached in the main job.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/response_promise.hpp>
#include <caf/stateful_actor.hpp>

#include "actors/link/protocol.hpp"
#include "actors/services/node_services.hpp"
#include "messages/codec.hpp"
#include "runtime/data.hpp"
#include "runtime/fragments.hpp"
#include "runtime/idx.hpp"
#include "runtime/model.hpp"

namespace dd::actors {

/// Configuration of the evaluator. A plain value; the node's services (event sink, the flags it
/// shares with the job) come separately (evaluator_services, actors/services/node_services.hpp).
struct evaluator_config {
  model_config model;
  fragment_plan plan;
  const text_dataset* data = nullptr;
  /// Image data (data.kind = "idx"): when set, each evaluation scores the whole validation split
  /// in batches of `batch` (vit::evaluate) and reports its accuracy too; `data` is unused.
  const image_dataset* images = nullptr;
  int batch = 16;                  ///< windows per forward pass (changes no window)
  int seq_len = 128;               ///< T
  std::int64_t windows = 128;      ///< windows of each periodic evaluation (the first N)
  std::int64_t final_windows = 0;  ///< windows of the final evaluation; 0 = the whole split
  double every_seconds = 10.0;     ///< cadence in seconds (0 = not by time)
  int every_steps = 0;             ///< cadence in global steps (0 = not by steps; needs `monitor`)
  int learners = 1;                ///< M, the divisor of the global step
  double step_poll_s = 0.25;       ///< how often the global step is asked of the monitor
  double round_timeout_s = 10.0;   ///< retry pulls after this long
  /// Stretch the cadence to 9 × the last evaluation's wall time (off in logical-time runs, where
  /// wall time must not influence the schedule).
  bool adaptive_cadence = true;
  std::string backend = "cpu";
  int threads = 1;
  monitor_hdl monitor;
  /// The run (hex) and the syncer's incarnation: stamped on the evaluator's pulls; the owner
  /// directory and broadcasts it receives must name the run.
  std::string run_id;
  uint64_t syncer_incarnation = 0;
  /// Gets (eval_atom, val_loss) after every evaluation (the job's last validation loss); may be
  /// invalid.
  job_hdl job;
  /// Where the final evaluation's model goes (<run_dir>/model.safetensors); empty = nowhere.
  std::string model_path;
  /// Added to the model file's metadata (run id, experiment, the evaluation's windows as JSON
  /// under "eval"); val_loss, digest and fragment versions are added by the evaluator.
  std::map<std::string, std::string> model_metadata;
};

/// CAF state of the evaluator.
struct evaluator_state {
  std::unique_ptr<kernels::backend> backend;
  std::unique_ptr<dd::model> model;
  chunk_assembler assembler;
  bool in_round = false;
  uint64_t round = 0;
  std::vector<owner_hdl> owners;  ///< per fragment (null: not in the directory)
  std::map<int32_t, std::pair<uint64_t, std::vector<float>>> got;
  std::vector<caf::response_promise> waiting;   ///< answered by the round in flight
  std::vector<caf::response_promise> deferred;  ///< asked mid-round: answered by the next one
  bool waiting_final = false;   ///< `waiting` holds a (eval_atom, true) request: write the model
  bool deferred_final = false;  ///< likewise for `deferred`
  double last_loss = -1.0;
  double last_eval_s = 0.0;       ///< wall seconds of the last evaluation (stretches the cadence)
  double last_eval_end_s = -1.0;  ///< steady-clock seconds when the last evaluation ended
  uint64_t steps_fired = 0;       ///< multiples of every_steps the global step has crossed so far
  double global_step = 0.0;       ///< the monitor's last answer: Σ step / M
  uint64_t tokens = 0;            ///< the monitor's last answer: tokens of every learner
  uint64_t last_digest = 0;
  static inline const char* name = "evaluator";
};

using evaluator_actor = evaluator_hdl::stateful_base<evaluator_state>;

/// The evaluator's behavior.
/// `services`: the node's.
evaluator_hdl::behavior_type evaluator(evaluator_actor* self,
                                       std::shared_ptr<const evaluator_config> config,
                                       evaluator_services services);

/// FNV-1a 64 over the bytes of a float vector (the global model's digest).
uint64_t digest_floats(const std::vector<float>& v);

}  // namespace dd::actors
