// The linear layer's own kernels: broadcasting a bias into every row (16
// bytes a copy when the rows are whole 16-byte packs, vec16.cuh, else an
// element a copy), and the bias gradient as deterministic column sums
// (column_sums.cuh; a pack a thread when the rows are whole packs).
#include "engine/cuda/act_type.cuh"
#include "engine/cuda/block_reduce.cuh"
#include "engine/cuda/column_sums.cuh"
#include "engine/cuda/linear_kernels.h"
#include "engine/cuda/vec16.cuh"

namespace trainyard::engine::cuda {
namespace {

// `packed`: cols a multiple of the pack and both arrays 16-byte aligned,
// so every row is whole packs, copied 16 bytes at a time.
template <typename T>
__global__ void BroadcastRowsKernel(T* out, const T* bias, int64_t rows,
                                    int64_t cols, bool packed) {
  const int64_t n = rows * cols;
  if (packed) {
    for (int64_t p = GridStart(); p < n / kPack<T>; p += GridStride()) {
      const int64_t i = p * kPack<T>;
      Copy16(out + i, bias + i % cols);
    }
    return;
  }
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    out[i] = bias[i % cols];  // a copy: exact in either type
  }
}

// dout's columns c .. c + W - 1 of row r: a pack when W is one.
template <typename T, int W>
struct BiasGradTerm {
  const T* dout;
  int64_t cols;
  __device__ void operator()(int64_t r, int64_t c, float (&v)[1][W]) const {
    if constexpr (W == kPack<T>) {
      LdPack(dout + r * cols + c, v[0]);
    } else {
      static_assert(W == 1);
      v[0][0] = Ld(dout + r * cols + c);
    }
  }
};

}  // namespace

cudaError_t LaunchBroadcastRows(void* out, const void* bias, int64_t rows,
                                int64_t cols, bool bf16, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  return DispatchAct(bf16, [&](auto t) {
    using T = decltype(t);
    const int64_t n = rows * cols;
    const bool packed = RowsArePacks<T>(cols, out, bias);
    BroadcastRowsKernel<<<ElementwiseBlocks(packed ? n / kPack<T> : n),
                          kElementwiseThreads, 0, stream>>>(
        As<T>(out), As<T>(bias), rows, cols, packed);
    return cudaGetLastError();
  });
}

cudaError_t LaunchBiasGrad(float* dbias, const void* dout, int64_t rows,
                           int64_t cols, float* scratch, int64_t scratch_floats,
                           bool bf16, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  return DispatchAct(bf16, [&](auto t) {
    using T = decltype(t);
    if (RowsArePacks<T>(cols, dout)) {
      return LaunchColumnSums<1, kPack<T>>(
          {{dbias}}, scratch, scratch_floats, rows, cols,
          BiasGradTerm<T, kPack<T>>{As<T>(dout), cols}, stream);
    }
    return LaunchColumnSums<1>({{dbias}}, scratch, scratch_floats, rows, cols,
                               BiasGradTerm<T, 1>{As<T>(dout), cols}, stream);
  });
}

}  // namespace trainyard::engine::cuda
