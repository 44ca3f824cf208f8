// actors/services/host_admission.cpp — see host_admission.hpp.
#include "actors/services/host_admission.hpp"

#include <sys/ipc.h>
#include <sys/sem.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace dd::actors {

namespace {

union semun_arg {
  int val;
  semid_ds* buf;
  unsigned short* array;
};

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error("host step admission: " + what + ": " + std::strerror(errno));
}

}  // namespace

host_admission host_admission::create(unsigned slots) {
  const int id = ::semget(IPC_PRIVATE, 1, IPC_CREAT | 0600);
  if (id < 0) fail("semget");
  semun_arg arg{};
  arg.val = static_cast<int>(slots == 0 ? 1 : slots);
  if (::semctl(id, 0, SETVAL, arg) < 0) {
    const int e = errno;
    ::semctl(id, 0, IPC_RMID);
    errno = e;
    fail("semctl SETVAL");
  }
  return host_admission(id, true);
}

host_admission host_admission::attach(int id) {
  if (::semctl(id, 0, GETVAL) < 0) fail("semaphore " + std::to_string(id));
  return host_admission(id, false);
}

host_admission::host_admission(host_admission&& other) noexcept
    : id_(other.id_), owner_(other.owner_) {
  other.id_ = -1;
  other.owner_ = false;
}

host_admission::~host_admission() {
  if (owner_ && id_ >= 0) ::semctl(id_, 0, IPC_RMID);
}

void host_admission::acquire(int32_t, double) {
  sembuf op{0, -1, SEM_UNDO};
  while (::semop(id_, &op, 1) < 0) {
    if (errno == EINTR) continue;
    return;  // removed (the launcher exited): admit without limit rather than block for ever
  }
}

void host_admission::release() {
  sembuf op{0, 1, SEM_UNDO};
  ::semop(id_, &op, 1);
}

}  // namespace dd::actors
