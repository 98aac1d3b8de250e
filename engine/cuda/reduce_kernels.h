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

// *result = sum of x[i]^2 in double, summed in an order fixed by n alone:
// each of min(ceil(n / 256), 1024) blocks sums a fixed grid-stride share
// and reduces it in a fixed tree into partial[block]; one thread then adds
// the partials in block order. `partial` holds kSumSquaresMaxBlocks doubles.
cudaError_t LaunchSumSquares(double* result, double* partial, const float* x,
                             int64_t n, cudaStream_t stream);

}  // namespace trainyard::engine::cuda

#endif  // TRAINYARD_ENGINE_CUDA_REDUCE_KERNELS_H_
