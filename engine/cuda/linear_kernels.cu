// The linear layer's own kernels: broadcasting a bias into every row, and
// the bias gradient as deterministic column sums (column_sums.cuh).
#include "engine/cuda/act_type.cuh"
#include "engine/cuda/block_reduce.cuh"
#include "engine/cuda/column_sums.cuh"
#include "engine/cuda/linear_kernels.h"

namespace trainyard::engine::cuda {
namespace {

template <typename T>
__global__ void BroadcastRowsKernel(T* out, const T* bias, int64_t rows,
                                    int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    out[i] = bias[i % cols];  // a copy: exact in either type
  }
}

template <typename T>
struct BiasGradTerm {
  const T* dout;
  int64_t cols;
  __device__ void operator()(int64_t r, int64_t c, float (&v)[1]) const {
    v[0] = Ld(dout + r * cols + c);
  }
};

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
                           int64_t cols, float* scratch, int64_t scratch_floats,
                           bool bf16, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  return DispatchAct(bf16, [&](auto t) {
    using T = decltype(t);
    return LaunchColumnSums<1>({{dbias}}, scratch, scratch_floats, rows, cols,
                               BiasGradTerm<T>{As<T>(dout), cols}, stream);
  });
}

}  // namespace trainyard::engine::cuda
