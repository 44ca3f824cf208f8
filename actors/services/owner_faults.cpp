// actors/services/owner_faults.cpp — see owner_faults.hpp.
#include "actors/services/owner_faults.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <utility>

#include "actors/roles/supervisor.hpp"
#include "actors/services/fault_hooks.hpp"
#include "actors/services/run_log.hpp"

namespace dd::actors {

owner_faults::owner_faults(fault_hooks* hooks, event_sink* log, int32_t fragment,
                           std::string checkpoint_path)
    : hooks_(hooks), log_(log), fragment_(fragment), checkpoint_path_(std::move(checkpoint_path)) {}

std::vector<double> owner_faults::kill_delays() const {
  return hooks_ != nullptr ? hooks_->owner_kill_delays(fragment_) : std::vector<double>{};
}

caf::error owner_faults::at_version(uint64_t version) const {
  if (hooks_ == nullptr) return {};
  const auto kill = hooks_->on_owner(fragment_, version);
  if (!kill) return {};
  if (hooks_->take_damage(fragment_)) damage_checkpoint();
  return with_downtime(caf::make_error(caf::exit_reason::kill), *kill);
}

void owner_faults::damage_checkpoint() const {
  struct stat st {};
  if (checkpoint_path_.empty() || ::stat(checkpoint_path_.c_str(), &st) != 0) return;
  std::FILE* f = std::fopen(checkpoint_path_.c_str(), "r+b");
  if (f != nullptr) {
    const long at = static_cast<long>(st.st_size / 2);
    std::fseek(f, at, SEEK_SET);
    const unsigned char junk[64] = {0xde, 0xad, 0xbe, 0xef};
    std::fwrite(junk, 1, std::min<long>(64, std::max<long>(1, st.st_size - at)), f);
    std::fclose(f);
  }
  if (log_ != nullptr)
    log_->emit("checkpoint_damaged",
               {{"fragment", fragment_}, {"path", checkpoint_path_}, {"ok", f != nullptr}});
}

}  // namespace dd::actors
