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
// backend's sums). No atomics: the first position holding a token owns
// that token's row of dwte (its block adds every position with the token,
// in order), and one thread owns each (t, channel) of dwpe.
// dout is an activation gradient (bf16 when `bf16`); dwte, dwpe fp32.
cudaError_t LaunchEmbeddingBackward(float* dwte, float* dwpe, const void* dout,
                                    const int32_t* tokens, int64_t batch,
                                    int64_t seq, int64_t channels, bool bf16,
                                    cudaStream_t stream);

}  // namespace trainyard::engine::cuda

#endif  // TRAINYARD_ENGINE_CUDA_EMBEDDING_KERNELS_H_
