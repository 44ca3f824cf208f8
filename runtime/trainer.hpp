// runtime/trainer.hpp — the single-learner inner step loop, driven step by step by its caller:
// one inner step = next batch of the learner's shard → forward → backward → global-norm clip →
// AdamW with the scheduled learning rate (ALGORITHM.md, learner loop, "inner AdamW step").
// The `dd-node train` command and the learner actor both use it (the learner through step(lr)); the
// caller decides when to step, evaluate, checkpoint, push or apply fragments. Owned by one thread
// (the learner's).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "kernels/backend.hpp"
#include "runtime/adamw.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/data.hpp"
#include "runtime/idx.hpp"
#include "runtime/lr_schedule.hpp"
#include "runtime/model.hpp"
#include "runtime/rng.hpp"

namespace dd {

/// The seed of a learner's batch stream (text, tokens or images) for the experiment seed `seed`:
/// derive_seed(seed, "data"). The trainer draws with it, and the job's up-front shard checks
/// build the same streams with it.
inline uint64_t data_stream_seed(uint64_t seed) { return derive_seed(seed, 0x64617461); }

/// Everything a trainer needs besides the backend and the data.
struct trainer_config {
  model_config model;    ///< kind and shape (make_model)
  int batch = 16;        ///< B: sequences per inner step
  int seq_len = 128;     ///< T: tokens per sequence (<= model.context)
  lr_schedule schedule;  ///< on this learner's own step counter
  adamw_config optimizer;
  double grad_clip = 1.0;  ///< global grad-norm limit; <= 0 disables clipping
  uint64_t seed = 1337;    ///< model init = model::init(seed); data stream: data_stream_seed(seed)
  int learner = 0;         ///< this learner's index i (data shard i of M)
  int learners = 1;        ///< M
  /// Contiguous shards (ALGORITHM.md) or interleaved windows of the whole train split.
  shard_layout sharding = shard_layout::contiguous;

  /// Throws std::invalid_argument naming the field when out of range.
  void validate() const;
};

/// What one inner step did.
struct step_result {
  int64_t step = 0;        ///< the step's 0-based index (before the increment)
  double loss = 0.0;       ///< mean train loss of the batch, nats/token
  double grad_norm = 0.0;  ///< global gradient norm before clipping
  double lr = 0.0;         ///< learning rate applied
  int64_t tokens = 0;      ///< tokens in the batch (B·T)
  double seconds = 0.0;    ///< wall time of the step
  bool applied = true;     ///< false when the loss or gradient was non-finite: no update was made
};

/// One learner's model, optimizer and data stream.
class trainer {
 public:
  /// Builds the model on `be`, initializes it from cfg.seed, zeroes the moments, and positions
  /// the data stream at the start of shard cfg.learner of cfg.learners. `be` and `data` must
  /// outlive the trainer. Throws std::invalid_argument for a bad config or too-small shard.
  trainer(kernels::backend& be, const text_dataset& data, const trainer_config& cfg);
  /// The same over image data (runtime/idx.hpp; a model that reads features, e.g. kind "vit"):
  /// batches are (B) images as features (B, rows·cols pixel values 0..255) with labels (B), T =
  /// 1 (cfg.seq_len is ignored and reported as 1). The image stream's seed is derived from
  /// cfg.seed as the text stream's. Throws std::invalid_argument for a bad config, a too-small
  /// shard, or images whose size or class count differ from cfg.model's (naming both).
  trainer(kernels::backend& be, const image_dataset& data, const trainer_config& cfg);

  /// Fills `batch` with this learner's next training batch (text: inputs/targets (B, T); images:
  /// features/targets, T = 1) and advances the data cursor. What step() trains on. With the
  /// environment variable DD_DATA_TRACE=FILE set, each text batch appends one JSON line to FILE
  /// (learner, step, cursor epoch/position before it, each window's start; trainer.cpp).
  void next_batch(model_batch& batch);
  /// The data stream's cursor (text or image stream), what checkpoints and heartbeats carry.
  data_cursor cursor() const;
  /// Jumps the data stream to `c`; throws std::invalid_argument as batch_stream::restore /
  /// image_stream::restore do.
  void restore_cursor(const data_cursor& c);
  /// True when the trainer reads image data.
  bool images() const noexcept { return image_data_ != nullptr; }

  /// One inner step with the schedule's learning rate at steps_done(). When the loss or the
  /// gradient norm is not finite the update is skipped, the step counter is not advanced (the
  /// batch is consumed) and applied = false.
  step_result step() { return step(cfg_.schedule.at(step_)); }
  /// The same with learning rate `lr` (the learner's: a global lr clock, a re-warmup).
  step_result step(double lr);

  /// Validation loss (nats/token) over `batches` fixed batches of (batch, seq_len); see
  /// evaluate_loss. Image data: loss (nats/image) over the whole validation split (`batches` is
  /// ignored; evaluate_metric() also gives the accuracy). Leaves the gradients untouched.
  double evaluate(int batches);
  /// Loss and accuracy: image data, the whole validation split in batches of cfg.batch
  /// (vit::evaluate); text data, evaluate(batches) with accuracy NaN.
  batch_metric evaluate_metric(int batches);

  /// Saves model, AdamW moments, step counter, data cursor, seed and config to `path`
  /// (safetensors, atomic). `extra` entries are added to the metadata.
  void save(const std::string& path, const std::map<std::string, std::string>& extra = {}) const;
  /// Restores everything save() wrote; the model config and data stream must match this trainer
  /// (else std::runtime_error naming the file and the field). A damaged file (dd_crc32c wrong)
  /// is refused, as is one without a checksum when `options.require_checksum`. Returns the
  /// metadata (no st_checksum_key in it: the file carried no checksum).
  std::map<std::string, std::string> load(const std::string& path,
                                          const st_read_options& options = {});

  /// Fresh AdamW moments (a respawned learner, ALGORITHM.md Recovery). Keeps the step counter.
  void reset_optimizer() { opt_.reset(); }

  /// Inner steps completed (drives the schedule).
  int64_t steps_done() const noexcept { return step_; }
  /// Sets the step counter (a respawned learner resumes the one the syncer recorded).
  void set_steps_done(int64_t s) noexcept { step_ = s; }
  /// Tokens trained on so far (B·T per applied or skipped step).
  int64_t tokens_seen() const noexcept { return tokens_; }

  dd::model& model() noexcept { return *model_; }
  const dd::model& model() const noexcept { return *model_; }
  adamw& optimizer() noexcept { return opt_; }
  /// The text stream. Throws std::logic_error for a trainer over image data.
  batch_stream& data();
  const trainer_config& config() const noexcept { return cfg_; }

 private:
  trainer_config cfg_;
  const text_dataset* data_ = nullptr;
  const image_dataset* image_data_ = nullptr;
  std::unique_ptr<dd::model> model_;
  adamw opt_;
  std::optional<batch_stream> stream_;        // text data
  std::optional<image_stream> image_stream_;  // image data
  int64_t step_ = 0;
  int64_t tokens_ = 0;
  model_batch batch_;
};

}  // namespace dd
