// actors/policy/run_uptime.cpp — see run_uptime.hpp.
#include "actors/policy/run_uptime.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

namespace dd::policy {

namespace {

/// A learner's local pace around an advance: the median seconds per step of its kPaceSteps
/// advances on each side, and of its advances that ended within ±kPaceSeconds.
constexpr std::size_t kPaceSteps = 5;
constexpr double kPaceSeconds = 60.0;

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/// A multiset of some of `values` (by index) that answers its median as `median` above would:
/// a Fenwick tree counting the present indices by their rank in sorted order (ties ranked by
/// index), so the i-th smallest present value is found by one descent.
class order_statistics {
 public:
  explicit order_statistics(const std::vector<double>& values)
      : sorted_(values.size()), rank_(values.size()), tree_(values.size() + 1, 0) {
    std::vector<std::size_t> idx(values.size());
    for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    std::stable_sort(idx.begin(), idx.end(),
                     [&](std::size_t a, std::size_t b) { return values[a] < values[b]; });
    for (std::size_t r = 0; r < idx.size(); ++r) {
      sorted_[r] = values[idx[r]];
      rank_[idx[r]] = r;
    }
    while (top_ * 2 <= idx.size()) top_ *= 2;
  }
  void insert(std::size_t i) { add(rank_[i], +1); }
  void erase(std::size_t i) { add(rank_[i], -1); }
  double median() const {
    if (size_ == 0) return 0.0;
    return size_ % 2 ? nth(size_ / 2) : (nth(size_ / 2 - 1) + nth(size_ / 2)) / 2;
  }

 private:
  void add(std::size_t rank, int d) {
    size_ = d > 0 ? size_ + 1 : size_ - 1;
    for (std::size_t p = rank + 1; p < tree_.size(); p += p & (~p + 1))
      tree_[p] = static_cast<std::size_t>(static_cast<long long>(tree_[p]) + d);
  }
  /// The value of the i-th smallest present index (0-based, i < size_).
  double nth(std::size_t i) const {
    std::size_t pos = 0, left = i + 1;
    for (std::size_t step = top_; step > 0; step /= 2)
      if (pos + step < tree_.size() && tree_[pos + step] < left) {
        pos += step;
        left -= tree_[pos];
      }
    return sorted_[pos];  // rank `pos` (tree position pos + 1)
  }
  std::vector<double> sorted_;
  std::vector<std::size_t> rank_;
  std::vector<std::size_t> tree_;
  std::size_t top_ = 1, size_ = 0;
};

/// The node samples an event carries ({learner: step} under "steps"), at its "time".
void add_samples(const nlohmann::json& e, std::map<long long, std::vector<step_point>>& out) {
  if (!e.is_object() || !e.contains("event") || !e["event"].is_string()) return;
  const std::string k = e["event"].get<std::string>();
  if (k != "syncer_lost" && k != "outage_steps" && k != "syncer_back") return;
  if (!e.contains("steps") || !e["steps"].is_object()) return;
  const double t = e.contains("time") && e["time"].is_number() ? e["time"].get<double>() : 0.0;
  for (const auto& [id, step] : e["steps"].items()) try {
      if (step.is_number()) out[std::stoll(id)].push_back({t, -1, step.get<long long>()});
    } catch (const std::exception&) {}
}

/// The samples of a events file and, when `parts` is given (the syncer's events.jsonl), its
/// start, resume, stop and finished events (kind, time).
void read_samples(const std::filesystem::path& file,
                  std::map<long long, std::vector<step_point>>& out,
                  std::vector<std::pair<std::string, double>>* parts = nullptr) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    const bool part =
        parts != nullptr && (line.find("\"event\":\"start\"") != std::string::npos ||
                             line.find("\"event\":\"resume\"") != std::string::npos ||
                             line.find("\"event\":\"stop\"") != std::string::npos ||
                             line.find("\"event\":\"finished\"") != std::string::npos);
    // Only the three sample events and the part events matter: skip the parse of every other
    // line.
    if (!part && line.find("\"steps\"") == std::string::npos) continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) continue;
    add_samples(j, out);
    if (part && j.is_object() && j.contains("event") && j["event"].is_string() &&
        j.contains("time") && j["time"].is_number())
      parts->emplace_back(j["event"].get<std::string>(), j["time"].get<double>());
  }
}

}  // namespace

std::vector<time_span> stepping_spans(std::vector<step_point> rs) {
  auto by_time = [](const step_point& a, const step_point& b) { return a.t < b.t; };
  std::stable_sort(rs.begin(), rs.end(), by_time);
  // Advances: from the FIRST point (row or sample) that showed a step value to the point where
  // the step went past it. Points with the same step only continue the span (the step is in
  // progress throughout); a row with a lower step (a restarted learner resumed from a
  // checkpoint) starts a new span; a sample behind the rows is stale and skipped.
  struct advance {
    double from, to;
    long long steps;
  };
  std::vector<advance> adv;
  for (std::size_t i = 1, start = 0; i < rs.size(); ++i) {
    const long long cur = rs[start].step;
    if (rs[i].step == cur || (rs[i].step < cur && rs[i].incarnation < 0)) continue;
    if (rs[i].step > cur) adv.push_back({rs[start].t, rs[i].t, rs[i].step - cur});
    start = i;
  }
  // A span is stepping when it took at most `bound` seconds per step advanced, bound =
  // max(4 × pace, kMinStepBoundSeconds), pace = the larger of two medians of this learner's seconds
  // per step around it (the span itself left out): local to the learner's pace, so a host that
  // slows every step down is not downtime, nor a short hitch amid unusually fast steps, while a
  // learner that stops for several local step times is.
  //
  // The advances end in time order, so both neighbourhoods are index windows: the kPaceSteps on
  // each side (at most 2·kPaceSteps values, sorted directly) and the advances ending within
  // ±kPaceSeconds, a window whose both ends only move forward with k — its median comes from an
  // order-statistic tree over the values' ranks (O(log n) per advance, O(n log n) per learner).
  const std::size_t n = adv.size();
  std::vector<double> per_step(n);
  for (std::size_t j = 0; j < n; ++j)
    per_step[j] = (adv[j].to - adv[j].from) / static_cast<double>(adv[j].steps);
  order_statistics window(per_step);
  std::vector<time_span> out;
  std::vector<double> around_steps;
  around_steps.reserve(2 * kPaceSteps);
  std::size_t lo = 0, hi = 0;  // the time window: advances [lo, hi)
  for (std::size_t k = 0; k < n; ++k) {
    while (hi < n && std::abs(adv[hi].to - adv[k].to) <= kPaceSeconds) window.insert(hi++);
    while (lo < k && !(std::abs(adv[lo].to - adv[k].to) <= kPaceSeconds)) window.erase(lo++);
    around_steps.clear();
    for (std::size_t j = k > kPaceSteps ? k - kPaceSteps : 0; j < n && j <= k + kPaceSteps; ++j)
      if (j != k) around_steps.push_back(per_step[j]);
    window.erase(k);  // the span itself left out (always inside its own window)
    const double around_time = window.median();
    window.insert(k);
    const double pace = std::max(median(around_steps), around_time);
    const double bound = std::max(4 * pace, kMinStepBoundSeconds);
    if (adv[k].to - adv[k].from <= bound * static_cast<double>(adv[k].steps))
      out.push_back({adv[k].from, adv[k].to});
  }
  return out;
}

downtime_figures downtime_of(const std::map<long long, std::vector<time_span>>& spans, double lo,
                             double hi, std::size_t needed) {
  needed = std::max<std::size_t>(needed, 1);
  downtime_figures f;
  f.observed_s = std::max(0.0, hi - lo);
  // Each learner's spans merged first (one learner counts once), then a sweep over the edges.
  std::vector<std::pair<double, int>> edges;
  for (const auto& [id, list] : spans) {
    std::vector<time_span> s = list;
    std::sort(s.begin(), s.end(),
              [](const time_span& a, const time_span& b) { return a.from < b.from; });
    std::vector<time_span> merged;
    for (const auto& x : s) {
      if (!merged.empty() && x.from <= merged.back().to)
        merged.back().to = std::max(merged.back().to, x.to);
      else
        merged.push_back(x);
    }
    for (const auto& x : merged) {
      const double a = std::max(x.from, lo), b = std::min(x.to, hi);
      if (b <= a) continue;
      edges.push_back({a, +1});
      edges.push_back({b, -1});
    }
  }
  // At equal times a span that ends and one that starts leave no gap: starts first.
  std::sort(edges.begin(), edges.end(), [](const auto& x, const auto& y) {
    return x.first != y.first ? x.first < y.first : x.second > y.second;
  });
  std::size_t count = 0;
  double t = lo;
  auto down_until = [&](double until) {
    if (until <= t) return;
    if (count < needed) {
      f.down_s += until - t;
      if (!f.gaps.empty() && f.gaps.back().to == t)
        f.gaps.back().to = until;
      else
        f.gaps.push_back({t, until});
    }
    t = until;
  };
  for (const auto& [at, delta] : edges) {
    down_until(at);
    count = delta > 0 ? count + 1 : count - 1;
  }
  down_until(hi);
  return f;
}

run_steps read_run_steps(const std::string& run_dir) {
  namespace fs = std::filesystem;
  run_steps r;
  const fs::path dir(run_dir);
  std::error_code ec;
  std::map<long long, std::vector<step_point>> samples;
  std::vector<std::pair<std::string, double>> part_events;
  read_samples(dir / "events.jsonl", samples, &part_events);
  r.parts = run_parts(part_events);
  if (fs::is_directory(dir / "nodes", ec))
    for (const auto& f : fs::directory_iterator(dir / "nodes", ec)) {
      const std::string name = f.path().filename().string();
      const std::string suffix = ".events.jsonl";
      if (name.size() > suffix.size() &&
          name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
        read_samples(f.path(), samples);
    }
  std::ifstream in(dir / "learner_loss.csv");
  if (!in) return r;
  r.have_csv = true;
  std::string line;
  std::getline(in, line);  // header
  r.lo = 1e300;
  r.hi = -1e300;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::vector<std::string> f;
    std::stringstream ss(line);
    for (std::string x; std::getline(ss, x, ',');) f.push_back(x);
    try {
      if (f.size() < 4) throw std::invalid_argument(line);
      const double t = std::stod(f[0]);
      r.points[std::stoll(f[1])].push_back({t, std::stoll(f[2]), std::stoll(f[3])});
      r.lo = std::min(r.lo, t);
      r.hi = std::max(r.hi, t);
      ++r.rows;
    } catch (const std::exception&) {
      ++r.bad_rows;
    }
  }
  // A learner's samples join its rows (a learner with samples but no row has no observed span).
  for (auto& [id, pts] : r.points)
    if (auto it = samples.find(id); it != samples.end())
      pts.insert(pts.end(), it->second.begin(), it->second.end());
  if (r.rows == 0) r.lo = r.hi = 0.0;
  return r;
}

double training_began(const std::map<long long, std::vector<step_point>>& points,
                      const std::map<long long, std::vector<time_span>>& spans, double lo) {
  double first = std::numeric_limits<double>::infinity();
  for (const auto& [id, list] : spans)
    for (const auto& s : list) first = std::min(first, s.from);
  if (!std::isfinite(first)) return lo;
  // The start-up lasts until every learner the run started with (its first step within
  // kStartSeconds of the first row) has made its first step: until then a learner that has not
  // started yet may be the one that steps next, and the first steps of the others are still slow.
  double last_start = lo;
  for (const auto& [id, pts] : points) {
    double t = std::numeric_limits<double>::infinity();
    for (const auto& p : pts) t = std::min(t, p.t);
    if (std::isfinite(t) && t <= lo + kStartSeconds) last_start = std::max(last_start, t);
  }
  return std::max({lo, first, last_start});
}

std::vector<run_part> run_parts(const std::vector<std::pair<std::string, double>>& events) {
  std::vector<run_part> out;
  for (const auto& [kind, t] : events) {
    if (kind == "start" || kind == "resume")
      out.push_back({t, std::nullopt});
    else if ((kind == "stop" || kind == "finished") && !out.empty() && !out.back().stopped)
      out.back().stopped = t;
  }
  return out;
}

std::vector<time_span> between_parts(const std::vector<run_part>& parts) {
  std::vector<time_span> out;
  for (std::size_t i = 0; i + 1 < parts.size(); ++i)
    if (parts[i].stopped && *parts[i].stopped <= parts[i + 1].from)
      out.push_back({*parts[i].stopped, parts[i + 1].from});
  return out;
}

std::optional<double> part_stopped_after(const std::vector<run_part>& parts, double t) {
  for (std::size_t i = 0; i + 1 < parts.size(); ++i)
    if (parts[i].from <= t && t < parts[i + 1].from)
      return parts[i].stopped && *parts[i].stopped <= parts[i + 1].from ? parts[i].stopped
                                                                        : std::nullopt;
  return std::nullopt;
}

run_uptime_figures run_uptime(const run_steps& steps, std::size_t needed) {
  run_uptime_figures out;
  if (steps.rows < 2) return out;
  out.known = true;
  out.began = steps.lo;
  // The parts the rows span: each cut (a planned stop up to the next part's resume) inside
  // [first row, last row] ends one part's window at its stop and starts the next part's points
  // at its resume; the rows and samples between the stop and the resume (the learners still
  // finishing the step they were taking) belong to the part that stopped.
  // A cut inside which a learner node sampled its learners' steps (syncer_lost, outage_steps,
  // syncer_back) is a syncer outage the learners kept running through (the syncer alone stopped,
  // by a SIGTERM), not the whole run's stop: it stays observed.
  auto sampled_inside = [&](const time_span& c) {
    for (const auto& [id, pts] : steps.points)
      for (const auto& p : pts)
        if (p.incarnation < 0 && p.t > c.from && p.t < c.to) return true;
    return false;
  };
  std::vector<time_span> cuts;
  for (const auto& c : between_parts(steps.parts))
    if (c.from < steps.hi && c.to > steps.lo && !sampled_inside(c)) cuts.push_back(c);
  out.between = cuts;
  bool first = true;
  for (std::size_t i = 0; i <= cuts.size(); ++i) {
    const double from = i == 0 ? -std::numeric_limits<double>::infinity() : cuts[i - 1].to;
    const double until = i < cuts.size() ? cuts[i].to : std::numeric_limits<double>::infinity();
    const double lo = i == 0 ? steps.lo : std::max(steps.lo, cuts[i - 1].to);
    const double hi = i < cuts.size() ? std::min(cuts[i].from, steps.hi) : steps.hi;
    std::map<long long, std::vector<step_point>> points;
    for (const auto& [id, pts] : steps.points)
      for (const auto& p : pts)
        if (p.t >= from && p.t < until) points[id].push_back(p);
    if (points.empty()) continue;  // a part without a row observes nothing
    std::map<long long, std::vector<time_span>> spans;
    for (const auto& [id, pts] : points) {
      auto& s = spans[id] = stepping_spans(pts);
      // A stopped part: the step a learner was taking when the stop came is cut, not stalled.
      if (i < cuts.size() && !s.empty()) {
        auto last = std::max_element(
            s.begin(), s.end(), [](const time_span& a, const time_span& b) { return a.to < b.to; });
        if (last->to < hi && hi - last->to <= kStopGraceSeconds) last->to = hi;
      }
    }
    const double began = training_began(points, spans, lo);
    if (first) out.began = began;
    first = false;
    const auto f = downtime_of(spans, began, hi, needed);
    out.figures.observed_s += f.observed_s;
    out.figures.down_s += f.down_s;
    out.figures.gaps.insert(out.figures.gaps.end(), f.gaps.begin(), f.gaps.end());
  }
  return out;
}

}  // namespace dd::policy
