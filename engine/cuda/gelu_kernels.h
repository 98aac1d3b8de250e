// Launchers of the GELU kernels (gelu_kernels.cu). Each returns the launch
// error, if any. Plain CUDA. Thread-safe.
#ifndef TRAINYARD_ENGINE_CUDA_GELU_KERNELS_H_
#define TRAINYARD_ENGINE_CUDA_GELU_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace trainyard::engine::cuda {

// out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); out may alias x.
// Activations: bf16 when `bf16`, else fp32.
cudaError_t LaunchGeluForward(void* out, const void* x, int64_t n, bool bf16,
                              cudaStream_t stream);
// dx = gelu'(x) * dout; dx may alias dout.
cudaError_t LaunchGeluBackward(void* dx, const void* x, const void* dout,
                               int64_t n, bool bf16, cudaStream_t stream);

}  // namespace trainyard::engine::cuda

#endif  // TRAINYARD_ENGINE_CUDA_GELU_KERNELS_H_
