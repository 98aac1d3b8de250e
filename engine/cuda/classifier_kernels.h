// Launchers of the fused classifier kernels (classifier_kernels.cu):
// row-wise softmax cross-entropy and its gradient, the softmax never stored.
// Each returns the launch error, if any. Plain CUDA. Thread-safe.
#ifndef TRAINYARD_ENGINE_CUDA_CLASSIFIER_KERNELS_H_
#define TRAINYARD_ENGINE_CUDA_CLASSIFIER_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace trainyard::engine::cuda {

// losses[row] = log(sum) - (logit[target] - max) for each row of logits
// [rows, classes], NaN for a target outside [0, classes); hits[row] (unless
// hits is null) = 1 when the first largest logit is at the target, else 0;
// lse[row] (unless lse is null) = max + log(sum), the row's log-sum-exp, for
// the backward. The softmax is not stored. logits are activations (bf16
// when `bf16`); losses and lse fp32.
cudaError_t LaunchSoftmaxCrossEntropyForward(float* losses, int32_t* hits,
                                             float* lse, const void* logits,
                                             const int32_t* targets,
                                             int64_t rows, int64_t classes,
                                             bool bf16, cudaStream_t stream);

// dlogits = (softmax(logits) - onehot(target)) * scale, overwritten; the
// softmax is exp(logit - lse[row]) with the forward's lse, or recomputed
// from the logits (another read of them) when lse is null. dlogits may be
// logits (in place). Both are activations (bf16 when `bf16`).
cudaError_t LaunchSoftmaxCrossEntropyBackward(
    void* dlogits, const void* logits, const float* lse, const int32_t* targets,
    float scale, int64_t rows, int64_t classes, bool bf16, cudaStream_t stream);

// The forward, then the backward in place with the lse just taken, in one
// kernel: losses, hits and lse (hits and lse unless null) as the forward
// writes them, and `logits` overwritten by (softmax - onehot(target))
// * scale, the same bits as the two launches above. One block a row reads
// its row once, keeping it in shared memory for the gradient (rows of up to
// 112 KB; a longer row is read again, from L2 while it is there), where the
// two launches read the whole [rows, classes] twice from memory.
cudaError_t LaunchSoftmaxCrossEntropyForwardBackward(
    float* losses, int32_t* hits, float* lse, void* logits,
    const int32_t* targets, float scale, int64_t rows, int64_t classes,
    bool bf16, cudaStream_t stream);

}  // namespace trainyard::engine::cuda

#endif  // TRAINYARD_ENGINE_CUDA_CLASSIFIER_KERNELS_H_
