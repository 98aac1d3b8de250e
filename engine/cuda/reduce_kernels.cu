// Reductions: the sum of squares (in double, in a fixed order: a grid-stride
// share per thread, a fixed tree per block, then one thread over the blocks
// in order) and the argmax hit count (one block per row; ties go to the
// lowest index, as on the CPU).
#include "engine/cuda/act_type.cuh"
#include "engine/cuda/block_reduce.cuh"
#include "engine/cuda/reduce_kernels.h"

namespace trainyard::engine::cuda {
namespace {

constexpr int kSumThreads = 256;
constexpr int kArgmaxThreads = 256;

__global__ void SumSquaresPartialKernel(double* partial, const float* x,
                                        int64_t n) {
  double s = 0;
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    const double v = x[i];
    s += v * v;
  }
  s = BlockReduce(s, SumOp());
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void SumSquaresFinalKernel(double* result, const double* partial,
                                      int blocks) {
  double s = 0;
  for (int b = 0; b < blocks; ++b) s += partial[b];
  *result = s;
}

// The better of two (value, index) candidates: the larger value, the lower
// index on ties; index -1 means no candidate.
struct ArgMax {
  float value;
  int64_t index;
};
__device__ __forceinline__ ArgMax Better(ArgMax a, ArgMax b) {
  if (a.index < 0) return b;
  if (b.index < 0) return a;
  if (b.value > a.value || (b.value == a.value && b.index < a.index)) return b;
  return a;
}

template <typename T>
__global__ void CountArgmaxHitsKernel(unsigned long long* hits, const T* logits,
                                      const int32_t* targets, int64_t classes) {
  const T* x = logits + static_cast<int64_t>(blockIdx.x) * classes;
  ArgMax best{0.f, -1};
  // Each thread walks its columns in ascending order: a strict > keeps the
  // first of equal values.
  for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) {
    const float v = Ld(x + c);
    if (best.index < 0 || v > best.value) best = ArgMax{v, c};
  }
  __shared__ ArgMax candidates[kArgmaxThreads];
  candidates[threadIdx.x] = best;
  __syncthreads();
  for (int width = kArgmaxThreads / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) {
      candidates[threadIdx.x] =
          Better(candidates[threadIdx.x], candidates[threadIdx.x + width]);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0 && candidates[0].index == targets[blockIdx.x]) {
    atomicAdd(hits, 1ull);
  }
}

}  // namespace

cudaError_t LaunchSumSquares(double* result, double* partial, const float* x,
                             int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaMemsetAsync(result, 0, sizeof(double), stream);
  const int64_t wanted = (n + kSumThreads - 1) / kSumThreads;
  const int blocks = static_cast<int>(
      wanted < kSumSquaresMaxBlocks ? wanted : kSumSquaresMaxBlocks);
  SumSquaresPartialKernel<<<blocks, kSumThreads, 0, stream>>>(partial, x, n);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  SumSquaresFinalKernel<<<1, 1, 0, stream>>>(result, partial, blocks);
  return cudaGetLastError();
}

cudaError_t LaunchCountArgmaxHits(unsigned long long* hits, const void* logits,
                                  const int32_t* targets, int64_t rows,
                                  int64_t classes, bool bf16,
                                  cudaStream_t stream) {
  cudaError_t e = cudaMemsetAsync(hits, 0, sizeof(*hits), stream);
  if (e != cudaSuccess || rows <= 0 || classes <= 0) return e;
  if (rows > 0x7fffffff) return cudaErrorInvalidValue;  // one block per row
  return DispatchAct(bf16, [&](auto t) {
    using T = decltype(t);
    CountArgmaxHitsKernel<<<static_cast<unsigned>(rows), kArgmaxThreads, 0,
                            stream>>>(hits, As<T>(logits), targets, classes);
    return cudaGetLastError();
  });
}

}  // namespace trainyard::engine::cuda
