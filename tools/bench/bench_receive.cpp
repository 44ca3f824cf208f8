// tools/bench/bench_receive.cpp — dd-bench-receive: what a fragment owner's receive path costs
// per chunk, in one process, without the network: CRC-32C (both implementations), decode_push
// with its payload copy + chunk_assembler::add(push_msg), and decode_push_ref +
// chunk_assembler::add(chunk_ref) (the path the owner and dd-bench-transport's receivers take),
// and that path with the transfer buffer recycled (chunk_assembler::recycle, as a learner does),
// and that with the payload's checksum computed while it is copied (a learner's broadcasts).
// docs/benchmarks-transport.md "Transport" gives the breakdown this measures.
//
// A fragment of --size-mb MiB (random fp32 bits) is split into --chunk-bytes chunks and encoded
// once, as a learner would send it; each round then runs every kind once over all chunks, in an
// order that rotates by round, after one warm-up round. The transfer buffer is fresh memory each
// round (a new transfer id), as in a syncer. Reported per kind: the median over --repeats rounds
// of the process CPU time (user + system: page faults count) and of the wall time, as MiB of
// fragment payload per second. The node's malloc setting is applied first (node_config: mmap
// threshold 1 MiB), so buffers behave as in dd-node.
#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "messages/codec.hpp"
#include "util/crc32c.hpp"
#include "util/flags.hpp"

namespace {

double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

struct kind {
  const char* name;
  std::function<void(uint64_t round)> run;
  std::vector<double> cpu, wall;
};

[[noreturn]] void fail(const std::string& why) {
  std::fprintf(stderr, "dd-bench-receive: %s\n", why.c_str());
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  int size_mb = 64, chunk_bytes = 4 << 20, repeats = 10;
  dd::util::flag_table flags(
      "dd-bench-receive", "[flags]",
      "A syncer's per-chunk receive work in one process: CRC-32C per "
      "implementation, decode and chunk assembly with and without the payload "
      "copy; CPU and wall MiB/s.");
  flags.count("--size-mb", &size_mb, 1, 1024, "N", "fragment payload, MiB (default 64)")
      .count("--chunk-bytes", &chunk_bytes, 8, 64 << 20, "N",
             "payload bytes per chunk (default 4194304)")
      .count("--repeats", &repeats, 1, 1000000, "N", "measured rounds after 1 warm-up (default 10)")
      .epilog("Exit status: 0 ok; 1 failure; 2 bad flags.\n");
  if (auto rc = flags.parse(argc, argv)) return *rc;
  mallopt(M_MMAP_THRESHOLD, 1 << 20);  // as actors/nodes/node_config.cpp

  const size_t elements = static_cast<size_t>(size_mb) << 18;  // MiB of fp32
  dd::push_msg whole;
  whole.learner_id = 1;
  whole.incarnation = 1;
  whole.total_elements = elements;
  whole.payload_bytes = elements * 4;
  whole.payload.resize(elements * 4);
  std::mt19937 rng(20261202);
  for (size_t i = 0; i < whole.payload.size(); i += 4) {
    const uint32_t v = static_cast<uint32_t>(rng());
    std::memcpy(&whole.payload[i], &v, 4);
  }
  auto split = dd::split_push(whole, static_cast<size_t>(chunk_bytes));
  if (!split) fail(split.error().message);
  const std::vector<dd::push_msg>& chunks = *split;
  dd::decode_limits dl;
  dl.max_message_bytes = std::max(dl.max_message_bytes, static_cast<size_t>(chunk_bytes) + 4096);
  dd::chunk_limits cl;
  cl.max_chunk_bytes = std::max(cl.max_chunk_bytes, static_cast<size_t>(chunk_bytes));
  std::vector<dd::wire_bytes> wire;
  for (const auto& c : chunks) wire.push_back(dd::encode(c, {"", c.incarnation}));
  whole.payload = {};

  // Every kind re-encodes nothing; a transfer's chunks are the same bytes each round, which is
  // fine: a completed transfer leaves the assembler, so the next round assembles afresh.
  uint32_t sink = 0;
  dd::chunk_assembler assembler{cl};
  auto check_whole = [&](const auto& r, size_t i) {
    if (!r) fail("chunk refused: " + r.error().message);
    if (r->has_value() != (i + 1 == wire.size())) fail("transfer completed at the wrong chunk");
    if (r->has_value()) sink ^= (*r)->payload[(*r)->payload.size() / 2];
  };
  std::vector<kind> kinds;
  for (auto impl : {dd::util::crc32c_impl::table, dd::util::crc32c_impl::sse42}) {
    if (!dd::util::crc32c_supported(impl)) continue;
    kinds.push_back({impl == dd::util::crc32c_impl::table ? "crc32c table (payloads only)"
                                                          : "crc32c sse42 (payloads only)",
                     [&, impl](uint64_t) {
                       for (const auto& c : chunks)
                         sink ^= dd::util::crc32c_with(impl, c.payload.data(), c.payload.size());
                     },
                     {},
                     {}});
  }
  kinds.push_back({"decode_push + add(push_msg) (payload copied twice)",
                   [&](uint64_t) {
                     for (size_t i = 0; i < wire.size(); ++i) {
                       auto m = dd::decode_push(wire[i], dl);
                       if (!m) fail(m.error().message);
                       check_whole(assembler.add(std::move(*m)), i);
                     }
                   },
                   {},
                   {}});
  kinds.push_back({"decode_push_ref + add(chunk_ref) (copied once)",
                   [&](uint64_t) {
                     for (size_t i = 0; i < wire.size(); ++i) {
                       auto m = dd::decode_push_ref(wire[i], dl);
                       if (!m) fail(m.error().message);
                       check_whole(assembler.add(*m), i);
                     }
                   },
                   {},
                   {}});
  // As a learner receives broadcasts: the whole payload's buffer handed back once used
  // (chunk_assembler::recycle), so the next transfer is copied into pages already mapped.
  dd::chunk_assembler recycling{cl};
  kinds.push_back({"... + recycle (buffer reused, as a learner's)",
                   [&](uint64_t) {
                     for (size_t i = 0; i < wire.size(); ++i) {
                       auto m = dd::decode_push_ref(wire[i], dl);
                       if (!m) fail(m.error().message);
                       auto r = recycling.add(*m);
                       check_whole(r, i);
                       if (r->has_value()) recycling.recycle(std::move((*r)->payload));
                     }
                   },
                   {},
                   {}});
  // As a learner decodes a broadcast now: the trailer's check left to the assembler, which
  // checksums each payload while it copies it into the recycled buffer (one read of it).
  dd::chunk_assembler fused{cl};
  dd::decode_limits deferred = dl;
  deferred.defer_payload_checksum = true;
  kinds.push_back({"... + recycle, copy and CRC in one pass (a learner's)",
                   [&](uint64_t) {
                     for (size_t i = 0; i < wire.size(); ++i) {
                       auto m = dd::decode_push_ref(wire[i], deferred);
                       if (!m) fail(m.error().message);
                       auto r = fused.add(*m);
                       check_whole(r, i);
                       if (r->has_value()) fused.recycle(std::move((*r)->payload));
                     }
                   },
                   {},
                   {}});

  for (int round = 0; round <= repeats; ++round) {
    for (size_t k = 0; k < kinds.size(); ++k) {
      auto& kd = kinds[(k + static_cast<size_t>(round)) % kinds.size()];
      const double c0 = cpu_seconds(), w0 = wall_seconds();
      kd.run(static_cast<uint64_t>(round));
      const double c1 = cpu_seconds(), w1 = wall_seconds();
      if (round == 0) continue;  // warm-up
      kd.cpu.push_back(c1 - c0);
      kd.wall.push_back(w1 - w0);
    }
  }
  const double mib = static_cast<double>(size_mb);
  std::printf(
      "dd-bench-receive: fragment %d MiB in %zu chunks of %d bytes, 1 warm-up + %d rounds, "
      "crc32c() uses %s (sink %u)\n",
      size_mb, chunks.size(), chunk_bytes, repeats, dd::util::to_string(dd::util::crc32c_active()),
      sink & 1u);
  std::printf("  %-52s %12s %12s %10s\n", "kind", "cpu MiB/s", "wall MiB/s", "cpu ms");
  for (const auto& kd : kinds) {
    const double c = median(kd.cpu), w = median(kd.wall);
    std::printf("  %-52s %12.0f %12.0f %10.2f\n", kd.name, mib / c, mib / w, c * 1e3);
  }
  return 0;
}
