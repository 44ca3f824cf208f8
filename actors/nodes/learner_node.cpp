// actors/nodes/learner_node.cpp — see learner_node.hpp. The shell of a learner node: it sets
// the node's services up and carries out what learner_node_core decides (its states:
// learner_node_core.hpp), dialing the syncer through node_connector.
#include "actors/nodes/learner_node.hpp"
#include "actors/nodes/memory_check.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>
#include <variant>

#include <fmt/format.h>
#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "actors/link/atoms.hpp"
#include "actors/link/tensor_channel.hpp"
#include "actors/nodes/event_forwarder.hpp"
#include "actors/nodes/job_runner.hpp"
#include "actors/nodes/learner_node_core.hpp"
#include "actors/nodes/node_connector.hpp"
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

namespace {

std::string host_name() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

/// What a handshake's reply (or its absence, with `why`) came to, for learner_node_core.
handshake_outcome outcome_of(const std::optional<node_join_reply>& rep, const std::string& why,
                             bool unanswered = false, bool dead_handle = false) {
  if (!rep) return handshake_outcome::failed(why, unanswered, dead_handle);
  if (!rep->accepted) return handshake_outcome::refused(rep->refusal, rep->reason);
  return handshake_outcome::accepted(rep->run_id);
}

/// Waits until the actor behind `h` is down (its proxy killed), at most `seconds`.
void wait_until_down(const monitor_hdl& h, double seconds) {
  auto* target = caf::actor_cast<caf::abstract_actor*>(h);
  const auto end = node_connector::now_s() + seconds;
  while (target != nullptr && !target->getf(caf::abstract_actor::is_terminated_flag) &&
         node_connector::now_s() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

void say(const node_do::say& x) {
  std::FILE* to = x.err ? stderr : stdout;
  std::fprintf(to, "%s\n", x.line.c_str());
  std::fflush(to);
}

/// The event lines forwarded to the syncer (about once a second, at most 1 MiB per message;
/// beyond 8 MiB buffered while the syncer is away, lines are dropped and counted). A batch
/// leaves the buffer only when the syncer has answered it (event_forwarder); the answer comes
/// on a helper actor's thread, hence the mutex.
struct forward_buffer {
  std::mutex m;
  event_forwarder lines;
  /// This process's stream of lines: the syncer drops the part of a resent batch it wrote.
  std::string stream;
};

/// A tensor channel that broke, as its hub reports it (on the hub's thread).
struct channel_loss {
  std::mutex m;
  std::string why;
  bool lost = false;
};

/// One learner node: the shell around learner_node_core. Each phase carries out what the core
/// decides from its outcomes: reach the syncer and learn the run, load the experiment and the
/// data, ask for learner ids, set up the node's services and spawn the learners, then run until
/// they are done (rejoining a lost syncer), and shut down. The members are declared in the
/// order they are made: destroyed in reverse (the HTTP listener before the log it reads, the
/// channel hub before the actor system).
class learner_node_shell {
 public:
  learner_node_shell(const learner_node_options& o, std::string host, std::string name,
                     uint64_t seed)
      : o_(o),
        host_(std::move(host)),
        name_(std::move(name)),
        cfg_(o.transport),
        sys_(cfg_),
        self_(sys_),
        conn_(o.join, name_, sys_, o.backoff_base_s, o.backoff_cap_s, o.connect_timeout_s, seed),
        t0_(node_connector::now_s()),
        core_({name_, o.join_deadline_s, o.progress_every_s, t0_}) {
    if (o.join_deadline_s > 0) conn_.deadline_at = t0_ + o.join_deadline_s;
    conn_.explain = o.explain_join_failure;
  }

  int run() {
    if (auto s = reach_syncer()) return *s;
    if (auto s = load_run()) return *s;
    if (auto s = ask_learner_ids()) return *s;
    if (auto s = start_services()) return *s;
    spawn_learners();
    run_until_done();
    return shut_down();
  }

 private:
  bool interrupted() const { return o_.interrupt != nullptr && o_.interrupt->load() != 0; }
  std::optional<int> starting(const node_actions& actions);
  void carry_out(node_actions actions);
  void carry_out_one(node_action& a);
  template <class T>
  void connection_bookkeeping(const T& x);
  std::optional<node_join_reply> ask_syncer(const monitor_hdl& m, const node_join& ask,
                                            double timeout_s, std::string* why, bool* unanswered,
                                            bool* dead_handle);

  std::optional<int> reach_syncer();
  std::optional<int> load_run();
  std::optional<int> ask_learner_ids();
  std::optional<int> start_services();
  void start_event_forwarding();
  void start_chaos_endpoint();
  void start_http();
  std::optional<int> make_step_gate();
  void spawn_learners();
  void make_channel_hub();
  void open_channel();
  void flush_events(bool last);
  uint64_t dropped_events() {
    std::lock_guard<std::mutex> g(fwd_->m);
    return fwd_->lines.dropped();
  }
  void show_progress(const node_do::progress& x);
  void adopt_monitor();
  void run_until_done();
  void poll_once();
  void try_rejoin();
  int shut_down();

  const learner_node_options& o_;
  const std::string host_, name_;
  node_config cfg_;
  caf::actor_system sys_;
  caf::scoped_actor self_;
  node_connector conn_;
  const double t0_;
  learner_node_core core_;
  std::string run_id_ = o_.run_id;
  monitor_hdl monitor_;
  node_join_reply described_;
  config::experiment exp_;
  run_data rd_;
  node_join req_;  ///< the ask for learner ids, and again at every rejoin
  std::vector<int32_t> ids_;
  std::string run_dir_;
  std::unique_ptr<run_log> log_;
  std::shared_ptr<forward_buffer> fwd_ = std::make_shared<forward_buffer>();
  fragment_plan plan_;
  uint64_t steps_ = 0;
  std::unique_ptr<fault_hooks> hooks_;
  std::unique_ptr<chaos_endpoint> endpoint_;
  node_http http_;  // after `log_`: detaches from it first
  int threads_ = 1;
  std::unique_ptr<step_admission> gate_;
  /// The monitor the learners' services name (learner_services::current_monitor), replaced at every
  /// rejoin.
  std::shared_ptr<std::pair<std::mutex, monitor_hdl>> current_ =
      std::make_shared<std::pair<std::mutex, monitor_hdl>>();
  /// Chunks to the syncer node leave on the tensor channel once the node has opened one.
  std::shared_ptr<channel_route> route_ = std::make_shared<channel_route>();
  std::shared_ptr<supervisor_config> sctx_;
  std::shared_ptr<channel_loss> channel_lost_ = std::make_shared<channel_loss>();
  std::shared_ptr<tensor_channel_hub> channels_;  // after sys_: destroyed before it
  supervisor_hdl sup_;
  /// The supervisor reported a learner given up (child_given_up_atom).
  bool learners_given_up_ = false;
  std::optional<monitor_hdl> reached_;  ///< the monitor of the rejoin being carried out
};

/// The actions that only keep the connection's books, the same in the startup and the main loop:
/// a failed attempt, an error to retry at once, the join deadline.
template <class T>
constexpr bool is_connection_bookkeeping_v =
    std::is_same_v<T, node_do::backoff> || std::is_same_v<T, node_do::retry_at_once> ||
    std::is_same_v<T, node_do::set_deadline>;

template <class T>
void learner_node_shell::connection_bookkeeping(const T& x) {
  static_assert(is_connection_bookkeeping_v<T>);
  if constexpr (std::is_same_v<T, node_do::backoff>) {
    conn_.failed(x.why);
  } else if constexpr (std::is_same_v<T, node_do::retry_at_once>) {
    conn_.last_error = x.why;
  } else {
    conn_.deadline_at = x.deadline_at;
    if (x.reset_attempts) conn_.attempt = 0;
  }
}

/// One request of the handshake to the syncer's monitor. CAF drops a message to a dead proxy
/// without an answer: a handle already down (the syncer's connection ended, or a lookup answered
/// from CAF's cache before it heard of that) is not asked, and the next attempt looks the syncer
/// up again.
std::optional<node_join_reply> learner_node_shell::ask_syncer(const monitor_hdl& m,
                                                              const node_join& ask,
                                                              double timeout_s, std::string* why,
                                                              bool* unanswered, bool* dead_handle) {
  auto* target = caf::actor_cast<caf::abstract_actor*>(m);
  *dead_handle = target != nullptr && target->getf(caf::abstract_actor::is_terminated_flag);
  if (*dead_handle) {
    *why = "the syncer's handle is already down";
    return std::nullopt;
  }
  return node_handshake(self_, m, ask, o_.join_token, timeout_s, why, unanswered);
}

/// Carries out the actions of the startup (before any learner runs); the exit status when one
/// of them ends the node.
std::optional<int> learner_node_shell::starting(const node_actions& actions) {
  std::optional<int> exit_status;
  for (const auto& a : actions) {
    if (exit_status) break;
    std::visit(
        [&](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (is_connection_bookkeeping_v<T>) {
            connection_bookkeeping(x);
          } else if constexpr (std::is_same_v<T, node_do::drop_connections>) {
            conn_.drop_connections(x.why);
          } else if constexpr (std::is_same_v<T, node_do::say>) {
            say(x);
          } else if constexpr (std::is_same_v<T, node_do::wait>) {
            std::this_thread::sleep_for(std::chrono::duration<double>(x.seconds));
          } else if constexpr (std::is_same_v<T, node_do::exit_node>) {
            exit_status = x.status;
          }
        },
        a);
  }
  return exit_status;
}

/// Carries out the actions of the main loop, in order.
void learner_node_shell::carry_out(node_actions actions) {
  for (auto& a : actions) carry_out_one(a);
}

void learner_node_shell::carry_out_one(node_action& a) {
  std::visit(
      [&](auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (is_connection_bookkeeping_v<T>) {
          connection_bookkeeping(x);
        } else if constexpr (std::is_same_v<T, node_do::drop_connections>) {
          // A connection whose proxies are dead but which CAF keeps is shut down, so the next
          // lookup connects afresh (shutdown_connections_to).
          const int n = conn_.drop_connections(x.why);
          if (x.log_event)
            log_->emit("syncer_connection_dropped", {{"sockets", n}, {"why", x.why}});
        } else if constexpr (std::is_same_v<T, node_do::close_channels>) {
          channels_->close_all(x.why);
        } else if constexpr (std::is_same_v<T, node_do::open_channel>) {
          open_channel();
        } else if constexpr (std::is_same_v<T, node_do::adopt_monitor>) {
          adopt_monitor();
        } else if constexpr (std::is_same_v<T, node_do::rejoin_learners>) {
          self_->send(sup_, atoms::syncer_atom_v, monitor_);
        } else if constexpr (std::is_same_v<T, node_do::stop_learners>) {
          self_->send(sup_, atoms::stop_atom_v);
        } else if constexpr (std::is_same_v<T, node_do::emit>) {
          if (x.with_steps) x.fields["steps"] = learner_steps(*log_);
          log_->emit(x.event, std::move(x.fields));
        } else if constexpr (std::is_same_v<T, node_do::say>) {
          say(x);
        } else if constexpr (std::is_same_v<T, node_do::flush_events>) {
          flush_events(false);
        } else if constexpr (std::is_same_v<T, node_do::progress>) {
          show_progress(x);
        } else {
          static_assert(std::is_same_v<T, node_do::wait> || std::is_same_v<T, node_do::exit_node>,
                        "every action of the main loop is carried out");
        }
      },
      a);
}

/// 1. Reach the monitor and learn the run (the describe handshake, learner_count 0).
std::optional<int> learner_node_shell::reach_syncer() {
  while (core_.state() == learner_node_state::connecting) {
    if (auto s = starting(
            core_.on_startup_check(node_connector::now_s(), interrupted(), conn_.last_error)))
      return s;
    const int attempts_before = conn_.attempt;
    auto m = conn_.try_once();
    if (!m) {
      if (conn_.attempt != attempts_before)
        if (auto s = starting(core_.on_startup_lookup_failed(conn_.last_error))) return s;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    node_join ask;
    ask.run_id = run_id_;
    ask.node_name = name_;
    ask.host = host_;
    ask.learner_count = 0;  // describe only
    std::string why;
    bool unanswered = false, dead_handle = false;
    const std::optional<node_join_reply> rep =
        ask_syncer(*m, ask, core_.describe_handshake_timeout_s(conn_.attempt), &why, &unanswered,
                   &dead_handle);
    const auto actions =
        core_.on_described(outcome_of(rep, why, unanswered, dead_handle), conn_.attempt);
    if (auto s = starting(actions)) return s;
    if (rep && rep->accepted) {
      monitor_ = *m;
      described_ = std::move(*rep);
    } else if (std::any_of(actions.begin(), actions.end(), [](const node_action& a) {
                 return std::holds_alternative<node_do::retry_at_once>(a);
               })) {
      // The sockets were shut down: CAF drops the handle's connection, and with it the cached
      // lookup, once it has read the end of it. The next lookup waits for that (at most 1 s),
      // else it could get the same handle back and ask down the same dead route.
      wait_until_down(*m, 1.0);
    }
  }
  run_id_ = described_.run_id;
  return std::nullopt;
}

/// 2. The experiment and this node's copy of the data, checked before any learner allocates.
std::optional<int> learner_node_shell::load_run() {
  config::load_options lo;
  lo.check_files = false;
  auto loaded = config::load_json(nlohmann::json::parse(described_.experiment_json), lo);
  const bool loads = loaded.ok() && loaded.experiments.size() == 1;
  std::string memory;
  if (loads) {
    exp_ = loaded.experiments.front();
    if (!o_.data_file.empty()) exp_.data.file = o_.data_file;
    const int here = o_.learner_ids.empty() ? o_.learners : static_cast<int>(o_.learner_ids.size());
    memory = check_before_start(exp_, start_check_for::learner_node, here, o_.force_memory);
  }
  if (auto s = starting(core_.on_experiment(loads, loaded.error_text(), memory))) return s;
  node_data_check d;
  d.from_flag = !o_.data_file.empty();
  d.name = exp_.data.kind == config::data_kind::idx ? exp_.data.images + "' + '" + exp_.data.labels
           : exp_.data.kind == config::data_kind::tokens && !exp_.data.files.empty()
               ? exp_.data.files.front() + (exp_.data.files.size() > 1 ? "' ..." : "")
               : exp_.data.file;
  try {
    rd_ = load_run_data(exp_);
    req_.data_hash = d.hash_here = rd_.hash;
    req_.data_bytes = d.bytes_here = rd_.bytes;
  } catch (const std::exception& e) {
    d.error = e.what();
  }
  d.bytes_there = described_.data_bytes;
  d.hash_there = described_.data_hash;
  return starting(core_.on_data(d));
}

/// 3. Ask for learner ids until given (or the core ends the node).
std::optional<int> learner_node_shell::ask_learner_ids() {
  req_.run_id = run_id_;
  req_.node_name = name_;
  req_.host = host_;
  req_.learner_ids = o_.learner_ids;
  req_.learner_count = static_cast<uint32_t>(std::max(1, o_.learners));
  bool look_up = false;  // the syncer is looked up again (a fresh connection) before the next ask
  while (true) {
    if (auto s = starting(
            core_.on_startup_check(node_connector::now_s(), interrupted(), conn_.last_error)))
      return s;
    if (look_up) {
      const int attempts_before = conn_.attempt;
      auto m = conn_.try_once();
      if (!m) {
        if (conn_.attempt == attempts_before) {  // the connector's backoff step is not over
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
          continue;
        }
        if (auto s = starting(core_.on_startup_lookup_failed(conn_.last_error))) return s;
        if (auto s = starting(
                core_.on_ids(handshake_outcome::failed(conn_.last_error), node_connector::now_s())))
          return s;
        continue;
      }
      monitor_ = *m;  // the same syncer: the ask names its run, another run's answer is refused
      look_up = false;
    }
    std::string why;
    bool unanswered = false, dead_handle = false;
    const std::optional<node_join_reply> rep = ask_syncer(
        monitor_, req_, core_.ids_handshake_timeout_s(), &why, &unanswered, &dead_handle);
    if (rep && rep->accepted) {
      ids_ = rep->learner_ids;
      return std::nullopt;
    }
    const auto actions =
        core_.on_ids(outcome_of(rep, why, unanswered, dead_handle), node_connector::now_s());
    if (auto s = starting(actions)) return s;
    if (std::any_of(actions.begin(), actions.end(), [](const node_action& a) {
          return std::holds_alternative<node_do::retry_at_once>(a);
        })) {
      // The sockets were shut down: wait (at most 1 s) for CAF to drop the handle and its cached
      // lookup, so that the lookup below connects afresh (as reach_syncer does).
      wait_until_down(monitor_, 1.0);
      look_up = true;
    } else if (dead_handle) {
      look_up = true;
    }
  }
}

/// 4. The node's services: its event log (forwarded to the syncer), fault hooks, chaos
/// endpoint, HTTP listener and step admission.
std::optional<int> learner_node_shell::start_services() {
  run_dir_ =
      !o_.run_dir.empty() ? o_.run_dir : (fs::path("runs") / exp_.name / "nodes" / name_).string();
  fs::create_directories(run_dir_);
  // Appended to, never truncated: a node restarted on the same run directory (by its launcher,
  // by dd-chaos or by hand) keeps its earlier processes' lines, each process's from its
  // node_start. The forwarded copy is unaffected: the forwarder counts its offsets per process
  // stream, from the lines this process emits, not from the file's size.
  log_ = std::make_unique<run_log>((fs::path(run_dir_) / "events.jsonl").string(),
                                   /*keep_in_memory=*/false, run_log::clock_fn{},
                                   /*append=*/true);
  // A failed events.jsonl line is kept and written again with backoff (the node goes on,
  // degraded) for up to checkpoint.max_failing_seconds; then the node stops its learners.
  log_->set_write_policy(write_policy::retry_and_degrade(exp_.checkpoint.max_failing_seconds));
  start_event_forwarding();
  log_->set_console([](const std::string& line) {
    std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
  });
  plan_ = plan_of(exp_);
  steps_ =
      described_.steps_per_learner > 0 ? described_.steps_per_learner : steps_per_learner_of(exp_);
  std::vector<fault_spec> faults;
  for (const auto& f : fault_specs_of(exp_, steps_, plan_.num_fragments()))
    if (acts_in_learner_node(f, o_.message_faults_via_endpoint)) faults.push_back(f);
  hooks_ = std::make_unique<fault_hooks>(faults, log_.get());
  start_chaos_endpoint();
  start_http();
  return make_step_gate();
}

/// Every event line is also forwarded to the syncer (forward_buffer).
void learner_node_shell::start_event_forwarding() {
  fwd_->stream = fmt::format("{}-{}", static_cast<long>(::getpid()),
                             std::chrono::system_clock::now().time_since_epoch().count());
  log_->set_tap([fwd = fwd_](const std::string& line) {
    std::lock_guard<std::mutex> g(fwd->m);
    fwd->lines.add(line);
  });
}

/// Sends the next batch of buffered event lines (up to 1 MiB, whole lines) to the syncer as a
/// request: its lines leave the buffer when the syncer answers; without an answer (a link that
/// died while the node was paused or the syncer away) they are sent again after the rejoin.
/// One batch at a time, from a helper actor so the main loop does not wait. The `last` sends
/// wait for their answers (2 s each), so the process does not exit before the lines are
/// written.
void learner_node_shell::flush_events(bool last) {
  auto wire = [this](const event_forwarder::batch& b) {
    return encode(node_events{name_, b.lines, fwd_->stream, b.offset}, {run_id_, 0});
  };
  if (!last) {
    std::optional<event_forwarder::batch> b;
    {
      std::lock_guard<std::mutex> g(fwd_->m);
      b = fwd_->lines.next();
    }
    if (!b) return;
    sys_.spawn(
        [fwd = fwd_, to = monitor_, id = b->id, bytes = wire(*b)](caf::event_based_actor* a) {
          a->request(to, std::chrono::seconds(10), atoms::events_atom_v, bytes)
              .then(
                  [fwd, id](bool) {
                    std::lock_guard<std::mutex> g(fwd->m);
                    fwd->lines.answered(id);
                  },
                  [fwd, id](caf::error&) {
                    std::lock_guard<std::mutex> g(fwd->m);
                    fwd->lines.unanswered(id);
                  });
        });
    return;
  }
  {
    std::lock_guard<std::mutex> g(fwd_->m);
    fwd_->lines.abandon();
  }
  for (;;) {
    std::optional<event_forwarder::batch> b;
    {
      std::lock_guard<std::mutex> g(fwd_->m);
      b = fwd_->lines.next();
    }
    if (!b) return;
    bool ok = false;
    self_->request(monitor_, std::chrono::seconds(2), atoms::events_atom_v, wire(*b))
        .receive([&](bool) { ok = true; }, [](caf::error&) {});
    std::lock_guard<std::mutex> g(fwd_->m);
    if (!ok) {
      fwd_->lines.unanswered(b->id);
      return;
    }
    fwd_->lines.answered(b->id);
  }
}

/// The node's chaos endpoint (--chaos-endpoint). A port taken since the launcher picked it must
/// not stop the training: the node runs on without one (dd-chaos msg then reports it
/// unreachable).
void learner_node_shell::start_chaos_endpoint() {
  if (o_.chaos_endpoint.first.empty()) return;
  chaos_endpoint_options eo;
  eo.host = o_.chaos_endpoint.first;
  eo.port = o_.chaos_endpoint.second;
  eo.node_name = name_;
  eo.role = "learner";
  eo.learners = ids_;
  eo.fragments = plan_.num_fragments();
  eo.steps_per_learner = steps_;
  eo.join_token = o_.join_token;
  try {
    endpoint_ = std::make_unique<chaos_endpoint>(eo, hooks_.get());
    std::printf("dd-node learner %s: chaos endpoint on %s:%u\n", name_.c_str(), eo.host.c_str(),
                endpoint_->port());
    std::fflush(stdout);
    log_->emit("chaos_endpoint", {{"node", name_}, {"host", eo.host}, {"port", endpoint_->port()}});
  } catch (const std::exception& e) {
    log_->warn(fmt::format("chaos endpoint off: {}", e.what()));
    log_->emit("failure", {{"what", "chaos_endpoint"}, {"error", e.what()}});
  }
}

void learner_node_shell::start_http() {
  if (o_.http.first.empty()) return;
  node_metrics_options mo;
  mo.kind = "learner";
  mo.node = name_;
  mo.run_id = run_id_;
  mo.learners = exp_.learners.count;
  mo.fragments = plan_.num_fragments();
  mo.version = util::build_version();
  mo.commit = util::build_commit();
  mo.tls_not_after_unix = o_.tls_not_after_unix;
  http_ = start_node_http(o_.http.first, o_.http.second, std::move(mo), log_.get(),
                          "dd-node learner " + name_);
}

/// The learners' threads and step admission (plan_step_gate); exit 2 for a bad --step-admission.
std::optional<int> learner_node_shell::make_step_gate() {
  const int here = static_cast<int>(ids_.size());
  threads_ = o_.threads > 0 ? o_.threads : learner_threads_of(exp_, here);
  const auto g =
      plan_step_gate(o_.step_admission, std::thread::hardware_concurrency(), threads_, here);
  if (!g.error.empty()) {
    std::fprintf(stderr, "%s\n", g.error.c_str());
    return node_exit_usage;
  }
  if (g.what == step_gate_plan::kind::host)
    gate_ = std::make_unique<host_admission>(host_admission::attach(g.sysv_id));
  else if (g.what == step_gate_plan::kind::local)
    gate_ = std::make_unique<compute_gate>(g.slots);
  return std::nullopt;
}

/// The learners under a supervisor whose reports come to this node's main loop, and the tensor
/// channel to the syncer.
void learner_node_shell::spawn_learners() {
  current_->second = monitor_;
  node_services node;
  node.channel = route_;
  node.log = log_.get();
  node.faults = hooks_.get();
  node.gate = gate_.get();
  // The node's main loop stands for the job (a blocking actor: typed by cast, it handles both
  // reports of run_until_done).
  sctx_ = std::make_shared<supervisor_config>(supervisor_config_of(
      exp_, child_kind::learner, caf::actor_cast<supervisor_report_hdl>(self_)));
  supervisor_services sup_services = supervisor_services_of(node);
  for (auto id : ids_) {
    auto c = std::make_shared<learner_config>(learner_config_of(
        exp_, id, steps_, plan_, threads_, monitor_, rd_.text.get(), rd_.images.get()));
    c->run_id = run_id_;
    c->compute_nice = o_.compute_nice;
    c->leave =
        leave_protocol::acked;  // a leave the lost syncer did not take waits for the next one
    auto svc = learner_services_of(node);
    svc.current_monitor = [current = current_] {
      std::lock_guard<std::mutex> g(current->first);
      return current->second;
    };
    std::shared_ptr<const learner_config> cc = c;
    sctx_->children.push_back({id, [cc, svc](caf::actor_system& s) {
                                 return caf::actor_cast<caf::actor>(
                                     s.spawn<caf::detached>(learner, cc, svc));
                               }});
  }
  log_->emit("node_start", {{"node", name_},
                            {"run_id", run_id_},
                            {"learners", ids_},
                            {"threads", threads_},
                            {"data_file", exp_.data.file}});
  std::string id_list;
  for (auto id : ids_) id_list += (id_list.empty() ? "" : ",") + std::to_string(id);
  std::printf(
      "dd-node learner %s: run %s, experiment %s, learner id%s %s, %d thread%s each; events in "
      "%s\n",
      name_.c_str(), run_id_.c_str(), exp_.name.c_str(), ids_.size() == 1 ? "" : "s",
      id_list.c_str(), threads_, threads_ == 1 ? "" : "s", run_dir_.c_str());
  std::fflush(stdout);
  make_channel_hub();
  open_channel();
  sup_ = self_->spawn(supervisor, std::shared_ptr<const supervisor_config>(sctx_),
                      std::move(sup_services));
  self_->monitor(monitor_);
}

/// The tensor channel to the syncer (actors/link/tensor_channel.hpp): chunks leave on it while
/// it is open, on CAF otherwise. Opened after every join; one that breaks drops the CAF
/// connection too (its chunks in flight are lost), so the node rejoins and opens a fresh one.
void learner_node_shell::make_channel_hub() {
  tensor_channel_hub::options co;
  co.run_id = run_id_;
  co.join_token = o_.join_token;
  co.handshake_timeout_s = std::max(1.0, o_.connect_timeout_s);
  co.report = [lg = log_.get()](const std::string& event, const std::string& details) {
    lg->emit(event, {{"details", details}});
  };
  co.on_lost = [lost = channel_lost_](const std::string& why) {
    std::lock_guard<std::mutex> g(lost->m);
    lost->why = why;
    lost->lost = true;
  };
  channels_ = tensor_channel_hub::make(sys_, co);
  route_->set(channels_);
}

void learner_node_shell::open_channel() {
  {
    std::lock_guard<std::mutex> g(channel_lost_->m);
    channel_lost_->lost = false;
  }
  const auto st =
      channels_->connect(conn_.last_addr.first, conn_.last_addr.second, monitor_.node());
  if (!st) {
    std::fprintf(stderr, "dd-node learner %s: %s; chunks go on CAF\n", name_.c_str(),
                 st.error().message.c_str());
    std::fflush(stderr);
    log_->emit("channel_unavailable", {{"details", st.error().message}});
  }
}

/// The monitor just reached becomes the node's: watched, handed to the learners' contexts.
void learner_node_shell::adopt_monitor() {
  monitor_ = *reached_;
  {
    std::lock_guard<std::mutex> g(current_->first);
    current_->second = monitor_;
  }
  self_->monitor(monitor_);
}

void learner_node_shell::show_progress(const node_do::progress& x) {
  std::printf(
      "%s\n",
      node_progress(*log_, node_connector::now_s() - t0_, x.suffix, x.suffix_if_finished).c_str());
  std::fflush(stdout);
}

/// 5. Runs until every learner is done; reconnects when the syncer is lost.
void learner_node_shell::run_until_done() {
  core_.on_started(node_connector::now_s());
  while (core_.state() != learner_node_state::finished) {
    self_->receive(
        [&](atoms::children_done_atom, child_kind) { carry_out(core_.on_children_done()); },
        // The supervisor gave up on a learner (restart budget spent): the exit status says so.
        [&](atoms::child_given_up_atom, child_kind, int32_t, const std::string&) {
          learners_given_up_ = true;
        },
        [&](caf::down_msg& dm) {
          if (dm.source != monitor_.address()) return;
          carry_out(core_.on_monitor_down(sys_.render(dm.reason),
                                          dm.reason == caf::exit_reason::remote_link_unreachable,
                                          node_connector::now_s()));
        },
        caf::after(std::chrono::milliseconds(250)) >> [&] {});
    if (core_.state() == learner_node_state::finished) break;
    poll_once();
  }
}

/// One turn of the main loop after a message or 250 ms: metrics, a broken channel, a signal,
/// the lost syncer's deadline and rejoin, failing writes, timers.
void learner_node_shell::poll_once() {
  if (http_.metrics) http_.metrics->sample();
  {
    std::string why;
    {
      std::lock_guard<std::mutex> g(channel_lost_->m);
      if (channel_lost_->lost) why = channel_lost_->why;
      channel_lost_->lost = false;
    }
    carry_out(core_.on_channel_lost(why));
  }
  if (interrupted()) carry_out(core_.on_interrupt(o_.interrupt->load()));
  carry_out(core_.on_deadline_check(node_connector::now_s(), conn_.last_error));
  if (core_.wants_rejoin()) try_rejoin();
  log_->retry_pending();
  carry_out(core_.on_writes_failing(log_->policy(), log_->failing_for_s(), log_->failing_files()));
  carry_out(core_.on_timers(node_connector::now_s()));
}

/// One rejoin attempt: the lookup when its backoff step has come, then the handshake with the
/// node's learner ids.
void learner_node_shell::try_rejoin() {
  const int attempts_before = conn_.attempt;
  const double tried_at = node_connector::now_s();
  reached_ = conn_.try_once();
  if (!reached_) {
    if (conn_.attempt != attempts_before)
      carry_out(
          core_.on_rejoin_lookup_failed(conn_.last_error, node_connector::now_s() - tried_at));
    return;
  }
  node_join again = req_;
  again.learner_ids = ids_;
  std::string why;
  // CAF drops a message to a dead proxy without an answer: a handle already down is not asked,
  // a live syncer answers within the connect timeout.
  std::optional<node_join_reply> rep;
  bool unanswered = false;
  auto* target = caf::actor_cast<caf::abstract_actor*>(*reached_);
  const bool dead_handle =
      target != nullptr && target->getf(caf::abstract_actor::is_terminated_flag);
  if (dead_handle)
    why = "the syncer's handle is already down";
  else
    rep = node_handshake(self_, *reached_, again, o_.join_token,
                         core_.rejoin_handshake_timeout_s(conn_.attempt, o_.connect_timeout_s),
                         &why, &unanswered);
  carry_out(core_.on_rejoin(outcome_of(rep, why, unanswered, dead_handle), conn_.attempt,
                            node_connector::now_s() - tried_at));
}

/// The learners are done: the channels close before node_done and the last forward (so the
/// syncer's copy of this node's events has the channel's end and its frame counts too), the
/// last batch goes to a syncer still there, and the supervisor ends. The exit status.
int learner_node_shell::shut_down() {
  channels_->close_all("the node is stopping");
  if (http_.metrics) http_.metrics->set_ending();
  const int status = core_.finish(learners_given_up_);
  log_->emit("node_done",
             {{"node", name_}, {"status", status}, {"events_dropped", dropped_events()}});
  if (!core_.syncer_lost()) flush_events(true);
  std::printf("dd-node learner %s: done (exit %d)\n", name_.c_str(), status);
  std::fflush(stdout);
  self_->send_exit(sup_, caf::exit_reason::user_shutdown);
  return status;
}

}  // namespace

int run_learner_node(const learner_node_options& o) {
  if (o.join.empty()) {
    std::fprintf(stderr, "dd-node learner: --join HOST:PORT is required\n");
    return node_exit_usage;
  }
  std::string host = host_name();
  std::string name = o.node_name.empty() ? fmt::format("{}-{}", host, ::getpid()) : o.node_name;
  const uint64_t seed =
      o.seed != 0 ? o.seed : derive_seed(0x6a6f696eULL, std::hash<std::string>{}(name));
  // Under TLS (dd-node learner sets tls_not_after_unix) `join` holds the local forwarders that
  // dd-node learner put in front of the syncer addresses it printed ("TLS to ... through ...").
  std::printf("dd-node learner %s: joining %s:%u%s (backoff jitter seed %llu)\n", name.c_str(),
              o.join.front().first.c_str(), o.join.front().second,
              o.tls_not_after_unix > 0 ? ", the local TLS forwarder to the syncer" : "",
              static_cast<unsigned long long>(seed));
  std::fflush(stdout);
  learner_node_shell node(o, std::move(host), std::move(name), seed);
  return node.run();
}

supervisor_hdl spawn_local_learners(caf::local_actor* self, const supervisor_report_hdl& job,
                                    job_setup& setup, const monitor_hdl& monitor) {
  const auto& e = setup.exp;
  const bool sim = setup.options.simulated_time;
  const int M = e.learners.count;
  auto lctx =
      std::make_shared<supervisor_config>(supervisor_config_of(e, child_kind::learner, job));
  node_services node;
  node.log = setup.log.get();
  node.faults = setup.faults.get();
  node.gate = setup.gate.get();
  supervisor_services sup_services = supervisor_services_of(node);
  const learner_services svc = learner_services_of(node);
  for (int i = 0; i < M; ++i) {
    auto lc = std::make_shared<learner_config>(
        learner_config_of(e, i, setup.steps_per_learner, setup.plan, setup.learner_threads, monitor,
                          setup.data.get(), setup.images.get(), sim, setup.options.sim_step_s));
    lc->run_id = setup.run_id;
    std::shared_ptr<const learner_config> cc = lc;
    lctx->children.push_back({i, [cc, svc, sim](caf::actor_system& sys) {
                                return caf::actor_cast<caf::actor>(
                                    sim ? sys.spawn(learner, cc, svc)
                                        : sys.spawn<caf::detached>(learner, cc, svc));
                              }});
  }
  return self->spawn(supervisor, std::shared_ptr<const supervisor_config>(lctx),
                     std::move(sup_services));
}

}  // namespace dd::actors
