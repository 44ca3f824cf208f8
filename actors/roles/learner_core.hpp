// actors/roles/learner_core.hpp — everything a learner decides, without CAF: which fragments are
// due on which clock, the push queue (queue or drop), pushes in flight, resends and expiry, the
// application of a global fragment (overwrite or rebase), the barrier of the synchronous
// baselines, reloads, rejoins, and the end of a learner (drain, leave, a leave kept while the
// syncer is away, final pushes after a rejoin). The learner actor (learner.hpp) is a thin shell:
// it feeds the core the messages it receives, the results of its inner steps (trainer::step)
// and the current time, and carries out the actions the core returns, in order (send to an
// owner or the monitor, arm a timer, schedule the next step, log an event, exit).
//
// Time is injected: every handler that needs it takes `now_s` (the actor clock in the runtime, a
// manual clock in tests). The model's values are read and written through `learner_params` (the
// trainer's model in the runtime, plain vectors in tests). Single-threaded: the learner actor
// owns it. Source: ALGORITHM.md "Learner loop" and "Recovery"; ours where docs/runtime.md
// "Learner" says so (rebase, global clocks, drain, leave while the syncer is away).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/policy/grace.hpp"
#include "actors/policy/push_schedule.hpp"
#include "messages/codec.hpp"
#include "messages/control.hpp"
#include "runtime/fragments.hpp"
#include "runtime/lr_schedule.hpp"
#include "runtime/model.hpp"

namespace dd::actors {

// ---- strategies, chosen once when the learner's context is built ----------------------------

/// How an arriving global fragment is applied. `overwrite`: θ_p ← α θ_p + (1 − α) v and the
/// fragment's counters restart (progress since the last push is lost when another learner's
/// merge arrives). `rebase`: θ_p ← θ_p + (v − base_p) + Δ_included (rebase_onto), every step of
/// local progress not yet in v is kept and none is counted twice. While (re)loading both
/// overwrite. Docs: ALGORITHM.md "Measured changes to the defaults".
struct fragment_apply {
  enum class kind { overwrite, rebase };
  kind how = kind::overwrite;
  double alpha = 0.0;  ///< α of overwrite (0 = replace); unused by rebase
  static fragment_apply overwrite(double alpha = 0.0) { return {kind::overwrite, alpha}; }
  static fragment_apply rebase() { return {kind::rebase, 0.0}; }
};

/// The clock a schedule reads. `own`: the learner's own inner step (ALGORITHM.md). `global`: the
/// group's progress from the health monitor's reply to each heartbeat — for the push schedule
/// the live learners' mean step (policy::global_clock, estimated half a step ahead; no pushes
/// before the first reply), for the lr schedule total tokens / (learners × tokens per step)
/// (the own step until the first reply).
enum class clock_source { own, global };

/// Synchronous mode (K = M baselines): before step s + τ + 1 wait for the merge of a fragment
/// pushed at step s; give up waiting after `timeout_s`. `off`: never wait.
struct barrier_policy {
  enum class kind { off, wait_tau };
  kind mode = kind::off;
  int tau = 2;
  double timeout_s = 30.0;
  static barrier_policy off() { return {}; }
  static barrier_policy wait(int tau, double timeout_s) { return {kind::wait_tau, tau, timeout_s}; }
};

/// How long a step takes. `wall`: its measured time × the speed factor (the learner sleeps the
/// difference: emulated slower hardware). `simulated` (tests): `sim_step_s` × the factor on the
/// actor clock, the next step delayed by as much, so whole-cluster runs are deterministic.
struct step_timer {
  enum class kind { wall, simulated };
  kind clock = kind::wall;
  double sim_step_s = 0.1;
  static step_timer wall() { return {}; }
  static step_timer simulated(double step_s) { return {kind::simulated, step_s}; }
};

/// How a finished learner leaves. `send_and_exit` (one process: the monitor cannot be lost
/// before its learners): the leave is sent and the learner exits. `acked` (a learner node): the
/// leave is a request the monitor answers; unanswered it is sent again every 2 s while the
/// monitor is reachable, and kept while the syncer is away, to be delivered after a rejoin.
enum class leave_protocol { send_and_exit, acked };

/// What the learner decides by (learner_config extends it with what only its actor needs).
struct learner_options {
  int32_t learner_id = 0;
  /// The run (hex): stamped on every message the learner sends, and every message it receives
  /// must name it (messages/codec.hpp envelope_expect).
  std::string run_id;
  /// The fragment plan (same on every learner and owner).
  fragment_plan plan;
  int sync_interval = 24;  ///< H
  int max_inflight = 2;    ///< queued/unanswered pushes at most
  /// At its last step (finish(): the budget, or a stop) push every fragment trained since its
  /// last global value whose previous push is settled (merged or refused), before the drain.
  bool final_push = false;
  payload_encoding wire = payload_encoding::fp32;
  size_t chunk_bytes = default_chunk_bytes;
  /// How an arriving global fragment is applied: overwrite (α) or rebase.
  fragment_apply apply;
  /// The push schedule's clock: the own inner step, (step − offset_p) mod H (ALGORITHM.md), or
  /// the global mean step (progress_msg::mean_step), so every learner pushes fragment p when
  /// the mean step crosses offset_p + kH, whatever its speed — pushes of one fragment from
  /// learners of different speeds arrive together and one grace window gathers them
  /// (policy::global_clock, policy::fragments_due_between).
  clock_source push_clock = clock_source::own;
  /// The inner lr schedule's clock: the own step, or the global one (total tokens of all
  /// learners / (learners × tokens per step)), so learners of different speeds anneal together.
  clock_source lr_clock = clock_source::own;
  barrier_policy barrier;
  step_timer timer;
  leave_protocol leave = leave_protocol::send_and_exit;
  /// After its last step a learner stops stepping but stays in the group until each fragment's
  /// newest push has been merged (a broadcast names it) or refused, at most this long; then it
  /// leaves. Otherwise its final pushes would be dropped from the owners' pending sets when it
  /// leaves the live view. 0 = leave at once.
  double drain_timeout_s = 5.0;
  /// Stop after this many inner steps of the learner's own counter (0 = until stopped).
  uint64_t max_steps = 0;
  /// Re-warmup after a respawn: lr × min(1, (steps since resume + 1) / rewarmup_steps).
  int rewarmup_steps = 20;
  /// From the learner's trainer as it resolved its config (image data has T = 1); a context
  /// leaves them as they are (learner.cpp fills them).
  lr_schedule schedule;          ///< the inner lr schedule
  uint64_t tokens_per_step = 1;  ///< B·T
  uint64_t learners = 1;         ///< M
};

// ---- the learner's bookkeeping ----------------------------------------------------------------

/// A push of one fragment that the learner sent and has not yet seen merged or refused (rebase
/// mode).
struct outstanding_push {
  uint64_t transfer_id = 0;
  uint64_t steps = 0;        ///< the push's steps[p] counter
  uint64_t tokens = 0;       ///< the push's tokens[p] counter
  std::vector<float> delta;  ///< the pseudo-gradient as the owner decodes it, base_p − θ_p
  /// The incarnation that sent it: a broadcast names a merged push by (learner, incarnation,
  /// transfer), and a live rejoin changes the incarnation while the push may still be merged.
  uint64_t incarnation = 0;
};

/// Per-fragment bookkeeping of a learner.
struct learner_fragment {
  std::vector<float> base;  ///< the global value last received (base_p)
  uint64_t base_version = 0;
  /// The merged list of the broadcast that brought `base` (handed to an owner that rebuilds
  /// the fragment from this copy: fragment_query).
  std::vector<merged_push> base_merged;
  /// The digest the owner sent with `base` (broadcast_msg::value_digest; 0 = none): the
  /// heartbeats compare it with a digest of `base` as held now (divergence detection).
  uint64_t owner_digest = 0;
  /// `base` was found to differ from the owner's value: the next arrival of the fragment
  /// replaces base and θ_p both (as at a sync), not a rebase onto a damaged base.
  bool refetch = false;
  uint64_t steps = 0;     ///< steps[p] since base_p was received
  uint64_t tokens = 0;    ///< tokens[p] since base_p was received
  bool have = false;      ///< received since the last (re)load started
  bool awaiting = false;  ///< barrier mode: pushed, merge not yet received
  uint64_t pushed_at_step = 0;
  /// Overwrite mode: the first transfer since base_p was received (0 = none); every later push
  /// until the next arrival holds its progress too (push_msg::contains_from).
  uint64_t first_since_receive = 0;
  /// Rebase mode: pushes not yet seen merged or refused, oldest first (at most 8; beyond that
  /// the second oldest is dropped: the oldest is the one an owner merges first, and every later
  /// push that holds its progress is refused as superseded).
  std::deque<outstanding_push> outstanding;
  /// Rebase mode: pushes dropped from `outstanding` while neither merged nor refused, transfer id
  /// → incarnation. Their progress is in θ but their deltas are gone: a value that holds one of
  /// them is taken whole (rebase_onto), and every push names the oldest of them in
  /// contains_from, so an owner that merged one refuses the pushes holding it again.
  std::map<uint64_t, uint64_t> forgotten;
};

/// A push built and not yet answered.
struct inflight_push {
  uint64_t transfer_id = 0;
  uint64_t sent_step = 0;
  std::vector<wire_bytes> chunks;
  int resends = 0;  ///< times sent again after a `malformed` refusal (a chunk damaged in transit)
};

/// A fragment whose push turn came (push_due, final_pushes) and the push built for it (none when
/// the fragment had nothing to push). The actor queues each (learner_core::enqueue); the pushes
/// it sends leave through the link (actors/link/chunk_flow.hpp flow_push).
struct due_push {
  int32_t fragment = 0;
  uint64_t step = 0;
  std::optional<inflight_push> push;
};

/// The model's values as the core reads and writes them: one fragment at a time, in fragment
/// order (layout.numel floats).
class learner_params {
 public:
  virtual ~learner_params() = default;
  virtual std::vector<float> read(const fragment_layout& layout) const = 0;
  virtual void write(const fragment_layout& layout, const std::vector<float>& values) = 0;
};

/// The trainer's model as the core reads and writes it (the runtime's learner_params).
class model_params final : public learner_params {
 public:
  explicit model_params(model& m) : model_(&m) {}
  std::vector<float> read(const fragment_layout& layout) const override;
  void write(const fragment_layout& layout, const std::vector<float>& values) override;

 private:
  model* model_;
};

/// Rebase mode: applies the global value `value` (version `version`, the broadcast's `merged`
/// list) of one fragment to the learner's local values `theta` of that fragment (fragment order,
/// layout.numel floats; updated in place) and to its bookkeeping `f`:
///
///   θ ← θ + (value − base) + Δ_c,
///
/// where Δ_c is the pseudo-gradient of the newest outstanding push of `learner_id` (of the
/// incarnation that sent it) that `merged` names as contained (Δ_c = 0 when none): what the
/// value already holds of our progress is taken out of the local delta, everything else is kept.
/// With a contained push, outstanding (and forgotten) pushes up to it are dropped, later ones and
/// the fragment's steps/tokens counters lose its share. When the value holds a push the learner
/// no longer has the delta of (f.forgotten, newer than any contained outstanding one), its share
/// cannot be taken out: θ ← value and the counters restart, as at an overwrite (the progress
/// since is lost, never counted twice), and every outstanding push is dropped (each holds that
/// push's progress and is refused as superseded). base ← value, base_version ← version. Returns
/// the contained transfer id, or 0. Throws std::invalid_argument when theta, f.base and value
/// differ in length.
/// Source: ours (docs/ALGORITHM.md "Measured changes to the defaults"); overwrite (α = 0) is
/// the learner loop of ALGORITHM.md.
uint64_t rebase_onto(learner_fragment& f, std::vector<float>& theta, std::vector<float> value,
                     uint64_t version, const std::vector<merged_push>& merged, int32_t learner_id);

// ---- actions: what the actor carries out, in the order given ----------------------------------

namespace learner_do {
/// Send push chunks (transfer `transfer_id`) to the owner of `fragment` under credit (nothing
/// when it has none).
struct push_chunks {
  int32_t fragment = 0;
  std::vector<wire_bytes> chunks;
  uint64_t transfer_id = 0;
};
/// Ask the owner of `fragment` for its current value (nothing when it has none).
struct pull {
  int32_t fragment = 0;
  wire_bytes bytes;
};
/// Send the heartbeat of `step` to the monitor, then tell the core when it left
/// (on_heartbeat_sent: the monitor's reply is dated by it).
struct heartbeat {
  uint64_t step = 0;
  wire_bytes bytes;
};
/// Send the leave to the monitor. `attempt` > 0: a request whose answer or failure goes back to
/// on_leave_answered / on_leave_failed(attempt); 0: fire and forget.
struct leave {
  wire_bytes bytes;
  uint64_t attempt = 0;
};
/// Rejoin the monitor live (a join request); its reply goes to on_rejoin_reply with the two
/// reported figures, its failure to on_rejoin_failed.
struct rejoin {
  wire_bytes bytes;
  uint64_t reported_tokens = 0;
  double reported_compute_s = 0.0;
};
enum class timer { barrier, drain, leave_retry };
/// Fire on_barrier_timeout / on_drain_timeout / on_leave_retry after `delay_s`.
struct arm {
  timer which = timer::barrier;
  double delay_s = 0.0;
};
/// Run on_step_timer after `delay_s` (0: next in the mailbox).
struct step {
  double delay_s = 0.0;
};
/// Block the learner's thread (wall-clock step timer: emulated slower hardware).
struct sleep {
  double seconds = 0.0;
};
/// The learner counts as stepping (uptime) or not.
struct stepping {
  bool on = false;
};
/// Join (true) or leave (false) the compute gate.
struct gate {
  bool join = false;
};
/// Its training is over (the run log closes its uptime window).
struct training_over {};
/// One applied step for the run's counters.
struct step_stats {
  uint64_t step = 0;
  uint64_t tokens = 0;  ///< of this step
  double loss = 0.0;
  double step_s = 0.0;
  double steps_per_s = 0.0;
  uint64_t incarnation = 0;
  /// The learner's tokens over all its incarnations: the monitor's count of the earlier ones
  /// (join_reply::tokens_before) plus this incarnation's. A node process started again resumes
  /// its counter from it, as the step resumes from the monitor's record.
  uint64_t tokens_total = 0;
};
enum class counter { discarded_step, chunk_refused };
struct count {
  counter which = counter::discarded_step;
};
/// A run-log event.
struct event {
  std::string name;
  nlohmann::json fields;
};
/// A message dropped because it did not decode (logged and counted as every refusal).
struct refused {
  std::string what;
  wire_error error;
};
/// Exit normally.
struct quit {};
}  // namespace learner_do

using learner_action =
    std::variant<learner_do::push_chunks, learner_do::pull, learner_do::heartbeat,
                 learner_do::leave, learner_do::rejoin, learner_do::arm, learner_do::step,
                 learner_do::sleep, learner_do::stepping, learner_do::gate,
                 learner_do::training_over, learner_do::step_stats, learner_do::count,
                 learner_do::event, learner_do::refused, learner_do::quit>;
using learner_actions = std::vector<learner_action>;

/// What to do at a step boundary.
struct step_plan {
  bool train = false;  ///< run one inner step (trainer::step) with `lr`
  double lr = 0.0;
  learner_actions actions;  ///< carried out first (finish, barrier wait)
};

/// One inner step as the actor ran it.
struct step_report {
  double loss = 0.0;
  double lr = 0.0;
  double measured_s = 0.0;           ///< wall time, from asking the compute gate to the step's end
  double factor = 1.0;               ///< speed × slowdown × jitter (>= 1)
  std::vector<uint8_t> data_cursor;  ///< after the step (the heartbeat carries it)
  double end_unix_s = 0.0;           ///< wall clock (Unix seconds) at the step's end; 0 = none
};

/// The answer to an owner's fragment_query (a rebuild).
struct query_answer {
  std::optional<wire_error> error;  ///< the query did not decode: nothing to send
  wire_bytes held;                  ///< fragment_held
  std::vector<wire_bytes> copy;     ///< the value, as broadcast chunks (send_value and held)
  learner_actions actions;
};

/// What a syncer coming back (syncer_atom) means for this learner.
enum class syncer_back { ignore, first_join, rejoin };

/// The phases of one incarnation:
///
///   joining --join reply + owners--> syncing (pull every fragment)
///   syncing --all fragments in--> stepping --step--> stepping
///   stepping --barrier: merge of a fragment pushed τ steps ago missing--> waiting
///   waiting --broadcast / timeout--> stepping
///   stepping --non-finite step--> syncing (reload from the owners)
///   stepping --budget / stop--> draining --final pushes settled / timeout--> finished (leave)
///   finished --leave answered--> exit; --syncer away, then back--> rejoin, final pushes, draining
///   any --fault hook kill--> exit with error (the supervisor respawns a new incarnation)
enum class learner_phase { joining, syncing, stepping, waiting, draining, finished };

/// A finished learner's leave (leave_protocol::acked): not asked yet or answered (none), asked
/// and awaiting the monitor's answer (asking), or waiting for a rejoin to a returned syncer that
/// has not seen its last steps, after which it makes its final pushes and drains (rejoining).
enum class leave_state { none, asking, rejoining };

/// Who asked the learner to stop: nobody, the monitor (a drain, the job's stop) or its own node.
enum class stop_origin { none, monitor, node };

/// The state of one learner incarnation after another.
class learner_core {
 public:
  /// `params` outlives the core (the trainer's model).
  learner_core(learner_options opts, learner_params& params);

  learner_core(const learner_core&) = delete;
  learner_core& operator=(const learner_core&) = delete;

  /// What this learner writes into every envelope: its run and incarnation.
  envelope_stamp stamp() const { return {opts_.run_id, incarnation_}; }
  /// What it accepts from the syncer: its run and the syncer incarnation last joined.
  envelope_expect expect() const { return {opts_.run_id, syncer_incarnation_}; }

  // ---- join -------------------------------------------------------------------------------
  /// The first join's request of this incarnation.
  wire_bytes join_request_bytes() const;
  /// The first join's reply: the learner's id, incarnation and where to resume (an error and a
  /// `refused` action in `actions` when it does not decode). The actor then positions its
  /// trainer and calls on_resumed.
  result<join_reply> on_join_reply(const std::vector<uint8_t>& bytes, learner_actions& actions);
  /// The trainer resumed at the reply's step: learner_start, then the (re)load of every fragment.
  learner_actions on_resumed();
  /// The monitor the learner watches: present (a handle) or not; it is reachable again.
  void on_monitor_found(bool present);
  /// The monitor went down (its connection was lost): a pending leave waits for a syncer.
  void on_monitor_lost();
  /// The learner's node reached a syncer again (after on_monitor_found).
  syncer_back on_syncer_back();
  /// Rejoin live: forgets pushes in flight (their owners are gone) and builds the join request.
  learner_actions rejoin();
  /// The rejoin's reply. True when the learner must now make its final pushes (final_pushes,
  /// then end_final_pushes).
  bool on_rejoin_reply(const std::vector<uint8_t>& bytes, uint64_t reported_tokens,
                       double reported_compute_s, learner_actions& actions);
  learner_actions on_rejoin_failed(const std::string& error);
  /// The owner directory changed. Per fragment of the plan: whether it has an owner now, and
  /// whether the owner's handle differs from the one held before (the actor compares handles).
  struct owner_update {
    bool present = false;
    bool changed = false;
  };
  learner_actions on_owner_directory(const std::vector<owner_update>& owners);

  // ---- the step loop ----------------------------------------------------------------------
  /// The step timer fired: finish, wait at the barrier, or train with the returned lr.
  step_plan on_step_timer(double now_s);
  /// The step was not applied (non-finite loss or gradient): reload every fragment.
  learner_actions on_step_discarded(double loss);
  /// The step was applied (the trainer advanced to step()): counters, step time, heartbeat. The
  /// heartbeat carries the divergence check of one fragment, in turn: the digest of the global
  /// value held for it (runtime/value_digest.hpp) beside the owner's; where they differ the
  /// fragment is fetched again (an event `value_refetch` and a pull).
  learner_actions on_step_done(const step_report& r);
  /// The `corrupt_held` fault: flips the bits of one value of the stored global value of the
  /// fragment the next heartbeat checks (its parameters are untouched). Returns that fragment,
  /// or -1 when no fragment is held yet.
  int32_t corrupt_held_value();
  /// The heartbeat of `step` left at `now_s` (its progress reply is dated by it).
  void on_heartbeat_sent(uint64_t step, double now_s) { heartbeat_dates_.sent(step, now_s); }
  /// Expires pushes unanswered for H steps and builds the pushes due now, fragment order.
  std::vector<due_push> push_due(double now_s);
  /// After the pushes: finish at the budget, else schedule the next step.
  learner_actions after_step();

  // ---- pushes -------------------------------------------------------------------------------
  /// Queues a built push (a newer one replaces an unsent older one of its fragment) and sends
  /// what the window allows.
  learner_actions enqueue(int32_t fragment, inflight_push push);
  learner_actions on_ack(const std::vector<uint8_t>& bytes);
  learner_actions on_reject(const std::vector<uint8_t>& bytes);

  // ---- global values ------------------------------------------------------------------------
  learner_actions on_broadcast(const std::vector<uint8_t>& bytes);
  learner_actions on_progress(const std::vector<uint8_t>& bytes);
  query_answer on_query(const std::vector<uint8_t>& bytes);
  learner_actions on_barrier_timeout(double now_s);

  // ---- the end --------------------------------------------------------------------------------
  learner_actions on_stop(const std::vector<uint8_t>& bytes);
  learner_actions on_node_stop();
  learner_actions on_drain_timeout();
  learner_actions on_leave_answered();
  learner_actions on_leave_failed(uint64_t attempt, const std::string& error);
  learner_actions on_leave_retry();
  /// A learner that finished while the syncer was away and rejoined to leave: one push per
  /// fragment with progress whose owner is known (queued with enqueue as any other).
  std::vector<due_push> final_pushes();
  /// After the final pushes: the `final_pushes` event, then drain and leave.
  learner_actions end_final_pushes();

  // ---- queries (the actor, tests) -----------------------------------------------------------
  learner_phase phase() const noexcept { return phase_; }
  leave_state leaving() const noexcept { return leave_; }
  stop_origin stopped_by() const noexcept { return stop_; }
  bool joined() const noexcept { return joined_; }
  bool syncer_lost() const noexcept { return syncer_lost_; }
  int32_t id() const noexcept { return id_; }
  uint64_t incarnation() const noexcept { return incarnation_; }
  uint64_t step() const noexcept { return step_; }
  uint64_t tokens() const noexcept { return tokens_; }
  double compute_s() const noexcept { return compute_s_; }
  double step_time_s() const noexcept { return step_time_.value(); }
  int64_t global_step() const noexcept { return global_step_; }
  const learner_fragment& fragment(size_t p) const { return frags_.at(p); }
  size_t fragments() const noexcept { return frags_.size(); }
  bool has_owner(size_t p) const { return has_owner_.at(p); }
  size_t unacked() const noexcept { return unacked_.size(); }
  size_t queued() const noexcept { return queued_.size(); }
  const inflight_push* unacked_push(int32_t p) const;
  /// Fragments whose newest push is neither merged nor refused yet.
  bool has_unsettled_push() const;
  /// Fragment p's newest sent push is neither merged nor refused yet.
  bool unsettled(int32_t p) const;
  /// learner_options::final_push: pushes what finish() pushes, and a final_pushes event.
  void push_at_finish(learner_actions& out);
  /// The `final_pushes` event: this learner made its final pushes of `fragments` fragments.
  learner_do::event final_pushes_event(size_t fragments) const;
  const learner_options& options() const noexcept { return opts_; }

 private:
  learner_actions finish();
  learner_actions start_reload();
  void pull_missing(learner_actions& out) const;
  wire_bytes pull_bytes(size_t p) const;
  wire_bytes leave_bytes() const;
  void send_leave(learner_actions& out);
  learner_actions drain_queue();
  /// A push of fragment `p` that was built but will never be sent (replaced or dropped in the
  /// queue, or the queue forgotten at a rejoin): no longer outstanding.
  void never_sent(int32_t p, uint64_t transfer_id);
  std::optional<inflight_push> build_push(int32_t p, uint64_t step);
  bool barrier_blocked() const;
  bool apply_global(const broadcast_msg& b, learner_actions& out);
  /// The heartbeat's divergence check (on_step_done).
  void check_held_value(heartbeat_msg& hb, learner_actions& out);
  void refuse_damaged_broadcast(int32_t fragment, const std::string& detail,
                                learner_actions& out) const;
  void resume_stepping(learner_actions& out);
  /// Every fragment is in after a (re)load: stepping (again).
  void synced(learner_actions& out);
  void schedule_step(learner_actions& out, double delay_s = 0.0);
  void log_leave_pending(const std::string& why, learner_actions& out) const;
  nlohmann::json who() const;

  learner_options opts_;
  learner_params* params_;
  learner_phase phase_ = learner_phase::joining;
  leave_state leave_ = leave_state::none;
  stop_origin stop_ = stop_origin::none;
  int32_t id_ = 0;
  uint64_t incarnation_ = 0;
  uint64_t syncer_incarnation_ = 0;
  uint64_t resume_step_ = 0;
  uint64_t step_ = 0;  ///< the trainer's steps done
  bool joined_ = false;
  bool monitor_present_ = false;
  bool syncer_lost_ = false;
  bool owners_stale_ = false;  ///< rejoined: the next directory replaces every handle
  bool done_logged_ = false;   ///< learner_done written (once, at its last step)
  bool gate_joined_ = false;
  bool step_scheduled_ = false;
  uint64_t leave_attempt_ = 0;  ///< the newest leave request (older failures are ignored)
  double wait_started_s_ = 0.0;
  double last_step_s_ = 0.0;  ///< the last step's time (the simulated timer's next delay)
  size_t next_check_ = 0;     ///< the fragment the next heartbeat's divergence check covers
  std::vector<learner_fragment> frags_;
  std::vector<bool> has_owner_;
  chunk_assembler assembler_;
  std::map<int32_t, inflight_push> unacked_;
  std::deque<std::pair<int32_t, inflight_push>> queued_;
  /// Newest transfer id actually sent, per fragment (a queued push replaced or dropped before
  /// it was sent is not waited for by the drain).
  std::map<int32_t, uint64_t> last_pushed_;
  std::map<int32_t, uint64_t> last_settled_;  ///< newest own transfer seen merged or refused
  uint64_t tokens_ = 0;                       ///< tokens computed by this incarnation
  double compute_s_ = 0.0;                    ///< seconds this incarnation spent in inner steps
  /// The monitor's count of its earlier incarnations (join_reply::tokens_before): tokens_before_
  /// + tokens_ is what a live rejoin reports as its total.
  uint64_t tokens_before_ = 0;
  double compute_before_s_ = 0.0;
  policy::ema step_time_{0.2};
  int64_t global_step_ = -1;  ///< tokens-derived global step from the monitor (-1: none)
  int64_t push_clock_ = -1;   ///< global push clock: value at the previous schedule check
  policy::global_clock mean_step_clock_;     ///< the global mean step, dated by own heartbeats
  policy::heartbeat_dates heartbeat_dates_;  ///< send times of unanswered heartbeats
  size_t final_pushed_ = 0;                  ///< fragments pushed by final_pushes
  bool final_push_done_ = false;             ///< the final pushes were made (at most once)
};

}  // namespace dd::actors
