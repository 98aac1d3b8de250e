// Launcher of the fused AdamW kernel (adamw_kernels.cu). Returns the launch
// error, if any. Plain CUDA. Thread-safe.
#ifndef TRAINYARD_ENGINE_CUDA_ADAMW_KERNELS_H_
#define TRAINYARD_ENGINE_CUDA_ADAMW_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace trainyard::engine::cuda {

// The fields of engine::AdamWUpdate (core/backend.h), copied so this header
// needs nothing beyond CUDA.
struct AdamWStep {
  float lr, beta1, beta2, eps, weight_decay, grad_scale;
  float bias_correction1, bias_correction2;
};

// One AdamW update of n parameters, their moments updated in place:
//   g = grad * grad_scale
//   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
//   p -= lr * (m / bc1 / (sqrt(v / bc2) + eps) + weight_decay * p)
// When `working_bf16` is not null, the updated parameter is also stored
// there, rounded to bf16 (to nearest even): the working copy the ops read.
cudaError_t LaunchAdamW(float* param, const float* grad, float* m, float* v,
                        void* working_bf16, int64_t n, const AdamWStep& step,
                        cudaStream_t stream);

// One tensor of a batched update, with its own weight decay (the step's
// weight_decay is not used).
struct AdamWTensorArgs {
  float* param;
  const float* grad;
  float* m;
  float* v;
  void* working_bf16;  // may be null
  int64_t n;
  float weight_decay;
};

// Tensors per batched launch: the batch travels as the kernel's argument
// (64 x 56 bytes and a block table, within the 4 KiB of parameters every
// CUDA version takes).
inline constexpr int kAdamWBatchTensors = 64;
struct AdamWBatch {
  AdamWTensorArgs tensors[kAdamWBatchTensors];
  int count = 0;
};

// LaunchAdamW for each of batch.count tensors, in one launch; bitwise the
// same as one launch per tensor. cudaErrorInvalidValue for a count outside
// [0, kAdamWBatchTensors] (or more than 2^31 blocks of work).
cudaError_t LaunchAdamWBatch(const AdamWBatch& batch, const AdamWStep& step,
                             cudaStream_t stream);

}  // namespace trainyard::engine::cuda

#endif  // TRAINYARD_ENGINE_CUDA_ADAMW_KERNELS_H_
