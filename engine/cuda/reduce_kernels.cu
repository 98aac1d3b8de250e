// Reductions: the sum of squares (in double, in a fixed order: a grid-stride
// share per thread, a fixed tree per block, then one thread over the blocks
// in order), of up to kSumSquaresBatchTensors tensors per launch pair: each
// tensor gets its own run of blocks (as many as it would get alone) and its
// own final thread, so its sum has the same bits in a batch as alone. The
// argmax hits come with the classifier (classifier_kernels).
#include "engine/cuda/block_reduce.cuh"
#include "engine/cuda/reduce_kernels.h"

namespace trainyard::engine::cuda {
namespace {

constexpr int kSumThreads = 256;

// The batch with each tensor's first block (and partial): block_start[t],
// block_start[count] the grid's size.
struct SumSquaresLaunch {
  SumSquaresBatch batch;
  int32_t block_start[kSumSquaresBatchTensors + 1];
};
static_assert(sizeof(SumSquaresLaunch) + 2 * sizeof(void*) <= 4096,
              "kernel parameters");

// The last tensor whose blocks start at or before `block` (a tensor of no
// elements has no blocks, so it is never the one found).
__device__ int TensorOfBlock(const SumSquaresLaunch& launch, int32_t block) {
  int lo = 0, hi = launch.batch.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (launch.block_start[mid] <= block) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// Block b of tensor t's run does what block b of a launch of its blocks
// alone would: a grid-stride share over the run, then the block's tree.
__global__ void SumSquaresPartialKernel(double* partial,
                                        SumSquaresLaunch launch) {
  const int32_t block = static_cast<int32_t>(blockIdx.x);
  const int t = TensorOfBlock(launch, block);
  const float* x = launch.batch.x[t];
  const int64_t n = launch.batch.n[t];
  const int64_t run = launch.block_start[t + 1] - launch.block_start[t];
  double s = 0;
  for (int64_t i =
           (block - launch.block_start[t]) * int64_t{kSumThreads} + threadIdx.x;
       i < n; i += run * kSumThreads) {
    const double v = x[i];
    s += v * v;
  }
  s = BlockReduce(s, SumOp());
  if (threadIdx.x == 0) partial[block] = s;
}

// Thread t adds tensor t's partials in block order (0 for no blocks).
__global__ void SumSquaresFinalKernel(double* results, const double* partial,
                                      SumSquaresLaunch launch) {
  const int t = static_cast<int>(threadIdx.x);
  if (t >= launch.batch.count) return;
  double s = 0;
  for (int32_t b = launch.block_start[t]; b < launch.block_start[t + 1]; ++b) {
    s += partial[b];
  }
  results[t] = s;
}

}  // namespace

int64_t SumSquaresBlocks(int64_t n) {
  if (n <= 0) return 0;
  const int64_t wanted = (n + kSumThreads - 1) / kSumThreads;
  return wanted < kSumSquaresMaxBlocks ? wanted : kSumSquaresMaxBlocks;
}

cudaError_t LaunchSumSquaresBatch(double* results, double* partial,
                                  int64_t partial_capacity,
                                  const SumSquaresBatch& batch,
                                  cudaStream_t stream) {
  if (batch.count < 0 || batch.count > kSumSquaresBatchTensors) {
    return cudaErrorInvalidValue;
  }
  if (batch.count == 0) return cudaSuccess;
  SumSquaresLaunch launch{batch, {}};
  int64_t blocks = 0;
  for (int t = 0; t < batch.count; ++t) {
    launch.block_start[t] = static_cast<int32_t>(blocks);
    blocks += SumSquaresBlocks(batch.n[t]);
  }
  launch.block_start[batch.count] = static_cast<int32_t>(blocks);
  if (blocks > partial_capacity) return cudaErrorInvalidValue;
  if (blocks > 0) {
    SumSquaresPartialKernel<<<static_cast<unsigned>(blocks), kSumThreads, 0,
                              stream>>>(partial, launch);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  SumSquaresFinalKernel<<<1, kSumSquaresBatchTensors, 0, stream>>>(
      results, partial, launch);
  return cudaGetLastError();
}

cudaError_t LaunchSumSquares(double* result, double* partial, const float* x,
                             int64_t n, cudaStream_t stream) {
  SumSquaresBatch one;
  one.x[0] = x;
  one.n[0] = n;
  one.count = 1;
  return LaunchSumSquaresBatch(result, partial, kSumSquaresMaxBlocks, one,
                               stream);
}

}  // namespace trainyard::engine::cuda
