// tools/chaos/report.cpp — see report.hpp. The inputs are read by report_inputs.cpp, the
// fault times and the downtime computed by fault_timing.cpp, the merge invariants checked by
// invariants.hpp (shared with the cluster tests); this judges them, report_format.cpp prints.
//
//   events.jsonl + nodes/*.events.jsonl ──> one stream ordered by "time" ──┐
//   chaos.jsonl (tape) + in-process "fault" events ──> faults ─────────────┼──> per-fault times
//   learner_loss.csv + nodes' outage_steps ──> stepping ──> global downtime   ├──> run figures
//   summary.json, experiment.json, baseline summary.json ──────────────────┴──> invariants
#include "tools/chaos/report.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "actors/policy/run_uptime.hpp"
#include "tools/chaos/common.hpp"
#include "tools/chaos/fault_timing.hpp"
#include "tools/chaos/invariants.hpp"
#include "tools/chaos/report_inputs.hpp"

namespace dd::chaos {

using nlohmann::json;
using namespace report_detail;

namespace {

/// How late an owner may learn of a membership change the monitor logged (the independent
/// quorum check, invariants.hpp): a live view crosses one link, well under the heartbeat period.
constexpr double report_view_lag_s = 2.0;
/// no_divergence: the start loss is the median of each learner's first this many heartbeat
/// losses, and a final validation loss above this factor × it is a diverged run (a short run
/// ends near its start loss; a diverged one far above it).
constexpr size_t k_start_loss_rows = 5;
constexpr double k_divergence_factor = 1.1;

std::optional<double> num(const json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_number()) return std::nullopt;
  return j[key].get<double>();
}

json verdict(const std::string& name, const std::string& v, const std::string& detail) {
  return {{"name", name}, {"verdict", v}, {"detail", detail}};
}

// Longest gap between consecutive times (sorted); {0,0,0} when fewer than two.
json longest_gap(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  double best = 0, from = 0, to = 0;
  for (size_t i = 1; i < t.size(); ++i)
    if (t[i] - t[i - 1] > best) {
      best = t[i] - t[i - 1];
      from = t[i - 1];
      to = t[i];
    }
  if (t.size() < 2) return {{"longest_s", nullptr}, {"merges", t.size()}};
  return {{"longest_s", best}, {"from", from}, {"to", to}, {"merges", t.size()}};
}

/// One learner_loss.csv row: learner, step, tokens (the learner's total over its incarnations).
struct loss_tokens_row {
  long long learner;
  unsigned long long step, tokens;
};

/// tokens_match_steps: every learner's tokens are its steps × tokens per step (learners.batch ×
/// model.context; × 1 for image data), in the monitor's record (monitor.json) and in every
/// learner_loss.csv row; a learner's tokens never go backwards in learner_loss.csv; and
/// summary.json's tokens are the sum over the record's learners. A synchronous baseline
/// (sync.min_quorum = every learner) resumes a restarted learner at the group's step, so there
/// the tokens may only fall short of steps × tokens per step.
json tokens_verdict(const std::optional<json>& summary, const std::optional<json>& experiment,
                    const std::optional<json>& record, const std::vector<loss_tokens_row>& rows) {
  const char* name = "tokens_match_steps";
  if (!experiment || !experiment->contains("learners") || !experiment->contains("model"))
    return verdict(name, "unknown", "experiment.json is missing");
  const json& ex = *experiment;
  const long long batch = ex["learners"].value("batch", 0LL);
  const bool images =
      ex.contains("data") && ex["data"].is_object() && ex["data"].value("kind", "") == "idx";
  const long long per_step = batch * (images ? 1LL : ex["model"].value("context", 0LL));
  if (per_step <= 0) return verdict(name, "unknown", "experiment.json has no batch or context");
  bool synchronous = false;
  if (ex.contains("sync") && ex["sync"].is_object() && ex["sync"].contains("min_quorum")) {
    const json& k = ex["sync"]["min_quorum"];
    const long long m = ex["learners"].value("count", 0LL);
    synchronous = k.is_number_integer() ? k.get<long long>() >= m
                                        : (k.is_object() && k.value("fraction", 0.0) >= 1.0);
  }
  const auto tokens_ok = [&](unsigned long long step, unsigned long long tokens) {
    const unsigned long long want = step * static_cast<unsigned long long>(per_step);
    return synchronous ? tokens <= want : tokens == want;
  };
  std::vector<std::string> bad;
  size_t checked_rows = 0;
  // Per learner: its newest step and tokens (rows in file order), and its final step.
  std::map<long long, std::pair<unsigned long long, unsigned long long>> last;
  std::map<long long, unsigned long long> final_step;
  for (const auto& r : rows) {
    ++checked_rows;
    if (!tokens_ok(r.step, r.tokens))
      bad.push_back(fmt::format("learner_loss.csv: learner {} at step {} has {} tokens, not {}",
                                r.learner, r.step, r.tokens, r.step * per_step));
    // Backwards: fewer tokens at a step that did not go back (a learner restarted from an
    // older record redoes its steps: both go back).
    auto it = last.find(r.learner);
    if (it != last.end() && r.tokens < it->second.second && r.step >= it->second.first)
      bad.push_back(
          fmt::format("learner_loss.csv: learner {}'s tokens went back from {} to {} at step {}",
                      r.learner, it->second.second, r.tokens, r.step));
    last[r.learner] = {r.step, r.tokens};
    final_step[r.learner] = std::max(final_step[r.learner], r.step);
  }
  bool have_record = false;
  if (record && record->contains("learners") && (*record)["learners"].is_array()) {
    have_record = true;
    for (const auto& l : (*record)["learners"]) {
      const auto step = l.value("step", 0ULL);
      const auto t = l.value("tokens_before", 0ULL) + l.value("tokens_this_incarnation", 0ULL);
      if (!tokens_ok(step, t))
        bad.push_back(fmt::format("monitor.json: learner {} at step {} has {} tokens, not {}",
                                  l.value("learner", -1), step, t, step * per_step));
      auto& f = final_step[l.value("learner", -1LL)];
      f = std::max(f, step);
    }
  }
  // summary.json: Σ over learners of their final step (the record's, or a later row's: the
  // record is written every 2 s and at leaves) × tokens per step.
  unsigned long long steps_total = 0;
  for (const auto& [id, step] : final_step) steps_total += step;
  const unsigned long long want = steps_total * static_cast<unsigned long long>(per_step);
  std::optional<unsigned long long> summary_tokens;
  if (summary && summary->contains("tokens") && (*summary)["tokens"].is_number_unsigned())
    summary_tokens = (*summary)["tokens"].get<unsigned long long>();
  if (summary_tokens && !final_step.empty() &&
      (synchronous ? *summary_tokens > want : *summary_tokens != want))
    bad.push_back(fmt::format("summary.json counts {} tokens, the learners' {} steps {}",
                              *summary_tokens, steps_total, want));
  if (!bad.empty()) {
    std::string s;
    for (size_t i = 0; i < bad.size() && i < 3; ++i) s += (i ? "; " : "") + bad[i];
    if (bad.size() > 3) s += fmt::format("; … {} more", bad.size() - 3);
    return verdict(name, "invalid", s);
  }
  if (!have_record && checked_rows == 0)
    return verdict(name, "unknown", "monitor.json and learner_loss.csv are missing");
  return verdict(
      name, "valid",
      fmt::format("{} steps × {} tokens per step = {}{}; {} learner_loss.csv rows{}{}", steps_total,
                  per_step, want, summary_tokens ? " = summary.json's tokens" : "", checked_rows,
                  have_record ? " and monitor.json agree" : "",
                  synchronous ? " (synchronous: at most steps × tokens per step)" : ""));
}

/// Faults that alter the values a learner pushes (finite but absurd): what the plausibility
/// gate exists to refuse.
bool alters_pushes(const std::string& kind) {
  return kind == "scale_push" || kind == "random_push";
}

/// A push of `learner` at `t` may have been altered by a fault: a scale_push or random_push
/// injected at or before `t` on that learner (or on learners the report cannot name).
bool push_altered(const std::vector<fault>& faults, int learner, double t) {
  for (const auto& f : faults)
    if (alters_pushes(f.kind) && f.result != "refused" && f.result != "failed" && f.at <= t &&
        (f.learners.empty() || f.learners.count(learner) != 0))
      return true;
  return false;
}

/// "1 push", "3 pushes".
std::string pushes(size_t n) { return fmt::format("{} push{}", n, n == 1 ? "" : "es"); }

/// "learner 1 (8), learner 3 (1)": a count per learner.
std::string per_learner(const std::map<int, size_t>& by) {
  std::string s;
  for (const auto& [l, n] : by) s += fmt::format("{}learner {} ({})", s.empty() ? "" : ", ", l, n);
  return s;
}

/// `parts` joined with `sep`.
std::string joined(const std::vector<std::string>& parts, const char* sep) {
  std::string s;
  for (const auto& p : parts) s += (s.empty() ? "" : sep) + p;
  return s;
}

/// Every leaf of `j` under `path` as (dotted path, value); an array or a scalar is one leaf.
void leaves(const json& j, const std::string& path, std::map<std::string, json>& out) {
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) leaves(v, path.empty() ? k : path + "." + k, out);
    return;
  }
  out[path] = j;
}

}  // namespace

std::vector<std::string> experiment_differences(const json& run, const json& baseline) {
  // The parts of an experiment that decide what the final loss measures: what is trained (model,
  // data), for how long (budget, learners' count and batch), how (inner, outer, sync), and on
  // which validation windows the final loss is scored (eval.windows).
  static const char* const compared[] = {"budget",         "model",          "data",
                                         "learners/count", "learners/batch", "eval/windows",
                                         "inner",          "outer",          "sync"};
  std::map<std::string, json> a, b;
  for (const char* p : compared) {
    const json::json_pointer ptr(std::string("/") + p);
    std::string dotted = p;
    std::replace(dotted.begin(), dotted.end(), '/', '.');
    if (run.is_object() && run.contains(ptr)) leaves(run.at(ptr), dotted, a);
    if (baseline.is_object() && baseline.contains(ptr)) leaves(baseline.at(ptr), dotted, b);
  }
  std::vector<std::string> out;
  auto shown = [](const std::map<std::string, json>& m, const std::string& k) {
    const auto it = m.find(k);
    return it == m.end() ? std::string("-") : it->second.dump();
  };
  std::set<std::string> keys;
  for (const auto& [k, v] : a) keys.insert(k);
  for (const auto& [k, v] : b) keys.insert(k);
  for (const auto& k : keys) {
    const auto ia = a.find(k), ib = b.find(k);
    if (ia != a.end() && ib != b.end() && ia->second == ib->second) continue;
    out.push_back(fmt::format("{}: {} vs {}", k, shown(a, k), shown(b, k)));
  }
  return out;
}

json build_report(const report_options& o) {
  const report_inputs in = read_report_inputs(o);
  const auto& evs = in.events;
  const auto& faults = in.faults;
  const double run_start = in.run_start;
  const bool have_syncer_events = in.have_syncer_events;
  const json& inputs = in.notes;

  const fault_times times = time_faults(in);
  const json& fault_rows = times.rows;
  const auto& unrecovered = times.unrecovered;
  const size_t judged_faults = times.judged;
  const json& unexplained = times.unexplained;
  // Global downtime from the heartbeat rows and the nodes' samples: the definition summary.json's
  // uptime of a cluster run uses too (actors/policy/run_uptime.hpp), here with K = 1 (no learner
  // stepping).
  std::optional<double> downtime, observed;
  json downtime_gaps = json::array(), between_parts = json::array();
  const policy::run_steps steps = policy::read_run_steps(o.run_dir);
  if (steps.have_csv) {
    if (const auto u = policy::run_uptime(steps, 1); u.known) {
      downtime = u.figures.down_s;
      observed = u.figures.observed_s;
      for (const auto& g : u.figures.gaps)
        downtime_gaps.push_back({{"from", g.from}, {"to", g.to}, {"seconds", g.to - g.from}});
      // A planned stop up to the next part's resume: outside the observed time.
      for (const auto& g : u.between)
        between_parts.push_back({{"from", g.from}, {"to", g.to}, {"seconds", g.to - g.from}});
    }
  }

  // ---- merges: quorum, duplicates, versions, non-finite values, pauses.
  const auto& experiment = in.experiment;
  // The quorum, duplicate and version invariants: tools/chaos/invariants.hpp (shared with the
  // cluster tests). K comes from experiment.json; the owners may hear of a membership change
  // up to report_view_lag_s after the monitor logged it.
  invariants::merge_options mo;
  if (experiment && experiment->contains("sync") && (*experiment)["sync"].is_object() &&
      (*experiment)["sync"].contains("min_quorum"))
    mo.quorum = invariants::quorum_rule::from_json((*experiment)["sync"]["min_quorum"]);
  mo.view_lag_s = report_view_lag_s;
  invariants::merge_checker checker(mo);
  size_t nonfinite = 0, no_norm = 0;
  uint64_t lost_versions = 0;
  // Owners (re)started on a fragment that had merged already (a syncer restart, or an owner
  // restored alone): the only moments a version can be lost.
  size_t owner_restarts = 0;
  std::vector<std::string> lost_detail;
  std::map<int, uint64_t> last_merged;
  std::vector<double> merge_times;
  double tokens_merged = 0;  // Σ contributors' tokens over every merge (all parts of the run)
  std::map<int, std::vector<double>> merge_times_by_frag;
  // pushes: accepted (fragment, learner, transfer) -> times; refused chunks -> times
  std::map<std::tuple<int, int, uint64_t>, std::vector<double>> accepted, refused;
  size_t push_events = 0, chunks_refused_push = 0, chunks_refused_broadcast = 0,
         learner_nonfinite = 0;
  size_t corrupt_merged = 0, unmatched = 0;
  std::vector<std::string> corrupt_detail;
  // Pushes the owners refused as implausible, per learner (all, and those no fault explains).
  std::map<int, size_t> implausible_by_learner, implausible_unexplained;
  for (const auto& e : evs) {
    const std::string k = e.kind();
    if (k == "chunk_refused") {
      if (e.j.value("what", "") == "broadcast") {
        ++chunks_refused_broadcast;
      } else {
        ++chunks_refused_push;
        refused[{e.j.value("fragment", -1), e.j.value("learner", -1),
                 e.j.value("transfer_id", uint64_t{0})}]
            .push_back(e.time);
      }
      continue;
    }
    if (k == "nonfinite") ++learner_nonfinite;
    if (e.node != "syncer") continue;
    checker.observe(e.j, e.time);
    if (k == "push") {
      ++push_events;
      if (!e.j.value("accepted", true) && e.j.value("reason", "") == "implausible") {
        const int l = e.j.value("learner", -1);
        ++implausible_by_learner[l];
        if (!push_altered(faults, l, e.time)) ++implausible_unexplained[l];
      }
      if (e.j.value("accepted", false))
        accepted[{e.j.value("fragment", -1), e.j.value("learner", -1),
                  e.j.value("transfer_id", uint64_t{0})}]
            .push_back(e.time);
    } else if (k == "owner_start" || k == "owner_restored") {
      const int frag = e.j.value("fragment", -1);
      const uint64_t v = e.j.value("version", uint64_t{0});
      if (last_merged.count(frag)) ++owner_restarts;
      if (last_merged.count(frag) && v < last_merged[frag]) {
        lost_versions += last_merged[frag] - v;
        lost_detail.push_back(fmt::format("fragment {}: merged up to version {}, restored at {}",
                                          frag, last_merged[frag], v));
      }
    } else if (k == "merge") {
      const int frag = e.j.value("fragment", -1);
      const uint64_t v = e.j.value("version", uint64_t{0});
      for (const auto& c : e.j.value("contributors", json::array()))
        if (c.contains("tokens") && c["tokens"].is_number())
          tokens_merged += c["tokens"].get<double>();
      merge_times.push_back(e.time);
      merge_times_by_frag[frag].push_back(e.time);
      const auto contributors = e.j.value("contributors", json::array());
      last_merged[frag] = std::max(last_merged[frag], v);
      if (!e.j.contains("delta_norm")) {
        ++no_norm;
      } else if (!e.j["delta_norm"].is_number() ||
                 !std::isfinite(e.j["delta_norm"].get<double>())) {
        ++nonfinite;
      }
      for (const auto& c : contributors) {
        if (!c.contains("transfer_id")) continue;
        const int l = c.value("learner", -1);
        const uint64_t tr = c.value("transfer_id", uint64_t{0});
        // The contribution must come from an accepted push after any refusal of that transfer.
        const auto pk = std::make_tuple(frag, l, tr);
        std::optional<double> last_accept, last_refuse;
        if (accepted.count(pk))
          for (double t : accepted[pk])
            if (t <= e.time) last_accept = t;
        if (refused.count(pk))
          for (double t : refused[pk])
            if (t <= e.time) last_refuse = t;
        if (last_refuse && (!last_accept || *last_accept < *last_refuse)) {
          ++corrupt_merged;
          corrupt_detail.push_back(fmt::format(
              "fragment {} version {}: learner {} transfer {} merged after its chunk was refused "
              "and never accepted again",
              frag, v, l, tr));
        } else if (!last_accept) {
          ++unmatched;
        }
      }
    }
  }

  const auto total = [](const std::map<int, size_t>& by) {
    size_t n = 0;
    for (const auto& [l, c] : by) n += c;
    return n;
  };
  const size_t merges = checker.merges(), below_quorum = checker.merges_below_quorum();
  const size_t repeated = checker.version_repeated().size(), twice = checker.merged_twice().size();
  const size_t contributions = checker.contributions(), with_transfer = checker.with_transfer();
  std::vector<std::string> below_detail = checker.below_own_quorum();
  below_detail.insert(below_detail.end(), checker.below_quorum().begin(),
                      checker.below_quorum().end());
  const auto& twice_detail = checker.merged_twice();
  const auto& repeated_detail = checker.version_repeated();

  // ---- run figures: summary, experiment, baseline, the monitor's record.
  const auto& summary = in.summary;
  const auto& base_summary = in.baseline_summary;
  // The baseline's settings that differ from this run's (both experiment.json present).
  std::vector<std::string> baseline_differs;
  if (in.experiment && in.baseline_experiment)
    baseline_differs = experiment_differences(*in.experiment, *in.baseline_experiment);
  const auto& monitor_record = in.monitor_record;
  // Each row's (learner, step, tokens), in file order (the token invariant below).
  std::vector<loss_tokens_row> token_rows;
  {
    std::ifstream csv(std::filesystem::path(o.run_dir) / "learner_loss.csv");
    std::string line;
    std::getline(csv, line);  // header
    while (std::getline(csv, line)) {
      const auto f = split(line, ',');
      try {
        if (f.size() >= 5)
          token_rows.push_back({std::stoll(f[1]), std::stoull(f[3]), std::stoull(f[4])});
      } catch (const std::exception&) {}
    }
  }
  std::optional<int> every_versions;
  if (experiment && experiment->contains("checkpoint") &&
      (*experiment)["checkpoint"].contains("every_versions") &&
      (*experiment)["checkpoint"]["every_versions"].is_number_integer())
    every_versions = (*experiment)["checkpoint"]["every_versions"].get<int>();
  std::optional<double> loss, base_loss;
  if (summary) loss = num(*summary, "final_val_loss");
  if (base_summary) base_loss = num(*base_summary, "final_val_loss");
  // A final loss written as null (NaN or Inf) is a diverged run, not a missing figure.
  const bool loss_not_finite =
      summary && summary->contains("final_val_loss") && (*summary)["final_val_loss"].is_null();
  // The training loss at the start: the median of each learner's first heartbeat losses.
  std::optional<double> start_loss;
  {
    std::vector<double> first;
    for (const auto& [learner, rows] : in.heartbeats) {
      size_t taken = 0;
      for (const auto& r : rows) {
        if (taken == k_start_loss_rows) break;
        if (!std::isfinite(r.loss)) continue;
        first.push_back(r.loss);
        ++taken;
      }
    }
    if (!first.empty()) {
      std::nth_element(first.begin(), first.begin() + first.size() / 2, first.end());
      start_loss = first[first.size() / 2];
    }
  }

  json run = {{"start", evs.empty() ? json(nullptr) : json(run_start)},
              {"events", evs.size()},
              {"faults", faults.size()},
              {"global_downtime_s", opt(downtime)},
              {"downtime_intervals", downtime_gaps},
              {"between_parts", between_parts},
              {"unexplained", {{"count", unexplained.size()}, {"events", unexplained}}},
              {"merges", merges},
              {"merges_below_quorum", below_quorum},
              {"versions_lost", lost_versions},
              {"versions_repeated", repeated},
              {"checkpoint_every_versions", every_versions ? json(*every_versions) : json(nullptr)},
              {"pushes", push_events},
              {"pushes_merged_twice", twice},
              {"pushes_implausible", total(implausible_by_learner)},
              {"pushes_implausible_unexplained", total(implausible_unexplained)},
              {"chunks_refused", chunks_refused_push + chunks_refused_broadcast},
              {"chunks_refused_push", chunks_refused_push},
              {"chunks_refused_broadcast", chunks_refused_broadcast},
              {"corrupt_chunks_merged", corrupt_merged},
              {"contributions_without_accepted_push", unmatched},
              {"nonfinite_merges", nonfinite},
              {"nonfinite_learner_steps", learner_nonfinite},
              {"final_val_loss", opt(loss)},
              {"start_loss", opt(start_loss)},
              {"baseline_val_loss", opt(base_loss)},
              {"baseline_differences", baseline_differs},
              {"loss_vs_baseline",
               loss && base_loss && *base_loss > 0 ? json(*loss / *base_loss - 1) : json(nullptr)}};
  // The run's uptime by the same rule with K = sync.min_quorum (what summary.json `uptime` of a
  // cluster run is): the share of the observed time with at least K learners stepping.
  run["observed_s"] = opt(observed);
  run["uptime_from_steps"] = nullptr;
  if (experiment && observed) {
    const json& ex = *experiment;
    const long long m = ex.contains("learners") && ex["learners"].is_object()
                            ? ex["learners"].value("count", 1LL)
                            : 1LL;
    long long k = 1;
    if (ex.contains("sync") && ex["sync"].is_object() && ex["sync"].contains("min_quorum")) {
      const json& q = ex["sync"]["min_quorum"];
      if (q.is_number_integer())
        k = q.get<long long>();
      else if (q.is_object())
        k = static_cast<long long>(
            std::ceil(q.value("fraction", 0.0) * static_cast<double>(m) - 1e-9));
    }
    k = std::clamp<long long>(k, 1, std::max<long long>(1, m));
    const auto u = policy::run_uptime(steps, static_cast<size_t>(k));
    if (u.known) run["uptime_from_steps"] = u.figures.uptime();
    run["uptime_quorum"] = k;
  }
  json pauses = {{"global", longest_gap(merge_times)}, {"fragments", json::object()}};
  for (const auto& [frag, ts] : merge_times_by_frag)
    pauses["fragments"][std::to_string(frag)] = longest_gap(ts);
  run["merge_pauses"] = pauses;
  for (const char* k : {"goodput", "effective_goodput", "uptime", "tokens", "wall_seconds"})
    run[k] = summary && summary->contains(k) ? (*summary)[k] : json(nullptr);
  // A resumed run's summary.json is written by its last part: wall seconds, merges and uptime
  // of that part only (tokens and compute seconds carry over in the monitor's record). The
  // whole run's figures come from the events of every part; the summary's stay in last_part.
  size_t parts = 0;
  double syncer_first = 0, syncer_last = 0;
  for (const auto& e : evs) {
    if (e.node != "syncer") continue;
    if (syncer_first == 0) syncer_first = e.time;
    syncer_last = e.time;
    if (e.kind() == "start" || e.kind() == "resume") ++parts;
  }
  run["parts"] = parts;
  if (summary && summary->value("resumed", false)) {
    json last = json::object();
    for (const char* k : {"goodput", "effective_goodput", "uptime", "wall_seconds", "merges"})
      last[k] = summary->contains(k) ? (*summary)[k] : json(nullptr);
    last["seconds_before_resume"] = summary->value("seconds_before_resume", json(nullptr));
    run["last_part"] = last;
    run["wall_seconds"] = syncer_last - syncer_first;
    const double tokens = summary->value("tokens", 0.0);
    int fragments = 0;
    if (experiment && experiment->contains("sync") && (*experiment)["sync"].is_object())
      fragments = (*experiment)["sync"].value("fragments", 0);
    if (fragments <= 0) fragments = static_cast<int>(merge_times_by_frag.size());
    run["effective_goodput"] = tokens > 0 && fragments > 0
                                   ? json(std::min(1.0, tokens_merged / (fragments * tokens)))
                                   : json(nullptr);
  }

  // ---- verdicts.
  auto list = [](const std::vector<std::string>& v) {
    std::string s;
    for (size_t i = 0; i < v.size() && i < 3; ++i) s += (i ? "; " : "") + v[i];
    if (v.size() > 3) s += fmt::format("; … {} more", v.size() - 3);
    return s;
  };
  const std::string no_merges =
      have_syncer_events ? "no merge event in events.jsonl" : "events.jsonl is missing";
  json inv = json::array();
  if (merges == 0) {
    for (const char* n : {"no_merge_below_quorum", "no_push_merged_twice", "no_version_repeated",
                          "no_corrupt_chunk_merged", "no_nonfinite_in_global_fragment"})
      inv.push_back(verdict(n, "unknown", no_merges));
  } else {
    inv.push_back(
        below_quorum
            ? verdict("no_merge_below_quorum", "invalid",
                      fmt::format("{} of {} merges: {}", below_quorum, merges, list(below_detail)))
            : verdict(
                  "no_merge_below_quorum", "valid",
                  fmt::format("{} merges, each with at least its quorum "
                              "(merge.needed{})",
                              merges,
                              mo.quorum ? ", and " + mo.quorum->describe() + " of the learners live"
                                        : std::string())));
    if (with_transfer == 0 && contributions > 0)
      inv.push_back(
          verdict("no_push_merged_twice", "unknown", "merge contributors carry no transfer_id"));
    else
      inv.push_back(twice ? verdict("no_push_merged_twice", "invalid", list(twice_detail))
                          : verdict("no_push_merged_twice", "valid",
                                    fmt::format("{} merged contributions, each (fragment, learner, "
                                                "incarnation, transfer_id) once",
                                                contributions)));
    inv.push_back(repeated ? verdict("no_version_repeated", "invalid", list(repeated_detail))
                           : verdict("no_version_repeated", "valid",
                                     "versions strictly increase between owner (re)starts"));
    if (push_events == 0)
      inv.push_back(
          verdict("no_corrupt_chunk_merged", "unknown",
                  "no push event: merged contributions cannot be matched to accepted pushes"));
    else
      inv.push_back(corrupt_merged
                        ? verdict("no_corrupt_chunk_merged", "invalid", list(corrupt_detail))
                        : verdict("no_corrupt_chunk_merged", "valid",
                                  fmt::format("{} chunks refused, none of their transfers merged "
                                              "without a later accepted push",
                                              chunks_refused_push + chunks_refused_broadcast)));
    if (no_norm == merges)
      inv.push_back(verdict("no_nonfinite_in_global_fragment", "unknown",
                            "merge events carry no delta_norm"));
    else
      inv.push_back(nonfinite
                        ? verdict("no_nonfinite_in_global_fragment", "invalid",
                                  fmt::format("{} merges with a non-finite delta_norm", nonfinite))
                        : verdict("no_nonfinite_in_global_fragment", "valid",
                                  fmt::format("every merge's delta_norm is finite ({} learner "
                                              "steps discarded as non-finite)",
                                              learner_nonfinite)));
  }
  if (merges == 0)
    inv.push_back(verdict("no_version_lost", "unknown", no_merges));
  else if (owner_restarts == 0)
    // Versions are lost only when an owner restarts from a checkpoint older than its last merge:
    // without a restart after the first merge every merged version stands, whatever
    // checkpoint.every_versions is.
    inv.push_back(verdict("no_version_lost", "valid",
                          "no owner restarted after its fragment merged (the syncer never "
                          "restarted), so no version can have been lost"));
  else if (!every_versions)
    inv.push_back(
        verdict("no_version_lost", "unknown",
                fmt::format("{} versions lost; judged only with checkpoint.every_versions "
                            "= 1 (experiment.json {})",
                            lost_versions, experiment ? "has none" : "is missing")));
  else if (*every_versions != 1)
    inv.push_back(verdict("no_version_lost", "unknown",
                          fmt::format("{} versions lost; checkpoint.every_versions = {}, so losing "
                                      "up to that many per restart is allowed ({} owner "
                                      "restart{} after a merge)",
                                      lost_versions, *every_versions, owner_restarts,
                                      owner_restarts == 1 ? "" : "s")));
  else
    inv.push_back(
        lost_versions
            ? verdict("no_version_lost", "invalid",
                      fmt::format("{} versions lost: {}", lost_versions, list(lost_detail)))
            : verdict("no_version_lost", "valid",
                      "every owner restart resumed from its last merged version"));
  if (!downtime)
    inv.push_back(verdict("zero_global_downtime", "unknown",
                          "learner_loss.csv is missing or has fewer than two heartbeats"));
  else
    inv.push_back(
        *downtime > 0
            ? verdict("zero_global_downtime", "invalid",
                      fmt::format("{:.2f} s in which no learner stepped ({} interval{})", *downtime,
                                  downtime_gaps.size(), downtime_gaps.size() == 1 ? "" : "s"))
            : verdict("zero_global_downtime", "valid", "some learner stepped at all times"));
  inv.push_back(tokens_verdict(summary, experiment, monitor_record, token_rows));
  if (merges == 0)
    inv.push_back(verdict("faulted_learners_back", "unknown", no_merges));
  else
    inv.push_back(
        !unrecovered.empty()
            ? verdict("faulted_learners_back", "invalid",
                      "no merged contribution after the fault: " + list(unrecovered))
            : verdict("faulted_learners_back", "valid",
                      fmt::format("{} fault{} on learners, every one back and merged after",
                                  judged_faults, judged_faults == 1 ? "" : "s")));
  // The plausibility gate refuses pushes a scale_push or random_push altered; any other refusal
  // is an honest learner's progress held back (a gate that locked the learners out would stop
  // the fragment merging while the run looks healthy).
  if (push_events == 0)
    inv.push_back(verdict("no_honest_push_refused_as_implausible", "unknown",
                          "no push event in events.jsonl"));
  else if (!implausible_unexplained.empty())
    inv.push_back(verdict(
        "no_honest_push_refused_as_implausible", "invalid",
        fmt::format("{} refused as implausible ({}) with no scale_push or random_push fault on "
                    "their learner",
                    pushes(total(implausible_unexplained)), per_learner(implausible_unexplained))));
  else
    inv.push_back(
        verdict("no_honest_push_refused_as_implausible", "valid",
                implausible_by_learner.empty()
                    ? std::string("no push refused as implausible")
                    : fmt::format("{} refused as implausible ({}), each after a scale_push or "
                                  "random_push fault on its learner",
                                  pushes(total(implausible_by_learner)),
                                  per_learner(implausible_by_learner))));
  // A run whose model ends worse than it started diverged, whatever else held; judged without
  // a baseline, so that it is never silent.
  if (loss_not_finite)
    inv.push_back(
        verdict("no_divergence", "invalid",
                "summary.json's final_val_loss is not a finite number (written as null)"));
  else if (!loss || !start_loss)
    inv.push_back(verdict(
        "no_divergence", "unknown",
        !loss ? "no final_val_loss in summary.json" : "no training loss in learner_loss.csv"));
  else
    inv.push_back(verdict(
        "no_divergence", *loss <= k_divergence_factor * *start_loss ? "valid" : "invalid",
        fmt::format("final val loss {:.4f} vs {:.4f} at the start of training (median of each "
                    "learner's first {} heartbeat losses); invalid above {:g}x",
                    *loss, *start_loss, k_start_loss_rows, k_divergence_factor)));
  if (o.baseline_dir.empty())
    inv.push_back(verdict("final_loss_vs_baseline", "unknown", "no --baseline given"));
  else if (!baseline_differs.empty())
    inv.push_back(verdict(
        "final_loss_vs_baseline", "unknown",
        fmt::format("the baseline is another experiment, its loss is not comparable ({}; this "
                    "run vs the baseline)",
                    joined(baseline_differs, "; "))));
  else if (!loss || !base_loss)
    inv.push_back(
        verdict("final_loss_vs_baseline", "unknown",
                fmt::format("final_val_loss missing in {}",
                            !loss ? "this run's summary.json" : "the baseline's summary.json")));
  else
    inv.push_back(
        verdict("final_loss_vs_baseline",
                *loss <= *base_loss * (1 + o.loss_tolerance) ? "valid" : "invalid",
                fmt::format("{:.4f} vs {:.4f} ({:+.2f}%; tolerance {:.1f}%)", *loss, *base_loss,
                            (*loss / *base_loss - 1) * 100, o.loss_tolerance * 100)));

  std::string overall = "valid";
  for (const auto& i : inv) {
    if (i["verdict"] == "invalid") overall = "invalid";
    if (i["verdict"] == "unknown" && overall == "valid") overall = "unknown";
  }
  return {{"run_dir", o.run_dir},
          {"baseline", o.baseline_dir.empty() ? json(nullptr) : json(o.baseline_dir)},
          {"inputs", inputs},
          {"faults", fault_rows},
          {"run", run},
          {"invariants", inv},
          {"verdict", overall}};
}

int report_exit_status(const json& r) {
  for (const auto& i : r.value("invariants", json::array()))
    if (i.value("verdict", "") == "invalid") return 1;
  return 0;
}

}  // namespace dd::chaos
