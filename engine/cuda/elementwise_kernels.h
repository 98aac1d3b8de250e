// Launchers of the elementwise kernels (elementwise_kernels.cu): fill,
// scale, add and ReLU. Each queues its kernel on `stream` and returns the
// launch error, if any; nothing is launched for n == 0. Plain CUDA (no
// Abseil), so nvcc compiles only what it must. Thread-safe.
#ifndef TRAINYARD_ENGINE_CUDA_ELEMENTWISE_KERNELS_H_
#define TRAINYARD_ENGINE_CUDA_ELEMENTWISE_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace trainyard::engine::cuda {

// x[i] = value
cudaError_t LaunchFill(float* x, int64_t n, float value, cudaStream_t stream);
// x[i] *= s
cudaError_t LaunchScale(float* x, int64_t n, float s, cudaStream_t stream);
// out[i] = a[i] + b[i]; out may alias a or b.
cudaError_t LaunchAdd(float* out, const float* a, const float* b, int64_t n,
                      cudaStream_t stream);
// out[i] = max(x[i], 0); out may alias x.
cudaError_t LaunchReluForward(float* out, const float* x, int64_t n,
                              cudaStream_t stream);
// dx[i] = out[i] > 0 ? dout[i] : 0; dx may alias dout.
cudaError_t LaunchReluBackward(float* dx, const float* dout, const float* out,
                               int64_t n, cudaStream_t stream);

}  // namespace trainyard::engine::cuda

#endif  // TRAINYARD_ENGINE_CUDA_ELEMENTWISE_KERNELS_H_
