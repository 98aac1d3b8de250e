// Token and position embeddings. The forward is a gather, one thread per
// output element. The backward must add every position's gradient into the
// token table in ascending position order (the determinism contract) while
// positions with the same token hit the same row, so one thread owns one
// channel of the whole table and walks all B*T positions in order. That is
// only `channels` threads — slow for long batches, but exact and free of
// atomics; the position table gets one thread per (t, channel).
#include "engine/cuda/act_type.cuh"
#include "engine/cuda/block_reduce.cuh"
#include "engine/cuda/embedding_kernels.h"

namespace trainyard::engine::cuda {
namespace {

constexpr int kChannelThreads = 64;

template <typename T>
__global__ void EmbeddingForwardKernel(T* out, const int32_t* tokens,
                                       const T* wte, const T* wpe, int64_t seq,
                                       int64_t channels, int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    const int64_t row = i / channels, c = i % channels;
    const int64_t token = tokens[row];
    St(out + i,
       Ld(wte + token * channels + c) + Ld(wpe + (row % seq) * channels + c));
  }
}

template <typename T>
__global__ void TokenTableGradKernel(float* dwte, const T* dout,
                                     const int32_t* tokens, int64_t rows,
                                     int64_t channels) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= channels) return;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t token = tokens[r];
    dwte[token * channels + c] += Ld(dout + r * channels + c);
  }
}

template <typename T>
__global__ void PositionTableGradKernel(float* dwpe, const T* dout,
                                        int64_t batch, int64_t seq,
                                        int64_t channels) {
  const int64_t n = seq * channels;
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    float acc = dwpe[i];
    for (int64_t b = 0; b < batch; ++b) acc += Ld(dout + b * n + i);
    dwpe[i] = acc;
  }
}

}  // namespace

cudaError_t LaunchEmbeddingForward(void* out, const int32_t* tokens,
                                   const void* wte, const void* wpe,
                                   int64_t batch, int64_t seq, int64_t channels,
                                   bool bf16, cudaStream_t stream) {
  const int64_t n = batch * seq * channels;
  if (n <= 0) return cudaSuccess;
  return DispatchAct(bf16, [&](auto t) {
    using T = decltype(t);
    EmbeddingForwardKernel<<<ElementwiseBlocks(n), kElementwiseThreads, 0,
                             stream>>>(As<T>(out), tokens, As<T>(wte),
                                       As<T>(wpe), seq, channels, n);
    return cudaGetLastError();
  });
}

cudaError_t LaunchEmbeddingBackward(float* dwte, float* dwpe, const void* dout,
                                    const int32_t* tokens, int64_t batch,
                                    int64_t seq, int64_t channels, bool bf16,
                                    cudaStream_t stream) {
  if (batch <= 0 || seq <= 0 || channels <= 0) return cudaSuccess;
  const unsigned blocks =
      static_cast<unsigned>((channels + kChannelThreads - 1) / kChannelThreads);
  return DispatchAct(bf16, [&](auto t) {
    using T = decltype(t);
    TokenTableGradKernel<<<blocks, kChannelThreads, 0, stream>>>(
        dwte, As<T>(dout), tokens, batch * seq, channels);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    PositionTableGradKernel<<<ElementwiseBlocks(seq * channels),
                              kElementwiseThreads, 0, stream>>>(
        dwpe, As<T>(dout), batch, seq, channels);
    return cudaGetLastError();
  });
}

}  // namespace trainyard::engine::cuda
