// runtime/run_dir.hpp — the lifecycle of a run directory (runs/<experiment> by default): what it
// holds, clearing what an earlier run left, the resume record a continued run starts from, the
// run id, and the result files. Used by the run's setup (actors/nodes/job_runner.cpp) and by
// dd-node's run, syncer and launch commands. Errors: std::runtime_error naming the file and the
// cause. Any thread; not safe against another process using the same directory
// (apps/dd_node/run_lock is).
//
// Files: run_id (16 hex digits), events.jsonl, monitor.json (the monitor's record),
// learner_loss.csv, experiment.json, summary.json and run_info.json (the result files, written
// atomically), checkpoints/owner_<p>.ddck (or checkpoint.dir). monitor.json, experiment.json and
// every owner checkpoint name the run that wrote them (its run id; a checkpoint also its fragment
// and state_digest), checked by state_refusal before a resume and where each is loaded.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace dd {

/// What a run directory holds: nothing of a run, a finished run (summary.json), or an unfinished
/// one (events.jsonl or a monitor record, no summary.json) — a crashed or killed run that
/// `--resume` continues.
enum class run_dir_state { empty, finished, unfinished };
run_dir_state inspect_run_dir(const std::string& run_dir);

/// Whether `--resume` can continue the run in `run_dir` — the one rule of `dd-node run`,
/// `dd-node syncer` and `dd-node launch`: a crashed or killed run (unfinished: events or a
/// monitor record, no summary.json) or an interrupted one (summary.json with "interrupted":
/// true, written after Ctrl-C or SIGTERM) can; an empty directory or a run that finished its
/// budget cannot. "" when it can; otherwise what the directory holds, in words, for the caller's
/// refusal ("no run to resume", "a finished run (summary.json without \"interrupted\")", or
/// "an unreadable summary.json (...)").
std::string why_not_resumable(const std::string& run_dir);

/// What a resume would change of the run's experiment: "" when `experiment` (the resolved
/// experiment as config::to_json writes it, --set flags applied) equals <run_dir>/experiment.json
/// in what the run's state depends on — `model`, `sync`, `outer`, `data`, `seed`,
/// `learners.count`, `checkpoint.dir` (compared relative to each side's `run_dir` when it lies
/// inside it: a copied or moved run directory resumes) — or when the directory holds no
/// experiment.json (an older run); the rest (budget, eval, inner, restart, chaos, other checkpoint
/// keys such as `allow_degraded`) may change. Otherwise the differing fields (up to 6, as JSON
/// pointers with the run's and the new value) and the remedy, for the caller's refusal. Resuming
/// another model, fragment plan, data or learner count would merge pushes into checkpoints of
/// another shape or meaning (a resume without the first part's --set flags would restart every
/// fragment from the initial weights).
std::string experiment_change_on_resume(const std::string& run_dir,
                                        const nlohmann::json& experiment);
/// The other differences a resume may make (the experiment's name, budget, eval, inner, restart,
/// chaos, ...; not run_dir) as one warning line naming each (up to 6, with the run's and the new
/// value), or empty: none, or no readable experiment.json. dd-node run, syncer and launch print
/// it on --resume, so another experiment file resumed by mistake is seen.
std::string experiment_drift_on_resume(const std::string& run_dir,
                                       const nlohmann::json& experiment);

/// What a run's state (owner checkpoints, the monitor's record) depends on in `experiment`
/// (config::to_json form): hex FNV-1a 64 of its `model`, `sync`, `outer`, `data`, `seed`,
/// `learners.count` and `checkpoint.dir` — the fields experiment_change_on_resume keeps. Owner
/// checkpoints carry it (owner_checkpoint::experiment_digest).
std::string state_digest(const nlohmann::json& experiment);

/// Whose state is this: the check every `--resume` makes (through runtime/run_dir_rules.hpp
/// resume_refusal: dd-node run, syncer and launch before they start, and the run's setup,
/// actors/nodes/job_runner.cpp, where the state is loaded). "" when `run_dir`'s state can be
/// continued with `experiment` (config::to_json form); otherwise what it holds, in words, for
/// the caller's refusal ("--resume: run directory 'D' holds <this>"). In order:
///   - no run_id file;
///   - the run's state without its records: events.jsonl names a join, rejoin or merge, or an
///     owner checkpoint exists, but experiment.json or monitor.json is missing (resuming would
///     restart every learner at step 0 and the budget from zero; nothing rebuilds them);
///   - experiment.json or monitor.json does not parse;
///   - a file of another run: experiment.json's or monitor.json's "run_id" differs from the
///     run_id file (both runs named);
///   - experiment_change_on_resume (each differing field named with both values);
///   - an owner checkpoint owner_<p>.ddck of another run (both named), of another fragment, or
///     written for another experiment (state_digest).
/// A file without a run id (an older writer) is not refused for that; a damaged checkpoint is
/// left to its owner (refused there, or rebuilt from a learner). Whether there is a run to resume
/// at all (why_not_resumable) is the opener's rule before it (run_dir_refusal).
std::string state_refusal(const std::string& run_dir, const nlohmann::json& experiment);

/// 16 random hex digits (std::random_device): a run's identity, not part of training.
std::string new_run_id();

/// The owners' checkpoint directory: `configured` (checkpoint.dir) when set, else
/// <run_dir>/checkpoints.
std::string checkpoint_dir_of(const std::string& run_dir, const std::string& configured);

/// A run directory holds one run: removes what an earlier run left in `run_dir` — monitor.json
/// (and a monitor.json.tmp that a syncer killed while writing its record left),
/// learner_loss.csv, summary.json and run_info.json (and their temp files), the owner
/// checkpoints owner_<p>.ddck of fragments 0..fragments-1 in `checkpoint_dir` — so that a run
/// killed before its end never leaves an older run's summary.json looking finished, and an
/// earlier run's checkpoints are never restored into this one. Returns what it found and
/// replaced (e.g. "summary.json", "events.jsonl", "2 owner checkpoints"); events.jsonl and
/// experiment.json are listed but left for the new run to rewrite.
std::vector<std::string> clear_earlier_run(const std::string& run_dir,
                                           const std::string& checkpoint_dir, int fragments);

/// A new run in `run_dir` (not a resumed one) starts without what an earlier cluster run left
/// there besides clear_earlier_run's files: nodes.json (dd-node launch's processes), chaos.jsonl
/// and chaos_report.json (dd-chaos), proxy-ports.json, and the folders nodes/ (learner nodes'
/// forwarded events) and logs/ (per-process logs) — otherwise `dd-chaos report` reads two runs
/// as one. Called by the command that starts the run before it writes anything of its own:
/// `dd-node run`, `dd-node launch`, and `dd-node syncer` when no launcher started it (a
/// launcher's syncer finds the launcher's fresh nodes.json and logs/). dd-chaos's
/// chaos-state.json (faults to heal) is left alone. Returns the names it removed, in that
/// order ("nodes/" and "logs/" for the folders); errors are ignored (a file that stays is
/// named by the next run again).
std::vector<std::string> clear_cluster_files(const std::string& run_dir);

/// What the earlier parts of a resumed run did, counted from their events.jsonl lines (every
/// part appends to the same file; a part begins at its "start" or "resume" event). summary.json
/// adds these to the last part's own counters, so every run figure covers all parts.
struct earlier_parts {
  int parts = 0;                 ///< "start" and "resume" events (parts before this one)
  uint64_t merges = 0;           ///< "merge" events
  uint64_t contributors = 0;     ///< Σ size of a merge's "contributors"
  uint64_t tokens_merged = 0;    ///< Σ contributors' "tokens" over merges
  uint64_t pushes = 0;           ///< "push" events
  uint64_t pushes_rejected = 0;  ///< "push" events with "accepted": false
  /// Σ "bytes" of push events: the pushes' payload bytes (a part's own counter, run_counters::
  /// bytes_pushed, counts the whole encoded message: a few bytes more per push).
  uint64_t bytes_pushed = 0;
  uint64_t bytes_broadcast = 0;     ///< Σ "bytes" of broadcast events (payload × learners)
  uint64_t chunks_refused = 0;      ///< "chunk_refused" events
  uint64_t envelopes_refused = 0;   ///< "envelope_refused" events
  uint64_t frames_refused = 0;      ///< "frame_refused" events
  uint64_t auth_refused = 0;        ///< "auth_refused" events
  uint64_t pushes_implausible = 0;  ///< "push" events with "reason": "implausible"
  uint64_t divergences = 0;         ///< "divergence" events
  /// "respawn" events of kind learner (dd-node run), or "rejoin" events with "live": false in a
  /// part that listened for learner processes (a "listening" event: dd-node syncer).
  uint64_t learner_restarts = 0;
  uint64_t owner_restarts = 0;  ///< "respawn" events of kind owner
  /// Σ over the parts of the span from their start/resume event to their last event, seconds
  /// (the "t" of each part counts from that part's own start; the time between parts — a
  /// killed syncer waiting to be started again — is not in it).
  double wall_s = 0.0;
};

/// Counts `events_path` (events.jsonl of a run about to be resumed) into earlier_parts. Lines
/// that do not parse (a line cut off by a kill) are skipped; a missing file gives zeros.
earlier_parts count_earlier_parts(const std::string& events_path);

/// What a resumed run starts from.
struct resume_record {
  std::string run_id;
  /// Per fragment, the highest version events.jsonl names (merge, fragment_rebuilt,
  /// owner_start/owner_restored): a resumed owner numbers its next value above it.
  std::map<int32_t, uint64_t> versions;
  /// The monitor's record (<run_dir>/monitor.json; null when none).
  nlohmann::json monitor_record;
  /// Training seconds of the earlier parts (the record's training_seconds).
  double seconds_before = 0.0;
  /// The run's tokens so far: Σ over the record's learners of tokens_before +
  /// tokens_this_incarnation — summary.json "tokens" (dd_run_tokens_total) at the resume; 0
  /// without a monitor.json. Not before.tokens_merged, which counts a push's tokens once per
  /// fragment it merged into.
  uint64_t tokens_before = 0;
  /// What the earlier parts counted (their events.jsonl lines).
  earlier_parts before;
};

/// Reads what `run_dir` holds for `--resume`. Throws std::runtime_error "--resume: ..." when it
/// holds no run_id file, holds another run than `run_id` (non-empty), or its monitor.json does
/// not parse or names another run ("run_id").
resume_record read_resume_record(const std::string& run_dir, const std::string& run_id);

/// The console line of a resumed part: "resuming run ID from part N (after S s of training,
/// M merges, T tokens)", T the run's tokens (resume_record::tokens_before).
std::string resuming_line(const resume_record& rec);

/// A resumed part starts: the earlier part's result files (summary.json, run_info.json) go, so
/// until this part writes its own the directory reads as an unfinished run (inspect_run_dir) —
/// not as the earlier part's result beside this part's events when a second signal ends it
/// without one. --resume reads nothing from them (read_resume_record: events.jsonl and
/// monitor.json), so the run stays resumable.
void start_resumed_part(const std::string& run_dir);

/// Writes <run_dir>/run_id.
void write_run_id(const std::string& run_dir, const std::string& run_id);

/// util::write_file_atomic of `text` to `path`; throws std::runtime_error naming the file and
/// errno's text.
void write_file_or_throw(const std::string& path, const std::string& text);

/// The result files: <run_dir>/summary.json and <run_dir>/run_info.json (pretty JSON, atomic).
void write_result_files(const std::string& run_dir, const nlohmann::json& summary,
                        const nlohmann::json& info);

}  // namespace dd
