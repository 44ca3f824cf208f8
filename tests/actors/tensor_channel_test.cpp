// tests/actors/tensor_channel_test.cpp — the tensor channel (actors/link/tensor_channel.hpp)
// between two actor systems in this process over real loopback TCP, the receiving one behind a
// frame guard as the syncer node is: chunks cross on it with their sender's identity and their
// credits come back on CAF; a hello of another run is refused with both run ids; a frame the stream
// cannot be trusted past (a damaged header, an oversized one, a kind its receiver does not take)
// closes the channel, and the sending side hears of it (on_lost); a port without the guard has no
// channel, and says so.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <caf/all.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/io/all.hpp>

#include "actors/link/atoms.hpp"
#include "actors/link/chunk_flow.hpp"
#include "actors/link/frame_guard.hpp"
#include "actors/link/tensor_channel.hpp"
#include "actors/nodes/node_config.hpp"
#include "util/crc32c.hpp"

namespace {

using namespace dd::actors;
namespace atoms = dd::atoms;
using dd::wire_bytes;

constexpr const char* run_id = "5eed0f7e57c4a27e";

bool wait_until(const std::function<bool()>& f, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (f()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return f();
}

/// What the receiving actor saw.
struct received {
  std::mutex m;
  struct chunk {
    uint64_t seq;
    wire_bytes bytes;
    caf::actor_id sender;
    caf::node_id sender_node;
  };
  std::vector<chunk> chunks;
  /// A chunk whose seq is at least this waits in the handler until the gate moves past it, so
  /// the chunks after it stay in the actor's mailbox with their buffers (no gate by default).
  std::atomic<uint64_t> gate{UINT64_MAX};
  size_t count() {
    std::lock_guard<std::mutex> g(m);
    return chunks.size();
  }
};

/// Takes push chunks: grants credit and records them.
caf::behavior receiver(caf::event_based_actor* self, received* out) {
  return {[=](atoms::push_atom, const wire_bytes& b, uint64_t seq) {
    while (seq >= out->gate.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    grant_credit(self, seq);
    const auto& s = self->current_sender();
    std::lock_guard<std::mutex> g(out->m);
    out->chunks.push_back({seq, b, s ? s->id() : 0, s ? s->node() : caf::node_id{}});
  }};
}

struct sender_state {
  chunk_flow flow{1};
  size_t credits = 0;
};

/// On (step_atom, dest, n, atom kind): sends n chunks of distinct bytes to dest under a window of
/// `window` chunks; counts the credits that come back. (It takes an argument on purpose: CAF
/// 0.17 spawns a function actor without arguments through `*shared_ptr<tuple<>>{}`, a reference
/// bound to null that UBSan stops at.)
caf::behavior sender(caf::stateful_actor<sender_state>* self, size_t window,
                     std::shared_ptr<channel_route> route) {
  self->state.flow = chunk_flow(window);
  self->state.flow.link.channel = std::move(route);
  self->set_down_handler([=](caf::down_msg& dm) { flow_down(self->state.flow, dm); });
  return {
      [=](atoms::step_atom, caf::actor dest, int n, bool as_broadcast) {
        for (int i = 0; i < n; ++i) {
          wire_bytes b(65536 + static_cast<size_t>(i));
          for (size_t k = 0; k < b.size(); ++k) b[k] = static_cast<uint8_t>(k * 7 + i);
          auto c = as_broadcast ? make_chunk(dest, atoms::broadcast_atom_v, std::move(b))
                                : make_chunk(dest, atoms::push_atom_v, std::move(b));
          flow_send(self, self->state.flow, std::move(c));
        }
      },
      [=](atoms::credit_atom, uint64_t seq) {
        ++self->state.credits;
        flow_credit(self, self->state.flow, seq);
      },
      [=](atoms::status_atom) { return static_cast<uint64_t>(self->state.credits); },
  };
}

node_transport transport() {
  node_transport t;
  t.heartbeat_s = 0.5;
  t.connection_timeout_s = 5;
  return t;
}

/// The receiving node: the actor published on loopback behind a frame guard that hands channels
/// to this node's hub (as publish_monitor does).
struct receiving_node {
  node_config cfg{transport()};
  caf::actor_system sys{cfg};
  received got;
  std::mutex m;
  std::vector<std::string> events;  // "event: details"
  std::shared_ptr<tensor_channel_hub> hub;
  std::unique_ptr<frame_guard> guard;
  caf::actor rcv;
  uint16_t caf_port = 0;

  explicit receiving_node(uint64_t max_frame_bytes = uint64_t{1} << 20) {
    rcv = sys.spawn(receiver, &got);
    tensor_channel_hub::allow(sys, caf::actor_cast<caf::strong_actor_ptr>(rcv),
                              {channel_kind::push});
    auto p = sys.middleman().publish(rcv, 0, "127.0.0.1", true);
    EXPECT_TRUE(p) << sys.render(p.error());
    caf_port = p ? *p : 0;
    tensor_channel_hub::options o;
    o.run_id = run_id;
    o.max_frame_bytes = max_frame_bytes;
    o.report = [this](const std::string& e, const std::string& d) {
      std::lock_guard<std::mutex> g(m);
      events.push_back(e + ": " + d);
    };
    hub = tensor_channel_hub::make(sys, o);
    std::weak_ptr<tensor_channel_hub> weak = hub;
    guard = std::make_unique<frame_guard>(
        "127.0.0.1", 0, caf_port, frame_guard_limits{uint64_t{80} << 20}, [](const std::string&) {},
        [weak](int fd, std::string peer, std::vector<uint8_t> first) {
          if (auto h = weak.lock())
            h->accept(fd, std::move(peer), std::move(first));
          else
            ::close(fd);
        });
  }
  ~receiving_node() {
    guard.reset();
    hub.reset();
    caf::anon_send_exit(rcv, caf::exit_reason::user_shutdown);
  }
  bool logged(const std::string& needle) {
    std::lock_guard<std::mutex> g(m);
    for (const auto& e : events)
      if (e.find(needle) != std::string::npos) return true;
    return false;
  }
  std::string all_events() {
    std::lock_guard<std::mutex> g(m);
    std::string s;
    for (const auto& e : events) s += e + "\n";
    return s;
  }
};

/// The sending node (a learner node's side): a hub of its own that connects.
struct sending_node {
  node_config cfg{transport()};
  caf::actor_system sys{cfg};
  std::shared_ptr<tensor_channel_hub> hub;
  /// What the node hands its senders: chunks try `hub` first.
  std::shared_ptr<channel_route> route = std::make_shared<channel_route>();
  std::mutex m;
  std::string lost;

  explicit sending_node(const std::string& run = run_id) {
    tensor_channel_hub::options o;
    o.run_id = run;
    o.on_lost = [this](const std::string& why) {
      std::lock_guard<std::mutex> g(m);
      lost = why;
    };
    hub = tensor_channel_hub::make(sys, o);
    route->set(hub);
  }
  ~sending_node() { hub.reset(); }
  std::string lost_why() {
    std::lock_guard<std::mutex> g(m);
    return lost;
  }
};

TEST(tensor_channel, chunks_cross_with_their_senders_identity_and_their_credits_come_back) {
  receiving_node a;
  sending_node b;
  auto dest = b.sys.middleman().remote_actor("127.0.0.1", a.guard->port());
  ASSERT_TRUE(dest) << b.sys.render(dest.error());
  auto st = b.hub->connect("127.0.0.1", a.guard->port(), dest->node());
  ASSERT_TRUE(st.ok()) << st.error().message;
  ASSERT_TRUE(b.hub->connected_to(dest->node()));
  ASSERT_TRUE(wait_until([&] { return a.hub->stats().opened == 1; }, 5));

  auto snd = b.sys.spawn(sender, size_t{3}, b.route);
  caf::anon_send(snd, atoms::step_atom_v, *dest, 12, false);
  ASSERT_TRUE(wait_until([&] { return a.got.count() == 12; }, 10)) << a.got.count();
  caf::scoped_actor self{b.sys};
  uint64_t credits = 0;
  ASSERT_TRUE(wait_until(
      [&] {
        self->request(snd, std::chrono::seconds(2), atoms::status_atom_v)
            .receive([&](uint64_t c) { credits = c; }, [](caf::error&) {});
        return credits == 12;
      },
      10))
      << credits;
  // On the channel, not on CAF: 12 frames each way counted, 12 chunks in order.
  EXPECT_EQ(b.hub->stats().frames_sent, 12u);
  EXPECT_EQ(a.hub->stats().frames_received, 12u);
  std::lock_guard<std::mutex> g(a.got.m);
  for (size_t i = 0; i < a.got.chunks.size(); ++i) {
    const auto& c = a.got.chunks[i];
    EXPECT_EQ(c.seq, i + 1);
    ASSERT_EQ(c.bytes.size(), 65536 + i);
    EXPECT_EQ(c.bytes[100], static_cast<uint8_t>(100 * 7 + i));
    EXPECT_EQ(c.sender, snd.id());
    EXPECT_EQ(c.sender_node, b.sys.node());
  }
  caf::anon_send_exit(snd, caf::exit_reason::user_shutdown);
}

// The reader reads each payload into a buffer its receiver let go of. It keeps as many such
// buffers as were in use at once, so a second burst as large as the first maps no fresh one
// (keeping a fixed 4 made every burst of more than 4 chunks map fresh buffers again).
TEST(tensor_channel, a_second_burst_reuses_every_buffer_the_first_one_needed) {
  receiving_node a;
  sending_node b;
  auto dest = b.sys.middleman().remote_actor("127.0.0.1", a.guard->port());
  ASSERT_TRUE(dest) << b.sys.render(dest.error());
  ASSERT_TRUE(b.hub->connect("127.0.0.1", a.guard->port(), dest->node()).ok());
  ASSERT_TRUE(wait_until([&] { return a.hub->stats().opened == 1; }, 5));
  constexpr int burst = 8;
  auto snd = b.sys.spawn(sender, size_t{burst}, b.route);
  caf::scoped_actor self{b.sys};
  auto credits_are = [&](uint64_t want) {
    uint64_t credits = 0;
    return wait_until(
        [&] {
          self->request(snd, std::chrono::seconds(2), atoms::status_atom_v)
              .receive([&](uint64_t c) { credits = c; }, [](caf::error&) {});
          return credits == want;
        },
        10);
  };
  // Burst 1: the receiver holds chunk 1 in its handler, so all 8 buffers are in use at once.
  a.got.gate = 1;
  caf::anon_send(snd, atoms::step_atom_v, *dest, burst, false);
  ASSERT_TRUE(wait_until([&] { return a.hub->stats().frames_received == burst; }, 10));
  EXPECT_EQ(a.hub->stats().buffers_fresh, uint64_t{burst});
  a.got.gate = burst + 1;
  ASSERT_TRUE(wait_until([&] { return a.got.count() == burst; }, 10)) << a.got.count();
  ASSERT_TRUE(credits_are(burst));
  // Burst 2, held the same way: every buffer comes from burst 1.
  caf::anon_send(snd, atoms::step_atom_v, *dest, burst, false);
  ASSERT_TRUE(wait_until([&] { return a.hub->stats().frames_received == 2 * burst; }, 10));
  EXPECT_EQ(a.hub->stats().buffers_fresh, uint64_t{burst});
  a.got.gate = UINT64_MAX;
  ASSERT_TRUE(wait_until([&] { return a.got.count() == 2 * burst; }, 10)) << a.got.count();
  ASSERT_TRUE(credits_are(2 * burst));
  std::lock_guard<std::mutex> g(a.got.m);
  for (size_t i = 0; i < a.got.chunks.size(); ++i) {
    const auto& c = a.got.chunks[i];
    const size_t k = i % burst;  // the sender's chunk number within its step
    EXPECT_EQ(c.seq, i + 1);
    ASSERT_EQ(c.bytes.size(), 65536 + k);
    EXPECT_EQ(c.bytes[100], static_cast<uint8_t>(100 * 7 + k));
    EXPECT_EQ(c.bytes.back(), static_cast<uint8_t>((65535 + k) * 7 + k));
  }
  caf::anon_send_exit(snd, caf::exit_reason::user_shutdown);
}

TEST(tensor_channel, a_hello_of_another_run_is_refused_naming_both_runs) {
  receiving_node a;
  sending_node b("0123456789abcdef");
  auto dest = b.sys.middleman().remote_actor("127.0.0.1", a.guard->port());
  ASSERT_TRUE(dest) << b.sys.render(dest.error());
  auto st = b.hub->connect("127.0.0.1", a.guard->port(), dest->node());
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), dd::errc::other_run) << st.error().message;
  EXPECT_NE(st.error().message.find("0123456789abcdef"), std::string::npos) << st.error().message;
  EXPECT_NE(st.error().message.find(run_id), std::string::npos) << st.error().message;
  EXPECT_FALSE(b.hub->connected_to(dest->node()));
  EXPECT_TRUE(wait_until([&] { return a.logged("channel_refused"); }, 5)) << a.all_events();
  EXPECT_EQ(a.hub->stats().refused, 1u);
}

TEST(tensor_channel, a_chunk_its_receiver_does_not_take_closes_the_channel_and_the_sender_hears) {
  receiving_node a;
  sending_node b;
  auto dest = b.sys.middleman().remote_actor("127.0.0.1", a.guard->port());
  ASSERT_TRUE(dest) << b.sys.render(dest.error());
  ASSERT_TRUE(b.hub->connect("127.0.0.1", a.guard->port(), dest->node()).ok());
  auto snd = b.sys.spawn(sender, size_t{3}, b.route);
  caf::anon_send(snd, atoms::step_atom_v, *dest, 1, true);  // a broadcast to a push endpoint
  ASSERT_TRUE(wait_until([&] { return !b.lost_why().empty(); }, 10));
  EXPECT_NE(b.lost_why().find("tensor channel"), std::string::npos) << b.lost_why();
  EXPECT_TRUE(wait_until([&] { return a.logged("takes no such chunks"); }, 5)) << a.all_events();
  EXPECT_FALSE(b.hub->connected_to(dest->node()));
  EXPECT_EQ(a.got.count(), 0u);
  caf::anon_send_exit(snd, caf::exit_reason::user_shutdown);
}

/// A hand-made channel client: connects to the guard, skips CAF's server handshake, says hello
/// as `node` of run `run_id` (docs/tensor-channel.md) and reads the reply. -1 on failure.
int raw_channel(uint16_t port, caf::actor_system& sys) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return -1;
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  auto read_n = [fd](void* p, size_t n) {
    size_t got = 0;
    while (got < n) {
      const ssize_t r = ::recv(fd, static_cast<char*>(p) + got, n - got, 0);
      if (r <= 0) return false;
      got += static_cast<size_t>(r);
    }
    return true;
  };
  uint8_t h[32];
  if (!read_n(h, 32)) return -1;
  std::vector<uint8_t> skip((uint32_t{h[4]} << 24) | (uint32_t{h[5]} << 16) |
                            (uint32_t{h[6]} << 8) | h[7]);
  if (!read_n(skip.data(), skip.size())) return -1;
  std::vector<uint8_t> body;
  auto field = [&](const void* p, size_t n) {
    body.push_back(static_cast<uint8_t>(n));
    body.push_back(static_cast<uint8_t>(n >> 8));
    body.insert(body.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
  };
  field(run_id, std::strlen(run_id));
  std::vector<char> nid;
  caf::binary_serializer sink{sys, nid};
  auto me = sys.node();
  if (sink(me)) return -1;
  field(nid.data(), nid.size());
  std::vector<uint8_t> hello(32 + body.size(), 0);
  std::memcpy(hello.data(), "DDTCHAN1", 8);
  hello[8] = 2;  // channel version 2
  hello[12] = static_cast<uint8_t>(body.size());
  hello[13] = static_cast<uint8_t>(body.size() >> 8);
  std::memcpy(hello.data() + 32, body.data(), body.size());
  uint32_t crc = dd::util::crc32c(hello.data(), 28);
  crc = dd::util::crc32c(body.data(), body.size(), crc);
  for (int i = 0; i < 4; ++i) hello[28 + i] = static_cast<uint8_t>(crc >> (8 * i));
  if (::send(fd, hello.data(), hello.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(hello.size()))
    return -1;
  uint8_t rp[32];
  if (!read_n(rp, 32) || std::memcmp(rp, "DDTCHAN1", 8) != 0) return -1;
  std::vector<uint8_t> rb(rp[12] | (rp[13] << 8));
  if (!read_n(rb.data(), rb.size()) || rb.empty() || rb[0] != 0) return -1;
  return fd;
}

/// A 48-byte frame header; `good_crc` false damages its CRC.
std::vector<uint8_t> frame_header(uint8_t kind, uint64_t dest, uint64_t len, bool good_crc) {
  std::vector<uint8_t> h(48, 0);
  std::memcpy(h.data(), "DDTF", 4);
  h[4] = kind;
  for (int i = 0; i < 8; ++i) {
    h[8 + i] = static_cast<uint8_t>(dest >> (8 * i));
    h[16 + i] = static_cast<uint8_t>(uint64_t{42} >> (8 * i));
    h[24 + i] = static_cast<uint8_t>(uint64_t{1} >> (8 * i));
    h[32 + i] = static_cast<uint8_t>(len >> (8 * i));
  }
  uint32_t crc = dd::util::crc32c(h.data(), 40) ^ (good_crc ? 0u : 1u);
  for (int i = 0; i < 4; ++i) h[40 + i] = static_cast<uint8_t>(crc >> (8 * i));
  return h;
}

/// True when the peer closes `fd` within 5 s.
bool closed_by_peer(int fd) {
  char c;
  return ::recv(fd, &c, 1, 0) == 0;
}

TEST(tensor_channel, a_damaged_or_oversized_frame_header_closes_the_channel_before_any_delivery) {
  receiving_node a(uint64_t{1} << 20);
  node_config cfg{transport()};
  caf::actor_system stranger{cfg};
  {
    const int fd = raw_channel(a.guard->port(), stranger);
    ASSERT_GE(fd, 0);
    auto h = frame_header(1, a.rcv.id(), 16, false);
    h.resize(h.size() + 16, 0xab);
    ASSERT_EQ(::send(fd, h.data(), h.size(), MSG_NOSIGNAL), static_cast<ssize_t>(h.size()));
    EXPECT_TRUE(closed_by_peer(fd));
    ::close(fd);
    EXPECT_TRUE(wait_until([&] { return a.logged("failed its CRC-32C"); }, 5)) << a.all_events();
  }
  {
    const int fd = raw_channel(a.guard->port(), stranger);
    ASSERT_GE(fd, 0);
    auto h = frame_header(1, a.rcv.id(), uint64_t{64} << 20, true);  // cap is 1 MiB
    ASSERT_EQ(::send(fd, h.data(), h.size(), MSG_NOSIGNAL), static_cast<ssize_t>(h.size()));
    EXPECT_TRUE(closed_by_peer(fd));
    ::close(fd);
    EXPECT_TRUE(wait_until([&] { return a.logged("announced 67108864 payload bytes"); }, 5))
        << a.all_events();
  }
  EXPECT_EQ(a.got.count(), 0u);
  EXPECT_EQ(a.hub->stats().frames_received, 0u);
}

TEST(tensor_channel, a_port_without_the_guard_has_no_channel_and_the_client_says_so) {
  receiving_node a;
  sending_node b;
  auto dest = b.sys.middleman().remote_actor("127.0.0.1", a.caf_port);  // CAF itself
  ASSERT_TRUE(dest) << b.sys.render(dest.error());
  auto st = b.hub->connect("127.0.0.1", a.caf_port, dest->node());
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), dd::errc::io) << st.error().message;
  EXPECT_NE(st.error().message.find("without its frame guard"), std::string::npos)
      << st.error().message;
  // CAF's own connection is unaffected: a chunk still arrives, on CAF.
  auto snd = b.sys.spawn(sender, size_t{3}, b.route);
  caf::anon_send(snd, atoms::step_atom_v, *dest, 2, false);
  EXPECT_TRUE(wait_until([&] { return a.got.count() == 2; }, 10));
  EXPECT_EQ(a.hub->stats().frames_received, 0u);
  caf::anon_send_exit(snd, caf::exit_reason::user_shutdown);
}

}  // namespace
