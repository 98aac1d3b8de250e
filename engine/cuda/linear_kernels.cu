// The linear layer's own kernels: broadcasting a bias into every row, and
// the bias gradient as column sums. A column sum block is 32 columns x 32
// row lanes: lane y sums rows y, y + 32, ... of its column in ascending
// order (a warp reads 32 adjacent columns of one row: coalesced), then lane
// 0 adds the 32 partial sums in lane order.
#include "engine/cuda/act_type.cuh"
#include "engine/cuda/block_reduce.cuh"
#include "engine/cuda/linear_kernels.h"

namespace trainyard::engine::cuda {
namespace {

constexpr int kTile = 32;

template <typename T>
__global__ void BroadcastRowsKernel(T* out, const T* bias, int64_t rows,
                                    int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    out[i] = bias[i % cols];  // a copy: exact in either type
  }
}

template <typename T>
__global__ void BiasGradKernel(float* dbias, const T* dout, int64_t rows,
                               int64_t cols) {
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kTile + threadIdx.x;
  float sum = 0.f;
  if (col < cols) {
    for (int64_t r = threadIdx.y; r < rows; r += kTile) {
      sum += Ld(dout + r * cols + col);
    }
  }
  __shared__ float partial[kTile][kTile + 1];
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    float total = 0.f;
    for (int y = 0; y < kTile; ++y) total += partial[y][threadIdx.x];
    dbias[col] += total;
  }
}

}  // namespace

cudaError_t LaunchBroadcastRows(void* out, const void* bias, int64_t rows,
                                int64_t cols, bool bf16, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  return DispatchAct(bf16, [&](auto t) {
    using T = decltype(t);
    BroadcastRowsKernel<<<ElementwiseBlocks(rows * cols), kElementwiseThreads,
                          0, stream>>>(As<T>(out), As<T>(bias), rows, cols);
    return cudaGetLastError();
  });
}

cudaError_t LaunchBiasGrad(float* dbias, const void* dout, int64_t rows,
                           int64_t cols, bool bf16, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  const dim3 block(kTile, kTile);
  return DispatchAct(bf16, [&](auto t) {
    using T = decltype(t);
    BiasGradKernel<<<static_cast<unsigned>((cols + kTile - 1) / kTile), block,
                     0, stream>>>(dbias, As<T>(dout), rows, cols);
    return cudaGetLastError();
  });
}

}  // namespace trainyard::engine::cuda
