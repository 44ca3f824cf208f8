// runtime/data.hpp — text data for language-model training: the train/validation split, each
// learner's deterministic shard, and a resumable batch stream.
//
// Scheme (ours; documented because respawned learners depend on it):
//  * split: tokens [0, floor(0.9·n)) are train, the rest validation (byte tokenizer).
//  * shard: learner i of M owns train tokens [floor(i·n/M), floor((i+1)·n/M)) — contiguous,
//    disjoint, covering the train split.
//  * epoch e of learner i: an offset o_e ∈ [0, T) and a permutation π_e of the shard's windows
//    w_k = shard[o_e + k·T, o_e + k·T + T + 1) (inputs = first T, targets = last T), both drawn
//    from dd::rng(derive_seed(derive_seed(seed, learner), e)). A batch takes the next B windows
//    in π_e order, rolling into epoch e+1 when e runs out.
//  * cursor = (seed, learner, learners, seq_len, epoch, position in π_e): enough to resume
//    exactly, because π_e is recomputed from the seed and epoch.
//  * interleaved layout (shard_layout::interleaved): instead of a contiguous shard, learner i
//    owns the windows k ≡ i (mod M) of the whole train split, w_k = train[o_e + k·T, … + T + 1)
//    with o_e drawn per epoch from dd::rng(derive_seed(derive_seed(seed, 0x696c), e)) (the same
//    for every learner, so within an epoch the learners' windows are disjoint); π_e permutes the
//    learner's windows as above. Every learner then sees the same distribution of the text — a
//    contiguous shard of a non-IID text (Tiny Shakespeare: plays in order, validation = the end)
//    gives each learner its own distribution, which biases the model towards the faster
//    learners' shards when learners run at different speeds.
// Who may call: the owner of a batch_stream (one learner thread); text_dataset is immutable after
// loading and may be shared read-only between threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/token_files.hpp"

namespace dd {

/// A tokenized text file split into train and validation parts. Immutable after construction.
class text_dataset {
 public:
  /// Reads and byte-tokenizes `path`. Throws std::runtime_error naming the file when it is
  /// missing, unreadable, empty, or too short to give both splits at least 2 tokens.
  /// `train_fraction` ∈ (0, 1) (default 0.9).
  static text_dataset from_file(const std::string& path, double train_fraction = 0.9);
  /// Same from an in-memory text (tests); `origin` names it in errors.
  static text_dataset from_text(const std::string& text, double train_fraction = 0.9,
                                const std::string& origin = "<memory>");
  /// Pre-tokenized data (data.kind = "tokens", runtime/token_files.hpp): the train split is the
  /// tokens of `train_files` in order; the validation split is the tokens of `val_files` when
  /// that list is not empty, else the last (1 − train_fraction) of the train files' tokens.
  /// Throws std::runtime_error naming the file for a bad token file (read_token_file), and
  /// naming the files when a split would have fewer than 2 tokens.
  static text_dataset from_token_files(const std::vector<std::string>& train_files,
                                       const std::vector<std::string>& val_files,
                                       token_format format, int vocab, double train_fraction);

  const std::vector<int32_t>& train() const noexcept { return train_; }
  const std::vector<int32_t>& validation() const noexcept { return val_; }
  const std::string& origin() const noexcept { return origin_; }

 private:
  std::string origin_;
  std::vector<int32_t> train_, val_;
};

/// How the train split is divided among learners (see the file comment).
enum class shard_layout : uint8_t { contiguous, interleaved };

/// A learner's slice of the train split: tokens [begin, end).
struct shard_range {
  size_t begin = 0;
  size_t end = 0;
  size_t size() const noexcept { return end - begin; }
};

/// Learner `learner` of `learners`: [floor(i·n/M), floor((i+1)·n/M)). Throws
/// std::invalid_argument unless 0 <= learner < learners.
shard_range shard_of(size_t n_train, int learner, int learners);

/// Position of a batch stream; see the file comment. Plain value, serializable.
struct data_cursor {
  uint64_t seed = 0;
  int learner = 0;
  int learners = 1;
  int seq_len = 0;
  int64_t epoch = 0;
  int64_t position = 0;  ///< windows already consumed in this epoch

  /// {"seed": "<decimal string>", "learner", "learners", "seq_len", "epoch", "position"}; the
  /// seed is a string because JSON numbers lose 64-bit precision in many readers.
  nlohmann::json to_json() const;
  /// Throws std::invalid_argument naming a missing or mistyped field.
  static data_cursor from_json(const nlohmann::json& j);
  /// 40 bytes: magic "DDC1", then seed u64, learner i32, learners i32, seq_len i32, epoch i64,
  /// position i64, little-endian... (exact layout in data.cpp).
  std::vector<uint8_t> to_bytes() const;
  /// Throws std::invalid_argument when the size or magic is wrong.
  static data_cursor from_bytes(const std::vector<uint8_t>& bytes);
  /// Throws std::invalid_argument naming the first of seed, learner, learners, seq_len that
  /// differs from `stream`'s (the cursor of the stream restoring this one; `seq_len_name` is
  /// how the error names seq_len), or a negative epoch.
  void check_fits(const data_cursor& stream, const char* seq_len_name) const;
  bool operator==(const data_cursor& o) const {
    return seed == o.seed && learner == o.learner && learners == o.learners &&
           seq_len == o.seq_len && epoch == o.epoch && position == o.position;
  }
};

class rng;

/// The rng of learner `learner`'s epoch `epoch` (see the file comment); it draws the epoch's
/// order with shuffled_order.
rng epoch_rng(uint64_t seed, int learner, int64_t epoch);

/// order ← a permutation of [0, n): Fisher–Yates, high to low, drawing from r.
void shuffled_order(rng& r, size_t n, std::vector<uint32_t>& order);

/// Yields (B, T) batches of one learner's shard. Holds a reference to the dataset, which must
/// outlive it.
class batch_stream {
 public:
  /// Throws std::invalid_argument for bad learner/learners, T < 1, or a shard shorter than
  /// 2·T + 1 tokens (interleaved: a train split with fewer than 2·M + 1 windows), naming the
  /// dataset and sizes.
  batch_stream(const text_dataset& data, int learner, int learners, int T, uint64_t seed,
               shard_layout layout = shard_layout::contiguous);

  /// Fills inputs and targets with B·T token ids each (row-major (B, T)); targets[b,t] =
  /// inputs[b,t+1] within a window. Advances the cursor by B windows.
  void next(int B, std::vector<int32_t>& inputs, std::vector<int32_t>& targets);

  /// Where the stream stands now.
  data_cursor cursor() const;
  /// Jumps to a saved cursor. Throws std::invalid_argument naming the field when seed, learner,
  /// learners or seq_len differ from this stream's, or epoch/position are negative/out of range.
  void restore(const data_cursor& c);

  /// Where each window of the last next() started, as token offsets in the train split (B
  /// values; what a data trace records).
  const std::vector<size_t>& last_starts() const noexcept { return last_starts_; }

  /// Windows per epoch (for this stream's current epoch).
  size_t windows_in_epoch() const noexcept { return order_.size(); }

 private:
  void start_epoch(int64_t epoch);

  const text_dataset* data_;
  shard_range shard_;
  int learner_, learners_, T_;
  shard_layout layout_ = shard_layout::contiguous;
  uint64_t seed_;
  int64_t epoch_ = 0;
  int64_t position_ = 0;
  size_t offset_ = 0;
  std::vector<uint32_t> order_;
  std::vector<size_t> last_starts_;
};

}  // namespace dd
