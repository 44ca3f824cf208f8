// tools/chaos/state.cpp — see state.hpp.
#include "tools/chaos/state.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "tools/chaos/common.hpp"

namespace dd::chaos {

using nlohmann::json;

state_store::state_store(std::string run_dir)
    : dir_(std::move(run_dir)),
      path_(dir_ + "/chaos-state.json"),
      lock_(dir_ + "/chaos-state.lock") {}

void state_store::update(const std::function<void(std::vector<pending_revert>&)>& fn) const {
  const int fd = ::open(lock_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw chaos_error(fmt::format("{}: cannot open: {}", lock_, std::strerror(errno)));
  while (::flock(fd, LOCK_EX) != 0 && errno == EINTR) {}
  std::vector<pending_revert> entries;
  try {
    if (::access(path_.c_str(), F_OK) == 0) {
      const json j = json::parse(read_file(path_));
      for (const auto& e : j.value("pending", json::array()))
        entries.push_back(e.get<pending_revert>());
    }
    const json before = entries;
    fn(entries);
    const json after = entries;
    // Written only when changed: a read (list) must work on a full disk (disk_full's heal).
    if (before != after) write_file_atomic(path_, json{{"pending", after}}.dump(2) + "\n");
  } catch (const json::exception& e) {
    ::close(fd);
    throw chaos_error(fmt::format("{}: unreadable state file: {}", path_, e.what()));
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);  // releases the lock
}

std::vector<pending_revert> state_store::list() const {
  std::vector<pending_revert> out;
  update([&](std::vector<pending_revert>& e) { out = e; });
  return out;
}

void state_store::add(const pending_revert& p) const {
  update([&](std::vector<pending_revert>& e) { e.push_back(p); });
}

void state_store::remove(const std::string& id) const {
  update([&](std::vector<pending_revert>& e) {
    e.erase(std::remove_if(e.begin(), e.end(), [&](const pending_revert& p) { return p.id == id; }),
            e.end());
  });
}

}  // namespace dd::chaos
