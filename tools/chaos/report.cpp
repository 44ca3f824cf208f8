// tools/chaos/report.cpp — see report.hpp.
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
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include <fmt/format.h>

#include "tools/chaos/common.hpp"
#include "tools/chaos/invariants.hpp"
#include "tools/chaos/msg.hpp"

namespace dd::chaos {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

/// How late an owner may learn of a membership change the monitor logged (the independent
/// quorum check, invariants.hpp): a live view crosses one link, well under the heartbeat period.
constexpr double report_view_lag_s = 2.0;

struct event {
  double time = 0;
  std::string node;  ///< "syncer" for events.jsonl, else the forwarding node's name
  json j;
  std::string kind() const { return j.value("event", ""); }
};

struct fault {
  std::string source, kind, target;
  std::vector<std::string> nodes;  ///< processes or links hit (link learner-N = node learner-N)
  std::set<int> learners;          ///< learner ids those nodes host
  bool syncer = false;             ///< the syncer process (or one of its owners) was hit
  int fragment = -1;               ///< in-process kill_owner
  double at = 0, duration = 0;
  std::string result = "ok";
};

// Reads JSON lines; a line that does not parse (e.g. cut by a kill) is counted, not fatal.
std::vector<json> read_jsonl(const fs::path& p, size_t* bad) {
  std::vector<json> out;
  std::ifstream in(p);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    try {
      auto j = json::parse(line);
      if (j.is_object()) {
        out.push_back(std::move(j));
        continue;
      }
    } catch (const json::exception&) {}
    ++*bad;
  }
  return out;
}

std::string input_note(size_t n, size_t bad, const char* what) {
  std::string s = fmt::format("read ({} {})", n, what);
  if (bad) s += fmt::format(", {} malformed line{} skipped", bad, bad == 1 ? "" : "s");
  return s;
}

std::optional<json> read_json_file(const fs::path& p) {
  std::error_code ec;
  if (!fs::exists(p, ec)) return std::nullopt;
  try {
    return json::parse(read_file(p.string()));
  } catch (const json::exception& e) {
    throw chaos_error(fmt::format("{}: not JSON: {}", p.string(), e.what()));
  }
}

int learner_of_actor(const std::string& a) {
  if (a.rfind("learner:", 0) != 0) return -1;
  try {
    return std::stoi(a.substr(8));
  } catch (const std::exception&) {
    return -1;
  }
}

std::optional<double> num(const json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_number()) return std::nullopt;
  return j[key].get<double>();
}

json opt(std::optional<double> v) { return v ? json(*v) : json(nullptr); }

json verdict(const std::string& name, const std::string& v, const std::string& detail) {
  return {{"name", name}, {"verdict", v}, {"detail", detail}};
}

struct interval {
  double from, to;
};

/// Whether a fault of `kind` can cut a link or stop a learner, i.e. explain a `failure` or a
/// `syncer_lost`: every process, network and disk fault and fail_step (the learner crashes); not
/// the other message faults, which change single pushes, broadcasts or parameter values.
bool can_drop_links(const std::string& kind) {
  if (kind == "fail_step") return true;
  return !is_msg_kind(kind) && kind != "start_live";
}

/// The span after a fault in which its targets' link drops are its own (`unexplained`).
struct explained_window {
  double from = 0, to = 0;
  bool syncer = false;          ///< a syncer fault: every node's drop
  std::set<std::string> nodes;  ///< the fault's nodes (their `syncer_lost`)
  std::set<int> learners;       ///< the fault's learners (the monitor's `failure`)
};

/// A learner's local pace around a span (downtime): the median seconds per step of its
/// kPaceSteps step advances on each side, and of its advances that ended within ±kPaceSeconds.
constexpr size_t kPaceSteps = 5;
constexpr double kPaceSeconds = 60.0;

/// The median of `v` (the mean of the two middle values for an even count); 0 when empty.
double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
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

}  // namespace

json build_report(const report_options& o) {
  const fs::path dir(o.run_dir);
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw chaos_error(fmt::format("report: '{}' is not a run directory", o.run_dir));
  json inputs = json::object();

  // ---- events: the syncer's and every learner node's forwarded file, ordered by wall time.
  std::vector<event> evs;
  bool have_syncer_events = false;
  {
    size_t bad = 0;
    const auto p = dir / "events.jsonl";
    if (fs::exists(p, ec)) {
      auto lines = read_jsonl(p, &bad);
      have_syncer_events = true;
      inputs["events.jsonl"] = input_note(lines.size(), bad, "events");
      for (auto& j : lines) evs.push_back({j.value("time", 0.0), "syncer", std::move(j)});
    } else {
      inputs["events.jsonl"] = "missing";
    }
    const auto nodes_dir = dir / "nodes";
    if (fs::is_directory(nodes_dir, ec)) {
      std::vector<fs::path> files;
      for (const auto& f : fs::directory_iterator(nodes_dir, ec)) {
        const std::string name = f.path().filename().string();
        const std::string suffix = ".events.jsonl";
        if (name.size() > suffix.size() &&
            name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
          files.push_back(f.path());
      }
      std::sort(files.begin(), files.end());
      for (const auto& f : files) {
        size_t fbad = 0;
        std::string node = f.filename().string();
        node = node.substr(0, node.size() - std::string(".events.jsonl").size());
        auto lines = read_jsonl(f, &fbad);
        inputs["nodes/" + f.filename().string()] = input_note(lines.size(), fbad, "events");
        for (auto& j : lines) evs.push_back({j.value("time", 0.0), node, std::move(j)});
      }
    }
  }
  std::stable_sort(evs.begin(), evs.end(),
                   [](const event& a, const event& b) { return a.time < b.time; });
  const double run_start = evs.empty() ? 0.0 : evs.front().time;

  // ---- which learners each node process hosts: nodes.json, else node_join / node_start events.
  std::map<std::string, std::set<int>> hosted;
  if (auto nf = read_json_file(dir / "nodes.json")) {
    inputs["nodes.json"] = "read";
    for (const auto& n : nf->value("nodes", json::array())) {
      const std::string name = n.value("name", "");
      for (const auto& a : n.value("actors", json::array()))
        if (a.is_string() && learner_of_actor(a.get<std::string>()) >= 0)
          hosted[name].insert(learner_of_actor(a.get<std::string>()));
    }
  } else {
    inputs["nodes.json"] = "missing";
  }
  for (const auto& e : evs)
    if ((e.kind() == "node_join" || e.kind() == "node_start") && e.j.contains("learners") &&
        e.j["learners"].is_array()) {
      const std::string name = e.j.value("node", e.node);
      for (const auto& id : e.j["learners"])
        if (id.is_number_integer()) hosted[name].insert(id.get<int>());
    }

  // ---- faults: the tape, plus faults the runtime injected itself ("fault" events).
  std::vector<fault> faults;
  const fs::path tape = o.tape.empty() ? dir / "chaos.jsonl" : fs::path(o.tape);
  if (fs::exists(tape, ec)) {
    size_t bad = 0;
    auto lines = read_jsonl(tape, &bad);
    inputs["chaos.jsonl"] = input_note(lines.size(), bad, "records");
    for (const auto& r : lines) {
      const std::string kind = r.value("kind", "");
      if (kind.empty() || kind == "session" || kind == "heal") continue;
      fault f;
      f.source = r.value("source", "cli");
      f.kind = kind;
      f.target = r.value("target", "");
      f.at = r.value("t", 0.0);
      if (r.contains("duration") && r["duration"].is_number()) f.duration = r["duration"];
      f.result = r.value("result", "ok");
      for (const auto& n : r.value("targets", json::array()))
        if (n.is_string()) f.nodes.push_back(n.get<std::string>());
      // A fault refused on some of its targets acted only on the others: judged over those
      // ("partial"); one refused or failed everywhere was never injected (no times).
      if (f.result == "refused") {
        std::vector<std::string> applied;
        for (const auto& h : r.value("hits", json::array()))
          if (h.value("result", "") == "ok") {
            for (const char* key : {"target", "node", "link"})
              if (h.contains(key) && h[key].is_string()) {
                applied.push_back(h[key].get<std::string>());
                break;
              }
          }
        if (!applied.empty()) {
          f.result = "partial";
          f.nodes = applied;
        }
      }
      for (const auto& n : f.nodes) {
        if (n == "syncer") f.syncer = true;
        if (hosted.count(n)) f.learners.insert(hosted[n].begin(), hosted[n].end());
      }
      // A damaged owner checkpoint (disk corrupt/truncate owner:N) is judged on that fragment:
      // noticed when an owner reads the file, repaired when the owner serves again.
      if ((kind == "disk_corrupt" || kind == "disk_truncate") && f.target.rfind("owner:", 0) == 0 &&
          f.target.find(',') == std::string::npos) {
        try {
          f.fragment = std::stoi(f.target.substr(6));
          f.syncer = false;
        } catch (const std::exception&) {
          f.fragment = -1;
        }
      }
      faults.push_back(f);
    }
  } else {
    inputs["chaos.jsonl"] = "missing";
  }
  for (const auto& e : evs) {
    if (e.kind() != "fault" || e.node != "syncer") continue;
    // A `fault` event with a `source` is one hit of a live message fault (a broadcast dropped,
    // delayed, ...; one event per message), not a fault: the fault itself is the tape's record
    // (source "endpoint") or the schedule's own `fault` event with its `target`.
    if (e.j.contains("source")) continue;
    fault f;
    f.source = "in-process";
    f.kind = e.j.value("fault", "");
    const int target = e.j.value("target", -1);
    f.at = e.time;
    if (f.kind == "kill_owner") {
      f.fragment = target;
      f.target = fmt::format("owner:{}", target);
    } else {
      f.learners.insert(target);
      f.target = fmt::format("learner:{}", target);
    }
    faults.push_back(f);
  }
  std::stable_sort(faults.begin(), faults.end(),
                   [](const fault& a, const fault& b) { return a.at < b.at; });

  auto first = [&](double from, const std::function<bool(const event&)>& pred) {
    std::optional<double> out;
    for (const auto& e : evs)
      if (e.time >= from && pred(e)) {
        out = e.time;
        break;
      }
    return out;
  };
  auto learner_in = [](const json& j, const std::set<int>& ids, const char* key = "learner") {
    return j.contains(key) && j[key].is_number_integer() && ids.count(j[key].get<int>()) > 0;
  };
  auto merge_has = [](const event& e, const std::set<int>& ids) {
    for (const auto& c : e.j.value("contributors", json::array()))
      if (c.contains("learner") && c["learner"].is_number_integer() &&
          ids.count(c["learner"].get<int>()))
        return true;
    return false;
  };

  auto injected = [](const fault& f) { return f.result == "ok" || f.result == "partial"; };
  // ---- per fault: injected, noticed, excluded, restarted, rejoined, first merged contribution.
  json fault_rows = json::array();
  std::vector<std::string> unrecovered;
  std::vector<explained_window> explained;
  size_t judged_faults = 0;
  // One row of the per-fault table: what the tape says, then each detection time (absolute and
  // after the injection; null when not seen). A fault that was not injected has `attempted_at`
  // and a null `injected_at`, and no detection times.
  using when = std::optional<double>;
  auto fault_row = [&](const fault& f, bool was_injected, when noticed, when excluded,
                       when restarted, when rejoined, when merged) {
    auto after = [&](const when& t) { return t ? json(*t - f.at) : json(nullptr); };
    json learners = json::array();
    for (int id : f.learners) learners.push_back(id);
    json row = {{"source", f.source},
                {"kind", f.kind},
                {"target", f.target},
                {"nodes", f.nodes},
                {"learners", learners},
                {"result", f.result},
                {"injected_at", was_injected ? json(f.at) : json(nullptr)},
                {"offset_s", f.at - run_start},
                {"duration_s", f.duration > 0 ? json(f.duration) : json(nullptr)},
                {"noticed_at", opt(noticed)},
                {"excluded_at", opt(excluded)},
                {"restarted_at", opt(restarted)},
                {"rejoined_at", opt(rejoined)},
                {"first_merge_at", opt(merged)},
                {"noticed_after_s", after(noticed)},
                {"excluded_after_s", after(excluded)},
                {"restarted_after_s", after(restarted)},
                {"rejoined_after_s", after(rejoined)},
                {"first_merge_after_s", after(merged)}};
    if (!was_injected) row["attempted_at"] = f.at;
    return row;
  };
  for (size_t fi = 0; fi < faults.size(); ++fi) {
    const fault& f = faults[fi];
    if (!injected(f)) {
      // Refused or failed: nothing was injected, so nothing can have been noticed after it.
      fault_rows.push_back(fault_row(f, false, {}, {}, {}, {}, {}));
      continue;
    }
    std::optional<double> noticed, excluded, restarted, rejoined, merged;
    const double end = f.at + f.duration;
    std::set<std::string> nodes(f.nodes.begin(), f.nodes.end());
    // Detection belongs to this fault only until the next fault on any of the same learners.
    double next_at = 1e300;
    for (size_t k = fi + 1; k < faults.size() && next_at > 1e299; ++k)
      for (int id : injected(faults[k]) ? faults[k].learners : std::set<int>{})
        if (f.learners.count(id)) next_at = faults[k].at;
    auto before_next = [&](std::optional<double> t) {
      return t && *t < next_at ? t : std::nullopt;
    };
    // A syncer fault injected after this one owns what its outage causes on these learners
    // (their nodes' syncer_lost, the rejoin after it) unless this fault was noticed before it.
    double syncer_cut = 1e300;
    for (size_t k = fi + 1; k < faults.size(); ++k)
      if (faults[k].syncer && injected(faults[k]) && faults[k].at > f.at) {
        syncer_cut = faults[k].at;
        break;
      }
    // A message fault (corrupt_push, ...) cannot drop a link or stop a learner: a drop while it
    // is armed is not its own (it is "unexplained" unless another fault explains it).
    const bool drops = can_drop_links(f.kind);
    if (!f.learners.empty()) {
      const auto failure = before_next(first(f.at, [&](const event& e) {
        return drops && e.node == "syncer" && e.kind() == "failure" && learner_in(e.j, f.learners);
      }));
      auto before_cut = [&](std::optional<double> t) {
        return t && *t < syncer_cut ? t : std::nullopt;
      };
      // A syncer_lost after a syncer fault is the syncer's outage, not this fault.
      const auto lost = before_cut(before_next(first(f.at, [&](const event& e) {
        return drops && nodes.count(e.node) && e.kind() == "syncer_lost";
      })));
      noticed = failure;
      if (lost && (!noticed || *lost < *noticed)) noticed = lost;
      excluded = failure;
      restarted = first(f.at, [&](const event& e) {
        if (!drops) return false;
        return (nodes.count(e.node) && e.kind() == "node_start") ||
               (e.kind() == "respawn" && e.j.value("kind", "") == "learner" &&
                learner_in(e.j, f.learners, "id"));
      });
      restarted = before_next(restarted);
      if (!before_cut(noticed)) {
        noticed = excluded = std::nullopt;
        restarted = before_cut(restarted);
      }
      // Only a learner that was dropped (or restarted) rejoins.
      if (noticed || restarted)
        rejoined = first(f.at, [&](const event& e) {
          return e.node == "syncer" && (e.kind() == "rejoin" || e.kind() == "join") &&
                 learner_in(e.j, f.learners);
        });
      const double from = rejoined ? std::max(*rejoined, f.at) : end;
      merged = first(from, [&](const event& e) {
        return e.node == "syncer" && e.kind() == "merge" && merge_has(e, f.learners);
      });
      if (f.result == "ok" || f.result == "partial") {
        ++judged_faults;
        for (int id : f.learners) {
          const auto back = first(from, [&](const event& e) {
            return e.node == "syncer" && e.kind() == "merge" && merge_has(e, {id});
          });
          if (!back)
            unrecovered.push_back(fmt::format("learner:{} after {} {} at +{:.1f}s", id, f.kind,
                                              f.target, f.at - run_start));
        }
      }
    } else if (f.syncer) {
      noticed = first(f.at, [&](const event& e) { return e.kind() == "syncer_lost"; });
      restarted = first(f.at, [&](const event& e) {
        return e.node == "syncer" && (e.kind() == "resume" || e.kind() == "start");
      });
      rejoined = first(restarted.value_or(f.at),
                       [&](const event& e) { return e.kind() == "syncer_back"; });
      merged = first(std::max(end, restarted.value_or(f.at)),
                     [&](const event& e) { return e.node == "syncer" && e.kind() == "merge"; });
    } else if (f.fragment >= 0) {
      // A damaged checkpoint: noticed at the owner's read (`failure` checkpoint_unreadable of
      // the fragment, after a syncer restart or an owner respawn); "restarted" is the owner
      // serving again (rebuilt from a learner's copy, or started over). One the owner's next
      // checkpoint replaced before any read was never noticed, and has no times.
      const bool disk = f.kind == "disk_corrupt" || f.kind == "disk_truncate";
      if (disk)
        noticed = first(f.at, [&](const event& e) {
          return e.node == "syncer" && e.kind() == "failure" &&
                 e.j.value("what", "") == "checkpoint_unreadable" &&
                 e.j.value("fragment", -1) == f.fragment;
        });
      if (!disk || noticed)
        restarted = first(noticed.value_or(f.at), [&](const event& e) {
          return e.node == "syncer" &&
                 (e.kind() == "owner_restored" || e.kind() == "owner_start" ||
                  e.kind() == "fragment_rebuilt") &&
                 e.j.value("fragment", -1) == f.fragment;
        });
      merged = first(restarted.value_or(f.at), [&](const event& e) {
        return e.node == "syncer" && e.kind() == "merge" && e.j.value("fragment", -1) == f.fragment;
      });
    }
    if (drops) {
      explained_window w;
      w.from = f.at;
      w.to = end;
      for (const auto& t : {noticed, restarted, rejoined})
        if (t) w.to = std::max(w.to, *t);
      w.syncer = f.syncer;
      w.nodes = nodes;
      w.learners = f.learners;
      explained.push_back(std::move(w));
    }
    fault_rows.push_back(fault_row(f, true, noticed, excluded, restarted, rejoined, merged));
  }

  // ---- link drops no fault explains: the monitor's `failure` of a learner, a node's
  // `syncer_lost`, outside every window [injection, max(end, noticed, restarted, rejoined)] of a
  // fault that can drop links and hits that learner or node (a syncer fault: every node).
  json unexplained = json::array();
  for (const auto& e : evs) {
    const std::string k = e.kind();
    // The monitor's `failure` names a learner and no `what` (other failures: a record, a
    // checkpoint, a cursor that could not be written or read).
    const bool failure = k == "failure" && e.node == "syncer" && e.j.contains("learner") &&
                         e.j["learner"].is_number_integer() && !e.j.contains("what");
    if (!failure && k != "syncer_lost") continue;
    const int learner = failure ? e.j.value("learner", -1) : -1;
    bool ok = false;
    for (const auto& w : explained)
      if (e.time >= w.from && e.time <= w.to &&
          (w.syncer || (failure ? w.learners.count(learner) > 0 : w.nodes.count(e.node) > 0))) {
        ok = true;
        break;
      }
    if (ok) continue;
    json u = {{"at", e.time}, {"offset_s", e.time - run_start}, {"event", k}, {"node", e.node}};
    if (failure) u["learner"] = learner;
    if (e.j.contains("reason")) u["reason"] = e.j["reason"];
    unexplained.push_back(std::move(u));
  }

  // ---- merges: quorum, duplicates, versions, non-finite values, pauses.
  const auto experiment = read_json_file(dir / "experiment.json");
  inputs["experiment.json"] = experiment ? "read" : "missing";
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
      if (e.j.value("accepted", false))
        accepted[{e.j.value("fragment", -1), e.j.value("learner", -1),
                  e.j.value("transfer_id", uint64_t{0})}]
            .push_back(e.time);
    } else if (k == "owner_start" || k == "owner_restored") {
      const int frag = e.j.value("fragment", -1);
      const uint64_t v = e.j.value("version", uint64_t{0});
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

  const size_t merges = checker.merges(), below_quorum = checker.merges_below_quorum();
  const size_t repeated = checker.version_repeated().size(), twice = checker.merged_twice().size();
  const size_t contributions = checker.contributions(), with_transfer = checker.with_transfer();
  std::vector<std::string> below_detail = checker.below_own_quorum();
  below_detail.insert(below_detail.end(), checker.below_quorum().begin(),
                      checker.below_quorum().end());
  const auto& twice_detail = checker.merged_twice();
  const auto& repeated_detail = checker.version_repeated();

  // ---- global downtime from the heartbeat rows.
  std::optional<double> downtime;
  json downtime_gaps = json::array();
  {
    const auto p = dir / "learner_loss.csv";
    std::ifstream in(p);
    if (!in) {
      inputs["learner_loss.csv"] = "missing";
    } else {
      // inc < 0: a learner node's own sample (`syncer_lost`, `outage_steps`, `syncer_back`),
      // taken while the syncer could record no rows.
      struct row {
        double t;
        long long inc, step;
      };
      std::map<long long, std::vector<row>> by_learner;
      std::map<long long, std::vector<row>> sampled;
      for (const auto& e : evs) {
        const std::string k = e.kind();
        if (k != "syncer_lost" && k != "outage_steps" && k != "syncer_back") continue;
        const json steps = e.j.value("steps", json::object());
        if (!steps.is_object()) continue;
        for (const auto& [id, step] : steps.items()) try {
            if (step.is_number())
              sampled[std::stoll(id)].push_back({e.time, -1, step.get<long long>()});
          } catch (const std::exception&) {}
      }
      std::string line;
      size_t rows = 0, bad = 0;
      std::getline(in, line);  // header
      while (std::getline(in, line)) {
        if (line.empty()) continue;
        const auto f = split(line, ',');
        try {
          if (f.size() < 4) throw std::invalid_argument(line);
          by_learner[std::stoll(f[1])].push_back(
              {std::stod(f[0]), std::stoll(f[2]), std::stoll(f[3])});
          ++rows;
        } catch (const std::exception&) {
          ++bad;
        }
      }
      inputs["learner_loss.csv"] = input_note(rows, bad, "heartbeats");
      std::vector<interval> stepping;
      double lo = 1e300, hi = -1e300;
      for (auto& [id, rs] : by_learner) {
        auto by_time = [](const row& a, const row& b) { return a.t < b.t; };
        std::sort(rs.begin(), rs.end(), by_time);
        if (!rs.empty()) {
          lo = std::min(lo, rs.front().t);
          hi = std::max(hi, rs.back().t);
        }
        // The node's samples (about 1 s apart) join the rows, in time order.
        if (auto it = sampled.find(id); it != sampled.end()) {
          rs.insert(rs.end(), it->second.begin(), it->second.end());
          std::stable_sort(rs.begin(), rs.end(), by_time);
        }
        // Advances: from the FIRST point (row or sample) that showed a step value to the point
        // where the step went past it. Points with the same step only continue the span (the
        // step is in progress throughout); a row with a lower step (a restarted learner resumed
        // from a checkpoint) starts a new span; a sample behind the rows is stale and skipped.
        struct advance {
          double from, to;
          long long steps;
        };
        std::vector<advance> adv;
        for (size_t i = 1, start = 0; i < rs.size(); ++i) {
          const long long cur = rs[start].step;
          if (rs[i].step == cur || (rs[i].step < cur && rs[i].inc < 0)) continue;
          if (rs[i].step > cur) adv.push_back({rs[start].t, rs[i].t, rs[i].step - cur});
          start = i;
        }
        // A span is stepping when it took at most `bound` seconds per step advanced, bound =
        // max(4 × pace, 1 s), pace = the larger of two medians of this learner's seconds per step
        // around it (the span itself left out): over its kPaceSteps advances before and after,
        // and over its advances that ended within ±kPaceSeconds. Local to the learner's pace, so
        // a host that slows every step down is not downtime (the step window follows the
        // slowdown), nor a short hitch amid unusually fast steps (the time window), while a
        // learner (or all) that stops for several local step times is.
        std::vector<double> per_step(adv.size());
        for (size_t j = 0; j < adv.size(); ++j)
          per_step[j] = (adv[j].to - adv[j].from) / static_cast<double>(adv[j].steps);
        for (size_t k = 0; k < adv.size(); ++k) {
          std::vector<double> around_steps, around_time;
          for (size_t j = 0; j < adv.size(); ++j) {
            if (j == k) continue;
            if (j + kPaceSteps >= k && j <= k + kPaceSteps) around_steps.push_back(per_step[j]);
            if (std::abs(adv[j].to - adv[k].to) <= kPaceSeconds) around_time.push_back(per_step[j]);
          }
          const double pace = std::max(median(around_steps), median(around_time));
          const double bound = std::max(4 * pace, 1.0);
          if (adv[k].to - adv[k].from <= bound * static_cast<double>(adv[k].steps))
            stepping.push_back({adv[k].from, adv[k].to});
        }
      }
      if (rows >= 2) {
        std::sort(stepping.begin(), stepping.end(),
                  [](const interval& a, const interval& b) { return a.from < b.from; });
        double covered_to = lo, down = 0;
        for (const auto& s : stepping) {
          if (s.from > covered_to) {
            down += s.from - covered_to;
            downtime_gaps.push_back(
                {{"from", covered_to}, {"to", s.from}, {"seconds", s.from - covered_to}});
          }
          covered_to = std::max(covered_to, s.to);
        }
        if (hi > covered_to) {
          down += hi - covered_to;
          downtime_gaps.push_back({{"from", covered_to}, {"to", hi}, {"seconds", hi - covered_to}});
        }
        downtime = down;
      }
    }
  }

  // ---- summary, experiment, baseline.
  const auto summary = read_json_file(dir / "summary.json");
  inputs["summary.json"] = summary ? "read" : "missing";
  std::optional<json> base_summary;
  if (!o.baseline_dir.empty()) {
    if (!fs::is_directory(o.baseline_dir, ec))
      throw chaos_error(fmt::format("--baseline: '{}' is not a run directory", o.baseline_dir));
    base_summary = read_json_file(fs::path(o.baseline_dir) / "summary.json");
    inputs["baseline summary.json"] = base_summary ? "read" : "missing";
  }
  std::optional<int> every_versions;
  if (experiment && experiment->contains("checkpoint") &&
      (*experiment)["checkpoint"].contains("every_versions") &&
      (*experiment)["checkpoint"]["every_versions"].is_number_integer())
    every_versions = (*experiment)["checkpoint"]["every_versions"].get<int>();
  std::optional<double> loss, base_loss;
  if (summary) loss = num(*summary, "final_val_loss");
  if (base_summary) base_loss = num(*base_summary, "final_val_loss");

  json run = {{"start", evs.empty() ? json(nullptr) : json(run_start)},
              {"events", evs.size()},
              {"faults", faults.size()},
              {"global_downtime_s", opt(downtime)},
              {"downtime_intervals", downtime_gaps},
              {"unexplained", {{"count", unexplained.size()}, {"events", unexplained}}},
              {"merges", merges},
              {"merges_below_quorum", below_quorum},
              {"versions_lost", lost_versions},
              {"versions_repeated", repeated},
              {"checkpoint_every_versions", every_versions ? json(*every_versions) : json(nullptr)},
              {"pushes", push_events},
              {"pushes_merged_twice", twice},
              {"chunks_refused", chunks_refused_push + chunks_refused_broadcast},
              {"chunks_refused_push", chunks_refused_push},
              {"chunks_refused_broadcast", chunks_refused_broadcast},
              {"corrupt_chunks_merged", corrupt_merged},
              {"contributions_without_accepted_push", unmatched},
              {"nonfinite_merges", nonfinite},
              {"nonfinite_learner_steps", learner_nonfinite},
              {"final_val_loss", opt(loss)},
              {"baseline_val_loss", opt(base_loss)},
              {"loss_vs_baseline",
               loss && base_loss && *base_loss > 0 ? json(*loss / *base_loss - 1) : json(nullptr)}};
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
  else if (!every_versions)
    inv.push_back(
        verdict("no_version_lost", "unknown",
                fmt::format("{} versions lost; judged only with checkpoint.every_versions "
                            "= 1 (experiment.json {})",
                            lost_versions, experiment ? "has none" : "is missing")));
  else if (*every_versions != 1)
    inv.push_back(verdict("no_version_lost", "unknown",
                          fmt::format("{} versions lost; checkpoint.every_versions = {}, so losing "
                                      "up to that many per restart is allowed",
                                      lost_versions, *every_versions)));
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
  if (o.baseline_dir.empty())
    inv.push_back(verdict("final_loss_vs_baseline", "unknown", "no --baseline given"));
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

std::string format_report(const json& r) {
  std::ostringstream out;
  auto secs = [](const json& v) {
    return v.is_number() ? fmt::format("{:+.1f}s", v.get<double>()) : std::string("-");
  };
  auto fig = [](const json& v, const char* fmtspec = "{:.3f}") {
    if (v.is_null()) return std::string("-");
    if (v.is_number_float()) return fmt::format(fmt::runtime(fmtspec), v.get<double>());
    return v.dump();
  };
  out << "dd-chaos report " << r.value("run_dir", "") << "\n";
  for (const auto& [file, what] : r["inputs"].items())
    out << fmt::format("  {:<28} {}\n", file, what.get<std::string>());
  const auto& faults = r["faults"];
  out << fmt::format("\nfaults ({}); times after injection\n", faults.size());
  if (!faults.empty()) {
    out << fmt::format("  {:>3} {:>8} {:<12} {:<20} {:>7} {:>8} {:>9} {:>9} {:>10} {:>9} {:>11}\n",
                       "#", "at", "kind", "target", "for", "noticed", "excluded", "restarted",
                       "rejoined", "merged", "result");
    int i = 0;
    for (const auto& f : faults)
      out << fmt::format(
          "  {:>3} {:>7.1f}s {:<12} {:<20} {:>7} {:>8} {:>9} {:>9} {:>10} {:>9} {:>11}\n", ++i,
          f["offset_s"].get<double>(), f["kind"].get<std::string>(),
          f["target"].get<std::string>().substr(0, 20),
          f["duration_s"].is_number() ? format_duration(f["duration_s"].get<double>())
                                      : std::string("-"),
          secs(f["noticed_after_s"]), secs(f["excluded_after_s"]), secs(f["restarted_after_s"]),
          secs(f["rejoined_after_s"]), secs(f["first_merge_after_s"]),
          f["result"].get<std::string>());
  }
  const auto& run = r["run"];
  out << "\nrun\n";
  out << fmt::format("  global downtime      {} s\n", fig(run["global_downtime_s"], "{:.2f}"));
  if (run.contains("unexplained")) {
    // Offsets of the unexplained link drops, one per second in which some came.
    std::string at;
    double last = -1e300;
    size_t shown = 0;
    for (const auto& u : run["unexplained"]["events"]) {
      const double t = u["offset_s"].get<double>();
      if (t - last < 1.0) continue;
      last = t;
      if (++shown > 10) {
        at += ", …";
        break;
      }
      at += fmt::format("{}+{:.1f}s", at.empty() ? " at " : ", ", t);
    }
    out << fmt::format("  unexplained drops    {} (failure/syncer_lost no fault explains){}\n",
                       fig(run["unexplained"]["count"]), at);
  }
  const auto& g = run["merge_pauses"]["global"];
  out << fmt::format("  merges               {} (longest pause {} s", fig(run["merges"]),
                     fig(g["longest_s"], "{:.2f}"));
  for (const auto& [frag, p] : run["merge_pauses"]["fragments"].items())
    out << fmt::format("; fragment {} {} s", frag, fig(p["longest_s"], "{:.2f}"));
  out << ")\n";
  out << fmt::format("  below quorum         {}\n", fig(run["merges_below_quorum"]));
  out << fmt::format("  versions lost        {} (checkpoint.every_versions {})\n",
                     fig(run["versions_lost"]), fig(run["checkpoint_every_versions"]));
  out << fmt::format("  pushes merged twice  {} (of {} push events)\n",
                     fig(run["pushes_merged_twice"]), fig(run["pushes"]));
  out << fmt::format("  chunks refused       {} (merged {})\n", fig(run["chunks_refused"]),
                     fig(run["corrupt_chunks_merged"]));
  out << fmt::format("  non-finite           {} merges, {} learner steps discarded\n",
                     fig(run["nonfinite_merges"]), fig(run["nonfinite_learner_steps"]));
  out << fmt::format("  final val loss       {} (baseline {}, {})\n",
                     fig(run["final_val_loss"], "{:.4f}"), fig(run["baseline_val_loss"], "{:.4f}"),
                     run["loss_vs_baseline"].is_number()
                         ? fmt::format("{:+.2f}%", run["loss_vs_baseline"].get<double>() * 100)
                         : std::string("-"));
  out << fmt::format("  goodput              {} (effective {}), uptime {}\n", fig(run["goodput"]),
                     fig(run["effective_goodput"]), fig(run["uptime"]));
  out << "\ninvariants\n";
  for (const auto& i : r["invariants"])
    out << fmt::format("  {:<8} {:<32} {}\n", i["verdict"].get<std::string>(),
                       i["name"].get<std::string>(), i["detail"].get<std::string>());
  out << fmt::format("\nverdict: {}\n", r.value("verdict", "unknown"));
  return out.str();
}

int report_exit_status(const json& r) {
  for (const auto& i : r.value("invariants", json::array()))
    if (i.value("verdict", "") == "invalid") return 1;
  return 0;
}

}  // namespace dd::chaos
