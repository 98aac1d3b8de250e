// Softmax cross-entropy over rows of logits: one block per row. The forward
// takes the row's max, then the sum of exp(x - max) (each thread over a
// fixed strided share, combined in BlockReduce's fixed order), then writes
// probabilities as exp(x - max) / sum and the loss in log-sum-exp form
// (exact even when the target's probability underflows), as the CPU
// backend does. The backward is elementwise per row.
#include <cmath>

#include "engine/cuda/act_type.cuh"
#include "engine/cuda/block_reduce.cuh"
#include "engine/cuda/classifier_kernels.h"

namespace trainyard::engine::cuda {
namespace {

constexpr int kRowThreads = 512;

template <typename T>
__global__ void SoftmaxCrossEntropyForwardKernel(float* probs, float* losses,
                                                 const T* logits,
                                                 const int32_t* targets,
                                                 int64_t classes) {
  const int64_t row = blockIdx.x;
  const T* x = logits + row * classes;
  float* p = probs + row * classes;
  float max = -INFINITY;
  for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) {
    max = fmaxf(max, Ld(x + c));
  }
  max = BlockReduce(max, MaxOp());
  float sum = 0.f;
  for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) {
    sum += expf(Ld(x + c) - max);
  }
  sum = BlockReduce(sum, SumOp());
  const float inv = 1.f / sum;
  for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) {
    p[c] = expf(Ld(x + c) - max) * inv;
  }
  if (threadIdx.x == 0) {
    const int32_t t = targets[row];
    losses[row] =
        t >= 0 && t < classes ? logf(sum) - (Ld(x + t) - max) : nanf("");
  }
}

template <typename T>
__global__ void SoftmaxCrossEntropyBackwardKernel(T* dlogits,
                                                  const float* probs,
                                                  const int32_t* targets,
                                                  float scale,
                                                  int64_t classes) {
  const int64_t row = blockIdx.x;
  const float* p = probs + row * classes;
  T* d = dlogits + row * classes;
  const int64_t t = targets[row];
  for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) {
    St(d + c, (p[c] - (c == t ? 1.f : 0.f)) * scale);
  }
}

}  // namespace

cudaError_t LaunchSoftmaxCrossEntropyForward(float* probs, float* losses,
                                             const void* logits,
                                             const int32_t* targets,
                                             int64_t rows, int64_t classes,
                                             bool bf16, cudaStream_t stream) {
  if (rows <= 0 || classes <= 0) return cudaSuccess;
  if (rows > 0x7fffffff) return cudaErrorInvalidValue;  // one block per row
  return DispatchAct(bf16, [&](auto t) {
    using T = decltype(t);
    SoftmaxCrossEntropyForwardKernel<<<static_cast<unsigned>(rows), kRowThreads,
                                       0, stream>>>(
        probs, losses, As<T>(logits), targets, classes);
    return cudaGetLastError();
  });
}

cudaError_t LaunchSoftmaxCrossEntropyBackward(void* dlogits, const float* probs,
                                              const int32_t* targets,
                                              float scale, int64_t rows,
                                              int64_t classes, bool bf16,
                                              cudaStream_t stream) {
  if (rows <= 0 || classes <= 0) return cudaSuccess;
  if (rows > 0x7fffffff) return cudaErrorInvalidValue;
  return DispatchAct(bf16, [&](auto t) {
    using T = decltype(t);
    SoftmaxCrossEntropyBackwardKernel<<<static_cast<unsigned>(rows),
                                        kRowThreads, 0, stream>>>(
        As<T>(dlogits), probs, targets, scale, classes);
    return cudaGetLastError();
  });
}

}  // namespace trainyard::engine::cuda
