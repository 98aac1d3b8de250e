// AdamW, fused: one pass reads each parameter, its gradient and both
// moments once and writes the parameter and moments back. The arithmetic
// is the CPU backend's, term for term, so the two differ only where nvcc
// contracts a multiply and an add into one FMA. Under mixed precision the
// same pass writes the bf16 working copy, so the update costs no extra read
// of the masters. One launch updates up to kAdamWBatchTensors tensors (a
// run of blocks per tensor; a single tensor is a batch of one), so a
// model's step takes a launch or a few, not one per parameter tensor.
#include <cmath>

#include "engine/cuda/act_type.cuh"
#include "engine/cuda/adamw_kernels.h"
#include "engine/cuda/block_reduce.cuh"

namespace trainyard::engine::cuda {
namespace {

// Element i of one tensor (adamw_kernels.h has the formulas).
__device__ __forceinline__ void AdamWElement(float* param, const float* grad,
                                             float* m, float* v, bf16* working,
                                             int64_t i, const AdamWStep& u,
                                             float weight_decay) {
  const float g = grad[i] * u.grad_scale;
  const float mi = u.beta1 * m[i] + (1.f - u.beta1) * g;
  const float vi = u.beta2 * v[i] + (1.f - u.beta2) * g * g;
  m[i] = mi;
  v[i] = vi;
  const float m_hat = mi / u.bias_correction1;
  const float v_hat = vi / u.bias_correction2;
  const float p = param[i];
  const float updated =
      p - u.lr * (m_hat / (sqrtf(v_hat) + u.eps) + weight_decay * p);
  param[i] = updated;
  if (working != nullptr) St(working + i, updated);
}

// Each tensor gets ceil(n / kChunk) consecutive blocks, and a block the
// kChunk elements at its offset among them; block_start[t] is tensor t's
// first block, block_start[count] the grid's size. So the grid is as large
// as the work, however the sizes are spread.
constexpr int64_t kChunk = 8 * kElementwiseThreads;

struct AdamWLaunch {
  AdamWBatch batch;
  int32_t block_start[kAdamWBatchTensors + 1];
};
static_assert(sizeof(AdamWLaunch) + sizeof(AdamWStep) <= 4096,
              "kernel parameters");

__global__ void AdamWBatchKernel(AdamWLaunch launch, AdamWStep u) {
  // The last tensor starting at or before this block (binary search; a
  // tensor of no elements has no blocks and is never found).
  const int32_t block = static_cast<int32_t>(blockIdx.x);
  int lo = 0, hi = launch.batch.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (launch.block_start[mid] <= block) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const AdamWTensorArgs& t = launch.batch.tensors[lo];
  const int64_t base = (block - launch.block_start[lo]) * kChunk;
  const int64_t end = base + kChunk < t.n ? base + kChunk : t.n;
  for (int64_t i = base + threadIdx.x; i < end; i += blockDim.x) {
    AdamWElement(t.param, t.grad, t.m, t.v, static_cast<bf16*>(t.working_bf16),
                 i, u, t.weight_decay);
  }
}

}  // namespace

cudaError_t LaunchAdamW(float* param, const float* grad, float* m, float* v,
                        void* working_bf16, int64_t n, const AdamWStep& step,
                        cudaStream_t stream) {
  AdamWBatch one;
  one.tensors[0] = {param, grad, m, v, working_bf16, n, step.weight_decay};
  one.count = 1;
  return LaunchAdamWBatch(one, step, stream);
}

cudaError_t LaunchAdamWBatch(const AdamWBatch& batch, const AdamWStep& step,
                             cudaStream_t stream) {
  if (batch.count < 0 || batch.count > kAdamWBatchTensors) {
    return cudaErrorInvalidValue;
  }
  AdamWLaunch launch{batch, {}};
  int64_t blocks = 0;
  for (int i = 0; i < batch.count; ++i) {
    launch.block_start[i] = static_cast<int32_t>(blocks);
    const int64_t n = batch.tensors[i].n;
    blocks += n > 0 ? (n + kChunk - 1) / kChunk : 0;
    if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  }
  launch.block_start[batch.count] = static_cast<int32_t>(blocks);
  if (blocks == 0) return cudaSuccess;
  AdamWBatchKernel<<<static_cast<unsigned>(blocks), kElementwiseThreads, 0,
                     stream>>>(launch, step);
  return cudaGetLastError();
}

}  // namespace trainyard::engine::cuda
