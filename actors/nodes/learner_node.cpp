// actors/nodes/learner_node.cpp — see learner_node.hpp.
//
//   connecting --reachable + handshake--> described (run id, experiment)
//     --data loaded, node_join accepted--> running (learner supervisor + learners)
//     --monitor down--> syncer lost (learners keep stepping) --reconnected, same run--> running
//     --every learner done / interrupted--> finished
#include "actors/nodes/learner_node.hpp"
#include "actors/nodes/memory_check.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "actors/link/atoms.hpp"
#include "actors/link/join_auth.hpp"
#include "actors/link/tensor_channel.hpp"
#include "actors/nodes/job_runner.hpp"
#include "actors/nodes/role_contexts.hpp"
#include "actors/roles/supervisor.hpp"
#include "actors/services/chaos_endpoint.hpp"
#include "actors/services/compute_gate.hpp"
#include "actors/services/host_admission.hpp"
#include "actors/services/node_metrics.hpp"
#include "actors/services/run_log.hpp"
#include "messages/control.hpp"
#include "runtime/config/loader.hpp"
#include "runtime/rng.hpp"
#include "util/build_info.hpp"

namespace dd::actors {

namespace fs = std::filesystem;

double join_backoff_s(int attempt, double base_s, double cap_s, double u01) {
  const double raw = base_s * std::pow(2.0, std::min(attempt, 30));
  return std::min(cap_s, std::min(cap_s, raw) * (1.0 + 0.4 * (u01 - 0.5)));
}

bool tcp_reachable(const std::string& host, uint16_t port, double timeout_s, std::string* why) {
  auto fail = [&](std::string w) {
    if (why != nullptr) *why = std::move(w);
    return false;
  };
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res); rc != 0)
    return fail(fmt::format("cannot resolve '{}': {}", host, gai_strerror(rc)));
  std::string last = "no address";
  bool ok = false;
  for (addrinfo* a = res; a != nullptr && !ok; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc == 0) {
      ok = true;
    } else if (errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      rc = ::poll(&p, 1, static_cast<int>(timeout_s * 1000));
      if (rc == 1) {
        int err = 0;
        socklen_t len = sizeof err;
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err == 0)
          ok = true;
        else
          last = std::strerror(err);
      } else {
        last = fmt::format("no answer within {:.1f} s", timeout_s);
      }
    } else {
      last = std::strerror(errno);
    }
    ::close(fd);
  }
  ::freeaddrinfo(res);
  if (!ok) return fail(fmt::format("{}:{}: {}", host, port, last));
  return true;
}

int shutdown_connections_to(const std::vector<std::pair<std::string, uint16_t>>& peers) {
  std::vector<sockaddr_storage> want;
  for (const auto& [host, port] : peers) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0) continue;
    for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
      sockaddr_storage s{};
      std::memcpy(&s, a->ai_addr, std::min<size_t>(a->ai_addrlen, sizeof s));
      want.push_back(s);
    }
    ::freeaddrinfo(res);
  }
  auto same = [](const sockaddr_storage& a, const sockaddr_storage& b) {
    if (a.ss_family != b.ss_family) return false;
    if (a.ss_family == AF_INET) {
      const auto& x = reinterpret_cast<const sockaddr_in&>(a);
      const auto& y = reinterpret_cast<const sockaddr_in&>(b);
      return x.sin_port == y.sin_port && x.sin_addr.s_addr == y.sin_addr.s_addr;
    }
    if (a.ss_family == AF_INET6) {
      const auto& x = reinterpret_cast<const sockaddr_in6&>(a);
      const auto& y = reinterpret_cast<const sockaddr_in6&>(b);
      return x.sin6_port == y.sin6_port &&
             std::memcmp(&x.sin6_addr, &y.sin6_addr, sizeof x.sin6_addr) == 0;
    }
    return false;
  };
  int n = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc/self/fd", ec)) {
    int fd = -1;
    try {
      fd = std::stoi(entry.path().filename().string());
    } catch (const std::exception&) {
      continue;
    }
    int type = 0;
    socklen_t tlen = sizeof type;
    if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tlen) != 0 || type != SOCK_STREAM) continue;
    sockaddr_storage peer{};
    socklen_t plen = sizeof peer;
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &plen) != 0) continue;
    for (const auto& w : want)
      if (same(peer, w)) {
        if (::shutdown(fd, SHUT_RDWR) == 0) ++n;
        break;
      }
  }
  return n;
}

namespace {

std::string host_name() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

/// CAF's remote lookup on its own thread, bounded by `timeout_s` (CAF's own connect has no
/// deadline). A lookup that times out is abandoned on its thread.
std::optional<monitor_hdl> lookup(caf::actor_system& sys, const std::string& host, uint16_t port,
                                  double timeout_s, std::string* why) {
  if (!tcp_reachable(host, port, timeout_s, why)) return std::nullopt;
  struct slot {
    std::mutex m;
    std::optional<caf::expected<monitor_hdl>> result;
  };
  auto s = std::make_shared<slot>();
  auto done = std::make_shared<std::promise<void>>();
  auto fut = done->get_future();
  std::thread([&sys, host, port, s, done] {
    auto r = sys.middleman().remote_actor<monitor_hdl>(host, port);
    {
      std::lock_guard<std::mutex> g(s->m);
      s->result.emplace(std::move(r));
    }
    done->set_value();
  }).detach();
  if (fut.wait_for(std::chrono::duration<double>(timeout_s)) != std::future_status::ready) {
    if (why != nullptr)
      *why = fmt::format("{}:{}: no CAF handshake within {:.1f} s", host, port, timeout_s);
    return std::nullopt;
  }
  std::lock_guard<std::mutex> g(s->m);
  if (!*s->result) {
    if (why != nullptr) *why = fmt::format("{}:{}: {}", host, port, sys.render(s->result->error()));
    return std::nullopt;
  }
  return **s->result;
}

/// One node_join round trip; nullopt (with `why`) when the monitor did not answer in time
/// (`*timed_out` set, when given), answered with an error or with bytes that do not decode.
std::optional<node_join_reply> handshake_once(caf::scoped_actor& self, const monitor_hdl& monitor,
                                              const node_join& req, double timeout_s,
                                              std::string* why, bool* timed_out) {
  std::optional<node_join_reply> out;
  // The reply is decoded under the run its own envelope names: a syncer of another run answers
  // with a refusal (otherRun) stamped with its own run id, and that refusal must be read, not
  // discarded as undecodable (a node of another run once retried it for ever, in a busy loop
  // on its first handshake, and an old node facing a fresh syncer backed off for ever instead of
  // exiting 3). A node's first handshake names no run (req.run_id empty) and takes the run the
  // reply names; a later one answered by another run is refused here whatever the reply says.
  self->request(monitor, std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)),
                atoms::node_join_atom_v, encode(req, {req.run_id, 0}))
      .receive(
          [&](const std::vector<uint8_t>& bytes) {
            const auto header = peek_envelope(bytes);
            envelope_expect expect{header ? header->run_id : req.run_id, 0};
            auto rep = decode_node_join_reply(bytes, {}, expect);
            if (!rep) {
              *why = "undecodable node_join_reply: " + rep.error().message;
              return;
            }
            if (!req.run_id.empty() && expect.run_id != req.run_id) {
              if (rep->accepted || rep->refusal == node_refusal::none) {
                rep->accepted = false;
                rep->refusal = node_refusal::other_run;
                rep->reason = fmt::format("the syncer runs run '{}', this node belongs to run '{}'",
                                          expect.run_id, req.run_id);
              }
            }
            out = std::move(*rep);
          },
          [&](caf::error& err) {
            *why = "handshake failed: " + self->system().render(err);
            if (timed_out != nullptr) *timed_out = err == caf::sec::request_timeout;
          });
  return out;
}

/// One node handshake: node_join_once, and when the syncer answers with a join token challenge
/// (node_refusal::auth_challenge), the same request again with the proof over it
/// (actors/link/join_auth.hpp). A node without a token sends it back unproven and gets an
/// `unauthorized` reply naming what it lacks.
std::optional<node_join_reply> handshake(caf::scoped_actor& self, const monitor_hdl& monitor,
                                         const node_join& req, const std::string& token,
                                         double timeout_s, std::string* why,
                                         bool* timed_out = nullptr) {
  auto rep = handshake_once(self, monitor, req, timeout_s, why, timed_out);
  if (!rep || rep->refusal != node_refusal::auth_challenge) return rep;
  node_join proven = req;
  proven.challenge = rep->challenge;
  if (!token.empty())
    proven.proof = join_proof(
        token, node_join_purpose,
        node_join_context(rep->run_id, req.node_name, caf::to_string(self->system().node()),
                          req.learner_ids, req.learner_count, rep->challenge));
  // Without a token the request goes back unproven: the syncer logs the refusal too.
  auto answer = handshake_once(self, monitor, proven, timeout_s, why, timed_out);
  if (answer && token.empty() && answer->refusal == node_refusal::unauthorized)
    answer->reason =
        "the syncer asks for the run's join token and this node has none: give "
        "--join-token-file FILE or set DD_JOIN_TOKEN";
  return answer;
}

/// Inner steps of every learner of this node, {"id": step} (syncer_lost / syncer_back events).
nlohmann::json learner_steps(const run_log& log) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [id, l] : log.snapshot().learners) out[std::to_string(id)] = l.step;
  return out;
}

}  // namespace

bool lookup_error_leaves_stale_connection(const std::string& error) {
  return error.find("disconnect_during_handshake") != std::string::npos ||
         error.find("unexpected_actor_messaging_interface") != std::string::npos;
}

bool refusal_is_retried(node_refusal r) {
  return r == node_refusal::no_free_learner || r == node_refusal::bad_request;
}

namespace {

int refusal_status(node_refusal r) {
  switch (r) {
    case node_refusal::other_run: return node_exit_other_run;
    case node_refusal::protocol_version: return node_exit_protocol;
    case node_refusal::data_mismatch: return node_exit_data_mismatch;
    case node_refusal::run_finished: return node_exit_ok;
    case node_refusal::bad_request: return node_exit_usage;
    case node_refusal::unauthorized: return node_exit_unauthorized;
    case node_refusal::auth_challenge:
    case node_refusal::none:
    case node_refusal::no_free_learner: return node_exit_failure;
  }
  return node_exit_failure;
}

struct connector {
  const learner_node_options& o;
  std::string name;  ///< the node's name, in its messages
  caf::actor_system& sys;
  rng jitter;
  size_t next = 0;
  int attempt = 0;
  double next_try_s = 0.0;  ///< steady seconds
  std::string last_error;
  double deadline_at = 0.0;                    ///< steady seconds of --join-deadline (0 = none)
  std::pair<std::string, uint16_t> last_addr;  ///< the address of the latest attempt

  static double now_s() {
    using namespace std::chrono;
    return duration<double>(steady_clock::now().time_since_epoch()).count();
  }
  /// One attempt when its time has come; the monitor or nullopt.
  std::optional<monitor_hdl> try_once() {
    if (now_s() < next_try_s) return std::nullopt;
    const auto& [host, port] = o.join[next % o.join.size()];
    last_addr = {host, port};
    ++next;
    // An attempt never runs past --join-deadline.
    double timeout = o.connect_timeout_s;
    if (deadline_at > 0) timeout = std::max(0.05, std::min(timeout, deadline_at - now_s()));
    auto m = lookup(sys, host, port, timeout, &last_error);
    if (m) return m;  // `attempt` restarts once the handshake is accepted
    failed(last_error);
    return std::nullopt;
  }
  /// Counts a failed attempt (the lookup, or the handshake after it): the next one waits a
  /// backoff step.
  void failed(const std::string& why) {
    last_error = why;
    const double wait =
        join_backoff_s(attempt++, o.backoff_base_s, o.backoff_cap_s, jitter.uniform());
    next_try_s = now_s() + wait;
    std::fprintf(stderr, "dd-node learner %s: syncer not reachable (%s); next attempt in %.1f s\n",
                 name.c_str(), last_error.c_str(), wait);
    std::fflush(stderr);
  }
};

}  // namespace

int run_learner_node(const learner_node_options& o) {
  if (o.join.empty()) {
    std::fprintf(stderr, "dd-node learner: --join HOST:PORT is required\n");
    return node_exit_usage;
  }
  const std::string host = host_name();
  const std::string name =
      o.node_name.empty() ? fmt::format("{}-{}", host, ::getpid()) : o.node_name;
  const uint64_t seed =
      o.seed != 0 ? o.seed : derive_seed(0x6a6f696eULL, std::hash<std::string>{}(name));
  std::printf("dd-node learner %s: joining %s:%u (backoff jitter seed %llu)\n", name.c_str(),
              o.join.front().first.c_str(), o.join.front().second,
              static_cast<unsigned long long>(seed));
  std::fflush(stdout);
  node_config cfg(o.transport);
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  connector conn{o, name, sys, rng(seed), 0, 0, 0.0, {}, 0.0, {}};
  const double t0 = connector::now_s();
  if (o.join_deadline_s > 0) conn.deadline_at = t0 + o.join_deadline_s;
  auto interrupted = [&] { return o.interrupt != nullptr && o.interrupt->load() != 0; };
  auto past_deadline = [&] {
    return o.join_deadline_s > 0 && connector::now_s() - t0 > o.join_deadline_s;
  };

  // 1. Reach the monitor and learn the run.
  std::string run_id = o.run_id;
  monitor_hdl monitor;
  node_join_reply described;
  while (true) {
    if (interrupted()) return node_exit_interrupted;
    if (past_deadline()) {
      std::fprintf(stderr,
                   "dd-node learner: no syncer reached within --join-deadline %.0f s (last: %s)\n",
                   o.join_deadline_s, conn.last_error.c_str());
      return node_exit_deadline;
    }
    const int attempts_before = conn.attempt;
    auto m = conn.try_once();
    if (!m) {
      if (conn.attempt != attempts_before &&
          lookup_error_leaves_stale_connection(conn.last_error)) {
        // Said only when there was one to shut down (a syncer that died mid-handshake leaves
        // none, and "0 connections shut down" read like a failure).
        if (const int n = shutdown_connections_to(o.join); n > 0) {
          std::fprintf(stderr, "dd-node learner %s: %d connection%s to the syncer shut down (%s)\n",
                       name.c_str(), n, n == 1 ? "" : "s", conn.last_error.c_str());
          std::fflush(stderr);
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    node_join ask;
    ask.run_id = run_id;
    ask.node_name = name;
    ask.host = host;
    ask.learner_count = 0;  // describe only
    std::string why;
    auto rep = handshake(self, *m, ask, o.join_token, 10.0, &why);
    if (!rep) {
      // A failed handshake is a failed attempt: the next one waits its backoff step (it was
      // retried at once, thousands of times a second against a syncer whose answers it could
      // not read).
      conn.failed(why);
      continue;
    }
    if (!rep->accepted) {
      std::fprintf(stderr, "dd-node learner: refused by the syncer (%s): %s\n",
                   std::string(to_string(rep->refusal)).c_str(), rep->reason.c_str());
      if (refusal_is_retried(rep->refusal)) {
        conn.failed(rep->reason);
        continue;
      }
      return refusal_status(rep->refusal);
    }
    monitor = *m;
    described = std::move(*rep);
    conn.deadline_at = 0.0;
    conn.attempt = 0;
    break;
  }
  run_id = described.run_id;

  // 2. The experiment and this node's copy of the data.
  config::load_options lo;
  lo.check_files = false;
  auto loaded = config::load_json(nlohmann::json::parse(described.experiment_json), lo);
  if (!loaded.ok() || loaded.experiments.size() != 1) {
    std::fprintf(stderr, "dd-node learner: the syncer's experiment does not load here: %s\n",
                 loaded.error_text().c_str());
    return node_exit_failure;
  }
  config::experiment exp = loaded.experiments.front();
  if (!o.data_file.empty()) exp.data.file = o.data_file;
  {
    // Before any learner allocates: a node that cannot hold its learners' models and
    // activations would see each fail and be given up (exit 2: started again it would fail so).
    const int here = o.learner_ids.empty() ? o.learners : static_cast<int>(o.learner_ids.size());
    if (auto why = check_before_start(exp, start_check_for::learner_node, here, o.force_memory);
        !why.empty()) {
      std::fprintf(stderr, "dd-node learner %s: %s\n", name.c_str(), why.c_str());
      return node_exit_usage;
    }
  }
  const std::string data_name =
      exp.data.kind == config::data_kind::idx ? exp.data.images + "' + '" + exp.data.labels
      : exp.data.kind == config::data_kind::tokens && !exp.data.files.empty()
          ? exp.data.files.front() + (exp.data.files.size() > 1 ? "' ..." : "")
          : exp.data.file;
  run_data rd;
  node_join req;
  try {
    rd = load_run_data(exp);
    req.data_hash = rd.hash;
    req.data_bytes = rd.bytes;
  } catch (const std::exception& e) {
    // Exit 2, as for a bad flag: started again (dd-node launch), it would fail the same way.
    std::fprintf(stderr, "dd-node learner: %s (%s)\n", e.what(),
                 o.data_file.empty() ? "the path the syncer's experiment names; give --data FILE"
                                     : "from --data");
    return node_exit_usage;
  }
  if (req.data_bytes != described.data_bytes || req.data_hash != described.data_hash) {
    std::fprintf(
        stderr,
        "dd-node learner: data file '%s' differs from the syncer's (%llu bytes, hash %s here; "
        "%llu bytes, hash %s there)\n",
        data_name.c_str(), static_cast<unsigned long long>(req.data_bytes), req.data_hash.c_str(),
        static_cast<unsigned long long>(described.data_bytes), described.data_hash.c_str());
    // Tell the syncer too, so both sides log the refusal.
  }

  // 3. Ask for learner ids.
  req.run_id = run_id;
  req.node_name = name;
  req.host = host;
  req.learner_ids = o.learner_ids;
  req.learner_count = static_cast<uint32_t>(std::max(1, o.learners));
  std::vector<int32_t> ids;
  while (true) {
    if (interrupted()) return node_exit_interrupted;
    std::string why;
    auto rep = handshake(self, monitor, req, o.join_token, 10.0, &why);
    if (rep && rep->accepted) {
      ids = rep->learner_ids;
      break;
    }
    if (rep && !refusal_is_retried(rep->refusal)) {
      std::fprintf(stderr, "dd-node learner: refused by the syncer (%s): %s\n",
                   std::string(to_string(rep->refusal)).c_str(), rep->reason.c_str());
      if (rep->refusal == node_refusal::run_finished)
        std::printf("dd-node learner %s: nothing to do, the run is over\n", name.c_str());
      return refusal_status(rep->refusal);
    }
    if (past_deadline()) {
      std::fprintf(stderr,
                   "dd-node learner: no learner id given within --join-deadline %.0f s (last: "
                   "%s)\n",
                   o.join_deadline_s, rep ? rep->reason.c_str() : why.c_str());
      return node_exit_deadline;
    }
    std::fprintf(stderr, "dd-node learner: %s; asking again in 2 s\n",
                 rep ? rep->reason.c_str() : why.c_str());
    std::this_thread::sleep_for(std::chrono::seconds(2));
  }

  // 4. Node services and the learners.
  const std::string run_dir =
      !o.run_dir.empty() ? o.run_dir : (fs::path("runs") / exp.name / "nodes" / name).string();
  fs::create_directories(run_dir);
  auto log = std::make_unique<run_log>((fs::path(run_dir) / "events.jsonl").string());
  // A failed events.jsonl line is kept and written again with backoff (the node goes on,
  // degraded) for up to checkpoint.max_failing_seconds; then the node stops its learners.
  log->set_retry_writes(true);
  // Every event line is also forwarded to the syncer (about once a second, at most 1 MiB per
  // message; beyond 8 MiB buffered while the syncer is away, lines are dropped and counted).
  struct forward_buffer {
    std::mutex m;
    std::string lines;
    uint64_t dropped = 0;
  };
  auto fwd = std::make_shared<forward_buffer>();
  log->set_tap([fwd](const std::string& line) {
    std::lock_guard<std::mutex> g(fwd->m);
    if (fwd->lines.size() + line.size() > (size_t{8} << 20))
      ++fwd->dropped;
    else
      fwd->lines += line;
  });
  auto flush_events = [&, fwd](bool last) {
    std::string batch;
    {
      std::lock_guard<std::mutex> g(fwd->m);
      if (fwd->lines.empty()) return;
      size_t cut = std::min(fwd->lines.size(), size_t{1} << 20);
      const auto nl = fwd->lines.rfind('\n', cut - 1);
      if (nl == std::string::npos) return;
      cut = nl + 1;
      batch = fwd->lines.substr(0, cut);
      fwd->lines.erase(0, cut);
    }
    if (!last) {
      caf::anon_send(monitor, atoms::events_atom_v,
                     encode(node_events{name, std::move(batch)}, {run_id, 0}));
      return;
    }
    // The last batch is a request, so the process does not exit before it is written.
    self->request(monitor, std::chrono::seconds(2), atoms::events_atom_v,
                  encode(node_events{name, std::move(batch)}, {run_id, 0}))
        .receive([](bool) {}, [](caf::error&) {});
  };
  log->set_console([](const std::string& line) {
    std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
  });
  const fragment_plan plan = plan_of(exp);
  const uint64_t steps =
      described.steps_per_learner > 0 ? described.steps_per_learner : steps_per_learner_of(exp);
  std::vector<fault_spec> faults;
  for (const auto& f : fault_specs_of(exp, steps, plan.num_fragments()))
    if (f.what != fault_kind::kill_owner &&
        !(f.live_window && config::is_broadcast_fault(f.live.what)) &&
        !(o.message_faults_via_endpoint && is_message_fault(f)))
      faults.push_back(f);  // owners' and broadcasts' faults act in the syncer node
  auto hooks = std::make_unique<fault_hooks>(faults, log.get());
  std::unique_ptr<chaos_endpoint> endpoint;
  if (!o.chaos_endpoint.first.empty()) {
    chaos_endpoint_options eo;
    eo.host = o.chaos_endpoint.first;
    eo.port = o.chaos_endpoint.second;
    eo.node_name = name;
    eo.role = "learner";
    eo.learners = ids;
    eo.fragments = plan.num_fragments();
    eo.steps_per_learner = steps;
    eo.join_token = o.join_token;
    // A port taken since the launcher picked it must not stop the training: the node runs on
    // without an endpoint (dd-chaos msg then reports it unreachable).
    try {
      endpoint = std::make_unique<chaos_endpoint>(eo, hooks.get());
      std::printf("dd-node learner %s: chaos endpoint on %s:%u\n", name.c_str(), eo.host.c_str(),
                  endpoint->port());
      std::fflush(stdout);
      log->emit("chaos_endpoint", {{"node", name}, {"host", eo.host}, {"port", endpoint->port()}});
    } catch (const std::exception& e) {
      log->warn(fmt::format("chaos endpoint off: {}", e.what()));
      log->emit("failure", {{"what", "chaos_endpoint"}, {"error", e.what()}});
    }
  }
  node_http http;  // declared after `log`: detaches from it first
  if (!o.http.first.empty()) {
    node_metrics_options mo;
    mo.kind = "learner";
    mo.node = name;
    mo.run_id = run_id;
    mo.learners = exp.learners.count;
    mo.fragments = plan.num_fragments();
    mo.version = util::build_version();
    mo.commit = util::build_commit();
    mo.tls_not_after_unix = o.tls_not_after_unix;
    http = start_node_http(o.http.first, o.http.second, std::move(mo), log.get(),
                           "dd-node learner " + name);
  }
  const int here = static_cast<int>(ids.size());
  const int threads = o.threads > 0 ? o.threads : learner_threads_of(exp, here);
  std::unique_ptr<step_admission> gate;
  if (!o.step_admission.empty()) {
    if (o.step_admission.rfind("sysv:", 0) != 0) {
      std::fprintf(stderr, "dd-node learner: --step-admission '%s' is not sysv:ID\n",
                   o.step_admission.c_str());
      return node_exit_usage;
    }
    gate = std::make_unique<host_admission>(
        host_admission::attach(std::atoi(o.step_admission.c_str() + 5)));
  } else {
    const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
    const unsigned slots = std::max(1u, hw / static_cast<unsigned>(std::max(1, threads)));
    if (here > 1 && slots < static_cast<unsigned>(here))
      gate = std::make_unique<compute_gate>(slots);
  }
  auto current = std::make_shared<std::pair<std::mutex, monitor_hdl>>();
  current->second = monitor;
  // Chunks to the syncer node leave on the tensor channel once the node has opened one (below).
  auto route = std::make_shared<channel_route>();
  learner_services services;
  services.channel = route;
  services.data = rd.text.get();
  services.images = rd.images.get();
  services.log = log.get();
  services.faults = hooks.get();
  services.gate = gate.get();
  auto sctx = std::make_shared<supervisor_context>();
  sctx->kind = child_kind::learner;
  sctx->restart = restart_of(exp);
  sctx->log = log.get();
  sctx->faults = hooks.get();
  // The node's main loop stands for the job (a blocking actor: typed by cast, it handles both
  // reports below).
  sctx->job = caf::actor_cast<supervisor_report_hdl>(self);
  for (auto id : ids) {
    auto base = make_learner_context(exp, id, steps, plan, threads, monitor, services);
    auto c = std::make_shared<learner_context>(*base);
    c->run_id = run_id;
    c->compute_nice = o.compute_nice;
    c->leave =
        leave_protocol::acked;  // a leave the lost syncer did not take waits for the next one
    c->current_monitor = [current] {
      std::lock_guard<std::mutex> g(current->first);
      return current->second;
    };
    std::shared_ptr<const learner_context> cc = c;
    sctx->children.push_back({id, [cc](caf::actor_system& s) {
                                return caf::actor_cast<caf::actor>(
                                    s.spawn<caf::detached>(learner, cc));
                              }});
  }
  log->emit("node_start", {{"node", name},
                           {"run_id", run_id},
                           {"learners", ids},
                           {"threads", threads},
                           {"data_file", exp.data.file}});
  std::string id_list;
  for (auto id : ids) id_list += (id_list.empty() ? "" : ",") + std::to_string(id);
  std::printf(
      "dd-node learner %s: run %s, experiment %s, learner id%s %s, %d thread%s each; events in "
      "%s\n",
      name.c_str(), run_id.c_str(), exp.name.c_str(), ids.size() == 1 ? "" : "s", id_list.c_str(),
      threads, threads == 1 ? "" : "s", run_dir.c_str());
  std::fflush(stdout);
  // The tensor channel to the syncer (actors/link/tensor_channel.hpp): chunks leave on it while it
  // is open, on CAF otherwise. Opened after every join; one that breaks drops the CAF connection
  // too (its chunks in flight are lost), so the node rejoins and opens a fresh one.
  struct channel_loss {
    std::mutex m;
    std::string why;
    bool lost = false;
  };
  auto channel_lost = std::make_shared<channel_loss>();
  tensor_channel_hub::options co;
  co.run_id = run_id;
  co.join_token = o.join_token;
  co.handshake_timeout_s = std::max(1.0, o.connect_timeout_s);
  co.report = [lg = log.get()](const std::string& event, const std::string& details) {
    lg->emit(event, {{"details", details}});
  };
  co.on_lost = [channel_lost](const std::string& why) {
    std::lock_guard<std::mutex> g(channel_lost->m);
    channel_lost->why = why;
    channel_lost->lost = true;
  };
  auto channels = tensor_channel_hub::make(sys, co);  // after sys: destroyed before it
  route->set(channels);
  auto open_channel = [&] {
    {
      std::lock_guard<std::mutex> g(channel_lost->m);
      channel_lost->lost = false;
    }
    const auto st = channels->connect(conn.last_addr.first, conn.last_addr.second, monitor.node());
    if (!st) {
      std::fprintf(stderr, "dd-node learner %s: %s; chunks go on CAF\n", name.c_str(),
                   st.error().message.c_str());
      std::fflush(stderr);
      log->emit("channel_unavailable", {{"details", st.error().message}});
    }
  };
  open_channel();
  auto sup = self->spawn(supervisor, std::shared_ptr<const supervisor_context>(sctx));
  self->monitor(monitor);

  // 5. Run until every learner is done; reconnect when the syncer is lost.
  // A connection whose proxies are dead but which CAF keeps is shut down, so the next lookup
  // connects afresh (shutdown_connections_to).
  auto drop_connections = [&](const std::string& why) {
    const int n = shutdown_connections_to(o.join);
    log->emit("syncer_connection_dropped", {{"sockets", n}, {"why", why}});
    if (n > 0) {
      std::fprintf(stderr, "dd-node learner %s: %d connection%s to the syncer shut down (%s)\n",
                   name.c_str(), n, n == 1 ? "" : "s", why.c_str());
      std::fflush(stderr);
    }
  };
  bool lost = false;
  // The backoff step (conn.attempt) whose failed handshake was already retried at once.
  int handshake_retried_at = -1;
  bool stop_sent = false;
  int status = node_exit_ok;
  bool done = false;
  double last_progress = connector::now_s();
  double last_flush = last_progress;
  double last_outage_sample = 0.0;
  while (!done) {
    self->receive([&](atoms::children_done_atom, child_kind) { done = true; },
                  [&](atoms::child_given_up_atom, child_kind, int32_t, const std::string&) {},
                  [&](caf::down_msg& dm) {
                    if (dm.source != monitor.address()) return;
                    lost = true;
                    channels->close_all("the syncer was lost");
                    last_outage_sample = connector::now_s();  // syncer_lost is the first sample
                    if (dm.reason != caf::exit_reason::remote_link_unreachable)
                      drop_connections(sys.render(dm.reason));
                    if (o.join_deadline_s > 0)
                      conn.deadline_at = connector::now_s() + o.join_deadline_s;
                    log->emit("syncer_lost",
                              {{"reason", sys.render(dm.reason)}, {"steps", learner_steps(*log)}});
                    std::fprintf(
                        stderr,
                        "dd-node learner %s: lost the syncer (%s); learners keep stepping, "
                        "reconnecting\n",
                        name.c_str(), sys.render(dm.reason).c_str());
                    std::fflush(stderr);
                  },
                  caf::after(std::chrono::milliseconds(250)) >> [&] {});
    if (done) break;
    if (http.metrics) http.metrics->sample();
    {
      std::string why;
      {
        std::lock_guard<std::mutex> g(channel_lost->m);
        if (channel_lost->lost) why = channel_lost->why;
        channel_lost->lost = false;
      }
      if (!why.empty() && !lost) drop_connections(why);
    }
    if (interrupted() && !stop_sent) {
      stop_sent = true;
      status = 128 + o.interrupt->load();
      std::fprintf(stderr,
                   "dd-node learner %s: signal received, learners stop at their next step\n",
                   name.c_str());
      self->send(sup, atoms::stop_atom_v);
    }
    if (lost && !stop_sent && conn.deadline_at > 0 && connector::now_s() > conn.deadline_at) {
      std::fprintf(stderr,
                   "dd-node learner %s: the syncer stayed unreachable for --join-deadline %.0f s "
                   "(last: %s); stopping the learners\n",
                   name.c_str(), o.join_deadline_s, conn.last_error.c_str());
      status = node_exit_deadline;
      stop_sent = true;
      self->send(sup, atoms::stop_atom_v);
    }
    if (lost && !stop_sent) {
      const int attempts_before = conn.attempt;
      const double tried_at = connector::now_s();
      auto m = conn.try_once();
      if (!m && conn.attempt != attempts_before) {
        log->emit("rejoin_attempt", {{"stage", "connect"},
                                     {"error", conn.last_error},
                                     {"took_s", connector::now_s() - tried_at}});
        if (lookup_error_leaves_stale_connection(conn.last_error))
          drop_connections(conn.last_error);
      }
      if (m) {
        node_join again = req;
        again.learner_ids = ids;
        std::string why;
        // CAF drops a message to a dead proxy without an answer (one handed back for the lost
        // connection would only time out), and a live syncer answers in milliseconds: a dead
        // handle fails at once, an unanswered handshake after the connect timeout (not a 10 s
        // wait); either is a failed attempt (backoff), and a dead handle makes the node shut its
        // sockets to the syncer down. An unanswered one was sent to a syncer just reached, so
        // it is first retried at once on a fresh connection (sockets shut down): its reply may
        // have been lost with a connection that dropped again under load, or sent by the
        // syncer's middleman down a stale route to this node. Once per backoff step: a second
        // one in a row is a failed attempt.
        std::optional<node_join_reply> rep;
        bool unanswered = false;
        auto* target = caf::actor_cast<caf::abstract_actor*>(*m);
        const bool dead_handle =
            target != nullptr && target->getf(caf::abstract_actor::is_terminated_flag);
        if (dead_handle)
          why = "the syncer's handle is already down";
        else
          rep = handshake(self, *m, again, o.join_token, std::max(1.0, o.connect_timeout_s), &why,
                          &unanswered);
        if (!rep) {
          const bool at_once = unanswered && handshake_retried_at != conn.attempt;
          log->emit("rejoin_attempt", {{"stage", "handshake"},
                                       {"error", why},
                                       {"took_s", connector::now_s() - tried_at},
                                       {"retry_at_once", at_once}});
          if (dead_handle || at_once) drop_connections(why);
          if (at_once) {
            handshake_retried_at = conn.attempt;
            conn.last_error = why;
          } else {
            conn.failed(why);
          }
        }
        if (rep && rep->accepted) {
          monitor = *m;
          {
            std::lock_guard<std::mutex> g(current->first);
            current->second = monitor;
          }
          self->monitor(monitor);
          lost = false;
          open_channel();
          conn.deadline_at = 0.0;
          conn.attempt = 0;
          handshake_retried_at = -1;
          log->emit("syncer_back", {{"run_id", rep->run_id}, {"steps", learner_steps(*log)}});
          std::printf("dd-node learner %s: syncer back; learners rejoin\n", name.c_str());
          std::fflush(stdout);
          self->send(sup, atoms::syncer_atom_v, monitor);
        } else if (!rep) {
          std::fprintf(stderr, "dd-node learner %s: rejoin handshake failed (%s)%s\n", name.c_str(),
                       why.c_str(),
                       handshake_retried_at == conn.attempt ? "; retrying at once" : "");
          std::fflush(stderr);
        } else {
          std::fprintf(stderr, "dd-node learner %s: refused by the syncer (%s): %s\n", name.c_str(),
                       std::string(to_string(rep->refusal)).c_str(), rep->reason.c_str());
          if (refusal_is_retried(rep->refusal)) {
            conn.failed(rep->reason);  // the next attempt after a backoff step
          } else {
            status = refusal_status(rep->refusal);
            stop_sent = true;
            self->send(sup, atoms::stop_atom_v);
          }
        }
      }
    }
    log->retry_pending();
    if (!stop_sent && log->failing_for_s() > exp.checkpoint.max_failing_seconds) {
      std::fprintf(stderr,
                   "dd-node learner %s: writes kept failing for %.0f s "
                   "(checkpoint.max_failing_seconds = %g): %s; stopping the learners\n",
                   name.c_str(), log->failing_for_s(), exp.checkpoint.max_failing_seconds,
                   log->failing_files().c_str());
      std::fflush(stderr);
      status = node_exit_failure;
      stop_sent = true;
      self->send(sup, atoms::stop_atom_v);
    }
    const double t = connector::now_s();
    if (!lost && t - last_flush >= 1.0) {
      flush_events(false);
      last_flush = t;
    }
    // While the syncer is away it records no heartbeat rows: the node samples its learners'
    // steps once a second (forwarded with the other buffered events after the rejoin), so
    // `dd-chaos report` sees who stepped during the outage.
    if (lost && !stop_sent && t - last_outage_sample >= 1.0) {
      log->emit("outage_steps", {{"steps", learner_steps(*log)}});
      last_outage_sample = t;
    }
    if (o.progress_every_s > 0 && t - last_progress >= o.progress_every_s) {
      const auto snap = log->snapshot();
      bool any_finished = false;
      for (const auto& [id, l] : snap.learners) any_finished = any_finished || l.finished;
      // A learner shown "left" while the syncer is away has not left yet: its leave waits.
      std::printf("%s%s\n", node_progress_line(snap, t - t0).c_str(),
                  !lost          ? ""
                  : any_finished ? " | syncer lost (finished learners leave once it is back)"
                                 : " | syncer lost");
      std::fflush(stdout);
      last_progress = t;
    }
  }
  // Closed before node_done and the last forward, so the syncer's copy of this node's events
  // has the channel's end and its frame counts too.
  channels->close_all("the node is stopping");
  if (http.metrics) http.metrics->set_ending();
  const auto snap = log->snapshot();
  if (!snap.learners_given_up.empty() && status == node_exit_ok) status = node_exit_failure;
  log->emit("node_done", {{"node", name}, {"status", status}, {"events_dropped", fwd->dropped}});
  if (!lost) flush_events(true);
  std::printf("dd-node learner %s: done (exit %d)\n", name.c_str(), status);
  std::fflush(stdout);
  self->send_exit(sup, caf::exit_reason::user_shutdown);
  return status;
}

supervisor_hdl spawn_local_learners(caf::local_actor* self, const supervisor_report_hdl& job,
                                    job_setup& setup, const monitor_hdl& monitor) {
  const auto& e = setup.exp;
  const bool sim = setup.options.simulated_time;
  const int M = e.learners.count;
  auto lctx = std::make_shared<supervisor_context>();
  lctx->kind = child_kind::learner;
  lctx->restart = restart_of(e);
  lctx->log = setup.log.get();
  lctx->faults = setup.faults.get();
  lctx->job = job;
  learner_services services;
  services.data = setup.data.get();
  services.images = setup.images.get();
  services.log = setup.log.get();
  services.faults = setup.faults.get();
  services.gate = setup.gate.get();
  for (int i = 0; i < M; ++i) {
    auto lc = std::make_shared<learner_context>(
        *make_learner_context(e, i, setup.steps_per_learner, setup.plan, setup.learner_threads,
                              monitor, services, sim, setup.options.sim_step_s));
    lc->run_id = setup.run_id;
    std::shared_ptr<const learner_context> cc = lc;
    lctx->children.push_back({i, [cc, sim](caf::actor_system& sys) {
                                return caf::actor_cast<caf::actor>(
                                    sim ? sys.spawn(learner, cc)
                                        : sys.spawn<caf::detached>(learner, cc));
                              }});
  }
  return self->spawn(supervisor, std::shared_ptr<const supervisor_context>(lctx));
}

}  // namespace dd::actors
