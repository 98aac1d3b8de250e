// Token and position embeddings. The forward is a gather: with channels a
// multiple of the 16-byte pack (vec16.cuh: 8 bf16 or 4 fp32) and the tables
// 16-byte aligned, one thread per pack of an output row, reading packs of
// the token's and the position's rows; otherwise (rows aligned unlike each
// other) one thread per element. Each sum is one add either way.
//
// The backward must add every position's gradient into the token table in
// ascending position order (the determinism contract: bitwise the CPU
// backend's sums) while positions with the same token hit the same row.
// No atomics: each token's row has one owner block, which adds the
// positions holding the token in ascending order, a list of up to
// kPositionList of them at a time, each thread holding its channels' sums
// in registers across the list. The owners find their positions in one of
// two ways:
//   sorted (rows fit the caller's key scratch): the keys token << 32 |
//     position are sorted ascending (a bitonic sort, log2(n)(log2(n)+1)/2
//     passes over n = rows rounded up to a power of two, the short strides
//     of each stage in shared memory), so each token's positions lie
//     together and in order; block i owns its token when sorted key i is
//     the first of that token, and reads its list off the sorted keys.
//     O(n log^2 n) work: about 1 ms for the 180k rows of a GPT-2 batch.
//   scanned (no or too little scratch): block r owns its token when no
//     position before r holds it (warp 0 scans tokens[0, r) with ballots,
//     32 a step), then lists the next positions holding it the same way.
//     O(rows^2 / 32) ballots: fine for small batches, 80 ms at 180k rows.
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

// Adds the gradients of positions[0, count) (ascending) to the token's row
// of dwte: each thread sums its channels in registers, starting from the
// row, and stores them back. Block-wide; every thread calls it.
template <typename T>
__device__ void AddPositions(float* row, const T* dout,
                             const int32_t* positions, int count,
                             int64_t channels) {
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
}

// ---------------------------------------------------------------- sorted

constexpr int kSortTile = 2048;  // keys a block sorts in shared memory

// keys[i] = token << 32 | i for the rows, all ones (after every real key)
// for the padding up to n.
__global__ void FillSortKeysKernel(uint64_t* keys, const int32_t* tokens,
                                   int64_t rows, int64_t n) {
  for (int64_t i = GridStart(); i < n; i += GridStride()) {
    keys[i] = i < rows ? static_cast<uint64_t>(static_cast<uint32_t>(tokens[i]))
                                 << 32 |
                             static_cast<uint64_t>(i)
                       : ~uint64_t{0};
  }
}

// The compare-exchange of a bitonic sort: in stage k (building sorted runs
// of k keys), keys i and i + j (i with bit j clear) end ascending when bit
// k of i is clear, else descending.
__device__ __forceinline__ void CompareExchange(uint64_t& a, uint64_t& b,
                                                bool ascending) {
  if ((a > b) == ascending) {
    const uint64_t t = a;
    a = b;
    b = t;
  }
}

// One pass of stage k at a stride j of at least kSortTile, over all n keys.
__global__ void BitonicGlobalPassKernel(uint64_t* keys, int64_t n, int64_t k,
                                        int64_t j) {
  for (int64_t p = GridStart(); p < n / 2; p += GridStride()) {
    const int64_t i = 2 * j * (p / j) + p % j;
    CompareExchange(keys[i], keys[i + j], (i & k) == 0);
  }
}

// Stages k_first..k_last (powers of two), each at strides from
// min(k, tile) / 2 down to 1, on tiles of `tile` keys in shared memory
// (block b: keys [b tile, (b + 1) tile)). Strides below the tile never
// cross it, so each tile is independent. tile / 2 threads.
__global__ void __launch_bounds__(kSortTile / 2)
    BitonicSharedKernel(uint64_t* keys, int64_t tile, int64_t k_first,
                        int64_t k_last) {
  __shared__ uint64_t s[kSortTile];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * tile;
  for (int64_t i = threadIdx.x; i < tile; i += blockDim.x)
    s[i] = keys[base + i];
  for (int64_t k = k_first; k <= k_last; k *= 2) {
    for (int64_t j = (k < tile ? k : tile) / 2; j > 0; j /= 2) {
      __syncthreads();
      const int64_t p = threadIdx.x;
      const int64_t i = 2 * j * (p / j) + p % j;
      CompareExchange(s[i], s[i + j], ((base + i) & k) == 0);
    }
  }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < tile; i += blockDim.x)
    keys[base + i] = s[i];
}

// Block i owns its token when sorted key i is the token's first; it lists
// the token's positions off the following keys, kPositionList a round.
template <typename T>
__global__ void __launch_bounds__(kOwnerThreads)
    SortedTokenTableGradKernel(float* dwte, const T* dout, const uint64_t* keys,
                               int64_t rows, int64_t channels) {
  __shared__ int32_t positions[kPositionList];
  __shared__ int listed;
  const int64_t first = blockIdx.x;
  const uint64_t token = keys[first] >> 32;
  if (first > 0 && keys[first - 1] >> 32 == token) return;  // block-uniform
  float* row = dwte + static_cast<int64_t>(token) * channels;
  for (int64_t next = first;;) {
    __syncthreads();  // the last round's readers are done with the list
    if (threadIdx.x == 0) listed = 0;
    __syncthreads();
    for (int t = threadIdx.x; t < kPositionList; t += kOwnerThreads) {
      const int64_t k = next + t;
      if (k >= rows || keys[k] >> 32 != token) continue;
      positions[t] = static_cast<int32_t>(keys[k] & 0xffffffffu);
      // The list is a prefix of the slots: its last sets the count.
      if (t + 1 == kPositionList || k + 1 == rows ||
          keys[k + 1] >> 32 != token) {
        listed = t + 1;
      }
    }
    __syncthreads();
    const int count = listed;
    AddPositions(row, dout, positions, count, channels);
    if (count < kPositionList) break;  // block-uniform
    next += count;
  }
}

// --------------------------------------------------------------- scanned

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
    ScannedTokenTableGradKernel(float* dwte, const T* dout,
                                const int32_t* tokens, int64_t rows,
                                int64_t channels) {
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
    AddPositions(row, dout, positions, listed, channels);
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

// Sorts the rows' keys (token << 32 | position) ascending in keys[0, n),
// n a power of two at least rows.
cudaError_t SortTokenKeys(uint64_t* keys, const int32_t* tokens, int64_t rows,
                          int64_t n, cudaStream_t stream) {
  FillSortKeysKernel<<<ElementwiseBlocks(n), kElementwiseThreads, 0, stream>>>(
      keys, tokens, rows, n);
  cudaError_t e = cudaGetLastError();
  const int64_t tile = n < kSortTile ? n : kSortTile;
  if (e != cudaSuccess || n < 2) return e;
  BitonicSharedKernel<<<static_cast<unsigned>(n / tile),
                        static_cast<unsigned>(tile / 2), 0, stream>>>(
      keys, tile, 2, tile);
  e = cudaGetLastError();
  for (int64_t k = 2 * tile; k <= n && e == cudaSuccess; k *= 2) {
    for (int64_t j = k / 2; j >= tile && e == cudaSuccess; j /= 2) {
      BitonicGlobalPassKernel<<<ElementwiseBlocks(n / 2), kElementwiseThreads,
                                0, stream>>>(keys, n, k, j);
      e = cudaGetLastError();
    }
    if (e != cudaSuccess) break;
    BitonicSharedKernel<<<static_cast<unsigned>(n / tile),
                          static_cast<unsigned>(tile / 2), 0, stream>>>(
        keys, tile, k, k);
    e = cudaGetLastError();
  }
  return e;
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
    const bool packed = RowsArePacks<T>(channels, out, wte, wpe);
    EmbeddingForwardKernel<<<ElementwiseBlocks(packed ? n / kPack<T> : n),
                             kElementwiseThreads, 0, stream>>>(
        As<T>(out), tokens, As<T>(wte), As<T>(wpe), seq, channels, n, packed);
    return cudaGetLastError();
  });
}

cudaError_t LaunchEmbeddingBackward(float* dwte, float* dwpe, const void* dout,
                                    const int32_t* tokens, int64_t batch,
                                    int64_t seq, int64_t channels, bool bf16,
                                    uint64_t* sort_keys,
                                    int64_t sort_key_capacity,
                                    cudaStream_t stream) {
  if (batch <= 0 || seq <= 0 || channels <= 0) return cudaSuccess;
  const int64_t rows = batch * seq;
  if (rows > 0x7fffffff) return cudaErrorInvalidValue;  // one block per row
  int64_t n = 1;
  while (n < rows) n *= 2;
  const bool sorted = sort_keys != nullptr && n <= sort_key_capacity;
  if (sorted) {
    const cudaError_t e = SortTokenKeys(sort_keys, tokens, rows, n, stream);
    if (e != cudaSuccess) return e;
  }
  return DispatchAct(bf16, [&](auto t) {
    using T = decltype(t);
    const unsigned blocks = static_cast<unsigned>(rows);
    if (sorted) {
      SortedTokenTableGradKernel<<<blocks, kOwnerThreads, 0, stream>>>(
          dwte, As<T>(dout), sort_keys, rows, channels);
    } else {
      ScannedTokenTableGradKernel<<<blocks, kOwnerThreads, 0, stream>>>(
          dwte, As<T>(dout), tokens, rows, channels);
    }
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    PositionTableGradKernel<<<ElementwiseBlocks(seq * channels),
                              kElementwiseThreads, 0, stream>>>(
        dwpe, As<T>(dout), batch, seq, channels);
    return cudaGetLastError();
  });
}

}  // namespace trainyard::engine::cuda
