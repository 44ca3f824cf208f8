// actors/cluster.cpp — see cluster.hpp.
//
// Job actor:
//
//   start (spawn monitor, owners, evaluator, learners)
//     --budget spent (monitor: tokens; timer: seconds) or interrupted (stop_atom, reason)-->
//       stopping (stop every learner)
//     --all learners done--> final evaluation --> finished (shut everything down, report)
#include "actors/cluster.hpp"

#include "actors/chaos_endpoint.hpp"

#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>
#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "actors/atoms.hpp"
#include "actors/evaluator.hpp"
#include "actors/fragment_owner.hpp"
#include "actors/frame_guard.hpp"
#include "actors/health_monitor.hpp"
#include "actors/job_config.hpp"
#include "actors/learner.hpp"
#include "actors/supervisor.hpp"
#include "kernels/backend.hpp"
#include "runtime/gpt.hpp"
#include "runtime/rng.hpp"
#include "util/files.hpp"

namespace dd::actors {

namespace fs = std::filesystem;

namespace {

std::string signal_name(int sig) {
  if (sig == SIGINT) return "SIGINT";
  if (sig == SIGTERM) return "SIGTERM";
  return "signal " + std::to_string(sig);
}

/// util::write_file_atomic, or std::runtime_error naming the file and errno's text.
void write_or_throw(const std::string& path, const std::string& text) {
  if (auto st = util::write_file_atomic(path, text); !st) throw std::runtime_error(st.message);
}

/// 16 random hex digits (std::random_device): a run's identity, not part of training.
std::string new_run_id() {
  std::random_device rd;
  const uint64_t v = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return fmt::format("{:016x}", v);
}

struct job_state {
  caf::actor monitor, owner_sup, learner_sup, eval;
  bool stopping = false;
  bool finalizing = false;
  double start_s = 0.0;
  double training_end_s = -1.0;
  std::string interrupted;  ///< the interrupt's reason; empty = not interrupted
  bool owner_lost = false;  ///< a fragment owner stayed down: no final evaluation possible
  double interrupted_at_s = 0.0;
  static inline const char* name = "job";
};

using job_actor = caf::stateful_actor<job_state>;

void begin_stop(job_actor* self, cluster_setup& setup, const std::string& why) {
  auto& st = self->state;
  if (st.stopping) return;
  st.stopping = true;
  st.training_end_s = setup.log->now();
  setup.log->freeze_uptime();
  setup.log->emit("stop", {{"reason", why}});
  // In-process learners stop through their supervisor; remote ones through the monitor.
  if (st.learner_sup)
    self->send(st.learner_sup, atoms::stop_atom_v);
  else
    self->send(st.monitor, atoms::stop_atom_v);
}

void finalize(job_actor* self, std::shared_ptr<cluster_setup> setup, caf::actor reply_to,
              double loss, uint64_t digest) {
  auto& st = self->state;
  const double end = setup->log->now();
  auto counters = setup->log->snapshot();
  const double training_s = st.training_end_s - st.start_s;
  {
    std::lock_guard<std::mutex> guard(setup->result_mutex);
    auto& r = setup->result;
    r.finished = true;
    r.final_val_loss = loss;
    r.digest = digest;
    r.summary = make_summary(*setup, counters, loss, end - st.start_s, training_s);
    if (setup->options.resume) {
      r.summary["resumed"] = true;
      r.summary["seconds_before_resume"] = setup->seconds_before;
    }
    if (!st.interrupted.empty()) {
      r.interrupted = true;
      r.interrupt_reason = st.interrupted;
      r.summary["interrupted"] = true;
      r.summary["interrupt_reason"] = st.interrupted;
    }
    // A run that trained nothing, or lost a learner for good, is a failure (dd-node run: exit 1).
    std::string why;
    if (r.summary.value("tokens", uint64_t{0}) == 0) why = "no learner trained a single token";
    // "learner 1 of 4 exhausted its restart budget and stayed down<consequence> (last crash: …)"
    auto given_up = [&why](const std::map<int32_t, std::string>& lost, const char* one,
                           const char* many, int of, const char* consequence) {
      if (lost.empty()) return;
      std::string ids, last;
      for (const auto& [id, crash] : lost) {
        ids += (ids.empty() ? "" : ", ") + std::to_string(id);
        last = crash;
      }
      why += fmt::format(
          "{}{} {} of {} exhausted {} restart budget and stayed down{} (last "
          "crash: {}; see events.jsonl)",
          why.empty() ? "" : "; ", lost.size() == 1 ? one : many, ids, of,
          lost.size() == 1 ? "its" : "their", consequence, last);
    };
    given_up(counters.learners_given_up, "learner", "learners", setup->exp.learners.count, "");
    given_up(counters.owners_given_up, "fragment owner", "fragment owners",
             setup->plan.num_fragments(),
             ", so training stopped and final_val_loss is the last periodic evaluation (null "
             "when none ran)");
    if (!counters.degraded.empty()) {
      nlohmann::json d = nlohmann::json::array();
      std::string what;
      for (const auto& [k, reason] : counters.degraded) {
        d.push_back({{"what", k}, {"reason", reason}});
        // A lost fragment value fails the run (unless allowed); a file that failed for a while
        // and recovered is reported only.
        if (k.rfind("fragment ", 0) == 0) what += (what.empty() ? "" : "; ") + k + ": " + reason;
      }
      r.summary["degraded"] = d;
      if (!what.empty() && !setup->exp.checkpoint.allow_degraded)
        why += (why.empty() ? "" : "; ") +
               ("degraded (" + what + "); set checkpoint.allow_degraded = true to accept it");
    }
    if (const std::string wf = setup->log->write_failure(); !wf.empty())
      why += (why.empty() ? "" : "; ") + ("a write failed, so the run stopped: " + wf);
    if (!why.empty()) {
      r.failed = true;
      r.failure_reason = why;
      r.summary["failed"] = true;
      r.summary["failure_reason"] = why;
    }
    r.info = {{"experiment", setup->exp.name},
              {"learners", setup->exp.learners.count},
              {"fragments", setup->plan.num_fragments()},
              {"sync_interval", setup->exp.sync.interval},
              {"synchronous", synchronous(setup->exp)},
              {"digest", fmt::format("{:016x}", digest)},
              {"owner_restarts", counters.owner_restarts},
              {"pushes", counters.pushes},
              {"pushes_rejected", counters.pushes_rejected},
              {"pushes_dropped", counters.pushes_dropped},
              {"training_seconds", training_s},
              {"faults_fired", setup->faults->fired().size()}};
    if (r.interrupted) r.info["interrupted"] = st.interrupted;
    if (r.failed) r.info["failure_reason"] = r.failure_reason;
  }
  setup->log->emit("finished",
                   {{"final_val_loss", loss >= 0 ? nlohmann::json(loss) : nlohmann::json(nullptr)},
                    {"digest", digest}});
  for (auto& a : {st.learner_sup, st.owner_sup, st.eval, st.monitor})
    if (a) self->send_exit(a, caf::exit_reason::user_shutdown);
  if (reply_to) self->send(reply_to, atoms::done_atom_v);
  self->quit();
}

caf::behavior job(job_actor* self, std::shared_ptr<cluster_setup> setup, caf::actor reply_to) {
  auto& st = self->state;
  const auto& e = setup->exp;
  const bool sim = setup->options.simulated_time;
  const int M = e.learners.count;
  const int P = setup->plan.num_fragments();
  st.start_s = setup->log->now();
  setup->log->emit(setup->options.resume ? "resume" : "start",
                   {{"experiment", e.name},
                    {"run_id", setup->run_id},
                    {"learners", M},
                    {"fragments", P},
                    {"sync_interval", e.sync.interval},
                    {"synchronous", synchronous(e)},
                    {"steps_per_learner", setup->steps_per_learner}});

  // Health monitor.
  auto mctx = std::make_shared<monitor_context>();
  mctx->learners = M;
  mctx->fragments = P;
  mctx->lease_min_s = setup->options.lease_min_s;
  mctx->token_budget =
      e.budget.kind == config::budget_kind::tokens ? static_cast<uint64_t>(e.budget.tokens) : 0;
  mctx->experiment_json = config::to_json(e).dump();
  mctx->align_resume_to_group = synchronous(e) && M > 1;
  mctx->job = self;
  mctx->log = setup->log.get();
  const bool remote = setup->options.role == node_role::syncer;
  mctx->remote_learners = remote;
  mctx->run_id = setup->run_id;
  mctx->syncer_incarnation = setup->syncer_incarnation;
  mctx->experiment_hash = setup->experiment_hash;
  mctx->data_bytes = setup->data_bytes;
  mctx->data_hash = setup->data_hash;
  mctx->steps_per_learner = setup->steps_per_learner;
  if (!sim) {
    mctx->record_path = (fs::path(setup->run_dir) / "monitor.json").string();
    mctx->loss_path = (fs::path(setup->run_dir) / "learner_loss.csv").string();
    if (remote) mctx->forward_dir = (fs::path(setup->run_dir) / "nodes").string();
  }
  mctx->restored_record = setup->monitor_record;
  st.monitor = self->spawn(health_monitor, std::shared_ptr<const monitor_context>(mctx));
  if (remote && reply_to) self->send(reply_to, atoms::publish_atom_v, st.monitor);

  // Fragment owners.
  auto octx = std::make_shared<supervisor_context>();
  octx->name = "owners";
  octx->restart = restart_of(e);
  octx->log = setup->log.get();
  octx->faults = setup->faults.get();
  octx->job = self;
  const std::string ckpt_dir = e.checkpoint.dir.empty()
                                   ? (fs::path(setup->run_dir) / "checkpoints").string()
                                   : e.checkpoint.dir;
  for (int p = 0; p < P; ++p) {
    auto c = std::make_shared<owner_context>();
    auto& o = c->options;
    o.layout = setup->plan.fragments[static_cast<size_t>(p)];
    o.quorum = quorum_of(e);
    o.grace = grace_of(e);
    o.tau_steps = e.sync.overlap;
    o.ema_smoothing = e.sync.ema;
    o.max_staleness = static_cast<uint64_t>(std::max(0, e.outer.max_staleness));
    o.merge.rule =
        e.outer.merge == config::merge_kind::rda ? merge_rule::rda : merge_rule::weighted_average;
    o.merge.anchor =
        e.outer.anchor == config::anchor_kind::base ? merge_anchor::base : merge_anchor::current;
    o.merge.outer_lr = static_cast<float>(e.outer.lr);
    o.merge.outer_momentum =
        e.outer.kind == config::outer_kind::sgd ? 0.0f : static_cast<float>(e.outer.momentum);
    o.token_weighting = e.outer.token_weighting;
    o.scale_partial_merges = e.outer.scale_partial_merges;
    int every = setup->options.checkpoint_every >= 0 ? setup->options.checkpoint_every
                                                     : e.checkpoint.every_versions;
    o.checkpoint_every = static_cast<uint64_t>(std::max(0, every));
    o.checkpoint_path = (fs::path(ckpt_dir) / fmt::format("owner_{}.ddck", p)).string();
    o.run_id = setup->run_id;
    o.syncer_incarnation = setup->syncer_incarnation;
    c->initial.resize(o.layout.numel);
    gather_fragment(o.layout, setup->initial.data(), c->initial.data());
    c->backend = "cpu";
    c->threads = 1;
    c->monitor = st.monitor;
    c->log = setup->log.get();
    c->faults = setup->faults.get();
    c->resumed = setup->options.resume;
    c->learners = static_cast<size_t>(M);
    // A respawned owner waits for the live learners' answers (they answer between steps); a
    // resumed one also for the learners to rejoin (their nodes retry with backoff, ≤ 5 s under
    // dd-node launch, ≤ 15 s by hand).
    c->rebuild_wait_s = e.checkpoint.rebuild_wait_seconds;
    if (auto it = setup->resume_versions.find(p); it != setup->resume_versions.end())
      c->highest_version = it->second;
    std::shared_ptr<const owner_context> cc = c;
    octx->children.push_back(
        {"owner", p, [cc](caf::actor_system& sys) { return sys.spawn(fragment_owner, cc); }});
  }
  st.owner_sup = self->spawn(supervisor, std::shared_ptr<const supervisor_context>(octx));

  // Evaluator.
  auto ectx = std::make_shared<evaluator_context>();
  ectx->model = model_of(e);
  ectx->plan = setup->plan;
  ectx->data = setup->data.get();
  ectx->batch = e.learners.batch;
  ectx->seq_len = e.model.context;
  ectx->batches = std::max(1, e.eval.batches);
  ectx->every_seconds = e.eval.every_seconds;
  ectx->every_steps = e.eval.every_steps;
  ectx->learners = M;
  ectx->step_poll_s = sim ? setup->options.sim_step_s : 0.25;
  ectx->adaptive_cadence = !sim;
  // The reference backend is the bit-reproducible one (no BLAS kernel chosen per CPU): an
  // experiment on it evaluates on it too, so its losses are the same on every machine.
  ectx->backend = e.learners.backend == config::backend_kind::reference ? "reference" : "cpu";
  ectx->threads = 1;
  ectx->monitor = st.monitor;
  ectx->run_id = setup->run_id;
  ectx->syncer_incarnation = setup->syncer_incarnation;
  ectx->log = setup->log.get();
  std::shared_ptr<const evaluator_context> ec = ectx;
  st.eval = sim ? self->spawn(evaluator, ec) : self->spawn<caf::detached>(evaluator, ec);

  // Learners (a syncer node has none: they join from their own processes).
  auto lctx = std::make_shared<supervisor_context>();
  lctx->name = "learners";
  lctx->restart = restart_of(e);
  lctx->log = setup->log.get();
  lctx->faults = setup->faults.get();
  lctx->job = self;
  learner_services services;
  services.data = setup->data.get();
  services.log = setup->log.get();
  services.faults = setup->faults.get();
  services.gate = setup->gate.get();
  for (int i = 0; i < M; ++i) {
    auto lc = std::make_shared<learner_context>(
        *make_learner_context(e, i, setup->steps_per_learner, setup->plan, setup->learner_threads,
                              st.monitor, services, sim, setup->options.sim_step_s));
    lc->run_id = setup->run_id;
    std::shared_ptr<const learner_context> cc = lc;
    lctx->children.push_back({"learner", i, [cc, sim](caf::actor_system& sys) {
                                return sim ? sys.spawn(learner, cc)
                                           : sys.spawn<caf::detached>(learner, cc);
                              }});
  }
  if (!remote)
    st.learner_sup = self->spawn(supervisor, std::shared_ptr<const supervisor_context>(lctx));
  setup->log->set_expected_learners(static_cast<size_t>(M));
  setup->log->set_quorum_needed(static_cast<size_t>(std::max(1, e.sync.min_quorum.resolve(M))));
  // A resumed run counts the seconds its earlier parts trained.
  if (e.budget.kind == config::budget_kind::seconds && e.budget.seconds > 0)
    self->delayed_send(self, span(std::max(0.0, e.budget.seconds - setup->seconds_before)),
                       atoms::done_atom_v);

  return {
      [=](atoms::done_atom) { begin_stop(self, *setup, "budget spent"); },
      // Interrupted (SIGINT/SIGTERM in dd-node run): stop like a spent budget, but give the
      // learners and the final evaluation at most interrupt_timeout_s.
      [=](atoms::stop_atom, const std::string& reason) {
        auto& s = self->state;
        if (!s.interrupted.empty() || s.finalizing) return;
        s.interrupted = reason;
        s.interrupted_at_s = setup->log->now();
        begin_stop(self, *setup, "interrupted (" + reason + ")");
        self->delayed_send(self, span(setup->options.interrupt_timeout_s), atoms::done_atom_v,
                           std::string("interrupt_timeout"));
      },
      [=](atoms::done_atom, const std::string& who) {
        auto& s = self->state;
        if (who == "owner_lost") {
          // Without that owner the global model cannot be assembled again: stop the learners; the
          // run fails (finalize) and reports the last periodic validation loss.
          s.owner_lost = true;
          begin_stop(self, *setup, "a fragment owner exhausted its restart budget");
          return;
        }
        const bool timed_out = who == "interrupt_timeout" && !s.interrupted.empty();
        if ((who != "learners" && !timed_out) || s.finalizing) return;
        if (!s.stopping) {
          s.stopping = true;
          s.training_end_s = setup->log->now();
          setup->log->freeze_uptime();
          setup->log->emit("stop", {{"reason", "every learner finished"}});
        }
        s.finalizing = true;
        // Interrupted: the final evaluation gets what is left of interrupt_timeout_s (at least 1
        // s), else the last periodic validation loss stands in.
        const double limit_s =
            s.interrupted.empty()
                ? 600.0
                : std::max(1.0, s.interrupted_at_s + setup->options.interrupt_timeout_s -
                                    setup->log->now());
        if (timed_out || s.owner_lost) {
          finalize(self, setup, reply_to, setup->log->snapshot().last_val_loss, 0);
          return;
        }
        self->request(s.eval, span(limit_s), atoms::eval_atom_v, true)
            .then([=](double loss,
                      uint64_t digest) { finalize(self, setup, reply_to, loss, digest); },
                  [=](caf::error&) {
                    finalize(self, setup, reply_to,
                             self->state.interrupted.empty() ? -1.0
                                                             : setup->log->snapshot().last_val_loss,
                             0);
                  });
      },
  };
}

}  // namespace

void check_learner_data(const config::experiment& exp, const text_dataset& data) {
  const int M = exp.learners.count;
  const int T = exp.model.context;
  const auto layout = exp.data.sharding == config::sharding_kind::interleaved
                          ? shard_layout::interleaved
                          : shard_layout::contiguous;
  const size_t n_train = data.train().size(), n_val = data.validation().size();
  auto fail = [&](const std::string& what) {
    throw std::invalid_argument(fmt::format(
        "data.file '{}' ({} tokens: {} train, {} validation) is too small for {} learner{} with "
        "model.context T = {}: {}; use a larger file, fewer learners (learners.count) or a "
        "shorter context (model.context)",
        exp.data.file, n_train + n_val, n_train, n_val, M, M == 1 ? "" : "s", T, what));
  };
  // The same stream each learner's trainer builds (runtime/trainer.cpp: seed derived with
  // "data"); its constructor is what throws for a shard that is too small.
  constexpr uint64_t k_data_stream = 0x64617461;
  for (int i = 0; i < M; ++i) {
    try {
      batch_stream probe(data, i, M, T, derive_seed(exp.seed, k_data_stream), layout);
      (void)probe;
    } catch (const std::invalid_argument& e) {
      fail(e.what());
    }
  }
  if (n_val < static_cast<size_t>(T) + 1)
    fail(
        fmt::format("the validation split has {} tokens, fewer than T+1 = {} (data.train_fraction "
                    "= {})",
                    n_val, T + 1, exp.data.train_fraction));
}

void check_experiment_data(const config::experiment& exp) {
  check_learner_data(exp, text_dataset::from_file(exp.data.file, exp.data.train_fraction));
}

std::shared_ptr<cluster_setup> make_cluster_setup(const config::experiment& exp,
                                                  const run_options& options) {
  auto s = std::make_shared<cluster_setup>();
  s->exp = exp;
  s->options = options;
  s->run_dir = !options.run_dir.empty() ? options.run_dir
               : !exp.run_dir.empty()   ? exp.run_dir
                                        : (fs::path("runs") / exp.name).string();
  const int M = exp.learners.count;
  if (M < 1) throw std::invalid_argument("learners.count must be >= 1");
  if (exp.learners.speed.size() > static_cast<size_t>(M))
    throw std::invalid_argument("learners.speed has more entries than learners.count");
  s->data = std::make_shared<text_dataset>(
      text_dataset::from_file(exp.data.file, exp.data.train_fraction));
  check_learner_data(exp, *s->data);
  {
    const auto& train = s->data->train();
    s->data_hash = fnv1a_hex(train.data(), train.size() * sizeof(train[0]));
    std::error_code ec;
    s->data_bytes = static_cast<uint64_t>(fs::file_size(exp.data.file, ec));
    const std::string json = config::to_json(exp).dump();
    s->experiment_hash = fnv1a_hex(json.data(), json.size());
    s->run_id = options.run_id;
    if (options.resume) {
      std::ifstream in(fs::path(s->run_dir) / "run_id");
      std::string id;
      if (!(in >> id) || id.empty())
        throw std::runtime_error("--resume: run directory '" + s->run_dir +
                                 "' holds no run_id file (nothing to resume)");
      if (!s->run_id.empty() && s->run_id != id)
        throw std::runtime_error("--resume: run directory '" + s->run_dir + "' holds run " + id +
                                 ", not " + s->run_id);
      s->run_id = id;
      {
        std::ifstream inc(fs::path(s->run_dir) / "syncer_incarnation");
        uint64_t before = 0;
        s->syncer_incarnation = (inc >> before) ? before + 1 : 2;  // an older run dir: at least 2
      }
      // The highest version of each fragment the earlier part logged.
      {
        std::ifstream ev(fs::path(s->run_dir) / "events.jsonl");
        std::string line;
        while (std::getline(ev, line)) {
          if (line.find("\"version\"") == std::string::npos ||
              line.find("\"fragment\"") == std::string::npos)
            continue;
          auto j = nlohmann::json::parse(line, nullptr, false);
          if (j.is_discarded() || !j.contains("fragment") || !j.contains("version") ||
              !j["fragment"].is_number_integer() || !j["version"].is_number_unsigned())
            continue;
          auto& v = s->resume_versions[j["fragment"].get<int32_t>()];
          v = std::max(v, j["version"].get<uint64_t>());
        }
      }
      const auto record = fs::path(s->run_dir) / "monitor.json";
      if (fs::exists(record)) {
        std::ifstream rin(record);
        try {
          s->monitor_record = nlohmann::json::parse(rin);
          if (s->monitor_record.is_object())
            s->seconds_before = s->monitor_record.value("training_seconds", 0.0);
        } catch (const std::exception& e) {
          throw std::runtime_error("--resume: " + record.string() + " does not parse: " + e.what());
        }
      }
    }
    if (s->run_id.empty()) s->run_id = new_run_id();
  }
  auto cfg = model_of(exp);
  s->plan = plan_of(exp);
  {
    auto be = kernels::make_backend("cpu", {});
    gpt model(*be, cfg);
    model.init(exp.seed);
    s->initial = model.get_parameters();
  }
  s->steps_per_learner = steps_per_learner_of(exp);
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  s->learner_threads = exp.learners.threads > 0
                           ? exp.learners.threads
                           : std::max(1, static_cast<int>(hw) / std::max(1, M));
  if (!options.simulated_time && M > 1) {
    const unsigned slots =
        std::max(1u, hw / static_cast<unsigned>(std::max(1, s->learner_threads)));
    if (slots < static_cast<unsigned>(M)) s->gate = std::make_unique<compute_gate>(slots);
  }
  fs::create_directories(s->run_dir);
  const std::string ckpt_dir = exp.checkpoint.dir.empty()
                                   ? (fs::path(s->run_dir) / "checkpoints").string()
                                   : exp.checkpoint.dir;
  fs::create_directories(ckpt_dir);
  // A run directory holds one run: remove what an earlier run left, so that a run killed before
  // its end never leaves an older run's summary.json looking finished. Checkpoints of an earlier
  // run must not be restored into this one (they serve owners respawned within a run).
  if (!options.resume) {
    std::error_code ec;
    fs::remove(fs::path(s->run_dir) / "monitor.json", ec);
    for (const char* name : {"summary.json", "run_info.json", "events.jsonl", "experiment.json"})
      if (fs::exists(fs::path(s->run_dir) / name, ec)) s->replaced.emplace_back(name);
    fs::remove(fs::path(s->run_dir) / "learner_loss.csv", ec);
    for (const char* name :
         {"summary.json", "run_info.json", "summary.json.tmp", "run_info.json.tmp"})
      fs::remove(fs::path(s->run_dir) / name, ec);
    int removed = 0;
    for (int p = 0; p < s->plan.num_fragments(); ++p)
      if (fs::remove(fs::path(ckpt_dir) / fmt::format("owner_{}.ddck", p), ec)) ++removed;
    if (removed > 0)
      s->replaced.push_back(fmt::format("{} owner checkpoint{}", removed, removed == 1 ? "" : "s"));
  }
  s->log = std::make_unique<run_log>(
      options.write_events ? (fs::path(s->run_dir) / "events.jsonl").string() : std::string{},
      options.keep_events, run_log::clock_fn{}, options.resume);
  if (!options.simulated_time) {
    std::ofstream(fs::path(s->run_dir) / "run_id") << s->run_id << '\n';
    std::ofstream(fs::path(s->run_dir) / "syncer_incarnation") << s->syncer_incarnation << '\n';
  }
  std::vector<fault_spec> faults;
  for (const auto& f : fault_specs_of(exp, s->steps_per_learner, s->plan.num_fragments()))
    // A syncer node hosts no learner: push and step message faults act in the learner nodes.
    if (options.role != node_role::syncer || f.what != fault_spec::kind::start_live ||
        is_broadcast_kind(f.live.what))
      faults.push_back(f);
  for (const auto& f : options.faults) faults.push_back(f);
  s->faults = std::make_unique<fault_hooks>(faults, s->log.get());
  write_or_throw((fs::path(s->run_dir) / "experiment.json").string(),
                 config::to_json(exp).dump(2) + "\n");
  return s;
}

run_dir_state inspect_run_dir(const std::string& run_dir) {
  std::error_code ec;
  const fs::path d(run_dir);
  if (fs::exists(d / "summary.json", ec)) return run_dir_state::finished;
  if (fs::exists(d / "events.jsonl", ec) || fs::exists(d / "monitor.json", ec))
    return run_dir_state::unfinished;
  return run_dir_state::empty;
}

caf::actor spawn_job(caf::actor_system& sys, std::shared_ptr<cluster_setup> setup,
                     caf::actor reply_to) {
  if (setup->options.simulated_time) {
    const double t0 = clock_seconds(sys.clock().now());
    setup->log->set_clock([&sys, t0] { return clock_seconds(sys.clock().now()) - t0; });
  }
  return sys.spawn(job, setup, reply_to);
}

nlohmann::json make_summary(const cluster_setup& setup, const run_counters& c,
                            double final_val_loss, double wall_s, double training_s) {
  uint64_t tokens = 0;
  double compute = 0;
  for (const auto& [id, l] : c.learners) {
    tokens += l.tokens;
    compute += l.compute_s;
  }
  const int M = setup.exp.learners.count;
  const int P = setup.plan.num_fragments();
  const double goodput =
      training_s > 0 ? std::min(1.0, compute / (static_cast<double>(M) * training_s)) : 0.0;
  const double effective =
      tokens > 0 ? std::min(1.0, static_cast<double>(c.tokens_merged) /
                                     (static_cast<double>(P) * static_cast<double>(tokens)))
                 : 0.0;
  const double uptime = c.observed_s > 0 ? c.uptime_s / c.observed_s : 0.0;
  // No evaluation at all (a run stopped before one could run): null, not a sentinel number.
  return {
      {"final_val_loss",
       final_val_loss >= 0 ? nlohmann::json(final_val_loss) : nlohmann::json(nullptr)},
      {"tokens", tokens},
      {"wall_seconds", wall_s},
      {"goodput", goodput},
      {"effective_goodput", effective},
      {"uptime", uptime},
      {"merges", c.merges},
      {"mean_contributors_per_merge",
       c.merges > 0 ? static_cast<double>(c.contributors) / static_cast<double>(c.merges) : 0.0},
      {"learner_restarts", c.learner_restarts},
      {"bytes_pushed", c.bytes_pushed},
      {"bytes_broadcast", c.bytes_broadcast},
      {"chunks_refused", c.chunks_refused},
      {"envelopes_refused", c.envelopes_refused}};
}

double budget_done(const config::experiment& exp, uint64_t steps_per_learner,
                   const run_counters& now, double t_s) {
  double f = 0.0;
  switch (exp.budget.kind) {
    case config::budget_kind::seconds:
      f = exp.budget.seconds > 0 ? t_s / exp.budget.seconds : 0.0;
      break;
    case config::budget_kind::tokens: {
      uint64_t tokens = 0;
      for (const auto& [id, l] : now.learners) tokens += l.tokens;
      f = exp.budget.tokens > 0
              ? static_cast<double>(tokens) / static_cast<double>(exp.budget.tokens)
              : 0.0;
      break;
    }
    case config::budget_kind::steps: {
      double steps = 0;
      for (const auto& [id, l] : now.learners) steps += static_cast<double>(l.step);
      const double M = static_cast<double>(std::max(1, exp.learners.count));
      f = steps_per_learner > 0 ? steps / M / static_cast<double>(steps_per_learner) : 0.0;
      break;
    }
  }
  return std::clamp(f, 0.0, 1.0);
}

std::string progress_line(const run_counters& now, const run_counters& prev, double dt_s,
                          double t_s, double done) {
  std::string line = fmt::format("[{:7.1f}s]", t_s);
  for (const auto& [id, l] : now.learners)
    line += fmt::format(" L{} {}{:.2f}st/s {:.3f}", id, l.alive ? "" : "✗", l.steps_per_s, l.loss);
  if (now.last_val_loss >= 0)
    line += fmt::format(" | val {:.4f}", now.last_val_loss);
  else
    line += " | val -";
  const double rate = dt_s > 0 ? static_cast<double>(now.merges - prev.merges) / dt_s : 0.0;
  const double contrib =
      now.merges > 0 ? static_cast<double>(now.contributors) / static_cast<double>(now.merges)
                     : 0.0;
  double grace = 0;
  for (const auto& [p, g] : now.grace_s) grace = std::max(grace, g);
  line += fmt::format(" | merges {:.2f}/s | contrib {:.2f} | grace {:.3f}s | restarts {}", rate,
                      contrib, grace, now.learner_restarts + now.owner_restarts);
  if (done >= 0) {
    line += fmt::format(" | {:.0f}%", 100.0 * done);
    if (done > 0.005 && done < 1.0) {
      const auto left = static_cast<int64_t>(t_s * (1.0 - done) / done + 0.5);
      line += left >= 60 ? fmt::format(" ETA {}m{:02d}s", left / 60, left % 60)
                         : fmt::format(" ETA {}s", left);
    }
  }
  return line;
}

run_result run_cluster(const config::experiment& exp, const run_options& options) {
  auto setup = make_cluster_setup(exp, options);
  if (!setup->replaced.empty()) {
    std::string what;
    for (const auto& r : setup->replaced) what += (what.empty() ? "" : ", ") + r;
    std::fprintf(stderr,
                 "dd-node run: %s: run directory '%s' held an earlier run (%s): replaced by "
                 "this run (owner checkpoints only serve owners respawned within a run)\n",
                 exp.name.c_str(), setup->run_dir.c_str(), what.c_str());
    std::fflush(stderr);
  }
  setup->log->set_console([](const std::string& line) {
    std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
  });
  // A budget that ends before any fragment is pushed trains learners that are never merged.
  if (exp.budget.kind != config::budget_kind::seconds) {
    const uint64_t H = static_cast<uint64_t>(std::max(1, exp.sync.interval));
    const uint64_t P = static_cast<uint64_t>(std::max(1, setup->plan.num_fragments()));
    const uint64_t first_push = P > 1 ? std::max<uint64_t>(1, H / P) : H;
    if (setup->steps_per_learner < first_push)
      setup->log->warn(fmt::format(
          "{}: the budget ends after {} inner steps per learner, before the first push (step {} "
          "with sync.interval = {} and {} fragments): nothing will be merged and the final "
          "validation loss is the initial model's",
          exp.name, setup->steps_per_learner, first_push, H, P));
  }
  const bool syncer = options.role == node_role::syncer;
  // A syncer node goes on through failing writes (retried with backoff, degraded) up to
  // checkpoint.max_failing_seconds; `dd-node run` stops at the first one.
  if (syncer) setup->log->set_retry_writes(true);
  std::unique_ptr<chaos_endpoint> endpoint;  // destroyed before setup (it uses setup->faults)
  if (!options.chaos_endpoint.first.empty()) {
    chaos_endpoint_options eo;
    eo.host = options.chaos_endpoint.first;
    eo.port = options.chaos_endpoint.second;
    eo.node_name = syncer ? "syncer" : "run";
    eo.role = syncer ? "syncer" : "all";
    for (int32_t i = 0; i < exp.learners.count && !syncer; ++i) eo.learners.push_back(i);
    eo.fragments = setup->plan.num_fragments();
    // A port taken since the launcher picked it must not stop the run: it goes on without one.
    try {
      endpoint = std::make_unique<chaos_endpoint>(eo, setup->faults.get());
      std::printf("%s: chaos endpoint on %s:%u\n", exp.name.c_str(), eo.host.c_str(),
                  endpoint->port());
      std::fflush(stdout);
      setup->log->emit("chaos_endpoint",
                       {{"node", eo.node_name}, {"host", eo.host}, {"port", endpoint->port()}});
    } catch (const std::exception& e) {
      setup->log->warn(fmt::format("chaos endpoint off: {}", e.what()));
      setup->log->emit("failure", {{"what", "chaos_endpoint"}, {"error", e.what()}});
    }
  }
  node_transport transport = options.transport;
  transport.middleman = syncer;
  node_config cfg(transport);
  std::unique_ptr<frame_guard> frame_check;  // declared before sys: destroyed after it
  caf::actor_system sys{cfg};
  {
    caf::scoped_actor self{sys};
    auto job_handle = spawn_job(sys, setup, self);
    bool done = false;
    bool interrupt_sent = false;
    bool write_stop_sent = false;
    auto prev = setup->log->snapshot();
    double prev_t = setup->log->now();
    while (!done) {
      self->receive(
          [&](atoms::done_atom) { done = true; },
          [&](atoms::publish_atom, const caf::actor& monitor) {
            // reuse_addr: a restarted syncer binds its port at once (CAF_NOTES: TIME_WAIT).
            const bool guarded = options.max_frame_bytes > 0;
            const char* in = guarded                       ? "127.0.0.1"
                             : options.listen_host.empty() ? nullptr
                                                           : options.listen_host.c_str();
            auto port =
                sys.middleman().publish(monitor, guarded ? 0 : options.listen_port, in, true);
            if (!port) {
              std::fprintf(stderr, "dd-node syncer: cannot listen on %s:%u: %s\n",
                           options.listen_host.c_str(), options.listen_port,
                           sys.render(port.error()).c_str());
              std::fflush(stderr);
              std::_Exit(2);
            }
            uint16_t bound = *port;
            if (guarded) {
              try {
                frame_check = std::make_unique<frame_guard>(
                    options.listen_host, options.listen_port, *port, options.max_frame_bytes,
                    [log = setup->log.get()](const std::string& what) {
                      log->emit("frame_refused", {{"reason", what}});
                      log->warn("frame guard: " + what);
                    });
              } catch (const std::exception& e) {
                std::fprintf(stderr, "dd-node syncer: %s\n", e.what());
                std::fflush(stderr);
                std::_Exit(2);
              }
              bound = frame_check->port();
            }
            setup->log->emit("listening", {{"host", options.listen_host},
                                           {"port", bound},
                                           {"middleman_port", *port},
                                           {"max_frame_bytes", options.max_frame_bytes},
                                           {"run_id", setup->run_id}});
            if (options.on_published) options.on_published(bound);
          },
          caf::after(std::chrono::milliseconds(250)) >> [&] {});
      const double t = setup->log->now();
      const int sig = options.interrupt != nullptr ? options.interrupt->load() : 0;
      if (sig != 0 && !interrupt_sent && !done) {
        interrupt_sent = true;
        const std::string why = signal_name(sig);
        std::fprintf(stderr,
                     "[%7.1fs] %s received: stopping at the next step boundary, then the final "
                     "evaluation and summary.json (send it again to exit at once)\n",
                     t, why.c_str());
        std::fflush(stderr);
        self->send(job_handle, atoms::stop_atom_v, why);
      }
      if (syncer && !done) {
        setup->log->retry_pending();
        const double failing = setup->log->failing_for_s();
        if (failing > exp.checkpoint.max_failing_seconds && setup->log->write_failure().empty())
          setup->log->write_failed(fmt::format(
              "writes kept failing for {:.0f} s (checkpoint.max_failing_seconds = {:g}): {}",
              failing, exp.checkpoint.max_failing_seconds, setup->log->failing_files()));
      }
      // A write the run promised failed (events.jsonl, an owner checkpoint): stop now, loudly
      // (run_log printed the error), rather than train on without a record.
      if (!write_stop_sent && !interrupt_sent && !done && !setup->log->write_failure().empty()) {
        write_stop_sent = true;
        self->send(job_handle, atoms::stop_atom_v, std::string("write failure"));
      }
      if (options.progress_every_s > 0 && t - prev_t >= options.progress_every_s) {
        auto snap = setup->log->snapshot();
        const double spent =
            budget_done(exp, setup->steps_per_learner, snap, t + setup->seconds_before);
        std::printf("%s\n", progress_line(snap, prev, t - prev_t, t, spent).c_str());
        std::fflush(stdout);
        prev = std::move(snap);
        prev_t = t;
      }
    }
  }
  run_result r;
  {
    std::lock_guard<std::mutex> guard(setup->result_mutex);
    r = setup->result;
  }
  write_or_throw((fs::path(setup->run_dir) / "summary.json").string(), r.summary.dump(2) + "\n");
  write_or_throw((fs::path(setup->run_dir) / "run_info.json").string(), r.info.dump(2) + "\n");
  return r;
}

}  // namespace dd::actors
