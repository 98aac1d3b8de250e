// Launchers of the elementwise kernels (elementwise_kernels.cu): fill,
// scale, add, ReLU and the fp32 -> activation cast. void pointers are
// activations, bf16 when `bf16` is set, else fp32. Each queues its kernel on
// `stream` and returns the launch error, if any; nothing is launched for n ==
// 0. Plain CUDA (no Abseil), so nvcc compiles only what it must. Thread-safe.
#ifndef TRAINYARD_ENGINE_CUDA_ELEMENTWISE_KERNELS_H_
#define TRAINYARD_ENGINE_CUDA_ELEMENTWISE_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace trainyard::engine::cuda {

// x[i] = value
cudaError_t LaunchFill(float* x, int64_t n, float value, cudaStream_t stream);
// x[i] *= s
cudaError_t LaunchScale(float* x, int64_t n, float s, cudaStream_t stream);
// x[i] = value, for an activation tensor.
cudaError_t LaunchFillAct(void* x, int64_t n, float value, bool bf16,
                          cudaStream_t stream);
// dst[i] = src[i], rounded to nearest even when dst is bf16.
cudaError_t LaunchCastToAct(void* dst, const float* src, int64_t n, bool bf16,
                            cudaStream_t stream);
// out[i] = a[i] + b[i]; out may alias a or b.
cudaError_t LaunchAdd(void* out, const void* a, const void* b, int64_t n,
                      bool bf16, cudaStream_t stream);
// out[i] = max(x[i], 0); out may alias x.
cudaError_t LaunchReluForward(void* out, const void* x, int64_t n, bool bf16,
                              cudaStream_t stream);
// dx[i] = out[i] > 0 ? dout[i] : 0; dx may alias dout.
cudaError_t LaunchReluBackward(void* dx, const void* dout, const void* out,
                               int64_t n, bool bf16, cudaStream_t stream);

}  // namespace trainyard::engine::cuda

#endif  // TRAINYARD_ENGINE_CUDA_ELEMENTWISE_KERNELS_H_
