// Elementwise kernels: fill, scale, add, ReLU forward and backward. One
// grid-stride loop each; every element is computed by one thread from its
// own inputs, so in-place calls are safe and results are exact (the same
// single IEEE operation the CPU backend performs, rounded once to bf16 on
// store when activations are bf16).
#include "engine/cuda/act_type.cuh"
#include "engine/cuda/block_reduce.cuh"
#include "engine/cuda/elementwise_kernels.h"

namespace trainyard::engine::cuda {
namespace {

__global__ void FillKernel(float* x, int64_t n, float value) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) x[i] = value;
}

__global__ void ScaleKernel(float* x, int64_t n, float s) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) x[i] *= s;
}

template <typename T>
__global__ void FillActKernel(T* x, int64_t n, float value) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) St(x + i, value);
}

template <typename T>
__global__ void CastKernel(T* dst, const float* src, int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) St(dst + i, src[i]);
}

template <typename T>
__global__ void AddKernel(T* out, const T* a, const T* b, int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    St(out + i, Ld(a + i) + Ld(b + i));
  }
}

template <typename T>
__global__ void ReluForwardKernel(T* out, const T* x, int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    const float v = Ld(x + i);
    St(out + i, v > 0.f ? v : 0.f);
  }
}

template <typename T>
__global__ void ReluBackwardKernel(T* dx, const T* dout, const T* out,
                                   int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    St(dx + i, Ld(out + i) > 0.f ? Ld(dout + i) : 0.f);
  }
}

}  // namespace

cudaError_t LaunchFill(float* x, int64_t n, float value, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  FillKernel<<<ElementwiseBlocks(n), kElementwiseThreads, 0, stream>>>(x, n,
                                                                       value);
  return cudaGetLastError();
}

cudaError_t LaunchScale(float* x, int64_t n, float s, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  ScaleKernel<<<ElementwiseBlocks(n), kElementwiseThreads, 0, stream>>>(x, n,
                                                                        s);
  return cudaGetLastError();
}

cudaError_t LaunchFillAct(void* x, int64_t n, float value, bool bf16,
                          cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return DispatchAct(bf16, [&](auto t) {
    using T = decltype(t);
    FillActKernel<<<ElementwiseBlocks(n), kElementwiseThreads, 0, stream>>>(
        As<T>(x), n, value);
    return cudaGetLastError();
  });
}

cudaError_t LaunchCastToAct(void* dst, const float* src, int64_t n, bool bf16,
                            cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return DispatchAct(bf16, [&](auto t) {
    using T = decltype(t);
    CastKernel<<<ElementwiseBlocks(n), kElementwiseThreads, 0, stream>>>(
        As<T>(dst), src, n);
    return cudaGetLastError();
  });
}

cudaError_t LaunchAdd(void* out, const void* a, const void* b, int64_t n,
                      bool bf16, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return DispatchAct(bf16, [&](auto t) {
    using T = decltype(t);
    AddKernel<<<ElementwiseBlocks(n), kElementwiseThreads, 0, stream>>>(
        As<T>(out), As<T>(a), As<T>(b), n);
    return cudaGetLastError();
  });
}

cudaError_t LaunchReluForward(void* out, const void* x, int64_t n, bool bf16,
                              cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return DispatchAct(bf16, [&](auto t) {
    using T = decltype(t);
    ReluForwardKernel<<<ElementwiseBlocks(n), kElementwiseThreads, 0, stream>>>(
        As<T>(out), As<T>(x), n);
    return cudaGetLastError();
  });
}

cudaError_t LaunchReluBackward(void* dx, const void* dout, const void* out,
                               int64_t n, bool bf16, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return DispatchAct(bf16, [&](auto t) {
    using T = decltype(t);
    ReluBackwardKernel<<<ElementwiseBlocks(n), kElementwiseThreads, 0,
                         stream>>>(As<T>(dx), As<T>(dout), As<T>(out), n);
    return cudaGetLastError();
  });
}

}  // namespace trainyard::engine::cuda
