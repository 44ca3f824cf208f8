// util/net.hpp — the socket plumbing every process of the project shares: name resolution,
// loopback listeners and connections, a free port, and writes that resume partial writes. POSIX
// only; any thread. Errors: -1 with errno set (sockets), the errno (writes).
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

struct addrinfo;

namespace dd::util {

/// Frees a getaddrinfo list.
struct addrinfo_free {
  void operator()(addrinfo* a) const;
};

/// The addresses getaddrinfo returned (a list through ai_next), freed with the handle.
using addresses = std::unique_ptr<addrinfo, addrinfo_free>;

/// The TCP stream addresses of `host`:`port` in `family` (AF_INET, AF_INET6 or AF_UNSPEC);
/// `passive`: to bind (an empty host is then every interface). Null on failure, with `why` =
/// "cannot resolve 'HOST': REASON".
addresses resolve_tcp(const std::string& host, uint16_t port, int family, bool passive,
                      std::string& why);

/// A listening TCP socket on 127.0.0.1:`port` (0 = any free port), close-on-exec, SO_REUSEADDR,
/// non-blocking when `nonblocking`; the bound port in `*bound` (may be null). -1 (errno set).
int listen_loopback(uint16_t port, uint16_t* bound, bool nonblocking = false, int backlog = 16);

/// A listening IPv4 TCP socket on `host`:`port` (empty host = every interface; port 0 = any free
/// port), close-on-exec, SO_REUSEADDR, non-blocking when `nonblocking`; the bound port in
/// `*bound` (may be null). -1 on failure, with `why` = "cannot resolve 'HOST': ..." or "cannot
/// listen on HOST:PORT: ...".
int listen_tcp(const std::string& host, uint16_t port, uint16_t* bound, bool nonblocking,
               std::string& why, int backlog = 64);

/// A blocking TCP connection to 127.0.0.1:`port`, close-on-exec. -1 (errno set).
int connect_loopback(uint16_t port);

/// A port on 127.0.0.1 that was free a moment ago (bound and released; bind it again soon);
/// 0 when none could be bound.
uint16_t free_loopback_port();

/// Writes all `n` bytes to `fd`, resuming partial writes and EINTR: send(MSG_NOSIGNAL) on a
/// socket (no SIGPIPE), write(2) on anything else. 0 when all were written, else the errno (EAGAIN:
/// a send timeout). Async-signal-safe: usable in a child between fork and exec.
int write_all(int fd, const void* data, size_t n);

/// The same for `n` buffers in one sendmsg where it can; advances `iov` as bytes leave.
int write_all(int fd, iovec* iov, int n);

/// A write_all error in words: "timed out" for EAGAIN / EWOULDBLOCK, else errno's text.
std::string io_error_text(int e);

}  // namespace dd::util
