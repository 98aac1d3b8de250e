// AdamW, fused: one pass reads each parameter, its gradient and both
// moments once and writes the parameter and moments back. The arithmetic
// is the CPU backend's, term for term, so the two differ only where nvcc
// contracts a multiply and an add into one FMA. Under mixed precision the
// same pass writes the bf16 working copy, so the update costs no extra read
// of the masters.
#include <cmath>

#include "engine/cuda/act_type.cuh"
#include "engine/cuda/adamw_kernels.h"
#include "engine/cuda/block_reduce.cuh"

namespace trainyard::engine::cuda {
namespace {

__global__ void AdamWKernel(float* param, const float* grad, float* m, float* v,
                            bf16* working, int64_t n, AdamWStep u) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    const float g = grad[i] * u.grad_scale;
    const float mi = u.beta1 * m[i] + (1.f - u.beta1) * g;
    const float vi = u.beta2 * v[i] + (1.f - u.beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float m_hat = mi / u.bias_correction1;
    const float v_hat = vi / u.bias_correction2;
    const float p = param[i];
    const float updated =
        p - u.lr * (m_hat / (sqrtf(v_hat) + u.eps) + u.weight_decay * p);
    param[i] = updated;
    if (working != nullptr) St(working + i, updated);
  }
}

}  // namespace

cudaError_t LaunchAdamW(float* param, const float* grad, float* m, float* v,
                        void* working_bf16, int64_t n, const AdamWStep& step,
                        cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  AdamWKernel<<<ElementwiseBlocks(n), kElementwiseThreads, 0, stream>>>(
      param, grad, m, v, static_cast<bf16*>(working_bf16), n, step);
  return cudaGetLastError();
}

}  // namespace trainyard::engine::cuda
