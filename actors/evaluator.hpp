// actors/evaluator.hpp — assembles the global model from the fragment owners on a schedule and
// measures its validation loss on the held-out split.
//
// Promises: every `every_seconds` — stretched to 9 × the last evaluation's duration when that is
// longer, so evaluation takes at most ~10% of the machine — (and on request) it asks the health monitor for the current
// owners, pulls every fragment, and when all have arrived writes them into its own model and
// evaluates `batches` fixed validation batches (runtime/eval.hpp); each result is an "eval"
// event (val_loss in nats/token, the fragment versions, a digest of the global model). A pull
// that is not answered within `round_timeout_s` (an owner died) is retried. A request
// (eval_atom, true) is answered with (double val_loss, uint64 digest) after a fresh round.
// Blocking compute: spawn it detached in the main job.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/response_promise.hpp>
#include <caf/stateful_actor.hpp>

#include "messages/codec.hpp"
#include "runtime/data.hpp"
#include "runtime/fragments.hpp"
#include "runtime/gpt.hpp"

namespace dd::actors {

class run_log;

/// Configuration of the evaluator.
struct evaluator_context {
  gpt_config model;
  fragment_plan plan;
  const text_dataset* data = nullptr;
  int batch = 16;                ///< B of a validation batch
  int seq_len = 128;             ///< T
  int batches = 8;               ///< validation batches per evaluation
  double every_seconds = 10.0;   ///< cadence (0 = only on request)
  double round_timeout_s = 10.0; ///< retry pulls after this long
  /// Stretch the cadence to 9 × the last evaluation's wall time (off in logical-time runs, where
  /// wall time must not influence the schedule).
  bool adaptive_cadence = true;
  std::string backend = "cpu";
  int threads = 1;
  caf::actor monitor;
  run_log* log = nullptr;
};

/// CAF state of the evaluator.
struct evaluator_state {
  std::unique_ptr<kernels::backend> backend;
  std::unique_ptr<gpt> model;
  chunk_assembler assembler;
  bool in_round = false;
  uint64_t round = 0;
  std::vector<caf::actor> owners;
  std::map<int32_t, std::pair<uint64_t, std::vector<float>>> got;
  std::vector<caf::response_promise> waiting;   ///< answered by the round in flight
  std::vector<caf::response_promise> deferred;  ///< asked mid-round: answered by the next one
  double last_loss = -1.0;
  double last_eval_s = 0.0;  ///< wall seconds of the last evaluation (stretches the cadence)
  uint64_t last_digest = 0;
  static inline const char* name = "evaluator";
};

using evaluator_actor = caf::stateful_actor<evaluator_state>;

/// The evaluator's behavior.
caf::behavior evaluator(evaluator_actor* self, std::shared_ptr<const evaluator_context> ctx);

/// FNV-1a 64 over the bytes of a float vector (the global model's digest).
uint64_t digest_floats(const std::vector<float>& v);

}  // namespace dd::actors
