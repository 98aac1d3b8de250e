// Launchers of the embedding kernels (embedding_kernels.cu): token plus
// position embeddings and their gradients. Each returns the launch error,
// if any. Plain CUDA. Thread-safe.
#ifndef TRAINYARD_ENGINE_CUDA_EMBEDDING_KERNELS_H_
#define TRAINYARD_ENGINE_CUDA_EMBEDDING_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace trainyard::engine::cuda {

// out[b, t, :] = wte[tokens[b, t], :] + wpe[t, :].
// out, wte and wpe are activations (working weights): bf16 when `bf16`.
cudaError_t LaunchEmbeddingForward(void* out, const int32_t* tokens,
                                   const void* wte, const void* wpe,
                                   int64_t batch, int64_t seq, int64_t channels,
                                   bool bf16, cudaStream_t stream);

// dwte[tokens[b, t], :] += dout[b, t, :] and dwpe[t, :] += dout[b, t, :],
// each entry adding its terms in ascending (b, t) order (bitwise the CPU
// backend's sums). No atomics: one block owns each token's row of dwte and
// adds every position with the token, in order; one thread owns each
// (t, channel) of dwpe. The owners find their positions by sorting the
// batch's tokens in sort_keys when its sort_key_capacity keys hold the
// rows rounded up to a power of two, else by scanning the tokens (quadratic in
// the rows: slow past a few thousand). dout is an activation gradient (bf16
// when `bf16`); dwte, dwpe fp32.
cudaError_t LaunchEmbeddingBackward(float* dwte, float* dwpe, const void* dout,
                                    const int32_t* tokens, int64_t batch,
                                    int64_t seq, int64_t channels, bool bf16,
                                    uint64_t* sort_keys,
                                    int64_t sort_key_capacity,
                                    cudaStream_t stream);

}  // namespace trainyard::engine::cuda

#endif  // TRAINYARD_ENGINE_CUDA_EMBEDDING_KERNELS_H_
