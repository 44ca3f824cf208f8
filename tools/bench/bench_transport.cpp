// tools/bench/bench_transport.cpp — dd-bench-transport: what CAF's middleman costs for fragment
// transfers, against raw TCP baselines run in the same process, and what an oversized BASP frame
// header does to a receiver.
//
// Default mode prints, from one run (every transfer is sender-timed: first byte sent → last
// acknowledgement received; MiB/s = 2^20 bytes of fragment payload per second):
//  1. Push: one fragment (--size-mb, default 64 MiB = 16 Mi float32, encoded fp32) split by
//     dd::split_push into push_msg chunks (--chunk-bytes, default 4 MiB), each encoded with
//     dd::encode and sent as (push_atom, wire_bytes, seq) from a "learner" actor system (this
//     process)
//     to a "syncer" actor system in a child process (fork + exec of this binary, so the two do not
//     share a scheduler or a heap) over CAF's middleman on 127.0.0.1. Both systems use the
//     project's dd::actors::node_config (middleman, heartbeat and connection timeout on, app
//     identifier, type-ID block). Credit-based flow control is the runtime's own
//     (actors/link/chunk_flow.hpp, policy::credit_window): at most --window chunks (default 8, the
//     runtime's default sync.window_chunks) uncredited per link; the syncer grants
//     (credit_atom, seq) as it takes each chunk, decodes it, feeds it to a dd::chunk_assembler,
//     and sends (finished_atom, learner) once the transfer is whole.
//  2. Broadcast: the same fragment as broadcast_msg chunks (dd::split_broadcast) from this process
//     to --learners receiver processes (default 4, one actor system each), the same window per
//     learner, all learners served at once. Aggregate MiB/s = learners × fragment / time.
//  3. Baseline A: raw TCP (blocking sockets, TCP_NODELAY as CAF sets it) carrying the same encoded
//     chunk bytes, each framed by a little-endian u64 length, with the same window; the receiver
//     reads each frame into one reused buffer and does the same decode + chunk_assembler work and
//     acknowledges every frame with 8 bytes (u32 chunk index, u32 "transfer complete").
//     Ratio push / A (target >= 0.8). Also A0: the same frames and window, but the receiver
//     drops each frame unread (transport only), which shows what decode + assembly cost.
//  4. Baseline B: one raw TCP stream of the fragment's bytes (u64 length, then write all; the
//     receiver reads all into one buffer and answers one byte). Ratio push / B (target >= 0.8).
//     The broadcast's baselines: B to each of the --learners receivers at once (raw broadcast,
//     ratio broadcast / raw broadcast, target >= 0.8), and the same with each receiver reading
//     chunk by chunk and checking each chunk's CRC-32C (raw broadcast + CRC-32C: the least a
//     receiver must do to accept a chunk).
//     With --broadcast-bound the broadcast's learners check every chunk as a learner must (decode,
//     trailer and payload CRC-32C in one pass over the message) but assemble nothing: no copy into
//     a transfer buffer. What a receive path that reads each payload straight into its place
//     could reach at best (docs/benchmarks-transport.md); not the runtime's path.
//  6. Over TLS: the push and the broadcast again to receivers behind a TLS tunnel (as the syncer
//     node runs with --tls-*: actors/link/tls_tunnel.hpp, a throwaway CA made at start), the
//     sender dialing a local TLS forwarder per receiver as dd-node learner does. Ratios push TLS /
//     push and broadcast TLS / broadcast, per round (aim >= 0.8).
//  5. The syncer's memory: its VmRSS before any transfer (published, idle) and its VmHWM after all
//     pushes (warm-up included), both read from /proc/self/status in the receiver process, against
//     the target idle + 4 × chunk × window, and against idle + fragment + 4 × chunk × window (the
//     assembler necessarily holds the whole fragment).
// Kinds are interleaved in each of --repeats rounds (after --warmup rounds); medians are printed
// and ratios are medians of per-round ratios.
//
// --oversized-header: for each size in --announce-bytes (default 1 GiB and 3.9 GiB), start a fresh
// receiver process that publishes an actor with node_config, note its memory, connect a raw TCP
// socket, send one 32-byte BASP header (caf/io/basp/header.hpp: u8 operation, u8 pad, u8 pad,
// u8 flags, u32 payload_len, u64 operation_data, u64 source_actor, u64 dest_actor, big-endian as
// CAF's binary_serializer writes them — checked against that serializer at start-up) announcing a
// client_handshake whose payload is that size, send no payload, and report the receiver's VmRSS /
// VmHWM just after, whether it still answers a request over a normal CAF connection, and, after
// the connection timeout, its VmRSS again and whether it closed the raw connection.
//
// Internal: `--child ROLE ...` runs one receiver role (started by this program itself; it talks
// to its parent over stdin/stdout lines).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/io/basp/header.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/stateful_actor.hpp>

#include <fmt/format.h>

#include "actors/link/atoms.hpp"
#include "actors/link/chunk_flow.hpp"
#include "actors/link/frame_guard.hpp"
#include "actors/link/tensor_channel.hpp"
#include "actors/link/tls.hpp"
#include "actors/link/tls_tunnel.hpp"
#include "actors/nodes/node_config.hpp"
#include "messages/codec.hpp"
#include "tools/bench/bench_util.hpp"
#include "util/crc32c.hpp"
#include "util/endian.hpp"
#include "util/flags.hpp"
#include "util/net.hpp"
#include "util/parse.hpp"

namespace {

using dd::bench::median;
using dd::bench::now;

namespace atoms = dd::atoms;
using dd::wire_bytes;

constexpr const char* prog = "dd-bench-transport";
/// The run id of the bench's tensor channels (any string both sides agree on).
constexpr const char* bench_run_id = "dd-bench-transport";
constexpr double mib = 1024.0 * 1024.0;

/// VmRSS and VmHWM of this process, kB (/proc/self/status).
struct mem_kb {
  uint64_t rss = 0;
  uint64_t hwm = 0;
};

mem_kb read_mem() {
  mem_kb m;
  FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return m;
  char line[256];
  while (std::fgets(line, sizeof line, f) != nullptr) {
    unsigned long long v = 0;
    if (std::sscanf(line, "VmRSS: %llu", &v) == 1) m.rss = v;
    if (std::sscanf(line, "VmHWM: %llu", &v) == 1) m.hwm = v;
  }
  std::fclose(f);
  return m;
}

uint64_t mem_available_kb() {
  FILE* f = std::fopen("/proc/meminfo", "r");
  if (f == nullptr) return 0;
  char line[256];
  unsigned long long v = 0;
  while (std::fgets(line, sizeof line, f) != nullptr)
    if (std::sscanf(line, "MemAvailable: %llu", &v) == 1) break;
  std::fclose(f);
  return v;
}

// ---- options -----------------------------------------------------------------------------------

struct options {
  size_t size_mib = 64;
  size_t chunk_bytes = dd::default_chunk_bytes;
  int window = dd::policy::default_window_chunks;
  int repeats = 5;
  int warmup = 1;
  int learners = 4;
  double heartbeat_s = dd::actors::node_transport{}.heartbeat_s;
  double connection_timeout_s = dd::actors::node_transport{}.connection_timeout_s;
  std::string json_path;
  bool oversized = false;
  bool broadcast_only = false;   // only the broadcast and its raw fan-out (for profiling)
  bool broadcast_bound = false;  // broadcast learners check each chunk but assemble nothing
  std::vector<uint64_t> announce = {uint64_t{1} << 30, 4187593113ull};  // 1 GiB, 3.9 GiB
  int oversized_connections = 1;
};

[[noreturn]] void refuse(const std::string& why) {
  std::fprintf(stderr, "%s: %s (see --help)\n", prog, why.c_str());
  std::exit(2);
}

options parse_options(int argc, char** argv) {
  options o;
  bool transfer_flag = false, oversized_flag = false;
  // A transfer option / an oversized-header option: a whole number in [lo, hi] into `out`.
  auto transfer = [&transfer_flag](auto* out, long long lo, long long hi) {
    return [out, lo, hi, &transfer_flag](const std::string& v) -> std::string {
      long long n = 0;
      if (!dd::util::parse_number_in(v, n, lo, hi))
        return "needs a whole number in " + std::to_string(lo) + ".." + std::to_string(hi) +
               ", got '" + v + "'";
      *out = static_cast<std::remove_pointer_t<decltype(out)>>(n);
      transfer_flag = true;
      return {};
    };
  };
  dd::util::flag_table flags(
      prog, "[transfer options] [--json FILE] | --oversized-header [flags]",
      "A 64 MB push (on the tensor channel, and on CAF only) and a broadcast to 4 learners\n"
      "against raw TCP (the broadcast against one raw stream to each learner at once), and\n"
      "both over mutual TLS against the same in the clear; the receiver's RSS.\n"
      "--oversized-header: an oversized BASP header against a published port.");
  flags
      .custom("--size-mb", "N", "fragment size in MiB of fp32 (default 64 = 16 Mi floats)",
              transfer(&o.size_mib, 1, 1024))
      .custom("--chunk-bytes", "B", "payload bytes per chunk (default 4194304; 4096..268435456)",
              transfer(&o.chunk_bytes, 4096, 256ll << 20))
      .custom("--window", "W", "chunks uncredited per link (default 8 = sync.window_chunks)",
              transfer(&o.window, 1, 1024))
      .custom("--repeats", "R", "measured rounds (default 5)", transfer(&o.repeats, 1, 1000))
      .custom("--warmup", "N", "unmeasured rounds first (default 1)", transfer(&o.warmup, 0, 100))
      .custom("--learners", "N", "broadcast receivers, one process each (default 4)",
              transfer(&o.learners, 1, 16))
      .number("--heartbeat-s", &o.heartbeat_s, 0, 3600, "S",
              "middleman heartbeat of every actor system (default node_config's 1; 0 = off)")
      .number("--connection-timeout-s", &o.connection_timeout_s, 0, 3600, "S",
              "middleman connection timeout (default node_config's 10; 0 = off)")
      .custom("--json", "FILE", "also write the JSON line to FILE",
              [&o](const std::string& v) -> std::string {
                if (v.empty()) return "needs a file name";
                o.json_path = v;
                return {};
              })
      .toggle("--broadcast-only", &o.broadcast_only,
              "run only the broadcast and its two raw fan-out baselines in each round (the "
              "other rows print 0; for profiling the broadcast path)")
      .toggle("--broadcast-bound", &o.broadcast_bound,
              "learners check each chunk but assemble none: a bound, not the runtime's path")
      .toggle("--oversized-header", &o.oversized, "the oversized-header mode")
      .custom("--announce-bytes", "L",
              "oversized header: comma-separated BASP payload_len values, 1..4294967295 "
              "(default 1073741824,4187593113 = 1 GiB, 3.9 GiB)",
              [&](const std::string& v) -> std::string {
                o.announce.clear();
                size_t start = 0;
                while (true) {
                  const size_t comma = v.find(',', start);
                  uint64_t n = 0;
                  const std::string one = v.substr(start, comma - start);
                  if (!dd::util::parse_number_in(one, n, uint64_t{1}, uint64_t{UINT32_MAX}))
                    return "needs values in 1..4294967295, got '" + one + "'";
                  o.announce.push_back(n);
                  if (comma == std::string::npos) break;
                  start = comma + 1;
                }
                oversized_flag = true;
                return {};
              })
      .custom("--oversized-connections", "K",
              "oversized header: raw connections per size, each sending the header (default 1)",
              [&](const std::string& v) -> std::string {
                if (!dd::util::parse_number_in(v, o.oversized_connections, 1, 64))
                  return "needs a whole number in 1..64, got '" + v + "'";
                oversized_flag = true;
                return {};
              })
      // main() runs `--child` as the first argument before this table; anywhere else it is refused.
      .custom("--child", "ROLE ...",
              "the bench's own receiver and raw-TCP processes, as the first argument (it starts "
              "them; not for use by hand)",
              [](const std::string&) -> std::string {
                return "is internal and only taken as the first argument";
              })
      .epilog("Exit status: 0 ok; 1 failure; 2 bad flags.\n");
  if (auto rc = flags.parse(argc, argv)) std::exit(*rc);
  if (o.oversized && (transfer_flag || o.broadcast_only || o.broadcast_bound))
    refuse(
        "--size-mb/--chunk-bytes/--window/--repeats/--warmup/--learners/--broadcast-only/"
        "--broadcast-bound do not apply to --oversized-header");
  if (!o.oversized && oversized_flag)
    refuse("--announce-bytes/--oversized-connections need --oversized-header");
  if (o.heartbeat_s > 0 && o.connection_timeout_s > 0 && o.connection_timeout_s < o.heartbeat_s)
    refuse("--connection-timeout-s must not be below --heartbeat-s");
  return o;
}

// ---- sockets -----------------------------------------------------------------------------------

void write_all(int fd, const void* data, size_t n) {
  if (const int e = dd::util::write_all(fd, data, n); e != 0)
    throw std::runtime_error("socket write: " + dd::util::io_error_text(e));
}

/// Writes a u64 little-endian length prefix (n | flags) and then `n` bytes, with one writev
/// where it can.
void write_frame(int fd, const uint8_t* data, uint64_t n, uint64_t flags = 0) {
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>((n | flags) >> (8 * i));
  iovec iov[2] = {{len, 8}, {const_cast<uint8_t*>(data), n}};
  size_t left = 8 + n;
  int first = 0;
  while (left > 0) {
    const ssize_t w = ::writev(fd, iov + first, 2 - first);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) throw std::runtime_error(std::string("socket writev: ") + std::strerror(errno));
    left -= static_cast<size_t>(w);
    size_t k = static_cast<size_t>(w);
    while (first < 2 && k >= iov[first].iov_len) k -= iov[first++].iov_len;
    if (first < 2) {
      iov[first].iov_base = static_cast<uint8_t*>(iov[first].iov_base) + k;
      iov[first].iov_len -= k;
    }
  }
}

/// Reads exactly n bytes; false on an orderly close before the first byte.
bool read_all(int fd, void* data, size_t n) {
  auto p = static_cast<uint8_t*>(data);
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::recv(fd, p + got, n - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0 && got == 0) return false;
    if (r <= 0)
      throw std::runtime_error(r == 0 ? std::string("socket closed mid-frame")
                                      : std::string("socket read: ") + std::strerror(errno));
    got += static_cast<size_t>(r);
  }
  return true;
}

uint64_t read_u64le(int fd, bool* eof) {
  uint8_t b[8];
  *eof = !read_all(fd, b, 8);
  return dd::util::load_le<uint64_t>(b);
}

void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/// A listening socket on 127.0.0.1, ephemeral port.
int listen_loopback(uint16_t* port) {
  const int fd = dd::util::listen_loopback(0, port);
  if (fd < 0) throw std::runtime_error(std::string("bind/listen: ") + std::strerror(errno));
  return fd;
}

int connect_loopback(uint16_t port) {
  const int fd = dd::util::connect_loopback(port);
  if (fd < 0)
    throw std::runtime_error(fmt::format("connect 127.0.0.1:{}: {}", port, std::strerror(errno)));
  set_nodelay(fd);
  return fd;
}

// ---- child processes ---------------------------------------------------------------------------

/// A receiver process started by fork + exec of this binary; it reads commands on its stdin and
/// answers one line each on its stdout.
struct child_proc {
  std::string name;
  pid_t pid = -1;
  int to = -1;    // its stdin
  int from = -1;  // its stdout
  std::string buf;
};

std::vector<pid_t> g_children;  // killed (by pid) if the parent fails

std::string self_exe() {
  char p[4096];
  const ssize_t n = ::readlink("/proc/self/exe", p, sizeof p - 1);
  if (n <= 0) throw std::runtime_error("cannot read /proc/self/exe");
  p[n] = '\0';
  return p;
}

std::unique_ptr<child_proc> spawn_child(const std::string& name, std::vector<std::string> args) {
  int in_pipe[2], out_pipe[2];
  if (::pipe2(in_pipe, O_CLOEXEC) != 0 || ::pipe2(out_pipe, O_CLOEXEC) != 0)
    throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  const std::string exe = self_exe();
  args.insert(args.begin(), {exe, "--child"});
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    // Only async-signal-safe calls until exec.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);
    ::dup2(in_pipe[0], 0);
    ::dup2(out_pipe[1], 1);
    ::execv(exe.c_str(), argv.data());
    ::_exit(127);
  }
  ::close(in_pipe[0]);
  ::close(out_pipe[1]);
  auto c = std::make_unique<child_proc>();
  c->name = name;
  c->pid = pid;
  c->to = in_pipe[1];
  c->from = out_pipe[0];
  g_children.push_back(pid);
  return c;
}

/// One line from the child; std::nullopt on EOF or timeout.
std::optional<std::string> child_line(child_proc& c, double timeout_s) {
  const double deadline = now() + timeout_s;
  while (true) {
    const size_t nl = c.buf.find('\n');
    if (nl != std::string::npos) {
      std::string line = c.buf.substr(0, nl);
      c.buf.erase(0, nl + 1);
      return line;
    }
    const double left = deadline - now();
    if (left <= 0) return std::nullopt;
    pollfd p{c.from, POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(left * 1000) + 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return std::nullopt;
    char tmp[512];
    const ssize_t n = ::read(c.from, tmp, sizeof tmp);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::nullopt;
    c.buf.append(tmp, static_cast<size_t>(n));
  }
}

std::optional<std::string> child_ask(child_proc& c, const std::string& cmd, double timeout_s = 10) {
  const std::string line = cmd + "\n";
  if (::write(c.to, line.data(), line.size()) != static_cast<ssize_t>(line.size()))
    return std::nullopt;
  return child_line(c, timeout_s);
}

std::string child_must(child_proc& c, const std::string& cmd) {
  auto r = child_ask(c, cmd);
  if (!r)
    throw std::runtime_error(c.name + " (pid " + std::to_string(c.pid) + ") did not answer '" +
                             cmd + "'");
  return *r;
}

bool child_running(child_proc& c) {
  if (c.pid < 0) return false;
  int st = 0;
  const pid_t r = ::waitpid(c.pid, &st, WNOHANG);
  if (r == 0) return true;
  c.pid = -1;
  return false;
}

/// Asks the child to quit and reaps it (SIGKILL after 10 s).
void child_quit(child_proc& c) {
  if (c.pid < 0) return;
  const std::string q = "quit\n";
  (void)!::write(c.to, q.data(), q.size());
  ::close(c.to);
  const double deadline = now() + 10;
  int st = 0;
  while (::waitpid(c.pid, &st, WNOHANG) == 0) {
    if (now() > deadline) {
      ::kill(c.pid, SIGKILL);
      ::waitpid(c.pid, &st, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  g_children.erase(std::remove(g_children.begin(), g_children.end(), c.pid), g_children.end());
  ::close(c.from);
  c.pid = -1;
}

void kill_children() {
  for (pid_t p : g_children) {
    ::kill(p, SIGKILL);
    ::waitpid(p, nullptr, 0);
  }
  g_children.clear();
}

/// "ready PORT RSS_KB HWM_KB" from a freshly started receiver.
struct ready_info {
  uint16_t port = 0;
  mem_kb idle;
};

ready_info child_ready(child_proc& c) {
  auto line = child_line(c, 30);
  unsigned port = 0;
  unsigned long long rss = 0, hwm = 0;
  if (!line || std::sscanf(line->c_str(), "ready %u %llu %llu", &port, &rss, &hwm) != 3)
    throw std::runtime_error(c.name + " did not start (" + (line ? *line : "no answer") + ")");
  return {static_cast<uint16_t>(port), {rss, hwm}};
}

/// "mem RSS_KB HWM_KB ..." → mem_kb.
std::optional<mem_kb> child_mem(child_proc& c) {
  auto line = child_ask(c, "mem", 10);
  unsigned long long rss = 0, hwm = 0;
  if (!line || std::sscanf(line->c_str(), "mem %llu %llu", &rss, &hwm) != 2) return std::nullopt;
  return mem_kb{rss, hwm};
}

/// The child side of the command protocol: answers "mem" until "quit" or EOF.
void child_command_loop(const std::atomic<uint64_t>* completed,
                        const std::atomic<uint64_t>* errors) {
  char line[256];
  while (std::fgets(line, sizeof line, stdin) != nullptr) {
    if (std::strncmp(line, "quit", 4) == 0) break;
    if (std::strncmp(line, "mem", 3) == 0) {
      const auto m = read_mem();
      std::printf("mem %llu %llu %llu %llu\n", static_cast<unsigned long long>(m.rss),
                  static_cast<unsigned long long>(m.hwm),
                  static_cast<unsigned long long>(completed->load()),
                  static_cast<unsigned long long>(errors->load()));
    } else {
      std::printf("error unknown command\n");
    }
    std::fflush(stdout);
  }
}

void print_ready(uint16_t port) {
  const auto m = read_mem();
  std::printf("ready %u %llu %llu\n", port, static_cast<unsigned long long>(m.rss),
              static_cast<unsigned long long>(m.hwm));
  std::fflush(stdout);
}

dd::chunk_limits receiver_chunk_limits(size_t chunk_bytes) {
  dd::chunk_limits l;
  l.max_chunk_bytes = std::max(l.max_chunk_bytes, chunk_bytes);
  return l;
}

dd::decode_limits receiver_decode_limits(size_t chunk_bytes) {
  dd::decode_limits l;
  l.max_message_bytes = std::max(l.max_message_bytes, chunk_bytes + (size_t{1} << 20));
  return l;
}

// ---- the middleman receiver ("syncer" for pushes, "learner" for broadcasts) --------------------

struct recv_counters {
  std::atomic<uint64_t> completed{0};
  std::atomic<uint64_t> errors{0};
};

struct recv_state {
  dd::chunk_assembler assembler;
  uint64_t bound_version = 0;  // --broadcast-bound: the version being counted
  uint32_t bound_chunks = 0;   // and its chunks so far
};

/// Grants credit for each chunk as it takes it (as the runtime's owner and learner do), decodes
/// it, feeds it to the assembler, and says finished_atom when a transfer is whole. A chunk that
/// does not decode or assemble gets (reject_atom, learner, idx). `bound` (--broadcast-bound): a
/// broadcast chunk is decoded with its trailer checked and its payload CRC-32C compared, all in
/// one pass over the message, and only counted; the transfer is whole when chunk_count chunks of
/// its version came.
caf::behavior mm_receiver(caf::stateful_actor<recv_state>* self, recv_counters* counters,
                          int32_t learner, dd::chunk_limits cl, dd::decode_limits dl, bool bound) {
  self->state.assembler = dd::chunk_assembler{cl};
  // The whole fragment's buffer goes back to the assembler, as a learner does once it applied a
  // broadcast and a fragment owner once it decoded a push (learner_core, owner_core).
  auto on_chunk = [=](auto decoded) {
    auto to = caf::actor_cast<caf::actor>(self->current_sender());
    if (!decoded) {
      if (counters->errors++ == 0)
        std::fprintf(stderr, "receiver %d: undecodable chunk: %s\n", learner,
                     decoded.error().message.c_str());
      self->send(to, atoms::reject_atom_v, learner, uint32_t{0});
      return;
    }
    const uint32_t idx = decoded->header.chunk_index;
    auto r = self->state.assembler.add(*decoded);  // payload straight from the message
    if (!r) {
      if (counters->errors++ == 0)
        std::fprintf(stderr, "receiver %d: chunk %u refused: %s\n", learner, idx,
                     r.error().message.c_str());
      self->send(to, atoms::reject_atom_v, learner, idx);
      return;
    }
    if (r->has_value()) {  // the whole fragment; dropped here (a syncer would merge it)
      self->state.assembler.recycle(std::move((*r)->payload));
      counters->completed++;
      self->send(to, atoms::finished_atom_v, learner);
    }
  };
  return {
      [=](atoms::push_atom, const wire_bytes& b, uint64_t seq) {
        dd::actors::grant_credit(self, seq);
        on_chunk(dd::decode_push_ref(b.data(), b.size(), dl));
      },
      [=](atoms::broadcast_atom, const wire_bytes& b, uint64_t seq) {
        dd::actors::grant_credit(self, seq);
        if (bound) {
          auto to = caf::actor_cast<caf::actor>(self->current_sender());
          auto d = dd::decode_broadcast_ref(b.data(), b.size(), dl);
          if (!d || (d->header.payload_crc32c != 0 && d->payload_crc &&
                     *d->payload_crc != d->header.payload_crc32c)) {
            if (counters->errors++ == 0)
              std::fprintf(stderr, "receiver %d: a damaged or undecodable chunk\n", learner);
            self->send(to, atoms::reject_atom_v, learner, uint32_t{0});
            return;
          }
          auto& st = self->state;
          if (d->header.version != st.bound_version) {
            st.bound_version = d->header.version;
            st.bound_chunks = 0;
          }
          if (++st.bound_chunks == d->header.chunk_count) {
            counters->completed++;
            self->send(to, atoms::finished_atom_v, learner);
          }
          return;
        }
        // As a learner decodes a broadcast (learner_core): the payload's checksum is computed
        // by the assembler while it copies the payload.
        dd::decode_limits deferred = dl;
        deferred.defer_payload_checksum = true;
        on_chunk(dd::decode_broadcast_ref(b.data(), b.size(), deferred));
      },
      [=](atoms::status_atom) { return int32_t{1}; },  // liveness probe
  };
}

int child_mm_recv(int32_t learner, size_t chunk_bytes, double heartbeat_s, double timeout_s,
                  const std::string& tls_dir = {}, bool bound = false) {
  dd::actors::node_transport t;
  t.heartbeat_s = heartbeat_s;
  t.connection_timeout_s = timeout_s;
  dd::actors::node_config cfg{t};
  caf::actor_system sys{cfg};
  recv_counters counters;
  auto rcv = sys.spawn(mm_receiver, &counters, learner, receiver_chunk_limits(chunk_bytes),
                       receiver_decode_limits(chunk_bytes), bound);
  auto port = sys.middleman().publish(rcv, 0, "127.0.0.1", true);
  if (!port) {
    std::fprintf(stderr, "receiver %d: publish failed: %s\n", learner,
                 sys.render(port.error()).c_str());
    caf::anon_send_exit(rcv, caf::exit_reason::user_shutdown);
    return 1;
  }
  // As the syncer node does (actors/nodes/syncer_node.cpp publish_monitor): the middleman on
  // loopback behind a frame guard, which hands tensor channels to this node's hub.
  dd::actors::tensor_channel_hub::options co;
  co.run_id = bench_run_id;
  co.max_frame_bytes = receiver_decode_limits(chunk_bytes).max_message_bytes;
  auto hub = dd::actors::tensor_channel_hub::make(sys, co);
  dd::actors::tensor_channel_hub::allow(
      sys, caf::actor_cast<caf::strong_actor_ptr>(rcv),
      {dd::actors::channel_kind::push, dd::actors::channel_kind::broadcast});
  std::weak_ptr<dd::actors::tensor_channel_hub> weak = hub;
  auto guard = std::make_unique<dd::actors::frame_guard>(
      "127.0.0.1", 0, *port, dd::actors::frame_guard_limits{uint64_t{80} << 20},
      [learner](const std::string& what) {
        std::fprintf(stderr, "receiver %d: frame guard: %s\n", learner, what.c_str());
      },
      [weak](int fd, std::string peer, std::vector<uint8_t> first) {
        if (auto h = weak.lock())
          h->accept(fd, std::move(peer), std::move(first));
        else
          ::close(fd);
      });
  // Mutual TLS (the rows "over TLS"): as the syncer node does, a TLS tunnel in front of the
  // guard; its certificate names `syncer`.
  std::unique_ptr<dd::actors::tls_tunnel> tunnel;
  if (!tls_dir.empty()) {
    dd::actors::tls_tunnel::options to;
    to.what = dd::actors::tls_tunnel::mode::terminate;
    to.target_port = guard->port();
    to.ctx = std::make_shared<dd::actors::tls_context>(
        dd::actors::tls_files{tls_dir + "/syncer.pem", tls_dir + "/syncer.key",
                              tls_dir + "/ca.pem"},
        dd::actors::tls_context::side::server);
    to.on_refused = [learner](const std::string& what) {
      std::fprintf(stderr, "receiver %d: %s\n", learner, what.c_str());
    };
    tunnel = std::make_unique<dd::actors::tls_tunnel>(std::move(to));
  }
  print_ready(tunnel ? tunnel->port() : guard->port());
  child_command_loop(&counters.completed, &counters.errors);
  tunnel.reset();
  guard.reset();
  hub.reset();
  sys.middleman().unpublish(rcv, *port);
  caf::anon_send_exit(rcv, caf::exit_reason::user_shutdown);
  return 0;
}

// ---- raw TCP receivers -------------------------------------------------------------------------

/// Baseline A: frames of encoded push chunks, decoded and assembled as the syncer does; an 8-byte
/// ack per frame (u32 chunk index, u32 1 when the transfer completed), little-endian.
void serve_raw_a(int fd, size_t chunk_bytes, bool assemble, recv_counters* counters) {
  dd::chunk_assembler assembler{receiver_chunk_limits(chunk_bytes)};
  const auto dl = receiver_decode_limits(chunk_bytes);
  std::vector<uint8_t> buf;
  while (true) {
    bool eof = false;
    const uint64_t len = read_u64le(fd, &eof);
    if (eof || len == 0) return;
    if (len > dl.max_message_bytes) throw std::runtime_error("raw A: frame over the cap");
    buf.resize(len);
    read_all(fd, buf.data(), len);
    uint32_t idx = 0, complete = 0;
    if (!assemble) {  // baseline A0: transport only, the frame is dropped unread
      uint8_t ack[8] = {0};
      write_all(fd, ack, 8);
      continue;
    }
    auto m = dd::decode_push_ref(buf.data(), len, dl);
    if (!m) throw std::runtime_error("raw A: undecodable frame: " + m.error().message);
    idx = m->header.chunk_index;
    auto r = assembler.add(*m);
    if (!r) throw std::runtime_error("raw A: chunk refused: " + r.error().message);
    if (r->has_value()) {
      assembler.recycle(std::move((*r)->payload));  // as the syncer's owner does
      complete = 1;
      counters->completed++;
    }
    uint8_t ack[8];
    for (int i = 0; i < 4; ++i) {
      ack[i] = static_cast<uint8_t>(idx >> (8 * i));
      ack[4 + i] = static_cast<uint8_t>(complete >> (8 * i));
    }
    write_all(fd, ack, 8);
  }
}

/// Set in raw B's length word: the receiver checks the stream's CRC-32C, chunk by chunk.
constexpr uint64_t raw_b_crc_flag = uint64_t{1} << 63;
std::atomic<uint32_t> crc_sink{0};

/// Baseline B: u64 length, then that many bytes read into one buffer; one byte back. With
/// raw_b_crc_flag in the length word, each `chunk_bytes` piece is read into its place in the
/// buffer and then CRC-32C'd: what a receiver must do at the least to accept a chunk (read it
/// into place, check its checksum), without the framing, decode, assembly and credits.
void serve_raw_b(int fd, size_t chunk_bytes, recv_counters* counters) {
  std::vector<uint8_t> buf;
  uint32_t crcs = 0;
  while (true) {
    bool eof = false;
    const uint64_t word = read_u64le(fd, &eof);
    const bool crc = (word & raw_b_crc_flag) != 0;
    const uint64_t len = word & ~raw_b_crc_flag;
    if (eof || len == 0) return;
    if (len > (uint64_t{1} << 32)) throw std::runtime_error("raw B: stream over 4 GiB");
    buf.resize(len);
    if (!crc || chunk_bytes == 0) {
      read_all(fd, buf.data(), len);
    } else {
      for (uint64_t at = 0; at < len; at += chunk_bytes) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(chunk_bytes, len - at));
        read_all(fd, buf.data() + at, n);
        crcs ^= dd::util::crc32c(buf.data() + at, n);
      }
      crc_sink.store(crcs, std::memory_order_relaxed);  // the CRCs are used
    }
    counters->completed++;
    const uint8_t ack = 1;
    write_all(fd, &ack, 1);
  }
}

int child_raw(bool framed, bool assemble, size_t chunk_bytes) {
  uint16_t port = 0;
  const int lfd = listen_loopback(&port);
  recv_counters counters;
  std::thread server([&] {
    const int fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) return;
    set_nodelay(fd);
    try {
      if (framed)
        serve_raw_a(fd, chunk_bytes, assemble, &counters);
      else
        serve_raw_b(fd, chunk_bytes, &counters);
    } catch (const std::exception& e) {
      counters.errors++;
      std::fprintf(stderr, "raw receiver: %s\n", e.what());
    }
    ::close(fd);
  });
  print_ready(port);
  child_command_loop(&counters.completed, &counters.errors);
  ::shutdown(lfd, SHUT_RDWR);
  ::close(lfd);
  server.detach();  // blocked in accept or read when the parent quits early; exit ends it
  std::fflush(stdout);
  std::_Exit(0);
}

int child_main(int argc, char** argv) {
  // --child mm-recv LEARNER CHUNK_BYTES HEARTBEAT_S TIMEOUT_S [TLS_DIR] | mm-recv-bound LEARNER
  // CHUNK_BYTES HEARTBEAT_S TIMEOUT_S (--broadcast-bound) | raw-a CHUNK_BYTES | raw-b
  const std::string role = argc > 2 ? argv[2] : "";
  int learner = 0;
  unsigned long long chunk = 0;
  double heartbeat = 0, timeout = 0;
  if (role == "mm-recv" && argc == 7 && dd::util::parse_number(argv[3], learner) &&
      dd::util::parse_number(argv[4], chunk) && dd::util::parse_number(argv[5], heartbeat) &&
      dd::util::parse_number(argv[6], timeout))
    return child_mm_recv(learner, chunk, heartbeat, timeout);
  if (role == "mm-recv" && argc == 8 && dd::util::parse_number(argv[3], learner) &&
      dd::util::parse_number(argv[4], chunk) && dd::util::parse_number(argv[5], heartbeat) &&
      dd::util::parse_number(argv[6], timeout))
    return child_mm_recv(learner, chunk, heartbeat, timeout, argv[7]);
  if (role == "mm-recv-bound" && argc == 7 && dd::util::parse_number(argv[3], learner) &&
      dd::util::parse_number(argv[4], chunk) && dd::util::parse_number(argv[5], heartbeat) &&
      dd::util::parse_number(argv[6], timeout))
    return child_mm_recv(learner, chunk, heartbeat, timeout, {}, true);
  if (role == "raw-a" && argc == 4 && dd::util::parse_number(argv[3], chunk))
    return child_raw(true, true, chunk);
  if (role == "raw-a0" && argc == 4 && dd::util::parse_number(argv[3], chunk))
    return child_raw(true, false, chunk);
  if (role == "raw-b" && argc == 3) return child_raw(false, false, 0);
  if (role == "raw-b" && argc == 4 && dd::util::parse_number(argv[3], chunk))
    return child_raw(false, false, chunk);
  std::fprintf(stderr, "%s: --child is internal (bad role or arguments '%s')\n", prog,
               role.c_str());
  return 2;
}

// ---- the middleman sender ----------------------------------------------------------------------

struct sender_state {
  dd::actors::chunk_flow flow;
  size_t done = 0;
  bool finished = false;
  double t0 = 0.0;
  caf::response_promise rp;
};

using chunk_list = std::vector<dd::actors::queued_chunk>;

/// Queues `msgs` (each a complete (atom, wire_bytes) message, shared by all peers) for every
/// peer under the runtime's credit-based flow control (dd::actors::flow_send / flow_credit, at
/// most `window` uncredited chunks per peer); answers the (step_atom) request with the seconds
/// from the first send to the last peer's finished_atom.
caf::behavior mm_sender(caf::stateful_actor<sender_state>* self, std::vector<caf::actor> peers,
                        std::shared_ptr<const chunk_list> msgs, size_t window,
                        std::shared_ptr<const dd::actors::channel_route> route) {
  self->state.flow = dd::actors::chunk_flow(window);
  self->state.flow.link.channel = std::move(route);
  self->set_down_handler([=](caf::down_msg& dm) { dd::actors::flow_down(self->state.flow, dm); });
  return {
      [=](atoms::step_atom) {
        auto& s = self->state;
        s.rp = self->make_response_promise();
        s.t0 = now();
        for (const auto& peer : peers)
          for (const auto& m : *msgs) {
            auto c = m;
            c.dest = peer;
            dd::actors::flow_send(self, s.flow, std::move(c));
          }
      },
      [=](atoms::credit_atom, uint64_t seq) {
        dd::actors::flow_credit(self, self->state.flow, seq);
      },
      [=](atoms::finished_atom, int32_t learner) {
        auto& s = self->state;
        const auto p = static_cast<size_t>(learner);
        if (p >= peers.size() || s.finished) return;
        if (++s.done == peers.size()) {
          s.finished = true;
          s.rp.deliver(now() - s.t0);
          self->quit();
        }
      },
      [=](atoms::reject_atom, int32_t learner, uint32_t idx) {
        auto& s = self->state;
        if (s.finished) return;
        s.finished = true;
        std::fprintf(stderr, "%s: receiver %d refused chunk %u\n", prog, learner, idx);
        s.rp.deliver(caf::make_error(caf::sec::runtime_error));
        self->quit();
      },
  };
}

double run_mm(caf::actor_system& sys, const std::vector<caf::actor>& peers,
              std::shared_ptr<const chunk_list> msgs, size_t window,
              std::shared_ptr<const dd::actors::channel_route> route) {
  caf::scoped_actor self{sys};
  auto snd = sys.spawn(mm_sender, peers, std::move(msgs), window, std::move(route));
  double seconds = -1;
  std::string err;
  self->request(snd, std::chrono::seconds(300), atoms::step_atom_v)
      .receive([&](double s) { seconds = s; }, [&](caf::error& e) { err = sys.render(e); });
  if (seconds < 0) throw std::runtime_error("middleman transfer failed: " + err);
  return seconds;
}

// ---- raw TCP senders ---------------------------------------------------------------------------

/// `expect_complete`: the receiver assembles and flags the chunk that completed the transfer.
double run_raw_a(int fd, const std::vector<wire_bytes>& frames, size_t window,
                 bool expect_complete) {
  size_t next = 0, acked = 0;
  bool complete = false;
  const double t0 = now();
  while (acked < frames.size()) {
    while (next < frames.size() && next - acked < window) {
      write_frame(fd, frames[next].data(), frames[next].size());
      ++next;
    }
    uint8_t ack[8];
    if (!read_all(fd, ack, 8)) throw std::runtime_error("raw A: receiver closed");
    ++acked;
    complete = complete || ack[4] != 0;
  }
  const double t = now() - t0;
  if (expect_complete && !complete)
    throw std::runtime_error("raw A: the receiver never completed the transfer");
  return t;
}

double run_raw_b(int fd, const uint8_t* data, size_t n, uint64_t flags = 0) {
  const double t0 = now();
  write_frame(fd, data, n, flags);
  uint8_t ack = 0;
  if (!read_all(fd, &ack, 1)) throw std::runtime_error("raw B: receiver closed");
  return now() - t0;
}

/// Baseline for the broadcast: the whole fragment as one stream to each of the receivers at
/// once (one sending thread per stream, as raw B), from the first byte to the last receiver's
/// answer. `flags`: raw_b_crc_flag to have each receiver check the CRC-32C of every chunk.
double run_raw_b_fanout(const std::vector<int>& fds, const uint8_t* data, size_t n,
                        uint64_t flags = 0) {
  const double t0 = now();
  std::vector<std::thread> senders;
  std::vector<std::string> errors(fds.size());
  for (size_t i = 0; i < fds.size(); ++i)
    senders.emplace_back([&, i] {
      try {
        run_raw_b(fds[i], data, n, flags);
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  for (auto& t : senders) t.join();
  const double t = now() - t0;
  for (const auto& e : errors)
    if (!e.empty()) throw std::runtime_error("raw broadcast: " + e);
  return t;
}

// ---- payloads ----------------------------------------------------------------------------------

/// Deterministic pseudo-gradient values in about [-1e-3, 1e-3).
std::vector<float> make_fragment(size_t numel) {
  std::vector<float> v(numel);
  uint64_t s = 0x9E3779B97F4A7C15ull;
  for (auto& x : v) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    x = (static_cast<float>(s >> 40) / static_cast<float>(1u << 24) - 0.5f) * 2e-3f;
  }
  return v;
}

std::vector<uint8_t> as_bytes(const std::vector<float>& f) {
  std::vector<uint8_t> b(f.size() * sizeof(float));
  std::memcpy(b.data(), f.data(), b.size());
  return b;
}

/// A whole push or broadcast carrying the fragment as fp32 (the messages' default encoding).
template <class Msg>
Msg with_fp32_payload(Msg m, const std::vector<float>& frag) {
  m.total_elements = frag.size();
  m.payload = as_bytes(frag);
  m.payload_bytes = m.payload.size();
  return m;
}

/// The fragment as encoded push_msg chunks of one transfer (learner 0, fragment 0, from version
/// 0).
std::vector<wire_bytes> encode_push(const std::vector<float>& frag, uint64_t transfer_id,
                                    size_t chunk_bytes) {
  dd::push_msg whole;
  whole.incarnation = 1;
  whole.steps = 24;
  whole.tokens = 24 * 2048;
  whole.transfer_id = transfer_id;
  auto chunks = dd::split_push(with_fp32_payload(std::move(whole), frag), chunk_bytes);
  if (!chunks) throw std::runtime_error("split_push: " + chunks.error().message);
  std::vector<wire_bytes> out;
  // A learner stamps its own incarnation (the codec checks it against the push's).
  for (const auto& c : *chunks) out.push_back(dd::encode(c, {"", c.incarnation}));
  return out;
}

/// The fragment as encoded broadcast_msg chunks of version `version` (fragment 0).
std::vector<wire_bytes> encode_broadcast(const std::vector<float>& frag, uint64_t version,
                                         size_t chunk_bytes) {
  dd::broadcast_msg whole;
  whole.version = version;
  auto chunks = dd::split_broadcast(with_fp32_payload(std::move(whole), frag), chunk_bytes);
  if (!chunks) throw std::runtime_error("split_broadcast: " + chunks.error().message);
  std::vector<wire_bytes> out;
  for (const auto& c : *chunks) out.push_back(dd::encode(c));
  return out;
}

template <class Atom>
std::shared_ptr<const chunk_list> as_messages(Atom atom, std::vector<wire_bytes> w) {
  auto out = std::make_shared<chunk_list>();
  for (auto& b : w) out->push_back(dd::actors::make_chunk(caf::actor{}, atom, std::move(b)));
  return out;
}

caf::actor connect_mm(caf::actor_system& sys, uint16_t port) {
  auto h = sys.middleman().remote_actor("127.0.0.1", port);
  if (!h)
    throw std::runtime_error(
        fmt::format("remote_actor 127.0.0.1:{}: {}", port, sys.render(h.error())));
  return *h;
}

double kb_to_mib(uint64_t kb) { return static_cast<double>(kb) / 1024.0; }

std::string load_text() {
  FILE* f = std::fopen("/proc/loadavg", "r");
  if (f == nullptr) return "?";
  char buf[64] = {0};
  double a = 0;
  const bool ok = std::fscanf(f, "%lf", &a) == 1;
  std::fclose(f);
  if (!ok) return "?";
  std::snprintf(buf, sizeof buf, "%.2f", a);
  return buf;
}

void write_json(const std::string& path, const std::string& line) {
  if (path.empty()) return;
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr || std::fprintf(f, "%s\n", line.c_str()) < 0 || std::fclose(f) != 0)
    throw std::runtime_error("cannot write --json " + path + ": " + std::strerror(errno));
}

// ---- mode 1: transfers -------------------------------------------------------------------------

int run_transfers(const options& o) {
  const size_t numel = o.size_mib * (size_t{1} << 20) / sizeof(float);
  const size_t frag_bytes = numel * sizeof(float);
  const size_t n_chunks = (frag_bytes + o.chunk_bytes - 1) / o.chunk_bytes;
  const size_t window = static_cast<size_t>(o.window);
  std::printf(
      "%s: fragment %zu MiB (%zu float32, fp32), %zu chunks of %zu bytes, window %zu, "
      "%d learners for the broadcast (one process each), %d warm-up + %d measured rounds, "
      "middleman heartbeat %.3g s / connection timeout %.3g s (node_config), loopback, "
      "load %s%s\n",
      prog, o.size_mib, numel, n_chunks, o.chunk_bytes, window, o.learners, o.warmup, o.repeats,
      o.heartbeat_s, o.connection_timeout_s, load_text().c_str(),
      o.broadcast_bound ? "; --broadcast-bound: the broadcast's learners check each chunk but "
                          "assemble nothing (a bound, not the runtime's path)"
                        : "");
  std::fflush(stdout);
  const auto frag = make_fragment(numel);
  const auto frag_raw = as_bytes(frag);

  // Receivers first, before this process has any threads.
  const std::string cb = std::to_string(o.chunk_bytes);
  const std::string hb = fmt::format("{}", o.heartbeat_s),
                    to = fmt::format("{}", o.connection_timeout_s);
  auto syncer = spawn_child("syncer", {"mm-recv", "0", cb, hb, to});
  std::vector<std::unique_ptr<child_proc>> learners;
  for (int i = 0; i < o.learners; ++i)
    learners.push_back(spawn_child(
        "learner " + std::to_string(i),
        {o.broadcast_bound ? "mm-recv-bound" : "mm-recv", std::to_string(i), cb, hb, to}));
  // The same receivers behind mutual TLS (a throwaway CA in a temporary directory).
  char tls_tmpl[] = "/tmp/dd-bench-transport-tls-XXXXXX";
  if (::mkdtemp(tls_tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
  const std::string tls_dir = tls_tmpl;
  dd::actors::make_certs(
      tls_dir, {{"syncer", {dd::actors::syncer_cert_name}}, {"learner-0", {"learner-0"}}});
  auto syncer_tls = spawn_child("syncer (TLS)", {"mm-recv", "0", cb, hb, to, tls_dir});
  std::vector<std::unique_ptr<child_proc>> learners_tls;
  for (int i = 0; i < o.learners; ++i)
    learners_tls.push_back(spawn_child("learner " + std::to_string(i) + " (TLS)",
                                       {"mm-recv", std::to_string(i), cb, hb, to, tls_dir}));
  auto raw_a = spawn_child("raw A receiver", {"raw-a", cb});
  auto raw_a0 = spawn_child("raw A0 receiver", {"raw-a0", cb});
  auto raw_b = spawn_child("raw B receiver", {"raw-b"});
  std::vector<std::unique_ptr<child_proc>> raw_fan;  // the broadcast's raw baseline
  for (int i = 0; i < o.learners; ++i)
    raw_fan.push_back(spawn_child("raw broadcast receiver " + std::to_string(i), {"raw-b", cb}));
  const auto syncer_ready = child_ready(*syncer);
  std::vector<ready_info> learner_ready;
  for (auto& l : learners) learner_ready.push_back(child_ready(*l));
  const auto raw_a_ready = child_ready(*raw_a);
  const auto raw_a0_ready = child_ready(*raw_a0);
  const auto raw_b_ready = child_ready(*raw_b);
  const auto syncer_tls_ready = child_ready(*syncer_tls);
  std::vector<ready_info> learner_tls_ready;
  for (auto& l : learners_tls) learner_tls_ready.push_back(child_ready(*l));
  std::vector<uint16_t> fan_ports;
  for (auto& c : raw_fan) fan_ports.push_back(child_ready(*c).port);

  dd::actors::node_transport t;
  t.heartbeat_s = o.heartbeat_s;
  t.connection_timeout_s = o.connection_timeout_s;
  dd::actors::node_config cfg{t};
  // `sys` sends as a learner node does: its chunks leave on a tensor channel to each receiver
  // (row "push, CAF only": the hub's sending is off for that transfer, so they go on BASP).
  // One actor system: a second one in this process would have the same CAF node id.
  caf::actor_system sys{cfg};
  dd::actors::tensor_channel_hub::options co;
  co.run_id = bench_run_id;
  auto hub = dd::actors::tensor_channel_hub::make(sys, co);  // after sys: destroyed before it
  auto route = std::make_shared<dd::actors::channel_route>();
  route->set(hub);
  auto with_channel = [&](uint16_t port) {
    auto h = connect_mm(sys, port);
    auto st = hub->connect("127.0.0.1", port, h.node());
    if (!st) throw std::runtime_error(st.error().message);
    return h;
  };
  const std::vector<caf::actor> push_peer = {with_channel(syncer_ready.port)};
  std::vector<caf::actor> bcast_peers;
  for (const auto& r : learner_ready) bcast_peers.push_back(with_channel(r.port));
  // Over TLS: a local TLS forwarder per receiver (as dd-node learner starts one per syncer
  // address), CAF and the tensor channel dialing it on loopback.
  auto tls_client = std::make_shared<dd::actors::tls_context>(
      dd::actors::tls_files{tls_dir + "/learner-0.pem", tls_dir + "/learner-0.key",
                            tls_dir + "/ca.pem"},
      dd::actors::tls_context::side::client);
  std::vector<std::unique_ptr<dd::actors::tls_tunnel>> tunnels;
  auto with_tls = [&](uint16_t port) {
    dd::actors::tls_tunnel::options to;
    to.what = dd::actors::tls_tunnel::mode::originate;
    to.target_port = port;
    to.ctx = tls_client;
    to.expect_peer_name = dd::actors::syncer_cert_name;
    to.on_refused = [](const std::string& what) { std::fprintf(stderr, "%s\n", what.c_str()); };
    tunnels.push_back(std::make_unique<dd::actors::tls_tunnel>(std::move(to)));
    return with_channel(tunnels.back()->port());
  };
  const std::vector<caf::actor> push_tls_peer = {with_tls(syncer_tls_ready.port)};
  std::vector<caf::actor> bcast_tls_peers;
  for (const auto& r : learner_tls_ready) bcast_tls_peers.push_back(with_tls(r.port));
  const int fd_a = connect_loopback(raw_a_ready.port);
  const int fd_a0 = connect_loopback(raw_a0_ready.port);
  const int fd_b = connect_loopback(raw_b_ready.port);
  std::vector<int> fd_fan;
  for (uint16_t p : fan_ports) fd_fan.push_back(connect_loopback(p));

  enum kind {
    push = 0,
    bcast,
    raw_a_k,
    raw_a0_k,
    raw_b_k,
    push_caf,
    raw_fan_k,
    push_tls,
    bcast_tls,
    raw_fan_crc_k,
    kinds
  };
  std::vector<double> mibps[kinds], ratio_a, ratio_b, ratio_a0, ratio_caf_a, ratio_bcast,
      ratio_push_tls, ratio_bcast_tls, ratio_bcast_crc;
  uint64_t transfer = 0;
  for (int r = 0; r < o.warmup + o.repeats; ++r) {
    double v[kinds] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    for (int j = 0; j < kinds; ++j) {
      const int k = (j + r) % kinds;  // rotate the order from round to round
      if (o.broadcast_only && k != bcast && k != raw_fan_k && k != raw_fan_crc_k) continue;
      ++transfer;
      double s = 0;
      if (k == push || k == push_caf) {
        hub->set_sending(k == push);
        s = run_mm(sys, push_peer,
                   as_messages(atoms::push_atom_v, encode_push(frag, transfer, o.chunk_bytes)),
                   window, route);
        hub->set_sending(true);
      } else if (k == push_tls) {
        s = run_mm(sys, push_tls_peer,
                   as_messages(atoms::push_atom_v, encode_push(frag, transfer, o.chunk_bytes)),
                   window, route);
      } else if (k == bcast_tls) {
        s = run_mm(
            sys, bcast_tls_peers,
            as_messages(atoms::broadcast_atom_v, encode_broadcast(frag, transfer, o.chunk_bytes)),
            window, route);
      } else if (k == bcast) {
        s = run_mm(
            sys, bcast_peers,
            as_messages(atoms::broadcast_atom_v, encode_broadcast(frag, transfer, o.chunk_bytes)),
            window, route);
      } else if (k == raw_a_k) {
        s = run_raw_a(fd_a, encode_push(frag, transfer, o.chunk_bytes), window, true);
      } else if (k == raw_a0_k) {
        s = run_raw_a(fd_a0, encode_push(frag, transfer, o.chunk_bytes), window, false);
      } else if (k == raw_fan_k) {
        s = run_raw_b_fanout(fd_fan, frag_raw.data(), frag_raw.size());
      } else if (k == raw_fan_crc_k) {
        s = run_raw_b_fanout(fd_fan, frag_raw.data(), frag_raw.size(), raw_b_crc_flag);
      } else {
        s = run_raw_b(fd_b, frag_raw.data(), frag_raw.size());
      }
      const double bytes =
          static_cast<double>(frag_bytes) *
          (k == bcast || k == raw_fan_k || k == bcast_tls || k == raw_fan_crc_k ? o.learners : 1);
      v[k] = bytes / s / mib;
    }
    const bool measured = r >= o.warmup;
    std::printf(
        "  round %d%s: push %.0f | broadcast %.0f (aggregate) | raw A %.0f | raw A0 %.0f "
        "| raw B %.0f | push, CAF only %.0f | raw broadcast %.0f (aggregate) | push TLS %.0f "
        "| broadcast TLS %.0f | raw broadcast + CRC %.0f MiB/s\n",
        measured ? r - o.warmup + 1 : r + 1, measured ? "" : " (warm-up)", v[push], v[bcast],
        v[raw_a_k], v[raw_a0_k], v[raw_b_k], v[push_caf], v[raw_fan_k], v[push_tls], v[bcast_tls],
        v[raw_fan_crc_k]);
    std::fflush(stdout);
    if (!measured) continue;
    for (int k = 0; k < kinds; ++k) mibps[k].push_back(v[k]);
    // A ratio of two kinds that ran (--broadcast-only runs two).
    auto ratio = [&](std::vector<double>& out, int num, int den) {
      if (v[num] > 0 && v[den] > 0) out.push_back(v[num] / v[den]);
    };
    ratio(ratio_a, push, raw_a_k);
    ratio(ratio_b, push, raw_b_k);
    ratio(ratio_a0, push, raw_a0_k);
    ratio(ratio_caf_a, push_caf, raw_a_k);
    ratio(ratio_bcast, bcast, raw_fan_k);
    ratio(ratio_push_tls, push_tls, push);
    ratio(ratio_bcast_tls, bcast_tls, bcast);
    ratio(ratio_bcast_crc, bcast, raw_fan_crc_k);
  }

  // Memory of every receiver after all transfers.
  const auto syncer_mem = child_mem(*syncer);
  if (!syncer_mem) throw std::runtime_error("the syncer did not report its memory");
  std::vector<mem_kb> learner_mem;
  for (auto& l : learners) {
    auto m = child_mem(*l);
    if (!m) throw std::runtime_error(l->name + " did not report its memory");
    learner_mem.push_back(*m);
  }
  const auto raw_a_mem = child_mem(*raw_a);
  if (!raw_a_mem) throw std::runtime_error("the raw A receiver did not report its memory");

  double med[kinds];
  for (int k = 0; k < kinds; ++k) med[k] = median(mibps[k]);
  const double ra = median(ratio_a), rb = median(ratio_b), ra0 = median(ratio_a0),
               rcaf = median(ratio_caf_a), rbc = median(ratio_bcast),
               rbcc = median(ratio_bcast_crc);
  const double rpt = median(ratio_push_tls), rbt = median(ratio_bcast_tls);
  const double idle_mib = kb_to_mib(syncer_ready.idle.rss);
  const double peak_mib = kb_to_mib(syncer_mem->hwm);
  const double inflight_mib = 4.0 * static_cast<double>(o.chunk_bytes) * window / mib;
  const double target_mib = idle_mib + inflight_mib;
  const double target_frag_mib = target_mib + static_cast<double>(frag_bytes) / mib;
  uint64_t learner_peak_kb = 0, learner_idle_kb = 0;
  for (size_t i = 0; i < learner_mem.size(); ++i) {
    learner_peak_kb = std::max(learner_peak_kb, learner_mem[i].hwm);
    learner_idle_kb = std::max(learner_idle_kb, learner_ready[i].idle.rss);
  }

  auto per_round = [](const std::vector<double>& v, const char* f) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + fmt::format(f, v[i]);
    return s;
  };
  std::printf("\n  %-52s %12s  %s\n", "kind", "MiB/s (med)", "per round");
  std::printf("  %-52s %12.0f  %s\n", "1. push, learner -> syncer (tensor channel)", med[push],
              per_round(mibps[push], "{:.0f}").c_str());
  std::printf("  %-52s %12.0f  %s\n", "   push, CAF only (BASP through the frame guard)",
              med[push_caf], per_round(mibps[push_caf], "{:.0f}").c_str());
  std::printf("  %-52s %12.0f  %s\n",
              fmt::format("2. broadcast -> {} learners (aggregate, channel)", o.learners).c_str(),
              med[bcast], per_round(mibps[bcast], "{:.0f}").c_str());
  std::printf("  %-52s %12.0f\n", "   ... per learner (fragment / broadcast time)",
              med[bcast] / o.learners);
  std::printf("  %-52s %12.0f  %s\n", "   push over mutual TLS (TLS 1.3 forwarders)", med[push_tls],
              per_round(mibps[push_tls], "{:.0f}").c_str());
  std::printf("  %-52s %12.0f  %s\n", "   broadcast over mutual TLS (aggregate)", med[bcast_tls],
              per_round(mibps[bcast_tls], "{:.0f}").c_str());
  std::printf("  %-52s %12.0f  %s\n", "3. raw TCP A: same chunks, same window, assembled",
              med[raw_a_k], per_round(mibps[raw_a_k], "{:.0f}").c_str());
  std::printf("  %-52s %12.0f  %s\n", "   raw TCP A0: as A, receiver drops frames unread",
              med[raw_a0_k], per_round(mibps[raw_a0_k], "{:.0f}").c_str());
  std::printf("  %-52s %12.0f  %s\n", "4. raw TCP B: one stream, write all / read all",
              med[raw_b_k], per_round(mibps[raw_b_k], "{:.0f}").c_str());
  std::printf(
      "  %-52s %12.0f  %s\n",
      fmt::format("   raw broadcast: B to {} receivers at once (aggregate)", o.learners).c_str(),
      med[raw_fan_k], per_round(mibps[raw_fan_k], "{:.0f}").c_str());
  std::printf("  %-52s %12.0f  %s\n", "   raw broadcast + CRC-32C of each chunk (aggregate)",
              med[raw_fan_crc_k], per_round(mibps[raw_fan_crc_k], "{:.0f}").c_str());
  std::printf("  ratio push / raw A: %.3f (target >= 0.8: %s)   per round %s\n", ra,
              ra >= 0.8 ? "met" : "NOT met", per_round(ratio_a, "{:.3f}").c_str());
  std::printf(
      "  ratio push / raw A0: %.3f (no target; transport without decode + assembly)   "
      "per round %s\n",
      ra0, per_round(ratio_a0, "{:.3f}").c_str());
  std::printf("  ratio push / raw B: %.3f (target >= 0.8: %s)   per round %s\n", rb,
              rb >= 0.8 ? "met" : "NOT met", per_round(ratio_b, "{:.3f}").c_str());
  std::printf("  ratio push CAF only / raw A: %.3f (the path before the channel)   per round %s\n",
              rcaf, per_round(ratio_caf_a, "{:.3f}").c_str());
  // --broadcast-bound measures no runtime path: no verdict against the target.
  auto verdict = [&o](double r) -> const char* {
    if (o.broadcast_bound) return "--broadcast-bound: a bound, no verdict";
    return r >= 0.8 ? "met" : "NOT met";
  };
  std::printf("  ratio broadcast / raw broadcast: %.3f (target >= 0.8: %s)   per round %s\n", rbc,
              verdict(rbc), per_round(ratio_bcast, "{:.3f}").c_str());
  std::printf(
      "  ratio broadcast / raw broadcast + CRC-32C: %.3f (the receivers' least necessary work: "
      "read each chunk into place, check its checksum; target >= 0.8: %s)   per round %s\n",
      rbcc, verdict(rbcc), per_round(ratio_bcast_crc, "{:.3f}").c_str());
  std::printf("  ratio push TLS / push: %.3f (aim >= 0.8: %s)   per round %s\n", rpt,
              rpt >= 0.8 ? "met" : "NOT met", per_round(ratio_push_tls, "{:.3f}").c_str());
  std::printf("  ratio broadcast TLS / broadcast: %.3f (aim >= 0.8: %s)   per round %s\n", rbt,
              verdict(rbt), per_round(ratio_bcast_tls, "{:.3f}").c_str());
  std::printf(
      "  5. syncer memory: idle VmRSS %.1f MiB, peak VmHWM %.1f MiB (+%.1f MiB) over %d "
      "pushes\n",
      idle_mib, peak_mib, peak_mib - idle_mib, o.warmup + o.repeats);
  std::printf("     target idle + 4 x chunk x window = %.1f + %.1f = %.1f MiB: %s\n", idle_mib,
              inflight_mib, target_mib, peak_mib <= target_mib ? "holds" : "does NOT hold");
  std::printf(
      "     with the assembled fragment, idle + fragment + 4 x chunk x window = %.1f MiB: "
      "%s\n",
      target_frag_mib, peak_mib <= target_frag_mib ? "holds" : "does NOT hold");
  std::printf(
      "     (broadcast learners: idle VmRSS up to %.1f MiB, peak VmHWM up to %.1f MiB; raw "
      "A receiver: idle %.1f MiB, peak %.1f MiB)\n",
      kb_to_mib(learner_idle_kb), kb_to_mib(learner_peak_kb), kb_to_mib(raw_a_ready.idle.rss),
      kb_to_mib(raw_a_mem->hwm));

  const std::string json = fmt::format(
      "{{\"bench\":\"dd-bench-transport\",\"mode\":\"transfers\",\"fragment_bytes\":{},"
      "\"chunk_bytes\":{},\"chunks\":{},\"window\":{},\"learners\":{},\"learner_processes\":{},"
      "\"repeats\":{},\"warmup\":{},\"heartbeat_s\":{},\"connection_timeout_s\":{},"
      "\"push_mibps\":{:.1f},\"broadcast_aggregate_mibps\":{:.1f},\"raw_a_mibps\":{:.1f},"
      "\"raw_a0_mibps\":{:.1f},\"raw_b_mibps\":{:.1f},\"ratio_push_raw_a\":{:.4f},"
      "\"ratio_push_raw_a0\":{:.4f},\"ratio_push_raw_b\":{:.4f},\"push_caf_only_mibps\":{:.1f},"
      "\"ratio_push_caf_only_raw_a\":{:.4f},\"raw_broadcast_aggregate_mibps\":{:.1f},"
      "\"ratio_broadcast_raw_broadcast\":{:.4f},\"push_tls_mibps\":{:.1f},"
      "\"broadcast_tls_aggregate_mibps\":{:.1f},\"ratio_push_tls_push\":{:.4f},"
      "\"ratio_broadcast_tls_broadcast\":{:.4f},\"raw_broadcast_crc_aggregate_mibps\":{:.1f},"
      "\"ratio_broadcast_raw_broadcast_crc\":{:.4f},"
      "\"syncer_idle_rss_kb\":{},\"syncer_peak_hwm_kb\":{},\"target_kb\":{:.0f},"
      "\"target_holds\":{},\"target_with_fragment_kb\":{:.0f},\"target_with_fragment_holds\":{},"
      "\"learner_peak_hwm_kb\":{},\"raw_a_peak_hwm_kb\":{},\"broadcast_bound\":{}}}",
      frag_bytes, o.chunk_bytes, n_chunks, window, o.learners, o.learners, o.repeats, o.warmup,
      o.heartbeat_s, o.connection_timeout_s, med[push], med[bcast], med[raw_a_k], med[raw_a0_k],
      med[raw_b_k], ra, ra0, rb, med[push_caf], rcaf, med[raw_fan_k], rbc, med[push_tls],
      med[bcast_tls], rpt, rbt, med[raw_fan_crc_k], rbcc, syncer_ready.idle.rss, syncer_mem->hwm,
      target_mib * 1024, peak_mib <= target_mib, target_frag_mib * 1024,
      peak_mib <= target_frag_mib, learner_peak_kb, raw_a_mem->hwm, o.broadcast_bound);
  std::printf("%s\n", json.c_str());
  write_json(o.json_path, json);

  // Orderly end: close the raw streams (length 0), then let every receiver quit.
  const uint64_t zero = 0;
  write_all(fd_a, &zero, 8);
  write_all(fd_a0, &zero, 8);
  ::close(fd_a0);
  write_all(fd_b, &zero, 8);
  ::close(fd_a);
  ::close(fd_b);
  for (int f : fd_fan) {
    write_all(f, &zero, 8);
    ::close(f);
  }
  child_quit(*syncer);
  for (auto& l : learners) child_quit(*l);
  child_quit(*syncer_tls);
  for (auto& l : learners_tls) child_quit(*l);
  std::error_code ec;
  std::filesystem::remove_all(tls_dir, ec);
  child_quit(*raw_a);
  child_quit(*raw_a0);
  child_quit(*raw_b);
  for (auto& c : raw_fan) child_quit(*c);
  return 0;
}

// ---- mode 2: oversized BASP header -------------------------------------------------------------

/// One BASP header as CAF 0.17.6's binary_serializer writes it (caf/io/basp/header.hpp, inspect()):
/// operation u8, two padding bytes, flags u8, payload_len u32, operation_data u64, source_actor
/// u64, dest_actor u64; integers in network byte order; 32 bytes (basp::header_size).
std::array<uint8_t, 32> basp_header_bytes(uint8_t op, uint8_t flags, uint32_t payload_len,
                                          uint64_t op_data, uint64_t src, uint64_t dst) {
  std::array<uint8_t, 32> b{};
  b[0] = op;
  b[3] = flags;
  for (int i = 0; i < 4; ++i) b[4 + i] = static_cast<uint8_t>(payload_len >> (8 * (3 - i)));
  auto put64 = [&](size_t at, uint64_t v) {
    for (int i = 0; i < 8; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * (7 - i)));
  };
  put64(8, op_data);
  put64(16, src);
  put64(24, dst);
  return b;
}

static_assert(caf::io::basp::header_size == 32, "CAF's BASP header is not 32 bytes here");

/// Serializes a header with CAF's own serializer and compares it with basp_header_bytes.
bool check_header_layout(caf::actor_system& sys) {
  caf::io::basp::header h{caf::io::basp::message_type::client_handshake,
                          0x02,
                          0x01020304u,
                          0x1112131415161718ull,
                          0x2122232425262728ull,
                          0x3132333435363738ull};
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  if (auto err = sink(h)) return false;
  const auto mine = basp_header_bytes(0x01, 0x02, 0x01020304u, 0x1112131415161718ull,
                                      0x2122232425262728ull, 0x3132333435363738ull);
  return buf.size() == mine.size() && std::memcmp(buf.data(), mine.data(), mine.size()) == 0;
}

bool ping(caf::actor_system& sys, const caf::actor& h, double* ms) {
  caf::scoped_actor self{sys};
  bool ok = false;
  const double t0 = now();
  self->request(h, std::chrono::seconds(5), atoms::status_atom_v)
      .receive([&](int32_t) { ok = true; }, [&](caf::error&) { ok = false; });
  *ms = (now() - t0) * 1000;
  return ok;
}

/// Reads whatever the peer sent within `quiet_s` of silence (its server handshake).
size_t drain(int fd, double quiet_s) {
  size_t total = 0;
  char tmp[4096];
  while (true) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(quiet_s * 1000)) <= 0) return total;
    const ssize_t n = ::recv(fd, tmp, sizeof tmp, MSG_DONTWAIT);
    if (n <= 0) return total;
    total += static_cast<size_t>(n);
  }
}

/// True when the peer closed (or reset) the connection; reads and discards pending bytes.
bool peer_closed(int fd) {
  char tmp[4096];
  while (true) {
    const ssize_t n = ::recv(fd, tmp, sizeof tmp, MSG_DONTWAIT);
    if (n == 0) return true;
    if (n < 0) return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
  }
}

struct oversized_result {
  uint64_t announced = 0;
  mem_kb idle;
  bool ping_before = false;
  size_t handshake_bytes = 0;
  mem_kb after;             // ~2 s after the header
  uint64_t max_rss_kb = 0;  // sampled every 100 ms in those 2 s
  bool ping_after = false;
  double ping_after_ms = 0;
  mem_kb late;  // after the connection timeout
  bool closed_late = false;
  bool ping_late = false;   // over the connection made before the header
  bool ping_fresh = false;  // over a new connection made after the late check
  bool running_late = false;
  double late_at_s = 0;
};

int run_oversized(const options& o) {
  const int conns = o.oversized_connections;
  std::printf(
      "%s --oversized-header: receiver = a child process publishing an actor with "
      "node_config (heartbeat %.3g s, connection timeout %.3g s) on 127.0.0.1; %d raw "
      "connection%s per size, each sending one BASP client_handshake header (32 bytes, "
      "source/dest actor 0) announcing payload_len bytes and no payload; load %s\n",
      prog, o.heartbeat_s, o.connection_timeout_s, conns, conns == 1 ? "" : "s",
      load_text().c_str());
  const uint64_t biggest = *std::max_element(o.announce.begin(), o.announce.end());
  const uint64_t avail = mem_available_kb() * 1024;
  if (avail > 0 && static_cast<double>(biggest) * conns > 0.7 * static_cast<double>(avail))
    refuse(
        fmt::format("--oversized-connections {} x {} bytes exceeds 70% of MemAvailable ({} "
                    "MiB): refused so the receiver cannot take this machine down",
                    conns, biggest, avail >> 20));
  std::fflush(stdout);
  const std::string hb = fmt::format("{}", o.heartbeat_s),
                    to = fmt::format("{}", o.connection_timeout_s);
  // One receiver per size, all started before this process has threads; each is used once.
  std::vector<std::unique_ptr<child_proc>> rx;
  for (size_t i = 0; i < o.announce.size(); ++i)
    rx.push_back(spawn_child("receiver " + std::to_string(i), {"mm-recv", "0", "4194304", hb, to}));
  std::vector<ready_info> ready;
  for (auto& c : rx) ready.push_back(child_ready(*c));

  dd::actors::node_transport t;
  t.heartbeat_s = o.heartbeat_s;
  t.connection_timeout_s = o.connection_timeout_s;
  dd::actors::node_config cfg{t};
  caf::actor_system sys{cfg};
  const bool layout_ok = check_header_layout(sys);
  std::printf("  header layout check against caf::binary_serializer: %s\n",
              layout_ok ? "bytes identical" : "MISMATCH");
  if (!layout_ok) throw std::runtime_error("BASP header layout does not match CAF's serializer");
  const double timeout_wait = (o.heartbeat_s > 0 && o.connection_timeout_s > 0)
                                  ? o.connection_timeout_s + 2 * o.heartbeat_s + 1.0
                                  : 5.0;
  std::vector<oversized_result> results;
  for (size_t i = 0; i < o.announce.size(); ++i) {
    auto& c = *rx[i];
    oversized_result r;
    r.announced = o.announce[i];
    r.idle = ready[i].idle;
    auto h = connect_mm(sys, ready[i].port);
    double ms = 0;
    r.ping_before = ping(sys, h, &ms);
    if (auto m = child_mem(c)) r.idle = *m;  // after a normal peer connected: the fair baseline
    std::vector<int> fds;
    const auto hdr = basp_header_bytes(0x01, 0, static_cast<uint32_t>(r.announced), 0, 0, 0);
    for (int k = 0; k < conns; ++k) {
      const int fd = connect_loopback(ready[i].port);
      r.handshake_bytes = drain(fd, 0.2);
      write_all(fd, hdr.data(), hdr.size());
      fds.push_back(fd);
    }
    const double t_hdr = now();
    while (now() - t_hdr < 2.0) {
      if (auto m = child_mem(c)) r.max_rss_kb = std::max(r.max_rss_kb, m->rss);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (auto m = child_mem(c)) r.after = *m;
    r.ping_after = child_running(c) && ping(sys, h, &r.ping_after_ms);
    while (now() - t_hdr < timeout_wait) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    r.late_at_s = now() - t_hdr;
    r.closed_late = true;
    for (int fd : fds) r.closed_late = r.closed_late && peer_closed(fd);
    if (auto m = child_mem(c)) r.late = *m;
    r.ping_late = child_running(c) && ping(sys, h, &ms);
    r.running_late = child_running(c);
    if (r.running_late) {
      auto fresh = sys.middleman().remote_actor("127.0.0.1", ready[i].port);
      r.ping_fresh = fresh && ping(sys, *fresh, &ms);
    }
    for (int fd : fds) ::close(fd);
    std::printf(
        "  announced %llu bytes (%.2f GiB): idle VmRSS %.1f MiB; 2 s after the header "
        "VmRSS %.1f MiB (max sampled %.1f), VmHWM %.1f MiB, answers a request: %s "
        "(%.1f ms); after %.1f s VmRSS %.1f MiB, VmHWM %.1f MiB, raw connection closed "
        "by the receiver: %s, process running: %s, answers over the old connection: %s, over a new "
        "one: %s\n",
        static_cast<unsigned long long>(r.announced),
        static_cast<double>(r.announced) / (mib * 1024), kb_to_mib(r.idle.rss),
        kb_to_mib(r.after.rss), kb_to_mib(r.max_rss_kb), kb_to_mib(r.after.hwm),
        r.ping_after ? "yes" : "NO", r.ping_after_ms, r.late_at_s, kb_to_mib(r.late.rss),
        kb_to_mib(r.late.hwm), r.closed_late ? "yes" : "no", r.running_late ? "yes" : "NO",
        r.ping_late ? "yes" : "NO", r.ping_fresh ? "yes" : "NO");
    std::fflush(stdout);
    results.push_back(r);
    child_quit(c);
  }

  std::printf("\n  %-10s %9s %10s %10s %8s %10s %10s %7s %8s %8s %8s\n", "announced", "idle RSS",
              "RSS +2 s", "HWM +2 s", "answers", "RSS late", "HWM late", "closed", "running",
              "old conn", "new conn");
  for (const auto& r : results)
    std::printf("  %-10s %7.1f M %8.1f M %8.1f M %8s %8.1f M %8.1f M %7s %8s %8s %8s\n",
                fmt::format("{:.2f} GiB", static_cast<double>(r.announced) / (mib * 1024)).c_str(),
                kb_to_mib(r.idle.rss), kb_to_mib(r.after.rss), kb_to_mib(r.after.hwm),
                r.ping_after ? "yes" : "NO", kb_to_mib(r.late.rss), kb_to_mib(r.late.hwm),
                r.closed_late ? "yes" : "no", r.running_late ? "yes" : "NO",
                r.ping_late ? "yes" : "NO", r.ping_fresh ? "yes" : "NO");
  std::string items;
  for (const auto& r : results)
    items += fmt::format(
        "{}{{\"announced_bytes\":{},\"idle_rss_kb\":{},\"rss_after_kb\":{},\"max_rss_kb\":{},"
        "\"hwm_after_kb\":{},\"answers_after\":{},\"late_at_s\":{:.2f},\"rss_late_kb\":{},"
        "\"hwm_late_kb\":{},\"closed_late\":{},\"running_late\":{},\"answers_late_old_connection\":"
        "{},"
        "\"answers_late_new_connection\":{}}}",
        items.empty() ? "" : ",", r.announced, r.idle.rss, r.after.rss, r.max_rss_kb, r.after.hwm,
        r.ping_after, r.late_at_s, r.late.rss, r.late.hwm, r.closed_late, r.running_late,
        r.ping_late, r.ping_fresh);
  const std::string json = fmt::format(
      "{{\"bench\":\"dd-bench-transport\",\"mode\":\"oversized-header\",\"operation\":"
      "\"client_handshake\",\"connections\":{},\"heartbeat_s\":{},\"connection_timeout_s\":{},"
      "\"results\":[{}]}}",
      conns, o.heartbeat_s, o.connection_timeout_s, items);
  std::printf("%s\n", json.c_str());
  write_json(o.json_path, json);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--child") return child_main(argc, argv);
  const options o = parse_options(argc, argv);
  ::signal(SIGPIPE, SIG_IGN);
  try {
    const int rc = o.oversized ? run_oversized(o) : run_transfers(o);
    kill_children();
    return rc;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", prog, e.what());
    kill_children();
    return 1;
  }
}
