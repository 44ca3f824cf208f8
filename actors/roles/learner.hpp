// actors/roles/learner.hpp — the learner actor: inner AdamW steps on its own data shard, asynchronous
// pushes of the scheduled fragments, application of arriving global fragments at step
// boundaries, heartbeats. It never blocks on the syncer (except in the optional barrier mode that
// emulates synchronous Streaming DiLoCo, where waiting is what the baseline measures).
//
// Promises under failure: a non-finite step is discarded, every fragment is reloaded from the
// owners and a "nonfinite" event is reported — nothing non-finite is ever pushed; a push that
// gets no answer within H steps is given up (its tokens ride on the next push of that fragment);
// pushes to an owner that is respawned are re-sent to the new owner (only the newest per
// fragment); a respawned learner (new incarnation) resumes the step and data cursor the health
// monitor recorded, pulls every fragment and starts with fresh AdamW moments and a re-warmup.
//
// Threading: spawn it `detached` (own thread: its steps block for tens of milliseconds). The step
// loop is a self-sent `step_atom`, so messages that arrive during a step (broadcasts, acks, stop)
// are handled before the next step. With `simulated_time` the actor may run on the test
// job: a step then "takes" sim_step_s × slowdown of the actor clock (delayed message)
// instead of wall time, which makes whole-cluster runs deterministic.
// Interface: learner_hdl (actors/link/protocol.hpp); the monitor and the owners address it through
// its facets learner_at_monitor_hdl and learner_at_owner_hdl.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/stateful_actor.hpp>

#include "actors/link/chunk_flow.hpp"
#include "actors/policy/grace.hpp"
#include "actors/policy/push_schedule.hpp"
#include "actors/link/protocol.hpp"
#include "messages/codec.hpp"
#include "runtime/data.hpp"
#include "runtime/fragments.hpp"
#include "runtime/rng.hpp"
#include "runtime/trainer.hpp"

namespace dd::actors {

class run_log;
class fault_hooks;
class step_admission;

/// Configuration of one learner id (shared by its incarnations).
struct learner_context {
  int32_t learner_id = 0;
  /// Model, batch, sequence length, schedule, AdamW, clipping, seed, shard (learner, learners).
  trainer_config trainer;
  /// Re-warmup after a respawn: lr × min(1, (steps since resume + 1) / rewarmup_steps).
  int rewarmup_steps = 20;
  /// The inner lr schedule's clock. false: the learner's own step counter (ALGORITHM.md).
  /// true: the global mean step, total tokens of all learners (the health monitor's reply to
  /// each heartbeat) / (learners × tokens per step), so learners of different speeds anneal
  /// together when the budget is spent (docs/ALGORITHM.md "Measured changes to the defaults").
  /// Until the first reply, the own counter.
  bool global_schedule = false;
  /// Shared dataset (read-only; outlives the learner).
  const text_dataset* data = nullptr;
  /// Shared image dataset (data.kind = "idx"; read-only; outlives the learner); when set the
  /// trainer reads it instead of `data`.
  const image_dataset* images = nullptr;
  /// The fragment plan (same on every learner and owner).
  fragment_plan plan;
  /// The push schedule's clock. false: the learner's own inner step, (step − offset_p) mod H
  /// (ALGORITHM.md). true: the global mean step (progress_msg::mean_step: Σ over learner steps of
  /// 1 / live learners, from the health monitor's reply to each heartbeat), so every learner
  /// pushes fragment p when the mean step crosses offset_p + kH, whatever its speed — pushes of
  /// one fragment from learners of different speeds arrive together and one grace window
  /// gathers them. The mean step is estimated half a step ahead (policy::global_clock), so the
  /// push happens at the step boundary nearest the crossing; a fragment whose turn passed since
  /// the previous check is pushed at this step (policy::fragments_due_between). No pushes until
  /// the first progress reply.
  bool global_push_clock = false;
  int sync_interval = 24;     ///< H
  int overlap = 2;            ///< τ
  int max_inflight = 2;       ///< queued/unanswered pushes at most
  double mixing_alpha = 0.0;  ///< α: θ ← α θ + (1 − α) global (overwrite only)
  /// How an arriving global fragment is applied. false (overwrite): θ_p ← α θ_p + (1 − α) v and
  /// the fragment's counters restart — progress made since the last push is lost when another
  /// learner's merge arrives. true (rebase): θ_p ← θ_p + (v − base_p) + Δ_included, where
  /// Δ_included is this learner's newest push that `v` contains (broadcast_msg::merged), so every
  /// step of local progress not yet in `v` is kept and none is counted twice. Docs:
  /// ALGORITHM.md "Measured changes to the defaults".
  bool rebase = false;
  payload_encoding wire = payload_encoding::fp32;
  size_t chunk_bytes = default_chunk_bytes;
  /// Chunks in flight per link (push and copy chunks to each owner), `sync.window_chunks`.
  int window_chunks = policy::default_window_chunks;
  /// Synchronous mode (K = M baselines): before step s + τ + 1 wait for the merge of a fragment
  /// pushed at step s; give up waiting after barrier_timeout_s.
  bool barrier = false;
  double barrier_timeout_s = 30.0;
  /// After its last step a learner stops stepping but stays in the group until each fragment's
  /// newest push has been merged (a broadcast names it) or refused, at most this long; then it
  /// leaves. Otherwise its final pushes would be dropped from the owners' pending sets when it
  /// leaves the live view. 0 = leave at once.
  double drain_timeout_s = 5.0;
  /// Stop after this many inner steps of the learner's own counter (0 = until stopped).
  uint64_t max_steps = 0;
  /// Step-time multiplier of emulated slower hardware (>= 1) and random spread in [0, 1).
  double speed = 1.0;
  double jitter = 0.0;
  /// Compute backend and its threads.
  std::string backend = "cpu";
  int threads = 1;
  /// Added to the nice value of the learner's thread (and of its backend's worker pool, which
  /// inherits it) before it computes: a learner node's compute yields the CPU to its I/O
  /// threads (util/thread_priority.hpp). 0 = unchanged. Only for a learner on its own thread
  /// (detached); the learner node sets it (`dd-node learner --compute-nice`, default 0).
  int compute_nice = 0;
  /// The run (hex): stamped on every message the learner sends, and every message it receives
  /// must name it (messages/codec.hpp envelope_expect).
  std::string run_id;
  /// The health monitor.
  monitor_hdl monitor;
  /// Node-local: the current health monitor when it can change under the learner (a learner
  /// node whose syncer restarted); when set, an incarnation joins the monitor it returns instead
  /// of `monitor`. May be empty.
  std::function<monitor_hdl()> current_monitor;
  /// A learner node's learner (set by the node): its leave is a request the monitor answers, and
  /// the learner stays alive until it is answered. One the syncer did not take (the syncer went
  /// away around the learner's last step) is sent again every 2 s while the monitor is
  /// reachable, and otherwise kept until the node reaches a syncer again (syncer_atom): the
  /// learner then rejoins as a live incarnation (reporting the steps and tokens it trained
  /// meanwhile) and leaves. A stop from its own node ends the wait (the leave is then lost).
  /// False (`dd-node run`, tests): the leave is sent and the learner exits at once.
  bool leave_acked = false;
  run_log* log = nullptr;         ///< may be null
  fault_hooks* faults = nullptr;  ///< may be null
  /// Step admission: fair core sharing with the learners of the process or host (may be null);
  /// see compute_gate.hpp.
  step_admission* gate = nullptr;
  /// Logical-time mode (tests): a step takes sim_step_s × slowdown on the actor clock.
  bool simulated_time = false;
  double sim_step_s = 0.1;
};

/// A push of one fragment that the learner has not yet seen merged or refused (rebase mode).
struct outstanding_push {
  uint64_t transfer_id = 0;
  uint64_t steps = 0;        ///< the push's steps[p] counter
  uint64_t tokens = 0;       ///< the push's tokens[p] counter
  std::vector<float> delta;  ///< the pseudo-gradient as the owner decodes it, base_p − θ_p
};

/// Per-fragment bookkeeping of a learner.
struct learner_fragment {
  std::vector<float> base;  ///< the global value last received (base_p)
  uint64_t base_version = 0;
  /// The merged list of the broadcast that brought `base` (handed to an owner that rebuilds
  /// the fragment from this copy: fragment_query).
  std::vector<merged_push> base_merged;
  uint64_t steps = 0;     ///< steps[p] since base_p was received
  uint64_t tokens = 0;    ///< tokens[p] since base_p was received
  bool have = false;      ///< received since the last (re)load started
  bool awaiting = false;  ///< barrier mode: pushed, merge not yet received
  uint64_t pushed_at_step = 0;
  /// Overwrite mode: the first transfer since base_p was received (0 = none); every later push
  /// until the next arrival holds its progress too (push_msg::contains_from).
  uint64_t first_since_receive = 0;
  /// Rebase mode: pushes not yet seen merged or refused, oldest first (at most 8).
  std::deque<outstanding_push> outstanding;
};

/// A push sent and not yet answered.
struct inflight_push {
  uint64_t transfer_id = 0;
  uint64_t sent_step = 0;
  std::vector<wire_bytes> chunks;
  int resends = 0;  ///< times sent again after a `malformed` refusal (a chunk damaged in transit)
};

/// CAF state of the learner actor.
struct learner_state {
  enum class phase { joining, syncing, stepping, waiting, draining, finished };
  phase current_phase = phase::joining;
  std::unique_ptr<kernels::backend> backend;
  std::unique_ptr<trainer> tr;
  int32_t id = 0;
  uint64_t incarnation = 0;
  /// The syncer incarnation of the last join reply: a syncer message of an older one is refused.
  uint64_t syncer_incarnation = 0;
  uint64_t resume_step = 0;
  std::vector<owner_hdl> owners;  ///< per fragment: its owner (null: none known)
  /// Rejoined over a new connection (syncer_atom): the next owner directory replaces every
  /// handle, even one that compares equal (same address, a proxy that died with the old link).
  bool owners_stale = false;
  std::vector<learner_fragment> frags;
  chunk_assembler assembler;
  chunk_flow flow;  ///< push chunks under credit, per owner (actors/link/chunk_flow.hpp)
  /// Copy chunks (an owner's rebuild) under their own credit: a rebuilding owner leaves pushes
  /// in its mailbox uncredited until it serves, so copies must not wait behind them.
  chunk_flow copies;
  std::map<int32_t, inflight_push> unacked;
  std::deque<std::pair<int32_t, inflight_push>> queued;
  /// A push held back by a live `reorder_push` fault (fragment, chunks): sent right after the
  /// learner's next push, so the two arrive out of order.
  std::optional<std::pair<int32_t, std::vector<wire_bytes>>> held_push;
  bool step_scheduled = false;
  bool stop_requested = false;
  /// The stop came from the learner's own node (its supervisor: a signal to the node, or the
  /// job of `dd-node run`), not from the monitor: its leave says `interrupted`.
  bool stopped_by_node = false;
  bool joined = false;
  /// Finished, its leave not yet answered by a monitor (learner_context::leave_acked).
  bool leave_pending = false;
  /// A pending leave must rejoin first: the syncer it goes to came back (or is another one) and
  /// has not seen this incarnation's last steps and tokens.
  bool leave_needs_rejoin = false;
  uint64_t leave_attempt = 0;  ///< the newest leave request (older failures are ignored)
  bool done_logged = false;    ///< its learner_done event is written (once, at its last step)
  /// The monitor this learner last joined has gone down (its connection was lost): a pending
  /// leave waits for syncer_atom instead of being sent again.
  bool monitor_lost = false;
  uint64_t join_attempt = 0;  ///< the newest first-join request (older answers are ignored)
  bool gate_joined = false;
  double slow_factor = 1.0;  ///< current slowdown from a `slow` fault (>= 1)
  /// A nan fault fired: the next inner step is discarded as non-finite whatever arrives before
  /// it (a broadcast may replace the NaN'd tensors first).
  bool poison_next_step = false;
  double wait_started_s = 0.0;
  policy::ema step_time{0.2};
  uint64_t tokens = 0;       ///< tokens computed by this incarnation
  double compute_s = 0.0;    ///< seconds this incarnation spent in inner steps
  monitor_hdl monitor;       ///< the health monitor (context's; replaced when the syncer returns)
  int64_t global_step = -1;  ///< mean learner step from the monitor's progress (-1: none)
  int64_t push_clock = -1;   ///< global push clock: value at the previous schedule check
  /// Newest transfer id actually sent, per fragment (a queued push replaced or dropped before
  /// it was sent is not waited for by the drain).
  std::map<int32_t, uint64_t> last_pushed;
  std::map<int32_t, uint64_t> last_settled;  ///< newest own transfer seen merged or refused
  policy::global_clock mean_step_clock;      ///< the global mean step, dated by own heartbeats
  policy::heartbeat_dates heartbeat_dates;   ///< send times of unanswered heartbeats
  model_batch batch;                         ///< the inner step's batch (buffers reused)
  std::unique_ptr<rng> jitter_rng;
  static inline const char* name = "learner";
};

using learner_actor = learner_hdl::stateful_base<learner_state>;

/// Rebase mode (learner_context::rebase): applies the global value `value` (version `version`,
/// the broadcast's `merged` list) of one fragment to the learner's local values `theta` of that
/// fragment (fragment order, layout.numel floats; updated in place) and to its bookkeeping `f`:
///
///   θ ← θ + (value − base) + Δ_c,
///
/// where Δ_c is the pseudo-gradient of the newest outstanding push of (learner_id, incarnation)
/// that `merged` names as contained (Δ_c = 0 when none): what the value already holds of our
/// progress is taken out of the local delta, everything else is kept. With a contained push,
/// outstanding pushes up to it are dropped, later ones and the fragment's steps/tokens counters
/// lose its share. base ← value, base_version ← version. Returns the contained transfer id, or
/// 0. Throws std::invalid_argument when theta, f.base and value differ in length.
/// Source: ours (docs/ALGORITHM.md "Measured changes to the defaults"); overwrite (α = 0) is
/// the learner loop of ALGORITHM.md.
uint64_t rebase_onto(learner_fragment& f, std::vector<float>& theta, std::vector<float> value,
                     uint64_t version, const std::vector<merged_push>& merged, int32_t learner_id,
                     uint64_t incarnation);

/// The learner's behavior. Joins the health monitor, pulls every fragment, then steps.
/// It also answers an owner's fragment_query (query_atom, between steps: it never blocks
/// stepping) with a fragment_held (held_atom) naming the version of the global value it last
/// applied, and with send_value sends that value (base_p, its version and merged list, fp32,
/// chunked as broadcast_msg) on copy_atom.
learner_hdl::behavior_type learner(learner_actor* self, std::shared_ptr<const learner_context> ctx);

}  // namespace dd::actors
