// actors/link/chunk_flow.hpp — credit-based flow control of chunk messages between actors: the CAF
// shell around policy::credit_window (actors/policy/credit_window.hpp).
//
// Every tensor transfer travels as chunk messages under credit, in both directions:
//   learner -> owner   : (push_atom, wire_bytes push_msg, uint64 seq)
//   learner -> owner   : (copy_atom, wire_bytes broadcast_msg, uint64 seq)     (rebuild)
//   owner   -> learner : (broadcast_atom, wire_bytes broadcast_msg, uint64 seq) (merges, pull
//                        answers, a reject's current value, a rebuilt value; also to the
//                        evaluator)
//   receiver -> sender : (credit_atom, uint64 seq)   sent when the receiver takes the chunk out
//                        of its mailbox, whatever it then does with it (also when it does not
//                        decode), so a link never stalls on a bad chunk.
// A link is (sending actor, receiving actor); at most `window` chunks per link are in flight
// (sent, not yet credited), so bytes in flight per link <= window × chunk_bytes. A sender
// monitors each peer it queues chunks for; when the peer goes down (it quit, or its node's
// connection was lost) the link's queue and in-flight numbers are freed. A duplicate or late
// credit changes nothing. A chunk with seq 0 is taken without credit (tests and tools that send
// single chunks).
// A chunk is a pre-built message (atom, bytes) with its number appended per link: it travels
// through an untyped handle, sent as the actor's own `send` would (same sender, same execution
// context), from typed and untyped actors alike; callers pass any handle (typed or not).
// The link is where faults are injected (the node's fault filter, link_setup::faults): a push
// leaving through flow_push (actors/link/push_faults.hpp) may be dropped, damaged, scaled,
// randomized, sent twice, sent late or held back until after the next one; a broadcast leaving
// through flow_publish may be dropped, sent twice, sent late or held back until after the next
// one — as the node's fault hooks decide; roles hold no fault code.
// Between nodes, a chunk leaves on the tensor channel (actors/link/tensor_channel.hpp) when the
// link's route (link_setup::channel, set by the node) holds one open to the receiver's node, and
// on CAF otherwise; the receiver sees the
// same message either way, and credits always travel on CAF.
// Used on the owning actor's thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <type_traits>
#include <utility>

#include <caf/actor.hpp>
#include <caf/actor_cast.hpp>
#include <caf/actor_control_block.hpp>
#include <caf/mailbox_element.hpp>
#include <caf/message.hpp>
#include <caf/send.hpp>
#include <caf/system_messages.hpp>

#include "actors/link/atoms.hpp"
#include "actors/link/push_faults.hpp"
#include "actors/link/tensor_channel.hpp"
#include "actors/policy/credit_window.hpp"
#include "actors/services/fault_hooks.hpp"
#include "messages/codec.hpp"

namespace dd::actors {

/// One chunk waiting for (or holding) a slot of its link's window.
struct queued_chunk {
  caf::actor dest;
  /// (atom, wire_bytes): the chunk message without its sequence number. A broadcast's message
  /// is built once and shared by every link it goes to (CAF messages are reference counted);
  /// the number is appended per link when it is sent (`caf::message::concat`, no copy).
  caf::message msg;
  size_t bytes = 0;      ///< encoded chunk bytes (statistics)
  double delay_s = 0.0;  ///< fault injection: sent this many seconds late (still in flight)
  /// What the message is on a tensor channel (from its atom); 0: CAF only.
  uint8_t channel = 0;
};

/// The tensor channel kind of chunk atom `Atom` (0: not a channel kind).
template <class Atom>
constexpr uint8_t channel_kind_of() {
  if constexpr (std::is_same_v<Atom, atoms::push_atom>)
    return static_cast<uint8_t>(channel_kind::push);
  else if constexpr (std::is_same_v<Atom, atoms::copy_atom>)
    return static_cast<uint8_t>(channel_kind::copy);
  else if constexpr (std::is_same_v<Atom, atoms::broadcast_atom>)
    return static_cast<uint8_t>(channel_kind::broadcast);
  else
    return 0;
}

/// The chunk message (atom, bytes) for queueing (bytes moved in); `dest` any actor handle.
template <class Handle, class Atom>
queued_chunk make_chunk(const Handle& dest, Atom atom, wire_bytes bytes, double delay_s = 0) {
  queued_chunk c;
  c.dest = caf::actor_cast<caf::actor>(dest);
  c.bytes = bytes.size();
  c.msg = caf::make_message(atom, std::move(bytes));
  c.delay_s = delay_s;
  c.channel = channel_kind_of<Atom>();
  return c;
}

/// A link's key: the receiving actor's control block (identity of the handle object, so a
/// fresh proxy of a reconnected peer is a new link even when it compares equal to the old one).
using flow_peer = const caf::actor_control_block*;

/// What the node decides about the links of the actors it hosts; roles get it in their context
/// and install it in their chunk_flow.
struct link_setup {
  /// The node's fault filter on messages leaving it (actors/services/fault_hooks.hpp); null:
  /// none.
  fault_hooks* faults = nullptr;
  /// Where the filter records what it did (events, the node's push metrics); null: nowhere.
  event_sink* log = nullptr;
  /// The transport of chunks to other nodes (actors/link/tensor_channel.hpp): the node's tensor
  /// channel when open to the receiver's node, else CAF. Null: CAF only.
  std::shared_ptr<const channel_route> channel;
};

/// A broadcast a reorder fault holds back (flow_publish).
struct held_broadcast {
  caf::actor dest;
  uint64_t version = 0;
  std::vector<queued_chunk> chunks;
};

/// Per-actor flow-control state (a member of the actor's state).
struct chunk_flow {
  /// `first_seq`: see policy::credit_window (a second flow of the same actor starts elsewhere).
  explicit chunk_flow(size_t window = policy::default_window_chunks, uint64_t first_seq = 1)
      : win(window, first_seq) {}
  policy::credit_window<flow_peer, queued_chunk> win;
  /// Peers this actor monitors for the flow (their handles keep the keys unique until down).
  std::map<flow_peer, caf::actor> watched;
  uint64_t chunks_sent = 0;  ///< chunk messages sent under credit
  uint64_t bytes_sent = 0;   ///< their encoded bytes
  link_setup link;           ///< the node's decisions (fault filter, transport)
  /// Broadcasts held back by a `reorder_broadcast` fault: sent right after the next
  /// flow_publish, so a newer version reaches the learner first.
  std::vector<held_broadcast> held;
  /// The fault filter's state for pushes leaving through flow_push.
  push_filter pushes;
};

/// The key of handle `h` (any actor handle).
template <class Handle>
flow_peer flow_key(const Handle& h) {
  return caf::actor_cast<caf::actor_control_block*>(h);
}

namespace detail {

template <class Self>
void flow_emit(Self* self, chunk_flow& f,
               std::vector<policy::credit_window<flow_peer, queued_chunk>::send_order> orders) {
  for (auto& o : orders) {
    auto& c = o.item;
    f.chunks_sent += 1;
    f.bytes_sent += c.bytes;
    // A remote receiver whose node the link's route holds a tensor channel to: the chunk goes
    // there (the queued message keeps its bytes alive until written). Late chunks stay on CAF.
    if (c.channel != 0 && c.delay_s <= 0 && f.link.channel != nullptr) {
      const auto hub = f.link.channel->hub();
      if (hub != nullptr && hub->try_send(c.dest, caf::strong_actor_ptr{self->ctrl()},
                                          static_cast<channel_kind>(c.channel), o.seq, c.msg))
        continue;
    }
    auto msg = caf::message::concat(c.msg, caf::make_message(o.seq));
    // What self->send / self->delayed_send do, without their static check (a typed actor may
    // send() only to typed handles, and a pre-built message has no static type).
    if (c.delay_s > 0) {
      auto& clock = self->system().clock();
      clock.schedule_message(clock.now() + std::chrono::duration_cast<caf::timespan>(
                                               std::chrono::duration<double>(c.delay_s)),
                             caf::actor_cast<caf::strong_actor_ptr>(c.dest),
                             caf::make_mailbox_element(
                                 self->ctrl(), caf::make_message_id(caf::message_priority::normal),
                                 {}, std::move(msg)));
    } else {
      caf::unsafe_send_as(self, c.dest, std::move(msg));
    }
  }
}

}  // namespace detail

/// Queues chunk `c` for `c.dest` (tag: see policy::credit_window::enqueue) and sends what the
/// window allows. A null destination is ignored. The first chunk to a peer monitors it.
template <class Self>
void flow_send(Self* self, chunk_flow& f, queued_chunk c, uint64_t tag = 0) {
  if (!c.dest) return;
  const flow_peer key = flow_key(c.dest);
  if (f.watched.count(key) == 0) {
    f.watched.emplace(key, c.dest);
    self->monitor(c.dest);
  }
  detail::flow_emit(self, f, f.win.enqueue(key, std::move(c), tag));
}

/// Push `p` to `owner` (any handle; null: nothing leaves), each chunk under credit, through
/// the link's fault filter on its way out of the node (push_filter::route: on its first sending
/// it may be dropped, damaged, scaled, randomized, sent twice, late or held back; a push held
/// back earlier goes out after it).
template <class Self, class Handle>
void flow_push(Self* self, chunk_flow& f, const Handle& owner, outgoing_push p) {
  auto sends =
      f.pushes.route(f.link.faults, f.link.log, caf::actor_cast<caf::actor>(owner), std::move(p));
  for (auto& s : sends)
    for (auto& c : s.chunks)
      flow_send(self, f, make_chunk(s.dest, atoms::push_atom_v, std::move(c), s.delay_s));
}

/// Broadcast chunks (shared (broadcast_atom, bytes) messages, see share_chunks) of version
/// `version` to `dest`: drops the chunks of older versions still queued (not yet sent) for it —
/// the newest value wins at the receiver anyway, so a slow learner's queue holds at most about
/// one value — then queues these. `delay_s`: fault injection (sent late).
template <class Self, class Handle>
void flow_broadcast(Self* self, chunk_flow& f, const Handle& dest,
                    const std::vector<queued_chunk>& chunks, uint64_t version,
                    double delay_s = 0.0) {
  if (!dest) return;
  f.win.discard_queued(flow_key(dest), [version](uint64_t tag) { return tag < version; });
  for (const auto& ch : chunks) {
    queued_chunk c = ch;
    c.dest = caf::actor_cast<caf::actor>(dest);
    c.delay_s = delay_s;
    flow_send(self, f, std::move(c), version);
  }
}

/// Publishes version `version` of fragment `fragment` (its broadcast chunks, see share_chunks)
/// to every learner of `learners` ((learner id, handle) pairs), each link under its own credit
/// (flow_broadcast). Each copy leaves the node through the link's fault filter
/// (fault_hooks::on_broadcast): dropped, sent twice, sent `delay_s` late, or held back and sent
/// after the next publish. Copies an earlier publish held back go out after these.
template <class Self, class Learners>
void flow_publish(Self* self, chunk_flow& f, const Learners& learners,
                  const std::vector<queued_chunk>& chunks, uint64_t version, int32_t fragment) {
  auto held = std::move(f.held);
  f.held.clear();
  for (const auto& [id, handle] : learners) {
    broadcast_fault fate;
    if (f.link.faults != nullptr) fate = f.link.faults->on_broadcast(fragment, id);
    if (fate.drop) continue;
    if (fate.reorder) {
      f.held.push_back({caf::actor_cast<caf::actor>(handle), version, chunks});
      continue;
    }
    for (int copy = 0; copy < (fate.duplicate ? 2 : 1); ++copy)
      flow_broadcast(self, f, handle, chunks, version, fate.delay_s);
  }
  for (const auto& h : held) flow_broadcast(self, f, h.dest, h.chunks, h.version);
}

/// Wraps encoded broadcast chunks as (broadcast_atom, bytes) messages, built once and shared by
/// every link (destination unset: flow_broadcast sets it).
inline std::vector<queued_chunk> share_chunks(std::vector<wire_bytes> v) {
  std::vector<queued_chunk> out;
  out.reserve(v.size());
  for (auto& b : v) out.push_back(make_chunk(caf::actor{}, atoms::broadcast_atom_v, std::move(b)));
  return out;
}

/// A credit arrived: frees the chunk's slot and sends what its link may send now.
template <class Self>
void flow_credit(Self* self, chunk_flow& f, uint64_t seq) {
  detail::flow_emit(self, f, f.win.credit(seq));
}

/// A monitored peer went down: frees its link. Returns true when `dm` was about a flow peer
/// (actors that monitor other peers for their own reasons handle the rest).
inline bool flow_down(chunk_flow& f, const caf::down_msg& dm) {
  const auto* key = caf::actor_cast<caf::actor_control_block*>(dm.source);
  auto it = f.watched.find(key);
  if (it == f.watched.end()) return false;
  f.win.drop(key);
  f.watched.erase(it);
  return true;
}

/// Receiver side: credits chunk `seq` to the sender of the current message. Number 0 is never
/// sent under credit (numbers start at 1): a sender that wants no credit (a test, a tool sending
/// one chunk) uses 0 and gets nothing back.
template <class Self>
void grant_credit(Self* self, uint64_t seq) {
  if (seq == 0) return;
  if (auto to = caf::actor_cast<caf::actor>(self->current_sender()))
    caf::unsafe_send_as(self, to, atoms::credit_atom_v, seq);  // typed senders too
}

}  // namespace dd::actors
