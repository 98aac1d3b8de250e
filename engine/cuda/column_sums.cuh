// Deterministic column sums over many rows, for the parameter gradients that
// sum over every token (bias gradients, LayerNorm weight and bias
// gradients): out_o[c] += sum over rows r of term_o(r, c), for kOut
// outputs at once.
//
// One block per column alone would give only cols / 32 blocks (24 for
// d_model 768: most of an H100 idle), so the rows are cut into `splits`
// contiguous ranges, one block row each:
//   stage 1, grid (cols / 32, splits), block 32 columns x 32 row lanes: lane
//     y sums rows start + y, start + y + 32, ... of its range in ascending
//     order (a warp reads 32 adjacent columns of one row: coalesced), lane 0
//     adds the 32 lane sums in lane order into partials[o][split][c];
//   stage 2, one thread per column: adds the splits' partials in split
//     order, then that total onto out_o[c].
// Every sum's order is fixed by rows, cols, the scratch size and the width
// W alone, so a call gives bitwise the same result every time; no atomics.
//
// Width: a thread takes W adjacent columns (x above numbering groups of
// W), W = 1 or the caller's 16-byte pack (vec16.cuh: 8 bf16 or 4 fp32)
// when every row of the summed arrays starts 16-byte aligned and cols is a
// multiple of W. A warp then reads 32 packs of one row, 512 bytes of bf16
// where W = 1 reads 64, with one 16-byte load a thread for every 2-byte
// one. Each column's sum runs through the same stages either way.
#ifndef TRAINYARD_ENGINE_CUDA_COLUMN_SUMS_CUH_
#define TRAINYARD_ENGINE_CUDA_COLUMN_SUMS_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/cuda/block_reduce.cuh"

namespace trainyard::engine::cuda {

inline constexpr int kColumnTile = 32;
inline constexpr int64_t kMaxRowSplits = 32;
inline constexpr int64_t kMinRowsPerSplit = 256;

template <int kOut>
struct ColumnOutputs {
  float* out[kOut];
};

// How many row ranges: enough blocks to fill the device, each range long
// enough to be worth a block, and the partials within the scratch.
inline int64_t RowSplits(int64_t rows, int64_t cols, int outputs,
                         int64_t scratch_floats) {
  int64_t splits = (rows + kMinRowsPerSplit - 1) / kMinRowsPerSplit;
  if (splits > kMaxRowSplits) splits = kMaxRowSplits;
  const int64_t fit = scratch_floats / (outputs * cols);
  if (splits > fit) splits = fit;
  return splits < 1 ? 1 : splits;
}

// Term is a functor: term(r, c, v) sets v[o][w] to term_o(r, c + w) for
// o < kOut, w < W (c a multiple of W). This block's columns: col0 +
// (blockIdx.x * 32 + x) * W + w, below col1; partials are indexed from col0
// ([o][split][c - col0], width col1 - col0, a multiple of W).
template <int kOut, int W, typename Term>
__global__ void __launch_bounds__(kColumnTile* kColumnTile)
    ColumnPartialsKernel(float* partials, int64_t rows, int64_t col0,
                         int64_t col1, int64_t rows_per_split, Term term) {
  const int64_t c =
      col0 + (static_cast<int64_t>(blockIdx.x) * kColumnTile + threadIdx.x) * W;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_split;
  const int64_t r1 = r0 + rows_per_split < rows ? r0 + rows_per_split : rows;
  float acc[kOut][W];
#pragma unroll
  for (int o = 0; o < kOut; ++o) {
#pragma unroll
    for (int w = 0; w < W; ++w) acc[o][w] = 0.f;
  }
  if (c < col1) {
#pragma unroll 2
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kColumnTile) {
      float v[kOut][W];
      term(r, c, v);
#pragma unroll
      for (int o = 0; o < kOut; ++o) {
#pragma unroll
        for (int w = 0; w < W; ++w) acc[o][w] += v[o][w];
      }
    }
  }
  // One output at a time: 32 x (32 W + 1) floats, 32 KiB at W = 8.
  __shared__ float lanes[kColumnTile][kColumnTile * W + 1];
  const int64_t width = col1 - col0;
#pragma unroll
  for (int o = 0; o < kOut; ++o) {
#pragma unroll
    for (int w = 0; w < W; ++w) {
      lanes[threadIdx.y][threadIdx.x * W + w] = acc[o][w];
    }
    __syncthreads();
    if (threadIdx.y == 0 && c < col1) {
      float total[W];
#pragma unroll
      for (int w = 0; w < W; ++w) total[w] = 0.f;
#pragma unroll 1
      for (int y = 0; y < kColumnTile; ++y) {
#pragma unroll
        for (int w = 0; w < W; ++w) total[w] += lanes[y][threadIdx.x * W + w];
      }
      float* to = partials +
                  (static_cast<int64_t>(o) * gridDim.y + blockIdx.y) * width +
                  (c - col0);
#pragma unroll
      for (int w = 0; w < W; ++w) to[w] = total[w];
    }
    __syncthreads();
  }
}

template <int kOut>
__global__ void AddColumnPartialsKernel(ColumnOutputs<kOut> outs,
                                        const float* partials, int64_t splits,
                                        int64_t col0, int64_t col1) {
  const int64_t width = col1 - col0;
  for (int64_t i = GridStart(); i < width; i += GridStride()) {
#pragma unroll
    for (int o = 0; o < kOut; ++o) {
      float total = 0.f;
      for (int64_t s = 0; s < splits; ++s) {
        total += partials[(o * splits + s) * width + i];
      }
      outs.out[o][col0 + i] += total;
    }
  }
}

// Queues both stages, over chunks of columns when the scratch cannot hold
// every column's partials (stream order makes reusing it safe). `scratch`
// holds scratch_floats floats, at least kOut * kColumnTile (else
// cudaErrorInvalidValue, nothing queued). rows, cols > 0; cols a multiple
// of W (W <= kColumnTile).
template <int kOut, int W = 1, typename Term>
cudaError_t LaunchColumnSums(ColumnOutputs<kOut> outs, float* scratch,
                             int64_t scratch_floats, int64_t rows, int64_t cols,
                             Term term, cudaStream_t stream) {
  static_assert(W >= 1 && W <= kColumnTile);
  if (scratch_floats < kOut * kColumnTile) return cudaErrorInvalidValue;
  const int64_t chunk = scratch_floats / kOut / W * W;
  for (int64_t col0 = 0; col0 < cols; col0 += chunk) {
    const int64_t col1 = col0 + chunk < cols ? col0 + chunk : cols;
    const int64_t width = col1 - col0;
    const int64_t splits = RowSplits(rows, width, kOut, scratch_floats);
    const int64_t rows_per_split = (rows + splits - 1) / splits;
    const int64_t tile = int64_t{kColumnTile} * W;
    const dim3 grid(static_cast<unsigned>((width + tile - 1) / tile),
                    static_cast<unsigned>(splits));
    const dim3 block(kColumnTile, kColumnTile);
    ColumnPartialsKernel<kOut, W><<<grid, block, 0, stream>>>(
        scratch, rows, col0, col1, rows_per_split, term);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    AddColumnPartialsKernel<kOut>
        <<<ElementwiseBlocks(width), kElementwiseThreads, 0, stream>>>(
            outs, scratch, splits, col0, col1);
    e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace trainyard::engine::cuda

#endif  // TRAINYARD_ENGINE_CUDA_COLUMN_SUMS_CUH_
