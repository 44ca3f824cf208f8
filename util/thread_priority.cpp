// util/thread_priority.cpp — see thread_priority.hpp.
#include "util/thread_priority.hpp"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace dd::util {

namespace {

id_t this_tid() { return static_cast<id_t>(::syscall(SYS_gettid)); }

}  // namespace

int thread_nice() {
  errno = 0;
  const int nice = ::getpriority(PRIO_PROCESS, this_tid());
  if (nice == -1 && errno != 0)
    throw std::runtime_error(std::string("getpriority of this thread: ") + std::strerror(errno));
  return nice;
}

int lower_thread_priority(int increment) {
  if (increment < 0)
    throw std::invalid_argument("lower_thread_priority: the increment must be >= 0, got " +
                                std::to_string(increment));
  const int now = thread_nice();
  if (increment == 0) return now;
  const int target = std::min(19, now + increment);
  if (::setpriority(PRIO_PROCESS, this_tid(), target) != 0)
    throw std::runtime_error("setpriority of this thread to nice " + std::to_string(target) + ": " +
                             std::strerror(errno));
  return target;
}

}  // namespace dd::util
