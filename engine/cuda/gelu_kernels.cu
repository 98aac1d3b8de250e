// GELU, tanh approximation (GPT-2's), forward and backward: elementwise, with
// tanh written through one expf exactly as the CPU backend writes it, so the
// two differ only by expf's last-bit rounding and FMA contraction.
#include <cmath>

#include "engine/cuda/act_type.cuh"
#include "engine/cuda/block_reduce.cuh"
#include "engine/cuda/gelu_kernels.h"

namespace trainyard::engine::cuda {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;

// Saturates to +-1 correctly: expf overflowing to inf gives 1, underflowing
// to 0 gives -1.
__device__ __forceinline__ float Tanh(float x) {
  return 1.f - 2.f / (1.f + expf(2.f * x));
}

template <typename T>
__global__ void GeluForwardKernel(T* out, const T* x, int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    const float v = Ld(x + i);
    const float inner = kSqrt2OverPi * (v + kCubic * v * v * v);
    St(out + i, 0.5f * v * (1.f + Tanh(inner)));
  }
}

template <typename T>
__global__ void GeluBackwardKernel(T* dx, const T* x, const T* dout,
                                   int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    const float v = Ld(x + i);
    const float inner = kSqrt2OverPi * (v + kCubic * v * v * v);
    const float t = Tanh(inner);
    const float sech2 = 1.f - t * t;  // cannot overflow, unlike 1 / cosh^2
    const float local = 0.5f * (1.f + t) + 0.5f * v * sech2 * kSqrt2OverPi *
                                               (1.f + 3.f * kCubic * v * v);
    St(dx + i, local * Ld(dout + i));
  }
}

}  // namespace

cudaError_t LaunchGeluForward(void* out, const void* x, int64_t n, bool bf16,
                              cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return DispatchAct(bf16, [&](auto t) {
    using T = decltype(t);
    GeluForwardKernel<<<ElementwiseBlocks(n), kElementwiseThreads, 0, stream>>>(
        As<T>(out), As<T>(x), n);
    return cudaGetLastError();
  });
}

cudaError_t LaunchGeluBackward(void* dx, const void* x, const void* dout,
                               int64_t n, bool bf16, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return DispatchAct(bf16, [&](auto t) {
    using T = decltype(t);
    GeluBackwardKernel<<<ElementwiseBlocks(n), kElementwiseThreads, 0,
                         stream>>>(As<T>(dx), As<T>(x), As<T>(dout), n);
    return cudaGetLastError();
  });
}

}  // namespace trainyard::engine::cuda
