// actors/nodes/job_runner.hpp — one run of the Decoupled DiLoCo job: its options, the setup its
// actors share, and the main loop. `make_job_setup` turns a resolved experiment
// (runtime/config/experiment.hpp) into what the nodes need (dataset, fragment plan, initial
// global model, fault schedule, run directory: runtime/run_dir.hpp). The job itself is the
// job (actors/nodes/job.hpp) over a syncer node (actors/nodes/syncer_node.hpp: health monitor,
// fragment owners under an owner supervisor, evaluator) and a learner node
// (actors/nodes/learner_node.hpp: M learners under a learner supervisor). `run_job` runs the job
// in one actor system — the syncer node with an in-process learner node for `dd-node run`, the
// syncer node alone with its monitor published for `dd-node syncer` — to the end of its budget
// with a live progress line, and writes the result files (actors/services/run_report.hpp).
//
// Budget: `steps` — every learner stops after that many of its own inner steps; `tokens` — the
// run stops when the learners together have computed that many tokens; `seconds` — wall clock.
// A run can also be interrupted (run_options::interrupt): it then stops the same way, early.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <nlohmann/json.hpp>

#include "actors/link/frame_guard.hpp"
#include "actors/link/peer_identity.hpp"
#include "actors/link/tensor_channel.hpp"
#include "actors/link/tls_tunnel.hpp"
#include "actors/nodes/memory_check.hpp"
#include "actors/nodes/node_config.hpp"
#include "actors/policy/restart_budget.hpp"
#include "actors/services/compute_gate.hpp"
#include "actors/services/fault_hooks.hpp"
#include "actors/services/node_metrics.hpp"
#include "actors/services/run_log.hpp"
#include "actors/services/run_report.hpp"
#include "runtime/config/experiment.hpp"
#include "runtime/data.hpp"
#include "runtime/fragments.hpp"
#include "runtime/idx.hpp"
#include "runtime/run_dir.hpp"

namespace dd::actors {

/// Which part of a job a process runs.
enum class node_role {
  all,     ///< job + syncer node + learner node in one actor system (dd-node run)
  syncer,  ///< job + syncer node; learners join over the network (dd-node syncer)
};

/// Knobs of a run that are not part of the experiment.
struct run_options {
  node_role role = node_role::all;
  /// Syncer node: the health monitor is published on listen_host:listen_port (0 = any free
  /// port) with SO_REUSEADDR; `on_published(port)` is called once it is bound (dd-node syncer
  /// prints the learner command there). A failed publish ends the process (exit 2).
  std::string listen_host = "127.0.0.1";
  uint16_t listen_port = 0;
  std::function<void(uint16_t port)> on_published;
  /// Syncer node: a frame guard (actors/link/frame_guard.hpp) listens on listen_host:listen_port
  /// and closes any connection announcing a CAF frame above guard.max_frame_bytes, or past the
  /// strangers' limits; the middleman itself listens on loopback only. max_frame_bytes 0 = no
  /// guard (the middleman listens on the address itself).
  frame_guard_limits guard;
  /// Syncer node: mutual TLS (actors/link/tls.hpp): the TLS tunnel listens on
  /// listen_host:listen_port and forwards each verified connection to the frame guard on
  /// loopback (needs the guard: guard.max_frame_bytes > 0). Null = plain TCP.
  std::shared_ptr<tls_context> tls;
  /// Syncer node: the join token (actors/link/join_auth.hpp) every learner node's handshake,
  /// tensor channel, drain and chaos endpoint request must prove; empty = none asked.
  std::string join_token;
  /// The run's id (hex), checked at every node handshake; empty = a new random one (written to
  /// <run_dir>/run_id).
  std::string run_id;
  /// Continue the run in the run directory (dd-node syncer/run --resume): its run id, its owner
  /// checkpoints (every owner restores value, momentum, version and EMAs), the monitor's record
  /// of every learner (<run_dir>/monitor.json) and its events.jsonl (appended) are kept; the
  /// budget counts the tokens of both parts; summary.json gets "resumed": true. Without it, what
  /// an earlier run left is removed (make_job_setup).
  bool resume = false;
  /// The node's chaos endpoint (actors/services/chaos_endpoint.hpp) on this loopback address (port
  /// 0 = any; printed and logged as a "chaos_endpoint" event); empty host = off. It serves the
  /// broadcast kinds in a syncer node and every kind when role is `all`.
  std::pair<std::string, uint16_t> chaos_endpoint;
  /// The experiment's message faults (is_message_fault) are not applied from the experiment:
  /// dd-chaos sends them through the chaos endpoint (dd-node launch; needs chaos_endpoint).
  bool message_faults_via_endpoint = false;
  /// The node's HTTP listener (actors/services/node_metrics.hpp: /metrics, /healthz, /readyz,
  /// /status) on this address (port 0 = any; printed and logged as an "http" event); empty host
  /// = off.
  std::pair<std::string, uint16_t> http;
  /// Called once the listener serves (main thread), e.g. to add the status page's routes.
  std::function<void(http_listener&, node_metrics&)> on_http;
  /// Middleman heartbeat and connection timeout of the syncer node.
  node_transport transport;
  /// Run directory; empty = the experiment's run_dir (default runs/<name>). This does not move
  /// the checkpoint directory of an experiment that has one (a loaded experiment always has:
  /// <its run_dir>/checkpoints by default); to move both, load with
  /// config::load_options::run_dir as `dd-node run --run-dir` does.
  std::string run_dir;
  /// Logical-time mode for tests (learners not detached; steps take sim_step_s).
  bool simulated_time = false;
  double sim_step_s = 0.1;
  /// Extra faults on top of the experiment's chaos schedule (tests).
  std::vector<fault_spec> faults;
  /// Progress line cadence, seconds (0 = no progress line).
  double progress_every_s = 5.0;
  /// Keep every event in memory (tests read run_log::events()).
  bool keep_events = false;
  /// Write events.jsonl to the run directory.
  bool write_events = true;
  /// Owners' checkpoint cadence override (versions); < 0 = the experiment's.
  int checkpoint_every = -1;
  /// Heartbeat lease floor, seconds.
  double lease_min_s = 30.0;
  /// Graceful interruption (real-time runs): run_job polls this flag about every 250 ms;
  /// once it holds a non-zero signal number, one line is printed on stderr and the job stops as
  /// if its budget were spent — learners stop at their next step boundary, then the final
  /// evaluation runs (at most `interrupt_timeout_s` for both together; after that the last
  /// periodic validation loss is reported) — and summary.json gets "interrupted": true and
  /// "interrupt_reason" ("SIGINT", "SIGTERM", "signal N"). Set by a signal handler (dd-node run).
  const std::atomic<int>* interrupt = nullptr;
  double interrupt_timeout_s = 30.0;
};

/// Everything the actors of one run share; built once, read-only afterwards except `log` and
/// `faults` (thread-safe). The run's result is not here: the job sends it (job.hpp).
struct job_setup {
  config::experiment exp;
  run_options options;
  std::string run_dir;
  std::shared_ptr<text_dataset> data;     ///< text data (data.kind = "text"), else null
  std::shared_ptr<image_dataset> images;  ///< image data (data.kind = "idx"), else null
  fragment_plan plan;
  std::vector<float> initial;  ///< the initial global model (flat)
  std::unique_ptr<run_log> log;
  std::unique_ptr<fault_hooks> faults;
  /// Set when the job finalizes: an evaluation still running stops at its next batch, so the
  /// process ends (its detached evaluator thread is joined at exit).
  std::shared_ptr<std::atomic<bool>> stop_evaluation = std::make_shared<std::atomic<bool>>(false);
  /// Set by the evaluator once the final global model is in <run_dir>/model.safetensors (before
  /// its scoring): summary.json names the file even when an interrupt cut the scoring short.
  std::shared_ptr<std::atomic<bool>> final_model_written =
      std::make_shared<std::atomic<bool>>(false);
  /// Mutual TLS: which certificate each CAF node connected with (the guard binds, the monitor
  /// and the channel hub read), and the TLS tunnel publish_monitor starts. Null without TLS.
  std::shared_ptr<peer_identity> identities;
  std::unique_ptr<tls_tunnel> tunnel;
  /// The transport of the node's chunks to other nodes; publish_monitor sets the hub it makes.
  std::shared_ptr<channel_route> channel = std::make_shared<channel_route>();
  /// Fair core sharing between learners (null in logical-time runs or with one learner).
  std::unique_ptr<compute_gate> gate;
  int learner_threads = 1;
  uint64_t steps_per_learner = 0;  ///< schedule horizon and steps budget
  /// The run's identity for node handshakes: run id (hex), experiment hash (of its JSON), data
  /// file size and training-split hash.
  std::string run_id;
  std::string experiment_hash;
  /// runtime/run_dir.hpp state_digest of the experiment: written into every owner checkpoint.
  std::string state_digest;
  uint64_t data_bytes = 0;
  std::string data_hash;
  /// The syncer's incarnation: 1 for a fresh run, one more than <run_dir>/syncer_incarnation for
  /// each --resume (rewritten at start). Every syncer role stamps it on its messages; a learner
  /// refuses a message of an older one (messages/codec.hpp envelope_expect).
  uint64_t syncer_incarnation = 1;
  /// final_eval_json() of the run's data.
  nlohmann::json final_eval;
  /// Resumed: the monitor's record read from <run_dir>/monitor.json (null when none).
  nlohmann::json monitor_record;
  /// Resumed: per fragment, the highest version events.jsonl names (merge, fragment_rebuilt,
  /// owner_start/owner_restored): a resumed owner numbers its next value above it.
  std::map<int32_t, uint64_t> resume_versions;
  /// Resumed: training seconds of the earlier parts (the monitor record's training_seconds);
  /// a `budget.seconds` run trains only what is left of its budget.
  double seconds_before = 0.0;
  /// Resumed: what the earlier parts counted (their events.jsonl lines); summary.json adds it.
  earlier_parts before;
  /// What make_job_setup found left by an earlier run in the run directory and removed or
  /// replaced (e.g. "summary.json", "events.jsonl", "2 owner checkpoints"); empty = nothing.
  std::vector<std::string> replaced;
};

/// Checks that every learner's data stream and the evaluator's validation split can be built
/// from `data` as the run will build them (the same batch_stream: shard of learner i of M,
/// context T, data.sharding): throws std::invalid_argument naming data.file, its size, the
/// learner count and the sizes that do not fit (e.g. "learner 1 of 4 has a shard of 68 tokens,
/// fewer than 2·T+1 = 257"). `dd-node run` calls it (through check_experiment_data) before it
/// starts anything and refuses the run with exit 2; make_job_setup calls it too.
void check_learner_data(const config::experiment& exp, const text_dataset& data);
/// What a run on text data this small will do that its user may not expect, one line each
/// (empty: nothing): a budget of `budget_tokens` that goes over the `train_tokens` of the train
/// split more than 20 times (the learners memorize it: training loss falls while validation
/// loss rises), and a validation split of fewer than 16 windows of `context` + 1 tokens (its
/// loss says little). `file` names the data in the lines.
std::vector<std::string> small_data_warnings(const std::string& file, uint64_t train_tokens,
                                             uint64_t validation_tokens, int context,
                                             uint64_t budget_tokens);
/// The same for image data (data.kind = "idx"): every learner's image_stream can be built and
/// the validation split is not empty; throws std::invalid_argument naming data.images.
void check_learner_data(const config::experiment& exp, const image_dataset& data);

/// The run's data as every node loads it, with its identity for the node handshake.
struct run_data {
  std::shared_ptr<text_dataset> text;     ///< data.kind = "text"
  std::shared_ptr<image_dataset> images;  ///< data.kind = "idx"
  /// FNV-1a (hex) of the training split: text, its tokens; images, the train images' pixels
  /// followed by their labels (one byte each).
  std::string hash;
  uint64_t bytes = 0;  ///< size of data.file; idx: data.images + data.labels (file bytes)
};
/// Loads exp.data (text file or IDX pair). Throws std::runtime_error naming the file when it
/// cannot be read or is malformed (text_dataset::from_file, image_dataset::from_files).
run_data load_run_data(const config::experiment& exp);
/// What summary.json's "final_eval" and the model file's "eval" metadata state about the final
/// evaluation: text, eval_spec_of(exp, *data).to_json(); images, {"data_kind": "idx", "images",
/// "labels", "train_fraction", "split": "validation", "validation_first" (first validation sample
/// of the file), "validation_samples", "batch", "covers_split": true, "backend"}.
nlohmann::json final_eval_json(const config::experiment& exp, const run_data& data);
/// Loads the experiment's data (load_run_data: data.file, or data.images and data.labels; throws
/// std::runtime_error naming the file when unreadable) and runs check_learner_data on it.
void check_experiment_data(const config::experiment& exp);
/// What `dd-node run`, `syncer` and `launch` check before anything starts or the run directory
/// is touched: check_experiment_data (a failure is its message), then check_before_start(exp,
/// who, 0, force_memory). "" when it may start; else why not (they refuse with exit 2).
std::string check_startable(const config::experiment& exp, start_check_for who, bool force_memory);

/// Builds the setup: loads and checks the data (check_learner_data), plans the fragments,
/// initializes the global model from the experiment seed, converts the chaos schedule into fault
/// specs, creates the run directory and the event log. Throws std::runtime_error /
/// std::invalid_argument with a clear message on a bad experiment (unreadable or too-small
/// data, P > tensors, unsupported options) before it touches the run directory.
/// A run directory holds one run: once the checks pass, what an earlier run left there is
/// removed or overwritten — summary.json and run_info.json (and their temp files) are deleted,
/// the owner checkpoints of this run's fragments are deleted, events.jsonl and experiment.json
/// are rewritten — and listed in `replaced`. With `options.resume` nothing is removed: the run
/// continues (run id, owner checkpoints, the monitor's record).
std::shared_ptr<job_setup> make_job_setup(const config::experiment& exp,
                                          const run_options& options);

/// The main job: runs `exp` to the end of its budget with a progress line on stdout, writes
/// the run directory and returns the result. Throws on setup errors. On stderr: one line when
/// an earlier run's files in the run directory are replaced, and the run log's warnings
/// (run_log::warn, e.g. an owner restarting from the initial weights).
run_result run_job(const config::experiment& exp, const run_options& options);

}  // namespace dd::actors
