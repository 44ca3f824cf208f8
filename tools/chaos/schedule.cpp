// tools/chaos/schedule.cpp — see schedule.hpp.
#include "tools/chaos/schedule.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "tools/chaos/common.hpp"

namespace dd::chaos {

double chaos_rng::uniform() { return static_cast<double>(gen_() >> 11) * 0x1.0p-53; }

uint64_t chaos_rng::below(uint64_t n) {
  // Rejection sampling: unbiased and defined by the raw engine output only.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  for (;;) {
    const uint64_t x = gen_();
    if (x < limit) return x % n;
  }
}

double chaos_rng::exponential(double mean) { return -mean * std::log1p(-uniform()); }

double chaos_rng::normal() {
  const double u1 = 1.0 - uniform();  // (0, 1]
  const double u2 = uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

recovery_dist recovery_dist::parse(const std::string& text) {
  const auto colon = text.find(':');
  const std::string name = text.substr(0, colon);
  if (colon == std::string::npos)
    throw usage_error(fmt::format(
        "--recovery: '{}' must be KIND:MEAN[,SHAPE] (fixed, exponential, lognormal, weibull)",
        text));
  const auto args = split(text.substr(colon + 1), ',');
  recovery_dist d;
  d.mean = parse_duration(args[0], "--recovery mean");
  if (d.mean <= 0) throw usage_error("--recovery: the mean must be > 0");
  auto shape = [&](double dflt) {
    if (args.size() < 2) return dflt;
    try {
      size_t used = 0;
      const double v = std::stod(args[1], &used);
      if (used != args[1].size() || !(v > 0)) throw std::invalid_argument("shape");
      return v;
    } catch (const std::exception&) {
      throw usage_error(fmt::format("--recovery: shape '{}' must be a number > 0", args[1]));
    }
  };
  if (name == "fixed")
    d.k = kind::fixed;
  else if (name == "exponential")
    d.k = kind::exponential;
  else if (name == "lognormal") {
    d.k = kind::lognormal;
    d.shape = shape(0.5);
  } else if (name == "weibull") {
    d.k = kind::weibull;
    d.shape = shape(1.5);
  } else
    throw usage_error(fmt::format(
        "--recovery: unknown distribution '{}' (fixed, exponential, lognormal, weibull)", name));
  if ((d.k == kind::fixed || d.k == kind::exponential) && args.size() > 1)
    throw usage_error(fmt::format("--recovery: {} takes only a mean", name));
  return d;
}

double recovery_dist::sample(chaos_rng& rng) const {
  switch (k) {
    case kind::fixed: return mean;
    case kind::exponential: return rng.exponential(mean);
    case kind::lognormal: {
      // E[X] = exp(mu + sigma^2 / 2) = mean.
      const double mu = std::log(mean) - shape * shape / 2;
      return std::exp(mu + shape * rng.normal());
    }
    case kind::weibull: {
      // E[X] = lambda * Gamma(1 + 1/k) = mean; inverse CDF lambda * (-ln(1-u))^(1/k).
      const double lambda = mean / std::tgamma(1.0 + 1.0 / shape);
      return lambda * std::pow(-std::log1p(-rng.uniform()), 1.0 / shape);
    }
  }
  return mean;
}

std::string recovery_dist::str() const {
  switch (k) {
    case kind::fixed: return fmt::format("fixed:{}", format_duration(mean));
    case kind::exponential: return fmt::format("exponential:{}", format_duration(mean));
    case kind::lognormal: return fmt::format("lognormal:{},{:g}", format_duration(mean), shape);
    case kind::weibull: return fmt::format("weibull:{},{:g}", format_duration(mean), shape);
  }
  return "?";
}

std::vector<scheduled_fault> make_schedule(const schedule_config& cfg) {
  if (cfg.kinds.empty()) throw usage_error("random: no fault kinds (--kinds)");
  if (cfg.targets.empty()) throw usage_error("random: no targets left to fault (all protected?)");
  if (!(cfg.mtbf > 0)) throw usage_error("random: --mtbf must be > 0");
  if (cfg.max_concurrent < 1) throw usage_error("random: --max-concurrent must be >= 1");
  chaos_rng rng(cfg.seed);
  std::vector<scheduled_fault> out;
  double t = 0;
  double last_start = -1e300;
  for (;;) {
    t += rng.exponential(cfg.mtbf);
    // Every arrival consumes the same draws, kept or not.
    const double duration = cfg.recovery.sample(rng);
    const uint64_t kind_draw = rng.below(cfg.kinds.size());
    const double target_draw = rng.uniform();
    t = std::max(t, last_start + cfg.min_gap);
    if (t >= cfg.duration) break;
    std::vector<std::string> busy;
    int active = 0;
    for (const auto& f : out)
      if (f.at <= t && t < f.at + f.duration) {
        ++active;
        busy.push_back(f.target);
      }
    if (active >= cfg.max_concurrent) continue;
    std::vector<std::string> free;
    for (const auto& c : cfg.targets)
      if (std::find(busy.begin(), busy.end(), c) == busy.end()) free.push_back(c);
    if (free.empty()) continue;
    const auto pick = std::min(free.size() - 1, static_cast<size_t>(target_draw * free.size()));
    out.push_back({t, cfg.kinds[kind_draw], free[pick], duration});
    last_start = t;
  }
  return out;
}

}  // namespace dd::chaos
