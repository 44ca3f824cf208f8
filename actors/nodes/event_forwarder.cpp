// actors/nodes/event_forwarder.cpp — see event_forwarder.hpp.
#include "actors/nodes/event_forwarder.hpp"

#include <algorithm>

namespace dd::actors {

void event_forwarder::add(const std::string& line) {
  if (lines_.size() + line.size() > cap_)
    ++dropped_;
  else
    lines_ += line;
}

std::optional<event_forwarder::batch> event_forwarder::next() {
  if (in_flight_ > 0 || lines_.empty()) return std::nullopt;
  auto nl = lines_.rfind('\n', std::min(lines_.size(), batch_cap_) - 1);
  while (nl == std::string::npos) {
    // A line longer than a batch never fits a message: dropped and counted.
    const auto end = lines_.find('\n');
    if (end == std::string::npos) return std::nullopt;  // no whole line yet
    lines_.erase(0, end + 1);
    offset_ += end + 1;
    ++dropped_;
    if (lines_.empty()) return std::nullopt;
    nl = lines_.rfind('\n', std::min(lines_.size(), batch_cap_) - 1);
  }
  const size_t cut = nl + 1;
  in_flight_ = cut;
  return batch{++last_id_, offset_, lines_.substr(0, cut)};
}

void event_forwarder::answered(uint64_t id) {
  if (id != last_id_ || in_flight_ == 0) return;
  lines_.erase(0, in_flight_);
  offset_ += in_flight_;
  in_flight_ = 0;
}

void event_forwarder::unanswered(uint64_t id) {
  if (id == last_id_) in_flight_ = 0;
}

size_t event_stream_new_from(std::optional<uint64_t> written, uint64_t offset, size_t size) {
  if (!written || *written <= offset) return 0;
  return static_cast<size_t>(std::min<uint64_t>(*written - offset, size));
}

}  // namespace dd::actors
