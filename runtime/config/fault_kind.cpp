// runtime/config/fault_kind.cpp — see fault_kind.hpp.
#include "runtime/config/fault_kind.hpp"

#include <array>

namespace dd::config {

namespace {

struct fault_row {
  fault_kind kind;
  const char* name;
  const char* dsl;  // nullptr: not scheduled by the DSL
  fault_layer layer;
};

// In enum order (checked by fault_kind_test).
constexpr std::array<fault_row, 34> table = {{
    {fault_kind::kill_learner, "kill_learner", "kill_learner", fault_layer::in_process},
    {fault_kind::slow_learner, "slow_learner", "slow_learner", fault_layer::in_process},
    {fault_kind::nan_step, "nan_step", "nan_step", fault_layer::in_process},
    {fault_kind::fail_step, "fail_step", "fail_step", fault_layer::in_process},
    {fault_kind::corrupt_held, "corrupt_held", "corrupt_held", fault_layer::in_process},
    {fault_kind::kill_owner, "kill_owner", "kill_owner", fault_layer::in_process},
    {fault_kind::drop_push, "drop_push", "drop_push", fault_layer::in_process},
    {fault_kind::delay_push, "delay_push", "delay_push", fault_layer::in_process},
    {fault_kind::dup_push, "dup_push", "dup_push", fault_layer::in_process},
    {fault_kind::reorder_push, "reorder_push", "reorder_push", fault_layer::in_process},
    {fault_kind::corrupt_push, "corrupt_push", "corrupt_push", fault_layer::in_process},
    {fault_kind::scale_push, "scale_push", "scale_push", fault_layer::in_process},
    {fault_kind::random_push, "random_push", "random_push", fault_layer::in_process},
    {fault_kind::drop_broadcast, "drop_broadcast", "drop_broadcast", fault_layer::in_process},
    {fault_kind::delay_broadcast, "delay_broadcast", "delay_broadcast", fault_layer::in_process},
    {fault_kind::dup_broadcast, "dup_broadcast", "dup_broadcast", fault_layer::in_process},
    {fault_kind::reorder_broadcast, "reorder_broadcast", "reorder_broadcast",
     fault_layer::in_process},
    {fault_kind::kill, "kill", "kill_process", fault_layer::process},
    {fault_kind::term, "term", "term", fault_layer::process},
    {fault_kind::pause, "pause", "pause", fault_layer::process},
    {fault_kind::resume, "resume", nullptr, fault_layer::process},
    {fault_kind::slow, "slow", "slow_process", fault_layer::process},
    {fault_kind::restart, "restart", "restart", fault_layer::process},
    {fault_kind::latency, "latency", "latency", fault_layer::network},
    {fault_kind::bandwidth, "bandwidth", "bandwidth", fault_layer::network},
    {fault_kind::reset, "reset", "reset", fault_layer::network},
    {fault_kind::blackhole, "blackhole", "blackhole", fault_layer::network},
    {fault_kind::partition, "partition", "partition", fault_layer::network},
    {fault_kind::corrupt, "corrupt", "corrupt", fault_layer::network},
    {fault_kind::slice, "slice", "slice", fault_layer::network},
    {fault_kind::close_after, "close_after", "close_after", fault_layer::network},
    {fault_kind::disk_truncate, "disk_truncate", "disk_truncate", fault_layer::disk},
    {fault_kind::disk_corrupt, "disk_corrupt", "disk_corrupt", fault_layer::disk},
    {fault_kind::disk_full, "disk_full", "disk_full", fault_layer::disk},
}};

constexpr bool in_enum_order() {
  for (std::size_t i = 0; i < table.size(); ++i)
    if (static_cast<std::size_t>(table[i].kind) != i) return false;
  return static_cast<std::size_t>(fault_kind::disk_full) + 1 == table.size();
}
static_assert(in_enum_order(), "fault table rows must follow the enum");

/// The DSL's old spellings, kept working with a warning.
struct old_name {
  const char* name;
  fault_kind kind;
};
constexpr std::array<old_name, 4> old_names = {{
    {"kill", fault_kind::kill_learner},
    {"slow", fault_kind::slow_learner},
    {"nan", fault_kind::nan_step},
    {"fail", fault_kind::fail_step},
}};

const fault_row& row(fault_kind k) { return table[static_cast<std::size_t>(k)]; }

}  // namespace

const char* to_string(fault_kind k) { return row(k).name; }
const char* dsl_name(fault_kind k) { return row(k).dsl; }

std::optional<fault_kind> fault_kind_from(std::string_view name) {
  for (const auto& r : table)
    if (name == r.name) return r.kind;
  return std::nullopt;
}

std::optional<fault_kind> dsl_fault_kind(std::string_view name, std::string* warning) {
  for (const auto& r : table)
    if (r.dsl != nullptr && name == r.dsl) return r.kind;
  for (const auto& o : old_names) {
    if (name != o.name) continue;
    if (warning != nullptr) {
      *warning =
          std::string("action '") + o.name + "' is an old name: write '" + to_string(o.kind) + "'";
      if (o.kind == fault_kind::kill_learner)
        *warning +=
            " (a learner actor killed inside its node; a SIGKILL of the node process "
            "is 'kill_process')";
      else if (o.kind == fault_kind::slow_learner)
        *warning +=
            " (a learner slowed inside its node; a node process stopped a duty "
            "fraction of every period is 'slow_process')";
    }
    return o.kind;
  }
  return std::nullopt;
}

std::vector<std::string> dsl_fault_names() {
  std::vector<std::string> out;
  for (const auto& r : table)
    if (r.dsl != nullptr) out.emplace_back(r.dsl);
  return out;
}

std::vector<fault_kind> all_fault_kinds() {
  std::vector<fault_kind> out;
  for (const auto& r : table) out.push_back(r.kind);
  return out;
}

fault_layer fault_layer_of(fault_kind k) { return row(k).layer; }

bool is_push_fault(fault_kind k) {
  return k >= fault_kind::drop_push && k <= fault_kind::random_push;
}

bool is_broadcast_fault(fault_kind k) {
  return k >= fault_kind::drop_broadcast && k <= fault_kind::reorder_broadcast;
}

bool is_step_message_fault(fault_kind k) {
  return k == fault_kind::nan_step || k == fault_kind::fail_step || k == fault_kind::corrupt_held;
}

bool is_live_fault(fault_kind k) {
  return is_push_fault(k) || is_broadcast_fault(k) || is_step_message_fault(k);
}

bool starts_live_window(fault_kind k) {
  return is_live_fault(k) && k != fault_kind::drop_push && k != fault_kind::delay_push;
}

}  // namespace dd::config
