// Causal multi-head attention on tensor cores, flash-attention style, for
// bf16 activations: every product of two matrices is an nvcuda::wmma
// 16x16x16 multiply of bf16 operands into fp32 accumulators; the softmax,
// its statistics and all scaling are fp32 on CUDA cores. No T x T matrix is
// stored: the forward saves one log-sum-exp per query row, the backward
// recomputes each probability from it. Same formulas as
// attention_kernels.cu (its header comment derives them).
//
// Tiles. A block is 4 warps (128 threads) and owns one (sequence, head) pair
// (blockIdx.x) and one tile of kTile = 64 rows (blockIdx.y): query rows in
// the forward and the query-gradient kernel, key rows in the key/value-
// gradient kernel. Warp w owns rows 16w..16w+15 of the tile: it alone
// computes, reads and writes those rows of every per-row buffer below, so
// those steps need only __syncwarp; the block-wide __syncthreads guard only
// the tiles of the other side (keys and values, or queries and dout) that
// all four warps read. Tiles past the sequence end are padded: their rows
// are loaded as zeros (never read from global memory) and their scores
// masked (probability exactly 0), and no row at or past T is ever written.
//
//   forward (one block per query tile, over key tiles kt = 0..qt):
//     S = Q K^T (wmma) -> smem; per row, online softmax in fp32: lanes 2r
//     and 2r+1 of a warp own row r, half the 64 columns each, and keep the
//     row's running max m and sum l in registers; P = e^(scale S - m) as
//     bf16 -> smem; the output accumulator O (fp32, smem) is rescaled row by
//     row (wmma fragment layouts are opaque, so never in registers) and
//     O += P V (wmma). Finally out = O / l (bf16), lse = m + log l.
//   backward, query side (one block per query tile, key tiles ascending):
//     D_i = dout_i . out_i -> delta; S = Q K^T, dP = dout V^T (wmma);
//     dS = e^(scale S - lse) (dP - D) as bf16 -> smem; dQ += dS K (wmma,
//     fp32 register fragments, never rescaled); dq = scale dQ.
//   backward, key side (one block per key tile, query tiles ascending from
//     the diagonal; reads delta, so it runs after the query side):
//     S^T = K Q^T, dP^T = V dout^T (wmma); P^T and dS^T as bf16 -> smem;
//     dV += P^T dout, dK += dS^T Q (wmma, register fragments); dk = scale dK.
//
// Deterministic: no atomics. Every output element is summed by one warp in
// a fixed order (tiles ascending, 16-wide k-steps ascending, each mma_sync
// in the hardware's fixed order), so a rerun repeats bit for bit.
//
// Precision: Q K^T and dout V^T multiply the bf16 inputs themselves with
// fp32 accumulation, and the row sums l add the unrounded fp32 p; only P
// (forward, dV) and dS (dQ, dK) are rounded to bf16 before their product,
// a relative error <= 2^-8 per term (cuda_attention_test.cc derives its
// tolerances from this).
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
#include <mma.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>

#include "engine/cuda/act_type.cuh"
#include "engine/cuda/attention_tc_kernels.h"

namespace trainyard::engine::cuda {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kTile = 64;      // rows of a query or key tile
constexpr int kWarpRows = 16;  // rows each warp owns (one wmma tile high)
constexpr int kWarps = kTile / kWarpRows;
constexpr int kThreads = 32 * kWarps;
constexpr int kLdP = kTile + 8;  // bf16 64-column tiles (P, dS)
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
  static constexpr int kLdO = kD + 4;     // fp32 output accumulator
  static constexpr int kLdW = (kTile > kD ? kTile : kD) + 4;  // fp32 scratch
  static_assert(kD % 16 == 0, "head size: whole wmma tiles");
  static_assert(kLdX % 8 == 0, "bf16 wmma ldm: a multiple of 8");
  static_assert(kLdS % 4 == 0 && kLdO % 4 == 0 && kLdW % 4 == 0,
                "fp32 wmma ldm: a multiple of 4");
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

// Block-wide: dst[r][c] = src[(row0 + r) * stride + c] for the tile's
// kTile rows and kD columns, zeros for rows at or past `seq`. Consecutive
// threads read consecutive columns of a row (coalesced).
template <int kD>
__device__ void LoadRows(bf16* dst, const bf16* src, int64_t stride,
                         int64_t row0, int64_t seq) {
  constexpr int kLd = Strides<kD>::kLdX;
  for (int e = threadIdx.x; e < kTile * kD; e += kThreads) {
    const int r = e / kD, c = e % kD;
    const int64_t row = row0 + r;
    dst[r * kLd + c] =
        row < seq ? src[row * stride + c] : __float2bfloat16_rn(0.f);
  }
}

// Block-wide: dst[r] = src[row0 + r] for the tile's rows, 0 past `seq`.
__device__ void LoadRowStats(float* dst, const float* src, int64_t row0,
                             int64_t seq) {
  for (int r = threadIdx.x; r < kTile; r += kThreads) {
    dst[r] = row0 + r < seq ? src[row0 + r] : 0.f;
  }
}

// Warp-wide: c[16 x kN] (fp32, row-major) = a[16 x kK] b[kN x kK]^T, with
// a and b row-major bf16. The B operand's 16x16 block (k, n) is
// b[n*16 + nn][k + kk] at b + (n*16 + nn) * ldb + k + kk: column-major
// with leading dimension ldb from b + n*16*ldb + k.
template <int kN, int kK>
__device__ void WarpMatmulABt(float* c, int ldc, const bf16* a, int lda,
                              const bf16* b, int ldb) {
  FragC acc[kN / 16];
#pragma unroll
  for (int n = 0; n < kN / 16; ++n) wmma::fill_fragment(acc[n], 0.f);
#pragma unroll
  for (int k = 0; k < kK; k += 16) {
    FragA fa;
    wmma::load_matrix_sync(fa, a + k, lda);
#pragma unroll
    for (int n = 0; n < kN / 16; ++n) {
      FragBt fb;
      wmma::load_matrix_sync(fb, b + n * 16 * ldb + k, ldb);
      wmma::mma_sync(acc[n], fa, fb, acc[n]);
    }
  }
#pragma unroll
  for (int n = 0; n < kN / 16; ++n) {
    wmma::store_matrix_sync(c + n * 16, acc[n], ldc, wmma::mem_row_major);
  }
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
// `stage` (16 rows of stride kLdW, owned by this warp).
template <int kD>
__device__ void StoreGradientRows(bf16* dst, int64_t stride, int64_t row0,
                                  int64_t seq, FragC (&acc)[kD / 16],
                                  float scale, float* stage) {
  constexpr int kLd = Strides<kD>::kLdW;
#pragma unroll
  for (int n = 0; n < kD / 16; ++n) {
    wmma::store_matrix_sync(stage + n * 16, acc[n], kLd, wmma::mem_row_major);
  }
  __syncwarp();
  for (int e = threadIdx.x % 32; e < kWarpRows * kD; e += 32) {
    const int r = e / kD, c = e % kD;
    if (row0 + r < seq) {
      dst[(row0 + r) * stride + c] =
          __float2bfloat16_rn(scale * stage[r * kLd + c]);
    }
  }
}

// ---------------------------------------------------------------- forward

// The online-softmax step for one row and one key tile, run by the two
// lanes owning the row (`half` picks columns [32 half, 32 half + 32)).
// Scales and masks the row's scores in place, writes p = e^(s - m_new) as
// bf16, updates the row's m and l and returns
// the factor e^(m_old - m_new) the row's output must be rescaled by.
// Every row has an unmasked key in every tile it visits (key k0 <= i in
// tiles before the diagonal, and key i itself on it), so m_new is finite:
// no inf - inf. Masked scores are -inf, and e^-inf is exactly 0. The two
// lanes combine their halves with fmaxf and +, which commute, so both hold
// the same bits of m and l.
__device__ float SoftmaxRowHalf(float* s_row, bf16* p_row, int64_t i,
                                int64_t k0, int half, const TcGeometry& g,
                                float* m, float* l) {
  float tile_max = -INFINITY;
  for (int c = 32 * half; c < 32 * half + 32; ++c) {
    const int64_t j = k0 + c;
    const float s = j > i || j >= g.seq ? -INFINITY : s_row[c] * g.scale;
    s_row[c] = s;
    tile_max = fmaxf(tile_max, s);
  }
  tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
  const float m_new = fmaxf(*m, tile_max);
  const float correction = expf(*m - m_new);  // 0 on the first tile
  float sum = 0.f;
  for (int c = 32 * half; c < 32 * half + 32; ++c) {
    const float p = expf(s_row[c] - m_new);
    p_row[c] = __float2bfloat16_rn(p);
    sum += p;  // the unrounded p: l carries no bf16 error
  }
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  *l = *l * correction + sum;
  *m = m_new;
  return correction;
}

// Warp-wide: o (16 x kD fp32 rows, stride kLdO) += p (16 x 64 bf16) v.
template <int kD>
__device__ void AccumulateOutput(float* o, const bf16* p, const bf16* v) {
  constexpr int kLdO = Strides<kD>::kLdO;
  FragC acc[kD / 16];
#pragma unroll
  for (int n = 0; n < kD / 16; ++n) {
    wmma::load_matrix_sync(acc[n], o + n * 16, kLdO, wmma::mem_row_major);
  }
  WarpMmaAB<kD, kTile>(acc, p, kLdP, v, Strides<kD>::kLdX);
#pragma unroll
  for (int n = 0; n < kD / 16; ++n) {
    wmma::store_matrix_sync(o + n * 16, acc[n], kLdO, wmma::mem_row_major);
  }
}

template <int kD>
__global__ void __launch_bounds__(kThreads)
    AttentionForwardTcKernel(bf16* out, float* lse, const bf16* qkv,
                             TcGeometry g) {
  extern __shared__ __align__(128) unsigned char smem[];
  CheckSmemAlignment(smem);
  using L = ForwardSmem<kD>;
  bf16 *sq = At<bf16>(smem, L::kQ), *sk = At<bf16>(smem, L::kK),
       *sv = At<bf16>(smem, L::kV), *sp = At<bf16>(smem, L::kP);
  float *ss = At<float>(smem, L::kS), *so = At<float>(smem, L::kO);
  const HeadOffsets h = HeadOf(g, kD);
  const int qt = g.tiles - 1 - static_cast<int>(blockIdx.y);  // long rows 1st
  const int64_t q0 = static_cast<int64_t>(qt) * kTile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int w0 = warp * kWarpRows;               // the warp's first row
  const int r = w0 + lane / 2, half = lane % 2;  // the lane's row
  const int64_t i = q0 + r;
  float* o_row = so + r * L::kLdO;
  for (int d = half * kD / 2; d < (half + 1) * kD / 2; ++d) o_row[d] = 0.f;
  LoadRows<kD>(sq, qkv + h.qkv, h.qkv_row, q0, g.seq);
  float m = -INFINITY, l = 0.f;
  for (int kt = 0; kt <= qt; ++kt) {
    const int64_t k0 = static_cast<int64_t>(kt) * kTile;
    __syncthreads();  // every warp is done with the previous k and v
    LoadRows<kD>(sk, qkv + h.qkv + g.channels, h.qkv_row, k0, g.seq);
    LoadRows<kD>(sv, qkv + h.qkv + 2 * g.channels, h.qkv_row, k0, g.seq);
    __syncthreads();
    WarpMatmulABt<kTile, kD>(ss + w0 * L::kLdS, L::kLdS, sq + w0 * L::kLdX,
                             L::kLdX, sk, L::kLdX);
    __syncwarp();
    const float correction =
        SoftmaxRowHalf(ss + r * L::kLdS, sp + r * kLdP, i, k0, half, g, &m, &l);
    for (int d = half * kD / 2; d < (half + 1) * kD / 2; ++d) {
      o_row[d] *= correction;
    }
    __syncwarp();
    AccumulateOutput<kD>(so + w0 * L::kLdO, sp + w0 * kLdP, sv);
    __syncwarp();
  }
  if (i >= g.seq) return;  // a padding row: no out, no lse
  bf16* out_row = out + h.out + i * h.out_row;
  const float inv = 1.f / l;
  for (int d = half * kD / 2; d < (half + 1) * kD / 2; ++d) {
    out_row[d] = __float2bfloat16_rn(o_row[d] * inv);
  }
  if (half == 0) lse[h.stats + i] = m + logf(l);
}

// --------------------------------------------------------------- backward

// Threads 0..63: D_i = dout_i . out_i (fp32, ascending channels, the
// reference kernels' order) into delta and the block's copy.
template <int kD>
__device__ void ComputeDelta(float* delta, float* s_delta, const bf16* dout,
                             const bf16* out, const HeadOffsets& h, int64_t q0,
                             int64_t seq) {
  for (int r = threadIdx.x; r < kTile; r += kThreads) {
    const int64_t i = q0 + r;
    float d_i = 0.f;
    if (i < seq) {
      const int64_t at = h.out + i * h.out_row;
      for (int d = 0; d < kD; ++d) d_i += Ld(dout + at + d) * Ld(out + at + d);
      delta[h.stats + i] = d_i;
    }
    s_delta[r] = d_i;
  }
}

// Warp-wide, for the warp's 16 x 64 block of a (row tile, column tile)
// pair: from scores s and dP (fp32, stride kLdW) writes p = e^(scale s -
// lse) and ds = p (dP - D) as bf16 (stride kLdP; p only when p_out is set).
// Block row w0 + r stands for row0 + w0 + r, column c for col0 + c; rows
// are queries and columns keys when `queries_are_rows`, else the reverse.
// s_lse and s_delta hold the query tile's statistics, indexed within the
// tile. Masked pairs (key after query, or query past seq, which covers key
// past seq) get exactly 0.
template <int kD>
__device__ void ProbabilityGradients(bf16* p_out, bf16* ds_out, const float* s,
                                     const float* dp, const float* s_lse,
                                     const float* s_delta, int64_t row0, int w0,
                                     int64_t col0, bool queries_are_rows,
                                     const TcGeometry& g) {
  constexpr int kLd = Strides<kD>::kLdW;
  for (int e = threadIdx.x % 32; e < kWarpRows * kTile; e += 32) {
    const int r = e / kTile, c = e % kTile;
    const int q = queries_are_rows ? w0 + r : c;  // the query, in its tile
    const int64_t i = queries_are_rows ? row0 + w0 + r : col0 + c;
    const int64_t j = queries_are_rows ? col0 + c : row0 + w0 + r;
    float p = 0.f, ds = 0.f;
    if (j <= i && i < g.seq) {
      p = expf(s[r * kLd + c] * g.scale - s_lse[q]);
      ds = p * (dp[r * kLd + c] - s_delta[q]);
    }
    if (p_out != nullptr) p_out[r * kLdP + c] = __float2bfloat16_rn(p);
    ds_out[r * kLdP + c] = __float2bfloat16_rn(ds);
  }
}

// dq for one query tile; also writes delta for the key-side kernel.
template <int kD>
__global__ void __launch_bounds__(kThreads)
    AttentionQueryGradTcKernel(bf16* dqkv, float* delta, const bf16* dout,
                               const bf16* out, const bf16* qkv,
                               const float* lse, TcGeometry g) {
  extern __shared__ __align__(128) unsigned char smem[];
  CheckSmemAlignment(smem);
  using L = BackwardSmem<kD>;
  bf16 *sq = At<bf16>(smem, L::kOwn0), *sdo = At<bf16>(smem, L::kOwn1),
       *sk = At<bf16>(smem, L::kOther0), *sv = At<bf16>(smem, L::kOther1),
       *sds = At<bf16>(smem, L::kPa);
  float *ss = At<float>(smem, L::kWa), *sdp = At<float>(smem, L::kWb),
        *s_lse = At<float>(smem, L::kLse),
        *s_delta = At<float>(smem, L::kDelta);
  const HeadOffsets h = HeadOf(g, kD);
  const int qt = g.tiles - 1 - static_cast<int>(blockIdx.y);  // long rows 1st
  const int64_t q0 = static_cast<int64_t>(qt) * kTile;
  const int w0 = static_cast<int>(threadIdx.x / 32) * kWarpRows;
  LoadRows<kD>(sq, qkv + h.qkv, h.qkv_row, q0, g.seq);
  LoadRows<kD>(sdo, dout + h.out, h.out_row, q0, g.seq);
  LoadRowStats(s_lse, lse + h.stats, q0, g.seq);
  ComputeDelta<kD>(delta, s_delta, dout, out, h, q0, g.seq);
  FragC dq[kD / 16];
  ZeroFragments<kD>(dq);
  for (int kt = 0; kt <= qt; ++kt) {
    const int64_t k0 = static_cast<int64_t>(kt) * kTile;
    __syncthreads();  // every warp is done with the previous k and v
    LoadRows<kD>(sk, qkv + h.qkv + g.channels, h.qkv_row, k0, g.seq);
    LoadRows<kD>(sv, qkv + h.qkv + 2 * g.channels, h.qkv_row, k0, g.seq);
    __syncthreads();
    WarpMatmulABt<kTile, kD>(ss + w0 * L::kLdW, L::kLdW, sq + w0 * L::kLdX,
                             L::kLdX, sk, L::kLdX);
    WarpMatmulABt<kTile, kD>(sdp + w0 * L::kLdW, L::kLdW, sdo + w0 * L::kLdX,
                             L::kLdX, sv, L::kLdX);
    __syncwarp();
    ProbabilityGradients<kD>(nullptr, sds + w0 * kLdP, ss + w0 * L::kLdW,
                             sdp + w0 * L::kLdW, s_lse, s_delta, q0, w0, k0,
                             /*queries_are_rows=*/true, g);
    __syncwarp();
    WarpMmaAB<kD, kTile>(dq, sds + w0 * kLdP, kLdP, sk, L::kLdX);
  }
  StoreGradientRows<kD>(dqkv + h.qkv, h.qkv_row, q0 + w0, g.seq, dq, g.scale,
                        ss + w0 * L::kLdW);
}

// dk and dv for one key tile. REQUIRES: the query-side kernel has written
// delta (it runs first on the same stream).
template <int kD>
__global__ void __launch_bounds__(kThreads)
    AttentionKeyValueGradTcKernel(bf16* dqkv, const float* delta,
                                  const bf16* dout, const bf16* qkv,
                                  const float* lse, TcGeometry g) {
  extern __shared__ __align__(128) unsigned char smem[];
  CheckSmemAlignment(smem);
  using L = BackwardSmem<kD>;
  bf16 *sk = At<bf16>(smem, L::kOwn0), *sv = At<bf16>(smem, L::kOwn1),
       *sq = At<bf16>(smem, L::kOther0), *sdo = At<bf16>(smem, L::kOther1),
       *spt = At<bf16>(smem, L::kPa), *sdst = At<bf16>(smem, L::kPb);
  float *sst = At<float>(smem, L::kWa), *sdpt = At<float>(smem, L::kWb),
        *s_lse = At<float>(smem, L::kLse),
        *s_delta = At<float>(smem, L::kDelta);
  const HeadOffsets h = HeadOf(g, kD);
  const int kt = static_cast<int>(blockIdx.y);  // tile 0 has the most work
  const int64_t k0 = static_cast<int64_t>(kt) * kTile;
  const int w0 = static_cast<int>(threadIdx.x / 32) * kWarpRows;
  LoadRows<kD>(sk, qkv + h.qkv + g.channels, h.qkv_row, k0, g.seq);
  LoadRows<kD>(sv, qkv + h.qkv + 2 * g.channels, h.qkv_row, k0, g.seq);
  FragC dk[kD / 16], dv[kD / 16];
  ZeroFragments<kD>(dk);
  ZeroFragments<kD>(dv);
  for (int qt = kt; qt < g.tiles; ++qt) {
    const int64_t q0 = static_cast<int64_t>(qt) * kTile;
    __syncthreads();  // every warp is done with the previous q and dout
    LoadRows<kD>(sq, qkv + h.qkv, h.qkv_row, q0, g.seq);
    LoadRows<kD>(sdo, dout + h.out, h.out_row, q0, g.seq);
    LoadRowStats(s_lse, lse + h.stats, q0, g.seq);
    LoadRowStats(s_delta, delta + h.stats, q0, g.seq);
    __syncthreads();
    WarpMatmulABt<kTile, kD>(sst + w0 * L::kLdW, L::kLdW, sk + w0 * L::kLdX,
                             L::kLdX, sq, L::kLdX);
    WarpMatmulABt<kTile, kD>(sdpt + w0 * L::kLdW, L::kLdW, sv + w0 * L::kLdX,
                             L::kLdX, sdo, L::kLdX);
    __syncwarp();
    ProbabilityGradients<kD>(spt + w0 * kLdP, sdst + w0 * kLdP,
                             sst + w0 * L::kLdW, sdpt + w0 * L::kLdW, s_lse,
                             s_delta, k0, w0, q0,
                             /*queries_are_rows=*/false, g);
    __syncwarp();
    WarpMmaAB<kD, kTile>(dv, spt + w0 * kLdP, kLdP, sdo, L::kLdX);
    WarpMmaAB<kD, kTile>(dk, sdst + w0 * kLdP, kLdP, sq, L::kLdX);
  }
  bf16* dk_base = dqkv + h.qkv + g.channels;
  StoreGradientRows<kD>(dk_base, h.qkv_row, k0 + w0, g.seq, dk, g.scale,
                        sst + w0 * L::kLdW);
  StoreGradientRows<kD>(dk_base + g.channels, h.qkv_row, k0 + w0, g.seq, dv,
                        1.f, sdpt + w0 * L::kLdW);
}

// ---------------------------------------------------------------- launch

bool MakeTcGeometry(int64_t batch, int64_t seq, int64_t channels, int64_t heads,
                    TcGeometry* g, dim3* grid) {
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

template <int kD>
cudaError_t ForwardTc(bf16* out, float* lse, const bf16* qkv,
                      const TcGeometry& g, dim3 grid, cudaStream_t stream) {
  return LaunchWithSmem(AttentionForwardTcKernel<kD>, ForwardSmem<kD>::kBytes,
                        grid, stream, out, lse, qkv, g);
}

template <int kD>
cudaError_t BackwardTc(bf16* dqkv, float* delta, const bf16* dout,
                       const bf16* out, const bf16* qkv, const float* lse,
                       const TcGeometry& g, dim3 grid, cudaStream_t stream) {
  constexpr size_t kBytes = BackwardSmem<kD>::kBytes;
  const cudaError_t e =
      LaunchWithSmem(AttentionQueryGradTcKernel<kD>, kBytes, grid, stream, dqkv,
                     delta, dout, out, qkv, lse, g);
  if (e != cudaSuccess) return e;
  return LaunchWithSmem(AttentionKeyValueGradTcKernel<kD>, kBytes, grid, stream,
                        dqkv, static_cast<const float*>(delta), dout, qkv, lse,
                        g);
}

}  // namespace

bool AttentionTcSupportsHeadSize(int64_t head_size) {
  return head_size == 32 || head_size == 64 || head_size == 128;
}

cudaError_t LaunchAttentionForwardTc(void* out, float* lse, const void* qkv,
                                     int64_t batch, int64_t seq,
                                     int64_t channels, int64_t heads,
                                     cudaStream_t stream) {
  if (batch <= 0 || seq <= 0) return cudaSuccess;
  TcGeometry g;
  dim3 grid;
  if (!MakeTcGeometry(batch, seq, channels, heads, &g, &grid)) {
    return cudaErrorInvalidValue;
  }
  bf16* o = As<bf16>(out);
  const bf16* x = As<bf16>(qkv);
  switch (channels / heads) {
    case 32:
      return ForwardTc<32>(o, lse, x, g, grid, stream);
    case 64:
      return ForwardTc<64>(o, lse, x, g, grid, stream);
    default:
      return ForwardTc<128>(o, lse, x, g, grid, stream);
  }
}

cudaError_t LaunchAttentionBackwardTc(void* dqkv, float* delta,
                                      const void* dout, const void* out,
                                      const void* qkv, const float* lse,
                                      int64_t batch, int64_t seq,
                                      int64_t channels, int64_t heads,
                                      cudaStream_t stream) {
  if (batch <= 0 || seq <= 0) return cudaSuccess;
  TcGeometry g;
  dim3 grid;
  if (!MakeTcGeometry(batch, seq, channels, heads, &g, &grid)) {
    return cudaErrorInvalidValue;
  }
  bf16* dx = As<bf16>(dqkv);
  const bf16 *dy = As<bf16>(dout), *y = As<bf16>(out), *x = As<bf16>(qkv);
  switch (channels / heads) {
    case 32:
      return BackwardTc<32>(dx, delta, dy, y, x, lse, g, grid, stream);
    case 64:
      return BackwardTc<64>(dx, delta, dy, y, x, lse, g, grid, stream);
    default:
      return BackwardTc<128>(dx, delta, dy, y, x, lse, g, grid, stream);
  }
}

}  // namespace trainyard::engine::cuda
