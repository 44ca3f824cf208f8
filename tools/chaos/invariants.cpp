// tools/chaos/invariants.cpp — see invariants.hpp.
#include "tools/chaos/invariants.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace dd::invariants {

using nlohmann::json;

size_t quorum_rule::needed(size_t live) const {
  if (live == 0) return 0;
  size_t k = count;
  if (is_fraction) k = static_cast<size_t>(std::ceil(fraction * static_cast<double>(live) - 1e-9));
  return std::clamp<size_t>(k, 1, live);
}

std::optional<quorum_rule> quorum_rule::from_json(const json& k) {
  quorum_rule q;
  if (k.is_number_integer() && k.get<int64_t>() >= 1) {
    q.count = k.get<size_t>();
    return q;
  }
  if (k.is_object() && k.contains("fraction") && k["fraction"].is_number()) {
    const double f = k["fraction"].get<double>();
    if (!(f > 0.0 && f <= 1.0)) return std::nullopt;
    q.is_fraction = true;
    q.fraction = f;
    return q;
  }
  return std::nullopt;
}

std::string quorum_rule::describe() const {
  return is_fraction ? fmt::format("K = {} of the live learners", fraction)
                     : fmt::format("K = {}", count);
}

merge_checker::merge_checker(merge_options options) : opts_(std::move(options)) {
  live_history_.emplace_back(-std::numeric_limits<double>::infinity(), 0);
}

void merge_checker::set_live(double t) { live_history_.emplace_back(t, live_.size()); }

size_t merge_checker::fewest_live(double from, double to) const {
  // The count in force at `from` (the last change at or before it), then every change up to `to`.
  size_t fewest = std::numeric_limits<size_t>::max();
  size_t at_from = 0;
  for (const auto& [t, n] : live_history_) {
    if (t <= from) {
      at_from = n;
      continue;
    }
    if (t > to) break;
    fewest = std::min(fewest, n);
  }
  return std::min(fewest, at_from);
}

void merge_checker::observe(const json& ev, double t) {
  const std::string kind = ev.value("event", "");
  if (kind == "start" || kind == "resume") {  // a new monitor: nobody is live yet
    live_.clear();
    set_live(t);
  } else if ((kind == "join" || kind == "rejoin") && ev.contains("learner")) {
    live_[ev.value("learner", -1)] = ev.value("incarnation", uint64_t{0});
    set_live(t);
  } else if ((kind == "leave" || (kind == "failure" && !ev.contains("what"))) &&
             ev.contains("learner")) {
    live_.erase(ev.value("learner", -1));
    set_live(t);
  } else if (kind == "owner_start" || kind == "owner_restored") {
    const int frag = ev.value("fragment", -1);
    life_max_[frag] = ev.value("version", uint64_t{0});
    round_open_.erase(frag);
  } else if (kind == "push" && ev.value("accepted", false)) {
    round_open_.emplace(ev.value("fragment", -1), t);  // only the first since the last merge
  } else if (kind == "merge") {
    on_merge(ev, t);
  }
}

void merge_checker::on_merge(const json& ev, double t) {
  ++merges_;
  const int frag = ev.value("fragment", -1);
  const uint64_t v = ev.value("version", uint64_t{0});
  const json contributors = ev.value("contributors", json::array());
  const size_t n = contributors.size();

  const size_t needed = ev.value("needed", size_t{0});
  bool below = n < needed;
  if (n < needed)
    below_own_quorum_.push_back(
        fmt::format("fragment {} version {}: {} contributors, quorum {}", frag, v, n, needed));
  if (opts_.quorum) {
    // The round opened at its first accepted push since the last merge (or, without push
    // events, at the last merge); before any, the window reaches back to the run's start.
    double opened = -std::numeric_limits<double>::infinity();
    if (auto it = round_open_.find(frag); it != round_open_.end())
      opened = it->second;
    else if (auto m = last_merge_.find(frag); m != last_merge_.end())
      opened = m->second;
    const size_t live = fewest_live(opened - opts_.view_lag_s, t);
    const size_t k = opts_.quorum->needed(live);
    below = below || n < k;
    if (n < k)
      below_quorum_.push_back(fmt::format(
          "fragment {} version {}: {} contributors; {} with {} learners live throughout its "
          "round needs {}",
          frag, v, n, opts_.quorum->describe(), live, k));
  }
  if (below) ++merges_below_quorum_;
  round_open_.erase(frag);
  last_merge_[frag] = t;

  if (life_max_.count(frag) != 0 && v <= life_max_[frag])
    version_repeated_.push_back(
        fmt::format("fragment {} version {} (already at {})", frag, v, life_max_[frag]));
  life_max_[frag] = std::max(life_max_.count(frag) ? life_max_[frag] : 0, v);
  if (last_version_.count(frag) != 0 && v <= last_version_[frag])
    version_backwards_.push_back(fmt::format("fragment {} went backwards: version {} after {}",
                                             frag, v, last_version_[frag]));
  last_version_[frag] = v;

  double sum = 0;
  for (const auto& c : contributors) {
    ++contributions_;
    sum += c.value("weight", 0.0);
    const int l = c.value("learner", -1);
    const uint64_t inc = c.value("incarnation", uint64_t{0});
    by_incarnation_[{l, inc}] += 1;
    if (!c.contains("transfer_id")) continue;
    ++with_transfer_;
    const uint64_t tr = c.value("transfer_id", uint64_t{0});
    if (!merged_.insert({frag, l, inc, tr}).second)
      merged_twice_.push_back(fmt::format(
          "fragment {} learner {} incarnation {} transfer {}: in version {} and an earlier merge",
          frag, l, inc, tr, v));
  }
  if (n > 0 && !(std::fabs(sum - 1.0) <= opts_.weight_tolerance))
    weights_off_.push_back(
        fmt::format("fragment {} version {}: weights sum to {:.12g}", frag, v, sum));
}

}  // namespace dd::invariants
