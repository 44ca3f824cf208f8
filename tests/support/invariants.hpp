// tests/support/invariants.hpp — the merge invariants of tools/chaos/invariants.hpp (the ones
// `dd-chaos report` judges) as gtest expectations over a syncer's events, for the cluster tests
// (cluster_sim, cluster_mux, cluster_loopback). Link dd_invariants.
#pragma once

#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "runtime/config/experiment.hpp"
#include "tools/chaos/invariants.hpp"

namespace dd::test {

/// K of `e` as experiment.json states it (sync.min_quorum), read as the report reads it.
inline invariants::quorum_rule quorum_of(const config::experiment& e) {
  auto q = invariants::quorum_rule::from_json(config::to_json(e)["sync"]["min_quorum"]);
  EXPECT_TRUE(q.has_value()) << config::to_json(e)["sync"].dump();
  return q.value_or(invariants::quorum_rule{});
}

/// Feeds `events` (one syncer's, in order; their "t" orders them) to a checker and expects every
/// invariant to hold: versions only increase, no push merged twice, the weights of each merge sum
/// to 1, no merge below its own `needed` (at least 1) nor below K of the learners live throughout
/// its round (recomputed from `e`'s sync.min_quorum and the monitor's membership events, see
/// invariants.hpp; `view_lag_s`: how late an owner may hear of a change). Returns the checker for
/// a test's own checks (merge count, contributions per incarnation).
inline invariants::merge_checker expect_merge_invariants(const std::vector<nlohmann::json>& events,
                                                         const config::experiment& e,
                                                         double view_lag_s = 0.0) {
  invariants::merge_options o;
  o.quorum = quorum_of(e);
  o.view_lag_s = view_lag_s;
  invariants::merge_checker c(o);
  for (const auto& ev : events) {
    c.observe(ev, ev.value("t", 0.0));
    if (ev.value("event", "") == "merge") {
      EXPECT_GE(ev.value("needed", size_t{0}), 1u) << "merge without a quorum: " << ev.dump();
    }
  }
  auto expect_none = [](const std::vector<std::string>& found, const char* what) {
    for (const auto& f : found) ADD_FAILURE() << what << ": " << f;
  };
  expect_none(c.version_backwards(), "version went backwards");
  expect_none(c.merged_twice(), "push merged twice");
  expect_none(c.weights_off(), "weights do not sum to 1");
  expect_none(c.below_own_quorum(), "merge below its own quorum (merge.needed)");
  expect_none(c.below_quorum(), "merge below quorum (K of the live learners)");
  EXPECT_EQ(c.with_transfer(), c.contributions()) << "contributors without a transfer_id";
  return c;
}

}  // namespace dd::test
