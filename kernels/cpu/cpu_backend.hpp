// kernels/cpu/cpu_backend.hpp — the fast CPU backend: OpenBLAS sgemm for the linear layers, a
// register-tiled kernel of its own for the per-(batch, head) attention products, fixed
// partitions run on the backend's own thread pool for everything else, and a vectorized exp for
// softmax/GELU.
//
// Determinism: for the same inputs and the same thread count, every op returns bit-identical
// results (each op's chunks are fixed by its shapes and the thread count, whichever thread runs
// them; fixed-order reductions; per-chunk partials combined in chunk order). Results may differ
// in the last bits between different thread counts.
//
// Threads: each backend object owns a pool of backend_options.threads threads (0 = hardware
// threads; the calling thread is one of them) that sleep between ops, so several learners in one
// process can use different counts and an idle one costs nothing. OpenBLAS itself is told to run
// single-threaded (openblas_set_num_threads(1) — PROCESS-GLOBAL, re-asserted before each
// BLAS-using op): this backend splits each sgemm across its own threads instead, so no two
// thread pools fight over the cores. Other code in the process that wants threaded OpenBLAS will
// find it reset to 1. Several learners in one process share the machine's cores: give each
// threads = cores / learners (on the 2-vCPU dev machine 1 thread per learner is best; see
// kernels/README.md).
//
// Any thread may create one; each object is used by one thread at a time (backend.hpp).
#pragma once

#include <memory>

#include "kernels/backend.hpp"

namespace dd::kernels {

/// Creates the CPU backend (host memory, name() == "cpu") using `opts.threads` threads
/// (0 = std::thread::hardware_concurrency()). Throws backend_error for a negative count.
std::unique_ptr<backend> make_cpu_backend(const backend_options& opts);

}  // namespace dd::kernels
