// tools/bench/bench_sync.cpp — dd-bench-sync: what synchronization costs, at the fragment owner
// and at the learners.
//
// Prints, from one run:
//  1. Owner merge throughput. C contributors (--contributors, default 8) of S MB each (--size-mb,
//     default 64 = 16 Mi floats) are merged by the fragment owners' math (runtime/merge.hpp:
//     compute_delta and outer_step, RDA and weighted average, token weights w = tokens²/steps;
//     merge options from actors/nodes/role_contexts.hpp for the default experiment when dd_actors
//     is built) on the backend the owners use ("cpu", 1 thread by default, as
//     actors/nodes/job_runner.cpp gives each owner), over a flat fragment of --tensors tensors
//     (default 4; tensor 0 is an embedding, merged by weighted average even under RDA). The
//     baseline is a plain memcpy of the same C·S bytes into separate destination buffers.
//     Throughput = contributor bytes / s (1 GB = 1e9 bytes) for every kind, so merge/memcpy is a
//     ratio of times for the same input. Kinds are interleaved in each of --repeats rounds; medians
//     are printed, and the ratio is the median over rounds of (merge GB/s / memcpy GB/s of the same
//     round).
//  2. Learner tokens/s with synchronization on and off. The same experiment (default
//     examples/shakespeare.lua with budget.steps = 24, one sync cycle, and no periodic
//     evaluation) is run in-process with actors::run_job; "off" overrides sync.interval to a
//     value above the step budget so no fragment is ever pushed, merged or broadcast. Runs
//     alternate (off/on, on/off, ...) for --rounds rounds. tokens/s = summary "tokens" (all
//     learners) / info "training_seconds" (start of training to the stop of the last learner;
//     the final evaluation is excluded). Also printed: tokens per CPU second of this process
//     (getrusage over the whole run_job call), which other processes on shared cores
//     disturb less than wall time, and the learners' goodput (summary "goodput": time in inner
//     steps / (M × training time)). Overhead = 1 − on / off, of the medians and per round.
//     Part 2 exists only when dd_actors is built (DD_BENCH_HAVE_ACTORS).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <sys/resource.h>

#include "kernels/all_backends.hpp"
#include "kernels/backend.hpp"
#include "runtime/fragments.hpp"
#include "runtime/merge.hpp"
#include "tools/bench/bench_util.hpp"
#include "tools/bench/profiling_backend.hpp"
#include "util/flags.hpp"

#ifdef DD_BENCH_HAVE_ACTORS
#include "actors/nodes/job_runner.hpp"
#include "actors/nodes/role_contexts.hpp"
#include "runtime/config/loader.hpp"
#endif

namespace {

using dd::bench::median;
using dd::bench::now;

// ---- part 1: owner merge throughput -------------------------------------------------------------

/// One fragment of `numel` floats cut into `tensors` contiguous tensors (the last takes the
/// remainder); tensor 0 is an embedding ("wte"), the rest ordinary weights.
dd::fragment_layout flat_layout(size_t numel, int tensors) {
  dd::fragment_layout layout;
  layout.fragment_id = 0;
  layout.numel = numel;
  const size_t each = numel / static_cast<size_t>(tensors);
  size_t off = 0;
  for (int t = 0; t < tensors; ++t) {
    dd::fragment_tensor ft;
    ft.tensor_index = static_cast<size_t>(t);
    ft.name = t == 0 ? "wte" : "h." + std::to_string(t - 1) + ".w";
    ft.fragment_offset = ft.flat_offset = off;
    ft.numel = t + 1 == tensors ? numel - off : each;
    ft.is_embedding = t == 0;
    off += ft.numel;
    layout.tensors.push_back(ft);
  }
  return layout;
}

/// Deterministic pseudo-gradient values in about [-1e-3, 1e-3), distinct per contributor.
void fill_delta(std::vector<float>& host, uint64_t seed) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& x : host) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    x = (static_cast<float>(s >> 40) / static_cast<float>(1u << 24) - 0.5f) * 2e-3f;
  }
}

/// Returns 0 on success.
int bench_merge(int contributors, int size_mb, int tensors, int repeats, int threads) {
  const size_t numel = static_cast<size_t>(size_mb) * (size_t{1} << 20) / sizeof(float);
  const size_t bytes = numel * sizeof(float);
  const double total_bytes = static_cast<double>(bytes) * contributors;
  auto be = dd::kernels::make_backend("cpu", {threads, 0});
  const int be_threads =
      threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const auto layout = flat_layout(numel, tensors);

  std::printf("== 1. owner merge throughput (backend %s, %d thread%s) ==\n", be->name().c_str(),
              threads, threads == 1 ? "" : "s");
  std::printf(
      "%d contributors x %d MB (%zu floats each, %.0f MB in all); fragment of %d tensors "
      "(tensor 0 embedding), %d repeats\n",
      contributors, size_mb, numel, total_bytes / (1 << 20), tensors, repeats);

  // Contributions: backend memory, token weights from unequal work (steps 20..27, 2048
  // tokens/step).
  std::vector<dd::kernels::buffer<float>> src, dst;
  std::vector<dd::contribution> contribs;
  {
    std::vector<float> host(numel);
    for (int m = 0; m < contributors; ++m) {
      fill_delta(host, static_cast<uint64_t>(m) + 1);
      src.push_back(be->alloc<float>(numel));
      be->upload(src.back().data(), host.data(), numel);
      dst.push_back(be->alloc<float>(numel));
      const uint64_t steps = 20 + static_cast<uint64_t>(m % 8);
      dd::contribution c;
      c.delta = src.back().data();
      c.weight = dd::token_weight(steps * 2048, steps);
      c.base_version = 0;
      c.learner_id = m;
      contribs.push_back(c);
    }
  }
  // Σ v² per tensor of every push, as the owner takes it when it checks a push on arrival
  // (owner_core::on_push; it replaced the finiteness pass there). Timed below as its own row.
  std::vector<std::vector<double>> arrival_sq(static_cast<size_t>(contributors));
  for (int m = 0; m < contributors; ++m) {
    arrival_sq[m] = dd::tensor_sum_squares(layout, src[m].data());
    contribs[m].tensor_sq = &arrival_sq[m];
  }
  std::vector<dd::contribution> contribs_no_sq = contribs;
  for (auto& c : contribs_no_sq) c.tensor_sq = nullptr;
  auto theta = be->alloc<float>(numel);
  auto momentum = be->alloc<float>(numel);
  auto delta = be->alloc<float>(numel);
  auto scratch = be->alloc<float>(numel);  // the owner keeps one between merges

#ifdef DD_BENCH_HAVE_ACTORS
  // The fragment owners' merge options as the job builds them (actors/nodes/role_contexts.hpp),
  // from the default experiment (ALGORITHM.md's outer lr and momentum).
  dd::merge_options rda = dd::actors::owner_options_of(dd::config::experiment{}, layout, "").merge;
  // The bench keeps no ring of earlier versions: every Δ is taken against its push's own base.
  rda.anchor = dd::merge_anchor::base;
#else
  dd::merge_options rda;
#endif
  rda.rule = dd::merge_rule::rda;
  dd::merge_options avg = rda;
  avg.rule = dd::merge_rule::weighted_average;

  // The merge as it was before the fused loops: the backend's single ops one after the other
  // (a backend without kernels::fused_merge_ops, here the cpu backend behind a forwarding
  // wrapper) and the norms taken in the merge.
  dd::bench::profiling_backend single_ops(*be);
  enum op_kind { op_memcpy, op_delta, op_outer, op_outer_no_sq, op_outer_old, op_arrival };
  struct kind {
    const char* name;
    op_kind op;
    const dd::merge_options* opts;
    std::vector<double> gbps, ratio;
  };
  std::vector<kind> kinds = {{"memcpy (baseline)", op_memcpy, nullptr, {}, {}},
                             {"compute_delta  rda", op_delta, &rda, {}, {}},
                             {"outer_step     rda", op_outer, &rda, {}, {}},
                             {"compute_delta  weighted_average", op_delta, &avg, {}, {}},
                             {"outer_step     weighted_average", op_outer, &avg, {}, {}},
                             {"outer_step rda, norms in merge", op_outer_no_sq, &rda, {}, {}},
                             {"outer_step rda, single ops", op_outer_old, &rda, {}, {}},
                             {"outer_step avg, single ops", op_outer_old, &avg, {}, {}},
                             {"arrival check (1 thread)", op_arrival, nullptr, {}, {}}};
  // memcpy on the merge's thread count: each thread copies its slice of every contribution.
  const int copiers = std::max(1, be_threads);
  auto parallel_memcpy = [&] {
    auto copy_slice = [&](int t) {
      const size_t lo = bytes * static_cast<size_t>(t) / static_cast<size_t>(copiers);
      const size_t hi = bytes * static_cast<size_t>(t + 1) / static_cast<size_t>(copiers);
      for (int m = 0; m < contributors; ++m)
        std::memcpy(reinterpret_cast<char*>(dst[m].data()) + lo,
                    reinterpret_cast<const char*>(src[m].data()) + lo, hi - lo);
    };
    std::vector<std::thread> pool;
    for (int t = 1; t < copiers; ++t) pool.emplace_back(copy_slice, t);
    copy_slice(0);
    for (auto& th : pool) th.join();
  };
  int rda_fallbacks = 0;
  double sink = 0.0;  // keeps the arrival check's result alive
  auto run_once = [&](const kind& k) -> double {
    const double t0 = now();
    if (k.op == op_memcpy) {
      parallel_memcpy();
    } else if (k.op == op_arrival) {
      for (int m = 0; m < contributors; ++m)
        sink += dd::tensor_sum_squares(layout, src[m].data()).front();
    } else {
      auto r =
          k.op == op_delta
              ? dd::compute_delta(*be, layout, contribs, *k.opts, delta.data())
              : dd::outer_step(*be, layout, k.op == op_outer ? contribs : contribs_no_sq, *k.opts,
                               theta.data(), momentum.data(), nullptr, 1.0f, scratch.data());
      if (!r) throw std::runtime_error("merge failed: " + r.error().message);
      for (const auto& t : r->tensors) rda_fallbacks += t.fallback ? 1 : 0;
    }
    be->synchronize();
    return now() - t0;
  };
  for (const auto& k : kinds) run_once(k);  // warm up: page faults, caches
  for (int r = 0; r < repeats; ++r) {
    double base = 0.0;
    for (auto& k : kinds) {
      const double gbps = total_bytes / run_once(k) * 1e-9;
      k.gbps.push_back(gbps);
      if (k.op == op_memcpy) base = gbps;
      k.ratio.push_back(gbps / base);
    }
  }
  std::printf("  %-32s %10s %16s\n", "kind", "GB/s", "ratio vs memcpy");
  for (const auto& k : kinds)
    std::printf("  %-32s %10.2f %16.3f\n", k.name, median(k.gbps), median(k.ratio));
  std::printf(
      "  (GB/s = %d x %d MB of contributions / seconds, median of %d; ratio = median of "
      "per-round ratios; memcpy on %d thread%s as the merge; outer_step takes each push's "
      "tensor norms from its arrival check, as the owner does, and reuses one scratch)\n",
      contributors, size_mb, repeats, copiers, copiers == 1 ? "" : "s");
  if (rda_fallbacks > 0) std::printf("  note: %d RDA tensor fallbacks occurred\n", rda_fallbacks);
  if (!(sink == sink)) std::printf("  note: the arrival check saw a NaN\n");
  return 0;
}

// ---- part 2: learner tokens/s with synchronization on and off -----------------------------------

#ifdef DD_BENCH_HAVE_ACTORS
/// CPU time of this process (user + system, all threads), seconds.
double process_cpu_s() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  const auto tv = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec);
  };
  return tv(ru.ru_utime) + tv(ru.ru_stime);
}

struct cluster_sample {
  /// The two rates compared: [0] learner tokens / training wall seconds; [1] learner tokens /
  /// CPU seconds of the whole process over the whole run_job call (setup and final evaluation
  /// included: equal in both modes, they dilute the overhead slightly).
  double rate[2] = {0.0, 0.0};
  double training_s = 0.0;
  uint64_t tokens = 0;
  uint64_t merges = 0;
  uint64_t pushes = 0;
  double goodput = 0.0;
};

cluster_sample run_once_cluster(const dd::config::experiment& exp, const std::string& run_dir) {
  dd::actors::run_options ro;
  ro.run_dir = run_dir;
  ro.progress_every_s = 0.0;
  const double cpu0 = process_cpu_s();
  const auto r = dd::actors::run_job(exp, ro);
  const double cpu_s = process_cpu_s() - cpu0;
  if (!r.finished) throw std::runtime_error("cluster run did not finish (" + run_dir + ")");
  cluster_sample s;
  s.tokens = r.summary.value("tokens", uint64_t{0});
  s.training_s = r.info.value("training_seconds", 0.0);
  s.merges = r.summary.value("merges", uint64_t{0});
  s.pushes = r.info.value("pushes", uint64_t{0});
  s.goodput = r.summary.value("goodput", 0.0);
  s.rate[0] = s.training_s > 0 ? static_cast<double>(s.tokens) / s.training_s : 0.0;
  s.rate[1] = cpu_s > 0 ? static_cast<double>(s.tokens) / cpu_s : 0.0;
  return s;
}

/// `overrides` are applied to the experiment file (key=value, as dd-node --set) for both modes.
int bench_cluster(const std::string& experiment_file, const std::vector<std::string>& overrides,
                  int rounds) {
  dd::config::load_options lo;
  lo.overrides = overrides;
  auto on = dd::config::load_file(experiment_file, lo);
  if (!on.ok() || on.experiments.empty())
    throw std::runtime_error("cannot load " + experiment_file + ":\n" + on.error_text());
  const auto& e_on = on.experiments.front();
  // "off": the same experiment with H = 1e6 (the DSL's maximum) — fragment 0 is first due at
  // step H and fragment p ≥ 1 at offset_p = floor(p·H/P) ≥ floor(H/P), both above any step
  // budget this benchmark runs, so no learner ever pushes (checked after each run).
  const int64_t off_interval = 1000000;
  lo.overrides.push_back("sync.interval=" + std::to_string(off_interval));
  auto off = dd::config::load_file(experiment_file, lo);
  if (!off.ok() || off.experiments.empty())
    throw std::runtime_error("cannot load " + experiment_file + " (sync off):\n" +
                             off.error_text());
  const auto& e_off = off.experiments.front();

  std::printf("\n== 2. learner tokens/s, synchronization on vs off (actors::run_job) ==\n");
  std::printf(
      "experiment %s (%s): M=%d learners, batch %d x %d tokens, GPT L=%d C=%d, %lld steps "
      "per learner; P=%d, on: H=%d K=%s, off: H=%lld (no pushes); periodic eval off; %d "
      "rounds\n",
      e_on.name.c_str(), experiment_file.c_str(), e_on.learners.count, e_on.learners.batch,
      e_on.model.context, e_on.model.layers, e_on.model.width,
      static_cast<long long>(e_on.budget.steps), e_on.sync.fragments, e_on.sync.interval,
      e_on.sync.min_quorum.is_fraction()
          ? (std::to_string(e_on.sync.min_quorum.fraction) + " of live").c_str()
          : std::to_string(e_on.sync.min_quorum.count).c_str(),
      static_cast<long long>(off_interval), rounds);
  const auto base_dir = std::filesystem::temp_directory_path() / "dd-bench-sync";
  // [0] wall tokens/s, [1] tokens per process CPU second; per mode, and the paired overheads.
  std::vector<double> all_on[2], all_off[2], pair[2], goodput_on, goodput_off;
  for (int r = 0; r < rounds; ++r) {
    cluster_sample s_on, s_off;
    for (int half = 0; half < 2; ++half) {
      const bool is_on = (half == 0) == (r % 2 == 1);  // off first in even rounds
      const auto dir =
          (base_dir / (std::string(is_on ? "on" : "off") + "_" + std::to_string(r))).string();
      auto s = run_once_cluster(is_on ? e_on : e_off, dir);
      if (!is_on && s.pushes > 0)
        throw std::runtime_error("sync off still pushed " + std::to_string(s.pushes) +
                                 " fragments; lower --steps below H/P = " +
                                 std::to_string(off_interval / e_on.sync.fragments));
      std::printf(
          "  round %d sync %-3s: %8.0f tokens/s, %8.0f tokens/CPU-s  (%llu tokens in "
          "%.2f s, goodput %.3f, %llu pushes, %llu merges)\n",
          r + 1, is_on ? "on" : "off", s.rate[0], s.rate[1],
          static_cast<unsigned long long>(s.tokens), s.training_s, s.goodput,
          static_cast<unsigned long long>(s.pushes), static_cast<unsigned long long>(s.merges));
      std::fflush(stdout);
      (is_on ? s_on : s_off) = s;
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
    goodput_on.push_back(s_on.goodput);
    goodput_off.push_back(s_off.goodput);
    for (int i = 0; i < 2; ++i) {
      all_on[i].push_back(s_on.rate[i]);
      all_off[i].push_back(s_off.rate[i]);
      pair[i].push_back(100.0 * (1.0 - s_on.rate[i] / s_off.rate[i]));
    }
  }
  const char* what[2] = {"tokens/s (wall)      ", "tokens per CPU second"};
  for (int i = 0; i < 2; ++i) {
    const double m_on = median(all_on[i]), m_off = median(all_off[i]);
    std::printf(
        "  %s: median sync off %8.0f | sync on %8.0f | overhead %5.1f%% | median of "
        "per-round overheads %5.1f%% (",
        what[i], m_off, m_on, 100.0 * (1.0 - m_on / m_off), median(pair[i]));
    for (size_t k = 0; k < pair[i].size(); ++k) std::printf("%s%.1f%%", k ? ", " : "", pair[i][k]);
    std::printf(")\n");
  }
  std::printf(
      "  learner goodput (time in inner steps / (M x training time)): median sync off "
      "%.3f | sync on %.3f\n",
      median(goodput_off), median(goodput_on));
  std::printf("  (overhead = 1 - on/off; target <= 5%% for learner tokens/s)\n");
  return 0;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  std::string part = "all", experiment = "examples/shakespeare.lua";
  int contributors = 8, size_mb = 64, tensors = 4, repeats = 5, threads = 1, steps = 24, rounds = 3;
  std::vector<std::string> sets;
  constexpr int big = 1 << 20;
  dd::util::flag_table flags(
      "dd-bench-sync", "[--part all|merge|cluster] [flags]",
      "merge: owner merge throughput against memcpy; cluster: learner tokens/s with\n"
      "synchronization on and off.");
  flags
      .custom("--part", "all|merge|cluster", "which part to run (default all)",
              [&](const std::string& v) -> std::string {
                if (v != "all" && v != "merge" && v != "cluster")
                  return "must be all, merge or cluster, got '" + v + "'";
                part = v;
                return {};
              })
      .count("--contributors", &contributors, 1, 4096, "C", "merge: contributions (default 8)")
      .count("--size-mb", &size_mb, 1, 65536, "S", "merge: MiB per contributor (default 64)")
      .count("--tensors", &tensors, 1, big, "T", "merge: tensors (default 4)")
      .count("--repeats", &repeats, 1, big, "R", "merge: measured repeats (default 5)")
      .count("--threads", &threads, 0, 4096, "N",
             "merge: threads, as each fragment owner (default 1; 0 = all cores; the memcpy "
             "baseline runs on as many)")
      .text("--experiment", &experiment, "FILE",
            "cluster: the experiment (default examples/shakespeare.lua)")
      .count("--steps", &steps, 1, big, "N", "cluster: budget.steps (default 24)")
      .count("--rounds", &rounds, 1, big, "R", "cluster: rounds of on/off (default 3)")
      .texts("--set", &sets, "K=V", "cluster: override a key of the experiment (repeatable)");
  // Override the file only when given.
  const struct {
    const char* flag;
    const char* key;
  } model_flags[] = {{"--learners", "learners.count"}, {"--batch", "learners.batch"},
                     {"--width", "model.width"},       {"--layers", "model.layers"},
                     {"--heads", "model.heads"},       {"--context", "model.context"}};
  std::vector<std::string> model_sets;
  for (const auto& m : model_flags)
    flags.custom(m.flag, "N", std::string("cluster: ") + m.key + " (default: the file's)",
                 [&model_sets, key = std::string(m.key)](const std::string& v) -> std::string {
                   int n = 0;
                   if (!dd::util::parse_number_in(v, n, 1, big))
                     return "needs a whole number in 1..1048576, got '" + v + "'";
                   model_sets.push_back(key + "=" + v);
                   return {};
                 });
  flags.epilog("Exit status: 0 ok; 1 failure; 2 bad flags.\n");
  if (auto rc = flags.parse(argc, argv)) return *rc;
  try {
    dd::kernels::init_all_backends();
    if (part != "cluster") bench_merge(contributors, size_mb, tensors, repeats, threads);
    if (part != "merge") {
#ifdef DD_BENCH_HAVE_ACTORS
      // Shrink the experiment to a short run: one sync cycle (H = 24 steps in the example, whose
      // budget is 600) and no periodic evaluation; the other flags override the file only when
      // given, so by default model, batch, M, P, H and K are the example's.
      std::vector<std::string> all = {"budget.steps=" + std::to_string(steps),
                                      "eval.every_seconds=0"};
      all.insert(all.end(), model_sets.begin(), model_sets.end());
      all.insert(all.end(), sets.begin(), sets.end());
      bench_cluster(experiment, all, rounds);
#else
      std::printf("\n== 2. learner tokens/s: skipped (built without dd_actors) ==\n");
#endif
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dd-bench-sync: error: %s\n", e.what());
    return 1;
  }
}
