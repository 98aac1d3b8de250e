// Elementwise kernels: fill, scale, add, ReLU forward and backward. One
// grid-stride loop each; every element is computed by one thread from its
// own inputs, so in-place calls are safe and results are exact (the same
// single IEEE operation the CPU backend performs).
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

__global__ void AddKernel(float* out, const float* a, const float* b,
                          int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) out[i] = a[i] + b[i];
}

__global__ void ReluForwardKernel(float* out, const float* x, int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    out[i] = x[i] > 0.f ? x[i] : 0.f;
  }
}

__global__ void ReluBackwardKernel(float* dx, const float* dout,
                                   const float* out, int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    dx[i] = out[i] > 0.f ? dout[i] : 0.f;
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

cudaError_t LaunchAdd(float* out, const float* a, const float* b, int64_t n,
                      cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  AddKernel<<<ElementwiseBlocks(n), kElementwiseThreads, 0, stream>>>(out, a, b,
                                                                      n);
  return cudaGetLastError();
}

cudaError_t LaunchReluForward(float* out, const float* x, int64_t n,
                              cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  ReluForwardKernel<<<ElementwiseBlocks(n), kElementwiseThreads, 0, stream>>>(
      out, x, n);
  return cudaGetLastError();
}

cudaError_t LaunchReluBackward(float* dx, const float* dout, const float* out,
                               int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  ReluBackwardKernel<<<ElementwiseBlocks(n), kElementwiseThreads, 0, stream>>>(
      dx, dout, out, n);
  return cudaGetLastError();
}

}  // namespace trainyard::engine::cuda
