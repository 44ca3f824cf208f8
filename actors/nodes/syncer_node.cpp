// actors/nodes/syncer_node.cpp — see syncer_node.hpp.
#include "actors/nodes/syncer_node.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <fmt/format.h>
#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "actors/nodes/role_contexts.hpp"
#include "actors/roles/evaluator.hpp"
#include "actors/roles/fragment_owner.hpp"
#include "actors/roles/health_monitor.hpp"
#include "actors/roles/supervisor.hpp"
#include "actors/services/owner_faults.hpp"
#include "actors/services/recorder.hpp"
#include "runtime/run_dir.hpp"

namespace dd::actors {

namespace fs = std::filesystem;

syncer_node spawn_syncer_node(caf::local_actor* self, const job_hdl& job, job_setup& setup) {
  syncer_node node;
  const auto& e = setup.exp;
  const bool sim = setup.options.simulated_time;
  const int M = e.learners.count;
  const int P = setup.plan.num_fragments();
  const bool remote = setup.options.role == node_role::syncer;

  // Health monitor.
  auto mctx = std::make_shared<monitor_config>(monitor_config_of(e, P));
  monitor_services msvc;
  msvc.log = setup.log.get();
  msvc.identities = setup.identities.get();
  msvc.node = job;  // failed writes of the record are reported to the job
  mctx->lease_min_s = setup.options.lease_min_s;
  mctx->job = job;
  mctx->remote_learners = remote;
  mctx->run_id = setup.run_id;
  mctx->syncer_incarnation = setup.syncer_incarnation;
  mctx->experiment_hash = setup.experiment_hash;
  mctx->data_bytes = setup.data_bytes;
  mctx->data_hash = setup.data_hash;
  mctx->steps_per_learner = setup.steps_per_learner;
  mctx->join_token = setup.options.join_token;
  if (!sim) {
    mctx->record_path = (fs::path(setup.run_dir) / "monitor.json").string();
    // The node's recorder: every heartbeat's loss, and the learner nodes' forwarded events.
    msvc.recorder = std::make_shared<node_recorder>(
        setup.log.get(), (fs::path(setup.run_dir) / "learner_loss.csv").string(),
        remote ? (fs::path(setup.run_dir) / "nodes").string() : std::string());
  }
  mctx->restored_record = setup.monitor_record;
  node.monitor =
      self->spawn(health_monitor, std::shared_ptr<const monitor_config>(mctx), std::move(msvc));

  // Fragment owners.
  auto octx = std::make_shared<supervisor_config>(supervisor_config_of(e, child_kind::owner, job));
  node_services owner_node;
  owner_node.log = setup.log.get();
  owner_node.faults = setup.faults.get();
  supervisor_services osup = supervisor_services_of(owner_node);
  const std::string ckpt_dir = checkpoint_dir_of(setup.run_dir, e.checkpoint.dir);
  for (int p = 0; p < P; ++p) {
    auto c = std::make_shared<owner_config>();
    c->options = owner_options_of(e, setup.plan.fragments[static_cast<size_t>(p)],
                                  (fs::path(ckpt_dir) / fmt::format("owner_{}.ddck", p)).string(),
                                  setup.options.checkpoint_every);
    c->options.run_id = setup.run_id;
    c->options.syncer_incarnation = setup.syncer_incarnation;
    c->options.experiment_digest = setup.state_digest;
    const auto& o = c->options;
    c->initial.resize(o.layout.numel);
    gather_fragment(o.layout, setup.initial.data(), c->initial.data());
    c->backend = "cpu";
    c->threads = 1;
    c->monitor = node.monitor;
    // The node's services for this owner, shared by its incarnations.
    owner_services svc;
    svc.log = setup.log.get();
    svc.faults =
        std::make_shared<owner_faults>(setup.faults.get(), setup.log.get(), p, o.checkpoint_path);
    svc.link.faults = setup.faults.get();
    svc.link.channel = setup.channel;
    svc.node = job;  // failed checkpoint writes are reported to the job
    c->resumed = setup.options.resume;
    c->learners = static_cast<size_t>(M);
    // A respawned owner waits for the live learners' answers (they answer between steps); a
    // resumed one also for the learners to rejoin (their nodes retry with backoff, ≤ 5 s under
    // dd-node launch, ≤ 15 s by hand).
    c->rebuild_wait_s = e.checkpoint.rebuild_wait_seconds;
    c->window_chunks = e.sync.window_chunks;
    if (auto it = setup.resume_versions.find(p); it != setup.resume_versions.end())
      svc.history = std::make_shared<owner_history>(it->second);
    std::shared_ptr<const owner_config> cc = c;
    octx->children.push_back({p, [cc, svc](caf::actor_system& sys) {
                                return caf::actor_cast<caf::actor>(
                                    sys.spawn(fragment_owner, cc, svc));
                              }});
  }
  node.owner_sup =
      self->spawn(supervisor, std::shared_ptr<const supervisor_config>(octx), std::move(osup));

  // Evaluator.
  auto ectx = std::make_shared<evaluator_config>(
      evaluator_config_of(e, setup.plan, setup.data.get(), setup.images.get()));
  evaluator_services esvc;
  esvc.log = setup.log.get();
  esvc.stop = setup.stop_evaluation;
  esvc.model_written = setup.final_model_written;
  ectx->step_poll_s = sim ? setup.options.sim_step_s : 0.25;
  ectx->adaptive_cadence = !sim;
  ectx->monitor = node.monitor;
  ectx->run_id = setup.run_id;
  ectx->syncer_incarnation = setup.syncer_incarnation;
  ectx->job = job;
  if (!sim) {  // the final evaluation's model, with the windows it scored (model_file.hpp)
    ectx->model_path = (fs::path(setup.run_dir) / model_file_name).string();
    // The model file is written by the final evaluation only: its windows are the final ones
    // (the evaluator sets "evaluation" to "none" or "last periodic" until they are scored).
    auto final_eval = setup.final_eval;
    final_eval["evaluation"] = "final";
    ectx->model_metadata = {
        {"run_id", setup.run_id}, {"experiment", e.name}, {"eval", final_eval.dump()}};
  }
  std::shared_ptr<const evaluator_config> ec = ectx;
  node.eval =
      sim ? self->spawn(evaluator, ec, esvc) : self->spawn<caf::detached>(evaluator, ec, esvc);
  return node;
}

void publish_monitor(caf::actor_system& sys, const monitor_hdl& monitor, job_setup& setup,
                     std::unique_ptr<frame_guard>& guard,
                     std::shared_ptr<tensor_channel_hub>& channels) {
  const auto& options = setup.options;
  // reuse_addr: a restarted syncer binds its port at once (docs/caf.md: TIME_WAIT).
  const bool guarded = options.guard.max_frame_bytes > 0;
  const char* in = guarded                       ? "127.0.0.1"
                   : options.listen_host.empty() ? nullptr
                                                 : options.listen_host.c_str();
  auto port = sys.middleman().publish(monitor, guarded ? 0 : options.listen_port, in, true);
  if (!port) {
    std::fprintf(stderr, "dd-node syncer: cannot listen on %s:%u: %s\n",
                 options.listen_host.c_str(), options.listen_port,
                 sys.render(port.error()).c_str());
    std::fflush(stderr);
    std::_Exit(2);
  }
  uint16_t bound = *port;
  const bool tls = options.tls != nullptr;
  if (tls && !guarded) {
    std::fprintf(stderr, "dd-node syncer: TLS needs the frame guard (--max-frame-bytes > 0)\n");
    std::fflush(stderr);
    std::_Exit(2);
  }
  // Mutual TLS: the node each connection's CAF handshake names is bound to the names of the
  // certificate its connection came with (peer_identity.hpp); a connection that did not come
  // through the TLS tunnel (a local process dialing the guard's loopback port) is refused.
  job_setup* s = &setup;
  auto names_of = [s](uint16_t local_port) {
    return s->tunnel ? s->tunnel->names_of_port(local_port) : std::vector<std::string>{};
  };
  auto vet_handshake = [s, names_of](uint16_t peer_port,
                                     const std::vector<uint8_t>& payload) -> std::string {
    const auto names = names_of(peer_port);
    if (names.empty()) return "the connection did not come through TLS";
    std::vector<char> buf(payload.begin(), payload.end());
    caf::binary_deserializer src{nullptr, buf};
    caf::node_id nid;
    if (auto err = src(nid); err || !nid) return "its CAF handshake names no readable node id";
    std::vector<std::string> earlier;
    if (!s->identities->bind(caf::to_string(nid), names, &earlier)) {
      const std::string why =
          fmt::format("CAF node {} connected with certificate names {}, but it is bound to {}",
                      caf::to_string(nid), join_names(names), join_names(earlier));
      s->log->emit("auth_refused",
                   {{"what", "tls_identity"}, {"who", caf::to_string(nid)}, {"reason", why}});
      s->log->update([](run_counters& c) { c.auth_refused += 1; });
      return why;
    }
    return {};
  };
  if (guarded) {
    tensor_channel_hub::options co;
    co.run_id = setup.run_id;
    co.max_frame_bytes = options.guard.max_frame_bytes;
    co.join_token = options.join_token;
    if (tls)
      co.vet_hello = [s, names_of](const std::string& peer, const caf::node_id& nid) {
        const auto colon = peer.rfind(':');
        const auto peer_port = colon == std::string::npos
                                   ? 0
                                   : static_cast<uint16_t>(std::stoul(peer.substr(colon + 1)));
        const auto names = names_of(peer_port);
        if (names.empty()) return std::string("the connection did not come through TLS");
        const auto bound_to = s->identities->names_of(caf::to_string(nid));
        if (!bound_to)
          return fmt::format("node {} has no CAF connection under a certificate",
                             caf::to_string(nid));
        if (*bound_to != names) {
          const std::string why = fmt::format(
              "the greeting names node {}, bound to certificate names {}, but its connection's "
              "certificate names {}",
              caf::to_string(nid), join_names(*bound_to), join_names(names));
          s->log->emit("auth_refused",
                       {{"what", "tensor_channel"}, {"who", caf::to_string(nid)}, {"reason", why}});
          s->log->update([](run_counters& c) { c.auth_refused += 1; });
          return why;
        }
        return std::string();
      };
    co.report = [log = setup.log.get()](const std::string& event, const std::string& details) {
      if (event == "auth_refused") {
        log->emit(event, {{"what", "tensor_channel"}, {"who", details}});
        log->update([](run_counters& c) { c.auth_refused += 1; });
        log->warn("join token refused: " + details);
        return;
      }
      log->emit(event, {{"details", details}});
      if (event == "channel_refused") log->warn("tensor channel refused: " + details);
    };
    channels = tensor_channel_hub::make(sys, co);
    setup.channel->set(channels);
    std::weak_ptr<tensor_channel_hub> hub = channels;
    try {
      guard = std::make_unique<frame_guard>(
          tls ? std::string("127.0.0.1") : options.listen_host,
          tls ? uint16_t{0} : options.listen_port, *port, options.guard,
          [log = setup.log.get()](const std::string& what) {
            log->emit("frame_refused", {{"reason", what}});
            log->update([](run_counters& c) { c.frames_refused += 1; });
            log->warn("frame guard: " + what);
          },
          [hub](int fd, std::string peer, std::vector<uint8_t> first) {
            if (auto h = hub.lock())
              h->accept(fd, std::move(peer), std::move(first));
            else
              ::close(fd);
          },
          tls ? frame_guard::handshake_fn(vet_handshake) : frame_guard::handshake_fn());
      bound = guard->port();
      if (tls) {
        tls_tunnel::options to;
        to.what = tls_tunnel::mode::terminate;
        to.listen_host = options.listen_host;
        to.listen_port = options.listen_port;
        to.target_port = guard->port();
        to.ctx = options.tls;
        to.on_refused = [log = setup.log.get()](const std::string& what) {
          log->emit("tls_refused", {{"reason", what}});
          log->update([](run_counters& c) { c.auth_refused += 1; });
          log->warn(what);
        };
        setup.tunnel = std::make_unique<tls_tunnel>(std::move(to));
        bound = setup.tunnel->port();
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "dd-node syncer: %s\n", e.what());
      std::fflush(stderr);
      std::_Exit(2);
    }
  }
  setup.log->emit("listening", {{"host", options.listen_host},
                                {"port", bound},
                                {"middleman_port", *port},
                                {"max_frame_bytes", options.guard.max_frame_bytes},
                                {"tls", tls},
                                {"stranger_bytes", options.guard.stranger_bytes},
                                {"stranger_connections", options.guard.stranger_connections},
                                {"run_id", setup.run_id}});
  if (options.on_published) options.on_published(bound);
}

}  // namespace dd::actors
