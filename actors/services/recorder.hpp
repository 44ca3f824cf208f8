// actors/services/recorder.hpp — the syncer node's recorder: the files a syncer node keeps of
// its learners besides the run log — learner_loss.csv (one row per heartbeat) and the learner
// nodes' forwarded event lines (nodes/<node>.events.jsonl).
//
// learner_loss.csv: wall_time,learner,incarnation,step,tokens,loss,lr — a learner sends a
// heartbeat after every applied inner step, so one row per learner step while the monitor hears
// it (wall_time: Unix seconds when it was recorded; tokens: the learner's total over its
// incarnations; loss: that step's training loss, nats/token; lr: the learning rate it applied).
// A failed write is handled as run_log says for the node (retried_lines): retried with backoff
// and reported `degraded` on a cluster node, or the end of the run (`dd-node run`).
//
// The node makes it (syncer_node.cpp) and hands it to the health monitor, which passes on what
// it hears. Not thread-safe: one actor calls it (the monitor).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "actors/services/run_log.hpp"

namespace dd::actors {

class node_recorder {
 public:
  /// `loss_path`: learner_loss.csv ("" = not written; its header is written now). `forward_dir`:
  /// where forwarded event files go ("" = dropped). Failures are reported through `log`.
  node_recorder(run_log* log, std::string loss_path, std::string forward_dir);

  /// One heartbeat's row of learner_loss.csv, stamped with `at_unix_s` (the learner's clock when
  /// the step ended), or with this node's wall clock when that is 0 (a heartbeat without it).
  void loss_row(double at_unix_s, int32_t learner, uint64_t incarnation, uint64_t step,
                uint64_t tokens, double loss, double lr);
  /// Appends node `node`'s forwarded lines (whole lines only: a line cut by the sender's cap is
  /// dropped with its tail) to <forward_dir>/<node>.events.jsonl. False when forwarded events
  /// are not kept (no forward_dir). The node name was checked by the codec (it names a file).
  /// `stream` and `offset` (node_events): the part of a batch sent again that was written
  /// before is dropped (event_stream_new_from), so a resent batch adds no duplicate line.
  bool forward(const std::string& node, const std::string& lines, const std::string& stream = "",
               uint64_t offset = 0);
  /// Writes lines whose write failed once their backoff expired (call it now and then).
  void retry();

 private:
  run_log* log_;
  std::string forward_dir_;
  std::shared_ptr<retried_lines> loss_csv_;
  std::map<std::string, std::shared_ptr<retried_lines>> forwarded_;
  /// Per node: its current stream and the bytes of it written.
  std::map<std::string, std::pair<std::string, uint64_t>> streams_;
};

}  // namespace dd::actors
