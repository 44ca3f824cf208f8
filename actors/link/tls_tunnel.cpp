// actors/link/tls_tunnel.cpp — see tls_tunnel.hpp.
#include "actors/link/tls_tunnel.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "util/net.hpp"

namespace dd::actors {

namespace {

constexpr size_t max_buffer = size_t{256} << 10;
constexpr size_t io_chunk = size_t{64} << 10;

void set_nonblocking(int fd, bool on) {
  const int fl = ::fcntl(fd, F_GETFL);
  ::fcntl(fd, F_SETFL, on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK));
}

void set_timeouts(int fd, double s) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(s);
  tv.tv_usec = static_cast<suseconds_t>((s - static_cast<double>(tv.tv_sec)) * 1e6);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

/// A blocking TCP connection to host:port with the handshake timeout; -1 and `why` on failure.
int dial(const std::string& host, uint16_t port, double timeout_s, std::string& why) {
  const auto res = util::resolve_tcp(host, port, AF_INET, /*passive=*/false, why);
  if (!res) return -1;
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  set_timeouts(fd, timeout_s);
  const int rc = ::connect(fd, res->ai_addr, res->ai_addrlen);
  if (rc != 0) {
    why = fmt::format("connect to {}:{}: {}", host, port, std::strerror(errno));
    ::close(fd);
    return -1;
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

uint16_t local_port_of(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.sin_port);
}

/// Why a handshake failed: OpenSSL's queue, the verification result, or the socket's errno.
std::string handshake_error(SSL* ssl, int rc) {
  const int e = SSL_get_error(ssl, rc);
  std::string why = openssl_error("");
  const long v = SSL_get_verify_result(ssl);
  if (v != X509_V_OK)
    why += (why.empty() ? "" : "; ") +
           fmt::format("certificate verification: {}", X509_verify_cert_error_string(v));
  if (why.empty())
    why = e == SSL_ERROR_SYSCALL ? (errno == EAGAIN || errno == EWOULDBLOCK
                                        ? std::string("no handshake within the timeout")
                                    : errno == 0 ? std::string("the peer closed the connection")
                                                 : std::string(std::strerror(errno)))
                                 : fmt::format("TLS error {}", e);
  return why;
}

/// One direction's bytes waiting to be written.
struct pending {
  std::vector<char> buf;
  size_t off = 0;
  size_t size() const { return buf.size() - off; }
  void consumed(size_t n) {
    off += n;
    if (off == buf.size()) {
      buf.clear();
      off = 0;
    }
  }
};

/// Forwards between `plain` and `ssl` (both sockets non-blocking) until either side ends or
/// `stop` is set.
void pump(int plain, SSL* ssl, const std::atomic<bool>& stop) {
  const int tfd = SSL_get_fd(ssl);
  pending up, down;  // up: plain -> TLS, down: TLS -> plain
  bool plain_eof = false, tls_eof = false, dead = false;
  size_t write_len = 0;  // an SSL_write that wanted a retry: its length (the retry repeats it)
  bool tls_wants_write = false;
  char tmp[io_chunk];
  while (!stop.load() && !dead) {
    bool progress = true;
    while (progress && !dead) {
      progress = false;
      if (!plain_eof && up.buf.size() < max_buffer) {
        const ssize_t n = ::recv(plain, tmp, sizeof tmp, 0);
        if (n > 0) {
          up.buf.insert(up.buf.end(), tmp, tmp + n);
          progress = true;
        } else if (n == 0) {
          plain_eof = true;
        } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
          dead = true;
        }
      }
      if (up.size() > 0) {
        const size_t len = write_len > 0 ? write_len : std::min(up.size(), io_chunk);
        const int r = SSL_write(ssl, up.buf.data() + up.off, static_cast<int>(len));
        if (r > 0) {
          up.consumed(static_cast<size_t>(r));
          write_len = 0;
          tls_wants_write = false;
          progress = true;
        } else {
          const int e = SSL_get_error(ssl, r);
          if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ) {
            write_len = len;
            tls_wants_write = e == SSL_ERROR_WANT_WRITE;
          } else {
            dead = true;
          }
        }
      }
      if (!tls_eof && down.buf.size() < max_buffer) {
        const int r = SSL_read(ssl, tmp, static_cast<int>(sizeof tmp));
        if (r > 0) {
          down.buf.insert(down.buf.end(), tmp, tmp + r);
          progress = true;
        } else {
          const int e = SSL_get_error(ssl, r);
          if (e == SSL_ERROR_ZERO_RETURN)
            tls_eof = true;
          else if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE)
            tls_eof = true;  // a reset or a protocol error: the stream ends here
        }
      }
      if (down.size() > 0) {
        const ssize_t n = ::send(plain, down.buf.data() + down.off, down.size(), MSG_NOSIGNAL);
        if (n > 0) {
          down.consumed(static_cast<size_t>(n));
          progress = true;
        } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
          dead = true;
        }
      }
    }
    if ((plain_eof && up.size() == 0) || (tls_eof && down.size() == 0)) break;
    pollfd fds[2] = {{plain, 0, 0}, {tfd, 0, 0}};
    if (!plain_eof && up.buf.size() < max_buffer) fds[0].events |= POLLIN;
    if (down.size() > 0) fds[0].events |= POLLOUT;
    if (!tls_eof) fds[1].events |= POLLIN;
    if (up.size() > 0 && tls_wants_write) fds[1].events |= POLLOUT;
    ::poll(fds, 2, 200);
  }
  SSL_shutdown(ssl);
}

}  // namespace

first_read classify_first_read(long n, int err) {
  if (n > 0) return first_read::data;
  if (n == 0) return first_read::closed;
  if (err == ECONNRESET || err == EPIPE || err == ENOTCONN) return first_read::closed;
  if (err == EAGAIN || err == EWOULDBLOCK) return first_read::silent;
  return first_read::data;
}

tls_tunnel::tls_tunnel(options o) : o_(std::move(o)) {
  if (!o_.ctx) throw std::runtime_error("tls tunnel: no TLS context");
  std::string why;
  listen_fd_ = util::listen_tcp(o_.listen_host, o_.listen_port, &port_, true, why);
  if (listen_fd_ < 0) throw std::runtime_error(why);
  if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) throw std::runtime_error("tls tunnel: pipe");
  thread_ = std::thread([this] { run(); });
}

tls_tunnel::~tls_tunnel() {
  stop_.store(true);
  const char x = 'q';
  ssize_t w = ::write(wake_[1], &x, 1);
  (void)w;
  if (thread_.joinable()) thread_.join();
  for (auto& wk : workers_)
    if (wk.t.joinable()) wk.t.join();
  ::close(listen_fd_);
  ::close(wake_[0]);
  ::close(wake_[1]);
}

std::vector<std::string> tls_tunnel::names_of_port(uint16_t local_port) const {
  std::lock_guard<std::mutex> g(mu_);
  auto it = names_.find(local_port);
  return it == names_.end() ? std::vector<std::string>{} : it->second;
}

void tls_tunnel::refuse(const std::string& what) {
  {
    std::lock_guard<std::mutex> g(mu_);
    last_refusal_ = what;
  }
  refused_.fetch_add(1);
  if (o_.on_refused) o_.on_refused(what);
}

std::string tls_tunnel::last_refusal() const {
  std::lock_guard<std::mutex> g(mu_);
  return last_refusal_;
}

void tls_tunnel::run() {
  // SSL_write writes to the socket without MSG_NOSIGNAL: a peer that closed its end (a node that
  // died or finished) would raise SIGPIPE and kill the whole process. Blocked in this thread
  // (and the connection threads it starts, which inherit its mask), the write fails with EPIPE
  // instead and only that connection ends.
  sigset_t pipe_only;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_only, nullptr);
  while (!stop_.load()) {
    pollfd fds[2] = {{wake_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    if (::poll(fds, 2, 1000) < 0 && errno != EINTR) return;
    if (fds[0].revents != 0) return;
    for (auto it = workers_.begin(); it != workers_.end();) {
      if (it->done->load()) {
        it->t.join();
        it = workers_.erase(it);
      } else {
        ++it;
      }
    }
    if ((fds[1].revents & POLLIN) == 0) continue;
    sockaddr_in peer{};
    socklen_t plen = sizeof peer;
    const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &plen, SOCK_CLOEXEC);
    if (fd < 0) continue;
    char ip[INET_ADDRSTRLEN] = "?";
    ::inet_ntop(AF_INET, &peer.sin_addr, ip, sizeof ip);
    auto done = std::make_shared<std::atomic<bool>>(false);
    worker wk;
    wk.done = done;
    wk.t = std::thread([this, fd, done, who = fmt::format("{}:{}", ip, ntohs(peer.sin_port))] {
      serve(fd, who);
      done->store(true);
    });
    workers_.push_back(std::move(wk));
  }
}

void tls_tunnel::serve(int fd, std::string peer) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  const bool terminate = o_.what == mode::terminate;
  int tls_fd = fd, plain_fd = -1;
  std::string why;
  if (!terminate) {
    plain_fd = fd;
    tls_fd = dial(o_.target_host, o_.target_port, o_.handshake_timeout_s, why);
    if (tls_fd < 0) {
      if (o_.on_unreachable) o_.on_unreachable(why);  // said before the node sees the close
      ::close(plain_fd);  // the node's connect attempt fails as if the syncer were unreachable
      return;
    }
  }
  set_timeouts(tls_fd, o_.handshake_timeout_s);
  if (terminate) {
    char first = 0;
    const ssize_t n = ::recv(tls_fd, &first, 1, MSG_PEEK);
    const auto what = classify_first_read(static_cast<long>(n), n < 0 ? errno : 0);
    if (what == first_read::closed) {
      closed_.fetch_add(1);
      if (o_.on_closed)
        o_.on_closed(fmt::format("connection from {} closed before it sent anything", peer));
    } else if (what == first_read::silent) {
      refuse(fmt::format("TLS connection from {} refused: no handshake within the timeout", peer));
    }
    if (what != first_read::data) {
      ::close(tls_fd);
      return;
    }
  }
  SSL* ssl = SSL_new(o_.ctx->get());
  SSL_set_fd(ssl, tls_fd);
  ERR_clear_error();
  const int rc = terminate ? SSL_accept(ssl) : SSL_connect(ssl);
  const std::string where =
      terminate ? "from " + peer : fmt::format("to {}:{}", o_.target_host, o_.target_port);
  auto finish = [&] {
    SSL_free(ssl);
    ::close(tls_fd);
    if (plain_fd >= 0) ::close(plain_fd);
  };
  if (rc != 1) {
    const std::string why_tls = handshake_error(ssl, rc);
    if (terminate) {
      // OpenSSL's words for a first record that is no TLS: a plaintext client.
      bool plain = false;
      for (const char* w :
           {"wrong version number", "http request", "unknown protocol", "packet length too long"})
        plain = plain || why_tls.find(w) != std::string::npos;
      refuse(fmt::format("TLS connection {} refused: {}{}", where, why_tls,
                         plain ? " (the client spoke no TLS: a node without --tls-cert, "
                                 "--tls-key and --tls-ca)"
                               : ""));
    } else {
      const bool unverified = SSL_get_verify_result(ssl) != X509_V_OK;
      refuse(fmt::format("TLS handshake with the syncer at {}:{} failed{}: {}", o_.target_host,
                         o_.target_port,
                         unverified ? " verifying the syncer's certificate against the CA of "
                                      "--tls-ca (is it the run's CA?)"
                                    : "",
                         why_tls));
    }
    return finish();
  }
  const auto names = peer_names(ssl);
  if (!o_.expect_peer_name.empty() &&
      std::find(names.begin(), names.end(), o_.expect_peer_name) == names.end()) {
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    refuse(fmt::format("TLS connection {} refused: the peer's certificate names {}, not '{}'",
                       where, list.empty() ? "nothing" : list, o_.expect_peer_name));
    return finish();
  }
  accepted_.fetch_add(1);
  uint16_t registered = 0;
  if (terminate) {
    plain_fd = dial(o_.target_host, o_.target_port, o_.handshake_timeout_s, why);
    if (plain_fd < 0) return finish();
    registered = local_port_of(plain_fd);
    std::lock_guard<std::mutex> g(mu_);
    names_[registered] = names;
  }
  set_timeouts(tls_fd, 0);
  set_timeouts(plain_fd, 0);
  set_nonblocking(tls_fd, true);
  set_nonblocking(plain_fd, true);
  pump(plain_fd, ssl, stop_);
  if (registered != 0) {
    std::lock_guard<std::mutex> g(mu_);
    names_.erase(registered);
  }
  finish();
}

}  // namespace dd::actors
