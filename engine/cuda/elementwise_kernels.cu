// Elementwise kernels: fill, scale, add, ReLU forward and backward. One
// grid-stride loop each; every element is computed by one thread from its
// own inputs, so in-place calls are safe and results are exact (the same
// single IEEE operation the CPU backend performs, rounded once to bf16 on
// store when activations are bf16).
//
// Access: the activation kernels move 16-byte packs (vec16.cuh: 8 bf16 or
// 4 fp32 per load and store; the cast reads its fp32 source as two packs
// per bf16 pack), the grid striding over packs; an unaligned head and tail,
// or everything when the arrays are not aligned alike, go element by
// element (ForOwned). Each element is still one operation of its own
// inputs, so the results do not depend on the split. The fp32-only fill
// and scale keep 4-byte accesses (a warp already moves 128 bytes).
#include "engine/cuda/act_type.cuh"
#include "engine/cuda/block_reduce.cuh"
#include "engine/cuda/elementwise_kernels.h"
#include "engine/cuda/vec16.cuh"

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
  ForOwned(
      SplitAligned(n, x), GridStart(), GridStride(),
      [&](int64_t i) { St(x + i, value); },
      [&](int64_t i) {
        float v[kPack<T>];
#pragma unroll
        for (int k = 0; k < kPack<T>; ++k) v[k] = value;
        StPack(x + i, v);
      });
}

template <typename T>
__global__ void CastKernel(T* dst, const float* src, int64_t n) {
  ForOwned(
      SplitAligned(n, dst, src), GridStart(), GridStride(),
      [&](int64_t i) { St(dst + i, src[i]); },
      [&](int64_t i) {
        float v[kPack<T>];
#pragma unroll
        for (int h = 0; h < kPack<T>; h += kPack<float>) {
          float part[kPack<float>];
          LdPack(src + i + h, part);
#pragma unroll
          for (int k = 0; k < kPack<float>; ++k) v[h + k] = part[k];
        }
        StPack(dst + i, v);
      });
}

template <typename T>
__global__ void AddKernel(T* out, const T* a, const T* b, int64_t n) {
  ForOwned(
      SplitAligned(n, out, a, b), GridStart(), GridStride(),
      [&](int64_t i) { St(out + i, Ld(a + i) + Ld(b + i)); },
      [&](int64_t i) {
        float va[kPack<T>], vb[kPack<T>];
        LdPack(a + i, va);
        LdPack(b + i, vb);
#pragma unroll
        for (int k = 0; k < kPack<T>; ++k) va[k] += vb[k];
        StPack(out + i, va);
      });
}

__device__ __forceinline__ float Relu(float v) { return v > 0.f ? v : 0.f; }

template <typename T>
__global__ void ReluForwardKernel(T* out, const T* x, int64_t n) {
  ForOwned(
      SplitAligned(n, out, x), GridStart(), GridStride(),
      [&](int64_t i) { St(out + i, Relu(Ld(x + i))); },
      [&](int64_t i) {
        float v[kPack<T>];
        LdPack(x + i, v);
#pragma unroll
        for (int k = 0; k < kPack<T>; ++k) v[k] = Relu(v[k]);
        StPack(out + i, v);
      });
}

template <typename T>
__global__ void ReluBackwardKernel(T* dx, const T* dout, const T* out,
                                   int64_t n) {
  ForOwned(
      SplitAligned(n, dx, dout, out), GridStart(), GridStride(),
      [&](int64_t i) { St(dx + i, Ld(out + i) > 0.f ? Ld(dout + i) : 0.f); },
      [&](int64_t i) {
        float d[kPack<T>], o[kPack<T>];
        LdPack(dout + i, d);
        LdPack(out + i, o);
#pragma unroll
        for (int k = 0; k < kPack<T>; ++k) d[k] = o[k] > 0.f ? d[k] : 0.f;
        StPack(dx + i, d);
      });
}

// Enough blocks for one pack of T per thread.
template <typename T>
unsigned PackBlocks(int64_t n) {
  return ElementwiseBlocks(PackCount<T>(n));
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
    FillActKernel<<<PackBlocks<T>(n), kElementwiseThreads, 0, stream>>>(
        As<T>(x), n, value);
    return cudaGetLastError();
  });
}

cudaError_t LaunchCastToAct(void* dst, const float* src, int64_t n, bool bf16,
                            cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return DispatchAct(bf16, [&](auto t) {
    using T = decltype(t);
    CastKernel<<<PackBlocks<T>(n), kElementwiseThreads, 0, stream>>>(As<T>(dst),
                                                                     src, n);
    return cudaGetLastError();
  });
}

cudaError_t LaunchAdd(void* out, const void* a, const void* b, int64_t n,
                      bool bf16, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return DispatchAct(bf16, [&](auto t) {
    using T = decltype(t);
    AddKernel<<<PackBlocks<T>(n), kElementwiseThreads, 0, stream>>>(
        As<T>(out), As<T>(a), As<T>(b), n);
    return cudaGetLastError();
  });
}

cudaError_t LaunchReluForward(void* out, const void* x, int64_t n, bool bf16,
                              cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return DispatchAct(bf16, [&](auto t) {
    using T = decltype(t);
    ReluForwardKernel<<<PackBlocks<T>(n), kElementwiseThreads, 0, stream>>>(
        As<T>(out), As<T>(x), n);
    return cudaGetLastError();
  });
}

cudaError_t LaunchReluBackward(void* dx, const void* dout, const void* out,
                               int64_t n, bool bf16, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return DispatchAct(bf16, [&](auto t) {
    using T = decltype(t);
    ReluBackwardKernel<<<PackBlocks<T>(n), kElementwiseThreads, 0, stream>>>(
        As<T>(dx), As<T>(dout), As<T>(out), n);
    return cudaGetLastError();
  });
}

}  // namespace trainyard::engine::cuda
