// runtime/idx.hpp — image classification data in the IDX format (LeCun et al., "The MNIST
// database": magic 0x00 0x00 <type> <ndims>, then ndims big-endian u32 sizes, then the data),
// gzip-compressed or not (read through zlib, which reads plain files unchanged).
//
// Scheme (ours; documented because respawned learners depend on it):
//  * split: samples [0, floor(f·n)) are train, the rest validation, f = train_fraction (the
//    MNIST example: f = 0.8 of the 10,000 t10k images, so images 0..7,999 train and
//    8,000..9,999 validation).
//  * shard: learner i of M owns train samples [floor(i·n/M), floor((i+1)·n/M)) (shard_of()).
//    Interleaved layout: learner i owns the train samples k ≡ i (mod M) instead.
//  * epoch e of learner i: a permutation π_e of the shard's samples drawn from
//    dd::rng(derive_seed(derive_seed(seed, learner), e)) (Fisher–Yates, high to low, as the
//    text loader); a batch takes the next B samples in π_e order, rolling into epoch e+1.
//  * cursor: a dd::data_cursor (the text loader's: same JSON and byte forms) with
//    seq_len = rows·cols (the pixels of one sample) and position = samples consumed in epoch.
// A batch is handed to the model as int32 values: pixels (B, rows·cols) in [0, 255] row-major,
// labels (B) in [0, classes).
// Who may call: the owner of an image_stream (one learner thread); image_dataset is immutable
// after loading and may be shared read-only between threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/data.hpp"

namespace dd {

/// One IDX array of unsigned bytes (type code 0x08): its sizes and its values, row-major.
struct idx_array {
  std::vector<uint32_t> dims;  ///< e.g. {10000, 28, 28} for images, {10000} for labels
  std::vector<uint8_t> data;   ///< product(dims) values
};

/// Reads an IDX file of unsigned bytes, gzip-compressed or plain. Throws std::runtime_error
/// naming the file and the problem when it cannot be opened, is not valid gzip, has a wrong
/// magic (first two bytes not zero), a type other than 0x08 (unsigned byte), zero dimensions or
/// a zero size, is truncated (fewer data bytes than the header announces) or has trailing bytes.
idx_array read_idx(const std::string& path);

/// Parses IDX bytes already in memory (tests); `origin` names them in errors. Same checks.
idx_array parse_idx(const std::vector<uint8_t>& bytes, const std::string& origin);

/// Images (n, rows, cols) with one label each, split into train and validation (file comment).
/// Immutable after construction.
class image_dataset {
 public:
  /// Reads both IDX files. Throws std::runtime_error naming the file when read_idx() does, when
  /// the images are not 3-D (n, rows, cols) or the labels not 1-D (n), when the counts differ,
  /// or when a label is >= `classes`; std::invalid_argument when train_fraction is not in
  /// (0, 1) or a split would be empty.
  static image_dataset from_files(const std::string& images, const std::string& labels,
                                  double train_fraction = 0.8, int classes = 10);
  /// Same from parsed arrays (tests); the names appear in errors.
  static image_dataset from_arrays(idx_array images, idx_array labels, double train_fraction,
                                   int classes, const std::string& images_name,
                                   const std::string& labels_name);

  int rows() const noexcept { return rows_; }
  int cols() const noexcept { return cols_; }
  int classes() const noexcept { return classes_; }
  /// Pixels per image, rows·cols.
  size_t pixels() const noexcept { return static_cast<size_t>(rows_) * cols_; }
  size_t train_size() const noexcept { return n_train_; }
  size_t validation_size() const noexcept { return labels_.size() - n_train_; }
  /// Sample i of the whole file (train: i < train_size(); validation: train_size() + j).
  const uint8_t* image(size_t i) const { return images_.data() + i * pixels(); }
  int label(size_t i) const { return labels_[i]; }
  /// "<images file>" for messages.
  const std::string& origin() const noexcept { return origin_; }

  /// Appends the validation samples [first, first + count) (indices within the validation split)
  /// as int32 pixels (count·pixels()) and labels (count). Throws std::out_of_range when the range
  /// leaves the split.
  void validation_batch(size_t first, size_t count, std::vector<int32_t>& pixels,
                        std::vector<int32_t>& labels) const;

 private:
  std::string origin_;
  int rows_ = 0, cols_ = 0, classes_ = 10;
  size_t n_train_ = 0;
  std::vector<uint8_t> images_, labels_;
};

/// Yields batches of one learner's train shard (file comment). Holds a reference to the
/// dataset, which must outlive it.
class image_stream {
 public:
  /// Throws std::invalid_argument for bad learner/learners or a shard with fewer than 1 sample,
  /// naming the dataset and sizes.
  image_stream(const image_dataset& data, int learner, int learners, uint64_t seed,
               shard_layout layout = shard_layout::contiguous);

  /// Fills pixels (B·pixels(), values 0..255) and labels (B). Advances the cursor by B samples.
  /// Throws std::invalid_argument when B < 1.
  void next(int B, std::vector<int32_t>& pixels, std::vector<int32_t>& labels);

  /// Where the stream stands now (seq_len = pixels per image).
  data_cursor cursor() const;
  /// Jumps to a saved cursor. Throws std::invalid_argument naming the field when seed, learner,
  /// learners or seq_len differ from this stream's, or epoch/position are out of range.
  void restore(const data_cursor& c);

  /// Samples in this learner's shard (= per epoch).
  size_t shard_size() const noexcept { return samples_.size(); }

 private:
  void start_epoch(int64_t epoch);

  const image_dataset* data_;
  int learner_, learners_;
  uint64_t seed_;
  int64_t epoch_ = 0, position_ = 0;
  std::vector<uint32_t> samples_;  // dataset indices of the shard
  std::vector<uint32_t> order_;    // π_e over samples_
};

}  // namespace dd
