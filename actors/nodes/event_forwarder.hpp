// actors/nodes/event_forwarder.hpp — a learner node's event lines on their way to the syncer
// (<run_dir>/nodes/<node>.events.jsonl there), without sockets or CAF: the lines stay buffered
// until the syncer has answered the batch that carries them, so a batch sent to a syncer link
// that died (a paused node, a lost syncer) is sent again after the rejoin. Each batch names the
// node's stream (one per process) and the byte offset of its first line in that stream, so the
// syncer drops what it already wrote when a batch comes again (event_stream_position).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace dd::actors {

class event_forwarder {
 public:
  struct batch {
    uint64_t id = 0;      ///< names the batch in answered() / unanswered()
    uint64_t offset = 0;  ///< bytes of the stream before `lines`
    std::string lines;    ///< whole lines
  };

  /// `cap`: the most bytes buffered (beyond it, lines are dropped and counted); `batch_cap`: the
  /// most bytes in one batch (whole lines; a longer single line is cut by the receiver).
  explicit event_forwarder(size_t cap = size_t{8} << 20, size_t batch_cap = size_t{1} << 20)
      : cap_(cap), batch_cap_(batch_cap) {}

  /// One event line (with its newline).
  void add(const std::string& line);
  /// The next batch to send: none while one is unanswered (in flight) or nothing is buffered.
  /// The batch's lines stay buffered until answered().
  std::optional<batch> next();
  /// The syncer answered batch `id`: its lines are delivered and leave the buffer. An answer
  /// to a batch no longer in flight (given up by abandon()) changes nothing.
  void answered(uint64_t id);
  /// Batch `id` got no answer (timeout, dead link): its lines stay, sent again by the next
  /// next().
  void unanswered(uint64_t id);
  /// Stops waiting for the batch in flight (the last sends before the node exits): next() sends
  /// its lines again (the receiver drops the overlap if the first one arrived too).
  void abandon() { in_flight_ = 0; }

  bool in_flight() const { return in_flight_ > 0; }
  size_t buffered() const { return lines_.size(); }
  uint64_t dropped() const { return dropped_; }

 private:
  size_t cap_, batch_cap_;
  std::string lines_;     ///< from stream offset `offset_` on
  uint64_t offset_ = 0;   ///< bytes answered by the syncer
  size_t in_flight_ = 0;  ///< bytes at the head of `lines_` in the batch in flight
  uint64_t last_id_ = 0;  ///< the id of the batch in flight (or the last one)
  uint64_t dropped_ = 0;
};

/// The receiver's side: how much of a forwarded batch is new. `written`: the stream's bytes
/// already written for this node (none: a stream not seen yet, e.g. after a syncer restart, so
/// the whole batch is new). Returns the byte index in the batch's lines from which they are new
/// (lines.size(): all of it was written before).
size_t event_stream_new_from(std::optional<uint64_t> written, uint64_t offset, size_t size);

}  // namespace dd::actors
