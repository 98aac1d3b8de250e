// GELU, tanh approximation (GPT-2's), forward and backward: elementwise, with
// tanh written through one expf exactly as the CPU backend writes it, so the
// two differ only by expf's last-bit rounding and FMA contraction.
//
// Access: 16-byte packs (vec16.cuh: 8 bf16 or 4 fp32 per load and store),
// the grid striding over packs; an unaligned head and tail, or everything
// when the arrays are not aligned alike, element by element (ForOwned).
// Each element's result is its own: the split does not change it.
#include <cmath>

#include "engine/cuda/act_type.cuh"
#include "engine/cuda/block_reduce.cuh"
#include "engine/cuda/gelu_kernels.h"
#include "engine/cuda/vec16.cuh"

namespace trainyard::engine::cuda {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;

// Saturates to +-1 correctly: expf overflowing to inf gives 1, underflowing
// to 0 gives -1.
__device__ __forceinline__ float Tanh(float x) {
  return 1.f - 2.f / (1.f + expf(2.f * x));
}

__device__ __forceinline__ float Gelu(float v) {
  const float inner = kSqrt2OverPi * (v + kCubic * v * v * v);
  return 0.5f * v * (1.f + Tanh(inner));
}

__device__ __forceinline__ float GeluGrad(float v, float dout) {
  const float inner = kSqrt2OverPi * (v + kCubic * v * v * v);
  const float t = Tanh(inner);
  const float sech2 = 1.f - t * t;  // cannot overflow, unlike 1 / cosh^2
  const float local = 0.5f * (1.f + t) + 0.5f * v * sech2 * kSqrt2OverPi *
                                             (1.f + 3.f * kCubic * v * v);
  return local * dout;
}

template <typename T>
__global__ void GeluForwardKernel(T* out, const T* x, int64_t n) {
  ForOwned(
      SplitAligned(n, out, x), GridStart(), GridStride(),
      [&](int64_t i) { St(out + i, Gelu(Ld(x + i))); },
      [&](int64_t i) {
        float v[kPack<T>];
        LdPack(x + i, v);
#pragma unroll
        for (int k = 0; k < kPack<T>; ++k) v[k] = Gelu(v[k]);
        StPack(out + i, v);
      });
}

template <typename T>
__global__ void GeluBackwardKernel(T* dx, const T* x, const T* dout,
                                   int64_t n) {
  ForOwned(
      SplitAligned(n, dx, x, dout), GridStart(), GridStride(),
      [&](int64_t i) { St(dx + i, GeluGrad(Ld(x + i), Ld(dout + i))); },
      [&](int64_t i) {
        float v[kPack<T>], d[kPack<T>];
        LdPack(x + i, v);
        LdPack(dout + i, d);
#pragma unroll
        for (int k = 0; k < kPack<T>; ++k) d[k] = GeluGrad(v[k], d[k]);
        StPack(dx + i, d);
      });
}

}  // namespace

cudaError_t LaunchGeluForward(void* out, const void* x, int64_t n, bool bf16,
                              cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return DispatchAct(bf16, [&](auto t) {
    using T = decltype(t);
    GeluForwardKernel<<<ElementwiseBlocks(PackCount<T>(n)), kElementwiseThreads,
                        0, stream>>>(As<T>(out), As<T>(x), n);
    return cudaGetLastError();
  });
}

cudaError_t LaunchGeluBackward(void* dx, const void* x, const void* dout,
                               int64_t n, bool bf16, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return DispatchAct(bf16, [&](auto t) {
    using T = decltype(t);
    GeluBackwardKernel<<<ElementwiseBlocks(PackCount<T>(n)),
                         kElementwiseThreads, 0, stream>>>(As<T>(dx), As<T>(x),
                                                           As<T>(dout), n);
    return cudaGetLastError();
  });
}

}  // namespace trainyard::engine::cuda
