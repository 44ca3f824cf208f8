// tools/chaos/invariants.hpp — the merge invariants of a run, judged from the syncer's events
// (ALGORITHM.md): no merge below quorum, no push merged twice, versions only increase, the merge
// weights sum to 1. One implementation for `dd-chaos report` (tools/chaos/report.cpp) and the
// cluster tests (tests/support/invariants.hpp: cluster_sim, cluster_mux, cluster_loopback).
// Pure: no I/O. Any thread may use its own checker.
//
// The quorum is judged twice. Against the merge's own `needed` (what the owner says it needed),
// and independently of it: K from the experiment (sync.min_quorum) applied to the live learners
// the monitor's events name (join, rejoin; failure, leave), so an owner that computes a wrong K
// or a wrong live count cannot pass by reporting the wrong `needed` it used. An owner learns of a
// membership change a little after the monitor and counts for a round only the learners it knew
// when the round opened (owner_core::eligible_count), so the independent check takes the fewest
// learners live at any moment from `view_lag_s` before the round opened (the first accepted push
// of the fragment after its previous merge) to the merge: a lower bound of the owner's count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace dd::invariants {

/// K as the experiment states it: a count, or a fraction of the live learners.
struct quorum_rule {
  bool is_fraction = false;
  size_t count = 1;
  double fraction = 1.0;
  /// Contributions a merge needs with `live` learners live: clamp(K, 1, live) for a count,
  /// clamp(ceil(f · live), 1, live) for a fraction (actors/policy/quorum.hpp); 0 when none is
  /// live.
  size_t needed(size_t live) const;
  /// From experiment.json's sync.min_quorum (a number, or {"fraction": f}); nullopt when it is
  /// neither.
  static std::optional<quorum_rule> from_json(const nlohmann::json& min_quorum);
  std::string describe() const;
};

struct merge_options {
  /// The experiment's K; without it the independent quorum check is not made.
  std::optional<quorum_rule> quorum;
  /// How late an owner may learn of a membership change the monitor logged, seconds.
  double view_lag_s = 0.0;
  /// |Σ weights − 1| above this is a finding.
  double weight_tolerance = 1e-9;
};

/// Reads a syncer's events in their order and collects what breaks an invariant, one line each.
class merge_checker {
 public:
  explicit merge_checker(merge_options options = {});

  /// One event of the syncer ("event" names it) at `t` seconds on whatever clock the caller
  /// orders them by (the log's "t", or "time"). Events other than merges, pushes, owner
  /// (re)starts, the run's start/resume and the monitor's membership events are ignored.
  void observe(const nlohmann::json& ev, double t);

  size_t merges() const { return merges_; }
  /// Merged contributors, and those of them naming a transfer_id (the duplicate check needs it).
  size_t contributions() const { return contributions_; }
  size_t with_transfer() const { return with_transfer_; }
  /// Merges with fewer contributors than K of the live learners (independent of `needed`).
  const std::vector<std::string>& below_quorum() const { return below_quorum_; }
  /// Merges that fail either quorum check (each merge counted once).
  size_t merges_below_quorum() const { return merges_below_quorum_; }
  /// Merges with fewer contributors than their own `needed`.
  const std::vector<std::string>& below_own_quorum() const { return below_own_quorum_; }
  /// (fragment, learner, incarnation, transfer_id) in two merges.
  const std::vector<std::string>& merged_twice() const { return merged_twice_; }
  /// A version not above the highest of the owner's current life (its start or restore).
  const std::vector<std::string>& version_repeated() const { return version_repeated_; }
  /// A version not above the fragment's last merged version, whatever restarts came between.
  const std::vector<std::string>& version_backwards() const { return version_backwards_; }
  /// Merges whose contributors' weights do not sum to 1.
  const std::vector<std::string>& weights_off() const { return weights_off_; }
  /// Merges each (learner, incarnation) contributed to.
  const std::map<std::pair<int, uint64_t>, int>& contributions_by_incarnation() const {
    return by_incarnation_;
  }
  /// Fragments merged at least once, with their last version.
  const std::map<int, uint64_t>& last_versions() const { return last_version_; }
  /// Learners live now per the monitor's events (id → incarnation).
  const std::map<int, uint64_t>& live() const { return live_; }

 private:
  void set_live(double t);
  size_t fewest_live(double from, double to) const;
  void on_merge(const nlohmann::json& ev, double t);

  merge_options opts_;
  size_t merges_ = 0, contributions_ = 0, with_transfer_ = 0, merges_below_quorum_ = 0;
  std::vector<std::string> below_quorum_, below_own_quorum_, merged_twice_, version_repeated_,
      version_backwards_, weights_off_;
  std::set<std::tuple<int, int, uint64_t, uint64_t>> merged_;
  std::map<std::pair<int, uint64_t>, int> by_incarnation_;
  std::map<int, uint64_t> last_version_, life_max_;
  std::map<int, uint64_t> live_;
  /// (time, live learners from then on), one entry per change, in order.
  std::vector<std::pair<double, size_t>> live_history_;
  /// Per fragment: when its current round opened (first accepted push since its last merge).
  std::map<int, double> round_open_, last_merge_;
};

}  // namespace dd::invariants
