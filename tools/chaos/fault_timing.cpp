// tools/chaos/fault_timing.cpp — see fault_timing.hpp.
#include "tools/chaos/fault_timing.hpp"

#include <algorithm>
#include <cmath>
#include <functional>

#include <fmt/format.h>

#include "actors/policy/run_uptime.hpp"
#include "tools/chaos/msg.hpp"

namespace dd::chaos::report_detail {

using nlohmann::json;

namespace {

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

/// A learner fault that stops a learner or cuts its link for a while (pause, blackhole, ...):
/// a syncer fault injected while it holds its nodes owns their first `syncer_lost` after it, which
/// the nodes can only observe once the learner fault ends.
struct held_nodes {
  double from = 0, end = 0;
  std::set<std::string> nodes;
};

/// How long after a learner fault's end its nodes may take to observe the syncer's outage that
/// happened while they were held.
constexpr double kHeldNoticeSeconds = 10.0;

}  // namespace

fault_times time_faults(const report_inputs& in) {
  const auto& evs = in.events;
  const auto& faults = in.faults;
  const double run_start = in.run_start;
  fault_times times;
  json& fault_rows = times.rows;
  std::vector<std::string>& unrecovered = times.unrecovered;
  size_t& judged_faults = times.judged;
  std::vector<explained_window> explained;
  std::vector<held_nodes> held;
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

  // The run's parts (actors/policy/run_uptime.hpp): what follows a part's planned stop (the
  // learner nodes started again, their rejoins, the syncer's resume) is the next part's doing,
  // never a fault's of the part that stopped.
  std::vector<std::pair<std::string, double>> part_events;
  for (const auto& e : evs)
    if (e.node == "syncer") part_events.emplace_back(e.kind(), e.time);
  const auto parts = policy::run_parts(part_events);

  auto injected = [](const fault& f) { return f.result == "ok" || f.result == "partial"; };
  // ---- per fault: injected, noticed, excluded, restarted, rejoined, first merged contribution.
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
    // A node may have run under another name than the nodes file's (`--node-name host-1` for
    // the file's learner-1): its events (nodes/host-1.events.jsonl) are found by the learners
    // its node_start names.
    for (const auto& e : evs)
      if (e.kind() == "node_start" && e.node != "syncer" && !nodes.count(e.node) &&
          e.j.contains("learners") && e.j["learners"].is_array())
        for (const auto& id : e.j["learners"])
          if (id.is_number_integer() && f.learners.count(id.get<int>())) {
            nodes.insert(e.node);
            break;
          }
    // Detection belongs to this fault only until the next fault on any of the same learners.
    double next_at = 1e300;
    for (size_t k = fi + 1; k < faults.size() && next_at > 1e299; ++k)
      for (int id : injected(faults[k]) ? faults[k].learners : std::set<int>{})
        if (f.learners.count(id)) next_at = faults[k].at;
    // Nor, for a learner fault, beyond the planned stop of the part it was injected in (a
    // syncer fault's own `term` is such a stop, and the resume after it is its restart).
    double stop_at = 1e300;
    if (const auto stop = policy::part_stopped_after(parts, f.at); stop && !f.learners.empty())
      stop_at = *stop;
    next_at = std::min(next_at, stop_at);
    auto before_next = [&](std::optional<double> t) {
      return t && *t < next_at ? t : std::nullopt;
    };
    auto before_stop = [&](std::optional<double> t) {
      return t && *t < stop_at ? t : std::nullopt;
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
        rejoined = before_stop(first(f.at, [&](const event& e) {
          return e.node == "syncer" && (e.kind() == "rejoin" || e.kind() == "join") &&
                 learner_in(e.j, f.learners);
        }));
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
    if (drops && !f.learners.empty() && f.duration > 0) held.push_back({f.at, end, nodes});
    if (drops && f.syncer)
      for (const auto& h : held) {
        if (!(h.from < f.at && h.end > f.at)) continue;
        // The held nodes' first syncer_lost after the kill: when the pause or blackhole ended.
        const auto lost = first(f.at, [&](const event& e) {
          return h.nodes.count(e.node) && e.kind() == "syncer_lost";
        });
        if (!lost || *lost > h.end + kHeldNoticeSeconds) continue;
        explained_window w;
        w.from = f.at;
        w.to = *lost;
        w.nodes = h.nodes;
        explained.push_back(std::move(w));
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
  // fault that can drop links and hits that learner or node (a syncer fault: every node), and
  // not the first syncer_lost of a node that a learner fault held through a syncer fault.
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
  times.unexplained = std::move(unexplained);
  return times;
}

}  // namespace dd::chaos::report_detail
