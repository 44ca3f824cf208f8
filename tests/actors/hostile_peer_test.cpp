// Hostile peers against a real syncer process (dd-node syncer + one dd-node learner process on
// loopback): a TCP client that sends garbage, one that announces an oversized CAF frame, and a
// CAF peer that lies — another run id, another protocol version, different data, a learner join
// without a node handshake, pushes of the wrong shape, with NaN, from an unknown learner, and an
// envelope of another schema version, a push damaged on the way. Each is refused with a logged
// reason; the syncer keeps serving its learner (merges go on, the run completes) and its peak RSS
// stays bounded (printed).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <nlohmann/json.hpp>

#include "tests/actors/process_support.hpp"
#include "tests/support/tiny_lua.hpp"
#include "tests/support/wire_msgs.hpp"

#include "actors/link/atoms.hpp"
#include "actors/nodes/node_config.hpp"
#include "messages/codec.hpp"
#include "messages/control.hpp"
#include "util/net.hpp"

namespace {

namespace fs = std::filesystem;
using namespace dd::test;
using nlohmann::json;

uint16_t free_port() { return dd::util::free_loopback_port(); }

long status_kib(pid_t pid, const char* field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field, 0) == 0) return std::stol(line.substr(std::strlen(field) + 1));
  return -1;
}

int connect_raw(uint16_t port) { return dd::util::connect_loopback(port); }

/// Refusal reason of a node handshake, or "accepted".
std::string handshake(caf::scoped_actor& self, const dd::actors::monitor_hdl& monitor,
                      const dd::node_join& j) {
  std::string out = "no answer";
  // The envelope names the run the body names (empty: any, a first start).
  self->request(monitor, std::chrono::seconds(5), dd::atoms::node_join_atom_v,
                dd::encode(j, {j.run_id, 0}))
      .receive(
          [&](const std::vector<uint8_t>& bytes) {
            auto header = dd::peek_envelope(bytes);
            auto r = dd::decode_node_join_reply(bytes, {}, {header ? header->run_id : "", 0});
            out = !r            ? "undecodable"
                  : r->accepted ? "accepted"
                                : std::string(to_string(r->refusal));
          },
          [&](caf::error&) { out = "error"; });
  return out;
}

}  // namespace

TEST(hostile_peers, every_lie_is_refused_with_a_reason_and_the_syncer_keeps_serving) {
  const fs::path dir = dd::test::fresh_dir("dd_hostile");
  dd::test::tiny_lua t;
  t.learners = 2;
  t.sync_extra = ", min_quorum = 1";
  t.budget = "{ seconds = 16 }";
  t.checkpoint_every = 0;
  std::ofstream(dir / "tiny.lua") << t.text();
  const uint16_t port = free_port();
  const std::string addr = "127.0.0.1:" + std::to_string(port);
  const pid_t syncer = spawn(
      dir,
      {DD_NODE_BIN, "syncer", "tiny.lua", "--listen", addr, "--run-dir", "run", "--progress", "0"},
      (dir / "syncer.out").string());
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const pid_t learner = spawn(dir,
                              {DD_NODE_BIN, "learner", "--join", addr, "--learner-ids", "1",
                               "--node-name", "honest", "--progress", "0"},
                              (dir / "learner.out").string());
  // Wait until the honest learner trains.
  for (int i = 0; i < 100; ++i) {
    bool joined = false;
    for (const auto& e : events(dir / "run" / "events.jsonl"))
      if (e["event"] == "join") joined = true;
    if (joined) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const long rss_before = status_kib(syncer, "VmRSS:");
  // 0. 100 strangers, each announcing the largest frame the guard allows and sending none of
  //    it. CAF allocates (and zero-fills) what a forwarded header announces, so the guard lets
  //    strangers' frames hold at most its stranger budget: the syncer's RSS stays under idle +
  //    that budget (without it, 60 such connections take it from 36 MB to 4.95 GB), the rest are
  //    refused (frame_refused events), and the honest learner trains on.
  uint64_t max_frame = 0, stranger_budget = 0;
  for (const auto& e : events(dir / "run" / "events.jsonl"))
    if (e["event"] == "listening") {
      max_frame = e["max_frame_bytes"].get<uint64_t>();
      stranger_budget = e["stranger_bytes"].get<uint64_t>();
    }
  ASSERT_GT(max_frame, 0u);
  ASSERT_GT(stranger_budget, 0u);
  long rss_strangers = 0;
  {
    std::vector<int> fds;
    for (int i = 0; i < 100; ++i) {
      const int fd = connect_raw(port);
      ASSERT_GE(fd, 0);
      unsigned char h[32] = {0};
      h[0] = 1;  // client_handshake
      const uint32_t len = htonl(static_cast<uint32_t>(max_frame));
      std::memcpy(h + 4, &len, 4);
      ssize_t w = ::write(fd, h, sizeof h);
      (void)w;
      fds.push_back(fd);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2000));
    rss_strangers = status_kib(syncer, "VmRSS:");
    for (int fd : fds) ::close(fd);
  }
  std::printf(
      "100 strangers announcing %llu-byte frames (stranger budget %llu): syncer RSS %ld "
      "KiB idle, %ld KiB with them (+%ld KiB)\n",
      static_cast<unsigned long long>(max_frame), static_cast<unsigned long long>(stranger_budget),
      rss_before, rss_strangers, rss_strangers - rss_before);
  EXPECT_LT(rss_strangers - rss_before, static_cast<long>(stranger_budget / 1024) + 16 * 1024)
      << "the strangers made the syncer hold more than its stranger budget (+16 MiB)";
  // 1. Garbage bytes.
  {
    int fd = connect_raw(port);
    ASSERT_GE(fd, 0);
    std::vector<char> junk(64 * 1024);
    for (size_t i = 0; i < junk.size(); ++i) junk[i] = static_cast<char>(i * 131 + 7);
    ssize_t w = ::write(fd, junk.data(), junk.size());
    (void)w;
    ::close(fd);
  }
  // 2. A CAF frame header announcing ~3.9 GiB (BASP: operation, 2 padding bytes, flags,
  //    payload_len u32, operation_data u64, source u64, dest u64; network byte order).
  {
    int fd = connect_raw(port);
    ASSERT_GE(fd, 0);
    unsigned char h[32] = {0};
    h[0] = 1;  // client_handshake: CAF would allocate the announced payload at once
    const uint32_t len = htonl(0xF0000000u);
    std::memcpy(h + 4, &len, 4);
    ssize_t w = ::write(fd, h, sizeof h);
    (void)w;
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    ::close(fd);
  }
  // 3. A CAF peer that lies.
  {
    dd::actors::node_config cfg;
    caf::actor_system sys{cfg};
    // The monitor is published typed: a lookup that expects another interface (here none, an
    // untyped handle) is refused by CAF at the lookup, before any message is sent.
    auto untyped = sys.middleman().remote_actor("127.0.0.1", port);
    EXPECT_FALSE(untyped) << "an untyped lookup of the typed monitor succeeded";
    auto monitor = sys.middleman().remote_actor<dd::actors::monitor_hdl>("127.0.0.1", port);
    ASSERT_TRUE(monitor) << sys.render(monitor.error());
    caf::scoped_actor self{sys};
    dd::node_join j;
    j.node_name = "stranger";
    j.run_id = "0123456789abcdef";
    EXPECT_EQ(handshake(self, *monitor, j), "otherRun");
    j.run_id.clear();
    j.protocol_version = dd::protocol_version + 7;
    EXPECT_EQ(handshake(self, *monitor, j), "protocolVersion");
    j.protocol_version = dd::protocol_version;
    j.learner_count = 1;
    j.data_bytes = 12;
    j.data_hash = "00";
    EXPECT_EQ(handshake(self, *monitor, j), "dataMismatch");
    // The run, as dd-node status learns it (a status request may name no run).
    std::string run_id;
    self->request(*monitor, std::chrono::seconds(5), dd::atoms::status_atom_v,
                  dd::encode(dd::status_request{}))
        .receive(
            [&](const std::vector<uint8_t>& bytes) {
              auto header = dd::peek_envelope(bytes);
              if (header) run_id = header->run_id;
            },
            [&](caf::error&) {});
    ASSERT_FALSE(run_id.empty());
    // A learner join without a handshake (of this run).
    dd::join_request jr;
    jr.requested_learner_id = 1;
    bool refused = false;
    self->request(*monitor, std::chrono::seconds(5), dd::atoms::join_atom_v,
                  dd::encode(jr, {run_id, 0}),
                  caf::actor_cast<dd::actors::learner_at_syncer_hdl>(self))
        .receive([&](const std::vector<uint8_t>&) {}, [&](caf::error&) { refused = true; });
    EXPECT_TRUE(refused);
    // Pushes to an owner: wrong shape, NaN, an unknown learner, another schema version.
    std::vector<dd::actors::owner_hdl> owners(2);
    self->request(*monitor, std::chrono::seconds(5), caf::get_atom_v, dd::atoms::owners_atom_v)
        .receive(
            [&](const std::vector<uint8_t>& bytes,
                const std::vector<dd::actors::owner_hdl>& handles) {
              auto directory = dd::decode_owner_directory(bytes, {}, {run_id, 0});
              ASSERT_TRUE(directory.ok()) << directory.error().message;
              ASSERT_EQ(directory->fragment_ids.size(), handles.size());
              for (size_t i = 0; i < handles.size(); ++i)
                owners.at(static_cast<size_t>(directory->fragment_ids[i])) = handles[i];
            },
            [&](caf::error&) {});
    ASSERT_TRUE(owners[0] && owners[1]);
    dd::push_msg p = dd::test::push_header(1, 0, 0, 0, 4, 512, 900001);
    // 3 fp32 values of zero bytes: the wrong shape.
    dd::test::set_payload_bytes(p, dd::payload_encoding::fp32, 3, [](size_t) { return 0; });
    self->send(owners[0], dd::atoms::push_atom_v, dd::encode(p, {run_id, 0}), uint64_t{0});
    self->request(*monitor, std::chrono::seconds(5), dd::atoms::status_atom_v,
                  dd::encode(dd::status_request{}, {run_id, 0}))
        .receive([&](const std::vector<uint8_t>&) {}, [&](caf::error&) {});
    p.learner_id = 7;  // unknown learner
    p.transfer_id = 900002;
    self->send(owners[0], dd::atoms::push_atom_v, dd::encode(p, {run_id, 0}), uint64_t{0});
    // A push of another run: refused at its envelope, never applied.
    p.learner_id = 1;
    p.transfer_id = 900003;
    p.total_elements = 0;
    p.payload_bytes = 0;
    p.payload.clear();
    self->send(owners[0], dd::atoms::push_atom_v, dd::encode(p, {"feedfacefeedface", 0}),
               uint64_t{0});
    // A status request of another run is refused too (only one naming no run is answered).
    bool status_refused = false;
    self->request(*monitor, std::chrono::seconds(5), dd::atoms::status_atom_v,
                  dd::encode(dd::status_request{}, {"feedfacefeedface", 0}))
        .receive([&](const std::vector<uint8_t>&) {}, [&](caf::error&) { status_refused = true; });
    EXPECT_TRUE(status_refused);
    p.learner_id = 7;
    p.transfer_id = 900002;
    auto bytes = dd::encode(p, {run_id, 0});
    bytes[16] = 1 ^ 9;  // schemaVersion 9, sealed as its writer would
    dd::seal_message(bytes);
    self->send(owners[0], dd::atoms::push_atom_v, bytes, uint64_t{0});
    // A push damaged on the way (one bit, trailer not rewritten): refused by its checksum.
    p.transfer_id = 900003;
    auto damaged = dd::encode(p, {run_id, 0});
    damaged[damaged.size() / 2] ^= 0x08;
    self->send(owners[0], dd::atoms::push_atom_v, damaged, uint64_t{0});
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  EXPECT_EQ(::kill(syncer, 0), 0) << "the syncer died";
  const long hwm_after = status_kib(syncer, "VmHWM:");
  const long rss_after = status_kib(syncer, "VmRSS:");
  std::printf("syncer RSS %ld KiB before the hostile peers, %ld KiB after; peak %ld KiB\n",
              rss_before, rss_after, hwm_after);
  // A frame header announcing 3.75 GiB must not make the syncer allocate it.
  EXPECT_LT(hwm_after, 512L * 1024) << "peak RSS above 512 MiB";
  EXPECT_EQ(wait_for(syncer, 60), 0);
  EXPECT_EQ(wait_for(learner, 30), 0);
  const auto evs = events(dir / "run" / "events.jsonl");
  int refused_nodes = 0, refused_joins = 0, refused_pushes = 0, undecodable = 0, damaged_pushes = 0;
  double last_hostile = 0, last_merge = 0;
  for (const auto& e : evs) {
    const std::string k = e["event"];
    if (k == "node_refused") ++refused_nodes;
    if (k == "join_refused") ++refused_joins;
    if (k == "push" && !e["accepted"].get<bool>() && e["transfer_id"].get<uint64_t>() >= 900001) {
      ++refused_pushes;
      last_hostile = e["time"].get<double>();
    }
    if (k == "push" && !e["accepted"].get<bool>() &&
        e.value("detail", "").find("schemaVersion 9") != std::string::npos)
      ++undecodable;

    if (k == "push" && !e["accepted"].get<bool>() &&
        e.value("detail", "").find("message checksum") != std::string::npos)
      ++damaged_pushes;
    if (k == "merge") last_merge = e["time"].get<double>();
  }
  EXPECT_EQ(damaged_pushes, 1) << "the push damaged on the way";
  EXPECT_EQ(refused_nodes, 3);
  int refused_frames = 0, refused_strangers = 0;
  for (const auto& e : evs)
    if (e["event"] == "frame_refused") {
      ++refused_frames;
      // Past the strangers' budget or their count: "... not yet answered by the syncer ...".
      if (e.value("reason", "").find("not yet answered") != std::string::npos) ++refused_strangers;
    }
  // The strangers past the budget: all but the budget / max_frame that fit in it.
  EXPECT_EQ(refused_strangers, 100 - static_cast<int>(stranger_budget / max_frame));
  // The garbage (its bytes 4..7 read as a length of 0x1396199c bytes) and the 3.75 GiB header.
  EXPECT_EQ(refused_frames - refused_strangers, 2) << "the garbage and the oversized frame header";
  EXPECT_EQ(refused_joins, 1);
  EXPECT_GE(refused_pushes, 2) << "wrong-shape and unknown-learner pushes";
  EXPECT_GE(undecodable, 1) << "the push of another schema version";
  int other_run = 0, envelope_refused = 0;
  for (const auto& e : evs) {
    if (e["event"] != "envelope_refused") continue;
    ++envelope_refused;
    if (e.value("error", "").find("envelope.runId 'feedfacefeedface' is another run") !=
        std::string::npos)
      ++other_run;
  }
  EXPECT_EQ(other_run, 2) << "the push and the status request of another run";
  EXPECT_EQ(envelope_refused, 3) << "... and the push of another schema version";
  EXPECT_GT(last_merge, last_hostile) << "merges went on after the hostile peers";
  ASSERT_TRUE(fs::exists(dir / "run" / "summary.json"));
  const auto summary = nlohmann::json::parse(text(dir / "run" / "summary.json"));
  EXPECT_EQ(summary["frames_refused"].get<int>(), refused_frames) << summary.dump();
}
