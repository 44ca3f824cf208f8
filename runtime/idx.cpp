// runtime/idx.cpp — see idx.hpp.
#include "runtime/idx.hpp"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <stdexcept>

#include <fmt/format.h>

#include "runtime/rng.hpp"

namespace dd {

namespace {

constexpr uint8_t k_idx_ubyte = 0x08;

std::vector<uint8_t> read_maybe_gzip(const std::string& path) {
  errno = 0;
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr)
    throw std::runtime_error(fmt::format("IDX file '{}': cannot open ({})", path,
                                         errno != 0 ? std::strerror(errno) : "zlib"));
  std::unique_ptr<gzFile_s, int (*)(gzFile)> guard(f, gzclose);
  std::vector<uint8_t> out;
  std::vector<uint8_t> chunk(1 << 16);
  for (;;) {
    const int n = gzread(f, chunk.data(), static_cast<unsigned>(chunk.size()));
    if (n < 0) {
      int err = 0;
      const char* msg = gzerror(f, &err);
      throw std::runtime_error(
          fmt::format("IDX file '{}': read error ({}): corrupt or truncated gzip?", path,
                      msg != nullptr ? msg : "zlib"));
    }
    if (n == 0) break;
    out.insert(out.end(), chunk.begin(), chunk.begin() + n);
  }
  // gzread() returns 0 without an error for a gzip stream cut short; gzeof + gzerror tell.
  int err = 0;
  const char* msg = gzerror(f, &err);
  if (err != Z_OK && err != Z_STREAM_END)
    throw std::runtime_error(
        fmt::format("IDX file '{}': gzip error ({})", path, msg != nullptr ? msg : "zlib"));
  return out;
}

}  // namespace

idx_array parse_idx(const std::vector<uint8_t>& b, const std::string& origin) {
  if (b.size() < 4)
    throw std::runtime_error(
        fmt::format("IDX file '{}': {} bytes, shorter than the 4-byte magic", origin, b.size()));
  if (b[0] != 0 || b[1] != 0)
    throw std::runtime_error(fmt::format(
        "IDX file '{}': wrong magic {:02x} {:02x} {:02x} {:02x} (an IDX file starts with 00 00)",
        origin, b[0], b[1], b[2], b[3]));
  if (b[2] != k_idx_ubyte)
    throw std::runtime_error(fmt::format(
        "IDX file '{}': data type 0x{:02x}, only 0x08 (unsigned byte) is supported", origin, b[2]));
  const size_t nd = b[3];
  if (nd == 0)
    throw std::runtime_error(fmt::format("IDX file '{}': zero dimensions in the header", origin));
  const size_t header = 4 + 4 * nd;
  if (b.size() < header)
    throw std::runtime_error(
        fmt::format("IDX file '{}': truncated header ({} bytes, {} dimensions need {})", origin,
                    b.size(), nd, header));
  idx_array a;
  size_t total = 1;
  for (size_t d = 0; d < nd; ++d) {
    const uint8_t* p = b.data() + 4 + 4 * d;
    const uint32_t v =
        (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
    if (v == 0)
      throw std::runtime_error(fmt::format("IDX file '{}': dimension {} has size 0", origin, d));
    if (total > (size_t{1} << 40) / v)
      throw std::runtime_error(
          fmt::format("IDX file '{}': header sizes give more than 2^40 values", origin));
    total *= v;
    a.dims.push_back(v);
  }
  const size_t have = b.size() - header;
  if (have < total)
    throw std::runtime_error(
        fmt::format("IDX file '{}': truncated: the header announces {} values, the file holds {}",
                    origin, total, have));
  if (have > total)
    throw std::runtime_error(
        fmt::format("IDX file '{}': {} trailing bytes after the {} values the header announces",
                    origin, have - total, total));
  a.data.assign(b.begin() + static_cast<std::ptrdiff_t>(header), b.end());
  return a;
}

idx_array read_idx(const std::string& path) { return parse_idx(read_maybe_gzip(path), path); }

// ---- image_dataset ----------------------------------------------------------------------------

image_dataset image_dataset::from_files(const std::string& images, const std::string& labels,
                                        double train_fraction, int classes) {
  return from_arrays(read_idx(images), read_idx(labels), train_fraction, classes, images, labels);
}

image_dataset image_dataset::from_arrays(idx_array images, idx_array labels, double train_fraction,
                                         int classes, const std::string& images_name,
                                         const std::string& labels_name) {
  if (!(train_fraction > 0.0 && train_fraction < 1.0))
    throw std::invalid_argument(fmt::format("images '{}': train fraction {} must be in (0, 1)",
                                            images_name, train_fraction));
  if (classes < 2)
    throw std::invalid_argument(
        fmt::format("images '{}': classes {} must be >= 2", images_name, classes));
  if (images.dims.size() != 3)
    throw std::runtime_error(
        fmt::format("IDX file '{}': images must have 3 dimensions (n, rows, cols), it has {}",
                    images_name, images.dims.size()));
  if (labels.dims.size() != 1)
    throw std::runtime_error(
        fmt::format("IDX file '{}': labels must have 1 dimension (n), it has {}", labels_name,
                    labels.dims.size()));
  if (images.dims[0] != labels.dims[0])
    throw std::runtime_error(fmt::format("IDX files '{}' and '{}': {} images but {} labels",
                                         images_name, labels_name, images.dims[0], labels.dims[0]));
  for (size_t i = 0; i < labels.data.size(); ++i)
    if (labels.data[i] >= classes)
      throw std::runtime_error(fmt::format("IDX file '{}': label {} of sample {} is not below {}",
                                           labels_name, labels.data[i], i, classes));
  const size_t n = labels.dims[0];
  const auto n_train = static_cast<size_t>(static_cast<double>(n) * train_fraction);
  if (n_train < 1 || n_train >= n)
    throw std::invalid_argument(
        fmt::format("images '{}': {} samples with train fraction {} leave an empty split",
                    images_name, n, train_fraction));
  image_dataset d;
  d.origin_ = images_name;
  d.rows_ = static_cast<int>(images.dims[1]);
  d.cols_ = static_cast<int>(images.dims[2]);
  d.classes_ = classes;
  d.n_train_ = n_train;
  d.images_ = std::move(images.data);
  d.labels_ = std::move(labels.data);
  return d;
}

void image_dataset::validation_batch(size_t first, size_t count, std::vector<int32_t>& px,
                                     std::vector<int32_t>& lab) const {
  if (first > validation_size() || count > validation_size() - first)
    throw std::out_of_range(
        fmt::format("images '{}': validation samples [{}, {}) exceed the {} "
                    "of the validation split",
                    origin_, first, first + count, validation_size()));
  const size_t P = pixels();
  for (size_t s = 0; s < count; ++s) {
    const size_t i = n_train_ + first + s;
    const uint8_t* img = image(i);
    for (size_t k = 0; k < P; ++k) px.push_back(img[k]);
    lab.push_back(labels_[i]);
  }
}

// ---- image_stream -----------------------------------------------------------------------------

image_stream::image_stream(const image_dataset& data, int learner, int learners, uint64_t seed,
                           shard_layout layout)
    : data_(&data), learner_(learner), learners_(learners), seed_(seed) {
  const size_t n = data.train_size();
  if (layout == shard_layout::interleaved) {
    if (learners < 1 || learner < 0 || learner >= learners)
      throw std::invalid_argument(
          fmt::format("image_stream: learner {} of {} is out of range", learner, learners));
    for (size_t k = static_cast<size_t>(learner); k < n; k += static_cast<size_t>(learners))
      samples_.push_back(static_cast<uint32_t>(k));
  } else {
    const auto r = shard_of(n, learner, learners);
    for (size_t k = r.begin; k < r.end; ++k) samples_.push_back(static_cast<uint32_t>(k));
  }
  if (samples_.empty())
    throw std::invalid_argument(
        fmt::format("images '{}': learner {} of {} has an empty shard of the {} train samples",
                    data.origin(), learner, learners, n));
  start_epoch(0);
}

void image_stream::start_epoch(int64_t epoch) {
  rng r = epoch_rng(seed_, learner_, epoch);
  shuffled_order(r, samples_.size(), order_);
  epoch_ = epoch;
  position_ = 0;
}

void image_stream::next(int B, std::vector<int32_t>& pixels, std::vector<int32_t>& labels) {
  if (B < 1)
    throw std::invalid_argument(fmt::format("image_stream::next: batch {} must be >= 1", B));
  const size_t P = data_->pixels();
  pixels.resize(static_cast<size_t>(B) * P);
  labels.resize(static_cast<size_t>(B));
  for (int b = 0; b < B; ++b) {
    if (static_cast<size_t>(position_) >= order_.size()) start_epoch(epoch_ + 1);
    const size_t i = samples_[order_[static_cast<size_t>(position_)]];
    ++position_;
    const uint8_t* img = data_->image(i);
    for (size_t k = 0; k < P; ++k) pixels[b * P + k] = img[k];
    labels[static_cast<size_t>(b)] = data_->label(i);
  }
}

data_cursor image_stream::cursor() const {
  return data_cursor{seed_,  learner_, learners_, static_cast<int>(data_->pixels()),
                     epoch_, position_};
}

void image_stream::restore(const data_cursor& c) {
  c.check_fits(cursor(), "seq_len (pixels per image)");
  if (c.position < 0 || static_cast<size_t>(c.position) > samples_.size())
    throw std::invalid_argument(
        fmt::format("data cursor: field 'position' is {} but the shard has {} samples", c.position,
                    samples_.size()));
  start_epoch(c.epoch);
  position_ = c.position;
}

}  // namespace dd
