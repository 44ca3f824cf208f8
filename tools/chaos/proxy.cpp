// tools/chaos/proxy.cpp — see proxy.hpp.
//
// A connection's life:
//
//   accepted ──connect(target)──> connecting ──SO_ERROR 0──> open ──both directions shut──> closed
//       │                              │                       │
//       └── reset fault active ──> RST └── connect failed ──>  └── error / reset / close_after ──>
//                                           closed                   closed (RST on reset)
//
// Each direction ("stream") is a queue of chunks read from its source with a release time
// (latency); pump() writes the released head to the destination as far as the faults allow
// (black hole: nothing; bandwidth: token bucket; slice: one small segment per delay; close_after:
// up to the limit, then the connection closes). EOF from a source is passed on (shutdown(WR))
// once its queue is empty, so the order of bytes and FIN is kept.
#include "tools/chaos/proxy.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <deque>
#include <map>

#include <fmt/format.h>

#include "tools/chaos/net.hpp"
#include "tools/chaos/schedule.hpp"

namespace dd::chaos {

using nlohmann::json;

link_spec parse_link_spec(const std::string& text) {
  const auto eq = text.find('=');
  const auto arrow = text.find("->");
  if (eq == std::string::npos || arrow == std::string::npos || arrow < eq || eq == 0)
    throw usage_error(fmt::format(
        "--link '{}': expected NAME=LISTEN_HOST:LISTEN_PORT->TARGET_HOST:TARGET_PORT", text));
  link_spec l;
  l.name = text.substr(0, eq);
  l.listen = parse_host_port(text.substr(eq + 1, arrow - eq - 1), "--link " + l.name + " listen");
  l.target = parse_host_port(text.substr(arrow + 2), "--link " + l.name + " target");
  if (l.target.port == 0) throw usage_error(fmt::format("--link {}: target port 0", l.name));
  return l;
}

namespace {

constexpr unsigned dir_up = 1, dir_down = 2;

enum tag_type : uint64_t {
  t_listener = 1,
  t_control = 2,
  t_ctl_client = 3,
  t_cfd = 4,
  t_ufd = 5,
  t_wake = 6
};
uint64_t tag(tag_type t, uint64_t id) { return (static_cast<uint64_t>(t) << 56) | id; }

/// One active fault on a link. `expires` is monotonic seconds; 0 = until healed.
struct fault {
  std::string kind;
  unsigned dirs = dir_up | dir_down;
  double expires = 0;
  double ms = 0, jitter = 0;  // latency
  double rate = 0;            // bandwidth, bytes/s
  double p = 0;               // corrupt probability per byte
  uint64_t size = 16;         // slice segment bytes
  double delay = 0.001;       // slice delay between segments, seconds
  uint64_t bytes = 0;         // close_after
  json params;                // as given, for status
};

struct chunk {
  std::string data;
  size_t off = 0;
  double release = 0;
};

struct stream {
  unsigned dir = dir_up;
  std::deque<chunk> q;
  size_t queued = 0;
  double last_release = 0;
  bool src_eof = false;
  bool src_parked = false;  // source hung up while we could not read: read it without epoll
  bool shut = false;        // EOF passed on to the destination
  bool dst_blocked = false;
  double tokens = 0, refill_at = 0;
  double next_segment = 0;
  uint64_t forwarded = 0;
  uint64_t limit_base = 0;  // forwarded count when close_after was set
};

struct link_state;

struct conn {
  uint64_t id = 0;
  link_state* link = nullptr;
  int cfd = -1, ufd = -1;
  bool connecting = true;
  bool dead = false;
  bool rst = false;
  stream up, down;
  uint32_t cfd_events = 0, ufd_events = 0;
};

struct link_state {
  link_spec spec;
  host_port bound;
  sockaddr_in target{};
  int lfd = -1;
  std::map<std::string, fault> faults;
  chaos_rng rng{1};
  uint64_t accepted = 0;
};

struct ctl_client {
  int fd = -1;
  std::string in, out;
  bool closing = false;
};

double num(const json& v) {
  return v.is_number() ? v.get<double>() : std::stod(v.get<std::string>());
}

}  // namespace

struct fault_proxy::impl {
  proxy_config cfg;
  int ep = -1;
  int wake[2] = {-1, -1};
  int ctl_fd = -1;
  host_port ctl_bound;
  std::vector<std::unique_ptr<link_state>> links;
  std::map<uint64_t, std::unique_ptr<conn>> conns;
  std::map<uint64_t, ctl_client> clients;
  uint64_t next_id = 1;
  std::atomic<bool> stopping{false};

  // ---- setup ----
  void add_fd(int fd, uint32_t ev, uint64_t t) {
    epoll_event e{};
    e.events = ev;
    e.data.u64 = t;
    ::epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e);
  }
  void mod_fd(int fd, uint32_t ev, uint64_t t) {
    epoll_event e{};
    e.events = ev;
    e.data.u64 = t;
    if (::epoll_ctl(ep, EPOLL_CTL_MOD, fd, &e) != 0 && errno == ENOENT)
      ::epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e);  // a parked fd that is wanted again
  }

  explicit impl(proxy_config c) : cfg(std::move(c)) {
    ep = ::epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0 || ::pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0)
      throw chaos_error(fmt::format("proxy: epoll/pipe: {}", std::strerror(errno)));
    add_fd(wake[0], EPOLLIN, tag(t_wake, 0));
    ctl_fd = listen_tcp(cfg.control, &ctl_bound);
    add_fd(ctl_fd, EPOLLIN, tag(t_control, 0));
    for (size_t i = 0; i < cfg.links.size(); ++i) {
      for (size_t j = 0; j < i; ++j)
        if (cfg.links[j].name == cfg.links[i].name)
          throw usage_error(fmt::format("--link {}: name given twice", cfg.links[i].name));
      auto l = std::make_unique<link_state>();
      l->spec = cfg.links[i];
      l->target = resolve_ipv4(l->spec.target);
      l->lfd = listen_tcp(l->spec.listen, &l->bound);
      l->rng = chaos_rng(cfg.seed + i);
      add_fd(l->lfd, EPOLLIN, tag(t_listener, i));
      links.push_back(std::move(l));
    }
  }

  ~impl() {
    for (auto& [id, c] : conns) close_conn(*c);
    for (auto& [id, cl] : clients) ::close(cl.fd);
    for (auto& l : links) ::close(l->lfd);
    if (ctl_fd >= 0) ::close(ctl_fd);
    ::close(wake[0]);
    ::close(wake[1]);
    if (ep >= 0) ::close(ep);
  }

  link_state* find_link(const std::string& name) {
    for (auto& l : links)
      if (l->spec.name == name) return l.get();
    return nullptr;
  }

  // ---- faults ----
  const fault* active(const link_state& l, const char* kind, unsigned dir) const {
    const auto it = l.faults.find(kind);
    if (it == l.faults.end() || !(it->second.dirs & dir)) return nullptr;
    return &it->second;
  }

  size_t cap_of(const conn& c, const stream& s) const {
    return active(*c.link, "blackhole", s.dir) ? cfg.hold_cap : cfg.queue_cap;
  }

  void expire(double now) {
    for (auto& l : links)
      for (auto it = l->faults.begin(); it != l->faults.end();)
        it = (it->second.expires > 0 && now >= it->second.expires) ? l->faults.erase(it) : ++it;
  }

  // ---- connections ----
  void close_conn(conn& c) {
    for (int fd : {c.cfd, c.ufd}) {
      if (fd < 0) continue;
      if (c.rst) {
        linger lg{1, 0};  // close now with RST
        ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
      }
      ::close(fd);  // also removes it from the epoll set
    }
    c.cfd = c.ufd = -1;
    c.dead = true;
  }

  void accept_on(link_state& l, double now) {
    for (;;) {
      const int fd = ::accept4(l.lfd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;  // EAGAIN, or a transient error: try on the next event
      ++l.accepted;
      if (active(l, "reset", dir_up | dir_down)) {
        linger lg{1, 0};
        ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        ::close(fd);
        continue;
      }
      const int ufd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (ufd < 0) {
        ::close(fd);
        continue;
      }
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      ::setsockopt(ufd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      auto c = std::make_unique<conn>();
      c->id = next_id++;
      c->link = &l;
      c->cfd = fd;
      c->ufd = ufd;
      c->up.dir = dir_up;
      c->down.dir = dir_down;
      c->up.refill_at = c->down.refill_at = now;
      const int rc = ::connect(ufd, reinterpret_cast<const sockaddr*>(&l.target), sizeof l.target);
      if (rc == 0) {
        c->connecting = false;
      } else if (errno != EINPROGRESS) {
        c->rst = true;
        close_conn(*c);
        continue;
      }
      add_fd(fd, 0, tag(t_cfd, c->id));
      add_fd(ufd, 0, tag(t_ufd, c->id));
      conns[c->id] = std::move(c);
    }
  }

  void read_into(conn& c, stream& s, int src, double now) {
    const link_state& l = *c.link;
    const size_t cap = cap_of(c, s);
    char buf[65536];
    while (!s.src_eof && s.queued < cap && !c.dead) {
      const ssize_t n = ::recv(src, buf, std::min(sizeof buf, cap - s.queued), 0);
      if (n == 0) {
        s.src_eof = true;
        return;
      }
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
          c.rst = true;
          close_conn(c);
        }
        return;
      }
      chunk ch;
      ch.data.assign(buf, static_cast<size_t>(n));
      if (const fault* f = active(l, "corrupt", s.dir)) {
        auto& rng = c.link->rng;
        for (auto& b : ch.data)
          if (rng.uniform() < f->p)
            b = static_cast<char>(b ^ static_cast<char>(1 + rng.below(255)));
      }
      double release = now;
      if (const fault* f = active(l, "latency", s.dir)) {
        double d = f->ms;
        if (f->jitter > 0) d += (2 * c.link->rng.uniform() - 1) * f->jitter;
        release = now + std::max(0.0, d) / 1000.0;
      }
      // Never reorder: a chunk leaves no earlier than the one before it.
      ch.release = std::max(release, s.last_release);
      s.last_release = ch.release;
      s.queued += ch.data.size();
      s.q.push_back(std::move(ch));
    }
  }

  // Writes what the faults allow; returns the next time something becomes writable (0: none).
  double pump(conn& c, stream& s, int dst, double now) {
    const link_state& l = *c.link;
    if (c.dead || s.shut || (s.dir == dir_up && c.connecting)) return 0;
    if (active(l, "blackhole", s.dir)) return 0;
    while (!s.q.empty() && !s.dst_blocked && !c.dead) {
      chunk& h = s.q.front();
      if (h.release > now) return h.release;
      size_t allowed = h.data.size() - h.off;
      const fault* slice = active(l, "slice", s.dir);
      if (slice) {
        if (now < s.next_segment) return s.next_segment;
        allowed = std::min<size_t>(allowed, std::max<uint64_t>(1, slice->size));
      }
      if (const fault* bw = active(l, "bandwidth", s.dir)) {
        const double burst = std::max(1.0, std::min(bw->rate * 0.05, 65536.0));
        s.tokens = std::min(burst, s.tokens + (now - s.refill_at) * bw->rate);
        s.refill_at = now;
        if (s.tokens < 1) return now + (1 - s.tokens) / bw->rate;
        allowed = std::min<size_t>(allowed, static_cast<size_t>(s.tokens));
      }
      const fault* limit = active(l, "close_after", s.dir);
      if (limit) {
        const uint64_t sent = s.forwarded - s.limit_base;
        if (sent >= limit->bytes) {
          close_conn(c);
          return 0;
        }
        allowed = std::min<size_t>(allowed, limit->bytes - sent);
      }
      const ssize_t n = ::send(dst, h.data.data() + h.off, allowed, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
          s.dst_blocked = true;
          return 0;
        }
        c.rst = true;
        close_conn(c);
        return 0;
      }
      h.off += static_cast<size_t>(n);
      s.queued -= static_cast<size_t>(n);
      s.forwarded += static_cast<uint64_t>(n);
      if (active(l, "bandwidth", s.dir)) s.tokens -= static_cast<double>(n);
      if (h.off == h.data.size()) s.q.pop_front();
      if (limit && s.forwarded - s.limit_base >= limit->bytes) {
        close_conn(c);
        return 0;
      }
      if (slice) {
        s.next_segment = now + slice->delay;
        if (slice->delay > 0) return s.q.empty() ? 0 : s.next_segment;
      }
    }
    if (s.q.empty() && s.src_eof && !s.shut && !c.dead) {
      ::shutdown(dst, SHUT_WR);
      s.shut = true;
    }
    return 0;
  }

  // Pumps both directions, applies parked reads and epoll interest; returns the next deadline.
  double service(conn& c, double now) {
    double next = 0;
    auto earliest = [&](double t) {
      if (t > 0 && (next == 0 || t < next)) next = t;
    };
    for (int round = 0; round < 2 && !c.dead; ++round) {
      if (c.up.src_parked && c.up.queued < cap_of(c, c.up)) read_into(c, c.up, c.cfd, now);
      if (!c.dead && c.down.src_parked && c.down.queued < cap_of(c, c.down))
        read_into(c, c.down, c.ufd, now);
      if (!c.dead) earliest(pump(c, c.up, c.ufd, now));
      if (!c.dead) earliest(pump(c, c.down, c.cfd, now));
    }
    if (c.dead) return 0;
    if (c.up.shut && c.down.shut) {
      close_conn(c);
      return 0;
    }
    auto wants_read = [&](const stream& s) {
      return !s.src_eof && !s.src_parked && s.queued < cap_of(c, s);
    };
    uint32_t cev = 0, uev = 0;
    if (wants_read(c.up)) cev |= EPOLLIN;
    if (c.down.dst_blocked) cev |= EPOLLOUT;
    if (c.connecting) {
      uev = EPOLLOUT;
    } else {
      if (wants_read(c.down)) uev |= EPOLLIN;
      if (c.up.dst_blocked) uev |= EPOLLOUT;
    }
    if (cev != c.cfd_events) mod_fd(c.cfd, cev, tag(t_cfd, c.id));
    if (uev != c.ufd_events) mod_fd(c.ufd, uev, tag(t_ufd, c.id));
    c.cfd_events = cev;
    c.ufd_events = uev;
    if (c.up.src_parked || c.down.src_parked) earliest(now + 0.01);
    return next;
  }

  void on_conn_event(conn& c, bool upstream_fd, uint32_t ev, double now) {
    if (c.dead) return;
    stream& reading = upstream_fd ? c.down : c.up;  // the stream whose source is this fd
    stream& writing = upstream_fd ? c.up : c.down;  // the stream whose destination is this fd
    const int fd = upstream_fd ? c.ufd : c.cfd;
    if (upstream_fd && c.connecting) {
      if (ev & (EPOLLOUT | EPOLLERR | EPOLLHUP)) {
        int err = 0;
        socklen_t len = sizeof err;
        ::getsockopt(c.ufd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0) {
          c.rst = true;  // the client sees a reset when the target refuses
          close_conn(c);
          return;
        }
        c.connecting = false;
      }
      return;
    }
    if (ev & EPOLLERR) {
      c.rst = true;
      close_conn(c);
      return;
    }
    if (ev & EPOLLOUT) writing.dst_blocked = false;
    if (ev & EPOLLIN) read_into(c, reading, fd, now);
    if ((ev & EPOLLHUP) && !(ev & EPOLLIN) && !reading.src_eof) {
      // Hung up while its queue is full: epoll would report HUP forever; read it by hand.
      reading.src_parked = true;
      ::epoll_ctl(ep, EPOLL_CTL_DEL, fd, nullptr);
      (upstream_fd ? c.ufd_events : c.cfd_events) = 0;
    }
  }

  // ---- control ----
  json link_status(const link_state& l, double now) const {
    json faults = json::array();
    for (const auto& [kind, f] : l.faults) {
      json j = f.params;
      j["kind"] = kind;
      j["dir"] = f.dirs == (dir_up | dir_down) ? "both" : (f.dirs == dir_up ? "up" : "down");
      j["expires_in"] = f.expires > 0 ? json(std::max(0.0, f.expires - now)) : json(nullptr);
      faults.push_back(j);
    }
    uint64_t held_up = 0, held_down = 0, n = 0;
    for (const auto& [id, c] : conns)
      if (c->link == &l && !c->dead) {
        ++n;
        held_up += c->up.queued;
        held_down += c->down.queued;
      }
    return {{"name", l.spec.name},
            {"listen", l.bound.str()},
            {"target", l.spec.target.str()},
            {"connections", n},
            {"accepted", l.accepted},
            {"queued", {{"up", held_up}, {"down", held_down}}},
            {"faults", faults}};
  }

  json handle(const std::string& line, double now) {
    std::vector<std::string> words;
    for (const auto& w : split(line, ' '))
      if (!w.empty()) words.push_back(w);
    if (words.empty()) return {{"ok", false}, {"error", "empty request"}};
    const std::string cmd = words[0];
    if (cmd == "status" || cmd == "links") {
      json ls = json::array();
      for (const auto& l : links) ls.push_back(link_status(*l, now));
      return {{"ok", true}, {"control", ctl_bound.str()}, {"links", ls}};
    }
    if (cmd == "heal") {
      json healed = json::array();
      for (auto& l : links) {
        if (words.size() > 1 && l->spec.name != words[1]) continue;
        for (const auto& [kind, f] : l->faults) healed.push_back(l->spec.name + ":" + kind);
        l->faults.clear();
      }
      if (words.size() > 1 && !find_link(words[1]))
        return {{"ok", false}, {"error", fmt::format("no link named '{}'", words[1])}};
      return {{"ok", true}, {"healed", healed}};
    }
    static const char* kinds[] = {"latency", "bandwidth", "reset",      "blackhole",
                                  "corrupt", "slice",     "close_after"};
    if (std::find(std::begin(kinds), std::end(kinds), cmd) == std::end(kinds))
      return {{"ok", false},
              {"error", fmt::format("unknown request '{}' (status, heal [LINK], latency, "
                                    "bandwidth, reset, blackhole, corrupt, slice, close_after)",
                                    cmd)}};
    if (words.size() < 2) return {{"ok", false}, {"error", cmd + ": no link named"}};
    link_state* l = find_link(words[1]);
    if (!l) return {{"ok", false}, {"error", fmt::format("no link named '{}'", words[1])}};
    fault f;
    f.kind = cmd;
    std::map<std::string, std::string> kv;
    for (size_t i = 2; i < words.size(); ++i) {
      const auto eq = words[i].find('=');
      if (eq == std::string::npos)
        return {{"ok", false}, {"error", fmt::format("{}: '{}' is not key=value", cmd, words[i])}};
      kv[words[i].substr(0, eq)] = words[i].substr(eq + 1);
    }
    try {
      auto take = [&](const std::string& k) -> const std::string* {
        const auto it = kv.find(k);
        return it == kv.end() ? nullptr : &it->second;
      };
      if (auto v = take("dir")) {
        if (*v == "up")
          f.dirs = dir_up;
        else if (*v == "down")
          f.dirs = dir_down;
        else if (*v == "both")
          f.dirs = dir_up | dir_down;
        else
          throw usage_error("dir must be up, down or both");
      }
      if (auto v = take("for")) {
        const double d = parse_duration(*v, "for");
        f.expires = d > 0 ? now + d : 0;
      }
      auto need = [&](const std::string& k) {
        if (!take(k)) throw usage_error(fmt::format("{} needs {}=", cmd, k));
        return num(json(*take(k)));
      };
      std::vector<std::string> allowed{"dir", "for"};
      if (cmd == "latency") {
        f.ms = need("ms");
        f.jitter = take("jitter") ? num(json(*take("jitter"))) : 0;
        if (f.ms < 0 || f.jitter < 0) throw usage_error("ms and jitter must be >= 0");
        f.params = {{"ms", f.ms}, {"jitter", f.jitter}};
        allowed.insert(allowed.end(), {"ms", "jitter"});
      } else if (cmd == "bandwidth") {
        f.rate = need("rate");
        if (!(f.rate > 0)) throw usage_error("rate must be > 0 bytes/s");
        f.params = {{"rate", f.rate}};
        allowed.push_back("rate");
      } else if (cmd == "corrupt") {
        f.p = need("p");
        if (!(f.p >= 0 && f.p <= 1)) throw usage_error("p must be in [0, 1]");
        if (auto v = take("seed")) l->rng = chaos_rng(std::stoull(*v));
        f.params = {{"p", f.p}};
        allowed.insert(allowed.end(), {"p", "seed"});
      } else if (cmd == "slice") {
        if (auto v = take("size")) f.size = std::max<uint64_t>(1, std::stoull(*v));
        if (auto v = take("delay_us")) f.delay = std::stod(*v) / 1e6;
        f.params = {{"size", f.size}, {"delay_us", f.delay * 1e6}};
        allowed.insert(allowed.end(), {"size", "delay_us"});
      } else if (cmd == "close_after") {
        f.bytes = static_cast<uint64_t>(need("bytes"));
        f.params = {{"bytes", f.bytes}};
        allowed.push_back("bytes");
      }
      for (const auto& [k, v] : kv)
        if (std::find(allowed.begin(), allowed.end(), k) == allowed.end())
          throw usage_error(fmt::format("{} takes no '{}'", cmd, k));
    } catch (const std::exception& e) {
      return {{"ok", false}, {"error", fmt::format("{}: {}", cmd, e.what())}};
    }
    json reset_count = 0;
    if (cmd == "reset") {
      int n = 0;
      for (auto& [id, c] : conns)
        if (c->link == l && !c->dead) {
          c->rst = true;
          close_conn(*c);
          ++n;
        }
      reset_count = n;
      if (f.expires == 0) {  // one-shot: reset what is open now, nothing stays applied
        json reply = {{"ok", true}, {"link", l->spec.name}, {"fault", cmd}, {"reset", n}};
        return reply;
      }
    }
    if (cmd == "close_after")
      for (auto& [id, c] : conns)
        if (c->link == l) {
          c->up.limit_base = c->up.forwarded;
          c->down.limit_base = c->down.forwarded;
        }
    if (cmd == "bandwidth")
      for (auto& [id, c] : conns)
        if (c->link == l) {
          c->up.tokens = c->down.tokens = 0;
          c->up.refill_at = c->down.refill_at = now;
        }
    const double expires = f.expires;
    l->faults[cmd] = std::move(f);
    json reply = {{"ok", true},
                  {"link", l->spec.name},
                  {"fault", cmd},
                  {"expires_in", expires > 0 ? json(expires - now) : json(nullptr)}};
    if (cmd == "reset") reply["reset"] = reset_count;
    return reply;
  }

  void on_ctl_client(uint64_t id, uint32_t ev, double now) {
    auto it = clients.find(id);
    if (it == clients.end()) return;
    ctl_client& cl = it->second;
    if (ev & EPOLLIN) {
      char buf[4096];
      for (;;) {
        const ssize_t n = ::recv(cl.fd, buf, sizeof buf, 0);
        if (n > 0) {
          cl.in.append(buf, static_cast<size_t>(n));
          if (cl.in.size() > 65536) cl.closing = true;  // no request is that long
          continue;
        }
        if (n == 0 || (errno != EAGAIN && errno != EINTR)) cl.closing = true;
        break;
      }
      for (auto nl = cl.in.find('\n'); nl != std::string::npos; nl = cl.in.find('\n')) {
        std::string line = cl.in.substr(0, nl);
        cl.in.erase(0, nl + 1);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        cl.out += handle(line, now).dump() + "\n";
      }
    }
    while (!cl.out.empty()) {
      const ssize_t n = ::send(cl.fd, cl.out.data(), cl.out.size(), MSG_NOSIGNAL);
      if (n > 0) {
        cl.out.erase(0, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) break;
      cl.closing = true;
      cl.out.clear();
    }
    if (cl.closing && cl.out.empty()) {
      ::close(cl.fd);
      clients.erase(it);
      return;
    }
    mod_fd(cl.fd, cl.closing ? EPOLLOUT : (EPOLLIN | (cl.out.empty() ? 0u : EPOLLOUT)),
           tag(t_ctl_client, id));
  }

  void run() {
    std::vector<epoll_event> events(256);
    double next = 0;
    while (!stopping) {
      int timeout_ms = 1000;
      if (next > 0)
        timeout_ms = std::max(0, static_cast<int>(std::ceil((next - mono_now()) * 1000)));
      for (const auto& l : links)
        for (const auto& [k, f] : l->faults)
          if (f.expires > 0)
            timeout_ms =
                std::min(timeout_ms,
                         std::max(0, static_cast<int>(std::ceil((f.expires - mono_now()) * 1000))));
      const int n = ::epoll_wait(ep, events.data(), static_cast<int>(events.size()), timeout_ms);
      const double now = mono_now();
      for (int i = 0; i < n; ++i) {
        const uint64_t t = events[i].data.u64;
        const auto type = static_cast<tag_type>(t >> 56);
        const uint64_t id = t & ((uint64_t{1} << 56) - 1);
        const uint32_t ev = events[i].events;
        switch (type) {
          case t_wake: {
            char b[64];
            while (::read(wake[0], b, sizeof b) > 0) {}
            break;
          }
          case t_listener: accept_on(*links[id], now); break;
          case t_control: {
            for (;;) {
              const int fd = ::accept4(ctl_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
              if (fd < 0) break;
              const uint64_t cid = next_id++;
              clients[cid].fd = fd;
              add_fd(fd, EPOLLIN, tag(t_ctl_client, cid));
            }
            break;
          }
          case t_ctl_client: on_ctl_client(id, ev, now); break;
          case t_cfd:
          case t_ufd: {
            const auto it = conns.find(id);
            if (it != conns.end()) on_conn_event(*it->second, type == t_ufd, ev, now);
            break;
          }
        }
      }
      expire(now);
      next = 0;
      for (auto it = conns.begin(); it != conns.end();) {
        conn& c = *it->second;
        const double t = c.dead ? 0 : service(c, now);
        if (t > 0 && (next == 0 || t < next)) next = t;
        it = c.dead ? conns.erase(it) : std::next(it);
      }
    }
  }
};

fault_proxy::fault_proxy(proxy_config cfg) : impl_(std::make_unique<impl>(std::move(cfg))) {}
fault_proxy::~fault_proxy() = default;

json fault_proxy::ports() const {
  json links = json::object();
  for (const auto& l : impl_->links) links[l->spec.name] = l->bound.str();
  return {{"control", impl_->ctl_bound.str()}, {"links", links}};
}

void fault_proxy::run() { impl_->run(); }

void fault_proxy::stop() {
  impl_->stopping = true;
  const char b = 1;
  [[maybe_unused]] const ssize_t n = ::write(impl_->wake[1], &b, 1);
}

}  // namespace dd::chaos
