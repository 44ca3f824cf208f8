// actors/services/recorder.cpp — see recorder.hpp.
#include "actors/services/recorder.hpp"

#include "actors/nodes/event_forwarder.hpp"

#include <algorithm>
#include <chrono>
#include <optional>

#include <fmt/format.h>

namespace dd::actors {

namespace {

double unix_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

}  // namespace

node_recorder::node_recorder(run_log* log, std::string loss_path, std::string forward_dir)
    : log_(log), forward_dir_(std::move(forward_dir)) {
  if (!loss_path.empty()) {
    loss_csv_ = std::make_shared<retried_lines>(
        log_, std::move(loss_path), "wall_time,learner,incarnation,step,tokens,loss,lr\n");
    loss_csv_->append("");  // the header now (or its failure reported)
  }
}

void node_recorder::loss_row(double at_unix_s, int32_t learner, uint64_t incarnation, uint64_t step,
                             uint64_t tokens, double loss, double lr) {
  if (!loss_csv_) return;
  loss_csv_->append(fmt::format("{:.3f},{},{},{},{},{:.6f},{:.6g}\n",
                                at_unix_s > 0 ? at_unix_s : unix_now(), learner, incarnation, step,
                                tokens, loss, lr));
}

bool node_recorder::forward(const std::string& node, const std::string& lines,
                            const std::string& stream, uint64_t offset) {
  if (forward_dir_.empty()) return false;
  auto& f = forwarded_[node];
  if (!f)  // (it makes forward_dir when it first writes)
    f = std::make_shared<retried_lines>(log_, forward_dir_ + "/" + node + ".events.jsonl");
  size_t from = 0;
  if (!stream.empty()) {
    auto& [known, written] = streams_[node];
    std::optional<uint64_t> seen;
    if (known == stream) seen = written;
    from = event_stream_new_from(seen, offset, lines.size());
    known = stream;
    written = std::max<uint64_t>(seen.value_or(0), offset + lines.size());
  }
  if (from < lines.size()) f->append(from == 0 ? lines : lines.substr(from));
  return true;
}

void node_recorder::retry() {
  if (loss_csv_) loss_csv_->retry();
  for (auto& [node, f] : forwarded_) f->retry();
}

}  // namespace dd::actors
