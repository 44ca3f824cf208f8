// actors/link/tensor_channel.cpp — see tensor_channel.hpp.
#include "actors/link/tensor_channel.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <thread>

#include <caf/actor_registry.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/io/basp_broker.hpp>
#include <caf/io/middleman.hpp>
#include <caf/proxy_registry.hpp>

#include <fmt/format.h>

#include "actors/link/atoms.hpp"
#include "actors/link/join_auth.hpp"
#include "messages/codec.hpp"
#include "util/crc32c.hpp"
#include "util/endian.hpp"
#include "util/net.hpp"

namespace dd::actors {

namespace {

// 2: a syncer with a join token answers a hello with a challenge (status 2) and the client
// proves the token over it (join_auth.hpp) before the channel opens.
constexpr uint32_t channel_version = 2;
constexpr size_t max_hello_body = 4096;
constexpr size_t frame_header_bytes = 48;
constexpr char frame_magic[5] = "DDTF";
/// A CAF server handshake is a 32-byte BASP header and a payload of a few hundred bytes.
constexpr size_t basp_header_bytes = 32;
constexpr uint32_t max_basp_handshake_payload = 1u << 20;

void put_u16(std::vector<uint8_t>& b, uint16_t v) {
  b.push_back(static_cast<uint8_t>(v));
  b.push_back(static_cast<uint8_t>(v >> 8));
}
using util::load_le;
using util::store_le;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string errno_text(int e) { return std::strerror(e); }

/// Reads exactly n bytes (a blocking socket, or one with SO_RCVTIMEO). "" or why not.
std::string read_exact(int fd, void* data, size_t n) {
  auto* p = static_cast<uint8_t*>(data);
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::recv(fd, p + got, n - got, 0);
    if (r == 0)
      return got == 0 ? "the peer closed it between frames" : "the peer closed it mid-frame";
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return "timed out";
      return errno_text(errno);
    }
    got += static_cast<size_t>(r);
  }
  return "";
}

/// Writes all of iov (partial writes resumed). "" or why not.
std::string write_all(int fd, iovec* iov, int n) {
  const int e = util::write_all(fd, iov, n);
  return e == 0 ? std::string() : util::io_error_text(e);
}

void set_timeouts(int fd, double seconds) {
  timeval tv{};
  if (seconds > 0) {
    tv.tv_sec = static_cast<time_t>(seconds);
    tv.tv_usec = static_cast<suseconds_t>((seconds - static_cast<double>(tv.tv_sec)) * 1e6);
    if (tv.tv_sec == 0 && tv.tv_usec == 0) tv.tv_usec = 1000;
  }
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

void set_blocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK); }

/// TCP_NODELAY (credits are small and the next chunk waits on them), keepalive and a user
/// timeout so that a vanished peer is noticed by the kernel.
void tune_socket(int fd, double user_timeout_s) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  int idle = 5, intvl = 2, cnt = 3;
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
  auto ms = static_cast<unsigned>(std::max(1.0, user_timeout_s) * 1000.0);
  ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof ms);
}

std::vector<uint8_t> node_bytes(caf::actor_system& sys, const caf::node_id& nid) {
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  auto copy = nid;
  if (auto err = sink(copy)) return {};
  return {buf.begin(), buf.end()};
}

/// A hello (or reply) with `body`: the 32-byte prefix, then the body.
std::vector<uint8_t> make_hello(const std::vector<uint8_t>& body) {
  std::vector<uint8_t> out(channel_hello_prefix_bytes + body.size(), 0);
  std::memcpy(out.data(), channel_magic, 8);
  store_le(out.data() + 8, channel_version, 4);
  store_le(out.data() + 12, body.size(), 4);
  if (!body.empty()) std::memcpy(out.data() + channel_hello_prefix_bytes, body.data(), body.size());
  uint32_t crc = util::crc32c(out.data(), 28);
  crc = util::crc32c(body.data(), body.size(), crc);
  store_le(out.data() + 28, crc, 4);
  return out;
}

/// Checks a hello prefix; body_len set. "" or why not.
std::string check_prefix(const uint8_t* p, uint32_t* body_len, uint32_t* version) {
  if (std::memcmp(p, channel_magic, 8) != 0) return "no channel magic";
  *version = static_cast<uint32_t>(load_le(p + 8, 4));
  *body_len = static_cast<uint32_t>(load_le(p + 12, 4));
  if (*body_len > max_hello_body)
    return fmt::format("hello body of {} bytes (cap {})", *body_len, max_hello_body);
  return "";
}

bool check_hello_crc(const uint8_t* prefix, const std::vector<uint8_t>& body) {
  uint32_t crc = util::crc32c(prefix, 28);
  crc = util::crc32c(body.data(), body.size(), crc);
  return crc == static_cast<uint32_t>(load_le(prefix + 28, 4));
}

/// Reads a u16-length-prefixed string/bytes at `pos` of `b`.
bool take_field(const std::vector<uint8_t>& b, size_t& pos, std::vector<uint8_t>& out) {
  if (pos + 2 > b.size()) return false;
  const size_t n = load_le(b.data() + pos, 2);
  pos += 2;
  if (pos + n > b.size()) return false;
  out.assign(b.begin() + static_cast<std::ptrdiff_t>(pos),
             b.begin() + static_cast<std::ptrdiff_t>(pos + n));
  pos += n;
  return true;
}

void put_field(std::vector<uint8_t>& b, const void* data, size_t n) {
  put_u16(b, static_cast<uint16_t>(n));
  const auto* p = static_cast<const uint8_t*>(data);
  b.insert(b.end(), p, p + n);
}

// ---- process-wide registries -------------------------------------------------------------------

struct endpoint {
  caf::weak_actor_ptr actor;
  uint8_t kinds = 0;  // bit (1 << kind)
};

std::mutex g_mu;
std::map<caf::actor_system*, std::map<caf::actor_id, endpoint>> g_endpoints;

}  // namespace

// ---- one channel -------------------------------------------------------------------------------

/// One open channel: a socket, a reader thread and a writer thread with its queue.
class channel_conn {
 public:
  channel_conn(tensor_channel_hub* hub, int fd, caf::node_id node, std::string peer)
      : node(std::move(node)), peer(std::move(peer)), hub_(hub), fd_(fd) {}
  ~channel_conn() {
    join();
    if (fd_ >= 0) ::close(fd_);
  }
  channel_conn(const channel_conn&) = delete;
  channel_conn& operator=(const channel_conn&) = delete;

  void start() {
    reader_ = std::thread([this] { read_loop(); });
    writer_ = std::thread([this] { write_loop(); });
  }

  /// Queues a frame; false once closed.
  bool enqueue(std::array<uint8_t, frame_header_bytes> header, caf::message msg) {
    {
      std::lock_guard<std::mutex> g(mu_);
      if (closed_) return false;
      q_.push_back({header, std::move(msg)});
    }
    cv_.notify_one();
    return true;
  }

  /// Closes the channel (idempotent). `failure`: it broke (on_lost is called), rather than being
  /// closed on purpose (shutdown, replaced).
  void close(const std::string& why, bool failure) {
    {
      std::lock_guard<std::mutex> g(mu_);
      if (closed_) return;
      closed_ = true;
      q_.clear();
    }
    ::shutdown(fd_, SHUT_RDWR);
    cv_.notify_all();
    hub_->closed(this, why, failure);
  }

  bool joinable_now() {
    std::lock_guard<std::mutex> g(mu_);
    return closed_ && reader_done_ && writer_done_;
  }

  void join() {
    if (reader_.joinable() && reader_.get_id() != std::this_thread::get_id()) reader_.join();
    if (writer_.joinable() && writer_.get_id() != std::this_thread::get_id()) writer_.join();
  }

  const caf::node_id node;
  const std::string peer;
  /// This channel's frames and payload bytes, each way.
  std::atomic<uint64_t> frames_out{0}, bytes_out{0}, frames_in{0}, bytes_in{0};

 private:
  struct out_frame {
    std::array<uint8_t, frame_header_bytes> header;
    caf::message msg;  // (atom, wire_bytes): the payload lives here until written
  };

  void read_loop() {
    const uint64_t cap = hub_->opts().max_frame_bytes;
    uint8_t h[frame_header_bytes];
    while (true) {
      std::string err = read_exact(fd_, h, sizeof h);
      if (!err.empty()) {
        close("read: " + err, true);
        break;
      }
      if (std::memcmp(h, frame_magic, 4) != 0) {
        close("a frame header without its magic (the stream is out of step)", true);
        break;
      }
      if (util::crc32c(h, 40) != static_cast<uint32_t>(load_le(h + 40, 4))) {
        close("a frame header failed its CRC-32C (damaged in transit)", true);
        break;
      }
      const uint8_t kind = h[4];
      const uint64_t len = load_le(h + 32, 8);
      if (kind < 1 || kind > 3) {
        close(fmt::format("a frame of unknown kind {}", kind), true);
        break;
      }
      if (len > cap) {
        close(fmt::format("a frame announced {} payload bytes (cap {})", len, cap), true);
        break;
      }
      wire_bytes bytes = take_buffer(static_cast<size_t>(len));
      err = read_exact(fd_, bytes.data(), bytes.size());
      if (!err.empty()) {
        close("read: " + err, true);
        break;
      }
      frames_in.fetch_add(1, std::memory_order_relaxed);
      bytes_in.fetch_add(len, std::memory_order_relaxed);
      std::string why;
      caf::message delivered;
      if (!hub_->deliver(node, static_cast<channel_kind>(kind), load_le(h + 8, 8),
                         load_le(h + 16, 8), load_le(h + 24, 8), std::move(bytes), &why,
                         &delivered)) {
        close(why, true);
        break;
      }
      if (!delivered.empty()) recent_.push_back(std::move(delivered));
      trim_recent();
    }
    std::lock_guard<std::mutex> g(mu_);
    reader_done_ = true;
  }

  void write_loop() {
    while (true) {
      out_frame f;
      {
        std::unique_lock<std::mutex> g(mu_);
        cv_.wait(g, [this] { return closed_ || !q_.empty(); });
        if (closed_) break;
        f = std::move(q_.front());
        q_.pop_front();
      }
      const auto& bytes = f.msg.get_as<wire_bytes>(1);
      iovec iov[2];
      iov[0].iov_base = f.header.data();
      iov[0].iov_len = f.header.size();
      iov[1].iov_base = const_cast<uint8_t*>(bytes.data());
      iov[1].iov_len = bytes.size();
      const std::string err = write_all(fd_, iov, bytes.empty() ? 1 : 2);
      if (!err.empty()) {
        close("write: " + err, true);
        break;
      }
      frames_out.fetch_add(1, std::memory_order_relaxed);
      bytes_out.fetch_add(bytes.size(), std::memory_order_relaxed);
      hub_->frames_sent.fetch_add(1, std::memory_order_relaxed);
      hub_->bytes_sent.fetch_add(bytes.size(), std::memory_order_relaxed);
    }
    std::lock_guard<std::mutex> g(mu_);
    writer_done_ = true;
  }

  /// A buffer for a payload of `len` bytes: the vector of a delivered message that its receiver
  /// has let go of (this thread holds the only reference left), else a fresh one. Reusing them
  /// spares every chunk a fresh mapping, its page faults and its zero-fill (the chunk-sized
  /// buffers are above the mmap threshold node_config sets).
  wire_bytes take_buffer(size_t len) {
    for (auto it = recent_.begin(); it != recent_.end(); ++it) {
      if (!it->cvals()->unique()) continue;
      wire_bytes b = std::move(it->get_mutable_as<wire_bytes>(1));
      recent_.erase(it);
      if (b.capacity() < len || b.capacity() > 2 * len + 4096) break;  // not worth keeping
      b.resize(len);
      return b;
    }
    // None free that fits. Keep as many free ones later as were in use at once, so that the
    // next burst as large maps nothing.
    const auto held = static_cast<size_t>(
        std::count_if(recent_.begin(), recent_.end(),
                      [](const caf::message& m) { return !m.cvals()->unique(); }));
    most_held_ = std::max(most_held_, held + 1);
    hub_->buffers_fresh.fetch_add(1, std::memory_order_relaxed);
    return wire_bytes(len);
  }

  /// Keeps at most `max_free` released buffers: as many as were in use at once (the credit
  /// windows of the links on this channel bound that), at least 4 and at most 16; and stops
  /// watching messages beyond `max_recent`, oldest first (their receivers free them).
  void trim_recent() {
    constexpr size_t max_recent = 64;
    const size_t max_free = std::clamp<size_t>(most_held_, 4, 16);
    size_t free_seen = 0;
    for (auto it = recent_.rbegin(); it != recent_.rend();) {
      if (it->cvals()->unique() && ++free_seen > max_free) {
        it = decltype(it)(recent_.erase(std::next(it).base()));
        continue;
      }
      ++it;
    }
    while (recent_.size() > max_recent) recent_.pop_front();
  }

  tensor_channel_hub* hub_;
  int fd_;
  std::deque<caf::message> recent_;  // delivered messages (reader thread only)
  size_t most_held_ = 0;             // most buffers with their receivers at once (reader only)
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<out_frame> q_;
  bool closed_ = false;
  bool reader_done_ = false;
  bool writer_done_ = false;
  std::thread reader_, writer_;
};

// ---- the hub -----------------------------------------------------------------------------------

namespace {

caf::proxy_registry* proxies_of(caf::actor_system& sys) {
  auto hdl = sys.middleman().named_broker<caf::io::basp_broker>(caf::atom("BASP"));
  auto* b = dynamic_cast<caf::io::basp_broker*>(caf::actor_cast<caf::abstract_actor*>(hdl));
  return b != nullptr ? b->proxy_registry_ptr() : nullptr;
}

}  // namespace

std::shared_ptr<tensor_channel_hub> tensor_channel_hub::make(caf::actor_system& sys, options o) {
  return std::shared_ptr<tensor_channel_hub>(new tensor_channel_hub(sys, std::move(o)));
}

tensor_channel_hub::tensor_channel_hub(caf::actor_system& sys, options o)
    : sys_(sys), opts_(std::move(o)) {
  // Resolved here, on the creating thread: the middleman's broker table is not thread-safe.
  proxies_ = proxies_of(sys_);
}

tensor_channel_hub::~tensor_channel_hub() {
  close_all("the node is stopping");
  std::list<hello_thread> hellos;
  {
    std::lock_guard<std::mutex> g(mu_);
    stopping_ = true;
    hellos.swap(hellos_);
  }
  for (auto& h : hellos)
    if (h.t.joinable()) h.t.join();
  std::list<std::shared_ptr<channel_conn>> all;
  {
    std::lock_guard<std::mutex> g(mu_);
    all.swap(all_);
  }
  for (auto& c : all) c->join();
}

void tensor_channel_hub::close_all(const std::string& why) {
  std::vector<std::shared_ptr<channel_conn>> open;
  {
    std::lock_guard<std::mutex> g(mu_);
    for (auto& [node, c] : open_) open.push_back(c);
  }
  for (auto& c : open) c->close(why, false);
  reap();
}

bool tensor_channel_hub::connected_to(const caf::node_id& node) const {
  return find(node) != nullptr;
}

std::shared_ptr<channel_conn> tensor_channel_hub::find(const caf::node_id& node) const {
  std::lock_guard<std::mutex> g(mu_);
  auto it = open_.find(node);
  return it == open_.end() ? nullptr : it->second;
}

channel_stats tensor_channel_hub::stats() const {
  channel_stats s;
  s.frames_sent = frames_sent.load();
  s.bytes_sent = bytes_sent.load();
  s.frames_received = frames_received.load();
  s.bytes_received = bytes_received.load();
  s.opened = opened_.load();
  s.closed = closed_.load();
  s.refused = refused_.load();
  s.buffers_fresh = buffers_fresh.load();
  return s;
}

void tensor_channel_hub::reap() {
  std::vector<std::shared_ptr<channel_conn>> done;
  std::list<hello_thread> finished;
  {
    std::lock_guard<std::mutex> g(mu_);
    for (auto it = hellos_.begin(); it != hellos_.end();) {
      if (it->done->load() && it->t.get_id() != std::this_thread::get_id()) {
        finished.push_back(std::move(*it));
        it = hellos_.erase(it);
      } else {
        ++it;
      }
    }
    for (auto it = all_.begin(); it != all_.end();) {
      if ((*it)->joinable_now()) {
        done.push_back(*it);
        it = all_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& c : done) c->join();  // their destructors close the sockets
  for (auto& h : finished) h.t.join();
}

void tensor_channel_hub::open(int fd, const caf::node_id& peer_node, const std::string& peer) {
  set_timeouts(fd, 0);
  tune_socket(fd, opts_.user_timeout_s);
  auto c = std::make_shared<channel_conn>(this, fd, peer_node, peer);
  std::shared_ptr<channel_conn> old;
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = open_.find(peer_node);
    if (it != open_.end()) old = it->second;
    open_[peer_node] = c;
    all_.push_back(c);
  }
  if (old) old->close("replaced by a new channel from the same node", false);
  c->start();
  opened_.fetch_add(1);
  if (opts_.report) opts_.report("channel_open", fmt::format("peer {}", peer));
  reap();
}

void tensor_channel_hub::closed(channel_conn* c, const std::string& why, bool failure) {
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = open_.find(c->node);
    if (it != open_.end() && it->second.get() == c) open_.erase(it);
  }
  closed_.fetch_add(1);
  if (opts_.report)
    opts_.report("channel_closed",
                 fmt::format("peer {}: {} (frames out {}, {} bytes; in {}, {} bytes)", c->peer, why,
                             c->frames_out.load(), c->bytes_out.load(), c->frames_in.load(),
                             c->bytes_in.load()));
  if (failure && opts_.on_lost)
    opts_.on_lost(fmt::format("tensor channel to {}: {}", c->peer, why));
}

void tensor_channel_hub::accept(int fd, std::string peer, std::vector<uint8_t> first) {
  std::lock_guard<std::mutex> g(mu_);
  if (stopping_) {
    ::close(fd);
    return;
  }
  // `this` outlives the thread: the destructor joins every hello thread first.
  auto* self = this;
  auto done = std::make_shared<std::atomic<bool>>(false);
  hello_thread ht;
  ht.done = done;
  ht.t = std::thread([self, done, fd, peer = std::move(peer), first = std::move(first)]() mutable {
    struct mark_done {
      std::atomic<bool>* d;
      ~mark_done() { d->store(true); }
    } mark{done.get()};
    auto refuse = [&](const std::string& why, bool answer) {
      self->refused_.fetch_add(1);
      if (self->opts_.report)
        self->opts_.report("channel_refused", fmt::format("peer {}: {}", peer, why));
      if (answer) {
        std::vector<uint8_t> body;
        body.push_back(1);
        put_field(body, why.data(), std::min<size_t>(why.size(), 2048));
        put_field(body, nullptr, 0);
        auto hello = make_hello(body);
        iovec iov{hello.data(), hello.size()};
        (void)write_all(fd, &iov, 1);
      }
      ::close(fd);
    };
    set_blocking(fd);
    set_timeouts(fd, self->opts_.handshake_timeout_s);
    if (first.size() < channel_hello_prefix_bytes) {
      const size_t had = first.size();
      first.resize(channel_hello_prefix_bytes);
      if (auto err = read_exact(fd, first.data() + had, first.size() - had); !err.empty())
        return refuse("hello: " + err, false);
    }
    uint32_t body_len = 0, version = 0;
    if (auto err = check_prefix(first.data(), &body_len, &version); !err.empty())
      return refuse("hello: " + err, false);
    std::vector<uint8_t> body(first.begin() + channel_hello_prefix_bytes, first.end());
    if (body.size() > body_len) return refuse("hello: more bytes than its body announces", false);
    const size_t had = body.size();
    body.resize(body_len);
    if (auto err = read_exact(fd, body.data() + had, body_len - had); !err.empty())
      return refuse("hello: " + err, false);
    if (!check_hello_crc(first.data(), body))
      return refuse("hello failed its CRC-32C (damaged in transit)", false);
    if (version != channel_version)
      return refuse(
          fmt::format("channel version {} (this node speaks {})", version, channel_version), true);
    size_t pos = 0;
    std::vector<uint8_t> run, nid_bytes;
    if (!take_field(body, pos, run) || !take_field(body, pos, nid_bytes))
      return refuse("hello: a truncated body", true);
    const std::string run_id(run.begin(), run.end());
    if (run_id != self->opts_.run_id)
      return refuse(fmt::format("the node belongs to run {}, this syncer runs run {}", run_id,
                                self->opts_.run_id),
                    true);
    caf::node_id nid;
    {
      std::vector<char> buf(nid_bytes.begin(), nid_bytes.end());
      caf::binary_deserializer src{self->sys_, buf};
      if (auto err = src(nid); err || !nid) return refuse("hello: an unreadable node id", true);
    }
    if (self->opts_.vet_hello)
      if (auto why = self->opts_.vet_hello(peer, nid); !why.empty()) return refuse(why, true);
    if (!self->opts_.join_token.empty()) {
      // The join token: a fresh challenge for this connection, answered by the client's proof
      // over the run, its node id and the challenge; a recorded greeting names an old one.
      const auto nonce = random_nonce();
      std::vector<uint8_t> ch;
      ch.push_back(2);
      put_field(ch, nullptr, 0);
      put_field(ch, nonce.data(), nonce.size());
      auto out = make_hello(ch);
      iovec civ{out.data(), out.size()};
      if (auto err = write_all(fd, &civ, 1); !err.empty())
        return refuse("challenge: " + err, false);
      uint8_t pp[channel_hello_prefix_bytes];
      if (auto err = read_exact(fd, pp, sizeof pp); !err.empty())
        return refuse("waiting for the join token proof: " + err, false);
      uint32_t plen = 0, pver = 0;
      if (auto err = check_prefix(pp, &plen, &pver); !err.empty())
        return refuse("proof: " + err, false);
      std::vector<uint8_t> pb(plen);
      if (auto err = read_exact(fd, pb.data(), pb.size()); !err.empty())
        return refuse("proof: " + err, false);
      if (!check_hello_crc(pp, pb)) return refuse("proof failed its CRC-32C", false);
      size_t ppos = 0;
      std::vector<uint8_t> proof;
      if (!take_field(pb, ppos, proof)) return refuse("proof: a truncated body", true);
      challenge_book book(self->opts_.handshake_timeout_s);
      book.issue(nonce, 0.0);
      const auto v = judge(book, self->opts_.join_token, nonce, proof, channel_purpose,
                           channel_context(run_id, nid_bytes, nonce), 0.0);
      if (v != auth_verdict::accepted) {
        if (self->opts_.report)
          self->opts_.report("auth_refused", fmt::format("tensor channel from {} (node {}): {}",
                                                         peer, to_string(nid), to_string(v)));
        return refuse(fmt::format("join token: {}", to_string(v)), true);
      }
    }
    std::vector<uint8_t> reply;
    reply.push_back(0);
    put_field(reply, nullptr, 0);
    const auto mine = node_bytes(self->sys_, self->sys_.node());
    put_field(reply, mine.data(), mine.size());
    auto hello = make_hello(reply);
    iovec iov{hello.data(), hello.size()};
    if (auto err = write_all(fd, &iov, 1); !err.empty()) return refuse("reply: " + err, false);
    self->open(fd, nid, peer);
  });
  hellos_.push_back(std::move(ht));
}

status tensor_channel_hub::connect(const std::string& host, uint16_t port,
                                   const caf::node_id& remote) {
  const double deadline = now_s() + opts_.handshake_timeout_s;
  std::string unresolved;
  const auto res = util::resolve_tcp(host, port, AF_INET, /*passive=*/false, unresolved);
  if (!res) return {errc::io, "tensor channel: " + unresolved};
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  const std::string where = fmt::format("{}:{}", host, port);
  auto fail = [&](errc code, const std::string& why) -> status {
    ::close(fd);
    if (code != errc::io) {
      refused_.fetch_add(1);
      if (opts_.report) opts_.report("channel_refused", fmt::format("peer {}: {}", where, why));
    }
    return {code, fmt::format("tensor channel to {}: {}", where, why)};
  };
  const int rc = ::connect(fd, res->ai_addr, res->ai_addrlen);
  if (rc != 0 && errno != EINPROGRESS) return fail(errc::io, "connect: " + errno_text(errno));
  if (rc != 0) {
    pollfd p{fd, POLLOUT, 0};
    const int ms = static_cast<int>(std::max(0.0, deadline - now_s()) * 1000.0);
    if (::poll(&p, 1, ms) <= 0) return fail(errc::io, "connect timed out");
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return fail(errc::io, "connect: " + errno_text(err));
  }
  set_blocking(fd);
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  // The frame guard forwards CAF's server handshake first: skip that frame.
  set_timeouts(fd, std::max(0.001, deadline - now_s()));
  uint8_t h[basp_header_bytes];
  if (auto err = read_exact(fd, h, sizeof h); !err.empty())
    return fail(errc::io, "waiting for the syncer's handshake: " + err);
  const uint32_t basp_len =
      (uint32_t{h[4]} << 24) | (uint32_t{h[5]} << 16) | (uint32_t{h[6]} << 8) | uint32_t{h[7]};
  if (h[0] != 0 || basp_len > max_basp_handshake_payload)
    return fail(errc::malformed, "the first frame is not a CAF server handshake");
  {
    std::vector<uint8_t> skip(basp_len);
    if (auto err = read_exact(fd, skip.data(), skip.size()); !err.empty())
      return fail(errc::io, "reading the syncer's handshake: " + err);
  }
  std::vector<uint8_t> body;
  put_field(body, opts_.run_id.data(), opts_.run_id.size());
  const auto mine = node_bytes(sys_, sys_.node());
  put_field(body, mine.data(), mine.size());
  auto hello = make_hello(body);
  set_timeouts(fd, std::max(0.001, deadline - now_s()));
  iovec iov{hello.data(), hello.size()};
  if (auto err = write_all(fd, &iov, 1); !err.empty()) return fail(errc::io, "hello: " + err);
  uint8_t prefix[channel_hello_prefix_bytes];
  uint32_t body_len = 0, version = 0;
  std::vector<uint8_t> rb, reason, nid_bytes;
  // Reads one reply into rb / reason / nid_bytes (the third field: a node id, or a challenge);
  // "" or why not, with the error code in *code.
  auto read_reply = [&](errc* code) -> std::string {
    if (auto err = read_exact(fd, prefix, sizeof prefix); !err.empty()) {
      *code = errc::io;
      return "waiting for the hello reply: " + err +
             " (a syncer without its frame guard has no tensor channel)";
    }
    if (auto err = check_prefix(prefix, &body_len, &version); !err.empty()) {
      *code = errc::malformed;
      return "hello reply: " + err;
    }
    rb.assign(body_len, 0);
    if (auto err = read_exact(fd, rb.data(), rb.size()); !err.empty()) {
      *code = errc::io;
      return "hello reply: " + err;
    }
    *code = errc::malformed;
    if (!check_hello_crc(prefix, rb)) return "hello reply failed its CRC-32C";
    size_t pos = 1;
    if (rb.empty() || !take_field(rb, pos, reason) || !take_field(rb, pos, nid_bytes))
      return "a truncated hello reply";
    return "";
  };
  errc code = errc::malformed;
  if (auto err = read_reply(&code); !err.empty()) return fail(code, err);
  if (rb[0] == 2) {
    // A syncer with a join token: prove it over the challenge.
    if (opts_.join_token.empty())
      return fail(errc::other_run,
                  "refused: the syncer asks for the join token and this node has none "
                  "(--join-token-file FILE or DD_JOIN_TOKEN)");
    const auto proof = join_proof(opts_.join_token, channel_purpose,
                                  channel_context(opts_.run_id, mine, nid_bytes));
    std::vector<uint8_t> pbody;
    put_field(pbody, proof.data(), proof.size());
    auto pm = make_hello(pbody);
    iovec piov{pm.data(), pm.size()};
    if (auto err = write_all(fd, &piov, 1); !err.empty()) return fail(errc::io, "proof: " + err);
    if (auto err = read_reply(&code); !err.empty()) return fail(code, err);
  }
  if (rb[0] != 0) {
    const std::string why(reason.begin(), reason.end());
    return fail(version != channel_version ? errc::schema_mismatch : errc::other_run,
                "refused: " + why);
  }
  caf::node_id nid;
  {
    std::vector<char> buf(nid_bytes.begin(), nid_bytes.end());
    caf::binary_deserializer src{sys_, buf};
    if (auto err = src(nid); err || !nid)
      return fail(errc::malformed, "hello reply: an unreadable node id");
  }
  if (nid != remote)
    return fail(errc::malformed, fmt::format("the channel reached node {}, not the syncer's {}",
                                             to_string(nid), to_string(remote)));
  open(fd, nid, where);
  return {};
}

bool tensor_channel_hub::deliver(const caf::node_id& from, channel_kind kind, caf::actor_id dest,
                                 caf::actor_id src, uint64_t seq, std::vector<uint8_t>&& bytes,
                                 std::string* why, caf::message* delivered) {
  caf::strong_actor_ptr target;
  {
    std::lock_guard<std::mutex> g(g_mu);
    auto s = g_endpoints.find(&sys_);
    if (s != g_endpoints.end()) {
      auto e = s->second.find(dest);
      if (e != s->second.end()) {
        if ((e->second.kinds & (1u << static_cast<unsigned>(kind))) == 0) {
          *why = fmt::format("a frame of kind {} for actor {}, which takes no such chunks",
                             static_cast<int>(kind), dest);
          return false;
        }
        target = e->second.actor.lock();
      }
    }
  }
  frames_received.fetch_add(1, std::memory_order_relaxed);
  bytes_received.fetch_add(bytes.size(), std::memory_order_relaxed);
  // An actor that is not (or no longer) an endpoint here: it terminated while the chunk was on
  // its way (its sender hears of that from CAF and frees the link). Dropped.
  if (!target) return true;
  caf::strong_actor_ptr sender;
  if (proxies_ != nullptr) {
    sender = proxies_->get(from, src);
    if (!sender) sender = proxies_->get_or_put(from, src);
  }
  if (!sender) {
    *why = fmt::format("no CAF proxy for sending actor {} of the peer node", src);
    return false;
  }
  caf::message m;
  switch (kind) {
    case channel_kind::push:
      m = caf::make_message(atoms::push_atom_v, std::move(bytes), seq);
      break;
    case channel_kind::copy:
      m = caf::make_message(atoms::copy_atom_v, std::move(bytes), seq);
      break;
    case channel_kind::broadcast:
      m = caf::make_message(atoms::broadcast_atom_v, std::move(bytes), seq);
      break;
  }
  if (delivered != nullptr) *delivered = m;
  target->enqueue(std::move(sender), caf::make_message_id(), std::move(m), nullptr);
  return true;
}

void tensor_channel_hub::allow(caf::actor_system& sys, const caf::strong_actor_ptr& self,
                               std::initializer_list<channel_kind> kinds) {
  if (!self) return;
  endpoint e;
  e.actor = caf::actor_cast<caf::weak_actor_ptr>(self);
  for (auto k : kinds) e.kinds |= static_cast<uint8_t>(1u << static_cast<unsigned>(k));
  const caf::actor_id id = self->id();
  {
    std::lock_guard<std::mutex> g(g_mu);
    g_endpoints[&sys][id] = e;
  }
  auto* sysp = &sys;
  self->get()->attach_functor([sysp, id] {
    std::lock_guard<std::mutex> g(g_mu);
    auto s = g_endpoints.find(sysp);
    if (s != g_endpoints.end()) s->second.erase(id);
  });
}

bool tensor_channel_hub::try_send(const caf::actor& dest, const caf::strong_actor_ptr& src,
                                  channel_kind kind, uint64_t seq, const caf::message& msg) {
  auto& sys = sys_;
  if (!dest || !src || dest.node() == sys.node()) return false;
  if (!sending_.load(std::memory_order_relaxed)) return false;
  auto c = find(dest.node());
  if (!c) return false;
  // The receiver makes a proxy of `src` and announces it to this node, which answers for actors
  // in its registry only (an unknown one is reported down at once, and the credits sent to that
  // proxy are lost). CAF registers an actor when its handle is first serialized to a remote
  // node; a chunk on the channel may come first, so register it here.
  if (!sys.registry().get(src->id())) sys.registry().put(src->id(), src);
  std::array<uint8_t, frame_header_bytes> h{};
  std::memcpy(h.data(), frame_magic, 4);
  h[4] = static_cast<uint8_t>(kind);
  store_le(h.data() + 8, dest.id(), 8);
  store_le(h.data() + 16, src->id(), 8);
  store_le(h.data() + 24, seq, 8);
  store_le(h.data() + 32, msg.get_as<wire_bytes>(1).size(), 8);
  store_le(h.data() + 40, util::crc32c(h.data(), 40), 4);
  return c->enqueue(h, msg);
}

void channel_route::set(const std::shared_ptr<tensor_channel_hub>& hub) {
  std::lock_guard<std::mutex> g(mu_);
  hub_ = hub;
}

std::shared_ptr<tensor_channel_hub> channel_route::hub() const {
  std::lock_guard<std::mutex> g(mu_);
  return hub_.lock();
}

}  // namespace dd::actors
