// CUDA's bfloat16 type and conversions for the host emulation of CUDA
// kernels (cuda_include/cuda_bf16.h includes this): __nv_bfloat16 holds the
// 16 bits; __float2bfloat16_rn rounds to nearest even with NaN becoming
// the canonical 0x7fff, as CUDA's; __bfloat162float widens exactly. No
// arithmetic operators: a kernel doing bf16 math fails to compile rather
// than be emulated wrongly. Pure functions; thread-safe.
#ifndef TRAINYARD_ENGINE_CUDA_EMULATION_BF16_H_
#define TRAINYARD_ENGINE_CUDA_EMULATION_BF16_H_

#include <cstdint>
#include <cstring>

#if defined(__CUDA_BF16_H__)
#error "the real cuda_bf16.h is included beside the CUDA emulation's"
#endif

struct __nv_bfloat16 {
  unsigned short __x;
};

inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return {0x7fff};
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return {static_cast<unsigned short>(bits >> 16)};
}

inline __nv_bfloat16 __float2bfloat16(float f) {
  return __float2bfloat16_rn(f);
}

inline float __bfloat162float(__nv_bfloat16 h) {
  const uint32_t bits = static_cast<uint32_t>(h.__x) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

#endif  // TRAINYARD_ENGINE_CUDA_EMULATION_BF16_H_
