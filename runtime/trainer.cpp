// runtime/trainer.cpp — see trainer.hpp.
#include "runtime/trainer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "runtime/checkpoint.hpp"
#include "runtime/eval.hpp"
#include "runtime/rng.hpp"
#include "runtime/vit.hpp"

namespace dd {

namespace {

// DD_DATA_TRACE=FILE: every batch drawn from text or token data (next_batch, what step() and
// the learner actor train on) appends one JSON line — learner, the step's 0-based index
// (steps_done() before it), the cursor (epoch, position) before the batch, and the start of
// each window in the train split — with one O_APPEND write, so learner threads and processes
// can share the file. A diagnostic (tests check the cursor's continuity across a respawn).
void trace_batch(int learner, int64_t step, const data_cursor& before,
                 const std::vector<size_t>& starts) {
  static const char* path = std::getenv("DD_DATA_TRACE");
  if (path == nullptr || *path == '\0') return;
  const std::string line =
      fmt::format("{{\"learner\":{},\"step\":{},\"epoch\":{},\"position\":{},\"starts\":[{}]}}\n",
                  learner, step, before.epoch, before.position, fmt::join(starts, ","));
  const int fd = ::open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  const ssize_t n = ::write(fd, line.data(), line.size());
  (void)n;
  ::close(fd);
}
}  // namespace

void trainer_config::validate() const {
  model.validate();
  if (batch < 1)
    throw std::invalid_argument(fmt::format("trainer: batch must be >= 1, got {}", batch));
  if (seq_len < 1 || seq_len > model.context)
    throw std::invalid_argument(
        fmt::format("trainer: seq_len {} must be in [1, context = {}]", seq_len, model.context));
  schedule.validate();
  if (learners < 1 || learner < 0 || learner >= learners)
    throw std::invalid_argument(
        fmt::format("trainer: learner {} of {} is out of range", learner, learners));
}

trainer::trainer(kernels::backend& be, const text_dataset& data, const trainer_config& cfg)
    : cfg_((cfg.validate(), cfg)),
      data_(&data),
      model_(make_model(be, cfg.model)),
      opt_(be, model_->tensors(), model_->num_params(), cfg.optimizer),
      stream_(std::in_place, data, cfg.learner, cfg.learners, cfg.seq_len,
              data_stream_seed(cfg.seed), cfg.sharding) {
  model_->init(cfg.seed);
  batch_.B = cfg.batch;
  batch_.T = cfg.seq_len;
}

trainer::trainer(kernels::backend& be, const image_dataset& data, const trainer_config& cfg)
    : cfg_((cfg.validate(), cfg)),
      image_data_(&data),
      model_(make_model(be, cfg.model)),
      opt_(be, model_->tensors(), model_->num_params(), cfg.optimizer) {
  const auto& m = cfg.model;
  if (m.kind != "vit" || m.vit.rows != data.rows() || m.vit.cols != data.cols() ||
      m.vit.classes != data.classes())
    throw std::invalid_argument(fmt::format(
        "trainer: image data '{}' ({}x{} images, {} classes) does not fit model.kind \"{}\" "
        "(rows {}, cols {}, classes {}; image data needs kind \"vit\")",
        data.origin(), data.rows(), data.cols(), data.classes(), m.kind, m.vit.rows, m.vit.cols,
        m.vit.classes));
  image_stream_.emplace(data, cfg.learner, cfg.learners, data_stream_seed(cfg.seed), cfg.sharding);
  cfg_.seq_len = 1;
  model_->init(cfg.seed);
  batch_.B = cfg.batch;
  batch_.T = 1;
}

batch_stream& trainer::data() {
  if (!stream_)
    throw std::logic_error("trainer::data(): this trainer reads image data, not a text stream");
  return *stream_;
}

void trainer::next_batch(model_batch& b) {
  b.B = cfg_.batch;
  b.T = cfg_.seq_len;
  if (stream_) {
    const data_cursor before = stream_->cursor();
    stream_->next(cfg_.batch, b.inputs, b.targets);
    trace_batch(cfg_.learner, step_, before, stream_->last_starts());
    return;
  }
  std::vector<int32_t> px;
  image_stream_->next(cfg_.batch, px, b.targets);
  b.inputs.clear();
  b.features.assign(px.begin(), px.end());
}

data_cursor trainer::cursor() const {
  return stream_ ? stream_->cursor() : image_stream_->cursor();
}

void trainer::restore_cursor(const data_cursor& c) {
  if (stream_)
    stream_->restore(c);
  else
    image_stream_->restore(c);
}

step_result trainer::step(double lr) {
  const auto t0 = std::chrono::steady_clock::now();
  step_result r;
  r.step = step_;
  r.tokens = static_cast<int64_t>(cfg_.batch) * cfg_.seq_len;
  next_batch(batch_);
  model_->zero_grad();
  r.loss = model_->forward(batch_);
  tokens_ += r.tokens;
  if (std::isfinite(r.loss)) {
    model_->backward();
    r.grad_norm = grad_norm(model_->backend(), model_->grads(), model_->num_params());
  }
  if (!std::isfinite(r.loss) || !std::isfinite(r.grad_norm)) {
    r.applied = false;
  } else {
    r.lr = lr;
    // The clip factor is applied as AdamW reads each gradient (clip_grad_norm's bits).
    opt_.step(model_->params(), model_->grads(), static_cast<float>(r.lr),
              clip_factor(r.grad_norm, cfg_.grad_clip));
    ++step_;
  }
  model_->backend().synchronize();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

double trainer::evaluate(int batches) { return evaluate_metric(batches).loss; }

batch_metric trainer::evaluate_metric(int batches) {
  if (image_data_ != nullptr) {
    auto& v = dynamic_cast<vit&>(*model_);
    const classification_eval ev = v.evaluate(*image_data_, cfg_.batch);
    return {ev.loss, ev.accuracy};
  }
  return {evaluate_loss(*model_, data_->validation(), cfg_.batch, cfg_.seq_len, batches),
          std::nan("")};
}

void trainer::save(const std::string& path, const std::map<std::string, std::string>& extra) const {
  auto meta = extra;
  meta["step"] = std::to_string(step_);
  meta["tokens"] = std::to_string(tokens_);
  meta["seed"] = std::to_string(cfg_.seed);
  meta["data_cursor"] = cursor().to_json().dump();
  save_checkpoint(path, *model_, &opt_, meta);
}

std::map<std::string, std::string> trainer::load(const std::string& path,
                                                 const st_read_options& options) {
  // Validate the metadata before load_checkpoint() overwrites anything.
  const st_file probe = read_safetensors(path, options);
  auto fail = [&](const std::string& what) -> std::runtime_error {
    return std::runtime_error(fmt::format("checkpoint '{}': {}", path, what));
  };
  auto meta_of = [&](const char* key) -> const std::string& {
    auto it = probe.metadata.find(key);
    if (it == probe.metadata.end()) throw fail(fmt::format("metadata '{}' is missing", key));
    return it->second;
  };
  model_config file_cfg;
  data_cursor cur;
  int64_t step = 0, tokens = 0;
  try {
    file_cfg = model_config::from_json(nlohmann::json::parse(meta_of("config")));
    cur = data_cursor::from_json(nlohmann::json::parse(meta_of("data_cursor")));
    step = std::stoll(meta_of("step"));
    tokens = std::stoll(meta_of("tokens"));
  } catch (const std::runtime_error&) {
    throw;
  } catch (const std::exception& e) {
    throw fail(fmt::format("bad metadata: {}", e.what()));
  }
  if (file_cfg != cfg_.model)
    throw fail(fmt::format("model config {} differs from this trainer's {}",
                           file_cfg.to_json().dump(), cfg_.model.to_json().dump()));
  // Check the cursor against a scratch stream first so a mismatch leaves this trainer untouched.
  try {
    if (stream_) {
      batch_stream probe_stream = *stream_;
      probe_stream.restore(cur);
    } else {
      image_stream probe_stream = *image_stream_;
      probe_stream.restore(cur);
    }
  } catch (const std::invalid_argument& e) {
    throw fail(e.what());
  }
  auto meta = load_checkpoint(path, *model_, &opt_, options);
  restore_cursor(cur);
  step_ = step;
  tokens_ = tokens;
  return meta;
}

}  // namespace dd
