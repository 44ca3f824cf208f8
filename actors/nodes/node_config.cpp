// actors/nodes/node_config.cpp — see node_config.hpp.
#include "actors/nodes/node_config.hpp"

#include <malloc.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include <caf/io/middleman.hpp>

#include "actors/link/atoms.hpp"
#include "messages/control.hpp"

namespace dd::actors {

namespace {

/// Allocations of at least this many bytes are mmapped by glibc and returned to the system when
/// freed (mallopt M_MMAP_THRESHOLD, process-wide, set by every node that loads the middleman).
/// Chunk-sized buffers (CAF's receive buffer, a deserialized chunk, its decoded payload: 4 MiB
/// each) otherwise move onto the heap after the first free — glibc raises its threshold
/// dynamically up to 32 MiB — and stay resident: dd-bench-transport measured the syncer's peak
/// RSS during 64 MiB pushes at +156–164 MiB over idle with glibc's default and about +116 MiB
/// with 1 MiB (docs/benchmarks-transport.md, "Transport").
constexpr int k_mmap_threshold_bytes = 1 << 20;

/// CAF 0.17's work-stealing workers, once out of work, spin 100 polls, then poll 500 more times
/// with a 50 µs sleep between polls (25 ms of wake-ups), and only then wait on a condition
/// variable that an enqueue from outside the scheduler (the middleman, a tensor channel's reader,
/// the clock) signals and that times out every 10 ms to steal. Each node's system has at least 4
/// workers (CAF's minimum), so between chunks every idle worker of every node on a host wakes
/// every 50 µs: dd-bench-transport's broadcast (5 actor systems on 2 cores) made 220–370 thousand
/// context switches per run and spent 12 % more CPU than without that middle stage. 0 skips it:
/// the spin, then the wait. Work an actor sends to another on its own worker is run by that
/// worker next, or stolen by a waiting one within 10 ms. DD_CAF_POLLING=caf in the environment
/// keeps CAF's 500 (for comparisons).
constexpr size_t k_moderate_poll_attempts = 0;

}  // namespace

std::string app_identifier() { return "decoupled-diloco/" + std::to_string(dd::protocol_version); }

node_config::node_config(const node_transport& t) {
  add_message_types<caf::id_block::dd_actors>();
  set("logger.file-verbosity", caf::atom("quiet"));
  set("logger.console-verbosity", caf::atom("quiet"));
  const char* polling = std::getenv("DD_CAF_POLLING");
  if (polling == nullptr || std::string(polling) != "caf")
    set("work-stealing.moderate-poll-attempts", k_moderate_poll_attempts);
  if (!t.middleman) return;
  // Chunk-sized buffers leave the process when freed (see k_mmap_threshold_bytes);
  // DD_MMAP_THRESHOLD=0 in the environment keeps glibc's dynamic threshold (for comparisons).
  const char* keep = std::getenv("DD_MMAP_THRESHOLD");
  if (keep == nullptr || std::string(keep) != "0")
    mallopt(M_MMAP_THRESHOLD, k_mmap_threshold_bytes);
  load<caf::io::middleman>();
  auto ms = [](double s) {
    return caf::timespan{std::chrono::milliseconds(static_cast<int64_t>(s * 1000))};
  };
  set("middleman.heartbeat-interval", ms(t.heartbeat_s));
  set("middleman.connection-timeout", ms(t.connection_timeout_s));
  set("middleman.app-identifiers", std::vector<std::string>{app_identifier()});
}

}  // namespace dd::actors
