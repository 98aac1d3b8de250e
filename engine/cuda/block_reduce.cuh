// Device helpers shared by the kernels: grid-stride launch shapes for
// elementwise work, and warp and block reductions whose combining order is
// fixed by the launch shape alone, so a reduction gives bitwise the same
// result on every call (the backend's determinism contract).
#ifndef TRAINYARD_ENGINE_CUDA_BLOCK_REDUCE_CUH_
#define TRAINYARD_ENGINE_CUDA_BLOCK_REDUCE_CUH_

#include <cuda_runtime.h>

#include <cstdint>

namespace trainyard::engine::cuda {

inline constexpr int kElementwiseThreads = 256;

// Blocks for a grid-stride loop over n elements: enough to fill any GPU,
// never more than the elements need. n > 0.
inline unsigned ElementwiseBlocks(int64_t n) {
  const int64_t blocks = (n + kElementwiseThreads - 1) / kElementwiseThreads;
  return static_cast<unsigned>(blocks < 8192 ? blocks : 8192);
}

__device__ __forceinline__ int64_t GridStart() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t GridStride() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

struct SumOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return a + b;
  }
};
struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const {
    return fmaxf(a, b);
  }
};

// Butterfly over the warp: a + b == b + a exactly, so every lane ends with
// bitwise the same value. REQUIRES: all 32 lanes call it.
template <typename T, typename Op>
__device__ __forceinline__ T WarpReduce(T v, Op op) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

// Reduces v over the block and returns the result to every thread: warps
// reduce, then every thread combines the warps' values in warp order.
// REQUIRES: blockDim.x a multiple of 32 (at most 1024); every thread of
// the block calls it (it synchronizes the block).
template <typename T, typename Op>
__device__ T BlockReduce(T v, Op op) {
  __shared__ T warp_values[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = WarpReduce(v, op);
  __syncthreads();  // a previous call's readers are done with warp_values
  if (lane == 0) warp_values[warp] = v;
  __syncthreads();
  T result = warp_values[0];
  for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) {
    result = op(result, warp_values[w]);
  }
  return result;
}

}  // namespace trainyard::engine::cuda

#endif  // TRAINYARD_ENGINE_CUDA_BLOCK_REDUCE_CUH_
