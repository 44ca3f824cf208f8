// actors/nodes/learner_node.cpp — see learner_node.hpp. The shell of a learner node: it sets
// the node's services up and carries out what learner_node_core decides (its states:
// learner_node_core.hpp), dialing the syncer through node_connector.
#include "actors/nodes/learner_node.hpp"
#include "actors/nodes/memory_check.hpp"

#include <unistd.h>

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

/// Inner steps of every learner of this node, {"id": step} (syncer_lost / syncer_back events).
nlohmann::json learner_steps(const run_log& log) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [id, l] : log.snapshot().learners) out[std::to_string(id)] = l.step;
  return out;
}

/// What a handshake's reply (or its absence, with `why`) came to, for learner_node_core.
handshake_outcome outcome_of(const std::optional<node_join_reply>& rep, const std::string& why,
                             bool unanswered = false, bool dead_handle = false) {
  if (!rep) return handshake_outcome::failed(why, unanswered, dead_handle);
  if (!rep->accepted) return handshake_outcome::refused(rep->refusal, rep->reason);
  return handshake_outcome::accepted(rep->run_id);
}

void say(const node_do::say& x) {
  std::FILE* to = x.err ? stderr : stdout;
  std::fprintf(to, "%s\n", x.line.c_str());
  std::fflush(to);
}

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
  node_connector conn(o.join, name, sys, o.backoff_base_s, o.backoff_cap_s, o.connect_timeout_s,
                      seed);
  const double t0 = node_connector::now_s();
  if (o.join_deadline_s > 0) conn.deadline_at = t0 + o.join_deadline_s;
  learner_node_core core({name, o.join_deadline_s, o.progress_every_s, t0});
  auto interrupted = [&] { return o.interrupt != nullptr && o.interrupt->load() != 0; };
  // Carries out the actions of the startup (before any learner runs); the exit status when one
  // of them ends the node.
  auto starting = [&](const node_actions& actions) -> std::optional<int> {
    std::optional<int> exit_status;
    for (const auto& a : actions) {
      if (exit_status) break;
      std::visit(
          [&](const auto& x) {
            using T = std::decay_t<decltype(x)>;
            if constexpr (std::is_same_v<T, node_do::backoff>) {
              conn.failed(x.why);
            } else if constexpr (std::is_same_v<T, node_do::set_deadline>) {
              conn.deadline_at = x.deadline_at;
              if (x.reset_attempts) conn.attempt = 0;
            } else if constexpr (std::is_same_v<T, node_do::drop_connections>) {
              conn.drop_connections(x.why);
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
  };

  // 1. Reach the monitor and learn the run.
  std::string run_id = o.run_id;
  monitor_hdl monitor;
  node_join_reply described;
  while (core.state() == learner_node_state::connecting) {
    if (auto s = starting(
            core.on_startup_check(node_connector::now_s(), interrupted(), conn.last_error)))
      return *s;
    const int attempts_before = conn.attempt;
    auto m = conn.try_once();
    if (!m) {
      if (conn.attempt != attempts_before)
        if (auto s = starting(core.on_startup_lookup_failed(conn.last_error))) return *s;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    node_join ask;
    ask.run_id = run_id;
    ask.node_name = name;
    ask.host = host;
    ask.learner_count = 0;  // describe only
    std::string why;
    auto rep = node_handshake(self, *m, ask, o.join_token, 10.0, &why);
    if (auto s = starting(core.on_described(outcome_of(rep, why)))) return *s;
    if (rep && rep->accepted) {
      monitor = *m;
      described = std::move(*rep);
    }
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
    if (auto s = starting(
            core.on_startup_check(node_connector::now_s(), interrupted(), conn.last_error)))
      return *s;
    std::string why;
    auto rep = node_handshake(self, monitor, req, o.join_token, 10.0, &why);
    if (rep && rep->accepted) {
      ids = rep->learner_ids;
      break;
    }
    if (auto s = starting(core.on_ids(outcome_of(rep, why), node_connector::now_s()))) return *s;
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
  sctx->restart = exp.restart;
  sctx->log = log.get();
  sctx->fault_downtime = respawn_downtime_hook(hooks.get(), /*owner=*/false);
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
  core.on_started(node_connector::now_s());
  std::optional<monitor_hdl> reached;  // the monitor of the rejoin being carried out
  auto carry_out = [&](node_actions actions) {
    for (auto& a : actions)
      std::visit(
          [&](auto& x) {
            using T = std::decay_t<decltype(x)>;
            if constexpr (std::is_same_v<T, node_do::backoff>) {
              conn.failed(x.why);
            } else if constexpr (std::is_same_v<T, node_do::retry_at_once>) {
              conn.last_error = x.why;
            } else if constexpr (std::is_same_v<T, node_do::set_deadline>) {
              conn.deadline_at = x.deadline_at;
              if (x.reset_attempts) conn.attempt = 0;
            } else if constexpr (std::is_same_v<T, node_do::drop_connections>) {
              // A connection whose proxies are dead but which CAF keeps is shut down, so the
              // next lookup connects afresh (shutdown_connections_to).
              const int n = conn.drop_connections(x.why);
              if (x.log_event)
                log->emit("syncer_connection_dropped", {{"sockets", n}, {"why", x.why}});
            } else if constexpr (std::is_same_v<T, node_do::close_channels>) {
              channels->close_all(x.why);
            } else if constexpr (std::is_same_v<T, node_do::open_channel>) {
              open_channel();
            } else if constexpr (std::is_same_v<T, node_do::adopt_monitor>) {
              monitor = *reached;
              {
                std::lock_guard<std::mutex> g(current->first);
                current->second = monitor;
              }
              self->monitor(monitor);
            } else if constexpr (std::is_same_v<T, node_do::rejoin_learners>) {
              self->send(sup, atoms::syncer_atom_v, monitor);
            } else if constexpr (std::is_same_v<T, node_do::stop_learners>) {
              self->send(sup, atoms::stop_atom_v);
            } else if constexpr (std::is_same_v<T, node_do::emit>) {
              if (x.with_steps) x.fields["steps"] = learner_steps(*log);
              log->emit(x.event, std::move(x.fields));
            } else if constexpr (std::is_same_v<T, node_do::say>) {
              say(x);
            } else if constexpr (std::is_same_v<T, node_do::flush_events>) {
              flush_events(false);
            } else if constexpr (std::is_same_v<T, node_do::progress>) {
              const auto snap = log->snapshot();
              bool any_finished = false;
              for (const auto& [id, l] : snap.learners) any_finished = any_finished || l.finished;
              std::printf("%s%s\n", node_progress_line(snap, node_connector::now_s() - t0).c_str(),
                          (any_finished ? x.suffix_if_finished : x.suffix).c_str());
              std::fflush(stdout);
            } else {
              static_assert(
                  std::is_same_v<T, node_do::wait> || std::is_same_v<T, node_do::exit_node>,
                  "every action of the main loop is carried out");
            }
          },
          a);
  };
  while (core.state() != learner_node_state::finished) {
    self->receive(
        [&](atoms::children_done_atom, child_kind) { carry_out(core.on_children_done()); },
        [&](atoms::child_given_up_atom, child_kind, int32_t, const std::string&) {},
        [&](caf::down_msg& dm) {
          if (dm.source != monitor.address()) return;
          carry_out(core.on_monitor_down(sys.render(dm.reason),
                                         dm.reason == caf::exit_reason::remote_link_unreachable,
                                         node_connector::now_s()));
        },
        caf::after(std::chrono::milliseconds(250)) >> [&] {});
    if (core.state() == learner_node_state::finished) break;
    if (http.metrics) http.metrics->sample();
    {
      std::string why;
      {
        std::lock_guard<std::mutex> g(channel_lost->m);
        if (channel_lost->lost) why = channel_lost->why;
        channel_lost->lost = false;
      }
      carry_out(core.on_channel_lost(why));
    }
    if (interrupted()) carry_out(core.on_interrupt(o.interrupt->load()));
    carry_out(core.on_deadline_check(node_connector::now_s(), conn.last_error));
    if (core.wants_rejoin()) {
      const int attempts_before = conn.attempt;
      const double tried_at = node_connector::now_s();
      reached = conn.try_once();
      if (!reached && conn.attempt != attempts_before)
        carry_out(
            core.on_rejoin_lookup_failed(conn.last_error, node_connector::now_s() - tried_at));
      if (reached) {
        node_join again = req;
        again.learner_ids = ids;
        std::string why;
        // CAF drops a message to a dead proxy without an answer: a handle already down is not
        // asked, a live syncer answers within the connect timeout.
        std::optional<node_join_reply> rep;
        bool unanswered = false;
        auto* target = caf::actor_cast<caf::abstract_actor*>(*reached);
        const bool dead_handle =
            target != nullptr && target->getf(caf::abstract_actor::is_terminated_flag);
        if (dead_handle)
          why = "the syncer's handle is already down";
        else
          rep = node_handshake(self, *reached, again, o.join_token,
                               std::max(1.0, o.connect_timeout_s), &why, &unanswered);
        carry_out(core.on_rejoin(outcome_of(rep, why, unanswered, dead_handle), conn.attempt,
                                 node_connector::now_s() - tried_at));
      }
    }
    log->retry_pending();
    carry_out(core.on_writes_failing(log->failing_for_s(), exp.checkpoint.max_failing_seconds,
                                     log->failing_files()));
    carry_out(core.on_timers(node_connector::now_s()));
  }
  // Closed before node_done and the last forward, so the syncer's copy of this node's events
  // has the channel's end and its frame counts too.
  channels->close_all("the node is stopping");
  if (http.metrics) http.metrics->set_ending();
  const int status = core.finish(!log->snapshot().learners_given_up.empty());
  log->emit("node_done", {{"node", name}, {"status", status}, {"events_dropped", fwd->dropped}});
  if (!core.syncer_lost()) flush_events(true);
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
  lctx->restart = e.restart;
  lctx->log = setup.log.get();
  lctx->fault_downtime = respawn_downtime_hook(setup.faults.get(), /*owner=*/false);
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
