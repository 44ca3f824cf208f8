// actors/nodes/job_runner.cpp — see cluster.hpp.
#include "actors/nodes/job_runner.hpp"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>
#include <caf/all.hpp>

#include "actors/link/atoms.hpp"
#include "actors/link/frame_guard.hpp"
#include "actors/nodes/experiment_views.hpp"
#include "actors/nodes/job.hpp"
#include "actors/nodes/syncer_node.hpp"
#include "actors/policy/run_uptime.hpp"
#include "actors/services/chaos_endpoint.hpp"
#include "actors/services/status_page.hpp"
#include "kernels/backend.hpp"
#include "runtime/config/run_dir_default.hpp"
#include "runtime/hf_export.hpp"
#include "runtime/model.hpp"
#include "runtime/rng.hpp"
#include "runtime/run_dir_rules.hpp"
#include "runtime/trainer.hpp"
#include "util/build_info.hpp"

namespace dd::actors {

namespace fs = std::filesystem;

namespace {

/// From this many learner_loss.csv rows on, the uptime computation at the end of a cluster run
/// takes about a second or more (≈0.3 s per 200,000 rows of one learner, plus reading them).
constexpr std::size_t kUptimeNoticeRows = 200000;

std::string signal_name(int sig) {
  if (sig == SIGINT) return "SIGINT";
  if (sig == SIGTERM) return "SIGTERM";
  return "signal " + std::to_string(sig);
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
        "{} '{}' ({} tokens: {} train, {} validation) is too small for {} learner{} with "
        "model.context T = {}: {}; use a larger file, fewer learners (learners.count) or a "
        "shorter context (model.context)",
        exp.data.kind == config::data_kind::tokens ? "data.files" : "data.file", data.origin(),
        n_train + n_val, n_train, n_val, M, M == 1 ? "" : "s", T, what));
  };
  // The same stream each learner's trainer builds; its constructor is what throws for a shard
  // that is too small.
  for (int i = 0; i < M; ++i) {
    try {
      batch_stream probe(data, i, M, T, data_stream_seed(exp.seed), layout);
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

std::vector<std::string> small_data_warnings(const std::string& file, uint64_t train_tokens,
                                             uint64_t validation_tokens, int context,
                                             uint64_t budget_tokens) {
  std::vector<std::string> out;
  constexpr double max_epochs = 20;
  constexpr uint64_t min_windows = 16;
  const double epochs =
      train_tokens > 0 ? static_cast<double>(budget_tokens) / static_cast<double>(train_tokens) : 0;
  if (epochs > max_epochs)
    out.push_back(fmt::format(
        "the budget of {} tokens goes over the {} train tokens of '{}' {:.0f} times: the learners "
        "will memorize it (training loss falling while validation loss rises); use more data or "
        "a smaller budget",
        budget_tokens, train_tokens, file, epochs));
  const uint64_t windows = validation_tokens / (static_cast<uint64_t>(context) + 1);
  if (windows < min_windows)
    out.push_back(fmt::format(
        "the validation split of '{}' holds {} window{} of model.context + 1 = {} tokens: its "
        "loss says little (a larger file, or a smaller data.train_fraction)",
        file, windows, windows == 1 ? "" : "s", context + 1));
  return out;
}

void check_learner_data(const config::experiment& exp, const image_dataset& data) {
  const int M = exp.learners.count;
  const auto layout = exp.data.sharding == config::sharding_kind::interleaved
                          ? shard_layout::interleaved
                          : shard_layout::contiguous;
  for (int i = 0; i < M; ++i) {
    try {
      image_stream probe(data, i, M, data_stream_seed(exp.seed), layout);
      (void)probe;
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(fmt::format(
          "data.images '{}' ({} train images) is too small for {} learner{}: {}; use fewer "
          "learners (learners.count) or a larger train split (data.train_fraction)",
          exp.data.images, data.train_size(), M, M == 1 ? "" : "s", e.what()));
    }
  }
  if (data.validation_size() < 1)
    throw std::invalid_argument(
        fmt::format("data.images '{}': the validation split is empty (data.train_fraction = {})",
                    exp.data.images, exp.data.train_fraction));
}

run_data load_run_data(const config::experiment& exp) {
  run_data d;
  std::error_code ec;
  if (exp.data.kind == config::data_kind::idx) {
    d.images = std::make_shared<image_dataset>(image_dataset::from_files(
        exp.data.images, exp.data.labels, exp.data.train_fraction, exp.model.classes));
    const auto& im = *d.images;
    const size_t n = im.train_size();
    std::vector<uint8_t> bytes(im.image(0), im.image(0) + n * im.pixels());
    for (size_t i = 0; i < n; ++i) bytes.push_back(static_cast<uint8_t>(im.label(i)));
    d.hash = fnv1a_hex(bytes.data(), bytes.size());
    d.bytes = static_cast<uint64_t>(fs::file_size(exp.data.images, ec)) +
              static_cast<uint64_t>(fs::file_size(exp.data.labels, ec));
    return d;
  }
  if (exp.data.kind == config::data_kind::tokens) {
    // The hash covers every token of both splits, so two nodes agree on the shards, their order
    // and the split.
    d.text = std::make_shared<text_dataset>(text_dataset::from_token_files(
        exp.data.files, exp.data.validation_files, parse_token_format(exp.data.format),
        exp.model.vocab, exp.data.train_fraction));
    std::vector<int32_t> all = d.text->train();
    all.insert(all.end(), d.text->validation().begin(), d.text->validation().end());
    d.hash = fnv1a_hex(all.data(), all.size() * sizeof(all[0]));
    for (const auto& f : exp.data.files) d.bytes += static_cast<uint64_t>(fs::file_size(f, ec));
    for (const auto& f : exp.data.validation_files)
      d.bytes += static_cast<uint64_t>(fs::file_size(f, ec));
    return d;
  }
  d.text = std::make_shared<text_dataset>(
      text_dataset::from_file(exp.data.file, exp.data.train_fraction));
  const auto& train = d.text->train();
  d.hash = fnv1a_hex(train.data(), train.size() * sizeof(train[0]));
  d.bytes = static_cast<uint64_t>(fs::file_size(exp.data.file, ec));
  return d;
}

nlohmann::json final_eval_json(const config::experiment& exp, const run_data& data) {
  if (data.images == nullptr) {
    const eval_spec spec = eval_spec_of(exp, *data.text);
    nlohmann::json j = spec.to_json();
    j["bits_per_byte_per_nat"] = spec.bits_per_byte_per_nat(*data.text);
    return j;
  }
  return {
      {"data_kind", "idx"},
      {"images", exp.data.images},
      {"labels", exp.data.labels},
      {"train_fraction", exp.data.train_fraction},
      {"split", "validation"},
      {"validation_first", data.images->train_size()},
      {"validation_samples", data.images->validation_size()},
      {"batch", exp.learners.batch},
      {"covers_split", true},
      {"backend", exp.learners.backend == config::backend_kind::reference ? "reference" : "cpu"}};
}

void check_experiment_data(const config::experiment& exp) {
  if (!exp.model.init_from.empty())
    check_hf_fits(exp.model.init_from, read_hf_gpt2_config(exp.model.init_from), model_of(exp));
  const run_data d = load_run_data(exp);
  if (d.images != nullptr)
    check_learner_data(exp, *d.images);
  else
    check_learner_data(exp, *d.text);
}

std::string check_startable(const config::experiment& exp, start_check_for who, bool force_memory) {
  try {
    check_experiment_data(exp);
  } catch (const std::exception& e) {
    return e.what();
  }
  return check_before_start(exp, who, 0, force_memory);
}

std::shared_ptr<job_setup> make_job_setup(const config::experiment& exp,
                                          const run_options& options) {
  auto s = std::make_shared<job_setup>();
  s->exp = exp;
  s->options = options;
  if (options.tls) s->identities = std::make_shared<peer_identity>();
  s->run_dir = !options.run_dir.empty() ? options.run_dir : config::run_dir_of(exp);
  const int M = exp.learners.count;
  if (M < 1) throw std::invalid_argument("learners.count must be >= 1");
  if (exp.learners.speed.size() > static_cast<size_t>(M))
    throw std::invalid_argument("learners.speed has more entries than learners.count");
  {
    run_data d = load_run_data(exp);
    if (d.images != nullptr)
      check_learner_data(exp, *d.images);
    else
      check_learner_data(exp, *d.text);
    s->final_eval = final_eval_json(exp, d);
    s->data = std::move(d.text);
    s->images = std::move(d.images);
    s->data_hash = std::move(d.hash);
    s->data_bytes = d.bytes;
  }
  {
    const std::string json = config::to_json(exp).dump();
    s->experiment_hash = fnv1a_hex(json.data(), json.size());
    s->state_digest = state_digest(config::to_json(exp));
    s->run_id = options.run_id;
    if (options.resume) {
      // The dd-node commands refuse this before they start (exit 2); a guard for other callers.
      if (auto why = resume_refusal(s->run_dir, config::to_json(exp)); !why.empty())
        throw std::invalid_argument(why);
      auto rec = read_resume_record(s->run_dir, s->run_id);
      std::printf("%s\n", resuming_line(rec).c_str());
      std::fflush(stdout);
      s->run_id = rec.run_id;
      s->resume_versions = std::move(rec.versions);
      s->monitor_record = std::move(rec.monitor_record);
      s->seconds_before = rec.seconds_before;
      s->before = rec.before;
      start_resumed_part(s->run_dir);
      std::ifstream inc(fs::path(s->run_dir) / "syncer_incarnation");
      uint64_t before = 0;
      s->syncer_incarnation = (inc >> before) ? before + 1 : 2;  // an older run dir: at least 2
    }
    if (s->run_id.empty()) s->run_id = new_run_id();
  }
  auto cfg = model_of(exp);
  s->plan = plan_of(exp);
  {
    auto be = kernels::make_backend("cpu", {});
    auto model = make_model(*be, cfg);
    model->init(exp.seed);
    s->initial = model->get_parameters();
    if (!exp.model.init_from.empty()) {
      // The run starts from a transformers GPT-2 directory (runtime/hf_export.hpp); its shape
      // must be the experiment's.
      const model_config have = read_hf_gpt2_config(exp.model.init_from);
      check_hf_fits(exp.model.init_from, have, cfg);
      s->initial = read_hf_gpt2_weights(exp.model.init_from, cfg);
    }
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
  const std::string ckpt_dir = checkpoint_dir_of(s->run_dir, exp.checkpoint.dir);
  fs::create_directories(ckpt_dir);
  // A run directory holds one run (runtime/run_dir.hpp); a resumed run keeps what it holds.
  if (!options.resume)
    s->replaced = clear_earlier_run(s->run_dir, ckpt_dir, s->plan.num_fragments());
  s->log = std::make_unique<run_log>(
      options.write_events ? (fs::path(s->run_dir) / "events.jsonl").string() : std::string{},
      options.keep_events, run_log::clock_fn{}, options.resume);
  if (auto it = s->final_eval.find("bits_per_byte_per_nat");
      it != s->final_eval.end() && it->is_number())
    s->log->set_bits_per_byte_per_nat(it->get<double>());
  if (!options.simulated_time) {
    write_run_id(s->run_dir, s->run_id);
    std::ofstream(fs::path(s->run_dir) / "syncer_incarnation") << s->syncer_incarnation << '\n';
  }
  std::vector<fault_spec> faults;
  for (const auto& f : fault_specs_of(exp, s->steps_per_learner, s->plan.num_fragments()))
    // A syncer node hosts no learner: push and step message faults act in the learner nodes.
    if ((options.role != node_role::syncer || !f.live_window ||
         config::is_broadcast_fault(f.live.what)) &&
        !(options.message_faults_via_endpoint && is_message_fault(f)))
      faults.push_back(f);
  for (const auto& f : options.faults) faults.push_back(f);
  s->faults = std::make_unique<fault_hooks>(faults, s->log.get());
  {
    // Whose experiment this is: the run id beside the resolved experiment (state_refusal).
    auto written = config::to_json(exp);
    written["run_id"] = s->run_id;
    write_file_or_throw((fs::path(s->run_dir) / "experiment.json").string(),
                        written.dump(2) + "\n");
  }
  return s;
}

run_result run_job(const config::experiment& exp, const run_options& options) {
  auto setup = make_job_setup(exp, options);
  if (!setup->replaced.empty()) {
    std::string what;
    for (const auto& r : setup->replaced) what += (what.empty() ? "" : ", ") + r;
    std::fprintf(stderr,
                 "dd-node %s: %s: run directory '%s' held an earlier run (%s): replaced by "
                 "this run (owner checkpoints only serve owners respawned within a run)\n",
                 options.role == node_role::syncer ? "syncer" : "run", exp.name.c_str(),
                 setup->run_dir.c_str(), what.c_str());
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
  if (setup->data != nullptr && exp.budget.kind != config::budget_kind::seconds) {
    const uint64_t budget = setup->steps_per_learner * static_cast<uint64_t>(exp.learners.count) *
                            static_cast<uint64_t>(exp.learners.batch) *
                            static_cast<uint64_t>(exp.model.context);
    for (const auto& w :
         small_data_warnings(setup->data->origin(), setup->data->train().size(),
                             setup->data->validation().size(), exp.model.context, budget))
      setup->log->warn(exp.name + ": " + w);
  }
  const bool syncer = options.role == node_role::syncer;
  // A syncer node goes on through failing writes (retried with backoff, degraded) up to
  // checkpoint.max_failing_seconds; `dd-node run` stops at the first one.
  const write_policy writes =
      syncer ? write_policy::retry_and_degrade(exp.checkpoint.max_failing_seconds)
             : write_policy::end_the_run();
  setup->log->set_write_policy(writes);
  std::unique_ptr<chaos_endpoint> endpoint;  // destroyed before setup (it uses setup->faults)
  if (!options.chaos_endpoint.first.empty()) {
    chaos_endpoint_options eo;
    eo.host = options.chaos_endpoint.first;
    eo.port = options.chaos_endpoint.second;
    eo.node_name = syncer ? "syncer" : "run";
    eo.role = syncer ? "syncer" : "all";
    for (int32_t i = 0; i < exp.learners.count && !syncer; ++i) eo.learners.push_back(i);
    eo.fragments = setup->plan.num_fragments();
    eo.join_token = options.join_token;
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
  node_http http;  // destroyed after sys (below): its metrics observe the log to the end
  if (!options.http.first.empty()) {
    node_metrics_options mo;
    mo.kind = syncer ? "syncer" : "run";
    mo.node = syncer ? "syncer" : "run";
    mo.run_id = setup->run_id;
    mo.learners = exp.learners.count;
    mo.fragments = setup->plan.num_fragments();
    mo.version = util::build_version();
    mo.commit = util::build_commit();
    mo.resumed = options.resume;  // the run figures add the earlier parts, as summary.json
    mo.seconds_before = setup->seconds_before;
    mo.before = setup->before;
    if (options.tls)
      mo.tls_not_after_unix =
          static_cast<double>(std::time(nullptr)) + options.tls->own().seconds_to_expiry;
    http = start_node_http(options.http.first, options.http.second, std::move(mo), setup->log.get(),
                           syncer ? "dd-node syncer" : "dd-node run");
    // The live status page at / (docs/monitoring.md "The status page"); it reads /status.
    if (http.listener)
      serve_status_page(*http.listener, (fs::path(setup->run_dir) / "chaos.jsonl").string());
    if (http.listener && options.on_http) options.on_http(*http.listener, *http.metrics);
  }
  node_transport transport = options.transport;
  transport.middleman = syncer;
  node_config cfg(transport);
  std::unique_ptr<frame_guard> frame_check;  // declared before sys: destroyed after it
  caf::actor_system sys{cfg};
  std::shared_ptr<tensor_channel_hub> channels;  // declared after sys: destroyed before it
  run_result r;                                  // the job's answer
  {
    caf::scoped_actor self{sys};
    auto job_handle = spawn_job(sys, setup, self);
    bool done = false;
    bool interrupt_sent = false;
    bool write_stop_sent = false;
    progress_facts pf;
    pf.exp = &exp;
    pf.steps_per_learner = setup->steps_per_learner;
    pf.resumed = options.resume;
    pf.seconds_before = setup->seconds_before;
    pf.before = setup->before;
    // A syncer node's learners join from elsewhere: the line counts them in.
    pf.expected_learners = syncer ? exp.learners.count : 0;
    run_progress progress(*setup->log, std::move(pf), setup->log->now());
    while (!done) {
      self->receive(
          [&](atoms::finished_atom, run_result& result) {
            r = std::move(result);
            done = true;
          },
          [&](atoms::publish_atom, const monitor_hdl& monitor) {
            publish_monitor(sys, monitor, *setup, frame_check, channels);
            if (http.metrics) http.metrics->set_serving(true);
          },
          caf::after(std::chrono::milliseconds(250)) >> [&] {});
      if (http.metrics) http.metrics->sample();
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
      if (!done) {
        // What the writes failing now mean, as the node's policy says (under end_the_run nothing
        // is ever failing here: the first failure already was the run's write failure).
        setup->log->retry_pending();
        const double failing = setup->log->failing_for_s();
        if (writes.on_failing(failing) == write_verdict::end_the_run &&
            setup->log->write_failure().empty())
          setup->log->write_failed(writes.limit_message(failing, setup->log->failing_files()));
      }
      // A write the run promised failed (events.jsonl, an owner checkpoint): stop now, loudly
      // (run_log printed the error), rather than train on without a record.
      if (!write_stop_sent && !interrupt_sent && !done && !setup->log->write_failure().empty()) {
        write_stop_sent = true;
        self->send(job_handle, atoms::stop_atom_v, std::string("write failure"));
      }
      if (options.progress_every_s > 0 && progress.since_last(t) >= options.progress_every_s) {
        std::printf("%s\n",
                    progress.line(*setup->log, t, interrupt_sent || write_stop_sent).c_str());
        std::fflush(stdout);
      }
    }
  }
  if (http.metrics) http.metrics->set_ending();
  // A cluster run's uptime: by the rule and from the files `dd-chaos report` judges downtime by
  // (actors/policy/run_uptime.hpp), over every part, with K = sync.min_quorum — learners that
  // step through a syncer outage are up, and the time from a part's planned stop to its resume
  // is not observed. (dd-node run keeps the monitor's figure: its learners
  // share the process, so no outage separates them from it.)
  if (syncer && !options.simulated_time && r.summary.is_object() && r.summary.contains("uptime")) {
    const auto k = exp.sync.min_quorum.resolve(static_cast<size_t>(exp.learners.count));
    const auto steps = policy::read_run_steps(setup->run_dir);
    // O(n log n) per learner, but a long run has millions of rows: say what the pause is.
    if (steps.rows >= kUptimeNoticeRows) {
      std::printf("computing the run's uptime over %zu learner steps…\n", steps.rows);
      std::fflush(stdout);
    }
    const auto u = policy::run_uptime(steps, k);
    if (u.known) r.summary["uptime"] = u.figures.uptime();
  }
  write_result_files(setup->run_dir, r.summary, r.info);
  return r;
}

}  // namespace dd::actors
