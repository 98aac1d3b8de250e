// Softmax cross-entropy over rows of logits: one block per row. The forward
// takes the row's max, then the sum of exp(x - max) (each thread over a
// fixed strided share, combined in BlockReduce's fixed order), then writes
// probabilities as exp(x - max) / sum and the loss in log-sum-exp form
// (exact even when the target's probability underflows), as the CPU
// backend does. The backward is elementwise per row.
#include <cmath>

#include "engine/cuda/block_reduce.cuh"
#include "engine/cuda/classifier_kernels.h"

namespace trainyard::engine::cuda {
namespace {

constexpr int kRowThreads = 512;

__global__ void SoftmaxCrossEntropyForwardKernel(float* probs, float* losses,
                                                 const float* logits,
                                                 const int32_t* targets,
                                                 int64_t classes) {
  const int64_t row = blockIdx.x;
  const float* x = logits + row * classes;
  float* p = probs + row * classes;
  float max = -INFINITY;
  for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) {
    max = fmaxf(max, x[c]);
  }
  max = BlockReduce(max, MaxOp());
  float sum = 0.f;
  for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) {
    sum += expf(x[c] - max);
  }
  sum = BlockReduce(sum, SumOp());
  const float inv = 1.f / sum;
  for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) {
    p[c] = expf(x[c] - max) * inv;
  }
  if (threadIdx.x == 0) {
    const int32_t t = targets[row];
    losses[row] = t >= 0 && t < classes ? logf(sum) - (x[t] - max) : nanf("");
  }
}

__global__ void SoftmaxCrossEntropyBackwardKernel(float* dlogits,
                                                  const float* probs,
                                                  const int32_t* targets,
                                                  float scale,
                                                  int64_t classes) {
  const int64_t row = blockIdx.x;
  const float* p = probs + row * classes;
  float* d = dlogits + row * classes;
  const int64_t t = targets[row];
  for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) {
    d[c] = (p[c] - (c == t ? 1.f : 0.f)) * scale;
  }
}

}  // namespace

cudaError_t LaunchSoftmaxCrossEntropyForward(float* probs, float* losses,
                                             const float* logits,
                                             const int32_t* targets,
                                             int64_t rows, int64_t classes,
                                             cudaStream_t stream) {
  if (rows <= 0 || classes <= 0) return cudaSuccess;
  if (rows > 0x7fffffff) return cudaErrorInvalidValue;  // one block per row
  SoftmaxCrossEntropyForwardKernel<<<static_cast<unsigned>(rows), kRowThreads,
                                     0, stream>>>(probs, losses, logits,
                                                  targets, classes);
  return cudaGetLastError();
}

cudaError_t LaunchSoftmaxCrossEntropyBackward(
    float* dlogits, const float* probs, const int32_t* targets, float scale,
    int64_t rows, int64_t classes, cudaStream_t stream) {
  if (rows <= 0 || classes <= 0) return cudaSuccess;
  if (rows > 0x7fffffff) return cudaErrorInvalidValue;
  SoftmaxCrossEntropyBackwardKernel<<<static_cast<unsigned>(rows), kRowThreads,
                                      0, stream>>>(dlogits, probs, targets,
                                                   scale, classes);
  return cudaGetLastError();
}

}  // namespace trainyard::engine::cuda
