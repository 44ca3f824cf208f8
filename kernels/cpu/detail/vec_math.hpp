// kernels/cpu/detail/vec_math.hpp — branch-free scalar math that GCC/Clang auto-vectorize
// (no libm calls in the loop body), used by the CPU backend's softmax and GELU loops.
// Internal to kernels/cpu/.
#pragma once

#include <cstdint>
#include <cstring>

namespace dd::kernels::cpu_detail {

/// exp(x) for float, accurate to about 2 ulp for x in [-87.3, 88.3]; inputs outside
/// [-87.33, 88.37] are clamped (results ~1.2e-38 and ~2.4e38, no inf, no denormals); NaN
/// propagates. Method: Cody–Waite range reduction x = n ln2 + r, |r| <= ln2/2, then a degree-6
/// minimax polynomial for e^r (the Cephes expf coefficients, S. Moshier), scaled by 2^n built
/// in the exponent bits.
inline float fast_expf(float x) {
  constexpr float hi = 88.3762626647949f;
  constexpr float lo = -87.3365447504f;  // keeps 2^n normal (n >= -126)
  constexpr float log2e = 1.44269504088896341f;
  constexpr float ln2_hi = 0.693359375f;
  constexpr float ln2_lo = -2.12194440e-4f;
  x = x > hi ? hi : x;
  x = x < lo ? lo : x;  // comparisons are false for NaN: NaN passes through
  // Round-to-nearest of x*log2e via the 1.5*2^23 trick (exact for |v| < 2^22, vectorizes).
  constexpr float shifter = 12582912.0f;
  const float nf = (x * log2e + shifter) - shifter;
  const float r = (x - nf * ln2_hi) - nf * ln2_lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(nf) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

/// Logistic sigmoid 1 / (1 + e^-x) through fast_expf; saturates cleanly to 0 and 1.
inline float fast_sigmoidf(float x) { return 1.0f / (1.0f + fast_expf(-x)); }

}  // namespace dd::kernels::cpu_detail
