// actors/services/metrics.cpp — see metrics.hpp.
#include "actors/services/metrics.hpp"

#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

namespace dd::actors {

namespace {

bool valid_name(const std::string& name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// HELP text escapes backslash and newline; label values also the double quote.
void append_escaped(std::string& out, const std::string& text, bool quote) {
  for (char c : text) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else if (quote && c == '"')
      out += "\\\"";
    else
      out += c;
  }
}

void append_labels(std::string& out, const std::vector<std::string>& names,
                   const label_values& values, const char* extra_name = nullptr,
                   const std::string& extra_value = {}) {
  if (names.empty() && extra_name == nullptr) return;
  out += '{';
  bool first = true;
  for (size_t i = 0; i < names.size(); ++i) {
    if (!first) out += ',';
    first = false;
    out += names[i];
    out += "=\"";
    append_escaped(out, i < values.size() ? values[i] : std::string(), true);
    out += '"';
  }
  if (extra_name != nullptr) {
    if (!first) out += ',';
    out += extra_name;
    out += "=\"";
    out += extra_value;
    out += '"';
  }
  out += '}';
}

}  // namespace

std::string format_sample_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", v);
}

std::vector<double> exponential_buckets(double start, double factor, int count) {
  std::vector<double> b;
  double x = start;
  for (int i = 0; i < count; ++i, x *= factor) b.push_back(x);
  return b;
}

metric_family::metric_family(std::string name, std::string help, metric_type type,
                             std::vector<std::string> label_names, std::vector<double> buckets)
    : name_(std::move(name)),
      help_(std::move(help)),
      type_(type),
      label_names_(std::move(label_names)),
      buckets_(std::move(buckets)) {
  if (!valid_name(name_)) throw std::invalid_argument("metric name '" + name_ + "' is not valid");
  if (type_ == metric_type::counter && !ends_with(name_, "_total"))
    throw std::invalid_argument("counter '" + name_ + "' must end in _total");
  for (const auto& l : label_names_)
    if (!valid_name(l) || l.rfind("__", 0) == 0 || l == "le")
      throw std::invalid_argument("metric '" + name_ + "': label name '" + l + "' is not valid");
  for (size_t i = 1; i < buckets_.size(); ++i)
    if (!(buckets_[i] > buckets_[i - 1]))
      throw std::invalid_argument("histogram '" + name_ + "': buckets must increase");
}

metric_family::series& metric_family::at(const label_values& labels) {
  auto [it, fresh] = series_.try_emplace(labels);
  if (fresh && type_ == metric_type::histogram) it->second.counts.assign(buckets_.size(), 0);
  return it->second;
}

void metric_family::inc(const label_values& labels, double by) {
  std::lock_guard<std::mutex> g(mutex_);
  at(labels).value += by;
}

void metric_family::set(const label_values& labels, double value) {
  std::lock_guard<std::mutex> g(mutex_);
  at(labels).value = value;
}

void metric_family::observe(const label_values& labels, double value) {
  std::lock_guard<std::mutex> g(mutex_);
  auto& s = at(labels);
  s.value += value;
  s.count += 1;
  for (size_t i = 0; i < buckets_.size(); ++i)
    if (value <= buckets_[i]) {
      s.counts[i] += 1;
      break;
    }
}

void metric_family::clear() {
  std::lock_guard<std::mutex> g(mutex_);
  series_.clear();
}

double metric_family::value(const label_values& labels) const {
  std::lock_guard<std::mutex> g(mutex_);
  auto it = series_.find(labels);
  if (it == series_.end()) return 0.0;
  return type_ == metric_type::histogram ? static_cast<double>(it->second.count) : it->second.value;
}

void metric_family::expose(std::string& out) const {
  std::lock_guard<std::mutex> g(mutex_);
  if (series_.empty()) return;
  out += "# HELP ";
  out += name_;
  out += ' ';
  append_escaped(out, help_, false);
  out += "\n# TYPE ";
  out += name_;
  out += type_ == metric_type::counter ? " counter\n"
         : type_ == metric_type::gauge ? " gauge\n"
                                       : " histogram\n";
  for (const auto& [labels, s] : series_) {
    if (type_ != metric_type::histogram) {
      out += name_;
      append_labels(out, label_names_, labels);
      out += ' ';
      out += format_sample_value(s.value);
      out += '\n';
      continue;
    }
    uint64_t cumulative = 0;
    for (size_t i = 0; i < buckets_.size(); ++i) {
      cumulative += s.counts[i];
      out += name_;
      out += "_bucket";
      append_labels(out, label_names_, labels, "le", format_sample_value(buckets_[i]));
      out += ' ';
      out += std::to_string(cumulative);
      out += '\n';
    }
    out += name_;
    out += "_bucket";
    append_labels(out, label_names_, labels, "le", "+Inf");
    out += ' ' + std::to_string(s.count) + '\n';
    out += name_;
    out += "_sum";
    append_labels(out, label_names_, labels);
    out += ' ' + format_sample_value(s.value) + '\n';
    out += name_;
    out += "_count";
    append_labels(out, label_names_, labels);
    out += ' ' + std::to_string(s.count) + '\n';
  }
}

metric_family& metrics_registry::add(std::unique_ptr<metric_family> f) {
  std::lock_guard<std::mutex> g(mutex_);
  for (const auto& e : families_)
    if (e->name() == f->name())
      throw std::invalid_argument("metric '" + f->name() + "' is registered twice");
  families_.push_back(std::move(f));
  return *families_.back();
}

metric_family& metrics_registry::counter(const std::string& name, const std::string& help,
                                         std::vector<std::string> label_names) {
  return add(
      std::make_unique<metric_family>(name, help, metric_type::counter, std::move(label_names)));
}

metric_family& metrics_registry::gauge(const std::string& name, const std::string& help,
                                       std::vector<std::string> label_names) {
  return add(
      std::make_unique<metric_family>(name, help, metric_type::gauge, std::move(label_names)));
}

metric_family& metrics_registry::histogram(const std::string& name, const std::string& help,
                                           std::vector<std::string> label_names,
                                           std::vector<double> buckets) {
  return add(std::make_unique<metric_family>(name, help, metric_type::histogram,
                                             std::move(label_names), std::move(buckets)));
}

metric_family* metrics_registry::find(const std::string& name) {
  std::lock_guard<std::mutex> g(mutex_);
  for (auto& f : families_)
    if (f->name() == name) return f.get();
  return nullptr;
}

std::string metrics_registry::expose() const {
  std::lock_guard<std::mutex> g(mutex_);
  std::string out;
  for (const auto& f : families_) f->expose(out);
  return out;
}

}  // namespace dd::actors
