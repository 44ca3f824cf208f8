// actors/services/owner_faults.hpp — the node's fault hook at a fragment owner: the kill_owner
// faults (fault_hooks.hpp) keyed by the owner's version or by time, and the damage to the
// owner's checkpoint file that a kill with damage_checkpoint does as it fires. The owner only
// asks (at_version after each merge and when a kill timer rings) and exits when told; what a
// fault does is here. Message faults are not here: broadcasts meet theirs on the link
// (chunk_flow.hpp flow_publish). The syncer node installs one per owner (owner_services::faults);
// every call is safe from any thread (fault_hooks is).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <caf/error.hpp>

namespace dd::actors {

class fault_hooks;
class event_sink;

class owner_faults {
 public:
  /// The faults of fragment owner `fragment`, whose checkpoint file is `checkpoint_path`.
  /// `hooks` and `log` may be null (no faults, nothing logged).
  owner_faults(fault_hooks* hooks, event_sink* log, int32_t fragment, std::string checkpoint_path);

  /// Seconds from now until each time-keyed kill not yet fired (negative: overdue): the owner
  /// arms a timer for each and calls at_version when it rings, so the kill fires on time.
  std::vector<double> kill_delays() const;
  /// The owner holds `version` (after a merge; a rebuilding owner says 0). An error: a kill
  /// fires now and the owner must exit at once with it as its exit reason (caf::exit_reason::kill,
  /// carrying the kill's downtime for its supervisor: with_downtime, actors/roles/supervisor.hpp);
  /// a damage_checkpoint that went with it has already overwritten 64 bytes in the middle of the
  /// checkpoint file's body (its CRC no longer matches; a `checkpoint_damaged` event). No error:
  /// the owner goes on.
  caf::error at_version(uint64_t version) const;

 private:
  void damage_checkpoint() const;
  fault_hooks* hooks_;
  event_sink* log_;
  int32_t fragment_;
  std::string checkpoint_path_;
};

}  // namespace dd::actors
