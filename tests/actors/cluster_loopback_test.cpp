// tests/actors/cluster_loopback_test.cpp — the two-node test of cluster_mux_test over real
// loopback TCP: in one test process, a syncer node (run_job with role syncer: its own actor
// system with the middleman, the monitor published on port 0 with SO_REUSEADDR behind the frame
// guard) and a learner node (run_learner_node: its own actor system, 3 learners), joined through
// a relay in the test that taps every byte (tests/actors/basp_tap.hpp) and can cut the link.
// Short middleman heartbeats (0.2 s / 1 s). A third actor system plays the operator (dd-node
// status / drain, and a push of the wrong shape that the owner must refuse), before the cut.
//
// A seeded fault run: a learner actor killed at a seeded step (the experiment's chaos, applied in
// the learner node), a delayed push, the link cut after a seeded number of pushes (the node
// reconnects and its learners rejoin), a learner drained by the operator. Asserted: every message
// kind of the protocol crossed the real network; versions only increase, no push merged twice,
// weights sum to 1, no merge below quorum; the learners not drained reach their budget. Bounded
// in time: both nodes are interrupted after 120 s.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>
#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <nlohmann/json.hpp>

#include "actors/link/atoms.hpp"
#include "actors/nodes/job_runner.hpp"
#include "actors/nodes/learner_node.hpp"
#include "actors/nodes/node_config.hpp"
#include "messages/codec.hpp"
#include "messages/control.hpp"
#include "runtime/config/loader.hpp"
#include "runtime/quantize.hpp"
#include "runtime/rng.hpp"
#include "tests/actors/basp_tap.hpp"
#include "tests/actors/process_support.hpp"
#include "tests/support/invariants.hpp"
#include "util/net.hpp"

namespace dd::actors {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

/// A TCP relay on 127.0.0.1:0 to 127.0.0.1:`upstream` that feeds both directions of every
/// connection to the tap ("learner>syncer#N" / "syncer>learner#N") and cuts every open
/// connection once the tap has seen `cut_after_pushes` pushes (0 = never).
class tap_relay {
 public:
  tap_relay(uint16_t upstream, dd::test::basp_tap& tap, uint64_t cut_after_pushes)
      : upstream_(upstream), tap_(tap), cut_after_(cut_after_pushes) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(listen_fd_, 16) != 0 ||
        ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      throw std::runtime_error("tap_relay: cannot listen on 127.0.0.1");
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { loop(); });
  }
  ~tap_relay() {
    stop_ = true;
    thread_.join();
    for (auto& p : pairs_) close_pair(p);
    ::close(listen_fd_);
  }
  uint16_t port() const { return port_; }
  bool cut_done() const { return cut_done_; }
  int connections() const { return connections_; }

 private:
  struct pair {
    int down = -1, up = -1;  ///< the client's socket, the syncer's socket
    std::string to_syncer, to_learner;
  };

  static void close_pair(pair& p) {
    for (int* fd : {&p.down, &p.up})
      if (*fd >= 0) {
        ::shutdown(*fd, SHUT_RDWR);
        ::close(*fd);
        *fd = -1;
      }
  }

  void loop() {
    std::vector<char> buf(1 << 16);
    while (!stop_) {
      std::vector<pollfd> fds{{listen_fd_, POLLIN, 0}};
      for (auto& p : pairs_) {
        fds.push_back({p.down, POLLIN, 0});
        fds.push_back({p.up, POLLIN, 0});
      }
      if (::poll(fds.data(), fds.size(), 50) <= 0) continue;
      if (fds[0].revents & POLLIN) {
        pair p;
        p.down = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        p.up = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons(upstream_);
        if (p.down >= 0 && ::connect(p.up, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
          const std::string n = "#" + std::to_string(++connections_);
          p.to_syncer = "learner>syncer" + n;
          p.to_learner = "syncer>learner" + n;
          pairs_.push_back(p);
        } else {
          close_pair(p);
        }
        continue;  // fds no longer matches pairs_
      }
      for (size_t i = 0; i < pairs_.size(); ++i) {
        auto& p = pairs_[i];
        for (int side = 0; side < 2; ++side) {
          const auto& f = fds[1 + 2 * i + static_cast<size_t>(side)];
          if ((f.revents & (POLLIN | POLLHUP | POLLERR)) == 0 || p.down < 0) continue;
          const int from = side == 0 ? p.down : p.up, to = side == 0 ? p.up : p.down;
          const ssize_t r = ::recv(from, buf.data(), buf.size(), 0);
          if (r <= 0 || dd::util::write_all(to, buf.data(), static_cast<size_t>(r)) != 0) {
            close_pair(p);
            continue;
          }
          tap_.feed(side == 0 ? p.to_syncer : p.to_learner, buf.data(), static_cast<size_t>(r));
        }
      }
      if (cut_after_ > 0 && !cut_done_ && tap_.count("dd_push") >= cut_after_) {
        cut_done_ = true;
        for (auto& p : pairs_) close_pair(p);
      }
      pairs_.erase(
          std::remove_if(pairs_.begin(), pairs_.end(), [](const pair& p) { return p.down < 0; }),
          pairs_.end());
    }
  }

  uint16_t upstream_;
  dd::test::basp_tap& tap_;
  uint64_t cut_after_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::vector<pair> pairs_;
  std::atomic<bool> stop_{false}, cut_done_{false};
  std::atomic<int> connections_{0};
  std::thread thread_;
};

/// Polls `pred` every 20 ms for at most `seconds`.
bool wait_until(const std::function<bool()>& pred, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(milliseconds(20));
  }
  return pred();
}

/// The experiment, loaded from DSL text as dd-node loads a file (so it is fully resolved and
/// crosses to the learner node intact): a small GPT, 3 learners, 2 fragments, H = 8, 300 steps;
/// a seeded learner kill and a delayed push (chaos.events, applied in the learner node).
config::experiment loopback_experiment(const std::string& run_dir, uint64_t seed, int* kill_target,
                                       int* kill_step) {
  rng r(seed);
  *kill_target = static_cast<int>(r.below(3));
  *kill_step = static_cast<int>(40 + r.below(60));
  const int delay_target = (*kill_target + 1) % 3;
  const int delay_step = static_cast<int>(20 + r.below(40));
  const std::string script =
      "experiment { name = 'loopback', seed = 11,\n"
      "  data = { file = '" +
      std::string(DD_DATA_DIR) +
      "/tinyshakespeare/input.txt' },\n"
      "  model = { layers = 2, width = 64, heads = 4, context = 64 },\n"
      "  learners = { count = 3, batch = 8, threads = 1 },\n"
      "  inner = { lr = 3e-3, warmup = 10 },\n"
      "  sync = { fragments = 2, interval = 8, overlap = 2, min_quorum = 1 },\n"
      "  outer = { momentum = 0.5 },\n"
      "  eval = { every_seconds = 1, batches = 2 },\n"
      "  checkpoint = { every_versions = 1 },\n"
      "  budget = { steps = 300 },\n"
      "  chaos = { events = {\n"
      "    { at_step = " +
      std::to_string(*kill_step) + ", action = 'kill', target = " + std::to_string(*kill_target) +
      ", duration = 0.2 },\n"
      "    { at_step = " +
      std::to_string(delay_step) +
      ", action = 'delay_push', target = " + std::to_string(delay_target) +
      ", delay = 0.2 } } } }\n";
  config::load_options lo;
  lo.run_dir = run_dir;
  auto loaded = config::load_string(script, "loopback.lua", lo);
  if (!loaded.ok() || loaded.experiments.size() != 1)
    throw std::runtime_error("loopback.lua: " + loaded.error_text());
  return loaded.experiments.front();
}

/// The merge invariants of cluster_sim_test over a syncer's events (tests/support/
/// invariants.hpp; over real TCP an owner hears of a membership change within a second).
void check_merges(const std::vector<nlohmann::json>& events, const config::experiment& e) {
  const auto checker = dd::test::expect_merge_invariants(events, e, 1.0);
  const size_t merges = checker.merges();
  const auto& last_version = checker.last_versions();
  EXPECT_GT(merges, 20u);
  EXPECT_EQ(last_version.size(), 2u);
}

TEST(cluster_loopback, two_nodes_over_real_tcp_carry_every_message_kind_and_keep_the_invariants) {
  const uint64_t seed = 20260612;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const fs::path dir = dd::test::fresh_dir("dd_loopback");
  int kill_target = 0, kill_step = 0;
  const auto e = loopback_experiment((dir / "syncer").string(), seed, &kill_target, &kill_step);
  rng r(derive_seed(seed, 0x637574));
  const uint64_t cut_after = 40 + r.below(40);
  std::printf("kill learner %d at step %d; link cut after %llu pushes\n", kill_target, kill_step,
              static_cast<unsigned long long>(cut_after));
  std::fflush(stdout);

  node_transport transport;
  transport.heartbeat_s = 0.2;
  transport.connection_timeout_s = 1.0;
  std::atomic<int> interrupt{0};

  // Syncer node.
  std::atomic<uint16_t> port{0};
  run_options ro;
  ro.role = node_role::syncer;
  ro.listen_host = "127.0.0.1";
  ro.listen_port = 0;
  ro.on_published = [&port](uint16_t p) { port = p; };
  ro.transport = transport;
  ro.progress_every_s = 0;
  ro.interrupt = &interrupt;
  ro.interrupt_timeout_s = 10.0;
  run_result result;
  std::atomic<bool> syncer_done{false};
  std::thread syncer([&] {
    result = run_job(e, ro);
    syncer_done = true;
  });
  ASSERT_TRUE(wait_until([&] { return port != 0; }, 30.0)) << "the syncer never published";

  dd::test::basp_tap tap;
  tap_relay relay(port, tap, cut_after);

  // Learner node.
  learner_node_options lo;
  lo.join = {{"127.0.0.1", relay.port()}};
  lo.learners = 3;
  lo.threads = 1;
  lo.run_dir = (dir / "learners").string();
  lo.node_name = "loopback-learners";
  lo.backoff_base_s = 0.2;
  lo.backoff_cap_s = 1.0;
  lo.connect_timeout_s = 2.0;
  lo.progress_every_s = 0;
  lo.seed = seed;
  lo.transport = transport;
  lo.interrupt = &interrupt;
  int node_status = -1;
  std::atomic<bool> node_done{false};
  std::thread learners([&] {
    node_status = run_learner_node(lo);
    node_done = true;
  });

  // The operator: its own node, through the same relay.
  node_config ocfg(transport);
  caf::actor_system osys{ocfg};
  std::string lookup_error;
  auto monitor_via_relay = [&]() -> monitor_hdl {
    auto m = osys.middleman().remote_actor<monitor_hdl>("127.0.0.1", relay.port());
    if (!m) lookup_error = osys.render(m.error());
    return m ? *m : monitor_hdl{};
  };
  const bool joined =
      wait_until([&] { return tap.count("dd_join reply") >= 3 || node_done; }, 60.0) && !node_done;
  EXPECT_TRUE(joined) << "the learners never joined";
  std::string status_json, drain_reply;
  bool refused = false;
  if (joined) {
    caf::scoped_actor self{osys};
    auto monitor = monitor_via_relay();
    ASSERT_TRUE(monitor) << lookup_error;
    // dd-node status names no run; the reply's envelope names it.
    std::string run_id;
    self->request(monitor, std::chrono::seconds(5), atoms::status_atom_v, encode(status_request{}))
        .receive(
            [&](const std::vector<uint8_t>& bytes) {
              auto header = peek_envelope(bytes);
              ASSERT_TRUE(header.ok());
              run_id = header->run_id;
              auto rep = decode_status_reply(bytes, {}, {run_id, 0});
              ASSERT_TRUE(rep.ok()) << rep.error().message;
              status_json = rep->json;
            },
            [](caf::error&) {});
    EXPECT_EQ(run_id.size(), 16u);
    // A push of the wrong shape from no learner: the owner refuses it to the sender.
    // Typed owner handles, across the middleman (type IDs: actors/link/protocol.hpp).
    std::vector<owner_hdl> owners(2);
    self->request(monitor, std::chrono::seconds(5), caf::get_atom::value, atoms::owners_atom_v)
        .receive(
            [&](const std::vector<uint8_t>& bytes, const std::vector<owner_hdl>& handles) {
              auto directory = decode_owner_directory(bytes, {}, {run_id, 0});
              ASSERT_TRUE(directory.ok()) << directory.error().message;
              ASSERT_EQ(directory->fragment_ids.size(), handles.size());
              for (size_t i = 0; i < handles.size(); ++i)
                owners.at(static_cast<size_t>(directory->fragment_ids[i])) = handles[i];
            },
            [](caf::error&) {});
    ASSERT_TRUE(owners[0] && owners[1]);
    push_msg bogus;
    bogus.learner_id = 2;
    bogus.fragment_id = 0;
    bogus.transfer_id = 1;
    bogus.encoding = payload_encoding::fp32;
    bogus.total_elements = 3;
    const std::vector<float> three{1.0f, 2.0f, 3.0f};
    bogus.payload = encode_payload(payload_encoding::fp32, three.data(), three.size());
    bogus.payload_bytes = bogus.payload.size();
    self->send(owners[0], atoms::push_atom_v, encode(bogus, {run_id, 0}), uint64_t{0});
    self->receive([&](atoms::reject_atom, const std::vector<uint8_t>&) { refused = true; },
                  caf::after(std::chrono::seconds(5)) >> [] {});
    // Drain learner 1 (dd-node drain learner:1): it stops at its next step and leaves.
    self->request(monitor, std::chrono::seconds(5), atoms::drain_atom_v,
                  encode(drain_msg{1}, {run_id, 0}))
        .receive(
            [&](const std::vector<uint8_t>& bytes) {
              auto rep = decode_drain_reply(bytes, {}, {run_id, 0});
              ASSERT_TRUE(rep.ok()) << rep.error().message;
              EXPECT_TRUE(rep->accepted);
              drain_reply = rep->detail;
            },
            [](caf::error&) {});
  }
  // After the cut, the node reconnects and hands in its learners again.
  const bool rejoined =
      wait_until(
          [&] { return (relay.cut_done() && tap.count("dd_njoin reply") >= 3) || node_done; },
          60.0) &&
      !node_done;
  EXPECT_TRUE(rejoined) << "the learner node never reconnected after the cut";
  // Bounded: interrupt both nodes after 120 s.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  std::thread watchdog([&] {
    while (std::chrono::steady_clock::now() < deadline && interrupt == 0 && !syncer_done)
      std::this_thread::sleep_for(milliseconds(100));
    if (!syncer_done && interrupt == 0) interrupt = SIGTERM;
  });
  learners.join();
  syncer.join();
  interrupt = interrupt.load() == 0 ? -1 : interrupt.load();  // ends the watchdog
  watchdog.join();

  const auto directed = tap.directed();
  std::string line;
  for (const auto& [k, n] : directed) line += "  " + k + ": " + std::to_string(n) + "\n";
  std::printf("message kinds on the wire (%llu bytes):\n%s",
              static_cast<unsigned long long>(tap.bytes()), line.c_str());
  EXPECT_TRUE(result.finished);
  EXPECT_FALSE(result.interrupted) << "the run did not end within 120 s";
  EXPECT_EQ(node_status, node_exit_ok);
  for (const auto& k : dd::test::protocol_kinds())
    EXPECT_GT(directed.count(k) ? directed.at(k) : 0u, 0u) << k << " never crossed";
  EXPECT_TRUE(refused) << "the owner did not refuse a push of the wrong shape";
  EXPECT_TRUE(nlohmann::json::parse(status_json.empty() ? "{}" : status_json).contains("learners"))
      << status_json;
  EXPECT_NE(drain_reply.find("stops at its next step"), std::string::npos) << drain_reply;

  const auto syncer_events = dd::test::events(dir / "syncer" / "events.jsonl");
  const auto learner_events = dd::test::events(dir / "learners" / "events.jsonl");
  check_merges(syncer_events, e);
  // The faults fired; the cut made the node reconnect.
  bool killed = false, lost = false, back = false;
  for (const auto& ev : learner_events) {
    if (ev["event"] == "fault" && ev["fault"] == "kill_learner") killed = true;
    if (ev["event"] == "syncer_lost") lost = true;
    if (ev["event"] == "syncer_back") back = true;
  }
  EXPECT_TRUE(killed);
  EXPECT_TRUE(lost);
  EXPECT_TRUE(back);
  EXPECT_GE(relay.connections(), 3);  // learner node twice, operator once
  std::map<int, uint64_t> final_step;
  for (const auto& ev : learner_events)
    if (ev["event"] == "learner_done") final_step[ev["learner"].get<int>()] = ev["step"];
  EXPECT_EQ(final_step[0], 300u);
  EXPECT_EQ(final_step[2], 300u);
  EXPECT_LT(final_step[1], 300u);  // drained
  EXPECT_GT(result.summary.value("learner_restarts", 0), 0);
}

}  // namespace
}  // namespace dd::actors

// A learner node that rejoined through a
// link still corrupting bytes had its node_join garbled on the way, was refused as a bad request
// and exited 2 ("bad flags"), so its learner missed the rest of the run. A refusal the link can
// cause, or that time can lift, is asked again; the others are final.
TEST(learner_node_refusals, a_garbled_request_and_no_free_id_are_asked_again_the_rest_are_final) {
  using dd::node_refusal;
  EXPECT_TRUE(dd::actors::refusal_is_retried(node_refusal::bad_request));
  EXPECT_TRUE(dd::actors::refusal_is_retried(node_refusal::no_free_learner));
  for (auto r : {node_refusal::other_run, node_refusal::protocol_version,
                 node_refusal::data_mismatch, node_refusal::run_finished, node_refusal::none})
    EXPECT_FALSE(dd::actors::refusal_is_retried(r)) << to_string(r);
}

// A CAF handshake
// damaged on the way carried garbled interface signatures, the typed lookup of monitor_hdl failed
// with unexpected_actor_messaging_interface, and CAF's middleman kept that connection and
// answered every later lookup of the same host and port from it, without connecting: the node
// failed every rejoin for the rest of the run. Here a published actor of another interface gives
// the same error; the node shuts its sockets to the syncer down, and the next lookup connects
// afresh.
TEST(learner_node_lookup,
     a_lookup_refused_for_its_interface_is_not_answered_from_a_kept_connection) {
  using namespace dd::actors;
  node_transport fast;
  fast.heartbeat_s = 0.2;
  fast.connection_timeout_s = 1.0;
  node_config server_cfg(fast);
  caf::actor_system server{server_cfg};
  using other_hdl = caf::typed_actor<caf::reacts_to<int32_t>>;
  auto other = server.spawn([]() -> other_hdl::behavior_type { return {[](int32_t) {}}; });
  auto port = server.middleman().publish(other, 0, "127.0.0.1", true);
  ASSERT_TRUE(port) << server.render(port.error());
  node_config client_cfg(fast);
  caf::actor_system client{client_cfg};
  const std::vector<std::pair<std::string, uint16_t>> syncer{{"127.0.0.1", *port}};
  auto first = client.middleman().remote_actor<monitor_hdl>("127.0.0.1", *port);
  ASSERT_FALSE(first);
  const std::string error = client.render(first.error());
  EXPECT_TRUE(lookup_error_leaves_stale_connection(error)) << error;
  EXPECT_TRUE(lookup_error_leaves_stale_connection("system_error(disconnect_during_handshake)"));
  EXPECT_FALSE(lookup_error_leaves_stale_connection("Connection refused"));
  EXPECT_FALSE(lookup_error_leaves_stale_connection("system_error(request_timeout)"));
  // The failed lookup left its connection open in CAF.
  EXPECT_EQ(shutdown_connections_to(syncer), 1);
  // Shut down, the connection is dropped by CAF together with what it cached; the next lookup
  // opens a new one (which is again refused for its interface, and again left open).
  std::this_thread::sleep_for(milliseconds(500));
  EXPECT_EQ(shutdown_connections_to(syncer), 0) << "CAF kept the shut-down connection";
  auto again = client.middleman().remote_actor<monitor_hdl>("127.0.0.1", *port);
  ASSERT_FALSE(again);
  EXPECT_EQ(shutdown_connections_to(syncer), 1) << "the lookup was answered without connecting";
  caf::anon_send_exit(other, caf::exit_reason::user_shutdown);
}
