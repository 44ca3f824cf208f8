// runtime/rng.hpp — the project's deterministic random number generator.
//
// splitmix64 (Steele, Lea & Flood 2014, "Fast splittable pseudorandom number generators") for
// integers and uniforms, Box–Muller (1958) for normals. Every operation is plain 64-bit integer
// arithmetic plus IEEE double log/sqrt/cos, so the same seed yields the same numbers on any
// platform; tools/torch_reference/make_golden.py re-implements it in Python bit for bit.
// Value type: each owner (model init, one learner's data stream) holds its own instance; not
// shared between threads.
#pragma once

#include <cstdint>

namespace dd {

/// A seeded splitmix64 stream. The state is one uint64 and is exposed so that a data cursor can
/// save and restore it exactly.
class rng {
 public:
  /// Starts the stream at `seed` (any value, 0 included).
  explicit rng(uint64_t seed = 0) : state_(seed) {}

  /// Next 64 random bits: state += 0x9e3779b97f4a7c15, then the splitmix64 finalizer.
  uint64_t next_u64() {
    state_ += 0x9e3779b97f4a7c15ULL;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

  /// Uniform double in (0, 1]: ((next_u64() >> 11) + 1) * 2^-53. Never 0, so log() is safe.
  double uniform() { return static_cast<double>((next_u64() >> 11) + 1) * 0x1.0p-53; }

  /// Uniform integer in [0, n) for n > 0 (modulo reduction; the bias is below 2^-40 for the
  /// n < 2^24 used here). Returns 0 for n == 0.
  uint64_t below(uint64_t n) { return n == 0 ? 0 : next_u64() % n; }

  /// Standard normal by Box–Muller, cosine branch only: u1 = uniform(), u2 = uniform(),
  /// z = sqrt(-2 ln u1) · cos(2π u2). Consumes exactly two draws per value (no cached sine
  /// branch, which keeps the stream state a single integer).
  double normal();

  /// The raw state (for saving a data cursor).
  uint64_t state() const noexcept { return state_; }
  /// Restores a state obtained from state().
  void set_state(uint64_t s) noexcept { state_ = s; }

 private:
  uint64_t state_;
};

/// Derives an independent seed from a base seed and a stream id (e.g. learner index, epoch):
/// one splitmix64 step of base ^ (stream * golden-ratio constant). Used so that the model init,
/// each learner's data order and each epoch's shuffle draw from unrelated streams.
uint64_t derive_seed(uint64_t base, uint64_t stream);

}  // namespace dd
