// Launchers of the reduction kernels (reduce_kernels.cu): the sum of squares
// the global gradient norm is made of, and the argmax hit count. Both leave
// their result in device memory for the backend to copy back. Each returns
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

// *hits (zeroed here first) = how many rows of logits [rows, classes] have
// their largest entry (the first, on ties) at targets[row]. Integer adds,
// so the count is exact whatever their order.
// logits are activations: bf16 when `bf16`.
cudaError_t LaunchCountArgmaxHits(unsigned long long* hits, const void* logits,
                                  const int32_t* targets, int64_t rows,
                                  int64_t classes, bool bf16,
                                  cudaStream_t stream);

}  // namespace trainyard::engine::cuda

#endif  // TRAINYARD_ENGINE_CUDA_REDUCE_KERNELS_H_
