// actors/services/metrics.hpp — a small metrics registry (counters, gauges, histograms with
// labels) and its Prometheus text exposition (format 0.0.4, the one `promtool check metrics`
// reads: https://prometheus.io/docs/instrumenting/exposition_formats/).
//
// Why our own registry: Debian 12 has no prometheus-cpp package; the node's HTTP listener uses
// cpp-httplib (libcpp-httplib-dev, header-only), and the text format is small enough to write
// here (HELP/TYPE lines, escaped label values, cumulative histogram buckets with `le`).
//
// Names follow Prometheus conventions: `dd_<component>_<what>_<unit>`, `_total` for counters,
// base units (seconds, bytes). A family is created once (at node start) and series are added on
// first use of a label-value tuple. Thread-safe: one mutex per family; an update costs a lock and
// a map lookup.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace dd::actors {

enum class metric_type { counter, gauge, histogram };

/// Label values, in the order of the family's label names.
using label_values = std::vector<std::string>;

/// One metric family: a name, its help text, its type and label names, and its series.
class metric_family {
 public:
  metric_family(std::string name, std::string help, metric_type type,
                std::vector<std::string> label_names, std::vector<double> buckets = {});

  /// Counter: adds `by` (>= 0). Gauge: adds `by` (any sign).
  void inc(const label_values& labels, double by = 1.0);
  /// Gauge: sets the value. Counter: sets the running total (a total kept elsewhere, e.g. the run
  /// log's counters); it should never go down except on a restart.
  void set(const label_values& labels, double value);
  /// Histogram: one observation.
  void observe(const label_values& labels, double value);
  /// Removes every series (a gauge family recomputed from a snapshot at each scrape).
  void clear();

  const std::string& name() const { return name_; }
  metric_type type() const { return type_; }
  /// The value of a counter or gauge series; 0 when it does not exist. Histograms: the count.
  double value(const label_values& labels) const;
  /// Appends the family in the text format; nothing when it has no series.
  void expose(std::string& out) const;

 private:
  struct series {
    double value = 0.0;            // counter, gauge; histogram: sum
    uint64_t count = 0;            // histogram
    std::vector<uint64_t> counts;  // histogram: per bucket, not cumulative
  };
  series& at(const label_values& labels);  // under mutex_
  std::string name_, help_;
  metric_type type_;
  std::vector<std::string> label_names_;
  std::vector<double> buckets_;
  mutable std::mutex mutex_;
  std::map<label_values, series> series_;
};

/// The families of one node, exposed in the order they were added.
class metrics_registry {
 public:
  /// Adds a family (names are checked: [a-zA-Z_:][a-zA-Z0-9_:]*, counters end in `_total`;
  /// std::invalid_argument otherwise, or when the name is taken). The reference stays valid for
  /// the registry's life.
  metric_family& counter(const std::string& name, const std::string& help,
                         std::vector<std::string> label_names = {});
  metric_family& gauge(const std::string& name, const std::string& help,
                       std::vector<std::string> label_names = {});
  /// `buckets`: upper bounds, increasing (+Inf is added).
  metric_family& histogram(const std::string& name, const std::string& help,
                           std::vector<std::string> label_names, std::vector<double> buckets);
  /// The family named `name`, or nullptr.
  metric_family* find(const std::string& name);
  /// The whole registry in the text format.
  std::string expose() const;

 private:
  metric_family& add(std::unique_ptr<metric_family> f);
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<metric_family>> families_;
};

/// Content-Type of the text exposition format.
inline constexpr const char* metrics_content_type = "text/plain; version=0.0.4; charset=utf-8";

/// A sample value as the text format writes it: shortest round-trip decimal, "NaN", "+Inf",
/// "-Inf".
std::string format_sample_value(double v);

/// Exponential bucket bounds: start, start×factor, … (`count` of them).
std::vector<double> exponential_buckets(double start, double factor, int count);

}  // namespace dd::actors
