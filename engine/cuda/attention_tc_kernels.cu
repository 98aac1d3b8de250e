// Causal multi-head attention on tensor cores, flash-attention style, for
// bf16 activations: every product of two matrices is an mma.sync m16n8k16
// of bf16 operands into fp32 accumulators (warp_mma.h); the softmax, its
// statistics and all scaling are fp32 on CUDA cores. No T x T matrix is
// stored, in global or in shared memory: scores live in registers, and the
// forward saves one log-sum-exp per query row, from which the backward
// recomputes each probability. Same formulas as attention_kernels.cu (its
// header comment derives them). This file holds the forward,
// attention_tc_backward_kernels.cu the backward and attention_tc_tiles.cuh
// the tiles, layouts, loads and products both use.
//
//   forward (one block per query tile, over the key tiles up to the one
//   holding its last row, the next tile's keys and values copying in
//   while the warps work; its tilings, attention_tc_kernels.h, differ only
//   in how the rows are spread over warps and blocks):
//     S = Q K^T (registers); per row, online softmax in fp32 against the
//     row's running max m (base 2: scores carry the factor log2 e, so
//     e^x is one exp2, ex2.approx.ftz): each row's 64 scores of a tile are
//     spread over the 4 lanes of a quad, which combine their max and sum with
//     two xor shuffles; P = 2^(s - m), l = l 2^(m_old - m) + sum P, O = O
//     2^(m_old - m) + P V, with P rounded to bf16 straight from the score
//     registers into the product's A fragments. Finally out = O / l
//     (bf16), lse = m ln 2 + ln l (natural log, as the backward reads it).
//   backward: see attention_tc_backward_kernels.cu.
//
// Deterministic: no atomics. Every output element is summed by one warp in
// a fixed order (tiles ascending, 16-wide k-steps ascending, each mma in
// the hardware's fixed order; a row's sums combined over its quad in a
// fixed shuffle order), so a rerun repeats bit for bit.
//
// Precision: Q K^T and dout V^T multiply the bf16 inputs themselves with
// fp32 accumulation, and the row sums l add the unrounded fp32 p; only P
// (forward, dV) and dS (dQ, dK) are rounded to bf16 before their product,
// a relative error <= 2^-8 per term (cuda_attention_test.cc derives its
// tolerances from this).
#include <cmath>
#include <cstdint>
#include <string>

#include "engine/cuda/act_type.cuh"
#include "engine/cuda/attention_tc_kernels.h"
#include "engine/cuda/attention_tc_tiles.cuh"
#include "engine/cuda/vec16.cuh"

namespace trainyard::engine::cuda {
namespace attention_tc {
namespace {

// One key tile's step of the online softmax for one row tile of 16: s
// (its scores, masked) becomes P = 2^(scale2 s - m), the running max m
// and sum l of the lane's two rows move on, and `correction` is the factor
// 2^(m_old - m) the rows' output o takes before P v is added to it
// (Rescale; SoftmaxStep does both). Every row has an unmasked key in every
// tile it visits (every key in tiles before the diagonal, and key i itself
// on it), so the running max is finite from the first tile on: no inf -
// inf. Masked scores are -inf, and 2^-inf is exactly 0 (as is the first
// tile's correction). The scaling, l's update and the log-sum-exp are
// rounded as written (__fmul_rn, __fmaf_rn), so every tiling gives the
// same bits: left to the compiler, which products it fused into the next
// add depended on the kernel around them, and the 32x4 tiling's
// log-sum-exps differed from the 16x4 tiling's in the last bit on an H100
// (2026-11-24).
__device__ __forceinline__ void SoftmaxScores(float (&s)[kTile / 8][4],
                                              float (&m)[2], float (&l)[2],
                                              float (&correction)[2],
                                              float scale2) {
  float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int n = 0; n < kTile / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[n][e] = __fmul_rn(s[n][e], scale2);
      tile_max[e / 2] = fmaxf(tile_max[e / 2], s[n][e]);
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    tile_max[r] =
        fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
    tile_max[r] =
        fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
    const float m_new = fmaxf(m[r], tile_max[r]);
    correction[r] = Exp2Ftz(m[r] - m_new);  // 0 on the first tile
    m[r] = m_new;
  }
  float sum[2] = {0.f, 0.f};
#pragma unroll
  for (int n = 0; n < kTile / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float p = Exp2Ftz(s[n][e] - m[e / 2]);
      s[n][e] = p;
      sum[e / 2] += p;  // the unrounded p: l carries no bf16 error
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], 1);
    sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], 2);
    l[r] = __fmaf_rn(l[r], correction[r], sum[r]);
  }
}

template <int kD>
__device__ __forceinline__ void Rescale(float (&o)[kD / 8][4],
                                        const float (&correction)[2]) {
#pragma unroll
  for (int n = 0; n < kD / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) o[n][e] *= correction[e / 2];
  }
}

template <int kD>
__device__ __forceinline__ void SoftmaxStep(float (&s)[kTile / 8][4],
                                            float (&m)[2], float (&l)[2],
                                            float (&o)[kD / 8][4],
                                            float scale2) {
  float correction[2];
  SoftmaxScores(s, m, l, correction, scale2);
  Rescale<kD>(o, correction);
}

// Warp-wide, the end of a forward for the warp's 16 rows from row0: out =
// o / l, staged through `stage` (the warp's rows of a tile in the kSwizzled
// layout, free by now), and each row's log-sum-exp m ln 2 + ln l (m the
// base-2 max).
template <int kD, bool kSwizzled = false>
__device__ void StoreForwardRows(bf16* out, float* lse, const HeadOffsets& h,
                                 const TcGeometry& g, int64_t row0,
                                 const float (&o)[kD / 8][4],
                                 const float (&m)[2], const float (&l)[2],
                                 bf16* stage) {
  const float inv[2] = {1.f / l[0], 1.f / l[1]};
  StoreRows<kD, kSwizzled>(out + h.out, h.out_row, row0, g.seq, o, inv, stage);
  const int lane = threadIdx.x % 32;
  if (lane % 4 == 0) {
    for (int r = 0; r < 2; ++r) {
      const int64_t row = row0 + lane / 4 + 8 * r;
      if (row < g.seq) lse[h.stats + row] = __fmaf_rn(m[r], kLn2, logf(l[r]));
    }
  }
}

// Blocks an SM holds at once, which caps the registers: two 8-warp blocks
// up to 64 channels (16 warps an SM, 128 registers a thread, as the 16 x 4
// tiling takes by itself; left alone, the compiler gives the swizzled
// 8-warp blocks 140, and an SM holds one). 0 leaves the compiler free (a
// cap of 128 it would meet anyway made it spill the 16 x 4 tiling).
constexpr int ForwardBlocksPerSm(int head_size, int row_tiles, int warps) {
  return row_tiles == 1 && warps == 8 && head_size <= 64 ? 2 : 0;
}

// The warpgroup forward's (by kGroups, warpgroups a block): two blocks of
// two up to 64 channels (128 registers a thread, as one warpgroup takes
// by itself); else (0) as the compiler likes.
constexpr int ForwardWgBlocksPerSm(int head_size, int groups) {
  return groups == 2 && head_size <= 64 ? 2 : 0;
}

// One block per query tile of kWarpsN x 16 kM rows, warp w holding rows
// 16 kM w.. as kM row tiles of 16 (QueryRows), over key tiles of 64 from
// the first to the one holding the tile's last row. A warp skips the key
// tiles after its own last row, so each row visits the key tiles
// 0..(its row) / 64 whatever the tiling: the same bits from every tiling.
// Tiles in the kSwizzled layout (Tile).
template <int kD, int kM, int kWarpsN, bool kSwz>
__global__ void __launch_bounds__(32 * kWarpsN,
                                  ForwardBlocksPerSm(kD, kM, kWarpsN))
    AttentionForwardTcKernel(bf16* out, float* lse, const bf16* qkv,
                             TcGeometry g) {
  using Q = QueryRows<kM, kWarpsN>;
  constexpr int kQRows = Q::kRows, kBlock = Q::kBlockThreads;
  extern __shared__ __align__(1024) unsigned char smem[];
  CheckSmemAlignment(smem);
  using L = ForwardSmem<kD, kQRows, kSwz>;
  bf16* sq = At<bf16>(smem, L::kQ);
  const HeadOffsets h = HeadOf(g, kD);
  const Q rows(g.tiles);
  const int q0 = rows.q0;
  const auto kv = KeyValueStages<kD, kBlock, false, kSwz>(smem, L::kK, L::kV,
                                                          L::kT, qkv, h, g);
  AsyncLoadRows<kD, kQRows, kBlock, kSwz>(sq, qkv + h.qkv, h.qkv_row, q0,
                                          g.seq);
  kv.Load(0, 0);
  CpAsyncCommit();
  const float scale2 = g.scale * kLog2e;
  uint32_t q[kM][kD / 16][4];  // the warp's query rows, for every key tile
  float o[kM][kD / 8][4] = {};
  float m[kM][2], l[kM][2];
#pragma unroll
  for (int t = 0; t < kM; ++t) {
    m[t][0] = m[t][1] = -INFINITY;
    l[t][0] = l[t][1] = 0.f;
  }
  for (int kt = 0; kt <= rows.last; ++kt) {
    kv.Advance(kt, kt < rows.last ? int64_t{kt + 1} * kTile : -1);
    __syncthreads();  // this tile (and on the first, Q) is whole
    if (kt == 0) {
#pragma unroll
      for (int t = 0; t < kM; ++t) LoadA<kD, kSwz>(q[t], sq, rows.RowTile(t));
    }
    if (rows.Visits(kt)) {
      float s[kM][kTile / 8][4];
      ProductABt<kD, kM, kSwz>(s, q, kv.First(kt));
      uint32_t p[kM][kTile / 16][4];
#pragma unroll
      for (int t = 0; t < kM; ++t) {
        rows.MaskIfDiagonal(s[t], t, kt);
        SoftmaxStep<kD>(s[t], m[t], l[t], o[t], scale2);
        ToA(p[t], s[t]);
      }
      MmaAB<kD, kM, kSwz>(o, p, kv.Second(kt));
    }
    __syncthreads();  // every warp is done with this stage: it is refilled
  }
#pragma unroll
  for (int t = 0; t < kM; ++t) {
    // The warp's own rows of sq are free (Q is in registers): the stage.
    const int wt = rows.RowTile(t);
    StoreForwardRows<kD, kSwz>(out, lse, h, g, q0 + wt, o[t], m[t], l[t],
                               RowsFrom<kD, kSwz>(sq, wt));
  }
}

// The forward of the warpgroup tilings (AttentionTcTiling::warpgroup): the
// 16 x 4 tiling's rows, warps and softmax, with each key tile's two
// products as warpgroup products (warpgroup_mma.h) the four warps issue
// together: S = Q K^T as kD/16 products of 64 x 64 x 16, Q's and K's
// tiles both from shared memory (K-major), and O += P V as 4 products of
// 64 x kD x 16, P from registers and V's tile read as it lies (MN-major).
// Queries, keys and values sit in shared memory as core tiles (CoreTile),
// which the products read without ldmatrix; Q's tile (in the padded
// tile's room) stages the output rows at the end. With kSwz (hs 32 or
// 64), all are swizzled tiles instead (Tile<kD, 64, true>, read through
// swizzled descriptors: RowsAsN), which the copies fill in whole 128-byte
// lines.
//
// A block is kGroups warpgroups, each with 64 query rows of its own (the
// block's rows 64 w..), sharing the key and value tiles the block copies
// (every thread copying): with two, a tile copied serves 128 rows. A
// warpgroup stops after the key tile holding its last row (the one
// before the block's last, for the first of two), finishing its last
// P V in the step after it, while the other goes on.
//
// The products run while the warps work, as FlashAttention 3 overlaps
// them: key tile kt's S and tile kt-1's P V are issued together, the
// softmax of S (once it is in) runs while P V is still on the tensor
// cores, and O takes the correction only when P V is in. So the keys run
// one tile ahead of the values: the copies of step kt (one commit group)
// bring K_kt and V_(kt-1), each into the stage its tile kt-2 left, while
// step kt-1 computes. Per row the same operations in the same order as
// the other tilings (O = O c + P V, tile after tile): the same bits.
template <int kD, bool kSwz, int kGroups>
__global__ void __launch_bounds__(warpgroup_mma::kThreads* kGroups,
                                  ForwardWgBlocksPerSm(kD, kGroups))
    AttentionForwardWgKernel(bf16* out, float* lse, const bf16* qkv,
                             TcGeometry g) {
  namespace wg = warpgroup_mma;
  constexpr int kBlock = wg::kThreads * kGroups;
  using Q = QueryRows<1, 4 * kGroups>;
  static_assert(Q::kRows == wg::kRows * kGroups && Q::kBlockThreads == kBlock,
                "a block is kGroups warpgroups of 64 query rows");
  extern __shared__ __align__(1024) unsigned char smem[];
  CheckSmemAlignmentSilently<kSwz ? 1024 : 128>(smem);
  using L = ForwardWgSmem<kD, kSwz, kGroups>;
  const int group = static_cast<int>(threadIdx.x) / wg::kThreads;
  bf16* sq = At<bf16>(smem, L::kQ + group * L::kQTile);  // the warpgroup's
  const HeadOffsets h = HeadOf(g, kD);
  const Q rows(g.tiles);
  // The block's last key tile, and the warpgroup's (its four warps').
  const int q0 = rows.q0, last = rows.last, own_last = rows.warp_last;
  const auto kv = KeyValueStages<kD, kBlock, true, kSwz>(smem, L::kK, L::kV,
                                                         L::kT, qkv, h, g);
  // Step kt's copies: K_kt (if there is such a tile) and V_(kt-1).
  const auto load_step = [&](int kt) {
    if (kt <= last) kv.LoadFirst(kt, int64_t{kt} * kTile);
    kv.LoadSecond(kt - 1, int64_t{kt - 1} * kTile);
    CpAsyncCommit();
  };
#pragma unroll
  for (int w = 0; w < kGroups; ++w) {
    AsyncLoadTile<kD, kTile, kBlock, true, kSwz>(
        At<bf16>(smem, L::kQ + w * L::kQTile), qkv + h.qkv, h.qkv_row,
        q0 + w * wg::kRows, g.seq);
  }
  kv.LoadFirst(0, 0);
  CpAsyncCommit();
  load_step(1);
  CpAsyncWait<1>();  // Q and K_0
  wg::FenceSharedForAsync();
  __syncthreads();
  const float scale2 = g.scale * kLog2e;
  float o[kD / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f}, correction[2];
  float s[kTile / 8][4] = {};
  uint32_t p[kTile / 16][4];  // P of the tile whose P V is next
  wg::Fence();
  IssueSharedProductABt<kD, kSwz>(s, sq, kv.First(0));
  CompleteProducts(s);
  rows.MaskIfDiagonal(s, 0, 0);
  SoftmaxScores(s, m, l, correction, scale2);  // o is 0: no correction
  ToA(p, s);
  // The warpgroup's last P V (of key tile j), then its output rows.
  const auto finish = [&](int j) {
    wg::FenceOperand(o);
    wg::Fence();
    IssueMmaAB<kD, kSwz>(o, p, kv.Second(j));
    CompleteProducts(o);
    wg::FenceOperand(p);
    const int wt = rows.RowTile(0);
    StoreForwardRows<kD, kSwz>(out, lse, h, g, q0 + wt, o, m, l,
                               RowsFrom<kD, kSwz>(sq, wt % wg::kRows));
  };
  // The top of step kt, every thread's: once K_kt and V_(kt-1) are in
  // and every warp is past step kt-1's products, K_(kt-1)'s and
  // V_(kt-2)'s stages take step kt+1's copies.
  const auto step = [&](int kt) {
    CpAsyncWait<0>();
    wg::FenceSharedForAsync();
    __syncthreads();
    load_step(kt + 1);
  };
  int kt = 1;
  for (; kt <= own_last; ++kt) {
    step(kt);
    wg::FenceOperand(o);
    wg::Fence();
    IssueSharedProductABt<kD, kSwz>(s, sq, kv.First(kt));
    wg::Commit();
    IssueMmaAB<kD, kSwz>(o, p, kv.Second(kt - 1));
    wg::Commit();
    wg::Wait<1>();  // S; P V still in flight
    wg::FenceOperand(s);
    rows.MaskIfDiagonal(s, 0, kt);
    SoftmaxScores(s, m, l, correction, scale2);
    uint32_t p_next[kTile / 16][4];
    ToA(p_next, s);
    wg::Wait<0>();  // P V
    wg::FenceOperand(o);
    wg::FenceOperand(p);  // kept until here: P V read them
    Rescale<kD>(o, correction);
#pragma unroll
    for (int k = 0; k < kTile / 16; ++k) {
#pragma unroll
      for (int e = 0; e < 4; ++e) p[k][e] = p_next[k][e];
    }
  }
  // A warpgroup whose rows end before the block's last key tile finishes
  // in the step after its own last, then only copies and waits. (Out of
  // the loop above: a product issued on a path of it made ptxas
  // serialize every one.)
  if constexpr (kGroups > 1) {
    if (kt <= last) {
      step(kt);  // V_own_last is in
      finish(own_last);
      for (++kt; kt <= last; ++kt) step(kt);
    }
  }
  CpAsyncWait<0>();  // V_last
  wg::FenceSharedForAsync();
  __syncthreads();
  if (kGroups == 1 || own_last == last) finish(last);
}

// The bytes of shared memory the product check takes: B's tile and room
// for every other reading of it (WarpgroupReading) to stay inside, then
// A's core tile (kAShared).
inline constexpr size_t kProductCheckB = 64 * 1024;
inline constexpr size_t kProductCheckSmem = kProductCheckB + 64 * 64 * 2;

// The descriptor with its leading and stride byte offsets exchanged.
__device__ __forceinline__ uint64_t SwapStrides(uint64_t desc) {
  constexpr uint64_t kField = 0x3fff;
  const uint64_t lbo = desc >> 16 & kField, sbo = desc >> 32 & kField;
  return (desc & ~(kField << 16 | kField << 32)) | sbo << 16 | lbo << 32;
}

// d [64, kN] (fp32, row-major) = a [64, 64] b (bf16), b given as [kN, 64]
// (kLayout 0: the product reads its transpose, K-major) or [64, kN]
// (1: as it lies, MN-major): the attention kernels' warpgroup path
// (AsyncLoadCoreRows, RowsAsN / RowsAsK, MmaAsync) on one product, in two
// commit groups of two k-steps, the first k-step not accumulating onto
// the NaN the accumulators start as. The instruction reads B with major
// kTransposeB (the kernels' reading: kLayout) and the descriptors with
// their byte offsets exchanged if `swap_strides`: WarpgroupReading. A
// from registers, or with kAShared (kN = 64) from shared memory as a core
// tile (MmaAsyncShared). With kSwz, the tiles are swizzled ones
// (Tile<..., true>) read through swizzled descriptors, as the
// "wgmma-swizzled" tiling's (MN-major: kN 32 or 64).
template <int kN, int kLayout, int kTransposeB, bool kAShared = false,
          bool kSwz = false>
__global__ void __launch_bounds__(warpgroup_mma::kThreads)
    WarpgroupProductKernel(float* d, const bf16* a, const bf16* b,
                           bool swap_strides) {
  namespace wg = warpgroup_mma;
  constexpr int kK = 64;
  extern __shared__ __align__(1024) unsigned char smem[];
  CheckSmemAlignmentSilently<kSwz ? 1024 : 128>(smem);
  // Zeros beyond the tile, where another reading may reach.
  for (size_t i = threadIdx.x * 4; i < kProductCheckB; i += 4 * 128) {
    *At<uint32_t>(smem, i) = 0;
  }
  __syncthreads();
  bf16* tile = At<bf16>(smem, 0);
  bf16* a_tile = At<bf16>(smem, kProductCheckB);
  if constexpr (kLayout == 0) {
    AsyncLoadTile<kK, kN, wg::kThreads, true, kSwz>(tile, b, kK, 0, kN);
  } else {
    AsyncLoadTile<kN, kK, wg::kThreads, true, kSwz>(tile, b, kN, 0, kK);
  }
  if constexpr (kAShared) {
    AsyncLoadTile<kK, wg::kRows, wg::kThreads, true, kSwz>(a_tile, a, kK, 0,
                                                           64);
  }
  CpAsyncCommit();
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  uint32_t frag[kK / 16][4];
  const auto pair = [&](int row, int col) {
    uint32_t v;
    memcpy(&v, a + (16 * w + row) * kK + col, 4);
    return v;
  };
#pragma unroll
  for (int ks = 0; ks < kK / 16; ++ks) {
    frag[ks][0] = pair(g, 16 * ks + 2 * t);
    frag[ks][1] = pair(g + 8, 16 * ks + 2 * t);
    frag[ks][2] = pair(g, 16 * ks + 2 * t + 8);
    frag[ks][3] = pair(g + 8, 16 * ks + 2 * t + 8);
  }
  CpAsyncWait<0>();
  wg::FenceSharedForAsync();
  __syncthreads();
  float acc[kN / 8][4];
#pragma unroll
  for (int j = 0; j < kN / 8; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[j][e] = NAN;
  }
  wg::Fence();
#pragma unroll
  for (int half = 0; half < 2; ++half) {
#pragma unroll
    for (int ks = 2 * half; ks < 2 * half + 2; ++ks) {
      uint64_t desc;
      if constexpr (kLayout == 1) {
        desc = RowsAsK<kN, kSwz>(tile, ks);
      } else {
        desc = RowsAsN<kK, kSwz>(tile, ks);
      }
      const uint64_t b_desc = swap_strides ? SwapStrides(desc) : desc;
      if constexpr (kAShared) {
        wg::MmaAsyncShared<kN, kTransposeB>(acc, RowsAsN<kK, kSwz>(a_tile, ks),
                                            b_desc, ks > 0);
      } else {
        wg::MmaAsync<kN, kTransposeB>(acc, frag[ks], b_desc, ks > 0);
      }
    }
    wg::Commit();
  }
  wg::Wait<0>();
  wg::FenceOperand(acc);
#pragma unroll
  for (int j = 0; j < kN / 8; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = 16 * w + g + 8 * (e / 2), col = 8 * j + 2 * t + e % 2;
      d[row * kN + col] = acc[j][e];
    }
  }
}

template <int kD, int kM, int kWarpsN, bool kSwz>
cudaError_t ForwardTc(bf16* out, float* lse, const bf16* qkv,
                      const TcGeometry& g, dim3 grid, cudaStream_t stream) {
  constexpr int kQRows = kWarpsN * kM * kWarpRows;
  grid.y = static_cast<unsigned>((g.seq + kQRows - 1) / kQRows);
  return LaunchWithSmem(AttentionForwardTcKernel<kD, kM, kWarpsN, kSwz>,
                        ForwardSmem<kD, kQRows, kSwz>::kBytes, grid,
                        32 * kWarpsN, stream, out, lse, qkv, g);
}

}  // namespace
}  // namespace attention_tc

bool AttentionTcSupportsHeadSize(int64_t head_size) {
  return head_size == 32 || head_size == 64 || head_size == 128;
}

bool IsAttentionTcTiling(AttentionTcTiling tiling) {
  for (const AttentionTcTiling& t : kAttentionTcTilings) {
    if (t.warp_rows == tiling.warp_rows && t.warps == tiling.warps &&
        t.warpgroup == tiling.warpgroup && t.swizzled == tiling.swizzled) {
      return true;
    }
  }
  return false;
}

std::string AttentionTcTilingName(AttentionTcTiling tiling) {
  if (tiling.warpgroup && tiling.warp_rows == 16 &&
      (tiling.warps == 4 || tiling.warps == 8)) {
    return std::string(tiling.warps == 8 ? "wgmma2" : "wgmma") +
           (tiling.swizzled ? "-swizzled" : "");
  }
  return std::to_string(tiling.warp_rows) + "x" + std::to_string(tiling.warps) +
         (tiling.warpgroup ? " warpgroup" : "") +
         (tiling.swizzled ? "-swizzled" : "");
}

bool AttentionTcWarpgroupBuilt() { return warpgroup_mma::kBuilt; }

bool AttentionTcTakesTiling(AttentionTcTiling tiling, int64_t head_size) {
  return IsAttentionTcTiling(tiling) &&
         AttentionTcSupportsHeadSize(head_size) &&
         (tiling.warp_rows == 16 || head_size <= 64) &&
         (!tiling.warpgroup || AttentionTcWarpgroupBuilt()) &&
         (!tiling.warpgroup || !tiling.swizzled || head_size <= 64);
}

cudaError_t LaunchWarpgroupProductCheck(float* d, const void* a, const void* b,
                                        int n, bool b_rows_are_n,
                                        bool a_in_shared,
                                        WarpgroupReading reading,
                                        cudaStream_t stream, bool swizzled) {
  if (!AttentionTcWarpgroupBuilt() || (n != 32 && n != 64 && n != 128) ||
      (a_in_shared && n != 64) || !Aligned16(a) || !Aligned16(b) ||
      (swizzled && !b_rows_are_n && n == 128)) {
    return cudaErrorInvalidValue;
  }
  const bf16* x = As<bf16>(a);
  const bf16* y = As<bf16>(b);
  const bool swap = reading == WarpgroupReading::kStridesSwapped ||
                    reading == WarpgroupReading::kBothFlipped;
  const bool flip = reading == WarpgroupReading::kMajorFlipped ||
                    reading == WarpgroupReading::kBothFlipped;
  return attention_tc::WithHeadSize(n, [&](auto nn) {
    constexpr int kN = decltype(nn)::value;
    const auto launch = [&](auto kernel) {
      return LaunchWithSmem(kernel, attention_tc::kProductCheckSmem, dim3(1),
                            warpgroup_mma::kThreads, stream, d, x, y, swap);
    };
    using attention_tc::WarpgroupProductKernel;
    const auto with = [&](auto swz) -> cudaError_t {
      constexpr bool kSwz = decltype(swz)::value;
      if constexpr (kN == 64) {
        if (a_in_shared) {
          if (b_rows_are_n) {
            return flip ? launch(WarpgroupProductKernel<kN, 0, 1, true, kSwz>)
                        : launch(WarpgroupProductKernel<kN, 0, 0, true, kSwz>);
          }
          return flip ? launch(WarpgroupProductKernel<kN, 1, 0, true, kSwz>)
                      : launch(WarpgroupProductKernel<kN, 1, 1, true, kSwz>);
        }
      }
      if (b_rows_are_n) {
        return flip ? launch(WarpgroupProductKernel<kN, 0, 1, false, kSwz>)
                    : launch(WarpgroupProductKernel<kN, 0, 0, false, kSwz>);
      }
      if constexpr (kSwz && kN == 128) {
        return cudaErrorInvalidValue;  // refused above
      } else {
        return flip ? launch(WarpgroupProductKernel<kN, 1, 0, false, kSwz>)
                    : launch(WarpgroupProductKernel<kN, 1, 1, false, kSwz>);
      }
    };
    return swizzled ? with(attention_tc::Bool<true>{})
                    : with(attention_tc::Bool<false>{});
  });
}

cudaError_t LaunchAttentionForwardTc(void* out, float* lse, const void* qkv,
                                     int64_t batch, int64_t seq,
                                     int64_t channels, int64_t heads,
                                     cudaStream_t stream) {
  return LaunchAttentionForwardTc(kAttentionTcTilings[0], out, lse, qkv, batch,
                                  seq, channels, heads, stream);
}

cudaError_t LaunchAttentionForwardTc(AttentionTcTiling tiling, void* out,
                                     float* lse, const void* qkv, int64_t batch,
                                     int64_t seq, int64_t channels,
                                     int64_t heads, cudaStream_t stream) {
  attention_tc::TcGeometry g;
  dim3 grid;
  if (batch <= 0 || seq <= 0) return cudaSuccess;
  if (!attention_tc::MakeTcGeometry(batch, seq, channels, heads, &g, &grid) ||
      !AttentionTcTakesTiling(tiling, channels / heads) || !Aligned16(out) ||
      !Aligned16(qkv)) {
    return cudaErrorInvalidValue;
  }
  bf16* o = As<bf16>(out);
  const bf16* x = As<bf16>(qkv);
  if (tiling.warpgroup) {
    return attention_tc::WithWarpgroupLayout(
        tiling, channels / heads, [&](auto d, auto swz) {
          constexpr int kD = decltype(d)::value;
          constexpr bool kSwz = decltype(swz)::value;
          const auto launch = [&](auto groups) {
            constexpr int kGroups = decltype(groups)::value;
            constexpr int kRows = warpgroup_mma::kRows * kGroups;
            grid.y = static_cast<unsigned>((g.seq + kRows - 1) / kRows);
            return LaunchWithSmem(
                attention_tc::AttentionForwardWgKernel<kD, kSwz, kGroups>,
                attention_tc::ForwardWgSmem<kD, kSwz, kGroups>::kBytes, grid,
                warpgroup_mma::kThreads * kGroups, stream, o, lse, x, g);
          };
          return tiling.warps == 8 ? launch(attention_tc::Int<2>{})
                                   : launch(attention_tc::Int<1>{});
        });
  }
  return attention_tc::WithTiling(
      tiling, channels / heads, [&](auto d, auto m, auto w, auto swz) {
        return attention_tc::ForwardTc<decltype(d)::value, decltype(m)::value,
                                       decltype(w)::value,
                                       decltype(swz)::value>(o, lse, x, g, grid,
                                                             stream);
      });
}

}  // namespace trainyard::engine::cuda
