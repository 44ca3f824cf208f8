// actors/policy/admission.hpp — admission checks on a push: staleness and duplicates.
//
// `check_staleness` is a pure function. `push_ledger` is a copyable value that a fragment owner
// keeps in its state (one ledger per fragment); `check_push` only reads it, `record_accepted` and
// `register_learner` update it. Called by the fragment owner actor (one thread per owner) and by
// the goodput simulator.
//
// Source: ALGORITHM.md, "Fragment owner" (validate: incarnation, not a duplicate; version −
// base_version > max_staleness → reject as stale) and "Defaults" (max_staleness = 4, ours).
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace dd::policy {

/// Why a push was admitted or rejected.
enum class admission_reason {
  accepted,             ///< fresh, in-bounds, advancing push.
  stale,                ///< version − base_version > max_staleness.
  from_the_future,      ///< base_version > version: malformed.
  unknown_learner,      ///< learner id never registered with this ledger.
  stale_incarnation,    ///< incarnation older than the learner's current one.
  unknown_incarnation,  ///< incarnation newer than the registered one (not yet registered).
  duplicate,            ///< (base_version, step) does not advance past the last accepted push.
};

/// Stable machine name of a reason.
const char* to_string(admission_reason r);

/// Result of an admission check.
struct admission_decision {
  bool accepted = false;
  admission_reason reason = admission_reason::accepted;
  std::uint64_t staleness = 0;  ///< version − base_version when base_version <= version.
  std::string message;          ///< human-readable, names learner / incarnation / versions.
};

/// Staleness rule: reject as stale when version − base_version > max_staleness (versions are the
/// owner's outer-step counter); reject as malformed when base_version > version ("from the
/// future"). Default max_staleness = 4 versions (ours).
admission_decision check_staleness(std::uint64_t version, std::uint64_t base_version,
                                   std::uint64_t max_staleness);

/// Identity and ordering fields of one push for one fragment.
struct push_key {
  std::uint64_t learner = 0;       ///< learner id (m).
  std::uint64_t incarnation = 0;   ///< restarts of that learner id.
  std::uint64_t base_version = 0;  ///< version of the fragment the delta is relative to.
  std::uint64_t step =
      0;  ///< learner's inner-step counter at push time (monotonic per incarnation).
};

/// Per-fragment record of the learners an owner knows and their last accepted push.
class push_ledger {
 public:
  /// Records that `learner` now runs `incarnation` (join or respawn). A newer incarnation forgets
  /// the previous incarnation's last push; an older one is ignored (returns false).
  bool register_learner(std::uint64_t learner, std::uint64_t incarnation);

  /// Forgets a learner (it left the job). Returns false when it was unknown.
  bool forget_learner(std::uint64_t learner);

  /// Records an accepted push as the learner's last one. Call only after `check_push` accepted it.
  void record_accepted(const push_key& key);

  /// Per learner: current incarnation and, once a push was accepted, that push.
  struct entry {
    std::uint64_t incarnation = 0;
    bool has_last = false;
    std::uint64_t last_base_version = 0;
    std::uint64_t last_step = 0;
  };

  /// The entry for `learner`, or nullptr when unknown.
  const entry* find(std::uint64_t learner) const;

 private:
  std::map<std::uint64_t, entry> entries_;
};

/// Duplicate / incarnation check against a ledger: unknown learner → reject; incarnation older
/// than registered → stale incarnation; newer → unknown incarnation; a push whose (base_version,
/// step) is not lexicographically greater than the last accepted one of the same incarnation →
/// duplicate. Does not check staleness (see `check_staleness`).
admission_decision check_push(const push_ledger& ledger, const push_key& key);

}  // namespace dd::policy
