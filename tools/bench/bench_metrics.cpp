// tools/bench/bench_metrics.cpp — dd-bench-metrics: what a node's metrics (--http) cost a
// learner's inner step, as a ratio of the step's own time measured in the same run.
//
// Per inner step a node with metrics does one extra thing on the learner's thread:
// run_log::note_step (the log's lock, then node_metrics::on_step: the step-time histogram's
// lock, a map lookup and a bucket increment). Each merge, push and evaluation event passes the
// observer too (a few per H steps), and each scrape (Prometheus: every 5-15 s) builds the
// exposition from a snapshot of the run log. This prints:
//   1. the inner step time of a model on the cpu backend (the baseline: the run's small model
//      by default, --width/--layers for larger ones; smaller steps make the ratio larger);
//   2. note_step with metrics attached and without (the difference is the metrics' cost), with
//      --learners threads calling it at once (they share the log's lock as learners do);
//   3. one push event through the observer, and one scrape of a registry with --learners
//      learners and --fragments fragments;
//   4. the cost per step = step path + events per step × event cost + scrape cost × steps per
//      scrape interval⁻¹, and its ratio to the step time (target: under 1%).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "actors/services/node_metrics.hpp"
#include "actors/services/run_log.hpp"
#include "kernels/all_backends.hpp"
#include "kernels/backend.hpp"
#include "runtime/data.hpp"
#include "runtime/trainer.hpp"
#include "tools/bench/bench_util.hpp"
#include "util/flags.hpp"

namespace {

using dd::bench::now;

// Seconds per note_step call, `threads` threads each calling it `n` times at once (best of 3).
double time_note_step(dd::actors::run_log& log, int threads, int n) {
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    std::atomic<int> ready{0};
    std::vector<std::thread> ts;
    std::vector<double> took(static_cast<size_t>(threads));
    for (int t = 0; t < threads; ++t)
      ts.emplace_back([&, t] {
        ready.fetch_add(1);
        while (ready.load() < threads) {}
        const double t0 = now();
        for (int i = 0; i < n; ++i) log.note_step(t, 0.004 + 1e-6 * (i % 1000));
        took[static_cast<size_t>(t)] = now() - t0;
      });
    for (auto& t : ts) t.join();
    best = std::min(best, *std::max_element(took.begin(), took.end()) / n);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int learners = 3, fragments = 2, interval = 4, steps = 30, width = 32, layers = 1, batch = 4,
      context = 32;
  double scrape_every_s = 5.0;
  dd::util::flag_table t("dd-bench-metrics", "[flags]",
                         "The cost of a node's metrics per inner step, as a ratio of the step "
                         "time measured in the same run (target: under 1%).");
  t.count("--learners", &learners, 1, 256, "M", "learner threads and series (default 3)")
      .count("--fragments", &fragments, 1, 256, "P", "fragments in the scraped registry (2)")
      .count("--interval", &interval, 1, 100000, "H",
             "sync interval: a learner pushes P times per H steps (default 4)")
      .count("--steps", &steps, 5, 100000, "N", "timed inner steps (default 30)")
      .count("--width", &width, 8, 4096, "C", "model width (default 32, the test model)")
      .count("--layers", &layers, 1, 64, "L", "model layers (default 1)")
      .count("--batch", &batch, 1, 1024, "B", "sequences per step (default 4)")
      .count("--context", &context, 8, 4096, "T", "tokens per sequence (default 32)")
      .number("--scrape-every", &scrape_every_s, 0.1, 3600, "S",
              "seconds between scrapes (default 5; Prometheus' default is 15)");
  if (auto rc = t.parse(argc, argv)) return *rc;
  try {
    // 1. The baseline: one learner's inner step on the cpu backend.
    dd::kernels::init_all_backends();
    auto be = dd::kernels::make_backend("cpu", {1, 0});
    dd::trainer_config cfg;
    cfg.batch = batch;
    cfg.model.context = cfg.seq_len = context;
    cfg.model.layers = layers;
    cfg.model.heads = std::max(1, std::min(4, width / 16));
    cfg.model.width = width;
    cfg.schedule = dd::lr_schedule{1e-3, 10, 1000, 0.1};
    const auto data = dd::text_dataset::from_file("datasets/tinyshakespeare/input.txt");
    dd::trainer tr(*be, data, cfg);
    for (int i = 0; i < 3; ++i) tr.step();
    std::vector<double> secs;
    for (int i = 0; i < steps; ++i) secs.push_back(tr.step().seconds);
    std::sort(secs.begin(), secs.end());
    const double step_s = secs[secs.size() / 2];
    std::printf(
        "dd-bench-metrics: model L=%d C=%d, batch %d x %d, 1 thread: median inner step "
        "%.3f ms (%d steps)\n",
        layers, width, batch, context, step_s * 1e3, steps);

    // 2. The step path: note_step without and with metrics attached.
    dd::actors::run_log log;
    const int calls = 200000;
    const double bare = time_note_step(log, learners, calls);
    dd::actors::node_metrics_options mo;
    mo.kind = "syncer";
    mo.node = "bench";
    mo.run_id = "0123456789abcdef";
    mo.learners = learners;
    mo.fragments = fragments;
    dd::actors::node_metrics m(mo);
    m.attach(&log);
    const double with = time_note_step(log, learners, calls);
    const double step_path = std::max(0.0, with - bare);
    std::printf(
        "note_step, %d thread%s at once: %.0f ns without metrics, %.0f ns with: %.0f ns "
        "per step\n",
        learners, learners == 1 ? "" : "s", bare * 1e9, with * 1e9, step_path * 1e9);

    // 3. Events through the observer, and a scrape of a registry the size of the run.
    log.update([&](dd::actors::run_counters& c) {
      for (int i = 0; i < learners; ++i) {
        auto& l = c.learners[i];
        l.alive = l.stepping = true;
        l.step = 1000;
        l.tokens = 128000;
        l.last_report_s = 0;
        for (int p = 0; p < fragments; ++p) l.applied[p] = 10;
      }
      for (int p = 0; p < fragments; ++p) c.versions[p] = 10;
    });
    nlohmann::json contributors = nlohmann::json::array();
    for (int i = 0; i < learners; ++i)
      contributors.push_back(
          {{"learner", i}, {"base_version", 9}, {"tokens", 512}, {"weight", 1.0 / learners}});
    // The lines are built before the clock starts: the run log builds them anyway.
    const int events = 2000;
    std::vector<nlohmann::json> merges, pushes;
    for (int i = 0; i < events; ++i) {
      merges.push_back({{"event", "merge"},
                        {"fragment", i % fragments},
                        {"version", 10},
                        {"contributors", contributors},
                        {"grace_s", 0.01},
                        {"round_s", 0.02},
                        {"sync_s", 0.001},
                        {"t", 1.0}});
      pushes.push_back({{"event", "push"},
                        {"fragment", i % fragments},
                        {"learner", i % learners},
                        {"base_version", 9},
                        {"accepted", true},
                        {"bytes", 4096},
                        {"t", 1.0}});
    }
    double t0 = now();
    for (const auto& e : merges) m.on_event(e);
    const double merge_s = (now() - t0) / events;
    t0 = now();
    for (const auto& e : pushes) m.on_event(e);
    const double push_s = (now() - t0) / events;
    size_t bytes = 0;
    t0 = now();
    const int scrapes = 200;
    for (int i = 0; i < scrapes; ++i) bytes = m.scrape().size();
    const double scrape_s = (now() - t0) / scrapes;
    std::printf(
        "observer: %.1f us per merge event, %.1f us per push event; scrape: %.0f us "
        "(%zu bytes, %d learners, %d fragments)\n",
        merge_s * 1e6, push_s * 1e6, scrape_s * 1e6, bytes, learners, fragments);
    m.attach(nullptr);

    // 4. Per step of a learner: the step path; P/H pushes, each at most one merge (an upper
    // bound: a merge takes one or more pushes); a whole scrape per scrape interval's steps.
    const double steps_per_scrape = std::max(1.0, scrape_every_s / step_s);
    const double pushes_per_step = static_cast<double>(fragments) / interval;
    const double per_step =
        step_path + pushes_per_step * (push_s + merge_s) + scrape_s / steps_per_scrape;
    std::printf(
        "per inner step: %.0f ns step path + %.3f pushes x (%.1f + %.1f) us + %.1f us of "
        "scrapes (every %g s)\n",
        step_path * 1e9, pushes_per_step, push_s * 1e6, merge_s * 1e6,
        scrape_s / steps_per_scrape * 1e6, scrape_every_s);
    std::printf("metrics per inner step: %.2f us = %.4f%% of the step time (target < 1%%)\n",
                per_step * 1e6, 100.0 * per_step / step_s);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dd-bench-metrics: %s\n", e.what());
    return 1;
  }
}
