// Launchers of the LayerNorm kernels (layernorm_kernels.cu). Each returns
// the launch error, if any. Plain CUDA. Thread-safe.
#ifndef TRAINYARD_ENGINE_CUDA_LAYERNORM_KERNELS_H_
#define TRAINYARD_ENGINE_CUDA_LAYERNORM_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace trainyard::engine::cuda {

// Per row of inp [rows, C]: out = (x - mean) * rstd * weight + bias, with
// rstd = 1 / sqrt(var + 1e-5); mean and rstd [rows] saved for backward.
cudaError_t LaunchLayerNormForward(float* out, float* mean, float* rstd,
                                   const float* inp, const float* weight,
                                   const float* bias, int64_t rows,
                                   int64_t channels, cudaStream_t stream);

// dinp += input gradient; dweight += sum over rows of norm * dout; dbias +=
// sum over rows of dout (all accumulated).
cudaError_t LaunchLayerNormBackward(float* dinp, float* dweight, float* dbias,
                                    const float* dout, const float* inp,
                                    const float* weight, const float* mean,
                                    const float* rstd, int64_t rows,
                                    int64_t channels, cudaStream_t stream);

}  // namespace trainyard::engine::cuda

#endif  // TRAINYARD_ENGINE_CUDA_LAYERNORM_KERNELS_H_
