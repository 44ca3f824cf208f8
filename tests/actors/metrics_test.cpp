// tests/actors/metrics_test.cpp — the metrics registry's text exposition (exact lines), the
// node metrics fed from a run log's events and counters, and the HTTP listener (routes, 404, a
// taken port refused). promtool's check of every node kind's output is tests/apps/metrics_test.sh.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <limits>
#include <string>

#include <gtest/gtest.h>

#include "actors/services/http_listener.hpp"
#include "actors/services/metrics.hpp"
#include "actors/services/node_metrics.hpp"
#include "actors/services/run_log.hpp"
#include "actors/services/run_report.hpp"
#include "tests/support/expect_contains.hpp"
#include "tests/support/http_get.hpp"

namespace dd::actors {
namespace {

/// A syncer node's metrics options: run "abc", 2 learners, `fragments` fragments.
node_metrics_options syncer_options(int fragments) {
  node_metrics_options o;
  o.kind = "syncer";
  o.node = "syncer";
  o.run_id = "abc";
  o.learners = 2;
  o.fragments = fragments;
  return o;
}

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos || text.rfind(line + "\n", 0) == 0;
}

/// Expects every one of `lines` as a whole line of `text`.
void expect_lines(const std::string& text, std::initializer_list<const char*> lines) {
  for (const char* line : lines) EXPECT_TRUE(has_line(text, line)) << line << "\nin:\n" << text;
}

TEST(MetricsRegistry, ExposesCountersGaugesAndHistogramsInTheTextFormat) {
  metrics_registry r;
  auto& c = r.counter("dd_x_total", "Things.\nSecond line \\ here.", {"run", "learner"});
  auto& g = r.gauge("dd_y_bytes", "Bytes.");
  auto& h = r.histogram("dd_z_seconds", "Times.", {"run"}, {0.5, 1, 2});
  c.inc({"r1", "0"});
  c.inc({"r1", "0"}, 2);
  c.inc({"r1", "a\"b\\c\nd"});
  g.set({}, 1.5);
  h.observe({"r1"}, 0.25);
  h.observe({"r1"}, 1.0);
  h.observe({"r1"}, 7.0);
  const std::string out = r.expose();
  expect_lines(out, {"# HELP dd_x_total Things.\\nSecond line \\\\ here.",
                     "# TYPE dd_x_total counter", "dd_x_total{run=\"r1\",learner=\"0\"} 3",
                     "dd_x_total{run=\"r1\",learner=\"a\\\"b\\\\c\\nd\"} 1",
                     "# TYPE dd_y_bytes gauge", "dd_y_bytes 1.5", "# TYPE dd_z_seconds histogram",
                     "dd_z_seconds_bucket{run=\"r1\",le=\"0.5\"} 1",
                     "dd_z_seconds_bucket{run=\"r1\",le=\"1\"} 2",
                     "dd_z_seconds_bucket{run=\"r1\",le=\"2\"} 2",
                     "dd_z_seconds_bucket{run=\"r1\",le=\"+Inf\"} 3",
                     "dd_z_seconds_sum{run=\"r1\"} 8.25", "dd_z_seconds_count{run=\"r1\"} 3"});
  EXPECT_EQ(c.value({"r1", "0"}), 3.0);
  EXPECT_EQ(h.value({"r1"}), 3.0);
}

TEST(MetricsRegistry, RefusesBadNamesCountersWithoutTotalAndDuplicates) {
  metrics_registry r;
  EXPECT_THROW(r.counter("dd_steps", "x"), std::invalid_argument);
  EXPECT_THROW(r.gauge("1bad", "x"), std::invalid_argument);
  EXPECT_THROW(r.gauge("dd_ok", "x", {"le"}), std::invalid_argument);
  EXPECT_THROW(r.histogram("dd_h_seconds", "x", {}, {2, 1}), std::invalid_argument);
  r.gauge("dd_ok", "x");
  EXPECT_THROW(r.gauge("dd_ok", "x"), std::invalid_argument);
  EXPECT_EQ(r.expose(), "");  // a family without series writes nothing
}

TEST(MetricsRegistry, FormatsSpecialValues) {
  EXPECT_EQ(format_sample_value(0.0), "0");
  EXPECT_EQ(format_sample_value(2.0), "2");
  EXPECT_EQ(format_sample_value(1e-5), "1e-05");
  EXPECT_EQ(format_sample_value(std::nan("")), "NaN");
  EXPECT_EQ(format_sample_value(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(format_sample_value(-std::numeric_limits<double>::infinity()), "-Inf");
}

TEST(NodeMetrics, FollowsTheRunLogsEventsAndCounters) {
  double now = 10.0;
  run_log log({}, false, [&] { return now; });
  node_metrics_options o = syncer_options(1);
  o.version = "1.2.3";
  o.commit = "deadbeef";
  node_metrics m(o);
  m.attach(&log);
  EXPECT_FALSE(m.ready());  // a syncer is ready once serving
  m.set_serving(true);
  EXPECT_TRUE(m.ready());
  log.update([](run_counters& c) {
    c.learners[0].alive = true;
    c.learners[0].step = 7;
    c.learners[0].tokens = 700;
    c.learners[0].incarnation = 2;
    c.learners[0].last_report_s = 8.0;
    c.learners[1].alive = false;
    c.versions[0] = 3;
    c.grace_s[0] = 0.25;
    c.merges = 3;
  });
  log.emit("merge", {{"fragment", 0},
                     {"version", 3},
                     {"contributors",
                      {{{"learner", 0}, {"base_version", 2}, {"tokens", 100}, {"weight", 0.75}},
                       {{"learner", 1}, {"base_version", 0}, {"tokens", 30}, {"weight", 0.25}}}},
                     {"grace_s", 0.25},
                     {"round_s", 1.5},
                     {"sync_s", 0.01}});
  log.emit("push", {{"fragment", 0},
                    {"learner", 1},
                    {"base_version", 1},
                    {"accepted", false},
                    {"reason", "stale"},
                    {"bytes", 40}});
  log.emit("eval", {{"val_loss", 2.5}, {"tokens", 800}});
  log.emit("respawn", {{"kind", "learner"}, {"id", 1}});
  log.note_step(0, 0.003);
  const std::string out = m.scrape();
  expect_lines(
      out,
      {"dd_learner_up{run=\"abc\",learner=\"0\"} 1", "dd_learner_up{run=\"abc\",learner=\"1\"} 0",
       "dd_learner_steps_total{run=\"abc\",learner=\"0\"} 7",
       "dd_learner_incarnation{run=\"abc\",learner=\"0\"} 2",
       "dd_learner_lease_age_seconds{run=\"abc\",learner=\"0\"} 2",
       "dd_fragment_merges_total{run=\"abc\",fragment=\"0\"} 1",
       "dd_fragment_version{run=\"abc\",fragment=\"0\"} 3",
       "dd_fragment_last_merge_tokens{run=\"abc\",fragment=\"0\"} 130",
       "dd_fragment_last_merge_weight{run=\"abc\",fragment=\"0\",learner=\"0\"} 0.75"});
  // Learner 1's contribution was based on version 0 and merged into 3: two versions stale.
  expect_lines(
      out,
      {"dd_fragment_contribution_staleness_versions_bucket{run=\"abc\",fragment=\"0\",le=\"1\"} 1",
       "dd_fragment_contribution_staleness_versions_bucket{run=\"abc\",fragment=\"0\",le=\"2\"} 2",
       "dd_fragment_quorum_wait_seconds_sum{run=\"abc\",fragment=\"0\"} 1.5",
       "dd_fragment_refusals_total{run=\"abc\",fragment=\"0\",reason=\"stale\"} 1",
       "dd_learner_pushes_total{run=\"abc\",learner=\"1\",result=\"refused\"} 1",
       "dd_learner_applied_version{run=\"abc\",learner=\"1\",fragment=\"0\"} 1",
       "dd_monitor_learners{run=\"abc\",state=\"live\"} 1",
       "dd_monitor_learners{run=\"abc\",state=\"away\"} 1",
       "dd_run_evaluations_total{run=\"abc\"} 1",
       "dd_node_restarts_total{run=\"abc\",kind=\"learner\"} 1",
       "dd_divergences_total{run=\"abc\"} 0",
       "dd_build_info{run=\"abc\",version=\"1.2.3\",commit=\"deadbeef\"} 1",
       "dd_learner_step_seconds_count{run=\"abc\",learner=\"0\"} 1"});

  // A learner marked down shows as 0 at the next scrape, and back as 1.
  log.update([](run_counters& c) { c.learners[0].alive = false; });
  EXPECT_TRUE(has_line(m.scrape(), "dd_learner_up{run=\"abc\",learner=\"0\"} 0"));
  log.update([](run_counters& c) { c.learners[0].alive = true; });
  EXPECT_TRUE(has_line(m.scrape(), "dd_learner_up{run=\"abc\",learner=\"0\"} 1"));

  const auto s = m.status();
  ASSERT_EQ(s["learners"].size(), 2u);
  EXPECT_EQ(s["learners"][0]["id"], 0);
  EXPECT_EQ(s["learners"][0]["incarnation"], 2);
  EXPECT_EQ(s["learners"][1]["state"], "down");
  EXPECT_EQ(s["learners"][1]["last_push"]["reason"], "stale");
  EXPECT_EQ(s["fragments"][0]["version"], 3);
  EXPECT_EQ(s["fragments"][0]["last_merge"]["contributors"].size(), 2u);
  EXPECT_EQ(s["fragments"][0]["last_merge"]["contributors"][1]["staleness"], 2.0);
  EXPECT_EQ(s["validation"][0]["val_loss"], 2.5);
  ASSERT_EQ(s["timeline"].size(), 1u);
  EXPECT_EQ(s["timeline"][0]["event"], "respawn");
  m.attach(nullptr);
  log.emit("merge", {{"fragment", 0}, {"version", 4}});  // detached: not counted
  EXPECT_TRUE(has_line(m.scrape(), "dd_fragment_merges_total{run=\"abc\",fragment=\"0\"} 1"));
}

// Every series carries `run` (dd_build_info too); a node's event counters are there at 0 before
// their first event; a launcher that learns the run id later relabels its own series.
TEST(NodeMetrics, EventCountersStartAtZeroAndEverySeriesNamesTheRun) {
  node_metrics_options o;
  o.kind = "learner";
  o.node = "learner-0";
  o.run_id = "abc";
  o.version = "1.2.3";
  o.commit = "deadbeef";
  node_metrics learner(o);
  expect_lines(learner.scrape(),
               {"dd_node_reconnects_total{run=\"abc\"} 0",
                "dd_node_restarts_total{run=\"abc\",kind=\"learner\"} 0",
                "dd_node_faults_total{run=\"abc\",fault=\"kill_learner\"} 0",
                "dd_node_faults_total{run=\"abc\",fault=\"drop_push\"} 0",
                "dd_build_info{run=\"abc\",version=\"1.2.3\",commit=\"deadbeef\"} 1"});
  // Faults that act outside a node (signals, the proxy, files) are not among them.
  EXPECT_EQ(learner.scrape().find("fault=\"kill\""), std::string::npos);

  o.kind = "launch";
  o.node = "launch";
  o.run_id = "";
  node_metrics launcher(o);
  EXPECT_TRUE(has_line(launcher.scrape(),
                       "dd_build_info{run=\"\",version=\"1.2.3\",commit=\"deadbeef\"} 1"));
  EXPECT_EQ(launcher.scrape().find("dd_node_reconnects_total{"), std::string::npos);
  launcher.set_run_id("r-1");
  const std::string out = launcher.scrape();
  EXPECT_TRUE(has_line(out, "dd_build_info{run=\"r-1\",version=\"1.2.3\",commit=\"deadbeef\"} 1"))
      << out;
  EXPECT_EQ(out.find("run=\"\""), std::string::npos) << out;
  EXPECT_NE(out.find("dd_node_uptime_seconds{run=\"r-1\",node=\"launch\",kind=\"launch\"}"),
            std::string::npos)
      << out;
  EXPECT_EQ(launcher.status()["run_id"], "r-1");
}

/// The value of `series` (name{labels}) in an exposition text; NaN when absent.
double sample_of(const std::string& text, const std::string& series) {
  const auto at = text.find("\n" + series + " ");
  if (at == std::string::npos) return std::nan("");
  return std::stod(text.substr(at + series.size() + 2));
}

// /metrics and /status give summary.json's figures of the whole run (make_run_result on the same
// counters): after a syncer restart they add the earlier parts (merges, restarts, pushes, wall
// and training seconds), and at the end of a run goodput divides by the training time up to the
// stop, not by the wall time that a 32 s final evaluation adds.
TEST(NodeMetrics, RunFiguresAreSummaryJsonsForTheWholeRunAfterTheStop) {
  for (const bool resumed : {false, true}) {
    SCOPED_TRACE(resumed ? "resumed" : "fresh");
    double now = 0.0;
    run_log log({}, false, [&] { return now; });
    node_metrics_options o = syncer_options(2);
    run_facts f;
    f.learners = 2;
    f.fragments = 2;
    if (resumed) {
      o.resumed = f.resumed = true;
      o.seconds_before = f.seconds_before = 100.0;
      earlier_parts b;
      b.parts = 1;
      b.merges = 40;
      b.contributors = 80;
      b.tokens_merged = 3000;
      b.pushes = 90;
      b.pushes_rejected = 3;
      b.learner_restarts = 2;
      b.owner_restarts = 1;
      b.wall_s = 120.0;
      o.before = f.before = b;
    }
    node_metrics m(o);
    m.attach(&log);
    log.emit(resumed ? "resume" : "start", {});
    log.update([](run_counters& c) {
      for (int32_t id : {0, 1}) {
        c.learners[id].alive = true;
        c.learners[id].tokens = 4000;  // over every part (the monitor's record)
        c.learners[id].compute_s = 15.0;
      }
      c.merges = 10;
      c.contributors = 20;
      c.tokens_merged = 1000;
      c.pushes = 30;
      c.pushes_rejected = 1;
      c.learner_restarts = 1;
      c.uptime_s = 19.0;
      c.observed_s = 20.0;
    });
    now = 20.0;
    log.emit("stop", {{"reason", "budget spent"}});
    now = 52.0;  // a 32 s final evaluation
    const auto summary = make_run_result(f, log.snapshot(), 2.0, 1, 52.0, 20.0).summary;
    const std::string out = m.scrape();
    // Goodput: 30 compute seconds over 2 × 20 training seconds (+ 2 × 100 before the resume),
    // not over the 52 s that include the final evaluation.
    EXPECT_DOUBLE_EQ(summary["goodput"].get<double>(), resumed ? 30.0 / 240.0 : 0.75);
    EXPECT_DOUBLE_EQ(sample_of(out, "dd_run_goodput_ratio{run=\"abc\"}"),
                     summary["goodput"].get<double>())
        << out;
    EXPECT_EQ(sample_of(out, "dd_run_merges_total{run=\"abc\"}"), resumed ? 50.0 : 10.0) << out;
    EXPECT_EQ(sample_of(out, "dd_run_merges_total{run=\"abc\"}"), summary["merges"].get<double>());
    EXPECT_EQ(sample_of(out, "dd_run_tokens_total{run=\"abc\"}"), 8000.0) << out;
    EXPECT_DOUBLE_EQ(sample_of(out, "dd_run_uptime_ratio{run=\"abc\"}"), 0.95) << out;
    const auto st = m.status()["run"];
    EXPECT_EQ(st["parts"], resumed ? 2 : 1);
    EXPECT_EQ(st["merges"], summary["merges"]);
    EXPECT_EQ(st["tokens"], summary["tokens"]);
    EXPECT_EQ(st["goodput"], summary["goodput"]);
    EXPECT_EQ(st["uptime"], summary["uptime"]);
    EXPECT_EQ(st["learner_restarts"], summary["learner_restarts"]);
    EXPECT_EQ(st["learner_restarts"], resumed ? 3 : 1);
    EXPECT_EQ(st["owner_restarts"], resumed ? 1 : 0);
    EXPECT_EQ(st["pushes"], resumed ? 120 : 30);
    EXPECT_EQ(st["pushes_refused"], resumed ? 4 : 1);
    EXPECT_EQ(st["wall_seconds"], summary["wall_seconds"]);
    EXPECT_DOUBLE_EQ(st["wall_seconds"].get<double>(), resumed ? 172.0 : 52.0);
    m.attach(nullptr);
  }
}

using dd::test::http_get;

TEST(HttpListener, ServesRoutesAndPrefixesAnswers404AndRefusesATakenPort) {
  http_listener l("127.0.0.1", 0);
  ASSERT_GT(l.port(), 0);
  EXPECT_EQ(l.url(), "http://127.0.0.1:" + std::to_string(l.port()));
  l.route("/a", [](const http_request& r) {
    auto it = r.params.find("x");
    return http_response{200, "A" + (it != r.params.end() ? it->second : std::string()),
                         "text/plain"};
  });
  l.route_prefix("/static/", [](const http_request& r) {
    return http_response{200, "file " + r.path, "text/plain"};
  });
  l.route("/boom", [](const http_request&) -> http_response { throw std::runtime_error("bad"); });
  std::string a = http_get(l.port(), "/a?x=7");
  EXPECT_NE(a.find("200"), std::string::npos) << a;
  EXPECT_NE(a.find("\r\n\r\nA7"), std::string::npos) << a;
  EXPECT_NE(http_get(l.port(), "/static/chart.js").find("file /static/chart.js"),
            std::string::npos);
  std::string missing = http_get(l.port(), "/nope");
  EXPECT_NE(missing.find("404"), std::string::npos) << missing;
  std::string boom = http_get(l.port(), "/boom");
  EXPECT_NE(boom.find("500"), std::string::npos) << boom;
  EXPECT_NE(boom.find("error: bad"), std::string::npos) << boom;
  // A second listener on the same port is refused (no SO_REUSEPORT sharing).
  try {
    http_listener taken("127.0.0.1", l.port());
    FAIL() << "a second listener bound port " << l.port();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(l.port())), std::string::npos) << e.what();
  }
}

TEST(HttpListener, NodeMetricsRoutes) {
  run_log log;
  node_metrics_options o;
  o.kind = "learner";
  o.node = "learner-0";
  o.run_id = "r";
  node_metrics m(o);
  m.attach(&log);
  http_listener l("127.0.0.1", 0);
  m.serve(l);
  EXPECT_NE(http_get(l.port(), "/healthz").find("200"), std::string::npos);
  EXPECT_NE(http_get(l.port(), "/readyz").find("503"), std::string::npos);  // not stepping
  log.set_stepping(0, true);
  EXPECT_NE(http_get(l.port(), "/readyz").find("200"), std::string::npos);
  log.update([](run_counters& c) {
    c.learners[0].pushes_sent = 3;
    c.learners[0].push_bytes_sent = 300;
    c.merges = 9;  // the syncer's: a learner node does not show the run's merges
  });
  const std::string metrics = http_get(l.port(), "/metrics");
  dd::test::expect_contains_all(
      metrics, {"text/plain; version=0.0.4",
                "dd_node_uptime_seconds{run=\"r\",node=\"learner-0\",kind=\"learner\"}",
                "\ndd_learner_pushes_sent_total{run=\"r\",learner=\"0\"} 3\n",
                "\ndd_link_bytes_total{run=\"r\",direction=\"push_out\"} 300\n"});
  EXPECT_EQ(metrics.find("dd_run_merges_total"), std::string::npos) << metrics;
  const std::string status = http_get(l.port(), "/status");
  EXPECT_NE(status.find("\"node\":\"learner-0\""), std::string::npos) << status;
  m.attach(nullptr);
}

TEST(RunSummary, IsReadableLinesNamingWhereTheFilesAre) {
  run_result r;
  r.finished = true;
  r.summary = {{"final_val_loss", 3.49321},
               {"tokens", 717184},
               {"wall_seconds", 20.0},
               {"goodput", 0.8562},
               {"effective_goodput", 0.2421},
               {"uptime", 1.0},
               {"merges", 916},
               {"mean_contributors_per_merge", 1.3275},
               {"learner_restarts", 1},
               {"chunks_refused", 2},
               {"envelopes_refused", 0},
               {"frames_refused", 3},
               {"model_file", "model.safetensors"}};
  r.info = {{"owner_restarts", 4}};
  EXPECT_EQ(summary_text("tiny", r, "runs/tiny", "runs/tiny/logs"),
            "== tiny done in 20.0 s\n"
            "  final val loss  3.4932 nats/token\n"
            "  tokens          717,184 (35859 per second)\n"
            "  wall time       20.0 s\n"
            "  goodput         0.856 (effective 0.242), uptime 1.000\n"
            "  merges          916 (1.33 contributors per merge)\n"
            "  restarts        1 learner, 4 owner\n"
            "  refused         2 chunks, 0 envelopes, 3 frames\n"
            "  model           runs/tiny/model.safetensors\n"
            "  summary         runs/tiny/summary.json, events runs/tiny/events.jsonl\n"
            "  figures         dd-node plot runs/tiny  (writes runs/tiny/figures/)\n"
            "  logs            runs/tiny/logs\n");
  r.failed = true;
  r.failure_reason = "learner 1 of 2 exhausted its restart budget";
  r.summary["final_val_loss"] = nullptr;
  r.summary["wall_seconds"] = 4000.0;
  r.summary["degraded"] = {{"fragment 2", "lost"}};
  const std::string t = summary_text("x", r, "d");
  EXPECT_EQ(t.rfind("== x FAILED: learner 1 of 2 exhausted its restart budget\n", 0), 0u) << t;
  EXPECT_NE(t.find("  final val loss  none (no evaluation ran)\n"), std::string::npos) << t;
  // The line says which evaluation gave the loss and on how many windows.
  r.summary["final_val_loss"] = 3.49321;
  r.summary["final_eval"] = {{"evaluation", "last periodic"}, {"windows", 128}};
  EXPECT_NE(
      summary_text("x", r, "d")
          .find("  final val loss  3.4932 nats/token (the last periodic evaluation: the final one "
                "did not run) on 128 windows\n"),
      std::string::npos)
      << summary_text("x", r, "d");
  r.summary["final_eval"] = {{"evaluation", "final"}, {"windows", 871}, {"covers_split", true}};
  EXPECT_NE(summary_text("x", r, "d")
                .find("  final val loss  3.4932 nats/token on 871 windows, "
                      "the whole validation split\n"),
            std::string::npos)
      << summary_text("x", r, "d");
  // An image classifier's loss is per image, on the images of its split, with its accuracy.
  r.summary["final_val_loss"] = 1.122081519305706;
  r.summary["final_val_accuracy"] = 0.6115;
  r.summary["final_eval"] = {{"evaluation", "final"},
                             {"data_kind", "idx"},
                             {"validation_samples", 2000},
                             {"covers_split", true}};
  EXPECT_NE(summary_text("x", r, "d")
                .find("  final val loss  1.1221 nats/image on 2000 images, the whole validation "
                      "split; accuracy 0.6115\n"),
            std::string::npos)
      << summary_text("x", r, "d");
  EXPECT_NE(t.find("  wall time       66 min 40 s\n"), std::string::npos) << t;
  EXPECT_NE(t.find("  degraded        fragment 2\n"), std::string::npos) << t;
  EXPECT_EQ(t.find("  logs"), std::string::npos) << t;
  r.failed = false;
  r.interrupted = true;
  r.interrupt_reason = "SIGTERM";
  EXPECT_EQ(summary_text("x", r, "d").rfind("== x interrupted by SIGTERM after 66 min 40 s\n", 0),
            0u);
}

}  // namespace
}  // namespace dd::actors
