// Launchers of the linear layer's helper kernels (linear_kernels.cu): the
// bias broadcast the forward starts from when cuBLASLt's bias epilogue
// cannot take the bias pointer, and the bias gradient. The products
// themselves are cuBLASLt's (lt_gemm.h). Each returns the launch error, if
// any. Plain CUDA. Thread-safe.
#ifndef TRAINYARD_ENGINE_CUDA_LINEAR_KERNELS_H_
#define TRAINYARD_ENGINE_CUDA_LINEAR_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace trainyard::engine::cuda {

// out[r, c] = bias[c] for every row of out [rows, cols].
// out and bias are activations: bf16 when `bf16`.
cudaError_t LaunchBroadcastRows(void* out, const void* bias, int64_t rows,
                                int64_t cols, bool bf16, cudaStream_t stream);

// dbias[c] += sum over r of dout[r, c] (dout [rows, cols]), summed over row
// ranges into `scratch` (scratch_floats floats, at least 32) and then in
// range order: deterministic, no atomics (column_sums.cuh).
// dout is an activation gradient (bf16 when `bf16`); dbias fp32.
cudaError_t LaunchBiasGrad(float* dbias, const void* dout, int64_t rows,
                           int64_t cols, float* scratch, int64_t scratch_floats,
                           bool bf16, cudaStream_t stream);

}  // namespace trainyard::engine::cuda

#endif  // TRAINYARD_ENGINE_CUDA_LINEAR_KERNELS_H_
