// actors/policy/admission.cpp — staleness and duplicate checks (see admission.hpp).
#include "actors/policy/admission.hpp"

#include <string>

namespace dd::policy {

const char* to_string(admission_reason r) {
  switch (r) {
    case admission_reason::accepted: return "accepted";
    case admission_reason::stale: return "stale";
    case admission_reason::from_the_future: return "from_the_future";
    case admission_reason::unknown_learner: return "unknown_learner";
    case admission_reason::stale_incarnation: return "stale_incarnation";
    case admission_reason::unknown_incarnation: return "unknown_incarnation";
    case admission_reason::duplicate: return "duplicate";
  }
  return "unknown";
}

admission_decision check_staleness(std::uint64_t version, std::uint64_t base_version,
                                   std::uint64_t max_staleness) {
  admission_decision d;
  if (base_version > version) {
    d.reason = admission_reason::from_the_future;
    d.message = "malformed push: base version " + std::to_string(base_version) +
                " is ahead of the owner's version " + std::to_string(version);
    return d;
  }
  d.staleness = version - base_version;
  if (d.staleness > max_staleness) {
    d.reason = admission_reason::stale;
    d.message = "stale push: base version " + std::to_string(base_version) + " is " +
                std::to_string(d.staleness) + " versions behind " + std::to_string(version) +
                " (max " + std::to_string(max_staleness) + ")";
    return d;
  }
  d.accepted = true;
  d.reason = admission_reason::accepted;
  d.message = "fresh push: staleness " + std::to_string(d.staleness) +
              " <= " + std::to_string(max_staleness);
  return d;
}

bool push_ledger::register_learner(std::uint64_t learner, std::uint64_t incarnation) {
  auto it = entries_.find(learner);
  if (it == entries_.end()) {
    entries_[learner] = entry{incarnation, false, 0, 0};
    return true;
  }
  if (incarnation < it->second.incarnation) return false;
  if (incarnation > it->second.incarnation) it->second = entry{incarnation, false, 0, 0};
  return true;
}

bool push_ledger::forget_learner(std::uint64_t learner) { return entries_.erase(learner) > 0; }

void push_ledger::record_accepted(const push_key& key) {
  auto& e = entries_[key.learner];
  if (key.incarnation > e.incarnation) e.incarnation = key.incarnation;
  e.has_last = true;
  e.last_base_version = key.base_version;
  e.last_step = key.step;
}

const push_ledger::entry* push_ledger::find(std::uint64_t learner) const {
  auto it = entries_.find(learner);
  return it == entries_.end() ? nullptr : &it->second;
}

admission_decision check_push(const push_ledger& ledger, const push_key& key) {
  admission_decision d;
  const std::string who =
      "learner " + std::to_string(key.learner) + " incarnation " + std::to_string(key.incarnation);
  const push_ledger::entry* e = ledger.find(key.learner);
  if (e == nullptr) {
    d.reason = admission_reason::unknown_learner;
    d.message = "rejected: " + who + " is not a registered learner";
    return d;
  }
  if (key.incarnation < e->incarnation) {
    d.reason = admission_reason::stale_incarnation;
    d.message = "rejected: " + who + " is older than the current incarnation " +
                std::to_string(e->incarnation);
    return d;
  }
  if (key.incarnation > e->incarnation) {
    d.reason = admission_reason::unknown_incarnation;
    d.message = "rejected: " + who + " is newer than the registered incarnation " +
                std::to_string(e->incarnation);
    return d;
  }
  if (e->has_last) {
    const bool advances = key.base_version > e->last_base_version ||
                          (key.base_version == e->last_base_version && key.step > e->last_step);
    if (!advances) {
      d.reason = admission_reason::duplicate;
      d.message = "duplicate: " + who + " push (base " + std::to_string(key.base_version) +
                  ", step " + std::to_string(key.step) + ") does not advance past (base " +
                  std::to_string(e->last_base_version) + ", step " + std::to_string(e->last_step) +
                  ")";
      return d;
    }
  }
  d.accepted = true;
  d.reason = admission_reason::accepted;
  d.message = "accepted: " + who + " (base " + std::to_string(key.base_version) + ", step " +
              std::to_string(key.step) + ")";
  return d;
}

}  // namespace dd::policy
