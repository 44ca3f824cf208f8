// actors/policy/run_uptime.hpp — a cluster run's uptime and downtime from the learners' steps as
// the run directory records them: the one definition behind summary.json `uptime` of a
// `dd-node syncer` run and `dd-chaos report`'s `global_downtime_s`, so the two always agree about
// one run.
//
// Source: <run_dir>/learner_loss.csv (one row per heartbeat the syncer recorded) and the learner
// nodes' own samples of their learners' steps taken while the syncer was away (`syncer_lost`,
// `outage_steps`, `syncer_back` events with `steps` {learner: step}, in <run_dir>/events.jsonl
// and <run_dir>/nodes/*.events.jsonl) — so learners stepping through a syncer outage are up.
//
// Rule (docs/chaos-report.md "For the run"): per learner, its rows and samples in time order make
// advances; an advance is stepping when it took at most max(4 × pace, 2 s) per step, pace being
// the larger of two medians of the learner's seconds per step around it (its 5 advances on each
// side, and its advances that ended within ±60 s). The observed time runs from the moment
// training began — the start of the first stepping advance of any learner, and not before every
// learner the run started with (its first step within 60 s of the first row) made its first
// step, so a start-up stall (first steps slow under load, before any learner stepped at its
// pace, or while the others have not started yet) is not downtime — to the last row; downtime is
// the part of it with fewer than K learners stepping (K = 1: no learner stepping, the report's
// global downtime). A run in which no learner ever stepped at its pace is observed from its first
// row, all of it down.
//
// A resumed run is observed part by part: the time from a part's planned end (its first `stop`
// or `finished` event: Ctrl-C, SIGTERM, the budget spent) to the next part's `resume` is outside
// the observed time, and the resumed part's own start-up is judged as the run's first one is. A
// part that was killed (no such event) is not cut: its outage up to the resume stays observed,
// and the learners' samples decide it (learners stepping through a syncer kill are up); nor is
// one inside which a learner node sampled its steps (the syncer alone was stopped, the learners
// ran on).
//
// stepping_spans and downtime_of are pure; read_run_steps reads the files (missing files give
// no points; malformed lines are counted and skipped). Any thread.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dd::policy {

/// One point of a learner's step series: a heartbeat row (incarnation >= 0) or a learner node's
/// own sample taken while the syncer was away (incarnation < 0). `t`: Unix seconds.
struct step_point {
  double t = 0;
  long long incarnation = 0;
  long long step = 0;
};

struct time_span {
  double from = 0, to = 0;
  friend bool operator==(const time_span& a, const time_span& b) {
    return a.from == b.from && a.to == b.to;
  }
};

/// The spans in which one learner was stepping, judged from its points (any order).
std::vector<time_span> stepping_spans(std::vector<step_point> points);

/// The observed time [lo, hi] and the part of it with fewer than `needed` (K >= 1; 0 is taken
/// as 1) learners stepping, from each learner's stepping spans; `gaps` lists those intervals in
/// time order.
struct downtime_figures {
  double observed_s = 0.0;
  double down_s = 0.0;
  std::vector<time_span> gaps;
  /// 1 − down_s / observed_s (0 when nothing was observed).
  double uptime() const { return observed_s > 0 ? 1.0 - down_s / observed_s : 0.0; }
};
downtime_figures downtime_of(const std::map<long long, std::vector<time_span>>& spans, double lo,
                             double hi, std::size_t needed);

/// One part of a run, from the syncer's own events (events.jsonl): it begins at its `start` or
/// `resume` event; `stopped` is the time of its first `stop` or `finished` event after that (the
/// part ended on purpose), absent for a part that was killed.
struct run_part {
  double from = 0;
  std::optional<double> stopped;
};

/// The parts of a run from the syncer's events (kind, Unix time) in file order; kinds other
/// than start, resume, stop and finished are ignored, as is a stop or finished before any start.
std::vector<run_part> run_parts(const std::vector<std::pair<std::string, double>>& events);

/// The time between parts, outside the observed time: from each stopped part's stop to the next
/// part's start (a stop after the next start, from a damaged file, gives nothing). A killed part
/// followed by another gives nothing either: its outage is observed.
std::vector<time_span> between_parts(const std::vector<run_part>& parts);

/// The planned end of the part running at `t` when a later part follows it (the start of the
/// between_parts span that closes that part); none for the last part or a killed one. What
/// happens after it (a process started again, a rejoin) is the next part's doing.
std::optional<double> part_stopped_after(const std::vector<run_part>& parts, double t);

/// The smallest bound an advance is judged by (seconds per step): a single step of a loaded host
/// takes this long without the learner having stopped. On two cores at load 7–8, learners with
/// a pace of 0.05–0.1 s took single steps of 1.0–1.4 s a few times a run (their own step-end
/// times, no fault or event in them); with a floor of 1 s, one such step of the last learner
/// still running, or of every learner at once, was global downtime. A stall of every learner
/// longer than this (a paused or killed cluster, a host stall of several seconds) stays down.
constexpr double kMinStepBoundSeconds = 2.0;

/// A learner whose last stepping span of a stopped part ended at most this many seconds before
/// the stop (the smallest bound an advance is judged by) was stepping up to the stop: the stop
/// cut the step it was taking.
constexpr double kStopGraceSeconds = kMinStepBoundSeconds;

/// What a run directory says about its learners' steps.
struct run_steps {
  std::map<long long, std::vector<step_point>> points;  ///< per learner: rows and samples
  std::size_t rows = 0;                                 ///< learner_loss.csv rows read
  std::size_t bad_rows = 0;     ///< learner_loss.csv rows that did not parse
  bool have_csv = false;        ///< learner_loss.csv exists
  double lo = 0.0, hi = 0.0;    ///< first and last row time (when rows > 0)
  std::vector<run_part> parts;  ///< from events.jsonl (empty without it)
};
run_steps read_run_steps(const std::string& run_dir);

/// A learner whose first step came within this many seconds of the run's first row is one the
/// run started with: the start-up lasts until each of them has made its first step. A learner
/// that joined later does not extend it.
constexpr double kStartSeconds = 60.0;

/// When training began: the later of the earliest start of any learner's stepping spans and the
/// first point of the last learner the run started with (its first point within kStartSeconds
/// of `lo`, the first row), not before `lo`; `lo` when no learner has a stepping span.
double training_began(const std::map<long long, std::vector<step_point>>& points,
                      const std::map<long long, std::vector<time_span>>& spans, double lo);

/// read_run_steps + stepping_spans + downtime_of with K = `needed` over [training_began, last
/// row], part by part: each span of between_parts(steps.parts) that ends inside [first row, last
/// row] and holds no learner node's sample splits the rows and samples at its end (the
/// resume); the part before it is observed up
/// to its stop (kStopGraceSeconds), the part after it from its own training_began (with the
/// resume as `lo`). `figures` sums the parts (`gaps` in time order); `known` is false when the
/// run has fewer than two rows (nothing to judge).
struct run_uptime_figures {
  bool known = false;
  double began = 0.0;  ///< training_began of the first part (Unix seconds)
  downtime_figures figures;
  std::vector<time_span> between;  ///< the spans between parts left out of the observed time
};
run_uptime_figures run_uptime(const run_steps& steps, std::size_t needed);

}  // namespace dd::policy
