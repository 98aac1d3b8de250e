// Token and position embeddings. The forward is a gather: with channels a
// multiple of the 16-byte pack (vec16.cuh: 8 bf16 or 4 fp32) and the tables
// 16-byte aligned, one thread per pack of an output row, reading packs of
// the token's and the position's rows; otherwise (rows aligned unlike each
// other) one thread per element. Each sum is one add either way.
//
// The backward must add every position's gradient into the token table in
// ascending position order (the determinism contract: bitwise the CPU
// backend's sums) while positions with the same token hit the same row.
// One block per position r; the block is the row's owner when r is the
// first position holding its token, and only owners work:
//   1. warp 0 scans tokens[0, r) for the same token (ballots, 32 tokens a
//      step); any hit and the block leaves;
//   2. rounds: warp 0 lists the next positions holding the token, in
//      ascending order, up to kPositionList of them (ballot + popcount keep
//      the order); then every thread adds those positions' gradients to its
//      channels of the row, read from and stored back to dwte each round —
//      the same fp32 adds in the same order as one long loop.
// So the work spreads over the distinct tokens of the batch (thousands)
// instead of walking every position per channel, with no atomics. The scans
// cost O(rows) ballots per distinct token, a few microseconds in total for
// the batches a GPU trains on.
// The position table gets one thread per (t, channel), walking the batch.
#include "engine/cuda/act_type.cuh"
#include "engine/cuda/block_reduce.cuh"
#include "engine/cuda/embedding_kernels.h"
#include "engine/cuda/vec16.cuh"

namespace trainyard::engine::cuda {
namespace {

constexpr int kOwnerThreads = 256;
constexpr int kChannelsPerThread = 4;  // 1024 channels a pass
constexpr int kPositionList = 1024;

// `packed`: the launcher found channels a multiple of the pack and the
// three tables 16-byte aligned, so every row of each is whole packs.
template <typename T>
__global__ void EmbeddingForwardKernel(T* out, const int32_t* tokens,
                                       const T* wte, const T* wpe, int64_t seq,
                                       int64_t channels, int64_t n,
                                       bool packed) {
  if (packed) {
    for (int64_t p = GridStart(); p < n / kPack<T>; p += GridStride()) {
      const int64_t i = p * kPack<T>;
      const int64_t row = i / channels, c = i % channels;
      float v[kPack<T>], pos[kPack<T>];
      LdPack(wte + tokens[row] * channels + c, v);
      LdPack(wpe + (row % seq) * channels + c, pos);
#pragma unroll
      for (int k = 0; k < kPack<T>; ++k) v[k] += pos[k];
      StPack(out + i, v);
    }
    return;
  }
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    const int64_t row = i / channels, c = i % channels;
    const int64_t token = tokens[row];
    St(out + i,
       Ld(wte + token * channels + c) + Ld(wpe + (row % seq) * channels + c));
  }
}

// True in every lane when lane i's position (base + i, below `end`) holds
// `token`, as a mask of the lanes.
__device__ __forceinline__ unsigned SameTokenLanes(const int32_t* tokens,
                                                   int64_t base, int64_t end,
                                                   int32_t token) {
  const int64_t i = base + (threadIdx.x & 31);
  return __ballot_sync(0xffffffffu, i < end && tokens[i] == token);
}

template <typename T>
__global__ void __launch_bounds__(kOwnerThreads)
    TokenTableGradKernel(float* dwte, const T* dout, const int32_t* tokens,
                         int64_t rows, int64_t channels) {
  __shared__ int32_t positions[kPositionList];
  __shared__ int listed;
  __shared__ int64_t next;
  __shared__ bool owner;
  const int64_t r = blockIdx.x;
  const int32_t token = tokens[r];
  const int lane = threadIdx.x & 31;
  const bool scanner = threadIdx.x < 32;
  if (scanner) {
    bool earlier = false;
    for (int64_t base = 0; base < r && !earlier; base += 32) {
      earlier = SameTokenLanes(tokens, base, r, token) != 0;
    }
    if (lane == 0) {
      owner = !earlier;
      next = r;
    }
  }
  __syncthreads();
  if (!owner) return;  // the whole block: `owner` is block-uniform
  float* row = dwte + static_cast<int64_t>(token) * channels;
  while (true) {
    __syncthreads();  // the last round's readers are done with the list
    if (scanner) {
      int count = 0;
      int64_t base = next;
      for (; base < rows; base += 32) {
        const unsigned hits = SameTokenLanes(tokens, base, rows, token);
        const int n = __popc(hits);
        if (count + n > kPositionList) break;  // this step starts next round
        if (hits & (1u << lane)) {
          positions[count + __popc(hits & ((1u << lane) - 1))] =
              static_cast<int32_t>(base + lane);
        }
        count += n;
      }
      if (lane == 0) {
        listed = count;
        next = base;
      }
    }
    __syncthreads();
    const int count = listed;
    const int stride = kChannelsPerThread * kOwnerThreads;
    for (int64_t c0 = threadIdx.x; c0 < channels; c0 += stride) {
      float acc[kChannelsPerThread];
#pragma unroll
      for (int k = 0; k < kChannelsPerThread; ++k) {
        const int64_t c = c0 + k * kOwnerThreads;
        acc[k] = c < channels ? row[c] : 0.f;
      }
      for (int p = 0; p < count; ++p) {
        const T* g = dout + static_cast<int64_t>(positions[p]) * channels;
#pragma unroll
        for (int k = 0; k < kChannelsPerThread; ++k) {
          const int64_t c = c0 + k * kOwnerThreads;
          if (c < channels) acc[k] += Ld(g + c);
        }
      }
#pragma unroll
      for (int k = 0; k < kChannelsPerThread; ++k) {
        const int64_t c = c0 + k * kOwnerThreads;
        if (c < channels) row[c] = acc[k];
      }
    }
    if (next >= rows) break;  // block-uniform: read after the barrier above
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
    const bool packed = channels % kPack<T> == 0 && Aligned16(out) &&
                        Aligned16(wte) && Aligned16(wpe);
    EmbeddingForwardKernel<<<ElementwiseBlocks(packed ? n / kPack<T> : n),
                             kElementwiseThreads, 0, stream>>>(
        As<T>(out), tokens, As<T>(wte), As<T>(wpe), seq, channels, n, packed);
    return cudaGetLastError();
  });
}

cudaError_t LaunchEmbeddingBackward(float* dwte, float* dwpe, const void* dout,
                                    const int32_t* tokens, int64_t batch,
                                    int64_t seq, int64_t channels, bool bf16,
                                    cudaStream_t stream) {
  if (batch <= 0 || seq <= 0 || channels <= 0) return cudaSuccess;
  const int64_t rows = batch * seq;
  if (rows > 0x7fffffff) return cudaErrorInvalidValue;  // one block per row
  return DispatchAct(bf16, [&](auto t) {
    using T = decltype(t);
    TokenTableGradKernel<<<static_cast<unsigned>(rows), kOwnerThreads, 0,
                           stream>>>(dwte, As<T>(dout), tokens, rows, channels);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    PositionTableGradKernel<<<ElementwiseBlocks(seq * channels),
                              kElementwiseThreads, 0, stream>>>(
        dwpe, As<T>(dout), batch, seq, channels);
    return cudaGetLastError();
  });
}

}  // namespace trainyard::engine::cuda
