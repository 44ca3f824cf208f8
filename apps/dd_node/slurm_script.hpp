// apps/dd_node/slurm_script.hpp — the sbatch file of `dd-node launch --slurm --dry-run EXP`: one
// Slurm job that runs a whole cluster (docs/deploying.md "Slurm").
//
// The script it renders runs the syncer as a job step on the allocation's first node and one
// step per learner process, dealt round-robin over the allocation's nodes (with one node, all
// beside the syncer), every step `srun --overlap` inside a retry loop: Slurm does not restart a
// step, so the loop does — a learner step at once, the syncer after a delay and with --resume.
// Learners find the syncer at the first host name of the allocation (also written to
// <run_dir>/slurm/syncer, the rendezvous file). SIGTERM to the batch shell (`--signal` ahead of
// the time limit, `scancel --batch --signal=TERM`) stops the run gracefully and requeues the
// job when the run is not over; the requeued job resumes it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dd::app {

struct slurm_script_options {
  std::string dd_node;          ///< absolute path of the dd-node binary (same on every node)
  std::string experiment;       ///< absolute path of the experiment file
  std::string experiment_name;  ///< the job's name: dd-<name>
  std::string run_dir;          ///< absolute run directory (on a file system every node sees)
  /// --name / --set / --script-timeout pairs, given to the syncer as they came.
  std::vector<std::string> experiment_flags;
  /// Flags for every node (--heartbeat S, --connection-timeout S, --force-memory).
  std::vector<std::string> node_flags;
  /// Learner ids of each learner process (one step each).
  std::vector<std::vector<int>> learner_ids;
  uint16_t port = 0;                  ///< the syncer's port; 0 = 20000 + job id mod 20000
  double syncer_restart_delay_s = 2;  ///< before a dead syncer step is started again
  double progress_s = 5;              ///< the syncer's progress line period
  double learner_backoff_cap_s = 5;   ///< learners' --backoff-cap
  int signal_lead_s = 120;            ///< SIGTERM this long before the time limit
  /// Mutual TLS: the job makes a CA and certificates in RUN_DIR/tls once (dd-node certs:
  /// syncer, operator, learner-K naming learner process K's ids) and gives every step its own;
  /// without it the syncer and learners run with --insecure. The join token is made either way.
  bool tls = false;
};

/// The learner ids of each of `processes` learner processes for `learners` learners, dealt
/// round-robin (as `dd-node launch` deals them): process k gets k, k + P, k + 2P, ...
std::vector<std::vector<int>> deal_learner_ids(int learners, int processes);

/// `s` quoted for a POSIX shell (unchanged when it needs no quoting).
std::string shell_quote(const std::string& s);

/// The whole sbatch file.
std::string slurm_script(const slurm_script_options& o);

}  // namespace dd::app
