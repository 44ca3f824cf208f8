// runtime/data.cpp — see data.hpp.
#include "runtime/data.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

#include "runtime/rng.hpp"
#include "runtime/tokenizer.hpp"
#include "util/endian.hpp"

namespace dd {

text_dataset text_dataset::from_file(const std::string& path, double train_fraction) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw std::runtime_error(
        fmt::format("data file '{}': cannot open ({})", path, std::strerror(errno)));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw std::runtime_error(fmt::format("data file '{}': read error", path));
  const std::string text = ss.str();
  if (text.empty()) throw std::runtime_error(fmt::format("data file '{}': file is empty", path));
  return from_text(text, train_fraction, path);
}

text_dataset text_dataset::from_text(const std::string& text, double train_fraction,
                                     const std::string& origin) {
  if (!(train_fraction > 0.0 && train_fraction < 1.0))
    throw std::invalid_argument(
        fmt::format("data '{}': train fraction {} must be in (0, 1)", origin, train_fraction));
  if (text.empty()) throw std::runtime_error(fmt::format("data file '{}': file is empty", origin));
  text_dataset d;
  d.origin_ = origin;
  auto all = byte_encode(text);
  const size_t n_train = static_cast<size_t>(static_cast<double>(all.size()) * train_fraction);
  if (n_train < 2 || all.size() - n_train < 2)
    throw std::runtime_error(fmt::format(
        "data file '{}': {} bytes is too short for a train/validation split", origin, all.size()));
  d.train_.assign(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n_train));
  d.val_.assign(all.begin() + static_cast<std::ptrdiff_t>(n_train), all.end());
  return d;
}

text_dataset text_dataset::from_token_files(const std::vector<std::string>& train_files,
                                            const std::vector<std::string>& val_files,
                                            token_format format, int vocab, double train_fraction) {
  if (train_files.empty()) throw std::runtime_error("token data: the list of files is empty");
  if (!(train_fraction > 0.0 && train_fraction < 1.0))
    throw std::invalid_argument(
        fmt::format("token data: train fraction {} must be in (0, 1)", train_fraction));
  auto concat = [&](const std::vector<std::string>& files) {
    std::vector<int32_t> all;
    for (const auto& f : files) {
      auto t = read_token_file(f, format, vocab);
      all.insert(all.end(), t.begin(), t.end());
    }
    return all;
  };
  auto names = [](const std::vector<std::string>& files) {
    return files.size() == 1 ? files[0]
                             : fmt::format("{} … ({} files)", files.front(), files.size());
  };
  text_dataset d;
  d.origin_ = names(train_files);
  d.train_ = concat(train_files);
  if (!val_files.empty()) {
    d.val_ = concat(val_files);
  } else {
    const size_t n = d.train_.size();
    const auto n_train = static_cast<size_t>(static_cast<double>(n) * train_fraction);
    if (n_train < 2 || n - n_train < 2)
      throw std::runtime_error(fmt::format(
          "token data '{}': {} tokens is too short for a train/validation split", d.origin_, n));
    d.val_.assign(d.train_.begin() + static_cast<std::ptrdiff_t>(n_train), d.train_.end());
    d.train_.resize(n_train);
  }
  if (d.train_.size() < 2 || d.val_.size() < 2)
    throw std::runtime_error(
        fmt::format("token data '{}': a split has fewer than 2 tokens ({} "
                    "train, {} validation)",
                    d.origin_, d.train_.size(), d.val_.size()));
  return d;
}

shard_range shard_of(size_t n_train, int learner, int learners) {
  if (learners < 1 || learner < 0 || learner >= learners)
    throw std::invalid_argument(
        fmt::format("shard_of: learner {} of {} is out of range", learner, learners));
  // 128-bit-safe for any realistic n: n < 2^40 and M < 2^20.
  const auto m = static_cast<unsigned long long>(learners);
  const auto n = static_cast<unsigned long long>(n_train);
  return {static_cast<size_t>(n * static_cast<unsigned long long>(learner) / m),
          static_cast<size_t>(n * static_cast<unsigned long long>(learner + 1) / m)};
}

// ---- data_cursor ------------------------------------------------------------------------------

nlohmann::json data_cursor::to_json() const {
  return {{"seed", std::to_string(seed)}, {"learner", learner}, {"learners", learners},
          {"seq_len", seq_len},           {"epoch", epoch},     {"position", position}};
}

data_cursor data_cursor::from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw std::invalid_argument("data cursor: expected a JSON object");
  auto field = [&](const char* name) -> const nlohmann::json& {
    auto it = j.find(name);
    if (it == j.end())
      throw std::invalid_argument(fmt::format("data cursor: missing field '{}'", name));
    return *it;
  };
  auto integer = [&](const char* name) -> int64_t {
    const auto& v = field(name);
    if (!v.is_number_integer())
      throw std::invalid_argument(fmt::format("data cursor: field '{}' must be an integer", name));
    return v.get<int64_t>();
  };
  data_cursor c;
  const auto& s = field("seed");
  if (!s.is_string())
    throw std::invalid_argument("data cursor: field 'seed' must be a decimal string");
  try {
    size_t used = 0;
    c.seed = std::stoull(s.get<std::string>(), &used);
    if (used != s.get<std::string>().size()) throw std::invalid_argument("trailing characters");
  } catch (const std::exception&) {
    throw std::invalid_argument(fmt::format(
        "data cursor: field 'seed' is not a decimal integer: '{}'", s.get<std::string>()));
  }
  c.learner = static_cast<int>(integer("learner"));
  c.learners = static_cast<int>(integer("learners"));
  c.seq_len = static_cast<int>(integer("seq_len"));
  c.epoch = integer("epoch");
  c.position = integer("position");
  return c;
}

namespace {
constexpr char k_cursor_magic[4] = {'D', 'D', 'C', '1'};
constexpr size_t k_cursor_bytes = 4 + 8 + 4 + 4 + 4 + 8 + 8;
template <class T>
void put_le(std::vector<uint8_t>& out, T v) {
  auto u = static_cast<uint64_t>(v);
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<uint8_t>(u >> (8 * i)));
}
template <class T>
T get_le(const uint8_t*& p) {
  const T v = util::load_le<T>(p);
  p += sizeof(T);
  return v;
}
}  // namespace

std::vector<uint8_t> data_cursor::to_bytes() const {
  // Layout: "DDC1" | seed u64 | learner i32 | learners i32 | seq_len i32 | epoch i64 |
  // position i64; all little-endian, 40 bytes.
  std::vector<uint8_t> out(k_cursor_magic, k_cursor_magic + 4);
  put_le<uint64_t>(out, seed);
  put_le<int32_t>(out, learner);
  put_le<int32_t>(out, learners);
  put_le<int32_t>(out, seq_len);
  put_le<int64_t>(out, epoch);
  put_le<int64_t>(out, position);
  return out;
}

data_cursor data_cursor::from_bytes(const std::vector<uint8_t>& bytes) {
  if (bytes.size() != k_cursor_bytes)
    throw std::invalid_argument(
        fmt::format("data cursor: {} bytes, expected {}", bytes.size(), k_cursor_bytes));
  if (std::memcmp(bytes.data(), k_cursor_magic, 4) != 0)
    throw std::invalid_argument("data cursor: bad magic (expected \"DDC1\")");
  const uint8_t* p = bytes.data() + 4;
  data_cursor c;
  c.seed = get_le<uint64_t>(p);
  c.learner = get_le<int32_t>(p);
  c.learners = get_le<int32_t>(p);
  c.seq_len = get_le<int32_t>(p);
  c.epoch = get_le<int64_t>(p);
  c.position = get_le<int64_t>(p);
  return c;
}

// ---- batch_stream -----------------------------------------------------------------------------

batch_stream::batch_stream(const text_dataset& data, int learner, int learners, int T,
                           uint64_t seed, shard_layout layout)
    : data_(&data), learner_(learner), learners_(learners), T_(T), layout_(layout), seed_(seed) {
  shard_ = shard_of(data.train().size(), learner, learners);
  if (T < 1)
    throw std::invalid_argument(fmt::format("batch_stream: sequence length {} must be >= 1", T));
  if (layout_ == shard_layout::interleaved) {
    shard_ = shard_range{0, data.train().size()};
    const size_t need = (2 * static_cast<size_t>(learners) + 1) * static_cast<size_t>(T) + 1;
    if (shard_.size() < need)
      throw std::invalid_argument(fmt::format(
          "data '{}': the train split has {} tokens, fewer than (2·M+1)·T+1 = {} for interleaved "
          "shards of M = {} learners, T = {}",
          data.origin(), shard_.size(), need, learners, T));
  } else if (shard_.size() < 2 * static_cast<size_t>(T) + 1)
    throw std::invalid_argument(fmt::format(
        "data '{}': learner {} of {} has a shard of {} tokens, fewer than 2·T+1 = {} for T = {}",
        data.origin(), learner, learners, shard_.size(), 2 * T + 1, T));
  start_epoch(0);
}

rng epoch_rng(uint64_t seed, int learner, int64_t epoch) {
  return rng(
      derive_seed(derive_seed(seed, static_cast<uint64_t>(learner)), static_cast<uint64_t>(epoch)));
}

void shuffled_order(rng& r, size_t n, std::vector<uint32_t>& order) {
  order.resize(n);
  for (size_t k = 0; k < n; ++k) order[k] = static_cast<uint32_t>(k);
  for (size_t k = n; k > 1; --k) {
    const size_t j = static_cast<size_t>(r.below(k));
    std::swap(order[k - 1], order[j]);
  }
}

void batch_stream::start_epoch(int64_t epoch) {
  rng r = epoch_rng(seed_, learner_, epoch);
  offset_ = static_cast<size_t>(r.below(static_cast<uint64_t>(T_)));
  size_t n_windows = (shard_.size() - 1 - offset_) / static_cast<size_t>(T_);
  if (layout_ == shard_layout::interleaved) {
    // One offset for every learner (disjoint windows within an epoch); windows k ≡ i (mod M).
    rng shared(derive_seed(derive_seed(seed_, 0x696cULL), static_cast<uint64_t>(epoch)));
    offset_ = static_cast<size_t>(shared.below(static_cast<uint64_t>(T_)));
    const size_t all = (shard_.size() - 1 - offset_) / static_cast<size_t>(T_);
    const size_t i = static_cast<size_t>(learner_), m = static_cast<size_t>(learners_);
    n_windows = all > i ? (all - i + m - 1) / m : 0;
  }
  shuffled_order(r, n_windows, order_);
  epoch_ = epoch;
  position_ = 0;
}

void batch_stream::next(int B, std::vector<int32_t>& inputs, std::vector<int32_t>& targets) {
  if (B < 1)
    throw std::invalid_argument(fmt::format("batch_stream::next: batch {} must be >= 1", B));
  const size_t T = static_cast<size_t>(T_);
  inputs.resize(static_cast<size_t>(B) * T);
  targets.resize(static_cast<size_t>(B) * T);
  const auto& tok = data_->train();
  last_starts_.resize(static_cast<size_t>(B));
  for (int b = 0; b < B; ++b) {
    if (static_cast<size_t>(position_) >= order_.size()) start_epoch(epoch_ + 1);
    size_t window = static_cast<size_t>(order_[static_cast<size_t>(position_)]);
    if (layout_ == shard_layout::interleaved)
      window = static_cast<size_t>(learner_) + window * static_cast<size_t>(learners_);
    const size_t start = shard_.begin + offset_ + window * T;
    last_starts_[static_cast<size_t>(b)] = start;
    ++position_;
    for (size_t t = 0; t < T; ++t) {
      inputs[b * T + t] = tok[start + t];
      targets[b * T + t] = tok[start + t + 1];
    }
  }
}

data_cursor batch_stream::cursor() const {
  return data_cursor{seed_, learner_, learners_, T_, epoch_, position_};
}

void data_cursor::check_fits(const data_cursor& stream, const char* seq_len_name) const {
  auto mismatch = [&](const char* field, auto got, auto want) {
    throw std::invalid_argument(
        fmt::format("data cursor: field '{}' is {} but this stream has {}", field, got, want));
  };
  if (seed != stream.seed) mismatch("seed", seed, stream.seed);
  if (learner != stream.learner) mismatch("learner", learner, stream.learner);
  if (learners != stream.learners) mismatch("learners", learners, stream.learners);
  if (seq_len != stream.seq_len) mismatch(seq_len_name, seq_len, stream.seq_len);
  if (epoch < 0) mismatch("epoch", epoch, ">= 0");
}

void batch_stream::restore(const data_cursor& c) {
  c.check_fits(cursor(), "seq_len");
  start_epoch(c.epoch);
  if (c.position < 0 || static_cast<size_t>(c.position) > order_.size())
    throw std::invalid_argument(
        fmt::format("data cursor: field 'position' is {} but epoch {} has {} windows", c.position,
                    c.epoch, order_.size()));
  position_ = c.position;
}

}  // namespace dd
