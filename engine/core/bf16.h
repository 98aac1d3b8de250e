// bfloat16 on the host: the top 16 bits of an IEEE fp32 (8-bit exponent,
// 7 stored mantissa bits, so a relative rounding error of at most 2^-8).
// Rounding is to nearest even, as the GPU's __float2bfloat16_rn, so the CPU
// and CUDA backends store the same bits for the same fp32 value; NaN stays
// a (quiet) NaN. Pure functions; thread-safe.
#ifndef TRAINYARD_ENGINE_CORE_BF16_H_
#define TRAINYARD_ENGINE_CORE_BF16_H_

#include <cstdint>
#include <cstring>
#include <vector>

namespace trainyard::engine {

inline uint16_t FloatToBf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((bits >> 16) | 0x40u);  // quiet NaN
  }
  // Adding 0x7fff plus the lowest kept bit rounds halfway cases to even;
  // a carry into the exponent rounds up to the next binade (or infinity).
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

inline float Bf16ToFloat(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float x;
  std::memcpy(&x, &bits, 4);
  return x;
}

// x rounded to the nearest bf16, as fp32.
inline float RoundToBf16(float x) { return Bf16ToFloat(FloatToBf16(x)); }

inline void FloatsToBf16(const float* src, int64_t n, uint16_t* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = FloatToBf16(src[i]);
}

inline void Bf16ToFloats(const uint16_t* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToFloat(src[i]);
}

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_CORE_BF16_H_
