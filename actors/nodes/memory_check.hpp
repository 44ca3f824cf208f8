// actors/nodes/memory_check.hpp — what a run needs in memory, estimated from its experiment before
// anything starts, and the check of that estimate against the machine (docs/operating.md
// "Memory").
//
// The estimate follows what the code allocates (runtime/gpt.cpp ensure_activations,
// runtime/transformer_block.cpp, runtime/adamw.hpp, actors/roles/owner_core.hpp): per learner
// its parameters and gradients, AdamW's two moments, the fragment copies it syncs with, and the
// activations of one (learners.batch, model.context) batch — where the attention matrices,
// batch × heads × context² floats per layer and twice more for the backward scratch, dominate a
// long context; per fragment owner its value, momentum and one pending delta per learner; the
// evaluator a model and the activations of one batch. `dd-node resolve` prints it; `dd-node
// run`, `syncer`, `launch` and `learner` refuse a run whose process would need more than the
// memory the machine has available or the address-space limit (RLIMIT_AS) allows, with headroom
// for BLAS buffers, thread stacks and the binary, unless `--force-memory` is given.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/config/experiment.hpp"

namespace dd::actors {

/// One role's bytes, by what holds them.
struct memory_part {
  uint64_t parameters = 0;   ///< the model's (or fragment's) values
  uint64_t optimizer = 0;    ///< gradients and AdamW moments, or the outer momentum
  uint64_t activations = 0;  ///< one batch's forward and backward buffers
  uint64_t buffers = 0;      ///< fragment copies, pending deltas, messages in flight
  uint64_t total() const noexcept { return parameters + optimizer + activations + buffers; }
  nlohmann::json to_json() const;
};

/// The estimate of a whole experiment.
struct memory_estimate {
  memory_part learner;    ///< one learner
  memory_part owner;      ///< one fragment owner (of the largest fragment)
  memory_part evaluator;  ///< the evaluator
  int learners = 0;       ///< M
  int owners = 0;         ///< P
  uint64_t data = 0;      ///< the data file(s), held once per process
  /// A syncer node: every owner, the evaluator and the data.
  uint64_t syncer() const noexcept;
  /// A learner node with `here` learners and the data.
  uint64_t learner_node(int here) const noexcept;
  /// `dd-node run`: everything in one process.
  uint64_t whole_run() const noexcept;
  /// {"learner": {...}, "owner": {...}, "evaluator": {...}, "data": N, "syncer_node": N,
  ///  "learner_node": N (one learner), "whole_run": N}: bytes.
  nlohmann::json to_json() const;
};

/// The estimate of `e` (sizes of data files read from disk; 0 for one that cannot be read).
memory_estimate estimate_memory(const config::experiment& e);

/// What the machine allows this process: MemAvailable of /proc/meminfo and RLIMIT_AS's soft
/// limit, bytes (0 = unknown or unlimited).
struct memory_limits {
  uint64_t available = 0;
  uint64_t address_space = 0;
};
memory_limits read_memory_limits();

/// Headroom a process needs beyond the estimate: against available memory 256 MiB (the binary,
/// CAF, buffers); against the address-space limit 1 GiB plus 64 MiB per compute thread (thread
/// stacks and OpenBLAS's per-thread buffers are mapped, not touched).
inline constexpr uint64_t memory_headroom = uint64_t{256} << 20;
uint64_t address_space_headroom(int threads);

/// "" when a process of `what` (e.g. "this run (4 learners, 4 owners, the evaluator)") needing
/// `need` bytes with `threads` compute threads fits `limits`; else why not, naming both figures
/// and the flag that overrides the check.
std::string memory_refusal(const std::string& what, uint64_t need, int threads,
                           const memory_limits& limits);

/// What the loader cannot check because it needs the model's tensors: "sync.fragments: ..."
/// when the fragment plan cannot be made (more fragments than tensors, or than blocks for the
/// `layer` strategy); "" when it can.
std::string fragment_plan_error(const config::experiment& e);

/// Which process a start check is for.
enum class start_check_for { whole_run, syncer_node, launch, learner_node };

/// The check `dd-node run`, `syncer`, `launch` and `learner` make before anything starts: the
/// fragment plan (always), and unless `force` the memory of `who` (`learners_here`: a learner
/// node's learners) against read_memory_limits() — host memory only: learners on `cuda` count
/// their host-side buffers, not the model, optimizer and activations on the device. "" when it
/// may start; else the refusal.
std::string check_before_start(const config::experiment& e, start_check_for who, int learners_here,
                               bool force);

/// The estimate in lines for people: per learner, per owner, the evaluator, and what dd-node run,
/// a syncer node and a one-learner node need; then whether `limits` allow the whole run.
std::string describe(const memory_estimate& est, const memory_limits& limits, int threads);

/// Bytes as "1.23 GiB" / "45.6 MiB".
std::string format_bytes(uint64_t bytes);

}  // namespace dd::actors
