// actors/link/frame_guard.cpp — see frame_guard.hpp.
#include "actors/link/frame_guard.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <list>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "actors/link/tensor_channel.hpp"
#include "util/net.hpp"

namespace dd::actors {

namespace {

constexpr size_t header_bytes = 32;
constexpr size_t max_buffer = size_t{256} << 10;
constexpr uint8_t basp_direct_message = 0x02;    // caf::io::basp::message_type::direct_message
constexpr uint8_t basp_client_handshake = 0x01;  // ::client_handshake

using clock = std::chrono::steady_clock;

/// A BASP frame parser of one direction: bytes left of the current payload, or of the header.
struct frame_parser {
  uint64_t payload_left = 0;
  char header[header_bytes];
  size_t header_have = 0;
};

void nonblock(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

/// One direction: bytes read from `from`, waiting to be written to `to`.
struct pipe_dir {
  std::vector<char> buf;
  size_t off = 0;
  bool eof = false;
};

struct conn {
  int client = -1, upstream = -1;
  pipe_dir up, down;               // up: client -> upstream (checked), down: upstream -> client
  frame_parser up_frames;          // the client's frames
  frame_parser down_frames;        // the syncer's frames, parsed while the client is a stranger
  bool first_header = true;        // the client's first 32 bytes: a BASP header or a channel hello
  bool vetting = false;            // collecting its first frame (a BASP client handshake) to vet it
  std::vector<uint8_t> handshake;  // that frame's payload so far (at most 64 KiB)
  uint16_t peer_port = 0;
  bool dead = false;
  bool stranger = true;     // the syncer has not yet sent it a direct message
  uint64_t held = 0;        // its announced, incomplete frame while a stranger: in the budget
  clock::time_point since;  // accepted at
  std::string peer;
};

/// Reads the syncer's frames in `data` until one is a direct message (then returns true).
bool answered(frame_parser& p, const char* data, size_t n) {
  size_t pos = 0;
  while (pos < n) {
    if (p.payload_left > 0) {
      const size_t take = static_cast<size_t>(std::min<uint64_t>(p.payload_left, n - pos));
      p.payload_left -= take;
      pos += take;
      continue;
    }
    const size_t take = std::min(header_bytes - p.header_have, n - pos);
    std::memcpy(p.header + p.header_have, data + pos, take);
    p.header_have += take;
    pos += take;
    if (p.header_have < header_bytes) return false;
    p.header_have = 0;
    if (static_cast<uint8_t>(p.header[0]) == basp_direct_message) return true;
    uint32_t len_be = 0;
    std::memcpy(&len_be, p.header + 4, 4);
    p.payload_left = ntohl(len_be);
  }
  return false;
}

}  // namespace

frame_guard::frame_guard(const std::string& host, uint16_t port, uint16_t target_port,
                         frame_guard_limits limits, report_fn report, channel_fn on_channel,
                         handshake_fn vet_handshake)
    : target_port_(target_port),
      limits_(limits),
      report_(std::move(report)),
      on_channel_(std::move(on_channel)),
      vet_handshake_(std::move(vet_handshake)) {
  std::string why;
  listen_fd_ = util::listen_tcp(host, port, &port_, true, why);
  if (listen_fd_ < 0) throw std::runtime_error(why);
  if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) throw std::runtime_error("frame guard: pipe");
  thread_ = std::thread([this] { run(); });
}

frame_guard::~frame_guard() {
  const char x = 'q';
  ssize_t w = ::write(wake_[1], &x, 1);
  (void)w;
  if (thread_.joinable()) thread_.join();
  ::close(listen_fd_);
  ::close(wake_[0]);
  ::close(wake_[1]);
}

void frame_guard::run() {
  std::list<conn> conns;
  uint64_t held = 0;  // Σ conn::held: strangers' announced, incomplete frames
  size_t strangers = 0;
  auto release = [&](conn& c) {
    held -= c.held;
    c.held = 0;
    stranger_held_.store(held);
  };
  auto close_conn = [&](conn& c) {
    if (c.client >= 0) ::close(c.client);
    if (c.upstream >= 0) ::close(c.upstream);
    c.client = c.upstream = -1;
    c.dead = true;
    release(c);
    if (c.stranger) --strangers;
    c.stranger = false;
  };
  auto refuse = [&](conn& c, const std::string& why) {
    refused_.fetch_add(1);
    if (report_) report_(fmt::format("connection from {} closed: {}", c.peer, why));
    close_conn(c);
  };
  while (true) {
    std::vector<pollfd> fds;
    fds.push_back({wake_[0], POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    for (auto& c : conns) {
      short ci = 0, ui = 0;
      if (!c.up.eof && c.up.buf.size() < max_buffer) ci |= POLLIN;
      if (c.down.buf.size() > c.down.off) ci |= POLLOUT;
      if (!c.down.eof && c.down.buf.size() < max_buffer) ui |= POLLIN;
      if (c.up.buf.size() > c.up.off) ui |= POLLOUT;
      fds.push_back({c.client, ci, 0});
      fds.push_back({c.upstream, ui, 0});
    }
    if (::poll(fds.data(), fds.size(), 1000) < 0 && errno != EINTR) return;
    // Only the connections that were polled have entries in fds: one accepted below waits for
    // the next round: reading fds for it would overflow the vector.
    const size_t polled = conns.size();
    if (fds[0].revents != 0) return;
    if (fds[1].revents & POLLIN) {
      sockaddr_in peer{};
      socklen_t plen = sizeof peer;
      int cfd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &plen,
                          SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (cfd >= 0) {
        char ip[INET_ADDRSTRLEN] = "?";
        ::inet_ntop(AF_INET, &peer.sin_addr, ip, sizeof ip);
        const std::string who = fmt::format("{}:{}", ip, ntohs(peer.sin_port));
        if (strangers >= limits_.stranger_connections) {
          // Refused before the middleman sees it: no upstream connection is made.
          refused_.fetch_add(1);
          if (report_)
            report_(
                fmt::format("connection from {} closed: {} connections not yet answered by "
                            "the syncer are open (limit {})",
                            who, strangers, limits_.stranger_connections));
          ::close(cfd);
        } else {
          int ufd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
          sockaddr_in t{};
          t.sin_family = AF_INET;
          t.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
          t.sin_port = htons(target_port_);
          if (::connect(ufd, reinterpret_cast<sockaddr*>(&t), sizeof t) != 0) {
            ::close(ufd);
            ::close(cfd);
          } else {
            nonblock(ufd);
            int one = 1;
            ::setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            ::setsockopt(ufd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            conn c;
            c.client = cfd;
            c.upstream = ufd;
            c.peer = who;
            c.peer_port = ntohs(peer.sin_port);
            c.since = clock::now();
            ++strangers;
            conns.push_back(std::move(c));
          }
        }
      }
    }
    size_t i = 2;
    auto it = conns.begin();  // (a list: an accepted connection is appended after these)
    for (size_t k = 0; k < polled; ++k, ++it) {
      auto& c = *it;
      const short cr = fds[i].revents, ur = fds[i + 1].revents;
      i += 2;
      if (c.dead) continue;
      char tmp[64 * 1024];
      // client -> upstream, frame by frame.
      if (cr & (POLLIN | POLLHUP | POLLERR)) {
        const ssize_t n = ::read(c.client, tmp, sizeof tmp);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
          c.up.eof = true;
        } else if (n > 0) {
          auto& p = c.up_frames;
          size_t pos = 0;
          while (pos < static_cast<size_t>(n)) {
            if (p.payload_left > 0) {
              const size_t take = static_cast<size_t>(std::min<uint64_t>(p.payload_left, n - pos));
              c.up.buf.insert(c.up.buf.end(), tmp + pos, tmp + pos + take);
              if (c.vetting)
                c.handshake.insert(
                    c.handshake.end(), tmp + pos,
                    tmp + pos +
                        std::min(take, (size_t{64} << 10) -
                                           std::min(c.handshake.size(), size_t{64} << 10)));
              p.payload_left -= take;
              pos += take;
              if (p.payload_left == 0) {
                release(c);  // complete: CAF takes it from here
                if (c.vetting) {
                  c.vetting = false;
                  if (auto why = vet_handshake_(c.peer_port, c.handshake); !why.empty()) {
                    refuse(c, why);
                    break;
                  }
                  c.handshake.clear();
                }
              }
              continue;
            }
            const size_t take =
                std::min(header_bytes - p.header_have, static_cast<size_t>(n) - pos);
            std::memcpy(p.header + p.header_have, tmp + pos, take);
            p.header_have += take;
            pos += take;
            if (p.header_have < header_bytes) break;
            if (c.first_header && on_channel_ &&
                std::memcmp(p.header, channel_magic, sizeof channel_magic - 1) == 0) {
              // A tensor channel, not CAF: the middleman side goes, the socket is handed over.
              std::vector<uint8_t> first(p.header, p.header + header_bytes);
              first.insert(first.end(), tmp + pos, tmp + n);
              const int fd = c.client;
              c.client = -1;
              close_conn(c);
              ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
              on_channel_(fd, c.peer, std::move(first));
              break;
            }
            uint32_t len_be = 0;
            std::memcpy(&len_be, p.header + 4, 4);
            const uint64_t len = ntohl(len_be);
            if (c.first_header && vet_handshake_) {
              if (static_cast<uint8_t>(p.header[0]) != basp_client_handshake) {
                refuse(c, "its first frame is no CAF client handshake");
                break;
              }
              c.vetting = true;
              if (len == 0) {
                c.vetting = false;
                if (auto why = vet_handshake_(c.peer_port, {}); !why.empty()) {
                  refuse(c, why);
                  break;
                }
              }
            }
            c.first_header = false;
            if (len > limits_.max_frame_bytes) {
              refuse(c, fmt::format("a frame announced {} bytes (cap {})", len,
                                    limits_.max_frame_bytes));
              break;
            }
            if (c.stranger && held + len > limits_.stranger_bytes) {
              refuse(c, fmt::format("a frame announced {} bytes while connections not yet "
                                    "answered by the syncer hold {} (budget {})",
                                    len, held, limits_.stranger_bytes));
              break;
            }
            if (c.stranger) {
              c.held = len;
              held += len;
              stranger_held_.store(held);
            }
            c.up.buf.insert(c.up.buf.end(), p.header, p.header + header_bytes);
            p.header_have = 0;
            p.payload_left = len;
          }
        }
      }
      if (c.dead) continue;
      if (ur & (POLLIN | POLLHUP | POLLERR)) {
        const ssize_t n = ::read(c.upstream, tmp, sizeof tmp);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
          c.down.eof = true;
        else if (n > 0) {
          c.down.buf.insert(c.down.buf.end(), tmp, tmp + n);
          if (c.stranger && answered(c.down_frames, tmp, static_cast<size_t>(n))) {
            release(c);  // the syncer answered it: bounded by max_frame_bytes only
            c.stranger = false;
            --strangers;
          }
        }
      }
      auto flush = [](pipe_dir& d, int fd) {
        while (d.buf.size() > d.off) {
          // MSG_NOSIGNAL: a peer that died (a killed learner process) must not SIGPIPE the
          // syncer; the write fails with EPIPE and the connection is closed.
          const ssize_t w = ::send(fd, d.buf.data() + d.off, d.buf.size() - d.off, MSG_NOSIGNAL);
          if (w <= 0) return errno == EAGAIN || errno == EINTR;
          d.off += static_cast<size_t>(w);
        }
        d.buf.clear();
        d.off = 0;
        return true;
      };
      if (!flush(c.up, c.upstream) || !flush(c.down, c.client)) {
        close_conn(c);
        continue;
      }
      if ((c.up.eof && c.up.buf.empty()) || (c.down.eof && c.down.buf.empty())) close_conn(c);
    }
    const auto now = clock::now();
    for (auto& c : conns)
      if (!c.dead && c.stranger &&
          std::chrono::duration<double>(now - c.since).count() > limits_.stranger_timeout_s)
        refuse(c,
               fmt::format("not answered by the syncer within {} s", limits_.stranger_timeout_s));
    conns.remove_if([](const conn& c) { return c.dead; });
  }
}

}  // namespace dd::actors
