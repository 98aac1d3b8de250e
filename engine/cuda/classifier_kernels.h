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
cudaError_t LaunchSoftmaxCrossEntropyForward(float* probs, float* losses,
                                             const float* logits,
                                             const int32_t* targets,
                                             int64_t rows, int64_t classes,
                                             cudaStream_t stream);

// dlogits = (probs - onehot(target)) * scale, overwritten.
cudaError_t LaunchSoftmaxCrossEntropyBackward(
    float* dlogits, const float* probs, const int32_t* targets, float scale,
    int64_t rows, int64_t classes, cudaStream_t stream);

}  // namespace trainyard::engine::cuda

#endif  // TRAINYARD_ENGINE_CUDA_CLASSIFIER_KERNELS_H_
