// 2^x as a softmax needs it: one MUFU.EX2 on the GPU (ex2.approx.ftz,
// within 2 ulp; 2^-inf is +0). exp2f without fast math is ex2.approx
// without .ftz, which ptxas wraps in a compare and two predicated
// multiplies to keep subnormal results; a probability below 2^-126 adds
// nothing to any sum it joins, so this flushes it. In the host emulation
// of CUDA (TRAINYARD_CUDA_EMULATION) it is exp2f, flushed the same. A .h,
// not a .cuh: the kernel rewriter refuses inline PTX, and the preprocessor
// keeps the PTX from the emulation build. Thread-safe.
#ifndef TRAINYARD_ENGINE_CUDA_EXP2_FTZ_H_
#define TRAINYARD_ENGINE_CUDA_EXP2_FTZ_H_

#include <cuda_runtime.h>

#include <cmath>

namespace trainyard::engine::cuda {

inline constexpr float kLog2e = 1.4426950408889634f;

#if defined(TRAINYARD_CUDA_EMULATION)
inline float Exp2Ftz(float x) {
  const float r = exp2f(x);
  return r < 0x1p-126f ? 0.f : r;
}
#else
__device__ __forceinline__ float Exp2Ftz(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(x));
  return r;
}
#endif

}  // namespace trainyard::engine::cuda

#endif  // TRAINYARD_ENGINE_CUDA_EXP2_FTZ_H_
