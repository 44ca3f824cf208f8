// actors/roles/fragment_owner.hpp — the fragment owner actor: one per fragment, holding the global
// copy θ_p, its outer momentum b_p and version. A thin CAF shell over owner_core
// (quorum, grace window, merge, outer Nesterov, EMAs, checkpoints); this file adds messaging:
// acks and rejections to learners, broadcasts to every live learner, the grace timer, the
// "push"/"merge"/"broadcast" events, and restore from its checkpoint when respawned.
//
// Interface: owner_hdl (actors/link/protocol.hpp; every `bytes` is a wire message stamped with the
// run id and the syncer's incarnation, options.run_id / syncer_incarnation): receives
// (push_atom, bytes, seq), (pull_atom, bytes pull_request), (live_atom, bytes live_view_msg,
// std::vector<learner_at_owner_hdl> one handle per learner), (grace_atom, timer_id); sends
// (ack_atom, bytes push_ack), (reject_atom, bytes), (broadcast_atom, bytes, seq); on start it sends
// (subscribe_atom, bytes subscribe_msg) to the health monitor. Event-based: it must stay responsive
// while learners compute. Chunks travel under credit (actors/link/chunk_flow.hpp): pushes and
// copies arrive as (atom, bytes, seq) and are credited with (credit_atom, seq) when taken;
// broadcasts leave as (broadcast_atom, bytes, seq), at most `window_chunks` uncredited per learner.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_clock.hpp>
#include <caf/stateful_actor.hpp>

#include "actors/link/atoms.hpp"
#include "actors/link/chunk_flow.hpp"
#include "actors/link/protocol.hpp"
#include "actors/roles/owner_core.hpp"
#include "actors/services/node_services.hpp"

namespace dd::actors {

/// One live learner as a fragment owner holds it (decoded from the monitor's live_view_msg and
/// the handle that travelled with it; the owners' quorum input). Node-local: never sent.
struct live_learner {
  int32_t learner_id = 0;
  uint64_t incarnation = 0;
  /// The learner's EMA of its inner-step wall time, seconds (ξ_step input).
  double step_time_ema_s = 0.0;
  /// Where broadcasts go.
  learner_at_owner_hdl handle;
};

/// The health monitor's live-learner view as an owner holds it; `epoch` increases with every
/// change. Node-local: never sent (the wire form is live_view_msg, messages/control.hpp).
struct live_view {
  uint64_t epoch = 0;
  std::vector<live_learner> learners;
};

/// Everything an owner needs from the job; shared read-only between incarnations. A plain value;
/// the node's services (event sink, fault hook, link, the owner's history) come separately
/// (owner_services, actors/services/node_services.hpp).
struct owner_config {
  owner_options options;
  /// Value at version 0 (used when no checkpoint exists), layout.numel floats.
  std::vector<float> initial;
  /// Backend for the merge ("cpu", "reference" or "cuda") and its threads.
  std::string backend = "cpu";
  int threads = 1;
  /// The health monitor (subscription, live view).
  monitor_hdl monitor;
  /// The first start continues a run (`--resume`): it asks the learners for newer copies of its
  /// fragment, like a respawn does (see fragment_owner).
  bool resumed = false;
  /// Seconds a starting owner waits for the learners' answers (rebuild), on the actor clock.
  /// 0: never ask (restore from the checkpoint or start from `initial`, as before).
  double rebuild_wait_s = 5.0;
  /// Chunks in flight per link (broadcast chunks to each learner), `sync.window_chunks`.
  int window_chunks = policy::default_window_chunks;
  /// How many learners the run has; a resumed owner stops waiting once this many answered.
  size_t learners = 0;
};

/// CAF state of the owner actor.
struct owner_actor_state {
  std::unique_ptr<kernels::backend> backend;
  std::unique_ptr<owner_core> core;
  std::map<int32_t, learner_at_owner_hdl> learners;  ///< live learners (broadcast targets)
  chunk_flow flow;  ///< broadcast chunks under credit, per learner (actors/link/chunk_flow.hpp)
  bool restored = false;
  /// A failed checkpoint will be written again: its retry (snapshot_atom) is due, or waits for
  /// the node's verdict on the failure (write_verdict_atom).
  bool checkpoint_retry_armed = false;
  /// The last failure reported to the node waits for its verdict: retry_degraded arms the retry
  /// after checkpoint_retry_in_s with checkpoint_retry_next_s as its next backoff.
  bool checkpoint_verdict_due = false;
  double checkpoint_retry_in_s = 0.5, checkpoint_retry_next_s = 0.5;
  /// While the owner rebuilds its value (see fragment_owner): what it has heard so far.
  struct rebuild_state {
    struct answer {
      learner_at_owner_hdl handle;
      uint64_t incarnation = 0;
      bool have = false;
      uint64_t version = 0;
    };
    uint64_t query_id = 0;                 ///< the current question (answers must echo it)
    std::optional<owner_checkpoint> ckpt;  ///< a readable checkpoint, if any
    std::string unusable;                  ///< why the checkpoint cannot be used (else empty)
    std::map<int32_t, answer> answers;     ///< per learner id (this incarnation's answers)
    std::map<int32_t, uint64_t> asked;     ///< learner id -> incarnation asked
    std::optional<live_view> view;         ///< the newest live view
    /// ...as it arrived (handed to the serving behavior when the rebuild is over).
    std::pair<wire_bytes, std::vector<learner_at_owner_hdl>> view_message;
    int32_t fetching = -1;  ///< learner whose value is being fetched (-1: none)
    uint64_t fetch_version = 0;
    std::set<int32_t> failed;  ///< learners whose value did not arrive
    chunk_assembler assembler;
    double started_s = 0.0;
  };
  std::unique_ptr<rebuild_state> rebuild;  ///< null once serving
  static inline const char* name = "fragment_owner";
};

using owner_actor = owner_hdl::stateful_base<owner_actor_state>;

/// The owner's behavior.
///
/// A first start of a fresh run starts from `initial` at version 0 (or restores its checkpoint
/// when the file exists). A respawned owner, and the first start of a resumed run
/// (`resumed`), **rebuilds** instead (rebuild_wait_s > 0) — unless its checkpoint is readable
/// and checkpoint_every is 1 (then it is the newest version: written before its broadcast
/// left), which it restores at once: it subscribes with the monitor, asks
/// every live learner which version of the fragment it holds (fragment_query → fragment_held;
/// every learner keeps the last broadcast it applied), waits until every live learner answered
/// (a resumed owner: until `learners` answered) or rebuild_wait_s passed, and then:
///  - a learner holds a newer version than a readable checkpoint (or there is no usable
///    checkpoint: missing, damaged, truncated, another run's fragment): the owner fetches that
///    learner's value (fragment_query with send_value → broadcast chunks on copy_atom), takes
///    it with momentum reset, numbers it max(its version, checkpoint version,
///    the history's highest_version) + 1, writes a checkpoint, broadcasts it, and emits
///    `fragment_rebuilt` (learner, incarnation, the learner's version, the new version, why);
///  - else a readable checkpoint is restored (`owner_restored`);
///  - else (no learner answered with a copy) it starts from `initial` — version
///    the history's highest_version + 1 when any was published, else 0 — with `reset` in
///    `owner_start`, a `degraded` event and run_counters::degraded naming the fragment, and one
///    warning line on the run log's console.
/// Pushes and pulls that arrive while it rebuilds wait in the mailbox (caf::skip) and are
/// handled once it serves, so no learner ever receives a value it is about to replace.
/// Interface: owner_hdl (actors/link/protocol.hpp); both behaviors (rebuilding, serving) implement
/// all of it — rebuilding skips what it cannot handle yet (push, pull, grace, snapshot).
/// `services`: the node's, handed to every incarnation of this owner; its history
/// (owner_history: incarnations started, the highest version any published or started at — a
/// resumed run: the highest in events.jsonl) tells a respawn it is one, and a rebuilt or reset
/// owner numbers its value above that version, so a version number never names two values.
owner_hdl::behavior_type fragment_owner(owner_actor* self,
                                        std::shared_ptr<const owner_config> config,
                                        owner_services services);

/// Seconds of an actor clock's time point (steady, or the test coordinator's manual clock).
double clock_seconds(caf::actor_clock::time_point t);

}  // namespace dd::actors
