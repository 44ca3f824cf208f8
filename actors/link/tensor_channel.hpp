// actors/link/tensor_channel.hpp — the tensor channel: chunk messages between a learner node and
// the syncer node over a plain TCP connection of their own, beside CAF's BASP connection.
//
// Why: CAF 0.17's BASP costs every chunk a copy into the middleman's write buffer on the sender,
// and a copy into a worker's buffer plus a zero-filled fresh vector on the receiver, on top of
// the socket copies (docs/benchmarks-transport.md "Transport": pushes at 0.37 of raw TCP with the
// same window). The channel writes a chunk's encoded bytes straight from the message that holds
// them (writev of a 48-byte frame header and the bytes) and reads them into the vector the
// receiving actor gets — a buffer of an earlier chunk its receiver let go of, so no fresh mapping,
// page faults or zero-fill per chunk: one copy per side, as raw TCP.
//
// What travels on it: only the chunk messages of actors/link/chunk_flow.hpp — (push_atom, bytes,
// seq) and (copy_atom, bytes, seq) learner → owner, (broadcast_atom, bytes, seq) owner → learner.
// Credits, acknowledgements and every control message stay on CAF. A chunk leaves on the channel
// when the sending node holds an open channel to the receiver's node; otherwise on CAF, as
// before (a node without a channel works unchanged, only slower). At the receiver the chunk is
// put into the receiving actor's mailbox as if CAF had delivered it, with the sender's CAF proxy
// as its sender: handlers, credit (grant_credit answers that proxy over CAF) and checks are the
// same on both paths.
//
// Where it connects: to the syncer's listen address, the same HOST:PORT learners join. The
// syncer's frame guard (actors/link/frame_guard.hpp) forwards CAF's server handshake as it does for
// every connection; a channel client reads and skips it and answers with the channel hello
// instead of a BASP client handshake. The guard sees the hello's magic in the first 32 bytes,
// closes its connection to the middleman and hands the socket to the syncer's hub. So the channel
// needs no second port and goes through whatever path (a fault proxy, a namespace bridge) the
// learner's join address takes. A syncer without the guard (`--max-frame-bytes 0`) lets CAF read
// the hello as a BASP header, which it refuses by closing: the learner node logs that and sends
// its chunks on CAF.
//
// Wire (all integers little-endian; layout in docs/tensor-channel.md):
//   hello (client → server) and hello reply (server → client): a 32-byte prefix
//     [0,8) magic "DDTCHAN1", [8,12) u32 version (2), [12,16) u32 body bytes (≤ 4096),
//     [16,28) zero, [28,32) u32 CRC-32C of bytes [0,28) and the body;
//   hello body: u16 + run id, u16 + the client's CAF node id (caf::binary_serializer);
//   reply body: u8 status (0 accepted, 1 refused, 2 challenge), u16 + reason, u16 + the
//     server's node id (status 2: a 32-byte nonce); after a challenge the client sends a proof
//     (the same prefix, body u16 + HMAC-SHA256 of the join token, join_auth.hpp) and the server
//     answers with status 0 or 1.
//   frame (either way): a 48-byte header [0,4) magic "DDTF", [4] kind (1 push, 2 copy,
//     3 broadcast), [5,8) zero, [8,16) u64 receiving actor id, [16,24) u64 sending actor id,
//     [24,32) u64 seq (chunk_flow's link number), [32,40) u64 payload bytes, [40,44) u32 CRC-32C
//     of bytes [0,40), [44,48) zero; then the payload: the sealed chunk message (its own
//     CRC-32C trailer, checked by the decoder as on the CAF path).
//
// Promises under failure:
//  - A frame header that fails its CRC or announces more than max_frame_bytes, or a frame for an
//    endpoint that takes other kinds, closes the channel (logged with the peer and the field):
//    the stream cannot be trusted past it. Nothing of that frame is delivered. A frame for an
//    actor that is no endpoint here (it terminated while the chunk travelled) is dropped.
//  - A damaged payload is delivered as it is; the receiver's decoder refuses it by its checksum
//    (checksum_mismatch) and the learner sends the push again, as on CAF.
//  - A closed channel loses the chunks in flight on it. On the learner node a channel that
//    closes drops the node's CAF connection to the syncer too (on_lost), so every link of that
//    connection is freed by CAF's down messages and the node rejoins (a fresh channel comes with
//    the rejoin). A chunk is never delivered twice, and never to another actor than the one its
//    sender addressed.
//  - A hello with another run id or version is refused with a reason both sides log; a peer that
//    sends nothing is closed after the handshake timeout. With a join token a hello opens a
//    channel only with a proof over a challenge fresh for that connection: a recorded greeting
//    replayed is refused.
//  - Sockets have SO_KEEPALIVE and TCP_USER_TIMEOUT (user_timeout_s): a peer that vanished is
//    noticed by the kernel even when nothing is written to it.
// Threads: per channel one reader and one writer thread; the hub's destructor closes every
// channel and joins them (destroy the hub before its actor system).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/message.hpp>
#include <caf/node_id.hpp>
#include <caf/proxy_registry.hpp>

#include "messages/error.hpp"

namespace dd::actors {

/// What a frame becomes at the receiver: (push_atom|copy_atom|broadcast_atom, bytes, seq).
enum class channel_kind : uint8_t { push = 1, copy = 2, broadcast = 3 };

/// Bytes of the hello prefix; its first 8 are `channel_magic`.
inline constexpr size_t channel_hello_prefix_bytes = 32;
/// The first 8 bytes a channel client sends (never the start of a BASP header: its first byte
/// is an operation code below 8).
inline constexpr char channel_magic[9] = "DDTCHAN1";

/// Counters of a hub (all channels, all time). Read with tensor_channel_hub::stats().
struct channel_stats {
  uint64_t frames_sent = 0;
  uint64_t bytes_sent = 0;  ///< payload bytes
  uint64_t frames_received = 0;
  uint64_t bytes_received = 0;  ///< payload bytes
  uint64_t opened = 0;          ///< channels that completed their hello
  uint64_t closed = 0;          ///< channels closed (any reason)
  uint64_t refused = 0;         ///< hellos refused, here or by the peer
  /// Payload buffers the readers allocated because none of the earlier ones was released.
  uint64_t buffers_fresh = 0;
};

class channel_conn;

/// One actor system's tensor channels: the server side (sockets handed over by the frame guard)
/// and the client side (connect). At most one open channel per remote node: a new one from or to
/// the same node replaces the old (closed). Thread-safe.
class tensor_channel_hub : public std::enable_shared_from_this<tensor_channel_hub> {
 public:
  struct options {
    /// The run id a peer's hello must carry (hex, as in the envelopes).
    std::string run_id;
    /// The join token (actors/link/join_auth.hpp). Server: non-empty = a hello is answered with
    /// a challenge (status 2) the client must prove the token over before the channel opens
    /// (a refused proof is reported as "auth_refused" too). Client: answers such a challenge.
    std::string join_token;
    /// A frame announcing more payload bytes than this closes its channel.
    uint64_t max_frame_bytes = uint64_t{80} << 20;
    /// A hello (either side) must complete within this many seconds.
    double handshake_timeout_s = 5.0;
    /// TCP_USER_TIMEOUT of channel sockets, seconds (unacknowledged data this long: the kernel
    /// closes the socket).
    double user_timeout_s = 20.0;
    /// Called with (event, details) for opened / refused / closed channels (any thread; keep it
    /// short). Events: "channel_open", "channel_refused", "channel_closed".
    std::function<void(const std::string& event, const std::string& details)> report;
    /// Server: vets a hello's node id against the connection it came on (peer "IP:PORT" as the
    /// frame guard names it): "" accepts, anything else refuses the hello with that reason
    /// (mutual TLS: the node must be bound to this connection's certificate; peer_identity.hpp).
    /// Empty: none.
    std::function<std::string(const std::string& peer, const caf::node_id& node)> vet_hello;
    /// Called once for every channel that closes after it was open, with the reason (the reader
    /// or writer thread; keep it short). The learner node drops its CAF connection here.
    std::function<void(const std::string& why)> on_lost;
  };

  /// A hub for `sys`. Its node hands it to the links of the actors it hosts through a
  /// channel_route (below). Destroy it before `sys`.
  static std::shared_ptr<tensor_channel_hub> make(caf::actor_system& sys, options o);
  ~tensor_channel_hub();
  tensor_channel_hub(const tensor_channel_hub&) = delete;
  tensor_channel_hub& operator=(const tensor_channel_hub&) = delete;

  /// Server side: takes over socket `fd` (blocking or not) whose first bytes, `first` (at least
  /// the 32-byte hello prefix), were already read; reads the rest of the hello, answers it, and
  /// on acceptance opens the channel. Returns at once (the hello runs on a thread of its own).
  void accept(int fd, std::string peer, std::vector<uint8_t> first);

  /// Client side: connects to host:port (non-blocking connect; the whole hello within
  /// options.handshake_timeout_s), skips the CAF server handshake that the syncer's frame guard
  /// forwards, says hello and opens the channel to `remote` (the syncer node's CAF node id).
  /// Errors: errc::io (unreachable, closed, timed out: a syncer without the guard closes here),
  /// errc::other_run / errc::schema_mismatch (refused by the peer, reason given), errc::malformed
  /// (an answer that is neither). Blocking: call it from a non-actor thread.
  status connect(const std::string& host, uint16_t port, const caf::node_id& remote);

  /// Closes every channel (why: logged) and waits for their threads.
  void close_all(const std::string& why);

  /// True while a channel to `node` is open.
  bool connected_to(const caf::node_id& node) const;

  channel_stats stats() const;

  /// Off: try_send answers false, so chunks leave on CAF although channels stay open (what
  /// dd-bench-transport's "push, CAF only" row measures). On by default.
  void set_sending(bool on) { sending_.store(on); }

  /// Marks local actor `self` of `sys` as a channel endpoint taking `kinds`: a frame of another
  /// kind for it closes its channel; a frame for an actor that is no endpoint (it terminated) is
  /// dropped. Kept until the actor terminates; recorded whether or not `sys` has a hub yet.
  static void allow(caf::actor_system& sys, const caf::strong_actor_ptr& self,
                    std::initializer_list<channel_kind> kinds);

  /// chunk_flow's send path (through a channel_route): when this hub has an open channel to
  /// `dest`'s node, queues `msg` ((atom, wire_bytes), kept alive until written) as a frame of
  /// `kind` from local actor `src` to `dest` with link number `seq`, and returns true. False:
  /// send it on CAF. Puts `src` into the actor system's registry (as CAF does for a handle it
  /// serializes), so that the receiver's proxy of it stays alive and its credits come back.
  bool try_send(const caf::actor& dest, const caf::strong_actor_ptr& src, channel_kind kind,
                uint64_t seq, const caf::message& msg);

  // -- used by channel_conn ----------------------------------------------------------------------
  /// Delivers one received frame (reader thread); `delivered` gets the message put into the
  /// receiver's mailbox (empty when dropped). False (with `why`) closes the channel.
  bool deliver(const caf::node_id& from, channel_kind kind, caf::actor_id dest, caf::actor_id src,
               uint64_t seq, std::vector<uint8_t>&& bytes, std::string* why,
               caf::message* delivered);
  /// A channel closed (reader or writer thread, or close_all). `failure`: it broke (on_lost is
  /// called), rather than being closed on purpose.
  void closed(channel_conn* c, const std::string& why, bool failure);
  const options& opts() const { return opts_; }
  /// Counters, updated by the channels.
  std::atomic<uint64_t> frames_sent{0}, bytes_sent{0}, frames_received{0}, bytes_received{0},
      buffers_fresh{0};

 private:
  tensor_channel_hub(caf::actor_system& sys, options o);
  void open(int fd, const caf::node_id& peer_node, const std::string& peer);
  void reap();
  std::shared_ptr<channel_conn> find(const caf::node_id& node) const;

  caf::actor_system& sys_;
  options opts_;
  mutable std::mutex mu_;
  std::map<caf::node_id, std::shared_ptr<channel_conn>> open_;
  std::list<std::shared_ptr<channel_conn>> all_;  // open and closed, until their threads joined
  struct hello_thread {
    std::thread t;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::list<hello_thread> hellos_;          // server-side hellos, joined by reap() once done
  caf::proxy_registry* proxies_ = nullptr;  // the BASP broker's (thread-safe)
  std::atomic<uint64_t> opened_{0}, closed_{0}, refused_{0};
  bool stopping_ = false;
  std::atomic<bool> sending_{true};
};

/// One node's transport decision for the chunks its actors send to other nodes: the node's hub
/// once it has one (set by the node: a syncer when it publishes its monitor, a learner node when
/// it first joins), whose open channel to the receiver's node carries them; until then, without
/// a hub, or with no channel to that node, CAF. The node creates it before its roles and hands
/// it to them in their contexts (link_setup::channel, actors/link/chunk_flow.hpp); it holds the
/// hub weakly, so the node still destroys the hub before its actor system. Thread-safe.
class channel_route {
 public:
  /// From now on chunks to other nodes try `hub` first.
  void set(const std::shared_ptr<tensor_channel_hub>& hub);
  /// The hub chunks try first; null: CAF only.
  std::shared_ptr<tensor_channel_hub> hub() const;

 private:
  mutable std::mutex mu_;
  std::weak_ptr<tensor_channel_hub> hub_;
};

}  // namespace dd::actors
