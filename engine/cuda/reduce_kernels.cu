// Reductions: the sum of squares (in double, in a fixed order: a grid-stride
// share per thread, a fixed tree per block, then one thread over the blocks
// in order). The argmax hits come with the classifier (classifier_kernels).
#include "engine/cuda/block_reduce.cuh"
#include "engine/cuda/reduce_kernels.h"

namespace trainyard::engine::cuda {
namespace {

constexpr int kSumThreads = 256;

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

}  // namespace trainyard::engine::cuda
