// tests/apps/slurm_script_test.cpp — the sbatch file of `dd-node launch --slurm --dry-run`
// (apps/dd_node/slurm_script.hpp) as text: learner ids dealt, shell quoting, the pieces the job
// depends on, and `bash -n` on the whole. slurm_cluster_test runs it under a real Slurm.
#include "apps/dd_node/slurm_script.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

namespace {

using dd::app::deal_learner_ids;
using dd::app::shell_quote;
using dd::app::slurm_script;
using dd::app::slurm_script_options;

TEST(SlurmScript, LearnerIdsAreDealtRoundRobinAsLaunchDealsThem) {
  struct row {
    int learners, processes;
    std::vector<std::vector<int>> want;
  };
  const std::vector<row> rows = {
      {4, 4, {{0}, {1}, {2}, {3}}},
      {5, 2, {{0, 2, 4}, {1, 3}}},
      {3, 1, {{0, 1, 2}}},
      {2, 0, {}},
  };
  for (const auto& r : rows)
    EXPECT_EQ(deal_learner_ids(r.learners, r.processes), r.want)
        << r.learners << " learners, " << r.processes << " processes";
}

TEST(SlurmScript, ShellQuoteLeavesPlainWordsAndQuotesTheRest) {
  const std::pair<const char*, const char*> cases[] = {
      {"/opt/dd/bin/dd-node", "/opt/dd/bin/dd-node"},
      {"learners.count=4", "learners.count=4"},
      {"a b", "'a b'"},
      {"it's", "'it'\\''s'"},
      {"$HOME", "'$HOME'"},
      {"", "''"},
  };
  for (const auto& [word, quoted] : cases) EXPECT_EQ(shell_quote(word), quoted) << word;
}

slurm_script_options options() {
  slurm_script_options o;
  o.dd_node = "/opt/dd/bin/dd-node";
  o.experiment = "/shared/exp/it's here.lua";
  o.experiment_name = "tiny";
  o.run_dir = "/shared/runs/a b";
  o.experiment_flags = {"--set", "budget={ steps = 10 }"};
  o.node_flags = {"--heartbeat", "0.2"};
  o.learner_ids = deal_learner_ids(5, 2);
  return o;
}

TEST(SlurmScript, HoldsTheJobsPieces) {
  auto o = options();
  const std::string s = slurm_script(o);
  for (const char* want :
       {"#!/bin/bash\n", "#SBATCH --job-name=dd-tiny\n", "#SBATCH --ntasks=3\n",
        "#SBATCH --signal=B:TERM@120\n", "#SBATCH --requeue\n", "#SBATCH --open-mode=append\n",
        "DD_NODE=/opt/dd/bin/dd-node\n", "EXPERIMENT='/shared/exp/it'\\''s here.lua'\n",
        "RUN_DIR='/shared/runs/a b'\n", "EXPERIMENT_FLAGS=(--set 'budget={ steps = 10 }')\n",
        "NODE_FLAGS=(--heartbeat 0.2)\n", "LEARNER_IDS=(0,2,4 1,3)", "PORT=$((20000 + SLURM_JOB_ID",
        "srun --overlap --nodes=1 --ntasks=1", "scontrol requeue", "--resume"})
    EXPECT_NE(s.find(want), std::string::npos) << "missing: " << want << "\n" << s;
  o.port = 29999;
  EXPECT_NE(slurm_script(o).find("PORT=29999\n"), std::string::npos);
}

// srun answers SIGTERM by killing its step (no graceful stop, exit 137): the script signals a
// step's tasks with scancel --signal, never the srun process.
// The run's join token always; certificates with --tls (else --insecure), one per step.
TEST(SlurmScript, PassesTheJoinTokenAndTlsToEveryStep) {
  auto o = options();
  std::string s = slurm_script(o);
  EXPECT_NE(s.find("TOKEN=\"$RUN_DIR/join_token\""), std::string::npos) << s;
  EXPECT_NE(s.find("\"${SECURITY[@]}\" --join-token-file \"$TOKEN\""), std::string::npos) << s;
  EXPECT_NE(s.find("SECURITY=(--insecure)"), std::string::npos);
  EXPECT_EQ(s.find("CERTS=("), std::string::npos);
  o.tls = true;
  s = slurm_script(o);
  EXPECT_NE(s.find("CERTS=(syncer operator learner-0=learner-0,learner-2,learner-4 "
                   "learner-1=learner-1,learner-3)"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("node_security \"learner-$k\""), std::string::npos);
  EXPECT_NE(s.find("\"$DD_NODE\" certs \"$TLS_DIR\" \"${CERTS[@]}\""), std::string::npos);
}

TEST(SlurmScript, SignalsStepsWithScancelNotSrun) {
  const std::string s = slurm_script(options());
  EXPECT_NE(s.find("scancel --signal=\"$2\""), std::string::npos) << s;
  EXPECT_EQ(s.find("kill -TERM"), std::string::npos) << s;
}

TEST(SlurmScript, BashAcceptsTheScript) {
  const auto path = std::filesystem::path(::testing::TempDir()) / "slurm_script_test.sbatch";
  auto o = options();
  for (bool tls : {false, true}) {
    o.tls = tls;
    std::ofstream(path) << slurm_script(o);
    EXPECT_EQ(std::system(("bash -n '" + path.string() + "'").c_str()), 0) << "tls " << tls;
  }
}

}  // namespace
