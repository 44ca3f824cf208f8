// runtime/config/experiment.hpp — the fully resolved configuration of one experiment.
//
// An `experiment` is what the config DSL (runtime/config/loader.hpp) produces after a file has run
// in the sandbox, overrides have been applied, every default from docs/ALGORITHM.md has been filled
// in and every check has passed. It is a plain copyable value: the main job, the cluster nodes and
// the chaos tool read it; any thread may hold a copy. `to_json` gives the form printed by
// `dd-node resolve` and recorded in run directories; feeding that JSON back through
// `dd::config::load_json` yields the same experiment (the JSON uses the DSL's own keys).
// docs/config.md documents every field (type, default, meaning, paper symbol).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/policy/grace.hpp"
#include "actors/policy/quorum.hpp"
#include "actors/policy/restart_budget.hpp"
#include "messages/encoding.hpp"
#include "runtime/config/fault_kind.hpp"

namespace dd::config {

/// Model family: the dense decoder-only transformer, its mixture-of-experts variant, or the
/// vision transformer (runtime/vit.hpp) for IDX image data
/// (runtime/moe_gpt.hpp).
enum class model_kind : std::uint8_t { gpt, moe_gpt, vit };
/// Text tokenization. `byte`: one token per byte, vocabulary 256.
enum class tokenizer_kind : std::uint8_t { byte };
/// Where a learner runs its math: BLAS on the CPU, CUDA/cuBLAS, or the naive reference kernels.
enum class backend_kind : std::uint8_t { cpu, cuda, reference };
/// Inner learning-rate schedule: linear warmup then cosine decay to min_lr_ratio, or constant.
enum class schedule_kind : std::uint8_t { cosine, constant };
/// Outer optimizer (OuterOpt): Nesterov momentum (DiLoCo recipe) or plain SGD on the merged delta.
enum class outer_kind : std::uint8_t { nesterov, sgd };
/// Merge rule for the pseudo-gradients of one fragment: radial-directional or weighted average.
enum class merge_kind : std::uint8_t { rda, average };
/// What a pseudo-gradient is measured against: the base the learner received, or the owner's
/// current value (the paper's reading).
enum class anchor_kind : std::uint8_t { base, current };
/// How a learner applies an arriving global fragment: overwrite (mixed by α) its local values,
/// or rebase its local progress onto the new value (docs/ALGORITHM.md "Measured changes").
enum class apply_kind : std::uint8_t { overwrite, rebase };
/// What the inner lr schedule counts: the learner's own steps, or the global mean step.
enum class schedule_clock : std::uint8_t { learner, global };
/// What the data files are: a text (byte-tokenized, runtime/data.hpp), an IDX image/label pair
/// for classification (runtime/idx.hpp), or pre-tokenized shards (runtime/token_files.hpp).
enum class data_kind : std::uint8_t { text, idx, tokens };
/// How the train split is divided among learners (runtime/data.hpp).
enum class sharding_kind : std::uint8_t { contiguous, interleaved };
/// How tensors are split into P fragments.
enum class fragment_strategy_kind : std::uint8_t { balanced, layer, strided };
/// Grace window after quorum: adaptive (γ-scaled slack, capped), a fixed number of seconds, or
/// none. The grace policy's own type (actors/policy/grace.hpp).
using grace_mode = policy::grace_mode;
/// Encoding of pushed pseudo-gradients (bf16/int8/int4: blockwise absmax, block 64): the wire's
/// own type (messages/encoding.hpp), spelled fp32, bf16, int8, int4 in the DSL.
using wire_format = payload_encoding;
/// The unit a run's budget is counted in.
enum class budget_kind : std::uint8_t { tokens, steps, seconds };
/// What fires a one-shot chaos event: an inner step, seconds since start, or a fraction of the
/// budget.
enum class chaos_trigger : std::uint8_t { at_step, at_time, at_fraction };
/// Which actors random faults strike.
enum class chaos_target_kind : std::uint8_t { learners, owners, any };
/// Distribution of the time a randomly failed actor stays down.
enum class recovery_dist : std::uint8_t { exponential, fixed, lognormal, weibull };

/// The DSL spelling of an enum value ("rda", "int4", ...).
const char* to_string(model_kind v);
/// \copydoc to_string(model_kind)
const char* to_string(tokenizer_kind v);
/// \copydoc to_string(model_kind)
const char* to_string(backend_kind v);
/// \copydoc to_string(model_kind)
const char* to_string(schedule_kind v);
/// \copydoc to_string(model_kind)
const char* to_string(outer_kind v);
/// \copydoc to_string(model_kind)
const char* to_string(merge_kind v);
/// \copydoc to_string(model_kind)
const char* to_string(anchor_kind v);
/// \copydoc to_string(model_kind)
const char* to_string(apply_kind v);
/// \copydoc to_string(model_kind)
const char* to_string(schedule_clock v);
/// \copydoc to_string(model_kind)
const char* to_string(sharding_kind v);
/// \copydoc to_string(model_kind)
const char* to_string(data_kind v);
/// \copydoc to_string(model_kind)
const char* to_string(fragment_strategy_kind v);
/// \copydoc to_string(model_kind)
const char* to_string(grace_mode v);
/// \copydoc to_string(model_kind)
const char* to_string(budget_kind v);
/// \copydoc to_string(model_kind)
const char* to_string(chaos_trigger v);
/// \copydoc to_string(model_kind)
const char* to_string(chaos_target_kind v);
/// \copydoc to_string(model_kind)
const char* to_string(recovery_dist v);

/// `model`: the network's kind and sizes.
struct model_config {
  model_kind kind = model_kind::gpt;  ///< model family
  int vocab = 256;                    ///< vocabulary size (tokens)
  int context = 128;                  ///< sequence length (tokens)
  int layers = 4;                     ///< transformer blocks
  int heads = 4;                      ///< attention heads; divides width
  int width = 128;                    ///< d_model
  int experts = 4;                    ///< moe_gpt: experts per block E (>= 2)
  int top_k = 1;                      ///< moe_gpt: experts per token k, 1 or 2
  double capacity_factor = 1.25;      ///< moe_gpt: capacity = ceil(factor·k·N/E) tokens
  double aux_loss = 0.01;             ///< moe_gpt: load-balancing loss coefficient
  int rows = 28;                      ///< vit: image height in pixels
  int cols = 28;                      ///< vit: image width in pixels
  int patch = 7;                      ///< vit: patch side; divides rows and cols
  int classes = 10;                   ///< vit: output classes
  std::string pooling = "cls";        ///< vit: "cls" or "mean"
  /// gpt: a directory holding a Hugging Face GPT-2 export (config.json + model.safetensors,
  /// runtime/hf_export.hpp) whose weights start the run; empty = initialize from the seed.
  std::string init_from;
};

/// `data`: the training data (a text, or IDX images and labels) and how it is split.
struct data_config {
  data_kind kind = data_kind::text;  ///< text (`file`), idx (`images` + `labels`), tokens (`files`)
  std::string file;                  ///< kind text: resolved path of the text file (required)
  std::vector<std::string> files;    ///< kind tokens: resolved token files, globs expanded
  std::vector<std::string> validation_files;  ///< kind tokens: the validation split's files
  std::string format = "llmc";                ///< kind tokens: llmc, uint16 or uint32
  std::string images;           ///< kind idx: resolved path of the IDX images (n, rows, cols)
  std::string labels;           ///< kind idx: resolved path of the IDX labels (n)
  double train_fraction = 0.9;  ///< leading share used for training; the rest is validation
  sharding_kind sharding = sharding_kind::interleaved;  ///< learners' shards (runtime/data.hpp)
  /// "byte" (one token per byte), or the resolved path of a SentencePiece model written by
  /// `dd-node tokenize` (kind tokens: decodes samples, gives bits per byte).
  std::string tokenizer = "byte";
};

/// `learners`: how many learners (M), where they run and how fast each is.
struct learners_config {
  int count = 4;                             ///< M, the number of learners
  int batch = 16;                            ///< sequences per inner step, per learner
  backend_kind backend = backend_kind::cpu;  ///< kernel backend
  std::vector<std::vector<int>> devices;     ///< per learner: device ordinals; empty = automatic
  int threads = 0;                           ///< BLAS/OpenMP threads per learner; 0 = automatic
  std::vector<double> speed;                 ///< per learner slowdown factor >= 1 (size == count)
  double jitter = 0.0;                       ///< random step-time spread, fraction in [0, 1)
};

/// `inner`: the learners' AdamW (InnerOpt) and its learning-rate schedule.
struct inner_config {
  double lr = 2e-3;                                ///< peak learning rate
  int warmup = 100;                                ///< warmup steps
  schedule_kind schedule = schedule_kind::cosine;  ///< schedule after warmup
  double min_lr_ratio = 0.1;                       ///< final lr / peak lr (cosine)
  std::int64_t decay_steps = 0;  ///< cosine length in steps (resolved from budget)
  double beta1 = 0.9;            ///< AdamW β1
  double beta2 = 0.95;           ///< AdamW β2
  double eps = 1e-8;             ///< AdamW ε
  double weight_decay = 0.1;     ///< decoupled weight decay
  double grad_clip = 1.0;        ///< global gradient-norm clip; 0 = off
  int rewarmup = 20;             ///< warmup steps after a respawn
  schedule_clock clock = schedule_clock::learner;  ///< what the lr schedule counts
};

/// `outer`: the fragment owners' merge and outer optimizer (OuterOpt).
struct outer_config {
  outer_kind kind = outer_kind::nesterov;            ///< outer optimizer
  double lr = 0.7;                                   ///< outer learning rate
  double momentum = 0.9;                             ///< Nesterov momentum μ
  merge_kind merge = merge_kind::rda;                ///< merge rule for ordinary tensors
  merge_kind embedding_merge = merge_kind::average;  ///< merge rule for embedding tensors
  anchor_kind anchor =
      anchor_kind::current;  ///< pseudo-gradient anchor (measured: docs/ALGORITHM.md)
  apply_kind apply = apply_kind::overwrite;  ///< how learners apply arriving fragments
  double mixing_alpha = 0.0;                 ///< α: θ ← αθ + (1-α)·global (overwrite only)
  int max_staleness = 4;                     ///< versions a push may lag before rejection
  bool token_weighting = true;               ///< w = tokens²/steps (false: w = 1)
  bool scale_partial_merges = false;         ///< Δ × contributors / live learners
};

/// Min quorum K: an absolute count of learners or a fraction of the live learners — the quorum
/// policy's own type (actors/policy/quorum.hpp). DSL: an integer count, or fraction(x).
using quorum = policy::quorum_spec;

/// `sync.grace`: the grace window ξ_grace after quorum — the grace policy's own configuration
/// (actors/policy/grace.hpp). DSL keys: mode, gamma, max_factor, fixed_seconds (→ fixed_s);
/// grace_max_s is not a key (it stays < 0: the cap is max_factor × ξ_step).
using grace_config = policy::grace_config;

/// `sync`: fragments and the synchronization knobs.
struct sync_config {
  int fragments = 4;                                                   ///< P
  fragment_strategy_kind strategy = fragment_strategy_kind::balanced;  ///< fragmentation
  int interval = 24;                                                   ///< H, inner steps
  int overlap = 2;                                                     ///< τ, inner steps
  int max_inflight = 2;  ///< queued pushes per learner
  /// At its last step (budget or stop) a learner pushes every fragment it trained since the
  /// fragment's last global value and whose previous push is settled, so the final model holds
  /// every learner's last steps (off: only the fragments the schedule makes due).
  bool final_push = false;
  /// Credit window: chunks in flight per link (learner -> owner pushes, owner -> learner
  /// broadcasts), 1..1024; the same as dd::policy::default_window_chunks.
  int window_chunks = 8;
  /// What the push schedule counts; unset: experiment::push_clock() decides by K.
  std::optional<schedule_clock> push_clock;
  quorum min_quorum;                     ///< K
  grace_config grace;                    ///< ξ_grace
  double ema = 0.2;                      ///< EMA smoothing of ξ timings
  wire_format wire = wire_format::fp32;  ///< push encoding
  /// Broadcast encoding: fp32 sends the global model exactly; bf16/int8/int4 round the value
  /// every learner receives (the owners keep theirs exact).
  wire_format broadcast_wire = wire_format::fp32;
  /// An owner refuses a push whose ‖Δ‖ exceeds this × the median of its recently accepted
  /// norms (0 = off).
  double max_norm_ratio = 10.0;
};

/// `eval`: how often the evaluator measures validation loss of the global model.
struct eval_config {
  double every_seconds = 10.0;  ///< wall-clock cadence; 0 = not by time
  int every_steps = 0;          ///< cadence in mean learner inner steps; 0 = not by steps
  /// Windows of the final evaluation (runtime/eval.hpp: the first N windows of context + 1
  /// tokens of the validation split, whatever the batch); 0 = every window, the whole split.
  std::int64_t windows = 0;
  /// Windows of each periodic evaluation: the same fixed first N for every experiment.
  std::int64_t periodic_windows = 128;
  /// Deprecated spelling (0 = unset): when set, both evaluations score batches ×
  /// learners.batch windows, as before eval.windows existed.
  int batches = 0;
};

/// `budget`: when the run stops. Exactly one unit is set.
struct budget_config {
  budget_kind kind = budget_kind::steps;  ///< which unit
  std::int64_t tokens = 0;                ///< total training tokens over all learners (kind tokens)
  std::int64_t steps = 600;               ///< inner steps per learner (kind steps)
  double seconds = 0.0;                   ///< wall-clock seconds (kind seconds)
};

/// `checkpoint`: where and how often fragment owners checkpoint.
struct checkpoint_config {
  std::string dir;         ///< checkpoint directory (default <run_dir>/checkpoints)
  int every_versions = 5;  ///< checkpoint every this many fragment versions; 0 = off
  /// A fragment owner that found neither a usable checkpoint nor a learner's copy restarts that
  /// fragment from the initial weights; the run is then `degraded` (summary.json) and fails
  /// (exit 1) unless this is true.
  bool allow_degraded = false;
  /// Seconds a respawned or resumed fragment owner waits for the live learners to say which
  /// version of its fragment they hold (it stops waiting as soon as every live learner — after
  /// a resume, every learner of the run — has answered).
  double rebuild_wait_seconds = 10.0;
  /// Cluster nodes (dd-node syncer): seconds a write (events.jsonl, an owner checkpoint) may
  /// keep failing — retried with backoff, the run marked degraded — before the node ends the
  /// run with exit status 1. (`dd-node run` ends the run at the first failed write.)
  double max_failing_seconds = 60.0;
};

/// `restart`: the supervisors' restart budget, for learners and fragment owners alike (OTP
/// style: at most `max_restarts` in any sliding window; actors/policy/restart_budget.hpp). A
/// child that would exceed it stays down: a learner's loss or an owner's loss fails the run.
/// The restart budget's own configuration (actors/policy/restart_budget.hpp). DSL keys:
/// max_restarts, window_seconds (→ window_s), backoff_seconds (→ backoff_base_s),
/// backoff_cap_seconds (→ backoff_cap_s); stable_after_s is not a key (it stays < 0: the window).
using restart_config = policy::restart_config;

/// One scripted fault in `chaos.events`.
struct chaos_event {
  chaos_trigger trigger = chaos_trigger::at_step;  ///< what `at` counts
  double at = 0.0;  ///< step, seconds since start, or fraction of the budget
  fault_kind action = fault_kind::kill_learner;  ///< the fault (fault_kind.hpp)
  int target = 0;         ///< learner id (0-based) or, for kill_owner, fragment id
  double factor = 1.0;    ///< slow: step-time multiplier (>= 1); scale_push: value multiplier
  double delay = 0.0;     ///< delay_push: seconds each push is held
  double duration = 0.0;  ///< seconds the fault lasts (kill: downtime); 0 = see docs
  /// kill_owner: also damage the owner's checkpoint file as it dies (bytes in its body
  /// overwritten, so its CRC no longer matches): the respawned owner must rebuild.
  bool damage_checkpoint = false;
  /// Process and network kinds: the dd-chaos target ("learner:1", "node:syncer", "learners",
  /// a link name); empty = "learner:<target>".
  std::string target_spec;
  /// Knobs of the kinds that take them, by DSL key: count (message kinds), seed (random_push,
  /// disk_corrupt), ms, jitter, rate, p, size, delay_us, bytes, dir (network), duty, period
  /// (slow_process). Only keys given.
  nlohmann::json params = nlohmann::json::object();
  /// "file:line" of the event in its experiment file (messages; not part of to_json).
  std::string where;
};

/// `chaos.random.recovery`: how long a randomly failed actor stays down.
struct recovery_config {
  recovery_dist dist = recovery_dist::exponential;  ///< distribution
  double mean = 5.0;                                ///< mean downtime in seconds
  double sigma = 0.5;                               ///< lognormal σ of log-downtime
  double shape = 1.5;                               ///< weibull shape k (> 0)
};

/// `chaos.random`: faults drawn from a mean time between failures.
struct random_faults_config {
  double mtbf_seconds = 0.0;                               ///< per-actor MTBF; 0 = off
  chaos_target_kind target = chaos_target_kind::learners;  ///< who fails
  recovery_config recovery;                                ///< downtime distribution
  std::uint64_t seed = 0;                                  ///< RNG seed (default: experiment seed)
  /// Whole-cluster MTBF, seconds (0 = off): Poisson arrivals over every target together,
  /// drawn and fired by dd-chaos (`dd-node launch` starts it; `dd-node run` refuses it).
  double cluster_mtbf_seconds = 0.0;
  /// cluster_mtbf_seconds: fault kinds drawn uniformly (of the process and network layers;
  /// default {kill}, spelled "kill_process" in the DSL).
  std::vector<fault_kind> kinds;
  double min_gap_seconds = 0.0;  ///< cluster_mtbf_seconds: least seconds between two fault starts
  int max_concurrent =
      1;  ///< cluster_mtbf_seconds: faults active at once (arrivals above: skipped)
  /// cluster_mtbf_seconds: seconds of schedule (0 = the budget's seconds, else 3600).
  double horizon_seconds = 0.0;
  /// "file:line" of the `chaos.random` table (messages; not part of to_json).
  std::string where;
};

/// `chaos`: the failure schedule.
struct chaos_config {
  std::vector<chaos_event> events;  ///< one-shot faults
  random_faults_config random;      ///< random faults
};

/// One fully resolved experiment.
struct experiment {
  std::string name;              ///< unique within its file; used in run_dir
  std::string description;       ///< free text
  std::string source;            ///< "file:line" of the experiment{} call (informational)
  std::uint64_t seed = 1234;     ///< the one seed everything random derives from
  std::string run_dir;           ///< default runs/<name>
  model_config model;            ///< model
  data_config data;              ///< data
  learners_config learners;      ///< learners
  inner_config inner;            ///< inner optimizer
  outer_config outer;            ///< outer optimizer and merge
  sync_config sync;              ///< synchronization
  eval_config eval;              ///< evaluation
  budget_config budget;          ///< budget
  checkpoint_config checkpoint;  ///< checkpoints
  restart_config restart;        ///< supervisors' restart budget
  chaos_config chaos;            ///< failure schedule

  /// The push schedule's clock: sync.push_clock when set, otherwise the global mean step when
  /// learners run asynchronously (K < M) and the learner's own step when synchronous (K = M),
  /// whose lockstep defines the Streaming DiLoCo baseline (docs/runtime.md, "Push schedule").
  schedule_clock push_clock() const {
    if (sync.push_clock) return *sync.push_clock;
    return sync.min_quorum.synchronous(static_cast<std::size_t>(learners.count))
               ? schedule_clock::learner
               : schedule_clock::global;
  }

  /// Tokens one learner consumes per inner step: batch × context; for image data (data.kind =
  /// "idx") a "token" is one image, so batch.
  std::int64_t tokens_per_step() const {
    return static_cast<std::int64_t>(learners.batch) *
           (data.kind == data_kind::idx ? 1 : model.context);
  }
};

/// The resolved JSON form (DSL keys, every default present). `source` is omitted.
nlohmann::json to_json(const experiment& e);

}  // namespace dd::config
