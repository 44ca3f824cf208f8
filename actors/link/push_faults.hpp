// actors/link/push_faults.hpp — the link's fault filter on pushes as they leave a learner's node
// (chunk_flow.hpp flow_push), the push half of the node's fault filter (the broadcast half is
// flow_publish). Roles hold no fault code: a learner hands every push to the link, which asks
// the node's fault hooks (actors/services/fault_hooks.hpp) what becomes of it.
//
// A push's fate applies to its first sending only (a transfer id the filter has not seen for
// that fragment and incarnation); a resend of the same transfer (the owner refused a damaged
// chunk, or the fragment's owner changed) leaves unchanged. The fates compose:
//   drop        nothing leaves (the learner cannot tell: the push waits for an answer until
//               it expires); event push_dropped, counter pushes_dropped
//   corrupt     one bit of the first chunk's payload flips (the owner's CRC-32C check refuses
//               it and the learner sends the push again)
//   scale       every value of the pseudo-gradient multiplied by a factor (finite but absurd:
//               the owner's plausibility gate must refuse it); event push_scaled
//   random      every value replaced by a draw of N(0, 1), seeded; event push_randomized with
//               the seed
//   duplicate   sent twice (the owner refuses the copy)
//   delay       sent that many seconds late
//   reorder     held back and sent right after the learner's next push; event push_held
// A push held back earlier leaves after this one. The node's metrics count what leaves
// (pushes_sent, push_bytes_sent per learner).
// Used on the sending actor's thread only.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include <caf/actor.hpp>

#include "messages/codec.hpp"

namespace dd::actors {

class fault_hooks;
class event_sink;

/// One push leaving a learner's node: transfer `transfer_id` (the learner's step when it was
/// built) of fragment `fragment` by learner `learner` (incarnation `incarnation`), as its encoded
/// chunk messages.
struct outgoing_push {
  int32_t learner = 0;
  uint64_t incarnation = 0;
  int32_t fragment = 0;
  uint64_t transfer_id = 0;
  std::vector<wire_bytes> chunks;
};

/// Chunks to send now to `dest` (`delay_s` > 0: that many seconds late).
struct push_send {
  caf::actor dest;
  std::vector<wire_bytes> chunks;
  double delay_s = 0.0;
};

/// The filter's state for one sending actor (a member of its chunk_flow).
class push_filter {
 public:
  /// The sends of push `p` to `dest` as it leaves the node, in order (see the file comment):
  /// through the fate `hooks` give it on its first sending, then the push an earlier fate held
  /// back. `hooks` null: no faults; `log` null: nothing recorded.
  std::vector<push_send> route(fault_hooks* hooks, event_sink* log, const caf::actor& dest,
                               outgoing_push p);

 private:
  /// The push a `reorder_push` fate holds back.
  std::optional<push_send> held_;
  /// Per fragment: the (incarnation, transfer id) whose first sending was filtered last.
  std::map<int32_t, std::pair<uint64_t, uint64_t>> filtered_;
};

/// A copy of encoded push chunk `chunk` with one bit of its payload flipped (damage in transit
/// that the owner's CRC-32C check must catch).
wire_bytes damaged_copy(const wire_bytes& chunk);

/// The chunks of the push `chunks` encode (one transfer, any chunking, stamped by its learner)
/// with its pseudo-gradient replaced by `edit(values)` (fp32 values, the fragment's length),
/// encoded again in the push's encoding and chunking with the same stamp. Errors: the chunks do
/// not decode as one whole push (the message names what).
template <class Edit>
result<std::vector<wire_bytes>> edited_push(const std::vector<wire_bytes>& chunks, Edit&& edit);

/// Non-template part of edited_push: the whole push, its values and what re-encoding needs.
struct decoded_push {
  push_msg whole;
  std::vector<float> values;
  envelope_stamp stamp;
  size_t chunk_bytes = 0;
};
result<decoded_push> decode_whole_push(const std::vector<wire_bytes>& chunks);
result<std::vector<wire_bytes>> encode_edited_push(decoded_push d);

template <class Edit>
result<std::vector<wire_bytes>> edited_push(const std::vector<wire_bytes>& chunks, Edit&& edit) {
  auto d = decode_whole_push(chunks);
  if (!d) return d.error();
  edit(d->values);
  return encode_edited_push(std::move(*d));
}

}  // namespace dd::actors
