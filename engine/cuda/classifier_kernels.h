// Launchers of the classifier kernels (classifier_kernels.cu): row-wise
// softmax with cross-entropy, and its gradient. Each returns the launch
// error, if any. Plain CUDA. Thread-safe.
#ifndef TRAINYARD_ENGINE_CUDA_CLASSIFIER_KERNELS_H_
#define TRAINYARD_ENGINE_CUDA_CLASSIFIER_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace trainyard::engine::cuda {

// probs = softmax of each row of logits [rows, classes]; losses[row] =
// log(sum) - (logit[target] - max), NaN for a target outside [0, classes).
// logits are activations (bf16 when `bf16`); probs and losses fp32.
cudaError_t LaunchSoftmaxCrossEntropyForward(float* probs, float* losses,
                                             const void* logits,
                                             const int32_t* targets,
                                             int64_t rows, int64_t classes,
                                             bool bf16, cudaStream_t stream);

// dlogits = (probs - onehot(target)) * scale, overwritten.
// dlogits is an activation gradient (bf16 when `bf16`); probs fp32.
cudaError_t LaunchSoftmaxCrossEntropyBackward(void* dlogits, const float* probs,
                                              const int32_t* targets,
                                              float scale, int64_t rows,
                                              int64_t classes, bool bf16,
                                              cudaStream_t stream);

}  // namespace trainyard::engine::cuda

#endif  // TRAINYARD_ENGINE_CUDA_CLASSIFIER_KERNELS_H_
