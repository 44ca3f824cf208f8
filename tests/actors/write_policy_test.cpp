// tests/actors/write_policy_test.cpp — the node's write-failure policy (actors/services/
// write_policy.hpp) as a table: given the policy, how long writes have kept failing and the
// limit (checkpoint.max_failing_seconds), the verdict (go on, retry degraded, end the run); and
// the run log's answer to a writer reporting a failed write under each policy.
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "actors/services/run_log.hpp"
#include "actors/services/write_policy.hpp"

namespace dd::actors {
namespace {

using verdicts = std::vector<std::pair<double, write_verdict>>;  // (failing_s, verdict)

/// A policy and what writes failing for so many seconds mean under it.
struct policy_case {
  const char* name;
  write_policy policy;
  verdicts want;
};

TEST(write_policy, what_writes_failing_for_so_long_mean_for_the_run) {
  constexpr auto go_on = write_verdict::go_on;
  constexpr auto retry = write_verdict::retry_degraded;
  constexpr auto end = write_verdict::end_the_run;
  const std::vector<policy_case> cases = {
      // Nothing failing; a moment; within the limit; exactly the limit; past it.
      {"cluster node, limit 30 s",
       write_policy::retry_and_degrade(30),
       {{0.0, go_on}, {0.5, retry}, {29.0, retry}, {30.0, retry}, {31.0, end}}},
      {"cluster node, limit 0", write_policy::retry_and_degrade(0), {{0.0, go_on}, {0.1, end}}},
      {"dd-node run", write_policy::end_the_run(), {{0.0, go_on}, {0.1, end}}},
      {"the default is dd-node run's", write_policy(), {{0.0, go_on}, {5.0, end}}},
  };
  for (const auto& c : cases)
    for (const auto& [failing_s, want] : c.want)
      EXPECT_EQ(to_string(c.policy.on_failing(failing_s)), std::string(to_string(want)))
          << c.name << ", failing for " << failing_s << " s";
}

TEST(write_policy, a_failed_write_is_retried_on_a_cluster_node_and_ends_dd_node_run) {
  EXPECT_EQ(write_policy::retry_and_degrade(30).on_failed_write(), write_verdict::retry_degraded);
  EXPECT_TRUE(write_policy::retry_and_degrade(30).retries());
  EXPECT_EQ(write_policy::retry_and_degrade(30).max_failing_s(), 30.0);
  EXPECT_EQ(write_policy::end_the_run().on_failed_write(), write_verdict::end_the_run);
  EXPECT_FALSE(write_policy::end_the_run().retries());
}

TEST(write_policy, the_limit_message_names_the_seconds_the_limit_and_the_files) {
  EXPECT_EQ(write_policy::retry_and_degrade(4).limit_message(5.4, "'x': No space left on device"),
            "writes kept failing for 5 s (checkpoint.max_failing_seconds = 4): 'x': No space left "
            "on device");
}

// The writer is told what to do by the node's log: under retry_and_degrade it writes again and
// the file is degraded; under end_the_run the failure is the run's write failure.
TEST(write_policy, the_run_log_answers_a_writer_with_the_nodes_verdict) {
  double now = 100.0;
  {
    run_log log("", /*keep_in_memory=*/true, [&now] { return now; });
    log.set_write_policy(write_policy::retry_and_degrade(30));
    EXPECT_EQ(log.write_trouble("ck", "ck: disk full"), write_verdict::retry_degraded);
    EXPECT_TRUE(log.write_failure().empty());
    now += 12.0;
    EXPECT_DOUBLE_EQ(log.failing_for_s(), 12.0);
    EXPECT_EQ(log.policy().on_failing(log.failing_for_s()), write_verdict::retry_degraded);
    now += 19.0;
    EXPECT_EQ(log.policy().on_failing(log.failing_for_s()), write_verdict::end_the_run);
    log.write_recovered("ck");
    EXPECT_DOUBLE_EQ(log.failing_for_s(), 0.0);
  }
  {
    run_log log("", /*keep_in_memory=*/true, [&now] { return now; });
    log.set_write_policy(write_policy::end_the_run());
    EXPECT_EQ(log.write_trouble("ck", "ck: disk full"), write_verdict::end_the_run);
    EXPECT_EQ(log.write_failure(), "ck: disk full");
    EXPECT_DOUBLE_EQ(log.failing_for_s(), 0.0);
  }
}

}  // namespace
}  // namespace dd::actors
