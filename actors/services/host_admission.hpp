// actors/services/host_admission.hpp — step admission shared by every learner process of one host:
// a System V semaphore created by `dd-node launch` with `slots` = cores / threads per learner, so
// that M learner processes on C < M cores take turns like M equal devices (the in-process
// compute_gate's job, across processes). SEM_UNDO makes the kernel return the admission of a
// process that dies while holding it (kill -9 never leaks a slot). Admission is first come,
// first served, without compute_gate's virtual-time fairness. Thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "actors/services/compute_gate.hpp"

namespace dd::actors {

/// A host-wide counting semaphore (System V, with SEM_UNDO).
class host_admission final : public step_admission {
 public:
  /// Creates a new private semaphore holding `slots` admissions; the creator removes it in its
  /// destructor. Throws std::runtime_error naming the errno text when the kernel refuses.
  static host_admission create(unsigned slots);
  /// Uses the semaphore `id` another process created (`dd-node learner --step-admission
  /// sysv:ID`). Throws std::runtime_error when it does not exist.
  static host_admission attach(int id);

  host_admission(host_admission&& other) noexcept;
  host_admission& operator=(host_admission&&) = delete;
  host_admission(const host_admission&) = delete;
  ~host_admission() override;

  int id() const noexcept { return id_; }
  /// "sysv:<id>", the flag value learners are given.
  std::string spec() const { return "sysv:" + std::to_string(id_); }

  void join(int32_t) override {}
  void leave(int32_t) override {}
  void acquire(int32_t key, double weight) override;
  void release() override;

 private:
  host_admission(int id, bool owner) : id_(id), owner_(owner) {}
  int id_ = -1;
  bool owner_ = false;
};

}  // namespace dd::actors
