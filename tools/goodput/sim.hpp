// tools/goodput/sim.hpp — discrete-event goodput simulator: N chips in slices, per-chip Poisson
// failures, four training strategies (data-parallel, elastic data-parallel, DiLoCo, Decoupled
// DiLoCo).
//
// Used by the dd-goodput binary (tools/goodput/main.cpp) and by tests/sim/. Pure computation on
// one thread; one call = one seeded run; runs are independent and may run concurrently.
//
// Cost: O((failures + recoveries + pauses) · log(slices)) events, plus one event per outer round
// for DiLoCo; never chips × time. The quorum, grace-window and staleness decisions come from
// actors/policy/ (the code the runtime's fragment owners run), not from a copy.
//
// Model, parameters and calibration: docs/goodput.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dd::goodput {

/// Training strategy under test.
enum class strategy {
  data_parallel,     ///< one synchronous job, no elasticity: a failure stalls everything; restart
                     ///< from the last checkpoint once the slice is back.
  elastic_dp,        ///< one synchronous job that pauses to downscale / upscale and otherwise
                     ///< keeps training on the slices it has.
  diloco,            ///< M elastic learners, synchronous outer steps (barrier every H steps).
  decoupled_diloco,  ///< M elastic learners that never wait for each other; owners merge on
                     ///< quorum K (+ grace window).
};

/// Stable name ("data_parallel", "elastic_dp", "diloco", "decoupled_diloco").
const char* to_string(strategy s);

/// Parses a strategy name; nullopt when unknown.
std::optional<strategy> parse_strategy(const std::string& name);

/// How the recovery time of a failed slice is distributed.
enum class recovery_dist { fixed, exponential, lognormal };

/// Each distribution with its stable name, in the order --recovery-dist's help lists them.
extern const std::vector<std::pair<const char*, recovery_dist>> recovery_dist_names;
/// Stable name ("fixed", "exponential", "lognormal"), from recovery_dist_names.
const char* to_string(recovery_dist d);

/// How a pause that starts while another pause of the same job is running combines with it.
enum class pause_overlap {
  coalesce,  ///< the job is paused until max(current end, now + pause): one reconfiguration
             ///< absorbs every change that arrives while it runs.
  serial,    ///< the new pause starts when the current one ends (end += pause).
};

/// Every parameter of one simulation. Times are seconds unless the name says otherwise.
/// Defaults and their sources: docs/goodput.md, "Parameters".
struct sim_config {
  std::uint64_t chips = 1'200'000;  ///< N: allocated chips (spares not counted); rounded
                                    ///< up to whole slices (see slice_count).
  std::uint64_t slice_chips = 256;  ///< chips per slice (failure domain).
  std::uint64_t learners = 8;       ///< M (DiLoCo, Decoupled DiLoCo); ignored by DP.
  double mtbi_days = 365.0;         ///< mean time between interruptions of one chip (days).
  double days = 30.0;               ///< simulated wall time (days).
  recovery_dist recovery = recovery_dist::lognormal;
  double recovery_mean_s = 60.0;        ///< mean time until a failed slice (or its hot spare)
                                        ///< is ready to train again (s).
  double recovery_cv = 0.5;             ///< coefficient of variation (lognormal only).
  bool idle_failures = false;           ///< false: only chips under load (up slices of a
                                        ///< stepping job) are interrupted; true: every up
                                        ///< slice is, also while its job is stalled or
                                        ///< paused (failures then pile up in the stall: the
                                        ///< non-elastic restart waits for all of them).
  double restart_s = 5.0;               ///< non-elastic DP: WARM relaunch (s): the failure
                                        ///< came within restart_warm_window_s of the end of
                                        ///< the previous relaunch; the surviving hosts kept
                                        ///< their processes, compiled program and the
                                        ///< checkpoint staged in host memory.
  double restart_cold_s = 35.0;         ///< COLD relaunch (s): reschedule, start processes,
                                        ///< compile / load the program, read the checkpoint
                                        ///< from storage. Also every learner respawn of the
                                        ///< DiLoCo variants (it lost every slice). >= restart_s.
  double restart_warm_window_s = 45.0;  ///< W (s): a non-elastic failure less than W after the
                                        ///< previous relaunch ended gets a warm relaunch;
                                        ///< 0 = always cold (with restart_cold_s = restart_s:
                                        ///< the single-restart model of earlier versions).
  double checkpoint_interval_s = 0.0;   ///< non-elastic DP: training time between checkpoints
                                        ///< (s); < 0 = Young's optimum sqrt(2 δ MTBF);
                                        ///< 0 = every step, free (lose only the step).
  double checkpoint_write_s = 0.0;      ///< δ: training blocked per checkpoint write (s).
  double downscale_pause_s = 18.0;      ///< elastic: global pause to drop a failed slice (s).
  double upscale_pause_s = 14.0;        ///< elastic: global pause to add a returned slice (s).
  double upscale_batch_s = 60.0;        ///< elastic: a returned slice waits up to this long to
                                        ///< join during the next downscale (free) before a
                                        ///< dedicated upscale pause adds it; 0 = at once.
  pause_overlap overlap = pause_overlap::serial;
  double step_s = 1.0;               ///< inner (training) step time (s); a failure loses
                                     ///< the step in flight (half a step on average).
  double chip_speed_cv = 0.0;        ///< per-chip speed variation (CV of a lognormal with
                                     ///< mean 1); a synchronous group runs at its slowest
                                     ///< chip's speed. 0 = identical chips.
  std::uint64_t sync_interval = 24;  ///< H: inner steps between two pushes of a fragment
                                     ///< (Decoupled DiLoCo) / between outer steps (DiLoCo).
  double outer_sync_s = 2.0;         ///< DiLoCo: blocking outer all-reduce per round (s).
  double quorum_fraction = 0.0;      ///< Decoupled DiLoCo K as a fraction of live learners;
                                     ///< 0 = use quorum_count.
  std::uint64_t quorum_count = 1;    ///< Decoupled DiLoCo K as a count (paper default 1).
  std::uint64_t max_staleness = 4;   ///< versions (ALGORITHM.md default).
  double overlap_tau = 2.0;          ///< τ: steps of overlap (grace window input).
  double grace_gamma = 0.8;          ///< γ: grace safety margin.
  bool record_trace = false;         ///< keep every failure in sim_result::trace.
};

/// One failure of a run: slice `slice` of group `group` (the learner, for the DiLoCo
/// strategies; 0 for data-parallel) failed at `at_s` and was repaired `recovery_s` later.
struct failure_record {
  std::uint64_t slice = 0;
  std::uint64_t group = 0;
  double at_s = 0;
  double recovery_s = 0;
};

/// Slices simulated: ceil(chips / slice_chips) (the cluster is rounded up to whole slices;
/// 150,000 chips of 256 → 586 slices = 150,016 chips, +0.01 %).
std::uint64_t slice_count(const sim_config& config);

/// Checks a configuration; returns an empty string when valid, else a message naming the bad
/// parameter and its value (e.g. "--mtbi-days must be > 0, got -1"). `s` matters because M must
/// not exceed the number of slices only for the DiLoCo strategies.
std::string validate(const sim_config& config, strategy s);

/// Outcome of one run.
struct sim_result {
  strategy which = strategy::data_parallel;
  std::uint64_t seed = 0;
  double goodput = 0;                  ///< useful chip-time / (N × wall time), in [0, 1].
  double uptime = 0;                   ///< fraction of wall time with global training progress.
  double sim_seconds = 0;              ///< simulated wall time (s).
  std::uint64_t chips_simulated = 0;   ///< slice_count × slice_chips (goodput's denominator).
  std::uint64_t failures = 0;          ///< slice failures simulated.
  std::uint64_t recoveries = 0;        ///< slices that came back.
  std::uint64_t events = 0;            ///< events processed (failures, recoveries, timers, rounds).
  std::uint64_t stale_rejections = 0;  ///< Decoupled DiLoCo pushes rejected by check_staleness.
  double useful_chip_s = 0;            ///< chip-seconds of useful training.
  double lost_work_chip_s = 0;         ///< chip-seconds computed then thrown away (checkpoint
                                       ///< restarts, steps in flight, stale pushes).
  double grace_s = 0;                  ///< Decoupled DiLoCo grace window from compute_grace (s).
  double loaded_chip_s = 0;  ///< chip-seconds under load (stepping); failures ≈ this / MTBI.
  double checkpoint_interval_s = 0;  ///< DP: checkpoint interval used (s).
  std::uint64_t warm_restarts = 0;   ///< DP: relaunches that were warm (restart_s).
  std::uint64_t cold_restarts = 0;   ///< DP relaunches and learner respawns that were cold.
  /// Every failure in time order, when sim_config::record_trace is set (a failure trace that
  /// dd-goodput --trace writes and dd-chaos replays on a real cluster).
  std::vector<failure_record> trace;
};

/// Runs one simulation. Throws std::invalid_argument with validate()'s message on a bad config.
/// Same config + strategy + seed → bit-identical result on the same build.
sim_result simulate(const sim_config& config, strategy s, std::uint64_t seed);

/// Simulates one scripted failure instead of the Poisson process: slice `slice` fails at
/// `fail_at_s` and recovers after exactly `recovery_s` (tests: the lost time is exact).
sim_result simulate_single_failure(const sim_config& config, strategy s, std::uint64_t slice,
                                   double fail_at_s, double recovery_s);

/// One scripted failure: `slice` fails at `at_s` and is back `recovery_s` later.
struct scripted_failure {
  std::uint64_t slice = 0;
  double at_s = 0;
  double recovery_s = 0;
};

/// Simulates scripted failures only (no Poisson process). A failure of a slice that is down at
/// that moment is ignored. Throws std::invalid_argument on a bad config or slice.
sim_result simulate_scripted(const sim_config& config, strategy s,
                             const std::vector<scripted_failure>& failures);

}  // namespace dd::goodput
