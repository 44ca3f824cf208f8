// tests/chaos/chaos_report_test.cpp — `dd-chaos report`: small hand-written run directories (a
// valid run, each invariant violated, missing data) judged by build_report, and the binary's
// exit status and JSON file.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/child_process.hpp"
#include "tools/chaos/common.hpp"
#include "tools/chaos/report.hpp"

using namespace dd::chaos;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// A run of two learner processes (learner-0: learner 0, learner-1: learner 1), one fragment.
// learner-1 is paused at 1008 for 5 s, declared dead at 1010, rejoins at 1015 and is merged at
// 1016. Times are Unix seconds. Tests edit the pieces, then write().
struct run_builder {
  std::vector<json> events, tape;
  std::map<std::string, std::vector<json>> node_events;  ///< nodes/<node>.events.jsonl
  std::string csv;
  json summary = {{"final_val_loss", 2.0}, {"goodput", 0.9}, {"effective_goodput", 0.8},
                  {"uptime", 0.95},        {"tokens", 820},  {"wall_seconds", 20.0}};
  // 10 tokens per step (batch 2 × context 5): each learner ends at step 41, 820 tokens in all.
  json experiment = {{"name", "tiny"},
                     {"checkpoint", {{"dir", ""}, {"every_versions", 1}}},
                     {"learners", {{"count", 2}, {"batch", 2}}},
                     {"model", {{"context", 5}}},
                     {"sync", {{"min_quorum", 1}}}};
  bool with_csv = true, with_summary = true, with_experiment = true, with_events = true;

  /// A tape line of a fault dd-chaos applied from its command line (result ok, no hits).
  static json cli_fault(double t, const std::string& kind, const std::string& target, json targets,
                        json duration, json params = json::object()) {
    return {{"t", t},
            {"source", "cli"},
            {"kind", kind},
            {"target", target},
            {"targets", std::move(targets)},
            {"duration", std::move(duration)},
            {"params", std::move(params)},
            {"result", "ok"},
            {"hits", json::array()}};
  }
  /// A tape line with no source (as dd-chaos wrote before it named one), applied: result ok.
  static json tape_line(double t, const std::string& kind, const std::string& target, json targets,
                        json duration) {
    return {{"t", t},
            {"kind", kind},
            {"target", target},
            {"targets", std::move(targets)},
            {"duration", std::move(duration)},
            {"result", "ok"}};
  }
  static json contributor(int learner, int inc, int transfer) {
    return {
        {"learner", learner}, {"incarnation", inc}, {"base_version", 0}, {"transfer_id", transfer},
        {"steps", 10},        {"tokens", 100},      {"weight", 0.5}};
  }
  static json push(double t, int learner, int inc, int transfer, bool accepted = true) {
    return {{"event", "push"},     {"time", t},          {"fragment", 0},
            {"learner", learner},  {"incarnation", inc}, {"transfer_id", transfer},
            {"accepted", accepted}};
  }
  static json merge(double t, int version, std::vector<json> contributors, int needed = 2) {
    return {{"event", "merge"},
            {"time", t},
            {"fragment", 0},
            {"version", version},
            {"contributors", contributors},
            {"live", 2},
            {"needed", needed},
            {"delta_norm", 0.5}};
  }

  run_builder() {
    events = {
        {{"event", "start"}, {"time", 1000.0}},
        {{"event", "owner_start"}, {"time", 1000.1}, {"fragment", 0}, {"version", 0}},
        {{"event", "join"}, {"time", 1000.2}, {"learner", 0}, {"incarnation", 0}},
        {{"event", "join"}, {"time", 1000.3}, {"learner", 1}, {"incarnation", 0}},
        push(1001.0, 0, 0, 1),
        push(1001.5, 1, 0, 1),
        merge(1002.0, 1, {contributor(0, 0, 1), contributor(1, 0, 1)}),
        {{"event", "failure"},
         {"time", 1010.0},
         {"learner", 1},
         {"incarnation", 0},
         {"reason", "lease expired"}},
        {{"event", "rejoin"}, {"time", 1015.0}, {"learner", 1}, {"incarnation", 1}},
        push(1015.2, 0, 0, 2),
        push(1015.4, 1, 1, 2),
        merge(1016.0, 2, {contributor(0, 0, 2), contributor(1, 1, 2)}),
        {{"event", "finished"}, {"time", 1020.0}},
    };
    tape = {{{"t", 1007.5}, {"kind", "session"}, {"seed", 7}},
            cli_fault(1008.0, "pause", "learner:1", {"learner-1"}, 5.0)};
    csv = csv_header;
    for (int i = 0; i <= 40; ++i) {
      const double t = 1000.0 + 0.5 * i;
      csv += fmt_row(t, 0, 0, i + 1);
      if (t < 1008.0) csv += fmt_row(t + 0.1, 1, 0, i + 1);
      if (t >= 1015.0) csv += fmt_row(t + 0.1, 1, 1, i + 1);
    }
  }
  /// learner_loss.csv's header line.
  static constexpr const char* csv_header = "time,learner,incarnation,step,tokens,loss\n";
  static std::string fmt_row(double t, int l, int inc, int step) {
    char b[128];
    std::snprintf(b, sizeof b, "%.3f,%d,%d,%d,%d,3.0\n", t, l, inc, step, step * 10);
    return b;
  }
  // Replaces the event of `kind` at `time`.
  void edit(const std::string& kind, double time, const std::function<void(json&)>& fn) {
    for (auto& e : events)
      if (e["event"] == kind && e["time"].get<double>() == time) return fn(e);
    FAIL() << "no " << kind << " at " << time;
  }
  std::string write() const {
    char tmpl[] = "/tmp/dd-chaos-report-XXXXXX";
    const std::string dir = ::mkdtemp(tmpl);
    auto lines = [](const std::vector<json>& v) {
      std::string s;
      for (const auto& j : v) s += j.dump() + "\n";
      return s;
    };
    if (with_events) write_file_atomic(dir + "/events.jsonl", lines(events));
    if (!node_events.empty()) fs::create_directories(dir + "/nodes");
    for (const auto& [node, evs] : node_events)
      write_file_atomic(dir + "/nodes/" + node + ".events.jsonl", lines(evs));
    write_file_atomic(dir + "/chaos.jsonl", lines(tape));
    if (with_csv) write_file_atomic(dir + "/learner_loss.csv", csv);
    if (with_summary) write_file_atomic(dir + "/summary.json", summary.dump());
    if (with_experiment) write_file_atomic(dir + "/experiment.json", experiment.dump());
    const json nodes = {
        {"run_id", "ab"},
        {"nodes",
         {{{"name", "syncer"}, {"role", "syncer"}, {"actors", {"monitor", "owner:0"}}, {"pid", 0}},
          {{"name", "learner-0"}, {"role", "learner"}, {"actors", {"learner:0"}}, {"pid", 0}},
          {{"name", "learner-1"}, {"role", "learner"}, {"actors", {"learner:1"}}, {"pid", 0}}}}};
    write_file_atomic(dir + "/nodes.json", nodes.dump());
    return dir;
  }
};

std::string make_baseline(double loss) {
  char tmpl[] = "/tmp/dd-chaos-baseline-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  write_file_atomic(dir + "/summary.json", json{{"final_val_loss", loss}}.dump());
  return dir;
}

std::string verdict_of(const json& r, const std::string& name) {
  for (const auto& i : r["invariants"])
    if (i["name"] == name) return i["verdict"];
  return "absent";
}

/// The report of the run directory `dir` (against `baseline` when given), which it removes.
json judge_dir(const std::string& dir, const std::string& baseline = "") {
  report_options o;
  o.run_dir = dir;
  o.baseline_dir = baseline;
  json r = build_report(o);
  fs::remove_all(dir);
  return r;
}

/// Step times from `start`: each leg (dt, n) adds n steps dt apart after the last time so far
/// (last + dt, ..., last + n·dt).
std::vector<double> paced(double start, std::initializer_list<std::pair<double, int>> legs) {
  std::vector<double> times = {start};
  for (const auto& [dt, n] : legs) {
    const double last = times.back();
    for (int k = 1; k <= n; ++k) times.push_back(last + dt * k);
  }
  return times;
}

/// Each (field, value) of `want` holds in the fault record `f`: a number to within double
/// rounding, null as null (a missing field is null), anything else (a kind, a learner list)
/// exactly.
void expect_fault(const json& f, std::initializer_list<std::pair<const char*, json>> want) {
  for (const auto& [key, value] : want) {
    const json got = f.contains(key) ? f.at(key) : json();
    if (value.is_number()) {
      ASSERT_TRUE(got.is_number()) << key << ": " << f.dump(2);
      EXPECT_DOUBLE_EQ(got.get<double>(), value.get<double>()) << key << ": " << f.dump(2);
    } else {
      EXPECT_EQ(got, value) << key << ": " << f.dump(2);
    }
  }
}

json judge(const run_builder& b, const std::string& baseline = "") {
  return judge_dir(b.write(), baseline);
}

const char* all_invariants[] = {"no_merge_below_quorum",
                                "no_push_merged_twice",
                                "no_version_repeated",
                                "no_corrupt_chunk_merged",
                                "no_nonfinite_in_global_fragment",
                                "no_version_lost",
                                "zero_global_downtime",
                                "faulted_learners_back",
                                "tokens_match_steps",
                                "no_honest_push_refused_as_implausible",
                                "no_divergence",
                                "final_loss_vs_baseline"};

}  // namespace

TEST(chaos_report, valid_run_every_invariant_valid_and_fault_times) {
  run_builder b;
  const std::string base = make_baseline(1.98);
  const json r = judge(b, base);
  for (const char* n : all_invariants)
    EXPECT_EQ(verdict_of(r, n), "valid") << n << "\n" << r.dump(2);
  EXPECT_EQ(r["verdict"], "valid");
  EXPECT_EQ(report_exit_status(r), 0);
  ASSERT_EQ(r["faults"].size(), 1u);
  expect_fault(r["faults"][0], {{"kind", "pause"},
                                {"learners", json::array({1})},
                                {"offset_s", 8.0},
                                {"noticed_after_s", 2.0},
                                {"excluded_after_s", 2.0},
                                {"restarted_after_s", nullptr},  // a pause restarts nothing
                                {"rejoined_after_s", 7.0},
                                {"first_merge_after_s", 8.0}});
  const json& run = r["run"];
  EXPECT_DOUBLE_EQ(run["global_downtime_s"].get<double>(), 0.0);
  EXPECT_EQ(run["merges"], 2);
  EXPECT_DOUBLE_EQ(run["merge_pauses"]["global"]["longest_s"].get<double>(), 14.0);
  EXPECT_DOUBLE_EQ(run["merge_pauses"]["fragments"]["0"]["longest_s"].get<double>(), 14.0);
  EXPECT_EQ(run["versions_lost"], 0);
  EXPECT_DOUBLE_EQ(run["goodput"].get<double>(), 0.9);
  EXPECT_DOUBLE_EQ(run["uptime"].get<double>(), 0.95);
  EXPECT_NEAR(run["loss_vs_baseline"].get<double>(), 2.0 / 1.98 - 1, 1e-12);
  const std::string table = format_report(r);
  EXPECT_NE(table.find("pause"), std::string::npos);
  EXPECT_NE(table.find("verdict: valid"), std::string::npos);
  fs::remove_all(base);
  // The same run without --baseline: unknown, and the line names the one check not made.
  run_builder again;
  const json nb = judge(again, "");
  EXPECT_EQ(nb["verdict"], "unknown");
  const size_t checks = nb["invariants"].size();
  EXPECT_NE(format_report(nb).find(fmt::format(
                "verdict: unknown (1 not checked: final_loss_vs_baseline; {} of {} checks valid)",
                checks - 1, checks)),
            std::string::npos)
      << format_report(nb);
}

// One edit of the merge at 1016 breaks one rule: that check is invalid, the run counts the merge
// once, and the whole report is invalid (exit status 1).
TEST(chaos_report, a_merge_that_breaks_a_rule_is_invalid_and_counted) {
  struct row {
    const char* name;
    std::function<void(json&)> edit;
    const char* check;
    const char* counter;
  };
  const std::vector<row> rows = {
      {"merge below quorum", [](json& e) { e["needed"] = 3; }, "no_merge_below_quorum",
       "merges_below_quorum"},
      {"push merged twice",
       [](json& e) {
         e["contributors"].push_back(run_builder::contributor(0, 0, 1));  // merged in version 1 too
       },
       "no_push_merged_twice", "pushes_merged_twice"},
      {"repeated version", [](json& e) { e["version"] = 1; }, "no_version_repeated",
       "versions_repeated"},
      {"non-finite delta", [](json& e) { e["delta_norm"] = nullptr; },  // NaN is written as null
       "no_nonfinite_in_global_fragment", "nonfinite_merges"},
  };
  for (const auto& c : rows) {
    SCOPED_TRACE(c.name);
    run_builder b;
    b.edit("merge", 1016.0, c.edit);
    const json r = judge(b);
    EXPECT_EQ(verdict_of(r, c.check), "invalid");
    EXPECT_EQ(r["run"][c.counter], 1);
    EXPECT_EQ(r["verdict"], "invalid");
    EXPECT_EQ(report_exit_status(r), 1);
  }
}

// Regression (a self-referential quorum check): a merge that claims a quorum of 1 while the
// experiment asks K = 2 and two learners were live throughout its round is below quorum; the
// check recomputes K of the live learners from experiment.json and the monitor's events
// instead of trusting the merge's own `needed`.
TEST(chaos_report, merge_below_k_of_the_live_learners_is_invalid_whatever_its_needed_says) {
  run_builder b;
  b.experiment["sync"] = {{"min_quorum", 2}};
  b.edit("finished", 1020.0, [](json& e) { e["time"] = 1040.0; });
  b.events.insert(b.events.end() - 1, run_builder::push(1030.0, 0, 0, 3));
  b.events.insert(b.events.end() - 1, run_builder::push(1030.5, 1, 1, 3));
  auto lone = run_builder::contributor(0, 0, 3);
  lone["weight"] = 1.0;
  b.events.insert(b.events.end() - 1, run_builder::merge(1031.0, 3, {lone}, /*needed=*/1));
  const json r = judge(b);
  EXPECT_EQ(verdict_of(r, "no_merge_below_quorum"), "invalid") << r.dump(2);
  EXPECT_EQ(r["run"]["merges_below_quorum"], 1);
  // The same run with K = 1: every merge has its quorum.
  b.experiment["sync"] = {{"min_quorum", 1}};
  const json ok = judge(b);
  EXPECT_EQ(verdict_of(ok, "no_merge_below_quorum"), "valid") << ok.dump(2);
  // K as a fraction: ceil(0.75 · 2) = 2 contributors needed.
  b.experiment["sync"] = {{"min_quorum", {{"fraction", 0.75}}}};
  EXPECT_EQ(verdict_of(judge(b), "no_merge_below_quorum"), "invalid");
}

TEST(chaos_report, lost_versions_judged_only_at_every_version) {
  run_builder b;
  // The owner restarts from version 0 after version 1 was merged: one version lost.
  b.events.insert(
      b.events.begin() + 7,
      json{{"event", "owner_restored"}, {"time", 1005.0}, {"fragment", 0}, {"version", 0}});
  b.edit("merge", 1016.0, [](json& e) { e["version"] = 1; });
  json r = judge(b);
  EXPECT_EQ(verdict_of(r, "no_version_lost"), "invalid");
  EXPECT_EQ(verdict_of(r, "no_version_repeated"), "valid");  // a new lineage, not a repeat
  EXPECT_EQ(r["run"]["versions_lost"], 1);
  b.experiment["checkpoint"]["every_versions"] = 5;
  r = judge(b);
  EXPECT_EQ(verdict_of(r, "no_version_lost"), "unknown");
  EXPECT_EQ(r["run"]["versions_lost"], 1);  // the figure stays
  b.with_experiment = false;
  r = judge(b);
  EXPECT_EQ(verdict_of(r, "no_version_lost"), "unknown");
}

// A run whose owners never restarted after a merge (the syncer ran once) cannot have lost a
// version, whatever checkpoint.every_versions is: valid, with that reason (a clean run of the
// shipped experiment, every_versions = 5, said `unknown`). With a restart and every_versions > 1
// it stays unknown; so does an experiment.json without the field.
TEST(chaos_report, no_version_lost_is_valid_when_no_owner_restarted) {
  run_builder b;
  b.experiment["checkpoint"]["every_versions"] = 5;
  json r = judge(b);
  EXPECT_EQ(verdict_of(r, "no_version_lost"), "valid") << r["invariants"].dump(2);
  for (const auto& i : r["invariants"])
    if (i["name"] == "no_version_lost") {
      EXPECT_EQ(i["detail"],
                "no owner restarted after its fragment merged (the syncer never "
                "restarted), so no version can have been lost");
    }
  b.with_experiment = false;
  EXPECT_EQ(verdict_of(judge(b), "no_version_lost"), "valid");
  // The owner restarts at the version it merged (none lost): with every_versions = 5 that is
  // not checked.
  b.with_experiment = true;
  b.events.insert(
      b.events.end() - 1,
      json{{"event", "owner_restored"}, {"time", 1017.0}, {"fragment", 0}, {"version", 2}});
  r = judge(b);
  EXPECT_EQ(verdict_of(r, "no_version_lost"), "unknown");
  EXPECT_EQ(r["run"]["versions_lost"], 0);
}

TEST(chaos_report, corrupt_chunk_merged_is_invalid_and_a_resend_is_fine) {
  run_builder b;
  // learner 1's transfer 2 has a chunk refused after its (earlier) accepted push, and is merged.
  b.events.insert(b.events.end() - 2, json{{"event", "chunk_refused"},
                                           {"time", 1015.5},
                                           {"fragment", 0},
                                           {"learner", 1},
                                           {"transfer_id", 2},
                                           {"what", "push"}});
  json r = judge(b);
  EXPECT_EQ(verdict_of(r, "no_corrupt_chunk_merged"), "invalid");
  EXPECT_EQ(r["run"]["corrupt_chunks_merged"], 1);
  EXPECT_EQ(r["run"]["chunks_refused"], 1);
  // The resent push is accepted after the refusal: valid, one chunk refused, none merged.
  b.events.insert(b.events.end() - 2, run_builder::push(1015.7, 1, 1, 2));
  r = judge(b);
  EXPECT_EQ(verdict_of(r, "no_corrupt_chunk_merged"), "valid");
  EXPECT_EQ(r["run"]["corrupt_chunks_merged"], 0);
  EXPECT_EQ(r["run"]["chunks_refused"], 1);
}

TEST(chaos_report, global_downtime_is_invalid) {
  run_builder b;
  b.csv = run_builder::csv_header;
  int step = 0;  // one step per row: the steps do not advance in the gap either
  for (int i = 0; i <= 40; ++i) {
    const double t = 1000.0 + 0.5 * i;
    if (t > 1005.0 && t < 1009.0) continue;  // nobody steps between 1005 and 1009
    ++step;
    b.csv += run_builder::fmt_row(t, 0, 0, step) + run_builder::fmt_row(t + 0.1, 1, 0, step);
  }
  const json r = judge(b);
  EXPECT_EQ(verdict_of(r, "zero_global_downtime"), "invalid");
  EXPECT_NEAR(r["run"]["global_downtime_s"].get<double>(), 1009.0 - 1005.1, 1e-6);
}

// Every message a live broadcast fault hits is a `fault` event
// {"source":"endpoint","learner":L,...} in the syncer's log (hundreds for `drop-broadcast --for
// 1s`); they are hits of the tape's one fault, not faults of learner -1 that never came back.
TEST(chaos_report, hits_of_a_live_message_fault_are_not_faults) {
  run_builder b;
  for (int i = 0; i < 5; ++i)
    b.events.push_back({{"event", "fault"},
                        {"time", 1003.0 + 0.1 * i},
                        {"fault", "drop_broadcast"},
                        {"source", "endpoint"},
                        {"id", 1},
                        {"learner", i % 2 == 0 ? -1 : 0},
                        {"fragment", 0},
                        {"hits", i + 1}});
  b.tape.push_back(run_builder::cli_fault(1003.0, "drop_broadcast", "learner:0", {"syncer"}, 1.0));
  std::stable_sort(b.events.begin(), b.events.end(), [](const json& x, const json& y) {
    return x["time"].get<double>() < y["time"].get<double>();
  });
  const json r = judge(b);
  EXPECT_EQ(verdict_of(r, "faulted_learners_back"), "valid") << r.dump(2);
  ASSERT_EQ(r["faults"].size(), 2u) << r["faults"].dump(2);  // the tape's two records only
  EXPECT_EQ(r["faults"][0]["kind"], "drop_broadcast");
  EXPECT_EQ(r["faults"][1]["kind"], "pause");
}

// While the syncer is stopped or restarting, nobody writes
// learner_loss.csv rows (the syncer records the heartbeats) though the learners step on; after
// it they rejoin live (new incarnation, own step kept). A row gap whose step advanced at least
// one step per bound (max(4 x median gap, 1 s) = 2 s here) on average is stepping; one whose step
// barely advanced (a learner stopped too) is still downtime.
TEST(chaos_report, rows_missing_while_the_syncer_was_down_are_not_downtime_when_steps_advanced) {
  for (const int advance : {8, 1}) {
    run_builder b;
    b.csv = run_builder::csv_header;
    int step0 = 0;
    for (int i = 0; i <= 40; ++i) {
      const double t = 1000.0 + 0.5 * i;
      if (t >= 1005.0 && t < 1009.0) continue;  // the syncer is down: no rows
      step0 = t < 1005.0 ? i + 1 : (i == 18 ? step0 + advance : step0 + 1);
      b.csv += run_builder::fmt_row(t, 0, t < 1005.0 ? 0 : 1, step0);
      if (t < 1005.0) b.csv += run_builder::fmt_row(t + 0.1, 1, 0, i + 1);
      if (t >= 1015.0) b.csv += run_builder::fmt_row(t + 0.1, 1, 1, 11 + (i - 30));  // paused
    }
    const json r = judge(b);
    if (advance == 8) {
      EXPECT_EQ(verdict_of(r, "zero_global_downtime"), "valid") << r["run"].dump(2);
      EXPECT_DOUBLE_EQ(r["run"]["global_downtime_s"].get<double>(), 0.0);
    } else {
      EXPECT_EQ(verdict_of(r, "zero_global_downtime"), "invalid") << r["run"].dump(2);
      EXPECT_NEAR(r["run"]["global_downtime_s"].get<double>(), 1009.0 - 1004.6, 1e-6);
    }
  }
}

// Issue 11: the learner nodes' own samples of their learners' steps (`syncer_lost`, one
// `outage_steps` a second, `syncer_back`; forwarded after the rejoin) replace the average-rate
// guess across the row gap: a stall inside the outage (step 12 from the first sample that showed
// it, 1006.2, to the next advance, 1009.0: 2.8 s for one step against a bound of 4 x 0.5 s) is
// downtime even though the step advanced enough over the whole gap, and steady stepping is not
// (nor two samples 20 ms apart with one step).
TEST(chaos_report, learner_node_samples_show_who_stepped_while_the_syncer_was_down) {
  for (const bool stalled : {false, true}) {
    run_builder b;
    b.csv = run_builder::csv_header;
    for (int i = 0; i <= 40; ++i) {
      const double t = 1000.0 + 0.5 * i;
      if (t >= 1005.0 && t < 1009.0) continue;  // the syncer is down: no rows
      // After the outage learner 0's rows go on from the samples' last step (18 or 13 at 1009).
      b.csv += run_builder::fmt_row(t, 0, t < 1005.0 ? 0 : 1,
                                    t < 1005.0 ? i + 1 : (stalled ? i - 5 : i));
      if (t < 1005.0) b.csv += run_builder::fmt_row(t + 0.1, 1, 0, i + 1);
      if (t >= 1015.0) b.csv += run_builder::fmt_row(t + 0.1, 1, 1, 11 + (i - 30));  // paused
    }
    // Learner 0's step at 1004.5 is 10 and at 1009.0 is 18, or 13 when stalled.
    const std::vector<std::pair<double, int>> samples =
        stalled ? std::vector<std::pair<double, int>>{{1005.2, 11},
                                                      {1006.2, 12},
                                                      {1007.2, 12},
                                                      {1008.2, 12},
                                                      {1009.0, 13}}
                : std::vector<std::pair<double, int>>{{1005.2, 11}, {1005.22, 11}, {1006.2, 12},
                                                      {1007.2, 14}, {1008.2, 16},  {1009.0, 17}};
    for (size_t k = 0; k < samples.size(); ++k) {
      const char* kind = k == 0                    ? "syncer_lost"
                         : k + 1 == samples.size() ? "syncer_back"
                                                   : "outage_steps";
      b.events.push_back(
          {{"event", kind}, {"time", samples[k].first}, {"steps", {{"0", samples[k].second}}}});
    }
    const json r = judge(b);
    if (!stalled) {
      EXPECT_EQ(verdict_of(r, "zero_global_downtime"), "valid") << r["run"].dump(2);
      EXPECT_DOUBLE_EQ(r["run"]["global_downtime_s"].get<double>(), 0.0);
    } else {
      EXPECT_EQ(verdict_of(r, "zero_global_downtime"), "invalid") << r["run"].dump(2);
      EXPECT_NEAR(r["run"]["global_downtime_s"].get<double>(), 1009.0 - 1006.2, 1e-6);
      ASSERT_EQ(r["run"]["downtime_intervals"].size(), 1u);
      EXPECT_NEAR(r["run"]["downtime_intervals"][0]["from"].get<double>(), 1006.2, 1e-6);
    }
  }
}

// Issue 11 (a), acc18/faults2, k_syncer, k_hand: under load a step took longer than the 1 s
// between a node's samples, so two samples with the same step came one after the other while the
// learner was mid-step. The span from the first point that showed a step to the point where it
// advanced is stepping when it took at most `bound` per step (here 1.5 s steps, bound 6 s).
TEST(chaos_report, samples_closer_than_a_step_are_mid_step_not_downtime) {
  run_builder b;
  b.csv = run_builder::csv_header;
  auto step_at = [](double t) { return 1 + static_cast<int>((t - 1000.0) / 1.5 + 1e-9); };
  for (int k = 0; k <= 13; ++k) {  // a step every 1.5 s; the syncer is down 1005.5 .. 1012
    const double t = 1000.0 + 1.5 * k;
    if (t > 1005.5 && t < 1012.0) continue;
    for (int l = 0; l < 2; ++l)
      b.csv += run_builder::fmt_row(t + 0.01 * l, l, t < 1005.5 ? 0 : 1, step_at(t));
  }
  for (int k = 0; k <= 6; ++k) {  // both nodes sample once a second
    const double t = 1005.6 + k;
    const char* kind = k == 0 ? "syncer_lost" : k == 6 ? "syncer_back" : "outage_steps";
    for (int l = 0; l < 2; ++l)
      b.node_events["learner-" + std::to_string(l)].push_back(
          {{"event", kind}, {"time", t + 0.01 * l}, {"steps", {{std::to_string(l), step_at(t)}}}});
  }
  const json r = judge(b);
  EXPECT_EQ(verdict_of(r, "zero_global_downtime"), "valid") << r["run"].dump(2);
  EXPECT_DOUBLE_EQ(r["run"]["global_downtime_s"].get<double>(), 0.0);
  EXPECT_EQ(r["run"]["downtime_intervals"].size(), 0u);
}

// Issue 11 (b), acc18/faults2c, faults2b: the host slowed every learner's step from 0.5 s to 3 s
// for 30 s (the whole run's median stays 0.5 s: a bound of 2 s made that downtime). The bound
// follows each learner's local pace (4 x the median of its 5 advances before and 5 after), so
// the slowdown is stepping, while a 10 s stall of both learners amid 0.5 s steps is downtime.
TEST(chaos_report, a_uniform_slowdown_is_not_downtime_and_a_stall_still_is) {
  run_builder b;
  b.csv = run_builder::csv_header;
  // 0.5 s steps to 1030, 3 s steps to 1060, 0.5 s steps to 1090.
  const std::vector<double> times = paced(1000.0, {{0.5, 60}, {3.0, 10}, {0.5, 60}});
  int step = 0;
  for (double t : times) {
    if (t > 1075.0 && t < 1085.0) continue;  // both stop: no step completes in 10 s
    ++step;
    b.csv += run_builder::fmt_row(t, 0, 0, step) + run_builder::fmt_row(t + 0.1, 1, 0, step);
  }
  const json r = judge(b);
  EXPECT_EQ(verdict_of(r, "zero_global_downtime"), "invalid") << r["run"].dump(2);
  ASSERT_EQ(r["run"]["downtime_intervals"].size(), 1u) << r["run"].dump(2);
  EXPECT_NEAR(r["run"]["downtime_intervals"][0]["from"].get<double>(), 1075.1, 1e-6);
  EXPECT_NEAR(r["run"]["downtime_intervals"][0]["to"].get<double>(), 1085.0, 1e-6);
  EXPECT_NEAR(r["run"]["global_downtime_s"].get<double>(), 1085.0 - 1075.1, 1e-6);
}

// acc18/heal3's last seconds: one learner alone, its steps down to 0.2 s, then one of 1.06 s. Its
// last 5 steps each side alone put the bound at the floor (2 s); its pace over ±60 s does not,
// and a step just past the floor is not a stall of several step times there. Here: 0.8 s steps,
// then 0.3 s steps (4 × 0.3 s < 2 s) and one of 2.5 s, inside 4 × 0.8 s.
TEST(chaos_report, a_short_hitch_amid_unusually_fast_steps_is_not_downtime) {
  run_builder b;
  b.csv = run_builder::csv_header;
  // 0.8 s steps to 1060, 0.3 s steps to 1066, one 2.5 s step, 0.3 s steps.
  const std::vector<double> times = paced(1000.0, {{0.8, 75}, {0.3, 20}, {2.5, 1}, {0.3, 5}});
  int step = 0;
  for (double t : times) b.csv += run_builder::fmt_row(t, 0, 0, ++step);
  const json r = judge(b);
  EXPECT_EQ(verdict_of(r, "zero_global_downtime"), "valid") << r["run"].dump(2);
  EXPECT_DOUBLE_EQ(r["run"]["global_downtime_s"].get<double>(), 0.0);
}

// Issue 11 (c), acc18/faults2b: every link dropped at +134.6 s (a host stall) while a
// corrupt_push armed on learner 3 waited for its next push; the report charged the drop to that
// fault. A message fault cannot drop a link: its noticed/excluded/rejoined stay empty, and a drop
// no fault explains is listed under the run's "unexplained" (the pause's own drop is not).
TEST(chaos_report, a_message_fault_owns_no_link_drop_and_unexplained_drops_are_listed) {
  run_builder b;
  b.tape.push_back(run_builder::cli_fault(1003.0, "corrupt_push", "learner:0", {"learner-0"},
                                          nullptr, {{"count", 1}}));
  b.events.push_back({{"event", "failure"},
                      {"time", 1005.0},
                      {"learner", 0},
                      {"incarnation", 0},
                      {"reason", "exit_reason(remote_link_unreachable)"}});
  b.events.push_back({{"event", "rejoin"}, {"time", 1005.5}, {"learner", 0}, {"incarnation", 1}});
  b.node_events["learner-0"].push_back(
      {{"event", "syncer_lost"}, {"time", 1005.02}, {"steps", {{"0", 11}}}});
  // Not a link drop: the monitor could not write a row (chaos_matrix_test disk_full).
  b.events.push_back({{"event", "failure"},
                      {"time", 1006.0},
                      {"what", "monitor_record"},
                      {"error", "No space left on device"}});
  b.node_events["learner-1"].push_back(  // learner 1's pause: its own drop, explained
      {{"event", "syncer_lost"}, {"time", 1013.1}, {"steps", {{"1", 16}}}});
  std::stable_sort(b.events.begin(), b.events.end(), [](const json& x, const json& y) {
    return x["time"].get<double>() < y["time"].get<double>();
  });
  const json r = judge(b);
  ASSERT_EQ(r["faults"].size(), 2u) << r["faults"].dump(2);
  expect_fault(r["faults"][0], {{"kind", "corrupt_push"},
                                {"noticed_after_s", nullptr},
                                {"excluded_after_s", nullptr},
                                {"rejoined_after_s", nullptr},
                                {"first_merge_after_s", 13.0}});  // merge at 1016
  expect_fault(r["faults"][1], {{"noticed_after_s", 2.0}});
  const json& u = r["run"]["unexplained"];
  ASSERT_EQ(u["count"], 2) << u.dump(2);
  EXPECT_EQ(u["events"][0]["event"], "failure");
  EXPECT_EQ(u["events"][0]["learner"], 0);
  EXPECT_DOUBLE_EQ(u["events"][0]["offset_s"].get<double>(), 5.0);
  EXPECT_EQ(u["events"][1]["event"], "syncer_lost");
  EXPECT_EQ(u["events"][1]["node"], "learner-0");
  EXPECT_NEAR(u["events"][1]["offset_s"].get<double>(), 5.02, 1e-9);
  EXPECT_NE(format_report(r).find("unexplained drops    2"), std::string::npos);
}

// Regression: an owner whose plausibility gate refused honest learners' pushes stopped merging
// their progress while every invariant stayed valid. A push refused as implausible is explained
// only by a scale_push or random_push fault on its learner injected before it; any other makes
// the report invalid and is counted per learner.
TEST(chaos_report, pushes_refused_as_implausible_without_a_push_altering_fault_are_invalid) {
  struct row {
    const char* what;
    std::vector<json> tape;  // added to the pause of learner-1 at 1008
    const char* verdict;
    size_t unexplained;
    const char* detail;
  };
  const std::vector<row> rows = {
      {"no fault alters pushes",
       {},
       "invalid",
       2,
       "2 pushes refused as implausible (learner 0 (1), learner 1 (1)) with no scale_push"},
      {"scale_push on learner-1 explains learner 1's only",
       {run_builder::cli_fault(1012.0, "scale_push", "learner:1", {"learner-1"}, nullptr)},
       "invalid",
       1,
       "1 push refused as implausible (learner 0 (1)) with no"},
      {"random_push on both explains both",
       {run_builder::cli_fault(1012.0, "random_push", "learner:*", {"learner-0", "learner-1"},
                               nullptr)},
       "valid",
       0,
       "2 pushes refused as implausible (learner 0 (1), learner 1 (1)), each after"},
      {"a scale_push after the refusals explains nothing",
       {run_builder::cli_fault(1019.0, "scale_push", "learner:*", {"learner-0", "learner-1"},
                               nullptr)},
       "invalid",
       2,
       "with no scale_push or random_push fault"},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.what);
    run_builder b;
    for (const auto& t : r.tape) b.tape.push_back(t);
    auto refused = [](double t, int learner, int inc, int transfer) {
      json p = run_builder::push(t, learner, inc, transfer, false);
      p["reason"] = "implausible";
      return p;
    };
    b.events.insert(b.events.end() - 1, refused(1017.0, 1, 1, 3));
    b.events.insert(b.events.end() - 1, refused(1017.5, 0, 0, 3));
    const json rep = judge(b);
    EXPECT_EQ(verdict_of(rep, "no_honest_push_refused_as_implausible"), r.verdict) << rep.dump(2);
    EXPECT_EQ(rep["run"]["pushes_implausible"], 2);
    EXPECT_EQ(rep["run"]["pushes_implausible_unexplained"], r.unexplained);
    for (const auto& i : rep["invariants"]) {
      if (i["name"] != "no_honest_push_refused_as_implausible") continue;
      EXPECT_NE(i["detail"].get<std::string>().find(r.detail), std::string::npos) << i["detail"];
    }
    EXPECT_NE(format_report(rep).find("implausible pushes   2"), std::string::npos);
  }
}

TEST(chaos_report, learner_never_back_is_invalid) {
  run_builder b;
  b.edit("merge", 1016.0, [](json& e) {
    e["contributors"] = json::array({run_builder::contributor(0, 0, 2)});
    e["needed"] = 1;
  });
  const json r = judge(b);
  EXPECT_EQ(verdict_of(r, "faulted_learners_back"), "invalid");
  EXPECT_TRUE(r["faults"][0]["first_merge_after_s"].is_null());
}

// A baseline of another experiment (500 steps against this run's 1500) was compared as if it
// were this run's clean twin: `-18.45%` judged valid. The settings that decide what the final
// loss measures are compared; only those count.
TEST(chaos_report, experiment_differences_table) {
  const json base = {{"name", "x"},
                     {"run_dir", "/r/a"},
                     {"run_id", "1"},
                     {"budget", {{"steps", 1500}}},
                     {"model", {{"kind", "gpt"}, {"width", 128}}},
                     {"data", {{"file", "a.txt"}, {"train_fraction", 0.9}}},
                     {"learners", {{"count", 3}, {"batch", 8}, {"threads", 0}}},
                     {"eval", {{"windows", 0}, {"periodic_windows", 128}, {"every_seconds", 10}}},
                     {"inner", {{"lr", 0.004}, {"decay_steps", 1500}}},
                     {"checkpoint", {{"dir", "/r/a/checkpoints"}, {"every_versions", 5}}}};
  struct row {
    const char* what;
    std::function<void(json&)> edit;
    std::vector<std::string> want;
  };
  const std::vector<row> table = {
      {"the same experiment in another run directory",
       [](json& e) {
         e["run_dir"] = "/r/b";
         e["run_id"] = "2";
         e["checkpoint"]["dir"] = "/r/b/checkpoints";
         e["checkpoint"]["every_versions"] = 1;
         e["learners"]["threads"] = 2;
         e["eval"]["periodic_windows"] = 64;
         e["eval"]["every_seconds"] = 5;
       },
       {}},
      {"another budget",
       [](json& e) {
         e["budget"]["steps"] = 500;
         e["inner"]["decay_steps"] = 500;
       },
       {"budget.steps: 1500 vs 500", "inner.decay_steps: 1500 vs 500"}},
      {"another model and data",
       [](json& e) {
         e["model"]["width"] = 256;
         e["data"]["file"] = "b.txt";
       },
       {"data.file: \"a.txt\" vs \"b.txt\"", "model.width: 128 vs 256"}},
      {"more learners, the final loss on other windows",
       [](json& e) {
         e["learners"]["count"] = 4;
         e["eval"]["windows"] = 64;
       },
       {"eval.windows: 0 vs 64", "learners.count: 3 vs 4"}},
      {"a budget in tokens instead of steps",
       [](json& e) {
         e["budget"] = {{"tokens", 1000000}};
       },
       {"budget.steps: 1500 vs -", "budget.tokens: - vs 1000000"}},
  };
  for (const auto& r : table) {
    json other = base;
    r.edit(other);
    EXPECT_EQ(experiment_differences(base, other), r.want) << r.what;
  }
}

// The report: a baseline of another experiment leaves final_loss_vs_baseline not checked (even
// though its loss is higher), and the line names the settings; the same experiment is judged.
TEST(chaos_report, a_baseline_of_another_experiment_is_not_compared) {
  run_builder b;
  b.experiment["budget"] = {{"steps", 1500}};
  for (const int steps : {500, 1500}) {
    const std::string base = make_baseline(2.07);
    json other = b.experiment;
    other["budget"]["steps"] = steps;
    write_file_atomic(base + "/experiment.json", other.dump());
    const json r = judge(b, base);
    fs::remove_all(base);
    if (steps == 500) {
      EXPECT_EQ(verdict_of(r, "final_loss_vs_baseline"), "unknown") << r["invariants"].dump(2);
      EXPECT_EQ(r["run"]["baseline_differences"], json::array({"budget.steps: 1500 vs 500"}));
      EXPECT_NE(format_report(r).find("the baseline is another experiment, its loss is not "
                                      "comparable (budget.steps: 1500 vs 500; this run vs the "
                                      "baseline)"),
                std::string::npos)
          << format_report(r);
      EXPECT_NE(format_report(r).find("baseline 2.0700, -3.38%: another experiment, not compared"),
                std::string::npos)
          << format_report(r);
    } else {
      EXPECT_EQ(verdict_of(r, "final_loss_vs_baseline"), "valid") << r["invariants"].dump(2);
      EXPECT_EQ(r["run"]["baseline_differences"], json::array());
    }
  }
}

TEST(chaos_report, loss_worse_than_baseline_is_invalid) {
  run_builder b;
  const std::string base = make_baseline(1.5);
  const json r = judge(b, base);
  EXPECT_EQ(verdict_of(r, "final_loss_vs_baseline"), "invalid");
  EXPECT_NEAR(r["run"]["loss_vs_baseline"].get<double>(), 2.0 / 1.5 - 1, 1e-12);
  fs::remove_all(base);
}

// Regression: a run whose model diverged under load (final val loss 23.67 nats/token against 5.5
// at the start) was judged valid by every invariant; the loss must be judged without a baseline.
TEST(chaos_report, a_final_loss_above_the_start_loss_is_a_diverged_run) {
  struct row {
    json final_loss;
    std::string verdict, detail;
  };
  const std::vector<row> rows = {
      {2.0, "valid", "final val loss 2.0000 vs 3.0000 at the start of training"},
      {3.3, "valid", "invalid above 1.1x"},  // a short run ends near its start loss
      {3.31, "invalid", "final val loss 3.3100 vs 3.0000"},
      {23.67, "invalid", "final val loss 23.6700 vs 3.0000"},
      {json(nullptr), "invalid", "not a finite number"},
  };
  for (const auto& r : rows) {
    run_builder b;
    b.summary["final_val_loss"] = r.final_loss;
    const json rep = judge(b);
    EXPECT_EQ(verdict_of(rep, "no_divergence"), r.verdict) << r.final_loss;
    for (const auto& i : rep["invariants"]) {
      if (i["name"] != "no_divergence") continue;
      EXPECT_NE(i["detail"].get<std::string>().find(r.detail), std::string::npos) << i["detail"];
    }
    EXPECT_EQ(rep["verdict"], r.verdict == "invalid" ? "invalid" : "unknown") << r.final_loss;
    EXPECT_DOUBLE_EQ(rep["run"]["start_loss"].get<double>(), 3.0);
  }
  // The start is each learner's first heartbeats: later rows (the loss falling) do not move it.
  run_builder c;
  c.csv = run_builder::csv_header;
  for (int i = 0; i < 20; ++i) {
    char b[128];
    std::snprintf(b, sizeof b, "%.3f,0,0,%d,%d,%.1f\n", 1000.0 + i, i + 1, (i + 1) * 10,
                  i < 5 ? 5.5 : 1.0);
    c.csv += b;
  }
  c.summary["final_val_loss"] = 5.0;
  const json rc = judge(c);
  EXPECT_DOUBLE_EQ(rc["run"]["start_loss"].get<double>(), 5.5);
  EXPECT_EQ(verdict_of(rc, "no_divergence"), "valid");
  EXPECT_NE(format_report(rc).find("final val loss       5.0000 (start 5.5000;"), std::string::npos)
      << format_report(rc);
}

TEST(chaos_report, missing_data_is_unknown_not_valid) {
  run_builder b;
  b.with_events = b.with_csv = b.with_summary = b.with_experiment = false;
  const json r = judge(b);
  for (const char* n : all_invariants) EXPECT_EQ(verdict_of(r, n), "unknown") << n;
  EXPECT_EQ(r["verdict"], "unknown");
  EXPECT_EQ(report_exit_status(r), 0);
  EXPECT_EQ(r["inputs"]["events.jsonl"], "missing");
  // Merges without transfer ids or delta norms: those two cannot be judged.
  run_builder c;
  for (auto& e : c.events)
    if (e["event"] == "merge") {
      e.erase("delta_norm");
      for (auto& k : e["contributors"]) k.erase("transfer_id");
    }
  const json r2 = judge(c);
  EXPECT_EQ(verdict_of(r2, "no_push_merged_twice"), "unknown");
  EXPECT_EQ(verdict_of(r2, "no_nonfinite_in_global_fragment"), "unknown");
  EXPECT_EQ(verdict_of(r2, "no_merge_below_quorum"), "valid");
}

TEST(chaos_report, syncer_fault_times_from_forwarded_events) {
  run_builder b;
  b.tape.push_back(run_builder::tape_line(1003.0, "kill", "node:syncer", {"syncer"}, nullptr));
  b.events.insert(b.events.begin() + 7, json{{"event", "resume"}, {"time", 1006.0}});
  const std::string dir = b.write();
  fs::create_directories(dir + "/nodes");
  write_file_atomic(dir + "/nodes/learner-0.events.jsonl",
                    json{{"event", "syncer_lost"}, {"time", 1003.5}, {"t", 3.5}}.dump() + "\n" +
                        json{{"event", "syncer_back"}, {"time", 1007.0}, {"t", 7.0}}.dump() + "\n" +
                        "{\"event\": \"cut by a ki\n");
  const json r = judge_dir(dir);
  ASSERT_EQ(r["faults"].size(), 2u);
  expect_fault(r["faults"][0], {{"kind", "kill"},
                                {"noticed_after_s", 0.5},
                                {"restarted_after_s", 3.0},
                                {"rejoined_after_s", 4.0},
                                {"first_merge_after_s", 13.0}});
  EXPECT_NE(r["inputs"]["nodes/learner-0.events.jsonl"].get<std::string>().find("1 malformed line"),
            std::string::npos);
}

// A run stopped with Ctrl-C (`stop`, `finished`) and continued with --resume 20 s later: the
// time between the parts is neither downtime nor observed (it was reported as 20.9 s of global
// downtime and the run invalid), and the learner nodes started again for the resumed part are not
// the restart of a pause fault of the first part (it was reported as restarted and rejoined
// after 26.5 and 27 s). Learner 1 is paused 2 s at 1004 (no row meanwhile); both step every
// 0.5 s from 1000 to 1010 and, after the resume at 1030, from 1031 to 1040.
TEST(chaos_report, the_time_between_a_stopped_part_and_its_resume_is_not_downtime) {
  run_builder b;
  b.events.clear();  // this run's own events, in place of the builder's
  // Both learners (incarnation `inc`) push transfer `v` at t and t + d, merged as version v at m.
  const auto round = [&b](double t, double d, double m, int inc, int v) {
    b.events.push_back(run_builder::push(t, 0, inc, v));
    b.events.push_back(run_builder::push(t + d, 1, inc, v));
    b.events.push_back(run_builder::merge(
        m, v, {run_builder::contributor(0, inc, v), run_builder::contributor(1, inc, v)}));
  };
  const auto add = [&b](std::initializer_list<json> events) {
    for (const auto& e : events) b.events.push_back(e);
  };
  add({{{"event", "start"}, {"time", 1000.0}},
       {{"event", "owner_start"}, {"time", 1000.1}, {"fragment", 0}, {"version", 0}},
       {{"event", "join"}, {"time", 1000.2}, {"learner", 0}, {"incarnation", 0}},
       {{"event", "join"}, {"time", 1000.3}, {"learner", 1}, {"incarnation", 0}}});
  round(1001.0, 0.5, 1002.0, 0, 1);
  round(1006.5, 0.3, 1007.0, 0, 2);
  add({{{"event", "stop"}, {"time", 1010.05}, {"reason", "interrupted (SIGINT)"}},
       {{"event", "finished"}, {"time", 1010.5}},
       {{"event", "resume"}, {"time", 1030.0}},
       {{"event", "owner_restored"}, {"time", 1030.1}, {"fragment", 0}, {"version", 2}},
       {{"event", "rejoin"}, {"time", 1031.0}, {"learner", 0}, {"incarnation", 1}},
       {{"event", "rejoin"}, {"time", 1031.0}, {"learner", 1}, {"incarnation", 1}}});
  round(1034.5, 0.3, 1035.0, 1, 3);
  add({{{"event", "stop"}, {"time", 1040.2}, {"reason", "every learner finished"}},
       {{"event", "finished"}, {"time", 1040.5}}});
  for (const char* node : {"learner-0", "learner-1"})
    b.node_events[node] = {
        {{"event", "node_start"}, {"time", 1000.1}, {"node", node}},
        {{"event", "node_start"}, {"time", 1030.5}, {"node", node}}};  // the resumed part's
  b.tape = {run_builder::cli_fault(1004.0, "pause", "learner:1", {"learner-1"}, 2.0)};
  b.csv = run_builder::csv_header;
  // Learner 0: 21 steps before the stop, 20 after; learner 1 makes 4 fewer before (paused).
  int step1 = 0;
  for (int i = 0; i <= 20; ++i) {
    const double t = 1000.0 + 0.5 * i;
    b.csv += run_builder::fmt_row(t, 0, 0, i + 1);
    if (t < 1004.0 || t >= 1006.0) b.csv += run_builder::fmt_row(t + 0.1, 1, 0, ++step1);
  }
  for (int i = 0; i < 20; ++i) {
    const double t = 1031.0 + 0.5 * i;
    b.csv += run_builder::fmt_row(t, 0, 1, 22 + i);
    b.csv += run_builder::fmt_row(t + 0.1, 1, 1, step1 + 1 + i);
  }
  const json r = judge(b);
  EXPECT_EQ(verdict_of(r, "zero_global_downtime"), "valid") << r["run"].dump(2);
  EXPECT_EQ(r["run"]["global_downtime_s"].get<double>(), 0.0) << r["run"].dump(2);
  EXPECT_EQ(r["run"]["downtime_intervals"], json::array());
  ASSERT_EQ(r["run"]["between_parts"].size(), 1u) << r["run"].dump(2);
  EXPECT_DOUBLE_EQ(r["run"]["between_parts"][0]["from"].get<double>(), 1010.05);
  EXPECT_DOUBLE_EQ(r["run"]["between_parts"][0]["to"].get<double>(), 1030.0);
  // Observed from 1000.1 (learner 1's first row) to the stop, and from 1031.1 to the last row.
  EXPECT_NEAR(r["run"]["observed_s"].get<double>(), (1010.05 - 1000.1) + (1040.6 - 1031.1), 1e-6);
  EXPECT_EQ(r["run"]["parts"], 2);
  EXPECT_EQ(verdict_of(r, "faulted_learners_back"), "valid") << r.dump(2);
  ASSERT_EQ(r["faults"].size(), 1u);
  expect_fault(r["faults"][0], {{"kind", "pause"},
                                {"noticed_at", nullptr},
                                {"restarted_at", nullptr},
                                {"rejoined_at", nullptr},
                                {"first_merge_after_s", 3.0}});
  EXPECT_NE(format_report(r).find("global downtime      0.00 s (19.95 s between the parts not "
                                  "observed: 1 planned stop and resume)"),
            std::string::npos)
      << format_report(r);
}

// A node the nodes file names learner-1 that ran with `--node-name host-1`: its forwarded events
// are nodes/host-1.events.jsonl, and its restart (node_start) and lost syncer link are this
// fault's by the learners its node_start names; host-0's node_start (learner 0) is not.
TEST(chaos_report, a_node_restarted_under_another_name_is_matched_by_its_learners) {
  run_builder b;
  b.tape[1] = run_builder::cli_fault(1008.0, "kill", "node:learner-1", {"learner-1"}, 1.0);
  b.node_events["host-0"] = {
      {{"event", "node_start"}, {"time", 1008.5}, {"node", "host-0"}, {"learners", {0}}}};
  b.node_events["host-1"] = {
      {{"event", "node_start"}, {"time", 1000.1}, {"node", "host-1"}, {"learners", {1}}},
      {{"event", "syncer_lost"}, {"time", 1008.25}},
      {{"event", "node_start"}, {"time", 1009.5}, {"node", "host-1"}, {"learners", {1}}}};
  const json r = judge(b);
  ASSERT_EQ(r["faults"].size(), 1u);
  expect_fault(r["faults"][0], {{"kind", "kill"},
                                {"learners", json::array({1})},
                                {"noticed_after_s", 0.25},
                                {"restarted_after_s", 1.5},
                                {"rejoined_after_s", 7.0}});
}

// Issue 11: a message fault on learner:0 just before a syncer kill is not charged with what the
// syncer's outage did to learner 0 (its node's syncer_lost, its rejoin): the syncer fault is.
TEST(chaos_report, a_syncer_kill_owns_the_outage_of_an_overlapping_message_fault) {
  run_builder b;
  b.tape.push_back(run_builder::tape_line(1002.8, "dup_push", "learner:0", {"learner-0"}, nullptr));
  b.tape.back()["source"] = "endpoint";
  b.tape.push_back(run_builder::tape_line(1003.0, "kill", "node:syncer", {"syncer"}, nullptr));
  b.events.insert(b.events.begin() + 7, json{{"event", "resume"}, {"time", 1006.0}});
  b.events.insert(b.events.begin() + 8,
                  json{{"event", "rejoin"}, {"time", 1007.2}, {"learner", 0}, {"incarnation", 1}});
  const std::string dir = b.write();
  fs::create_directories(dir + "/nodes");
  write_file_atomic(dir + "/nodes/learner-0.events.jsonl",
                    json{{"event", "syncer_lost"}, {"time", 1003.5}}.dump() + "\n" +
                        json{{"event", "syncer_back"}, {"time", 1007.0}}.dump() + "\n");
  const json r = judge_dir(dir);
  ASSERT_EQ(r["faults"].size(), 3u);
  expect_fault(r["faults"][0],
               {{"kind", "dup_push"}, {"noticed_at", nullptr}, {"rejoined_at", nullptr}});
  expect_fault(r["faults"][1],
               {{"kind", "kill"}, {"noticed_after_s", 0.5}, {"rejoined_after_s", 4.0}});
}

// A learner fault that holds a learner (pause, blackhole) while the syncer is killed: the node
// observes the syncer's outage only when the learner fault ends, after the syncer's own window.
// The syncer fault owns that node's first syncer_lost after the kill (within 10 s of the learner
// fault's end); a later drop of that node, or one of a node whose fault had ended before the
// kill, is still unexplained.
TEST(chaos_report, a_syncer_kill_owns_the_late_syncer_lost_of_a_held_learner) {
  struct row {
    const char* what;
    const char* kind;          ///< the learner fault on learner:1 at 1008
    double duration;           ///< its duration
    std::vector<double> lost;  ///< learner-1's syncer_lost times
    std::vector<double> unexplained;
  };
  const std::vector<row> table = {
      {"paused through the kill: noticed when the pause ends", "pause", 5.0, {1013.02}, {}},
      {"blackholed through the kill: noticed when the blackhole ends",
       "blackhole",
       5.0,
       {1013.003},
       {}},
      {"a second drop after the first is not the syncer's",
       "pause",
       5.0,
       {1013.02, 1017.0},
       {1017.0}},
      {"a drop more than 10 s after the learner fault ended", "pause", 5.0, {1023.5}, {1023.5}},
      {"a learner fault that ended before the kill holds nothing",
       "pause",
       1.0,
       {1013.02},
       {1013.02}},
  };
  for (const auto& r : table) {
    run_builder b;
    b.tape.back() = run_builder::cli_fault(1008.0, r.kind, "learner:1", {"learner-1"}, r.duration);
    b.tape.push_back(run_builder::cli_fault(1009.5, "kill", "node:syncer", {"syncer"}, nullptr));
    b.events.erase(b.events.begin() + 7);  // no lease expiry: the old syncer was gone
    b.events.insert(b.events.begin() + 7, json{{"event", "resume"}, {"time", 1010.5}});
    b.node_events["learner-0"] = {
        {{"event", "syncer_lost"}, {"time", 1009.52}, {"steps", {{"0", 20}}}},
        {{"event", "syncer_back"}, {"time", 1011.0}, {"steps", {{"0", 23}}}}};
    for (double t : r.lost)
      b.node_events["learner-1"].push_back(
          {{"event", "syncer_lost"}, {"time", t}, {"steps", {{"1", 16}}}});
    const json rep = judge(b);
    const json& u = rep["run"]["unexplained"];
    ASSERT_EQ(u["count"], r.unexplained.size()) << r.what << ": " << u.dump(2);
    for (size_t i = 0; i < r.unexplained.size(); ++i) {
      EXPECT_EQ(u["events"][i]["node"], "learner-1") << r.what;
      EXPECT_NEAR(u["events"][i]["at"].get<double>(), r.unexplained[i], 1e-9) << r.what;
    }
    // The syncer kill is noticed by learner-0 at once; the held learner's fault shows no
    // detection of its own.
    ASSERT_EQ(rep["faults"].size(), 2u) << r.what;
    expect_fault(rep["faults"][1], {{"kind", "kill"}, {"noticed_at", 1009.52}});
    if (r.duration > 2.0) {
      expect_fault(rep["faults"][0], {{"kind", r.kind}, {"noticed_at", nullptr}});
    }
  }
}

// Issue 11: a resumed run's summary.json is its last part's (wall seconds, merges); the report
// counts both parts from the events and keeps the summary's figures in last_part.
TEST(chaos_report, a_resumed_run_counts_both_parts) {
  run_builder b;
  b.events.insert(b.events.begin() + 7, json{{"event", "resume"}, {"time", 1006.0}});
  b.summary["resumed"] = true;
  b.summary["seconds_before_resume"] = 5.5;
  b.summary["wall_seconds"] = 14.0;
  b.summary["merges"] = 1;
  b.summary["effective_goodput"] = 0.1;
  const json r = judge(b);
  EXPECT_EQ(r["run"]["parts"], 2);
  EXPECT_DOUBLE_EQ(r["run"]["wall_seconds"].get<double>(), 1020.0 - 1000.0);
  EXPECT_DOUBLE_EQ(r["run"]["last_part"]["wall_seconds"].get<double>(), 14.0);
  EXPECT_DOUBLE_EQ(r["run"]["last_part"]["seconds_before_resume"].get<double>(), 5.5);
  EXPECT_EQ(r["run"]["merges"], 2);
  // Σ merged contributors' tokens (2 merges x 2 x 100) / (1 fragment x 820 tokens).
  EXPECT_DOUBLE_EQ(r["run"]["effective_goodput"].get<double>(), 400.0 / 820.0);
  // A run that was not resumed keeps its summary's figures.
  const json plain = judge(run_builder{});
  EXPECT_EQ(plain["run"]["parts"], 1);
  EXPECT_DOUBLE_EQ(plain["run"]["wall_seconds"].get<double>(), 20.0);
  EXPECT_DOUBLE_EQ(plain["run"]["effective_goodput"].get<double>(), 0.8);
  EXPECT_FALSE(plain["run"].contains("last_part"));
}

TEST(chaos_report, binary_exit_status_and_json_file) {
  run_builder b;
  const std::string dir = b.write();
  auto run = [](const std::string& args) {
    return dd::test::run_command(std::string(DD_CHAOS_BIN) + " " + args);
  };
  auto [rc, out] = run("report " + dir);
  EXPECT_EQ(rc, 0) << out;
  const json written = json::parse(read_file(dir + "/chaos_report.json"));
  EXPECT_EQ(written["verdict"], "unknown");  // no baseline
  EXPECT_EQ(written["faults"].size(), 1u);
  std::tie(rc, out) = run("report " + dir + " --loss-tolerance x");
  EXPECT_EQ(rc, 2) << out;
  std::tie(rc, out) = run("report " + dir + " --bogus");
  EXPECT_EQ(rc, 2) << out;
  std::tie(rc, out) = run("report /nonexistent/run");
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("not a run directory"), std::string::npos);
  // A directory that holds none of a run's files is no run either: exit 1, nothing written.
  const std::string not_run = dir + "-not-a-run";
  fs::create_directories(not_run);
  std::ofstream(not_run + "/experiment.lua") << "experiment {}\n";
  std::tie(rc, out) = run("report " + not_run);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("holds none of a run's files"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(not_run + "/chaos_report.json"));
  fs::remove_all(not_run);
  // An invalid run: exit 1, and --json puts the file elsewhere; --dry-run writes nothing.
  b.edit("merge", 1016.0, [](json& e) { e["version"] = 1; });
  const std::string bad = b.write();
  std::tie(rc, out) = run("report " + bad + " --json " + bad + "/r.json");
  EXPECT_EQ(rc, 1) << out;
  EXPECT_TRUE(fs::exists(bad + "/r.json"));
  EXPECT_NE(out.find("invalid  no_version_repeated"), std::string::npos) << out;
  std::tie(rc, out) = run("report " + bad + " --dry-run");
  EXPECT_EQ(rc, 1);
  EXPECT_FALSE(fs::exists(bad + "/chaos_report.json"));
  fs::remove_all(dir);
  fs::remove_all(bad);
}

TEST(chaos_report, a_fault_nobody_noticed_has_no_detection_and_no_rejoin) {
  run_builder b;
  // Latency on learner-0's link for 1 s at 1003: no failure, no rejoin; its next merge counts.
  b.tape.push_back(run_builder::tape_line(1003.0, "latency", "learner:0", {"learner-0"}, 1.0));
  // learner 0 is dropped later (at 1012, after a fault on learner 1 only) and rejoins at 1014.
  b.events.insert(b.events.end() - 2,
                  json{{"event", "failure"}, {"time", 1012.0}, {"learner", 0}, {"reason", "x"}});
  b.events.insert(b.events.end() - 2, json{{"event", "rejoin"}, {"time", 1014.0}, {"learner", 0}});
  const json r = judge(b);
  ASSERT_EQ(r["faults"].size(), 2u);
  // The 1012 failure is learner 0's, and no later fault touches learner 0, so it counts as noticed;
  // a rejoin then follows.
  expect_fault(r["faults"][0], {{"kind", "latency"},
                                {"learners", json::array({0})},
                                {"noticed_after_s", 9.0},
                                {"rejoined_after_s", 11.0}});
  // Another fault on learner 0 at 1010 ends this one's detection window: nothing noticed then.
  run_builder c = b;
  c.tape.push_back(run_builder::tape_line(1010.0, "pause", "learner:0", {"learner-0"}, 1.0));
  const json r2 = judge(c);
  ASSERT_EQ(r2["faults"].size(), 3u);
  expect_fault(r2["faults"][0], {{"noticed_after_s", nullptr},
                                 {"rejoined_after_s", nullptr},
                                 {"first_merge_after_s", 13.0}});  // after its end (1004): 1016
  expect_fault(r2["faults"][2], {{"noticed_after_s", 2.0}});       // the 1010 pause
}

TEST(chaos_report, a_refused_fault_has_no_times_and_does_not_cut_the_fault_before_it) {
  run_builder b;
  // A kill of learner 1 refused at 1009 (say, a reused pid): nothing was injected, so the
  // failure at 1010 and the rejoin at 1015 stay the 1008 pause's.
  b.tape.push_back(
      {{"t", 1009.0},
       {"source", "cli"},
       {"kind", "kill"},
       {"target", "learner:1"},
       {"targets", {"learner-1"}},
       {"duration", nullptr},
       {"result", "refused"},
       {"hits", {{{"node", "learner-1"}, {"result", "refused"}, {"error", "reused"}}}}});
  const json r = judge(b);
  ASSERT_EQ(r["faults"].size(), 2u) << r.dump(2);
  expect_fault(r["faults"][0],
               {{"kind", "pause"}, {"noticed_after_s", 2.0}, {"rejoined_after_s", 7.0}});
  const json& kill = r["faults"][1];
  expect_fault(kill, {{"kind", "kill"},
                      {"result", "refused"},
                      {"injected_at", nullptr},
                      {"attempted_at", 1009.0}});
  for (const char* k : {"noticed_at", "excluded_at", "restarted_at", "rejoined_at",
                        "first_merge_at", "noticed_after_s", "excluded_after_s",
                        "restarted_after_s", "rejoined_after_s", "first_merge_after_s"})
    EXPECT_TRUE(kill[k].is_null()) << k << ": " << kill.dump(2);
  EXPECT_EQ(verdict_of(r, "faulted_learners_back"), "valid");
  const std::string table = format_report(r);
  EXPECT_NE(table.find("refused"), std::string::npos) << table;
}

TEST(chaos_report, a_fault_refused_on_some_targets_is_judged_on_the_others) {
  run_builder b;
  // `kill learners` at 1009: learner-0's hit refused, learner-1's applied.
  b.tape.push_back({{"t", 1009.0},
                    {"source", "cli"},
                    {"kind", "kill"},
                    {"target", "learners"},
                    {"targets", {"learner-0", "learner-1"}},
                    {"duration", nullptr},
                    {"result", "refused"},
                    {"hits",
                     {{{"node", "learner-0"}, {"result", "refused"}, {"error", "reused"}},
                      {{"node", "learner-1"}, {"result", "ok"}}}}});
  const json r = judge(b);
  ASSERT_EQ(r["faults"].size(), 2u) << r.dump(2);
  expect_fault(r["faults"][1], {{"result", "partial"},
                                {"nodes", json::array({"learner-1"})},
                                {"learners", json::array({1})},
                                {"injected_at", 1009.0},
                                {"noticed_after_s", 1.0}});
}

// a damaged owner checkpoint that the restarted syncer detected and rebuilt
// had no times in the report. Now: noticed at the owner's `failure` (checkpoint_unreadable),
// repaired at `fragment_rebuilt`, merged at the fragment's next merge; a damage never read has
// no times.
TEST(chaos_report, a_damaged_checkpoint_is_noticed_when_read_and_repaired_when_rebuilt) {
  run_builder b;
  b.tape.push_back({{"t", 1003.0},
                    {"kind", "disk_corrupt"},
                    {"target", "owner:0"},
                    {"targets", json::array()},
                    {"result", "ok"},
                    {"hits", {{{"target", "owner:0"}, {"result", "ok"}}}}});
  b.events.insert(b.events.end() - 4, json{{"event", "failure"},
                                           {"time", 1012.0},
                                           {"fragment", 0},
                                           {"what", "checkpoint_unreadable"},
                                           {"error", "checkpoint CRC32 mismatch"}});
  b.events.insert(b.events.end() - 4,
                  json{{"event", "fragment_rebuilt"}, {"time", 1013.5}, {"fragment", 0}});
  const json r = judge(b);
  json disk;
  for (const auto& f : r["faults"])
    if (f["kind"] == "disk_corrupt") disk = f;
  ASSERT_FALSE(disk.is_null()) << r.dump(2);
  expect_fault(disk, {{"noticed_after_s", 9.0},
                      {"restarted_after_s", 10.5},
                      {"first_merge_after_s", 13.0}});  // the merge at 1016
  // Never read: no times.
  run_builder c;
  c.tape.push_back(b.tape.back());
  const json r2 = judge(c);
  for (const auto& f : r2["faults"])
    if (f["kind"] == "disk_corrupt")
      expect_fault(f, {{"noticed_after_s", nullptr}, {"restarted_after_s", nullptr}});
}

namespace {
/// Runs dd-chaos with `args`: its exit status and stdout + stderr.
std::pair<int, std::string> run_chaos_cli(const std::string& args) {
  return dd::test::run_command(std::string(DD_CHAOS_BIN) + " " + args);
}
}  // namespace

// Regression: `dd-chaos COMMAND --help` prints that command's entries and the common flags, as
// `dd-chaos help COMMAND` does, not the whole usage. An unknown command's
// help is a usage error (exit 2).
TEST(chaos_cli, command_help_prints_that_commands_help) {
  const auto run = run_chaos_cli;
  auto [rc, kill] = run("kill --help");
  EXPECT_EQ(rc, 0) << kill;
  EXPECT_NE(kill.find("kill TARGET      SIGKILL"), std::string::npos) << kill;
  EXPECT_NE(kill.find("without a launcher: re-exec its argv after D"), std::string::npos) << kill;
  EXPECT_NE(kill.find("--dry-run"), std::string::npos) << "the common flags";
  EXPECT_EQ(kill.find("pause TARGET"), std::string::npos) << kill;
  EXPECT_EQ(kill.find("run the fault proxy"), std::string::npos) << kill;
  auto [rc2, msg] = run("help msg");
  EXPECT_EQ(rc2, 0) << msg;
  EXPECT_NE(msg.find("msg FAULT TARGET"), std::string::npos) << msg;
  EXPECT_NE(msg.find("msg status"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("kill TARGET"), std::string::npos) << msg;
  auto [rc3, report] = run("report -h");
  EXPECT_EQ(rc3, 0);
  EXPECT_NE(report.find("--loss-tolerance F"), std::string::npos) << report;
  auto [rc4, unknown] = run("explode --help");
  EXPECT_EQ(rc4, 2) << unknown;
  EXPECT_NE(unknown.find("unknown command 'explode'"), std::string::npos) << unknown;
  auto [rc5, all] = run("--help");
  EXPECT_EQ(rc5, 0);
  EXPECT_NE(all.find("run the fault proxy"), std::string::npos);
}

// Regression: kill (and every process command but slow) takes none of slow's duty-cycle flags:
// each is refused with exit 2 naming it, as docs/chaos.md says of a flag a command does not take,
// and kill --help does not list them; slow still takes them.
TEST(chaos_cli, kill_refuses_slow_only_flags_with_exit_2) {
  for (const std::string flag : {"--duty 0.5", "--period 200ms", "--via signals"}) {
    const std::string name = flag.substr(0, flag.find(' '));
    for (const std::string cmd : {"kill", "term", "pause", "resume", "restart"}) {
      auto [rc, out] = run_chaos_cli(cmd + " learner:1 " + flag + " --dry-run");
      EXPECT_EQ(rc, 2) << cmd << " " << flag << ": " << out;
      EXPECT_NE(out.find("unknown flag '" + name + "'"), std::string::npos) << out;
    }
  }
  auto [rc, kill] = run_chaos_cli("kill --help");
  EXPECT_EQ(rc, 0) << kill;
  EXPECT_EQ(kill.find("--duty"), std::string::npos) << kill;
  EXPECT_EQ(kill.find("--period"), std::string::npos) << kill;
  EXPECT_EQ(kill.find("--via"), std::string::npos) << kill;
  EXPECT_NE(kill.find("--for D"), std::string::npos) << kill;
  auto [rc2, slow] = run_chaos_cli("slow --help");
  EXPECT_EQ(rc2, 0) << slow;
  EXPECT_NE(slow.find("  --duty F"), std::string::npos) << slow;
  EXPECT_NE(slow.find("  --period P"), std::string::npos) << slow;
  EXPECT_NE(slow.find("  --via HOW"), std::string::npos) << slow;
}

// Regression: --run-dir DIR without DIR/nodes.json (a cluster started by hand) says to give
// --nodes FILE, besides naming the file it could not open.
TEST(chaos_cli, run_dir_without_nodes_json_points_to_nodes_flag) {
  const std::string dir = ::testing::TempDir() + "chaos_no_nodes_json";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto [rc, out] = run_chaos_cli("kill learner:0 --dry-run --run-dir " + dir);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find(dir + "/nodes.json"), std::string::npos) << out;
  EXPECT_NE(out.find("a hand-started cluster has no nodes.json: give --nodes FILE (docs/chaos.md)"),
            std::string::npos)
      << out;
  std::filesystem::remove_all(dir);
}

// A syncer killed within 2 s of the learners' rejoin can lose a rejoin's tokens: every learner
// reaches its last step, summary.json counts fewer, learner_loss.csv's tokens go backwards at
// the rejoin — while every other invariant stays valid. tokens_match_steps catches each
// form: a row whose tokens went back, a row off steps × tokens per step, a short summary.json,
// a monitor record off its steps.
TEST(chaos_report, tokens_that_fall_behind_the_steps_are_invalid) {
  {
    run_builder b;  // learner 1's tokens go back at its rejoin while its step goes on
    b.csv += "1021.000,1,1,42,300,3.0\n";
    const json r = judge(b);
    EXPECT_EQ(verdict_of(r, "tokens_match_steps"), "invalid") << r.dump(2);
    EXPECT_EQ(r["verdict"], "invalid");
    std::string d;
    for (const auto& i : r["invariants"])
      if (i["name"] == "tokens_match_steps") d = i["detail"];
    EXPECT_NE(d.find("learner 1's tokens went back from 410 to 300 at step 42"), std::string::npos)
        << d;
  }
  {
    run_builder b;  // summary.json short of the steps (both learners at step 41)
    b.summary["tokens"] = 760;
    const json r = judge(b);
    EXPECT_EQ(verdict_of(r, "tokens_match_steps"), "invalid");
    std::string d;
    for (const auto& i : r["invariants"])
      if (i["name"] == "tokens_match_steps") d = i["detail"];
    EXPECT_NE(d.find("summary.json counts 760 tokens, the learners' 82 steps 820"),
              std::string::npos)
        << d;
  }
  {
    run_builder b;  // the monitor's record: learner 0 at step 50 with 410 tokens
    const std::string dir = b.write();
    write_file_atomic(dir + "/monitor.json", json{{"learners",
                                                   {{{"learner", 0},
                                                     {"step", 50},
                                                     {"tokens_before", 0},
                                                     {"tokens_this_incarnation", 410}}}}}
                                                 .dump());
    const json r = judge_dir(dir);
    EXPECT_EQ(verdict_of(r, "tokens_match_steps"), "invalid");
    EXPECT_EQ(r["inputs"]["monitor.json"], "read");
  }
  {
    run_builder b;  // a synchronous baseline resumes a learner at the group's step: may fall short
    b.experiment["sync"]["min_quorum"] = 2;
    b.summary["tokens"] = 760;
    EXPECT_EQ(verdict_of(judge(b), "tokens_match_steps"), "valid");
  }
}
