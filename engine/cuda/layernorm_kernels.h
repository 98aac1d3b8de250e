// Launchers of the LayerNorm kernels (layernorm_kernels.cu). Each returns
// the launch error, if any. Plain CUDA. Thread-safe.
#ifndef TRAINYARD_ENGINE_CUDA_LAYERNORM_KERNELS_H_
#define TRAINYARD_ENGINE_CUDA_LAYERNORM_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace trainyard::engine::cuda {

// Per row of inp [rows, C]: out = (x - mean) * rstd * weight + bias, with
// rstd = 1 / sqrt(var + 1e-5); mean and rstd [rows] saved for backward.
// out, inp, weight and bias are activations (bf16 when `bf16`); mean and
// rstd fp32.
cudaError_t LaunchLayerNormForward(void* out, float* mean, float* rstd,
                                   const void* inp, const void* weight,
                                   const void* bias, int64_t rows,
                                   int64_t channels, bool bf16,
                                   cudaStream_t stream);

// The residual add fused into the LayerNorm: res = a + b (rounded to the
// activation type, as LaunchAdd does), then LaunchLayerNormForward's out,
// mean and rstd of res, in one pass over the rows.
cudaError_t LaunchAddLayerNormForward(void* res, void* out, float* mean,
                                      float* rstd, const void* a, const void* b,
                                      const void* weight, const void* bias,
                                      int64_t rows, int64_t channels, bool bf16,
                                      cudaStream_t stream);

// dinp += input gradient; dweight += sum over rows of norm * dout; dbias +=
// sum over rows of dout; and, when dinp_sums is not null, dinp_sums += sum
// over rows of dinp as left (as stored: the bias gradient of the linear
// layer whose output's gradient dinp is, taken while the row is at hand).
// All accumulated; the sums go through `scratch`, scratch_floats floats,
// at least 32 a sum. In one pass over the rows when they are whole
// 16-byte packs of at most 1,024 channels and the scratch holds a row of
// partials a sum (more makes it use more of the GPU, up to 264 blocks'
// worth), else in two (column_sums.cuh).
// dinp, dout, inp and weight are activations (bf16 when `bf16`: dinp's
// sum is taken in fp32 and rounded once); dweight, dbias, dinp_sums fp32.
cudaError_t LaunchLayerNormBackward(void* dinp, float* dweight, float* dbias,
                                    float* dinp_sums, const void* dout,
                                    const void* inp, const void* weight,
                                    const float* mean, const float* rstd,
                                    int64_t rows, int64_t channels,
                                    float* scratch, int64_t scratch_floats,
                                    bool bf16, cudaStream_t stream);

}  // namespace trainyard::engine::cuda

#endif  // TRAINYARD_ENGINE_CUDA_LAYERNORM_KERNELS_H_
