// actors/roles/owner_core.hpp — everything a fragment owner decides and computes, without
// CAF: validation of pushes, the pending set, quorum and grace window, the merge and outer
// Nesterov step, the EMAs, checkpoints and restore. The fragment owner actor
// (fragment_owner.hpp) is a thin shell that feeds it messages and the current time and carries
// out the effects it returns (arm a timer, send a broadcast, reply to a learner).
//
// Time is injected: every handler takes `now_s` (seconds on the caller's clock — the actor clock
// in the runtime, a manual clock in tests); the merge's own duration (ξ_sync) is measured with the
// injected `clock`. Single-threaded: one owner actor uses it at a time, like its backend.
//
// Source: ALGORITHM.md, "Fragment owner" and "Recovery".
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/policy/admission.hpp"
#include "actors/policy/grace.hpp"
#include "actors/policy/quorum.hpp"
#include "kernels/backend.hpp"
#include "messages/codec.hpp"
#include "runtime/fragments.hpp"
#include "runtime/merge.hpp"

namespace dd::actors {

/// Configuration of one fragment owner (defaults: ALGORITHM.md "Defaults").
struct owner_options {
  /// This owner's fragment: id, tensors and length.
  fragment_layout layout;
  /// Min quorum K (count or fraction of live learners).
  policy::quorum_spec quorum = policy::quorum_spec::of_count(1);
  /// Grace window ξ_grace: adaptive γ · (τ·ξ_step − ξ_quorum − ξ_sync), fixed, or off.
  policy::grace_config grace;
  /// τ, the overlap in inner steps (grace-window slack).
  double tau_steps = 2.0;
  /// EMA smoothing of ξ_step, ξ_quorum, ξ_sync.
  double ema_smoothing = 0.2;
  /// Pushes whose base lags the current version by more are rejected as stale.
  uint64_t max_staleness = 4;
  /// Merge rule, anchor, outer lr and momentum (momentum 0 and lr = plain SGD on Δ).
  merge_options merge;
  /// false: every contribution weighs 1 (token weighting off).
  bool token_weighting = true;
  /// Plausibility gate k: a push whose pseudo-gradient norm per inner step ‖Δ‖ / steps exceeds
  /// k × the median of the OTHER live learners' latest norms per step on this fragment is
  /// refused as `implausible` (0 = off). Judged against peers, not against this fragment's own
  /// history: honest norms that grow together (inner lr warmup, a restored syncer, a changed
  /// schedule) move the median with them, and a liar, a minority, cannot move the median of the
  /// others. Generous by default: honest learners' norms per step stay within a small factor of
  /// each other.
  double max_norm_ratio = 10.0;
  /// A learner's latest norm counts while it is among the newest this many pushes of the
  /// fragment that reached the gate (older ones are forgotten: a learner that stopped pushing
  /// this fragment does not hold the median at its old scale).
  size_t norm_window = 16;
  /// The peers' median judges once this many other learners' latest norms are known. At least
  /// 2: with one other learner, either of the two could be the liar. With fewer (M <= 2, a peer
  /// paused or gone quiet past norm_window pushes) a push is judged against the larger of the
  /// known peers' latest norms and the median of the OTHER learners' newest norm_window accepted
  /// norms per step (once norm_min_samples of them were accepted): the gate never opens because
  /// peers went quiet, and a learner pushing alone cannot raise its own reference (its own
  /// accepted norms never judge it).
  size_t norm_min_peers = 2;
  /// ... and once this many pushes of the fragment were accepted: the reference is the larger of
  /// the peers' median and the median of the newest norm_window accepted norms per step (0 = the
  /// peers' median alone). The accepted history only ever raises the reference, so the gate
  /// refuses no push the peers' median alone would accept (no lock-out), and none that a gate
  /// judging against the accepted history alone would accept: a learner restarted with fresh
  /// optimizer moments and its own short lr re-warmup honestly pushes several times the norm of
  /// peers whose lr has decayed.
  size_t norm_min_samples = 4;
  /// B·T, the most tokens one inner step can consume: a push reporting more tokens than
  /// steps × this is refused as `implausible` (0 = unbounded).
  uint64_t max_tokens_per_step = 0;
  /// Scale each merged Δ by (contributors / learners the round counts), so that merges of a few
  /// learners' pushes add up to the mean of every learner's progress instead of its sum (the
  /// learners' rebased progress reaches the global model one push at a time). Ours: docs/
  /// ALGORITHM.md "Measured changes to the defaults".
  bool scale_partial_merges = false;
  /// Encoding of broadcasts (fp32: the global model travels exactly).
  payload_encoding broadcast_encoding = payload_encoding::fp32;
  /// Chunk size of broadcasts, bytes.
  size_t chunk_bytes = default_chunk_bytes;
  /// Write a checkpoint every this many versions (0 = never) to `checkpoint_path`.
  uint64_t checkpoint_every = 0;
  std::string checkpoint_path;
  /// The run (hex) and the syncer's incarnation: stamped on every broadcast chunk; a push must
  /// name the run (messages/codec.hpp envelope_expect).
  std::string run_id;
  uint64_t syncer_incarnation = 0;
  /// Whose state a checkpoint is (with run_id): runtime/run_dir.hpp state_digest of the run's
  /// experiment; written into every checkpoint and checked where one is loaded.
  std::string experiment_digest;
};

/// One learner as the owner's membership sees it.
struct owner_member {
  int32_t learner_id = 0;
  uint64_t incarnation = 0;
  double step_time_ema_s = 0.0;  ///< seconds per inner step (ξ_step input)
};

/// What one contributor brought to a merge.
struct merge_contributor {
  int32_t learner_id = 0;
  uint64_t incarnation = 0;
  uint64_t base_version = 0;
  uint64_t transfer_id = 0;
  uint64_t steps = 0;
  uint64_t tokens = 0;
  double weight = 0.0;  ///< normalized: the weights of one merge sum to 1
};

/// The record of one outer step.
struct merge_record {
  int32_t fragment_id = 0;
  uint64_t version = 0;                         ///< version after the outer step
  std::vector<merge_contributor> contributors;  ///< ascending learner id
  size_t live = 0;                              ///< live learners at merge time
  size_t needed = 0;                            ///< quorum K resolved against `live`
  double grace_s = 0.0;                         ///< grace window armed in this round (0 when none)
  std::string reason;                           ///< policy::merge_reason that triggered it
  double round_s = 0.0;                         ///< first pending push → merge, seconds
  double sync_s = 0.0;           ///< merge + outer step + broadcast encoding, seconds
  double delta_norm = 0.0;       ///< ‖Δ‖ over the fragment
  bool checkpointed = false;     ///< a checkpoint was written after this merge
  std::string checkpoint_error;  ///< non-empty when writing it failed
};

/// The fields of a `merge` event for `rec` (events.jsonl; docs/artifacts.md), with the owner's
/// EMAs: what the owner logs and what its checkpoint of that version keeps (merge_record).
nlohmann::json merge_event_fields(const merge_record& rec, double xi_step_s, double xi_quorum_s,
                                  double xi_sync_s);

/// Effects the actor must carry out after a handler.
struct owner_effects {
  /// Arm the grace timer: fire `on_grace_timer(timer_id, ...)` after `arm_grace_s` seconds.
  std::optional<double> arm_grace_s;
  uint64_t timer_id = 0;
  /// Set when an outer step happened: broadcast `broadcast` to every live learner.
  std::optional<merge_record> merged;
  std::vector<wire_bytes> broadcast;
};

/// Outcome of one push (or push chunk).
struct push_outcome {
  enum class status { accepted, incomplete, rejected, ignored };
  status what = status::ignored;
  /// Set when rejected: send it to the learner.
  std::optional<reject_msg> reject;
  /// Set when the learner must be resynchronized (stale): send it the current value.
  bool send_current = false;
  /// Identity of the push (valid for accepted and rejected whole pushes).
  int32_t learner_id = -1;
  uint64_t incarnation = 0;
  uint64_t transfer_id = 0;
  uint64_t base_version = 0;
  uint64_t payload_bytes = 0;
  std::string detail;  ///< human-readable reason
  /// A chunk was refused because its payload did not match its CRC-32C (rejected as malformed;
  /// the learner sends the push again). Counted as chunks_refused.
  bool chunk_refused = false;
  /// The push was refused at its envelope (another run, a stale incarnation, another schema
  /// version; actors/link/wire_refusal.hpp): counted as envelopes_refused.
  bool envelope_refused = false;
  /// A line for the console (the event sink's warn): set on the first push this owner refuses as
  /// implausible and then at most once every owner_core::implausible_warn_every_s while refusals
  /// go on, naming the fragment, how many were refused since the last line and whose; so that a
  /// gate refusing honest learners is never silent.
  std::string warning;
  owner_effects effects;
};

/// The state of one fragment owner.
class owner_core {
 public:
  using clock_fn = std::function<double()>;

  /// A fresh owner at version 0 holding `initial` (layout.numel floats) with zero momentum.
  /// Throws std::invalid_argument when sizes disagree.
  owner_core(owner_options opts, kernels::backend& be, const std::vector<float>& initial,
             clock_fn clock = {});
  /// An owner restored from a checkpoint (value, momentum, version, EMAs, anchors). Throws
  /// std::invalid_argument when the checkpoint's fragment id or size does not match.
  owner_core(owner_options opts, kernels::backend& be, const owner_checkpoint& ckpt,
             clock_fn clock = {});

  owner_core(const owner_core&) = delete;
  owner_core& operator=(const owner_core&) = delete;

  /// A push chunk (encoded push_msg) arrived. Validates (decode, membership and incarnation,
  /// duplicates, superseded, shape, finite values, staleness, plausibility), records an accepted
  /// push as the learner's pending contribution (a newer one replaces an older) and runs the
  /// merge decision.
  ///
  /// Plausible: tokens <= steps × max_tokens_per_step, and ‖Δ‖ / counted_steps(steps) <=
  /// max_norm_ratio × the median of the other learners' latest norms per step on this fragment
  /// (once norm_min_peers of them are known). Every finite push that reaches the gate, accepted
  /// or refused, becomes its learner's latest norm (newest wins), so a refused honest learner is
  /// judged against its peers' current scale on its next push and no sequence of refusals can
  /// lock the honest learners out. Otherwise the push is rejected as `implausible`; the learner
  /// keeps its progress in θ and sends it with its next push.
  ///
  /// Superseded: a push whose `contains_from` <= T < transfer_id, where T is the learner's
  /// transfer this owner already merged, holds T's progress again; it is rejected
  /// (reject_reason::superseded) so nothing is counted twice.
  ///
  /// A base version ahead of ours is possible only after a restore from a checkpoint older than
  /// the versions the learners saw (at most checkpoint_every − 1 of them): such a push is
  /// rejected as `stale` and the learner is resynchronized onto the restored value; the first
  /// merge after a restore skips those version numbers (a number never names two values). Any
  /// other base from the future is rejected as `malformed` (and resynchronized too).
  push_outcome on_push(const wire_bytes& bytes, double now_s);
  /// Same for an already decoded push (tests).
  push_outcome on_push(push_msg msg, double now_s);

  /// The health monitor's live-learner view changed. Pending pushes of learners no longer live
  /// are dropped; ξ_step is updated with the mean step time of the live learners. A learner that
  /// joins while a round is open counts toward that round only once it has a pending push.
  owner_effects on_membership(const std::vector<owner_member>& live, double now_s);

  /// The grace timer `timer_id` fired. A timer of an earlier round is ignored.
  owner_effects on_grace_timer(uint64_t timer_id, double now_s);

  /// The current value as broadcast chunks (for pulls and stale resyncs).
  std::vector<wire_bytes> current_value() const;

  /// The durable state (value, momentum, version, EMAs, anchors).
  owner_checkpoint make_checkpoint() const;

  /// A state built from a learner's copy (rebuild) or the initial weights under a new number
  /// is not a restore: no versions were published after it, so the next merge is version + 1.
  void forget_restore() noexcept { restored_ = false; }
  /// Versions up to `v` were published by an earlier incarnation (after the checkpoint this
  /// state was restored from): the next merge is numbered above `v`.
  void skip_versions_to(uint64_t v) noexcept { version_floor_ = std::max(version_floor_, v); }

  // ---- queries (tests, progress) --------------------------------------------------------
  int32_t fragment_id() const noexcept { return opts_.layout.fragment_id; }
  uint64_t version() const noexcept { return version_; }
  std::vector<float> value() const;
  std::vector<float> momentum() const;
  size_t pending_count() const noexcept { return pending_.size(); }
  std::vector<int32_t> pending_learners() const;
  bool grace_running() const noexcept { return grace_running_; }
  double grace_deadline_s() const noexcept { return grace_deadline_s_; }
  double last_grace_s() const noexcept { return last_grace_s_; }
  double xi_step_s() const noexcept { return xi_step_.value(); }
  double xi_quorum_s() const noexcept { return xi_quorum_.value(); }
  double xi_sync_s() const noexcept { return xi_sync_.value(); }
  size_t live_count() const noexcept { return live_.size(); }
  /// The gate's reference for a push of `learner_id`: the median of the other learners' latest
  /// norms per inner step on this fragment (0 while fewer than norm_min_peers are known).
  double peer_median_norm(int32_t learner_id) const;
  /// The latest norm per inner step the gate holds for `learner_id` (0 when none).
  double latest_norm(int32_t learner_id) const;
  const owner_options& options() const noexcept { return opts_; }
  /// Seconds between two console warnings about implausible refusals of one owner.
  static constexpr double implausible_warn_every_s = 30.0;
  /// Newest merged push per learner, ascending learner id (what broadcasts carry).
  std::vector<merged_push> merged_pushes() const;

 private:
  /// on_push's work on one decoded chunk (header and payload view; the payload is copied only
  /// into the assembler's transfer buffer).
  push_outcome on_chunk(const chunk_ref<push_msg>& chunk, double now_s);
  struct pending_push {
    merge_contributor who;
    kernels::buffer<float> delta;   // backend memory, layout.numel
    std::vector<double> tensor_sq;  // Σ delta² per tensor, taken with the finiteness check
    double arrived_s = 0.0;
  };

  void init_common();
  /// Why a push of `learner_id` with pseudo-gradient norm `norm` over `steps` inner steps,
  /// arriving at `now_s`, is implausible; empty when it is not. The gate compares norms per
  /// step: a learner that ran more steps between two pushes (descheduled under load, behind on
  /// the global push clock, its pushes refused or held back) brings a larger ‖Δ‖ honestly.
  std::string implausible(int32_t learner_id, double norm, uint64_t steps, double now_s) const;
  /// The steps a push of `learner_id` at `now_s` is divided by: its claimed steps, at least 1,
  /// and at most max_steps_ratio × the larger of the median of the other learners' latest
  /// claimed steps (and of the accepted pushes') and steps_in_time: a learner claiming a huge
  /// step count cannot dilute an absurd norm below the gate, and one whose steps grew while its
  /// pushes were refused or held back is not locked out (its bound grows with the time it
  /// waits, the median of the others' steps need not).
  double counted_steps(int32_t learner_id, uint64_t steps, double now_s) const;
  static constexpr double max_steps_ratio = 4.0;
  /// The inner steps of ξ_step (the live learners' lower median step time) that fit between the
  /// arrival of `learner_id`'s last accepted push of this fragment (by its current incarnation;
  /// none: since it entered the live view) and `now_s`; 0 while ξ_step is unknown.
  double steps_in_time(int32_t learner_id, double now_s) const;
  /// `out` (a push of `learner_id` refused as implausible at `now_s` for `why`) gets its
  /// console warning when one is due.
  void note_implausible(push_outcome& out, int32_t learner_id, double now_s,
                        const std::string& why);
  /// The other learners' latest norms that count (those of learners other than `learner_id`,
  /// within the newest norm_window pushes): their norms per step and claimed steps.
  void peer_norms(int32_t learner_id, std::vector<double>& per_step,
                  std::vector<double>& steps) const;
  /// The other learners' newest accepted pushes (at most norm_window, by learners other than
  /// `learner_id`, whatever `learner_id` pushed since): their norms per step and claimed steps.
  void others_history(int32_t learner_id, std::vector<double>& per_step,
                      std::vector<double>& steps) const;
  /// Whether the peers' latest norms are too few to judge alone (fewer than norm_min_peers).
  bool few_peers(size_t peers) const noexcept {
    return peers < std::max<size_t>(1, opts_.norm_min_peers);
  }
  /// 1, or after a restore (until the next merge) checkpoint_every: versions (ours included)
  /// that may have been published since the restored checkpoint.
  uint64_t lost_versions() const;
  push_outcome reject(const push_msg& m, reject_reason r, std::string detail, bool resync);
  owner_effects decide(double now_s);
  owner_effects merge(double now_s, const std::string& reason);
  double compute_grace_s() const;
  std::vector<wire_bytes> encode_value() const;
  /// The digest of the current value as a learner decodes it (runtime/value_digest.hpp), computed
  /// once per version.
  uint64_t value_digest_now(const std::vector<float>& host,
                            const std::vector<uint8_t>& payload) const;

  owner_options opts_;
  kernels::backend* be_;
  clock_fn clock_;
  kernels::buffer<float> theta_;
  kernels::buffer<float> momentum_;
  /// RDA's direction between the merge's two passes (outer_step's scratch), kept between merges
  /// so that no merge allocates and faults in a fresh one; empty until the first merge.
  kernels::buffer<float> merge_scratch_;
  uint64_t version_ = 0;
  std::unique_ptr<anchor_ring> ring_;
  policy::push_ledger ledger_;
  chunk_assembler assembler_;
  /// Learners the round counts: live when the round began, or pending in it. A learner that
  /// (re)joins mid-round is not waited for by that round ("every live learner pending").
  size_t eligible_count() const;

  std::map<int32_t, owner_member> live_;
  std::map<int32_t, double> joined_at_;  // when each live incarnation entered the view
  /// Per learner id, the latest finite push of this fragment that reached the gate (accepted
  /// or refused): its incarnation, ‖Δ‖ / counted steps, claimed steps and sequence number.
  /// Forgotten when the learner leaves the live view or comes back as another incarnation; not
  /// checkpointed: a restored owner holds its gate open until norm_min_peers learners pushed.
  struct latest_push_norm {
    uint64_t incarnation = 0;
    double per_step = 0.0;
    double steps = 0.0;
    uint64_t seq = 0;
  };
  std::map<int32_t, latest_push_norm> latest_norms_;
  /// ‖Δ‖ / counted steps and claimed steps of the newest accepted pushes (at most norm_window,
  /// oldest first); not checkpointed either.
  std::deque<double> accepted_norms_;
  std::deque<double> accepted_steps_;
  /// Per learner id, its newest accepted pushes (at most norm_window, oldest first): ‖Δ‖ /
  /// counted steps, claimed steps and the accept's sequence number (others_history). Forgotten
  /// when the learner leaves the live view; not checkpointed.
  struct accepted_norm {
    double per_step = 0.0;
    double steps = 0.0;
    uint64_t seq = 0;
  };
  std::map<int32_t, std::deque<accepted_norm>> accepted_by_learner_;
  uint64_t accepted_seq_ = 0;  ///< pushes accepted so far
  /// Per learner id, when its current incarnation's last push of this fragment was accepted
  /// (steps_in_time; not checkpointed: a restored owner counts from the join).
  std::map<int32_t, double> accepted_at_;
  uint64_t norm_seq_ = 0;  ///< pushes that reached the gate so far
  /// Implausible refusals not yet in a console warning, their learners, and when the last
  /// warning was given (none yet: warned_ false).
  uint64_t unwarned_implausible_ = 0;
  std::map<int32_t, uint64_t> unwarned_learners_;
  bool warned_ = false;
  double last_warning_s_ = 0.0;
  std::map<int32_t, pending_push> pending_;
  /// Per learner id, its newest merged push (sent with every broadcast, kept in checkpoints).
  std::map<int32_t, merged_push> merged_;
  /// Restored from a checkpoint and no merge since: a push based on a newer version than ours is
  /// explained by the versions lost since that checkpoint.
  bool restored_ = false;
  uint64_t restored_version_ = 0;
  /// The newest merge's event fields (merge_event_fields, JSON text) and its version: a
  /// checkpoint of that version carries them (owner_checkpoint::merge_record).
  std::string last_merge_record_;
  uint64_t last_merge_version_ = 0;
  /// value_digest_now's cache: the version it was computed for (none yet: digest_ 0).
  mutable uint64_t digest_version_ = 0;
  mutable uint64_t digest_ = 0;
  uint64_t version_floor_ = 0;  ///< the next merge is numbered above it (skip_versions_to)
  bool round_open_ = false;
  double round_start_s_ = 0.0;
  bool quorum_seen_ = false;
  bool grace_running_ = false;
  double grace_deadline_s_ = 0.0;
  double round_grace_s_ = 0.0;
  double last_grace_s_ = 0.0;
  uint64_t timer_id_ = 0;
  // The EMAs of xi_step_s() etc.; opts_ is declared above them, so it is set first.
  policy::ema xi_step_{opts_.ema_smoothing}, xi_quorum_{opts_.ema_smoothing},
      xi_sync_{opts_.ema_smoothing};
};

}  // namespace dd::actors
