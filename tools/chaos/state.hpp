// tools/chaos/state.hpp — pending reverts in `<run_dir>/chaos-state.json`, so that `dd-chaos
// heal` can undo what a killed dd-chaos (or a killed reverter) left applied. Every access holds
// an flock on `<run_dir>/chaos-state.lock`; any process may call.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace dd::chaos {

/// One fault still applied, and the detached process that will revert it.
struct pending_revert {
  std::string id;    ///< unique: "<kind>-<node>-<wall ms>-<pid>"
  std::string kind;  ///< "pause", "slow", "restart" (a kill --for D without launcher), "hold",
                     ///< "slow_cgroup" (a cgroup v1 cpu quota), "disk_full" (a ballast file)
  std::string node;
  int pid = 0;  ///< the faulted process (0 for hold / restart)
  uint64_t start_time = 0;
  int reverter_pid = 0;  ///< the detached reverter (0 when none)
  uint64_t reverter_start_time = 0;
  double until = 0;    ///< wall seconds when the revert is due
  std::string path;    ///< slow_cgroup: the cgroup directory; disk_full: the ballast file
  std::string origin;  ///< slow_cgroup: the cgroup the process came from (moved back there)
};

/// Its JSON object in the state file: one key per field, named as the field (path and origin
/// empty unless its kind uses them). A missing key reads as the field's default.
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(pending_revert, id, kind, node, pid, start_time,
                                                reverter_pid, reverter_start_time, until, path,
                                                origin)

/// The state file of one run directory.
class state_store {
 public:
  explicit state_store(std::string run_dir);
  /// Runs `fn` on the entries under the lock and writes them back (atomically) when it returns.
  void update(const std::function<void(std::vector<pending_revert>&)>& fn) const;
  std::vector<pending_revert> list() const;
  void add(const pending_revert& p) const;
  void remove(const std::string& id) const;
  const std::string& path() const { return path_; }

 private:
  std::string dir_, path_, lock_;
};

}  // namespace dd::chaos
