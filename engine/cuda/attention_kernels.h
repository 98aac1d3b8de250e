// Launchers of the causal attention kernels (attention_kernels.cu), a
// flash-attention-style forward and backward that never store a T x T
// matrix: the forward keeps each query row's log-sum-exp, the backward
// recomputes the probabilities from it. LaunchAttentionForward/Backward
// run bf16 activations with a head size of 32, 64 or 128 on the tensor-core
// kernels (attention_tc_kernels.h) and everything else on the reference
// kernels, whose math is all fp32; the *Reference launchers always take the
// latter (tests compare the two). Each returns the launch error, if any
// (cudaErrorInvalidValue for a head size above kAttentionMaxHeadSize).
// Plain CUDA. Thread-safe.
#ifndef TRAINYARD_ENGINE_CUDA_ATTENTION_KERNELS_H_
#define TRAINYARD_ENGINE_CUDA_ATTENTION_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/cuda/attention_tc_kernels.h"

namespace trainyard::engine::cuda {

inline constexpr int64_t kAttentionMaxHeadSize = 128;

// out [B, T, C] and lse [B, NH, T] from qkv [B, T, 3C] (q, k, v side by
// side, each NH heads of C / NH channels): causal softmax(q k^T / sqrt(hs))
// v per head, and each row's log-sum-exp of its scaled scores.
// out and qkv are activations: bf16 when `bf16`, else fp32; lse fp32.
// `tiling` is the tensor-core kernels' (attention_tc_kernels.h) where they
// run and the head size takes it, else the default (every tiling gives the
// same bits); the same for the backward.
cudaError_t LaunchAttentionForward(void* out, float* lse, const void* qkv,
                                   int64_t batch, int64_t seq, int64_t channels,
                                   int64_t heads, bool bf16,
                                   cudaStream_t stream,
                                   AttentionTcTiling tiling = {});

// dqkv [B, T, 3C] (overwritten) from dout [B, T, C], given the forward's
// qkv, out and lse. `scratch` holds AttentionTcBackwardScratchFloats(
// backward, ...) floats (at least [B, NH, T], each row's dout . out);
// `backward` says how the tensor-core kernels split the work where they
// run (the reference kernels have one way).
cudaError_t LaunchAttentionBackward(
    void* dqkv, float* scratch, const void* dout, const void* out,
    const void* qkv, const float* lse, int64_t batch, int64_t seq,
    int64_t channels, int64_t heads, bool bf16, cudaStream_t stream,
    AttentionTcTiling tiling = {},
    AttentionTcBackward backward = AttentionTcBackward::kTwoKernels);

// The same contracts on the fp32-math kernels, whatever the head size.
cudaError_t LaunchAttentionForwardReference(void* out, float* lse,
                                            const void* qkv, int64_t batch,
                                            int64_t seq, int64_t channels,
                                            int64_t heads, bool bf16,
                                            cudaStream_t stream);
cudaError_t LaunchAttentionBackwardReference(void* dqkv, float* delta,
                                             const void* dout, const void* out,
                                             const void* qkv, const float* lse,
                                             int64_t batch, int64_t seq,
                                             int64_t channels, int64_t heads,
                                             bool bf16, cudaStream_t stream);

}  // namespace trainyard::engine::cuda

#endif  // TRAINYARD_ENGINE_CUDA_ATTENTION_KERNELS_H_
