// util/net.cpp — see net.hpp.
#include "util/net.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "util/files.hpp"

namespace dd::util {

namespace {

sockaddr_in loopback(uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  return a;
}

}  // namespace

void addrinfo_free::operator()(addrinfo* a) const { ::freeaddrinfo(a); }

addresses resolve_tcp(const std::string& host, uint16_t port, int family, bool passive,
                      std::string& why) {
  addrinfo hints{};
  hints.ai_family = family;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  const char* node = passive && host.empty() ? nullptr : host.c_str();
  if (int rc = ::getaddrinfo(node, service.c_str(), &hints, &res); rc != 0) {
    why = "cannot resolve '" + host + "': " + gai_strerror(rc);
    return nullptr;
  }
  return addresses(res);
}

int listen_loopback(uint16_t port, uint16_t* bound, bool nonblocking, int backlog) {
  const int fd =
      ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | (nonblocking ? SOCK_NONBLOCK : 0), 0);
  if (fd < 0) return -1;
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a = loopback(port);
  socklen_t len = sizeof a;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, backlog) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    const int e = errno;
    ::close(fd);
    errno = e;
    return -1;
  }
  if (bound != nullptr) *bound = ntohs(a.sin_port);
  return fd;
}

int listen_tcp(const std::string& host, uint16_t port, uint16_t* bound, bool nonblocking,
               std::string& why, int backlog) {
  const addresses res = resolve_tcp(host, port, AF_INET, /*passive=*/true, why);
  if (!res) return -1;
  const int fd =
      ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | (nonblocking ? SOCK_NONBLOCK : 0), 0);
  const int one = 1;
  sockaddr_in a{};
  socklen_t len = sizeof a;
  if (fd < 0 || ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      ::bind(fd, res->ai_addr, res->ai_addrlen) != 0 || ::listen(fd, backlog) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    why = "cannot listen on " + host + ":" + std::to_string(port) + ": " + errno_text(errno);
    if (fd >= 0) ::close(fd);
    return -1;
  }
  if (bound != nullptr) *bound = ntohs(a.sin_port);
  return fd;
}

int connect_loopback(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const sockaddr_in a = loopback(port);
  while (::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) {
    if (errno == EINTR) continue;
    const int e = errno;
    ::close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

uint16_t free_loopback_port() {
  uint16_t port = 0;
  const int fd = listen_loopback(0, &port);
  if (fd < 0) return 0;
  ::close(fd);
  return port;
}

std::string io_error_text(int e) {
  return e == EAGAIN || e == EWOULDBLOCK ? "timed out" : errno_text(e);
}

int write_all(int fd, const void* data, size_t n) {
  iovec iov{const_cast<void*>(data), n};
  return write_all(fd, &iov, 1);
}

int write_all(int fd, iovec* iov, int n) {
  bool socket = true;
  while (n > 0) {
    ssize_t w;
    if (socket) {
      msghdr mh{};
      mh.msg_iov = iov;
      mh.msg_iovlen = static_cast<size_t>(n);
      w = ::sendmsg(fd, &mh, MSG_NOSIGNAL);
      if (w < 0 && errno == ENOTSOCK) {
        socket = false;
        continue;
      }
    } else {
      w = ::writev(fd, iov, n);
    }
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    auto left = static_cast<size_t>(w);
    while (n > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      ++iov;
      --n;
    }
    if (n > 0) {
      if (w == 0) return EIO;  // nothing written although bytes remain (a full device)
      iov->iov_base = static_cast<uint8_t*>(iov->iov_base) + left;
      iov->iov_len -= left;
    }
  }
  return 0;
}

}  // namespace dd::util
