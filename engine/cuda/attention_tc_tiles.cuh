// The tile machinery shared by the tensor-core attention kernels
// (attention_tc_kernels.cu: forward; attention_tc_backward_kernels.cu:
// backward): tile shape, shared-memory layouts, tile loads and stores,
// warp-wide wmma products and the launch geometry. The kernels' header
// comments say what they compute.
//
// Tiles. A block is 4 warps (128 threads) and owns one (sequence, head) pair
// (blockIdx.x) and one tile of kTile = 64 rows (blockIdx.y): query rows in
// the forward and the query-gradient kernel, key rows in the key/value-
// gradient kernel. Warp w owns rows 16w..16w+15 of the tile: it alone
// computes, reads and writes those rows of every per-row buffer, so those
// steps need only __syncwarp; the block-wide __syncthreads guard only the
// tiles of the other side (keys and values, or queries and dout) that all
// four warps read. Tiles past the sequence end are padded: their rows are
// stored as zeros (never read from global memory) and their scores masked
// (probability exactly 0), and no row at or past T is ever written.
//
// Global memory is read and written in 16-byte packs (vec16.cuh): eight
// bf16 of one row per access. REQUIRES of every launch: qkv, out, dout and
// dqkv 16-byte aligned (the launchers check; the channel count is a
// multiple of 8 because the head size is), so every row and head starts
// aligned.
//
// Shared memory (dynamic, bytes; per block; each region 128-byte aligned):
// bf16 tiles have rows of hs + 8 elements, the bf16 64x64 probability tile
// rows of 72, fp32 tiles rows of (64 or hs) + 4. The padding keeps every
// wmma leading dimension a multiple of 8 (bf16) or 4 (fp32) elements and
// shifts successive rows across banks; every 16x16 wmma tile starts at a
// multiple of 16 rows and 16 columns from a region start, so at a multiple
// of 32 bytes, as load/store_matrix_sync require.
//                       hs = 32     hs = 64     hs = 128
//   forward              51,200      71,680     112,640
//   backward (each)      74,240      90,624     156,160
// (the query-side kernel leaves one bf16 64x64 tile of the shared backward
// layout unused.) H100: up to 227 KB per block and 228 KB per SM, so at
// hs = 64 three forward or two backward blocks fit on an SM.
//
// Pure device code and constexpr layouts; thread-safe.
#ifndef TRAINYARD_ENGINE_CUDA_ATTENTION_TC_TILES_CUH_
#define TRAINYARD_ENGINE_CUDA_ATTENTION_TC_TILES_CUH_

#include <mma.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>

#include "engine/cuda/act_type.cuh"
#include "engine/cuda/attention_tc_kernels.h"
#include "engine/cuda/vec16.cuh"

namespace trainyard::engine::cuda::attention_tc {

namespace wmma = nvcuda::wmma;

inline constexpr int kTile = 64;      // rows of a query or key tile
inline constexpr int kWarpRows = 16;  // rows each warp owns (a wmma tile)
inline constexpr int kWarps = kTile / kWarpRows;
inline constexpr int kThreads = 32 * kWarps;
inline constexpr int kLdP = kTile + 8;  // bf16 64-column tiles (P, dS)
static_assert(kTile % 16 == 0 && kLdP % 8 == 0, "wmma tile shape");

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;
// The transpose of a row-major matrix read as B: B^T in column-major.
using FragBt =
    wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

constexpr size_t AlignUp(size_t bytes) { return (bytes + 127) / 128 * 128; }

template <typename T>
constexpr size_t TileBytes(int rows, int ld) {
  return AlignUp(static_cast<size_t>(rows) * ld * sizeof(T));
}

// Row strides (elements) for head size kD. kLdW also holds a 16 x kD
// gradient row block staged for the final store, so it is >= kD.
template <int kD>
struct Strides {
  static constexpr int kLdX = kD + 8;     // bf16 q, k, v, dout tiles
  static constexpr int kLdS = kTile + 4;  // fp32 scores (forward)
  static constexpr int kLdO = kD + 4;     // fp32 output, when staged
  static constexpr int kLdW = (kTile > kD ? kTile : kD) + 4;  // fp32 scratch
  static_assert(kD % 16 == 0, "head size: whole wmma tiles");
  static_assert(kLdX % 8 == 0, "bf16 wmma ldm: a multiple of 8");
  static_assert(kLdS % 4 == 0 && kLdO % 4 == 0 && kLdW % 4 == 0,
                "fp32 wmma ldm: a multiple of 4");
  // PairColumn's bank argument: each fp32 row starts 4 banks after the
  // previous one.
  static_assert(kLdS % 32 == 4 && kLdO % 32 == 4, "fp32 row bank shift");
};

// Byte offsets into dynamic shared memory, one struct per kernel; the host
// sizes the launch with kBytes and the kernel carves the same offsets.
template <int kD>
struct ForwardSmem : Strides<kD> {
  using S = Strides<kD>;
  static constexpr size_t kQ = 0;
  static constexpr size_t kK = kQ + TileBytes<bf16>(kTile, S::kLdX);
  static constexpr size_t kV = kK + TileBytes<bf16>(kTile, S::kLdX);
  static constexpr size_t kS = kV + TileBytes<bf16>(kTile, S::kLdX);
  static constexpr size_t kP = kS + TileBytes<float>(kTile, S::kLdS);
  static constexpr size_t kO = kP + TileBytes<bf16>(kTile, kLdP);
  static constexpr size_t kBytes = kO + TileBytes<float>(kTile, S::kLdO);
};

// The backward kernels share one layout: "own" tiles are the block's rows
// (queries, or keys), "other" tiles the side it loops over, "a"/"b" the
// two fp32 score tiles and the two bf16 64-column tiles.
template <int kD>
struct BackwardSmem : Strides<kD> {
  using S = Strides<kD>;
  static constexpr size_t kOwn0 = 0;
  static constexpr size_t kOwn1 = kOwn0 + TileBytes<bf16>(kTile, S::kLdX);
  static constexpr size_t kOther0 = kOwn1 + TileBytes<bf16>(kTile, S::kLdX);
  static constexpr size_t kOther1 = kOther0 + TileBytes<bf16>(kTile, S::kLdX);
  static constexpr size_t kWa = kOther1 + TileBytes<bf16>(kTile, S::kLdX);
  static constexpr size_t kWb = kWa + TileBytes<float>(kTile, S::kLdW);
  static constexpr size_t kPa = kWb + TileBytes<float>(kTile, S::kLdW);
  static constexpr size_t kPb = kPa + TileBytes<bf16>(kTile, kLdP);
  static constexpr size_t kLse = kPb + TileBytes<bf16>(kTile, kLdP);
  static constexpr size_t kDelta = kLse + TileBytes<float>(1, kTile);
  static constexpr size_t kBytes = kDelta + TileBytes<float>(1, kTile);
};

// The budget in the header comment.
static_assert(ForwardSmem<32>::kBytes == 51200 &&
                  ForwardSmem<64>::kBytes == 71680 &&
                  ForwardSmem<128>::kBytes == 112640,
              "forward smem budget");
static_assert(BackwardSmem<32>::kBytes == 74240 &&
                  BackwardSmem<64>::kBytes == 90624 &&
                  BackwardSmem<128>::kBytes == 156160,
              "backward smem budget");
static_assert(ForwardSmem<128>::kBytes <= 227 * 1024 &&
                  BackwardSmem<128>::kBytes <= 227 * 1024,
              "shared memory per block on sm_90");

template <typename T>
__device__ __forceinline__ T* At(unsigned char* smem, size_t offset) {
  return reinterpret_cast<T*>(smem + offset);
}

// The region offsets assume a 128-byte aligned base; stop loudly if not.
__device__ __forceinline__ void CheckSmemAlignment(const void* smem) {
  if ((reinterpret_cast<uintptr_t>(smem) & 127) != 0) {
    if (threadIdx.x == 0) printf("attention_tc: smem base misaligned\n");
    __trap();
  }
}

// One (sequence, head) pair: rows of q at qkv + t * qkv_row (k at + C, v at
// + 2C), of out and dout at + t * out_row, statistics at stats + t.
struct TcGeometry {
  int64_t seq, channels, heads;
  int tiles;  // ceil(seq / kTile)
  float scale;
};

struct HeadOffsets {
  int64_t qkv, qkv_row, out, out_row, stats;
};

__device__ __forceinline__ HeadOffsets HeadOf(const TcGeometry& g, int hs) {
  const int64_t bh = blockIdx.x, b = bh / g.heads, h = bh % g.heads;
  return {b * g.seq * 3 * g.channels + h * hs, 3 * g.channels,
          b * g.seq * g.channels + h * hs, g.channels, bh * g.seq};
}

// The k-th of the n/2 columns (or channels) of a row that the lane `half`
// of the pair of lanes owning warp row r (0..15) handles: the pair takes
// alternate columns, so the two lanes touch adjacent words, and rows 8..15
// start one step later than rows 0..7, so for any k the 32 lanes of a warp
// touch 32 different banks of an fp32 tile whose rows start 4 banks apart
// (Strides: kLdS, kLdO). A lane still visits each of its columns once.
__device__ __forceinline__ int PairColumn(int k, int r, int half, int n) {
  const int m = n / 2;
  return 2 * ((k + r / 8) % m) + half;
}

// Block-wide: dst[r][c] = src[(row0 + r) * stride + c] for the tile's
// kTile rows and kD columns, zeros for rows at or past `seq`. Each thread
// moves 16-byte packs; consecutive threads take consecutive packs of a row
// (coalesced). REQUIRES: src and stride * 2 bytes 16-byte aligned.
template <int kD>
__device__ void LoadRows(bf16* dst, const bf16* src, int64_t stride,
                         int64_t row0, int64_t seq) {
  constexpr int kLd = Strides<kD>::kLdX;
  constexpr int kRowPacks = kD / kPack<bf16>;
  constexpr float kZeros[kPack<bf16>] = {};
  for (int e = threadIdx.x; e < kTile * kRowPacks; e += kThreads) {
    const int r = e / kRowPacks, c = e % kRowPacks * kPack<bf16>;
    const int64_t row = row0 + r;
    if (row < seq) {
      Copy16(dst + r * kLd + c, src + row * stride + c);
    } else {
      StPack(dst + r * kLd + c, kZeros);
    }
  }
}

// Block-wide: the key and value rows of the key tile starting at row k0
// into sk and sv, between two barriers: the first waits until every warp is
// done with the previous tile, the second until the new one is whole.
template <int kD>
__device__ void LoadKeyValueTile(bf16* sk, bf16* sv, const bf16* qkv,
                                 const HeadOffsets& h, const TcGeometry& g,
                                 int64_t k0) {
  __syncthreads();
  LoadRows<kD>(sk, qkv + h.qkv + g.channels, h.qkv_row, k0, g.seq);
  LoadRows<kD>(sv, qkv + h.qkv + 2 * g.channels, h.qkv_row, k0, g.seq);
  __syncthreads();
}

// Block-wide: dst[r] = src[row0 + r] for the tile's rows, 0 past `seq`.
__device__ __forceinline__ void LoadRowStats(float* dst, const float* src,
                                             int64_t row0, int64_t seq) {
  for (int r = threadIdx.x; r < kTile; r += kThreads) {
    dst[r] = row0 + r < seq ? src[row0 + r] : 0.f;
  }
}

// Warp-wide: c[16 x kN] (fp32, row-major) = a[16 x kK] b[kN x kK]^T, with
// a given as its kK/16 fragments (16 x 16 blocks, k ascending) and b
// row-major bf16. The B operand's 16x16 block (k, n) is b[n*16 + nn][k +
// kk] at b + (n*16 + nn) * ldb + k + kk: column-major with leading
// dimension ldb from b + n*16*ldb + k.
template <int kN, int kK>
__device__ void WarpMatmulABt(float* c, int ldc, const FragA (&a)[kK / 16],
                              const bf16* b, int ldb) {
  FragC acc[kN / 16];
#pragma unroll
  for (int n = 0; n < kN / 16; ++n) wmma::fill_fragment(acc[n], 0.f);
#pragma unroll
  for (int k = 0; k < kK; k += 16) {
#pragma unroll
    for (int n = 0; n < kN / 16; ++n) {
      FragBt fb;
      wmma::load_matrix_sync(fb, b + n * 16 * ldb + k, ldb);
      wmma::mma_sync(acc[n], a[k / 16], fb, acc[n]);
    }
  }
#pragma unroll
  for (int n = 0; n < kN / 16; ++n) {
    wmma::store_matrix_sync(c + n * 16, acc[n], ldc, wmma::mem_row_major);
  }
}

// Warp-wide: the kK/16 fragments of a[16 x kK] (row-major bf16).
template <int kK>
__device__ void LoadFragmentsA(FragA (&frags)[kK / 16], const bf16* a,
                               int lda) {
#pragma unroll
  for (int k = 0; k < kK; k += 16) {
    wmma::load_matrix_sync(frags[k / 16], a + k, lda);
  }
}

// The same product with a in shared memory (row-major bf16).
template <int kN, int kK>
__device__ void WarpMatmulABt(float* c, int ldc, const bf16* a, int lda,
                              const bf16* b, int ldb) {
  FragA fa[kK / 16];
  LoadFragmentsA<kK>(fa, a, lda);
  WarpMatmulABt<kN, kK>(c, ldc, fa, b, ldb);
}

// Warp-wide: acc (16 x kN as kN/16 fragments, column block n in acc[n]) +=
// a[16 x kK] b[kK x kN], both row-major bf16; b's block (k, n) starts at
// b + k*ldb + n*16.
template <int kN, int kK>
__device__ void WarpMmaAB(FragC (&acc)[kN / 16], const bf16* a, int lda,
                          const bf16* b, int ldb) {
#pragma unroll
  for (int k = 0; k < kK; k += 16) {
    FragA fa;
    wmma::load_matrix_sync(fa, a + k, lda);
#pragma unroll
    for (int n = 0; n < kN / 16; ++n) {
      FragB fb;
      wmma::load_matrix_sync(fb, b + k * ldb + n * 16, ldb);
      wmma::mma_sync(acc[n], fa, fb, acc[n]);
    }
  }
}

template <int kN>
__device__ void ZeroFragments(FragC (&acc)[kN / 16]) {
#pragma unroll
  for (int n = 0; n < kN / 16; ++n) wmma::fill_fragment(acc[n], 0.f);
}

// Warp-wide: writes the warp's 16 x kD gradient rows, times `scale`, as
// bf16 to dst + (row0 + r) * stride for rows before `seq`, staging them in
// `stage` (16 rows of stride kLdW, owned by this warp); 16-byte packs, so
// dst and stride * 2 bytes must be 16-byte aligned.
template <int kD>
__device__ void StoreGradientRows(bf16* dst, int64_t stride, int64_t row0,
                                  int64_t seq, FragC (&acc)[kD / 16],
                                  float scale, float* stage) {
  constexpr int kLd = Strides<kD>::kLdW;
  constexpr int kRowPacks = kD / kPack<bf16>;
#pragma unroll
  for (int n = 0; n < kD / 16; ++n) {
    wmma::store_matrix_sync(stage + n * 16, acc[n], kLd, wmma::mem_row_major);
  }
  __syncwarp();
  for (int e = threadIdx.x % 32; e < kWarpRows * kRowPacks; e += 32) {
    const int r = e / kRowPacks, c = e % kRowPacks * kPack<bf16>;
    if (row0 + r >= seq) continue;
    float pack[kPack<bf16>];
#pragma unroll
    for (int k = 0; k < kPack<bf16>; ++k) {
      pack[k] = scale * stage[r * kLd + c + k];
    }
    StPack(dst + (row0 + r) * stride + c, pack);
  }
}

// The grid and geometry of a launch: false when the shape is not one the
// kernels take (head size, heads dividing channels, grid limits).
inline bool MakeTcGeometry(int64_t batch, int64_t seq, int64_t channels,
                           int64_t heads, TcGeometry* g, dim3* grid) {
  if (heads <= 0 || channels % heads != 0) return false;
  const int64_t hs = channels / heads, tiles = (seq + kTile - 1) / kTile;
  if (!AttentionTcSupportsHeadSize(hs)) return false;
  if (batch * heads > 0x7fffffff || tiles > 65535) return false;
  *g = {seq, channels, heads, static_cast<int>(tiles),
        1.f / sqrtf(static_cast<float>(hs))};
  *grid =
      dim3(static_cast<unsigned>(batch * heads), static_cast<unsigned>(tiles));
  return true;
}

// Kernels above 48 KB of dynamic shared memory must opt in, per device;
// the call is cheap, so every launch makes it for the current device.
template <typename Kernel, typename... Args>
cudaError_t LaunchWithSmem(Kernel kernel, size_t bytes, dim3 grid,
                           cudaStream_t stream, Args... args) {
  const cudaError_t e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(bytes));
  if (e != cudaSuccess) return e;
  kernel<<<grid, kThreads, bytes, stream>>>(args...);
  return cudaGetLastError();
}

}  // namespace trainyard::engine::cuda::attention_tc

#endif  // TRAINYARD_ENGINE_CUDA_ATTENTION_TC_TILES_CUH_
