// tests/actors/cluster_mux_test.cpp — two CAF actor systems in one test process, joined by CAF's
// test multiplexer (caf/io/network/test_multiplexer.hpp): a syncer node (the job with role
// syncer: health monitor, owner supervisor with the fragment owners, evaluator) and a learner
// node (a learner supervisor with 3 learners and their node services). Both run on CAF's test
// coordinator with manual clocks that the driver keeps in lockstep, so the whole run is
// deterministic: every message between the nodes is serialized by CAF's BASP broker into the
// simulated connection's buffers and read back on the other side — nothing passes a pointer.
//
// The driver taps the simulated wire (tests/actors/basp_tap.hpp) and asserts that every message
// kind of the learner <-> syncer protocol crossed; a seeded fault run (a learner actor killed, a
// push damaged in transit, an owner killed, the connection dropped and re-established, a learner
// drained by an operator) keeps the invariants of cluster_sim_test (versions only increase, no
// push merged twice, weights sum to 1, no merge below quorum); the same seed gives the same
// digest of the final model.
//
// The learner node here is an event-based actor written for the test (`mux_learner_node`): it
// does what actors/nodes/learner_node.cpp does — connect, node handshake (describe, then learner
// ids), spawn the learner supervisor, forward event lines, reconnect and rejoin when the syncer is
// lost — with the middleman actor's asynchronous connect. run_learner_node itself cannot run on
// the test coordinator: it is a blocking main loop (scoped_actor receive with wall-clock
// timeouts, a connector thread running the blocking remote_actor, steady_clock backoff).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>
#include <caf/all.hpp>
#include <caf/detail/test_actor_clock.hpp>
#include <caf/io/all.hpp>
#include <caf/io/network/test_multiplexer.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include "actors/link/atoms.hpp"
#include "actors/nodes/job.hpp"
#include "actors/nodes/job_runner.hpp"
#include "actors/nodes/node_config.hpp"
#include "actors/nodes/role_contexts.hpp"
#include "actors/roles/fragment_owner.hpp"
#include "actors/roles/supervisor.hpp"
#include "actors/services/run_log.hpp"
#include "messages/control.hpp"
#include "runtime/rng.hpp"
#include "tests/actors/basp_tap.hpp"
#include "tests/actors/test_support.hpp"
#include "tests/support/invariants.hpp"

namespace dd::actors {
namespace {

using caf::io::accept_handle;
using caf::io::connection_handle;
using caf::io::network::test_multiplexer;

constexpr uint16_t k_port = 4242;

/// One CAF node on the test coordinator and the test multiplexer.
struct mux_node {
  std::string name;
  std::unique_ptr<node_config> cfg;
  std::unique_ptr<caf::actor_system> sys;
  caf::scheduler::test_coordinator* sched = nullptr;
  test_multiplexer* mpx = nullptr;

  explicit mux_node(std::string n) : name(std::move(n)) {
    node_transport t;  // the project's node configuration, middleman heartbeat on
    t.heartbeat_s = 1.0;
    t.connection_timeout_s = 10.0;
    cfg = std::make_unique<node_config>(t);
    cfg->set("scheduler.policy", caf::atom("testing"));
    cfg->set("middleman.network-backend", caf::atom("testing"));
    cfg->set("middleman.manual-multiplexing", true);
    cfg->set("middleman.workers", size_t{0});
    // The middleman actor on the test coordinator, not on a thread of its own.
    cfg->set("middleman.attach-utility-actors", true);
    sys = std::make_unique<caf::actor_system>(*cfg);
    sched = &dynamic_cast<caf::scheduler::test_coordinator&>(sys->scheduler());
    mpx = &dynamic_cast<test_multiplexer&>(sys->middleman().backend());
  }
  caf::detail::test_actor_clock& clock() { return sched->clock(); }
};

/// The two nodes, their simulated connections and the wire tap.
struct mux_net {
  mux_node syncer{"syncer"}, learner{"learner"};
  dd::test::basp_tap tap;
  int64_t next_id = 100;
  int connections = 0;
  const accept_handle acceptor = accept_handle::from_int(1);
  /// Current connection: (syncer-side handle, learner-side handle).
  connection_handle server, client;
  /// Bytes at the front of each (node, handle) input buffer already fed to the tap.
  std::map<std::pair<const mux_node*, int64_t>, size_t> tapped;
  std::vector<std::tuple<mux_node*, connection_handle, std::string>> inputs;

  /// A connection the learner node's next connect to ("syncer", k_port) will get.
  void prepare() {
    server = connection_handle::from_int(++next_id);
    client = connection_handle::from_int(++next_id);
    ++connections;
    syncer.mpx->prepare_connection(acceptor, server, *learner.mpx, "syncer", k_port, client);
    const std::string n = "#" + std::to_string(connections);
    inputs.emplace_back(&syncer, server, "learner>syncer" + n);
    inputs.emplace_back(&learner, client, "syncer>learner" + n);
  }

  /// Feeds what arrived in `n`'s input buffers to the tap, reads it, then marks it fed.
  bool read(mux_node& n) {
    for (auto& [node, hdl, link] : inputs) {
      if (node != &n) continue;
      auto& buf = n.mpx->virtual_network_buffer(hdl);
      auto& done = tapped[{node, hdl.id()}];
      if (buf.size() > done) tap.feed(link, buf.data() + done, buf.size() - done);
      done = buf.size();
    }
    const bool any = n.mpx->read_data();
    for (auto& [node, hdl, link] : inputs)
      if (node == &n) tapped[{node, hdl.id()}] = n.mpx->virtual_network_buffer(hdl).size();
    return any;
  }

  bool step(mux_node& n) {
    return n.sched->try_run_once() || n.mpx->try_exec_runnable() || read(n) ||
           n.mpx->try_accept_connection();
  }

  /// Runs both nodes until nothing is ready; false when no timeout is pending either. Otherwise
  /// advances both manual clocks together to the earliest pending timeout (firing it).
  bool run_once() {
    size_t guard = 0;
    while ((step(syncer) || step(learner)) && guard++ < 10'000'000) {}
    auto next = [](mux_node& n) {
      const auto& s = n.clock().schedule();
      return s.empty() ? caf::actor_clock::time_point::max() : s.begin()->first;
    };
    const auto t = std::min(next(syncer), next(learner));
    if (t == caf::actor_clock::time_point::max()) return false;
    for (mux_node* n : {&syncer, &learner}) {
      auto& c = n->clock();
      if (c.current_time < t) c.advance_time(t - c.current_time);
    }
    return true;
  }

  /// Seconds on the (shared) manual clock.
  double now() { return clock_seconds(syncer.clock().now()); }

  /// Drops the current connection: both sides see an I/O failure on their end.
  void drop() {
    for (auto [node, hdl] : {std::make_pair(&syncer, server), std::make_pair(&learner, client)}) {
      auto& ptr = node->mpx->impl_ptr(hdl);
      if (ptr) ptr->io_failure(node->mpx, caf::io::network::operation::read);
    }
  }
};

config::experiment tiny_experiment(const std::string& name) {
  return test::tiny_experiment(name, 3);
}

/// What the learner node of the test does and needs (node-local services live here).
struct learner_node_ctx {
  config::experiment exp;
  std::shared_ptr<text_dataset> data;
  std::string data_hash;
  uint64_t data_bytes = 0;
  std::unique_ptr<run_log> log;
  std::unique_ptr<fault_hooks> faults;
  std::string pending_lines;  ///< event lines not yet forwarded to the syncer
  /// Operator actions: ask the monitor for its status, and drain a learner, at these times.
  double status_at_s = 2.0;
  double drain_at_s = -1.0;
  int32_t drain_learner = 0;
  // Outcome.
  bool done = false;
  int connects = 0, rejoins = 0;
  std::vector<int32_t> ids;
  std::string status_json, drain_reply;
};

struct node_state {
  monitor_hdl monitor;
  supervisor_hdl sup;
  std::shared_ptr<std::pair<std::mutex, monitor_hdl>> current =
      std::make_shared<std::pair<std::mutex, monitor_hdl>>();
  node_join req;
  bool lost = false;
  static inline const char* name = "mux_learner_node";
};
using node_actor = caf::stateful_actor<node_state>;

void connect(node_actor* self, std::shared_ptr<learner_node_ctx> ctx);

void retry(node_actor* self) {
  self->delayed_send(self, std::chrono::milliseconds(500), atoms::join_atom_v);
}

/// Spawns the learner supervisor with the learners the monitor handed out.
void start_learners(node_actor* self, std::shared_ptr<learner_node_ctx> ctx) {
  auto& st = self->state;
  const auto& e = ctx->exp;
  const auto plan = plan_of(e);
  const uint64_t steps = steps_per_learner_of(e);
  node_services node;
  node.log = ctx->log.get();
  node.faults = ctx->faults.get();
  auto sctx = std::make_shared<supervisor_config>();
  sctx->kind = child_kind::learner;
  sctx->restart = e.restart;
  sctx->job = caf::actor_cast<supervisor_report_hdl>(self);
  supervisor_services sup_services;
  sup_services.log = ctx->log.get();
  for (auto id : ctx->ids) {
    auto c = std::make_shared<learner_config>(
        learner_config_of(e, id, steps, plan, 1, st.monitor, ctx->data.get(), nullptr, true, 0.1));
    c->run_id = st.req.run_id;
    auto svc = learner_services_of(node);
    svc.current_monitor = [cur = st.current] {
      std::lock_guard<std::mutex> g(cur->first);
      return cur->second;
    };
    std::shared_ptr<const learner_config> cc = c;
    sctx->children.push_back({id, [cc, svc](caf::actor_system& s) {
                                return caf::actor_cast<caf::actor>(s.spawn(learner, cc, svc));
                              }});
  }
  st.sup = self->spawn(supervisor, std::shared_ptr<const supervisor_config>(sctx),
                       std::move(sup_services));
}

/// The node handshake (messages/control.hpp) with `monitor`: accepted → running.
void handshake(node_actor* self, std::shared_ptr<learner_node_ctx> ctx, monitor_hdl monitor,
               bool describe) {
  auto& st = self->state;
  node_join ask = st.req;
  if (describe) ask.learner_count = 0;
  self->request(monitor, std::chrono::seconds(10), atoms::node_join_atom_v,
                encode(ask, {ask.run_id, 0}))
      .then(
          [=](const std::vector<uint8_t>& bytes) {
            auto& s = self->state;
            // The first handshake names no run: it takes the one the reply's envelope names.
            auto header = peek_envelope(bytes);
            auto rep = decode_node_join_reply(
                bytes, {}, {ask.run_id.empty() && header ? header->run_id : ask.run_id, 0});
            if (!rep || !rep->accepted) {
              ADD_FAILURE() << "node handshake refused: "
                            << (rep ? rep->reason : rep.error().message);
              retry(self);
              return;
            }
            if (describe) {
              // The run's identity: required from now on.
              EXPECT_EQ(rep->data_hash, ctx->data_hash);
              s.req.run_id = rep->run_id;
              handshake(self, ctx, monitor, false);
              return;
            }
            s.monitor = monitor;
            {
              std::lock_guard<std::mutex> g(s.current->first);
              s.current->second = monitor;
            }
            self->monitor(monitor);
            if (!s.sup) {
              ctx->ids = rep->learner_ids;
              s.req.learner_ids = ctx->ids;
              start_learners(self, ctx);
            } else {
              // The syncer is back: every live learner rejoins (new incarnation).
              ++ctx->rejoins;
              s.lost = false;
              ctx->log->emit("syncer_back", {{"run_id", rep->run_id}});
              self->send(s.sup, atoms::syncer_atom_v, monitor);
            }
          },
          [=](caf::error& err) {
            ADD_FAILURE() << "node handshake failed at " << clock_seconds(self->clock().now())
                          << " s: " << self->system().render(err);
            retry(self);
          });
}

/// Connects to ("syncer", k_port) through the middleman actor (asynchronous: no thread blocks).
void connect(node_actor* self, std::shared_ptr<learner_node_ctx> ctx) {
  ++ctx->connects;
  auto mm = self->system().middleman().actor_handle();
  self->request(mm, caf::infinite, caf::connect_atom::value, std::string("syncer"), k_port)
      .then(
          [=](const caf::node_id&, caf::strong_actor_ptr& ptr,
              const std::set<std::string>& interface) {
            if (!ptr) {
              retry(self);
              return;
            }
            // What remote_actor<monitor_hdl> checks: the published interface is the monitor's.
            EXPECT_TRUE(self->system().assignable<monitor_hdl>(interface));
            handshake(self, ctx, caf::actor_cast<monitor_hdl>(ptr), !self->state.sup);
          },
          [=](caf::error&) { retry(self); });
}

caf::behavior mux_learner_node(node_actor* self, std::shared_ptr<learner_node_ctx> ctx) {
  auto& st = self->state;
  st.req.node_name = "mux-learners";
  st.req.host = "learner";
  st.req.learner_count = 3;
  st.req.data_hash = ctx->data_hash;
  st.req.data_bytes = ctx->data_bytes;
  connect(self, ctx);
  self->delayed_send(self, std::chrono::seconds(1), atoms::events_atom_v);
  self->delayed_send(self, span(ctx->status_at_s), atoms::status_atom_v);
  if (ctx->drain_at_s > 0) self->delayed_send(self, span(ctx->drain_at_s), atoms::drain_atom_v);
  self->set_down_handler([=](caf::down_msg& dm) {
    auto& s = self->state;
    if (dm.source != s.monitor.address()) return;
    // The syncer is lost: the learners keep stepping; reconnect and rejoin.
    s.lost = true;
    ctx->log->emit("syncer_lost", {{"reason", self->system().render(dm.reason)}});
    retry(self);
  });
  return {
      [=](atoms::join_atom) {
        if (!ctx->done) connect(self, ctx);
      },
      // Forward the node's event lines to the syncer, about once a second (as learner_node.cpp).
      [=](atoms::events_atom) {
        auto& s = self->state;
        if (!s.lost && s.monitor && !ctx->pending_lines.empty()) {
          caf::anon_send(
              s.monitor, atoms::events_atom_v,
              encode(node_events{s.req.node_name, ctx->pending_lines, "", 0}, {s.req.run_id, 0}));
          ctx->pending_lines.clear();
        }
        if (!ctx->done) self->delayed_send(self, std::chrono::seconds(1), atoms::events_atom_v);
      },
      // An operator on this host asks for the live view (dd-node status) ...
      [=](atoms::status_atom) {
        if (self->state.lost || !self->state.monitor) {  // ask again once the syncer is back
          self->delayed_send(self, std::chrono::milliseconds(500), atoms::status_atom_v);
          return;
        }
        const std::string run = self->state.req.run_id;
        self->request(self->state.monitor, std::chrono::seconds(5), atoms::status_atom_v,
                      encode(status_request{}, {run, 0}))
            .then(
                [=](const std::vector<uint8_t>& bytes) {
                  auto rep = decode_status_reply(bytes, {}, {run, 0});
                  EXPECT_TRUE(rep.ok()) << rep.error().message;
                  if (rep) ctx->status_json = rep->json;
                },
                [=](caf::error&) {
                  self->delayed_send(self, std::chrono::seconds(1), atoms::status_atom_v);
                });
      },
      // ... and drains a learner (dd-node drain learner:N).
      [=](atoms::drain_atom) {
        if (self->state.lost || !self->state.monitor) {
          self->delayed_send(self, std::chrono::milliseconds(500), atoms::drain_atom_v);
          return;
        }
        const std::string run = self->state.req.run_id;
        self->request(self->state.monitor, std::chrono::seconds(5), atoms::drain_atom_v,
                      encode(drain_msg{ctx->drain_learner}, {run, 0}))
            .then(
                [=](const std::vector<uint8_t>& bytes) {
                  auto rep = decode_drain_reply(bytes, {}, {run, 0});
                  EXPECT_TRUE(rep.ok()) << rep.error().message;
                  if (rep) ctx->drain_reply = rep->detail;
                },
                [=](caf::error&) {});
      },
      [=](atoms::child_given_up_atom, child_kind, int32_t, const std::string&) {},
      [=](atoms::children_done_atom, child_kind) {
        ctx->done = true;
        auto& s = self->state;
        if (s.monitor && !ctx->pending_lines.empty())
          caf::anon_send(
              s.monitor, atoms::events_atom_v,
              encode(node_events{s.req.node_name, ctx->pending_lines, "", 0}, {s.req.run_id, 0}));
        self->quit();
      },
  };
}

/// Faults of one seeded run, on both nodes.
struct fault_plan {
  std::vector<fault_spec> learner_side, syncer_side;
  double drop_at_s = -1.0;  ///< the connection is dropped at this time (< 0: never)
};

fault_plan seeded_faults(uint64_t seed) {
  rng r(seed);
  fault_plan p;
  fault_spec kill;
  kill.what = fault_kind::kill_learner;
  kill.target = static_cast<int32_t>(r.below(3));
  kill.at_step = 8 + r.below(16);
  p.learner_side.push_back(kill);
  fault_spec corrupt;  // damaged in transit: the owner refuses the chunk (reject), it is resent
  corrupt.what = fault_kind::corrupt_push;
  corrupt.target = static_cast<int32_t>(r.below(3));
  corrupt.at_step = 4 + r.below(8);
  p.learner_side.push_back(corrupt);
  fault_spec delay;
  delay.what = fault_kind::delay_push;
  delay.target = (corrupt.target + 1) % 3;  // one fault per push: a delay would hide the damage
  delay.at_step = 2 + r.below(20);
  delay.delay_s = 0.3;
  p.learner_side.push_back(delay);
  fault_spec owner;
  owner.what = fault_kind::kill_owner;
  owner.target = static_cast<int32_t>(r.below(2));
  owner.at_step = 2 + r.below(3);  // the owner's version
  p.syncer_side.push_back(owner);
  p.drop_at_s = 1.5 + 1.5 * r.uniform();
  return p;
}

struct mux_outcome {
  run_result result;
  std::vector<nlohmann::json> syncer_events, learner_events;
  std::map<std::string, uint64_t> kinds, directed;
  std::vector<fired_fault> fired_learner, fired_syncer;
  std::shared_ptr<learner_node_ctx> node;
  int connections = 0;
  double end_s = 0.0;
};

mux_outcome run_two_nodes(const config::experiment& e, const fault_plan& faults,
                          const std::string& dir, double drain_at_s) {
  mux_net net;
  // Syncer node: the job with role syncer in logical time.
  run_options ro;
  ro.role = node_role::syncer;
  ro.run_dir = dir;
  ro.simulated_time = true;
  ro.sim_step_s = 0.1;
  ro.faults = faults.syncer_side;
  ro.keep_events = true;
  ro.write_events = false;
  ro.progress_every_s = 0;
  auto setup = make_job_setup(e, ro);
  auto published = std::make_shared<uint16_t>(0);
  auto result = std::make_shared<run_result>();  // the job's answer
  auto syncer_main =
      // (The published-port cell is passed as an argument, not captured: CAF 0.17 spawns a
      // function actor without arguments through a null shared_ptr<tuple<>>, which UBSan
      // reports.)
      net.syncer.sys->spawn(
          [](caf::event_based_actor* self, std::shared_ptr<uint16_t> port_cell,
             std::shared_ptr<run_result> result_cell) -> caf::behavior {
            return {
                [=](atoms::publish_atom, const monitor_hdl& monitor) {
                  auto mm = self->system().middleman().actor_handle();
                  self->request(mm, caf::infinite, caf::publish_atom::value, k_port,
                                caf::actor_cast<caf::strong_actor_ptr>(monitor),
                                self->system().message_types(monitor), std::string{}, true)
                      .then([=](uint16_t port) { *port_cell = port; });
                },
                [=](atoms::finished_atom, const run_result& r) { *result_cell = r; },
            };
          },
          published, result);
  net.prepare();
  spawn_job(*net.syncer.sys, setup, syncer_main);
  for (int i = 0; i < 100 && *published == 0; ++i) net.run_once();
  EXPECT_EQ(*published, k_port);

  // Learner node.
  auto node = std::make_shared<learner_node_ctx>();
  node->exp = e;
  node->data = setup->data;  // the same file; this node's own copy would be identical
  node->data_hash = setup->data_hash;
  node->data_bytes = setup->data_bytes;
  caf::actor_system* lsys = net.learner.sys.get();
  const double t0 = clock_seconds(lsys->clock().now());
  node->log = std::make_unique<run_log>(
      std::string{}, true, [lsys, t0] { return clock_seconds(lsys->clock().now()) - t0; });
  node->log->set_tap([node_raw = node.get()](const std::string& line) {
    if (node_raw->pending_lines.size() < (size_t{1} << 20)) node_raw->pending_lines += line;
  });
  node->faults = std::make_unique<fault_hooks>(faults.learner_side, node->log.get());
  node->drain_at_s = drain_at_s;
  node->drain_learner = 1;
  net.learner.sys->spawn(mux_learner_node, node);

  bool dropped = false;
  size_t guard = 0;
  // Bounded in logical time: the run takes about 10 s of it; the middleman heartbeat keeps
  // timeouts pending for ever, so "nothing left to do" never comes by itself.
  while (!(result->finished && node->done) && guard++ < 2'000'000 && net.now() < 120.0) {
    if (!dropped && faults.drop_at_s >= 0 && net.now() >= faults.drop_at_s) {
      dropped = true;
      net.drop();
      net.prepare();  // where the learner node's reconnect lands
    }
    if (!net.run_once()) break;
  }
  mux_outcome out;
  out.end_s = net.now();
  if (std::getenv("DD_MUX_DEBUG") != nullptr) {
    for (const auto& ev : node->log->events()) std::printf("L %s\n", ev.dump().c_str());
    for (const auto& ev : setup->log->events())
      if (ev["event"] != "merge") std::printf("S %s\n", ev.dump().c_str());
  }
  // Shut both nodes down; let the exits reach every actor before the systems go away.
  caf::anon_send_exit(syncer_main, caf::exit_reason::user_shutdown);
  for (int i = 0; i < 50 && net.run_once(); ++i) {}
  out.result = *result;
  out.syncer_events = setup->log->events();
  out.learner_events = node->log->events();
  out.kinds = net.tap.kinds();
  out.directed = net.tap.directed();
  out.fired_learner = node->faults->fired();
  out.fired_syncer = setup->faults->fired();
  out.node = node;
  out.connections = net.connections;
  setup->log->set_clock([] { return 0.0; });  // the manual clocks go away with the nodes
  node->log->set_clock([] { return 0.0; });
  return out;
}

/// The invariants of cluster_sim_test over the syncer's merge events (tests/support/
/// invariants.hpp; the owners hear of a membership change within 0.5 s of logical time), and:
/// every learner but `drained` reaches the end of its budget (48 steps); every incarnation that
/// joined again (a respawned learner actor, or a live learner rejoining after the dropped link)
/// with enough of the run left contributes to a later merge.
void check_invariants(const mux_outcome& o, const config::experiment& e, int32_t drained = -1) {
  ASSERT_TRUE(o.result.finished);
  const auto checker = dd::test::expect_merge_invariants(o.syncer_events, e, 0.5);
  auto contributions = checker.contributions_by_incarnation();  // (learner, incarnation) → merges
  const auto& last_version = checker.last_versions();
  const size_t merges = checker.merges();
  EXPECT_GT(merges, 10u);
  EXPECT_EQ(last_version.size(), 2u);  // both fragments merged
  size_t rejoins = 0;
  for (const auto& ev : o.syncer_events) {
    if (ev["event"] != "rejoin") continue;
    ++rejoins;
    const int id = ev["learner"];
    const uint64_t inc = ev["incarnation"];
    bool superseded = false;
    for (const auto& later : o.syncer_events)
      if (later["event"] == "rejoin" && later["learner"] == id && later["incarnation"] > inc)
        superseded = true;
    if (!superseded && id != drained && ev["resume_step"].get<uint64_t>() + 8 < 48) {
      EXPECT_GT((contributions[{id, inc}]), 0)
          << "learner " << id << " incarnation " << inc << " never contributed after joining again";
    }
  }
  EXPECT_GT(rejoins, 0u);
  std::map<int, uint64_t> final_step;
  for (const auto& ev : o.learner_events)
    if (ev["event"] == "learner_done") final_step[ev["learner"].get<int>()] = ev["step"];
  for (int i = 0; i < 3; ++i) {
    if (i == drained) {
      EXPECT_LT(final_step[i], 48u) << "the drained learner ran to the end";
    } else {
      EXPECT_EQ(final_step[i], 48u) << "learner " << i;
    }
  }
}

void print_kinds(const mux_outcome& o) {
  std::string line;
  for (const auto& [k, n] : o.directed) line += "  " + k + ": " + std::to_string(n) + "\n";
  std::printf("message kinds on the wire:\n%s", line.c_str());
}

TEST(cluster_mux, every_message_kind_crosses_the_simulated_network_and_faults_keep_the_invariants) {
  const uint64_t seed = 20260611;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  auto e = tiny_experiment("mux_faults");
  const auto faults = seeded_faults(seed);
  auto o = run_two_nodes(e, faults, ::testing::TempDir() + "dd_mux_faults", 3.5);
  print_kinds(o);
  check_invariants(o, e, /*drained=*/1);
  // Every kind of the protocol crossed the wire, serialized, in its direction.
  for (const auto& k : dd::test::protocol_kinds())
    EXPECT_GT(o.directed.count(k) ? o.directed.at(k) : 0u, 0u) << k << " never crossed";
  EXPECT_GT(o.kinds["basp:server_handshake"], 1u);  // the first connection and the reconnect
  EXPECT_GT(o.kinds["basp:down_message"], 0u);      // the killed learner's down reached the monitor
  EXPECT_GT(o.kinds["basp:heartbeat"], 0u);         // the middleman heartbeat is on
  EXPECT_EQ(o.connections, 2);
  // The faults fired where they were scheduled.
  ASSERT_EQ(o.fired_learner.size(), faults.learner_side.size());
  ASSERT_EQ(o.fired_syncer.size(), 1u);
  EXPECT_EQ(o.fired_syncer[0].spec.what, fault_kind::kill_owner);
  bool killed = false;
  for (const auto& f : o.fired_learner)
    if (f.spec.what == fault_kind::kill_learner) {
      killed = true;
      EXPECT_EQ(f.step, faults.learner_side[0].at_step);
    }
  EXPECT_TRUE(killed);
  // The dropped connection: the node reconnected once and its learners rejoined.
  EXPECT_EQ(o.node->rejoins, 1);
  size_t lost = 0, back = 0;
  for (const auto& ev : o.learner_events) {
    if (ev["event"] == "syncer_lost") ++lost;
    if (ev["event"] == "syncer_back") ++back;
  }
  EXPECT_EQ(lost, 1u);
  EXPECT_EQ(back, 1u);
  // Operator requests answered across the network.
  auto status = nlohmann::json::parse(o.node->status_json);
  EXPECT_TRUE(status.contains("learners")) << o.node->status_json;
  EXPECT_NE(o.node->drain_reply.find("stops at its next step"), std::string::npos)
      << o.node->drain_reply;
  EXPECT_GT(o.result.summary["learner_restarts"].get<int>(), 0);
  EXPECT_LT(o.result.final_val_loss, 5.0);  // ln 256 ≈ 5.55 untrained
}

TEST(cluster_mux, the_same_seed_gives_the_same_run) {
  const uint64_t seed = 99;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  auto e = tiny_experiment("mux_determinism");
  const auto faults = seeded_faults(seed);
  auto a = run_two_nodes(e, faults, ::testing::TempDir() + "dd_mux_det_a", -1.0);
  auto b = run_two_nodes(e, faults, ::testing::TempDir() + "dd_mux_det_b", -1.0);
  check_invariants(a, e);
  check_invariants(b, e);
  EXPECT_NE(a.result.digest, 0u);
  EXPECT_EQ(a.result.digest, b.result.digest);
  EXPECT_EQ(a.result.summary["merges"], b.result.summary["merges"]);
  EXPECT_EQ(a.result.final_val_loss, b.result.final_val_loss);
  EXPECT_EQ(a.kinds, b.kinds);
  EXPECT_DOUBLE_EQ(a.end_s, b.end_s);
}

}  // namespace
}  // namespace dd::actors
