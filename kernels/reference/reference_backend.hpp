// kernels/reference/reference_backend.hpp — the naive reference backend: the executable
// specification of every op in backend.hpp. Plain loops, one thread, double-precision
// accumulation everywhere; slow by design. Tests compare every other backend against it.
// Any thread may create one; each object is used by one thread at a time (backend.hpp).
#pragma once

#include <memory>

#include "kernels/backend.hpp"

namespace dd::kernels {

/// Creates the reference backend (host memory, name() == "reference"). Never throws except
/// std::bad_alloc.
std::unique_ptr<backend> make_reference_backend();

}  // namespace dd::kernels
