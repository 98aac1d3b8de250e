// Launchers of the reduction kernels (reduce_kernels.cu): the sum of squares
// the global gradient norm is made of, left in device memory for the
// backend to copy back. Each returns
// the launch error, if any. Plain CUDA. Thread-safe.
#ifndef TRAINYARD_ENGINE_CUDA_REDUCE_KERNELS_H_
#define TRAINYARD_ENGINE_CUDA_REDUCE_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace trainyard::engine::cuda {

// Blocks of the first pass, and so the doubles of `partial` it needs.
inline constexpr int kSumSquaresMaxBlocks = 1024;

// *result = sum of x[i]^2 in double, summed in an order fixed by n alone
// (0 for n <= 0):
// each of min(ceil(n / 256), 1024) blocks sums a fixed grid-stride share
// and reduces it in a fixed tree into partial[block]; one thread then adds
// the partials in block order. `partial` holds kSumSquaresMaxBlocks doubles.
cudaError_t LaunchSumSquares(double* result, double* partial, const float* x,
                             int64_t n, cudaStream_t stream);

// Partials (blocks) a tensor of n elements takes: min(ceil(n / 256), 1024),
// 0 for n <= 0.
int64_t SumSquaresBlocks(int64_t n);

// Up to kSumSquaresBatchTensors tensors: x[t] of n[t] elements.
inline constexpr int kSumSquaresBatchTensors = 64;
struct SumSquaresBatch {
  const float* x[kSumSquaresBatchTensors];
  int64_t n[kSumSquaresBatchTensors];
  int count = 0;
};

// results[t] = LaunchSumSquares' sum for tensor t, bitwise, in one pair of
// launches. `partial` holds partial_capacity doubles, at least the sum of
// SumSquaresBlocks over the batch. cudaErrorInvalidValue, before anything
// is queued, for a count outside [0, kSumSquaresBatchTensors] or too small
// a partial_capacity.
cudaError_t LaunchSumSquaresBatch(double* results, double* partial,
                                  int64_t partial_capacity,
                                  const SumSquaresBatch& batch,
                                  cudaStream_t stream);

}  // namespace trainyard::engine::cuda

#endif  // TRAINYARD_ENGINE_CUDA_REDUCE_KERNELS_H_
