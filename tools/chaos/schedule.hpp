// tools/chaos/schedule.hpp — the random fault schedule: a pure function from a seed and a
// config to a list of faults (same seed, same list, on every machine: the sampling is our own
// over mt19937_64's standardised output, not std::*_distribution). Any thread.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace dd::chaos {

/// The one seeded generator behind every random choice of a dd-chaos command.
class chaos_rng {
 public:
  explicit chaos_rng(uint64_t seed) : gen_(seed) {}
  /// Uniform in [0, 1).
  double uniform();
  /// Uniform integer in [0, n); n > 0.
  uint64_t below(uint64_t n);
  /// Exponential with the given mean.
  double exponential(double mean);
  /// Standard normal (Box–Muller).
  double normal();

 private:
  std::mt19937_64 gen_;
};

/// A recovery-time distribution: how long a fault lasts before it is reverted (seconds).
struct recovery_dist {
  enum class kind { fixed, exponential, lognormal, weibull };
  kind k = kind::fixed;
  double mean = 5;   ///< seconds; the distribution's mean for every kind
  double shape = 0;  ///< lognormal: sigma of log(x); weibull: shape k

  /// "fixed:5s", "exponential:5s", "lognormal:5s,0.5", "weibull:5s,1.5". Throws usage_error.
  static recovery_dist parse(const std::string& text);
  double sample(chaos_rng& rng) const;
  std::string str() const;
};

/// What `dd-chaos random` draws from.
struct schedule_config {
  double mtbf = 30;        ///< mean time between faults, whole cluster, seconds
  recovery_dist recovery;  ///< each fault's duration
  uint64_t seed = 1;
  double duration = 300;             ///< schedule horizon, seconds from the start
  std::vector<std::string> kinds;    ///< fault kinds, picked uniformly ("kill", "pause", ...)
  std::vector<std::string> targets;  ///< candidate targets (node names), picked uniformly
  int max_concurrent = 1;            ///< faults active at once; an arrival above it is skipped
  double min_gap = 0;                ///< seconds between consecutive fault starts
};

/// One fault of a schedule.
struct scheduled_fault {
  double at = 0;  ///< seconds from the start
  std::string kind;
  std::string target;   ///< a node name from schedule_config::targets
  double duration = 0;  ///< seconds until it is reverted
  bool operator==(const scheduled_fault& o) const {
    return at == o.at && kind == o.kind && target == o.target && duration == o.duration;
  }
};

/// Poisson arrivals (exponential inter-arrival with mean `mtbf`), pushed back to keep `min_gap`;
/// an arrival when `max_concurrent` faults are active or every target is faulted is skipped
/// (the draws are made anyway so the rest of the schedule does not depend on the skip).
/// Throws usage_error on an empty kinds or targets list or a non-positive mtbf.
std::vector<scheduled_fault> make_schedule(const schedule_config& cfg);

}  // namespace dd::chaos
