// The backward of the tensor-core causal attention (see
// attention_tc_kernels.cu for the forward, the formulas, determinism and
// precision; attention_tc_tiles.cuh for tiles and layouts). Scores and
// their gradients live in registers as mma fragments; with base-2 scores,
// p = 2^(scale log2(e) s - log2(e) lse).
//   query side (one block per query tile, key tiles ascending, the next
//     key and value tiles copying in while the warps work; in any of the
//     tilings of attention_tc_kernels.h, which differ only in how the
//     rows are spread over warps and blocks):
//     D_i = dout_i . out_i -> delta; S = Q K^T, dP = dout V^T;
//     dS = p (dP - D) rounded to bf16 into A fragments; dQ += dS K (fp32
//     registers, never rescaled); dq = scale dQ.
//   key side (one block per key tile, query tiles ascending from the
//     diagonal, the next query, dout and statistics copying in; reads
//     delta, so it runs after the query side):
//     S^T = K Q^T, dP^T = V dout^T; P^T and dS^T rounded to bf16 into A
//     fragments; dV += P^T dout, dK += dS^T Q; dk = scale dK.
// The two sides recompute S and dP each, 7 products where a one-kernel
// backward has 5, so that every output element is summed by one warp in a
// fixed order, with no atomics: deterministic. Each side also has a
// warpgroup form (the warpgroup tiling: wgmma products, *WgKernel).
#include <cstdint>

#include "engine/cuda/act_type.cuh"
#include "engine/cuda/attention_tc_kernels.h"
#include "engine/cuda/attention_tc_tiles.cuh"
#include "engine/cuda/block_turns.h"
#include "engine/cuda/vec16.cuh"

namespace trainyard::engine::cuda {
namespace attention_tc {
namespace {

// Blocks an SM holds at once, which caps the registers (65536 / (3 * 128)
// = 170 a thread): left alone, the compiler takes up to 242 at hs = 64 and
// an SM fits 8 warps instead of 12. At hs = 128 shared memory (105 KB a
// block) allows only 2, and 170 registers would spill.
constexpr int BackwardBlocksPerSm(int head_size) {
  return head_size == 128 ? 2 : 3;
}

// The query side's in a tiling of kWarpsN warps of kM row tiles: the
// 16 x 4 tiling's registers (BackwardBlocksPerSm) in blocks of eight warps
// leave room for one block an SM (two would cap them at 128, and spill);
// 32-row warps take more (their own registers, uncapped).
constexpr int QueryGradBlocksPerSm(int head_size, int row_tiles, int warps) {
  if (row_tiles != 1) return 1;
  const int blocks = BackwardBlocksPerSm(head_size) * 4 / warps;
  return blocks > 0 ? blocks : 1;
}

// The warpgroup query side's: its queries and dout are its first products'
// A straight from shared memory, so it fits 128 registers where shared
// memory allows four blocks (hs <= 64).
constexpr int QueryGradWgBlocksPerSm(int head_size) {
  return head_size == 128 ? 2 : 4;
}

// Threads 0..kRows-1 (a block of kBlockThreads): D_i = dout_i . out_i
// (fp32, ascending channels, the reference kernels' order) into delta and
// the block's copy; rows read in 16-byte packs.
template <int kD, int kRows, int kBlockThreads>
__device__ void ComputeDelta(float* delta, float* s_delta, const bf16* dout,
                             const bf16* out, const HeadOffsets& h, int64_t q0,
                             int64_t seq) {
  for (int r = threadIdx.x; r < kRows; r += kBlockThreads) {
    const int64_t i = q0 + r;
    float d_i = 0.f;
    if (i < seq) {
      const int64_t at = h.out + i * h.out_row;
      for (int d = 0; d < kD; d += kPack<bf16>) {
        float dy[kPack<bf16>], y[kPack<bf16>];
        LdPack(dout + at + d, dy);
        LdPack(out + at + d, y);
#pragma unroll
        for (int k = 0; k < kPack<bf16>; ++k) d_i += dy[k] * y[k];
      }
      delta[h.stats + i] = d_i;
    }
    s_delta[r] = d_i;
  }
}

// Block-wide, for the key side's step `it`: the statistics of the query
// rows row0.. into stage it % 2 of the kLse and kDelta arrays of layout L:
// each log-sum-exp in base 2 (as the probabilities take it), each delta.
template <typename L>
__device__ void LoadQueryStats(unsigned char* smem, int it, const float* lse,
                               const float* delta, int64_t row0, int64_t seq) {
  const size_t stage = it % 2 * kTile;
  LoadRowStats(At<float>(smem, L::kLse) + stage, lse, row0, seq, kLog2e);
  LoadRowStats(At<float>(smem, L::kDelta) + stage, delta, row0, seq);
}

// The key side's tiles for the block's key tile (rows k0..): its keys and
// values at kOwn0 / kOwn1 of layout L, and the query tiles from the
// diagonal on, double-buffered: queries and dout (`stages`, at kOther0 /
// kOther1) with their statistics (LoadQueryStats). All core tiles where
// kCoreTiles (for warpgroup products, keys and values as their A), else
// rows in the Tile layout kSwizzled names (for ldmatrix). Block-wide
// members.
template <int kD, bool kCoreTiles, typename L, bool kSwizzled = false>
struct KeySideStages {
  TileStages<kD, kThreads, kCoreTiles, kSwizzled> stages;
  const float* lse;
  const float* delta;

  // Starts the copies of the keys, values and step 0's tiles (committed),
  // and loads step 0's statistics.
  __device__ KeySideStages(unsigned char* smem, const HeadOffsets& h,
                           const TcGeometry& g, const bf16* qkv,
                           const bf16* dout, const float* lse_all,
                           const float* delta_all, int64_t k0)
      : stages{smem,      L::kOther0,   L::kOther1, L::kT, qkv + h.qkv,
               h.qkv_row, dout + h.out, h.out_row,  g.seq},
        lse(lse_all + h.stats),
        delta(delta_all + h.stats) {
    const bf16* keys = stages.a + g.channels;
    AsyncLoadTile<kD, kTile, kThreads, kCoreTiles, kSwizzled>(
        At<bf16>(smem, L::kOwn0), keys, h.qkv_row, k0, g.seq);
    AsyncLoadTile<kD, kTile, kThreads, kCoreTiles, kSwizzled>(
        At<bf16>(smem, L::kOwn1), keys + g.channels, h.qkv_row, k0, g.seq);
    stages.Load(0, k0);
    CpAsyncCommit();
    LoadQueryStats<L>(smem, 0, lse, delta, k0, g.seq);
  }
  // Where step it's tiles and statistics are in shared memory.
  struct Step {
    const bf16* q;
    const bf16* dout;
    const float* lse2;  // base-2 log-sum-exp
    const float* delta;
  };
  // At the top of step `it`: TileStages::Advance with the next step's
  // statistics, then the barrier that publishes step it's.
  __device__ Step Begin(int it, int64_t next_row) const {
    stages.Advance(it, next_row, [&](int next, int64_t row0) {
      LoadQueryStats<L>(stages.smem, next, lse, delta, row0, stages.seq);
    });
    __syncthreads();  // this tile (on the first: K, V) and its stats whole
    return {stages.First(it), stages.Second(it),
            At<float>(stages.smem, L::kLse) + it % 2 * kTile,
            At<float>(stages.smem, L::kDelta) + it % 2 * kTile};
  }
};

// Warp-wide, a row tile of 16 queries against a key tile: s (its masked
// scores) becomes dS = p (dP - D), p = 2^(scale2 s - lse2) with the lane's
// two rows' base-2 log-sum-exp lse2 and delta d_row.
__device__ __forceinline__ void QueryRowGradients(
    float (&s)[kTile / 8][4], const float (&dp)[kTile / 8][4],
    const float (&lse2)[2], const float (&d_row)[2], float scale2) {
#pragma unroll
  for (int n = 0; n < kTile / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float p = Exp2Ftz(s[n][e] * scale2 - lse2[e / 2]);
      s[n][e] = p * (dp[n][e] - d_row[e / 2]);  // dS
    }
  }
}

// Warp-wide, the warp's 16 keys against a query tile: st (the masked
// scores, transposed) becomes P^T and dpt (dP^T) becomes dS^T, with the
// query tile's base-2 log-sum-exp s_lse2 and delta s_delta (shared, a
// float a query).
__device__ __forceinline__ void KeyRowGradients(float (&st)[kTile / 8][4],
                                                float (&dpt)[kTile / 8][4],
                                                const float* s_lse2,
                                                const float* s_delta,
                                                float scale2) {
  const int quad = threadIdx.x % 4;
#pragma unroll
  for (int n = 0; n < kTile / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int c = n * 8 + 2 * quad + e % 2;  // the query, in its tile
      const float p = Exp2Ftz(st[n][e] * scale2 - s_lse2[c]);
      st[n][e] = p;
      dpt[n][e] = p * (dpt[n][e] - s_delta[c]);  // dS^T
    }
  }
}

// dq for one query tile of kWarpsN x 16 kM rows (warp w: rows 16 kM w..,
// as kM row tiles of 16; a warp skips the key tiles after its last row,
// wholly masked); also writes delta for the key-side kernel. Tiles in the
// kSwz layout (Tile).
template <int kD, int kM, int kWarpsN, bool kSwz>
__global__ void __launch_bounds__(32 * kWarpsN,
                                  QueryGradBlocksPerSm(kD, kM, kWarpsN))
    AttentionQueryGradTcKernel(bf16* dqkv, float* delta, const bf16* dout,
                               const bf16* out, const bf16* qkv,
                               const float* lse, TcGeometry g) {
  using Q = QueryRows<kM, kWarpsN>;
  constexpr int kQRows = Q::kRows, kBlock = Q::kBlockThreads;
  extern __shared__ __align__(1024) unsigned char smem[];
  CheckSmemAlignment(smem);
  using L = BackwardSmem<kD, kQRows, kSwz>;
  bf16 *sq = At<bf16>(smem, L::kOwn0), *sdo = At<bf16>(smem, L::kOwn1);
  float *s_lse = At<float>(smem, L::kLse),
        *s_delta = At<float>(smem, L::kDelta);
  const HeadOffsets h = HeadOf(g, kD);
  const Q rows(g.tiles);
  const int q0 = rows.q0;
  const int lane = threadIdx.x % 32;
  const auto kv = KeyValueStages<kD, kBlock, false, kSwz>(
      smem, L::kOther0, L::kOther1, L::kT, qkv, h, g);
  AsyncLoadRows<kD, kQRows, kBlock, kSwz>(sq, qkv + h.qkv, h.qkv_row, q0,
                                          g.seq);
  AsyncLoadRows<kD, kQRows, kBlock, kSwz>(sdo, dout + h.out, h.out_row, q0,
                                          g.seq);
  kv.Load(0, 0);
  CpAsyncCommit();
  LoadRowStats<kQRows, kBlock>(s_lse, lse + h.stats, q0, g.seq);
  ComputeDelta<kD, kQRows, kBlock>(delta, s_delta, dout, out, h, q0, g.seq);
  const float scale2 = g.scale * kLog2e;
  float lse2[kM][2], d_row[kM][2];  // the lane's rows' statistics
  float dq[kM][kD / 8][4] = {};
  for (int kt = 0; kt <= rows.last; ++kt) {
    kv.Advance(kt, kt < rows.last ? int64_t{kt + 1} * kTile : -1);
    __syncthreads();  // this tile (on the first: Q, dout, statistics) whole
    if (kt == 0) {
#pragma unroll
      for (int t = 0; t < kM; ++t) {
        for (int r = 0; r < 2; ++r) {
          const int row = rows.RowTile(t) + lane / 4 + 8 * r;
          lse2[t][r] = s_lse[row] * kLog2e;
          d_row[t][r] = s_delta[row];
        }
      }
    }
    if (rows.Visits(kt)) {
      const bf16* sk = kv.First(kt);
      float s[kM][kTile / 8][4], dp[kM][kTile / 8][4];
      {
        uint32_t a[kM][kD / 16][4];
#pragma unroll
        for (int t = 0; t < kM; ++t) {
          LoadA<kD, kSwz>(a[t], sq, rows.RowTile(t));
        }
        ProductABt<kD, kM, kSwz>(s, a, sk);
#pragma unroll
        for (int t = 0; t < kM; ++t) {
          LoadA<kD, kSwz>(a[t], sdo, rows.RowTile(t));
        }
        ProductABt<kD, kM, kSwz>(dp, a, kv.Second(kt));
      }
      uint32_t ds[kM][kTile / 16][4];
#pragma unroll
      for (int t = 0; t < kM; ++t) {
        rows.MaskIfDiagonal(s[t], t, kt);
        QueryRowGradients(s[t], dp[t], lse2[t], d_row[t], scale2);
        ToA(ds[t], s[t]);
      }
      MmaAB<kD, kM, kSwz>(dq, ds, sk);
    }
    __syncthreads();  // every warp is done with this stage: it is refilled
  }
  const float scale[2] = {g.scale, g.scale};
#pragma unroll
  for (int t = 0; t < kM; ++t) {
    const int wt = rows.RowTile(t);
    StoreRows<kD, kSwz>(dqkv + h.qkv, h.qkv_row, q0 + wt, g.seq, dq[t], scale,
                        RowsFrom<kD, kSwz>(sq, wt));
  }
}

// The ordered backward's first pass: delta for one tile of 64 rows of a
// (sequence, head) pair, a thread a row.
template <int kD>
__global__ void __launch_bounds__(kTile)
    AttentionDeltaTcKernel(float* delta, const bf16* dout, const bf16* out,
                           TcGeometry g) {
  __shared__ float s_delta[kTile];
  const HeadOffsets h = HeadOf(g, kD);
  ComputeDelta<kD, kTile, kTile>(delta, s_delta, dout, out, h,
                                 static_cast<int64_t>(blockIdx.y) * kTile,
                                 g.seq);
}

// The ordered backward's shared memory: the key side's, and one bf16 tile
// of dS (64 query rows of the block's 64 keys).
template <int kD>
struct OrderedSmem : BackwardSmem<kD> {
  static constexpr size_t kDs = BackwardSmem<kD>::kBytes;
  static constexpr size_t kBytes = kDs + Tile<kTile>::kBytes;
};
// A key side's shared memory: the ordered backward's (its dS tile used
// only with kWithDq), or with swizzled tiles the two-kernel backward's.
template <int kD, bool kSwizzled>
using KeySideSmem = std::conditional_t<kSwizzled, BackwardSmem<kD, kTile, true>,
                                       OrderedSmem<kD>>;

static_assert(OrderedSmem<64>::kBytes == 65536 &&
                  2 * OrderedSmem<128>::kBytes <= 227 * 1024,
              "ordered backward: three blocks an SM at hs = 64, two at 128");

// Warp-wide: the warp's C fragments of dS^T (its 16 key rows w0.., the
// query tile's 64 columns), rounded to bf16 as ToA rounds them for dK,
// stored transposed into ds (query rows, key columns; Tile<kTile> layout).
// A quad's lanes hit 16 different banks (rows 72 elements apart): no
// conflicts.
__device__ __forceinline__ void StoreTransposed(bf16* ds,
                                                const float (&c)[kTile / 8][4],
                                                int w0) {
  constexpr int kLd = Tile<kTile>::kLd;
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int n = 0; n < kTile / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = w0 + g + e / 2 * 8, query = n * 8 + 2 * t + e % 2;
      ds[query * kLd + key] = __float2bfloat16_rn(c[n][e]);
    }
  }
}

// Warp-wide, in the block's turn at a query tile: the warp's partial dQ
// (its 16 rows from row0, over the block's keys) goes into the fp32 sums
// `sum` (kD floats a row): stored by the first key tile, added at L2 by
// the others (block_turns::AddPairL2, no load), except the last (the
// diagonal tile), which loads the sums and writes scale x the total as
// bf16 to dq (rows out_row apart) instead: kGroup columns' pairs at a
// time, loaded before any is used (a trip to L2 a group, where a load
// after each store would wait for each; groups, not all of them, to keep
// the registers of hs 128 within bounds). Rows at or past `seq` are
// skipped.
template <int kD>
__device__ void AddToDqSums(bf16* dq, int64_t out_row, float* sum,
                            const float (&part)[kD / 8][4], int64_t row0,
                            int64_t seq, bool first, bool last, float scale) {
  constexpr int kGroup = 4;  // of the kD / 8 column pairs a lane holds
  static_assert(kD / 8 % kGroup == 0);
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  // visit(r, n, row, col, the sums at (row, col)) for the lane's rows
  // before `seq` (r: which of its two) and the group's column pairs from
  // n0 (n: which of the group).
  const auto each_pair = [&](int n0, auto&& visit) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t row = row0 + g + 8 * r;
      if (row >= seq) continue;
#pragma unroll
      for (int n = 0; n < kGroup; ++n) {
        const int col = (n0 + n) * 8 + 2 * t;
        visit(r, n, row, col, sum + row * kD + col);
      }
    }
  };
#pragma unroll
  for (int n0 = 0; n0 < kD / 8; n0 += kGroup) {
    float before[2][kGroup][2] = {};
    if (last && !first) {
      each_pair(n0, [&](int r, int n, int64_t, int, const float* at) {
        block_turns::LoadPairL2(at, before[r][n]);
      });
    }
    each_pair(n0, [&](int r, int n, int64_t row, int col, float* at) {
      float v[2] = {part[n0 + n][2 * r], part[n0 + n][2 * r + 1]};
      if (last) {
        if (!first) {
          v[0] = before[r][n][0] + v[0];
          v[1] = before[r][n][1] + v[1];
        }
        St(dq + row * out_row + col, v[0] * scale);
        St(dq + row * out_row + col + 1, v[1] * scale);
      } else if (first) {
        block_turns::StorePairL2(at, v[0], v[1]);
      } else {
        block_turns::AddPairL2(at, v[0], v[1]);
      }
    });
  }
}

// Block-wide, at query tile `qt` of the ordered backward: waits for this
// block's turn (key tile kt) at the tile's counter among `turns` (one a
// query tile of the block's (sequence, head) pair), runs add() on every
// thread (which adds the block's partial dQ to the tile's sums), and
// passes the turn on once every thread's sums are out. What add() reads
// of shared memory is written before the call.
template <typename Add>
__device__ __forceinline__ void AddInTurn(int* turns, const TcGeometry& g,
                                          int qt, int kt, const Add& add) {
  int* turn = turns + static_cast<int64_t>(blockIdx.x) * g.tiles + qt;
  if (threadIdx.x == 0) block_turns::WaitForTurn(turn, kt);
  __syncthreads();  // dS whole, and this block's turn at the query tile
  add();
  __threadfence();  // the sums out before the turn passes
  __syncthreads();  // every warp has added, and is done with the stage
  if (threadIdx.x == 0) block_turns::PassTurn(turn);
}

// The key side: dk and dv for one key tile (one block each, query tiles
// ascending from the diagonal, the next query, dout and statistics
// copying in). With kWithDq (the ordered backward,
// AttentionTcBackward::kOrderedDq) the block also takes dQ += dS K for
// each query tile it visits: dS goes through shared memory (bf16, as dK's
// product rounds it) so that each warp multiplies 16 query rows by all of
// the block's keys, and in its turn at the query tile (block_turns.h) the
// block adds that partial sum to the tile's fp32 sums. Key tiles take
// their turns in ascending order (counters start at 0): key tile 0
// stores, the ones after add at L2, the diagonal tile, the last to add,
// writes dq = scale x the total. So each dq element is ((P_0 + P_1) + P_2)
// + ... over its key tiles on every run: deterministic with 5 products a
// tile pair where the two-kernel backward has 7, at the price of the fp32
// sums' traffic (an L2 reduction a tile pair) and the waits; dk and dv are the
// same bits either way. Block (bh, kt) waits only on (bh, kt - 1), a lower
// linear index. REQUIRES: delta written (the query-side or the delta
// kernel runs first on the same stream); with kWithDq the turns zeroed
// (without, dq_sums and turns are not read). Tiles in the kSwz layout
// (Tile; the ordered backward's are padded).
template <int kD, bool kWithDq, bool kSwz = false>
__global__ void __launch_bounds__(kThreads, BackwardBlocksPerSm(kD))
    AttentionKeySideTcKernel(bf16* dqkv, float* dq_sums, int* turns,
                             const float* delta, const bf16* dout,
                             const bf16* qkv, const float* lse, TcGeometry g) {
  static_assert(!(kWithDq && kSwz), "the ordered backward's tiles: padded");
  extern __shared__ __align__(1024) unsigned char smem[];
  CheckSmemAlignment(smem);
  using L = KeySideSmem<kD, kSwz>;  // kDs only with kWithDq
  bf16 *sk = At<bf16>(smem, L::kOwn0), *sv = At<bf16>(smem, L::kOwn1);
  const HeadOffsets h = HeadOf(g, kD);
  const int kt = static_cast<int>(blockIdx.y);  // tile 0 has the most work
  const int64_t k0 = static_cast<int64_t>(kt) * kTile;
  const int w0 = static_cast<int>(threadIdx.x / 32) * kWarpRows;
  const KeySideStages<kD, false, L, kSwz> qdo(smem, h, g, qkv, dout, lse, delta,
                                              k0);
  const float scale2 = g.scale * kLog2e;
  float dk[1][kD / 8][4] = {}, dv[1][kD / 8][4] = {};
  for (int qt = kt; qt < g.tiles; ++qt) {
    const int it = qt - kt;
    const auto [sq, sdo, s_lse2, s_delta] =
        qdo.Begin(it, qt + 1 < g.tiles ? int64_t{qt + 1} * kTile : -1);
    float st_tiles[1][kTile / 8][4], dpt_tiles[1][kTile / 8][4];
    {
      uint32_t a[1][kD / 16][4];
      LoadA<kD, kSwz>(a[0], sk, w0);
      ProductABt<kD, 1, kSwz>(st_tiles, a, sq);
      LoadA<kD, kSwz>(a[0], sv, w0);
      ProductABt<kD, 1, kSwz>(dpt_tiles, a, sdo);
    }
    float(&st)[kTile / 8][4] = st_tiles[0];
    float(&dpt)[kTile / 8][4] = dpt_tiles[0];
    if (qt == kt) MaskDiagonalTile(st, w0, /*rows_are_queries=*/false);
    KeyRowGradients(st, dpt, s_lse2, s_delta, scale2);
    {
      uint32_t a[1][kTile / 16][4];
      ToA(a[0], st);
      MmaAB<kD, 1, kSwz>(dv, a, sdo);
      ToA(a[0], dpt);
      MmaAB<kD, 1, kSwz>(dk, a, sq);
    }
    if constexpr (kWithDq) {
      bf16* sds = At<bf16>(smem, L::kDs);
      StoreTransposed(sds, dpt, w0);
      AddInTurn(turns, g, qt, kt, [&] {
        float dq[1][kD / 8][4] = {};
        uint32_t a[1][kTile / 16][4];
        LoadA<kTile>(a[0], sds, w0);  // the warp's 16 query rows, all keys
        MmaAB<kD, 1>(dq, a, sk);
        AddToDqSums<kD>(dqkv + h.qkv, h.qkv_row, dq_sums + h.stats * kD, dq[0],
                        static_cast<int64_t>(qt) * kTile + w0, g.seq, kt == 0,
                        kt == qt, g.scale);
      });
    } else {
      __syncthreads();  // every warp is done with this stage: it is refilled
    }
  }
  const float scale[2] = {g.scale, g.scale}, one[2] = {1.f, 1.f};
  bf16* dk_base = dqkv + h.qkv + g.channels;
  StoreRows<kD, kSwz>(dk_base, h.qkv_row, k0 + w0, g.seq, dk[0], scale,
                      RowsFrom<kD, kSwz>(sk, w0));
  StoreRows<kD, kSwz>(dk_base + g.channels, h.qkv_row, k0 + w0, g.seq, dv[0],
                      one, RowsFrom<kD, kSwz>(sv, w0));
}

// The warpgroup tiling's backward (AttentionTcTiling::warpgroup): the
// 16 x 4 kernels' rows, order and formulas with every product a warpgroup
// product (warpgroup_mma.h) the block's four warps issue together, A
// fragments from registers and the other side's tiles read by the tensor
// cores from shared memory, where they lie as core tiles (CoreTile, in the
// stages of BackwardSmem): Q K^T and dout V^T read K and V transposed
// (K-major), dS K reads K as it lies (MN-major); on the key side K Q^T and
// V dout^T read Q and dout transposed, P^T dout and dS^T Q as they lie.
// The query side's own Q and dout are core tiles too, Q K^T's and
// dout V^T's A straight from shared memory (no A fragments held across
// the key tiles): 124 registers at hs 64, four blocks an SM. The same
// bits as the 16 x 4 kernels on the emulation. With kSwz (hs 32 or 64),
// every tile is a swizzled one (Tile<kD, 64, true>) read through
// swizzled descriptors instead of a core tile. A query-side block is
// kGroups warpgroups of 64 query rows (their own Q and dout tiles a
// padded tile's room apart), sharing the key and value tiles the block
// copies; a warpgroup skips the key tiles after its last row (the first
// of two, the block's last).
template <int kD, bool kSwz, int kGroups>
__global__ void __launch_bounds__(kThreads* kGroups,
                                  QueryGradWgBlocksPerSm(kD) / kGroups)
    AttentionQueryGradWgKernel(bf16* dqkv, float* delta, const bf16* dout,
                               const bf16* out, const bf16* qkv,
                               const float* lse, TcGeometry g) {
  namespace wg = warpgroup_mma;
  constexpr int kBlock = kThreads * kGroups, kRows = kTile * kGroups;
  using Q = QueryRows<1, 4 * kGroups>;
  static_assert(Q::kRows == kRows && Q::kBlockThreads == kBlock,
                "a block is kGroups warpgroups of 64 query rows");
  extern __shared__ __align__(1024) unsigned char smem[];
  CheckSmemAlignmentSilently<kSwz ? 1024 : 128>(smem);
  using L = BackwardSmem<kD, kRows, kSwz>;
  constexpr size_t kOwnTile = Tile<kD, kTile, kSwz>::kBytes;
  const int group = static_cast<int>(threadIdx.x) / kThreads;
  bf16* sq = At<bf16>(smem, L::kOwn0 + group * kOwnTile);  // the warpgroup's
  bf16* sdo = At<bf16>(smem, L::kOwn1 + group * kOwnTile);
  float *s_lse = At<float>(smem, L::kLse),
        *s_delta = At<float>(smem, L::kDelta);
  const HeadOffsets h = HeadOf(g, kD);
  const Q rows(g.tiles);
  const int q0 = rows.q0, w0 = rows.RowTile(0);
  const int lane = threadIdx.x % 32;
  const auto kv = KeyValueStages<kD, kBlock, true, kSwz>(
      smem, L::kOther0, L::kOther1, L::kT, qkv, h, g);
#pragma unroll
  for (int w = 0; w < kGroups; ++w) {
    AsyncLoadTile<kD, kTile, kBlock, true, kSwz>(
        At<bf16>(smem, L::kOwn0 + w * kOwnTile), qkv + h.qkv, h.qkv_row,
        q0 + w * kTile, g.seq);
    AsyncLoadTile<kD, kTile, kBlock, true, kSwz>(
        At<bf16>(smem, L::kOwn1 + w * kOwnTile), dout + h.out, h.out_row,
        q0 + w * kTile, g.seq);
  }
  kv.Load(0, 0);
  CpAsyncCommit();
  LoadRowStats<kRows, kBlock>(s_lse, lse + h.stats, q0, g.seq);
  ComputeDelta<kD, kRows, kBlock>(delta, s_delta, dout, out, h, q0, g.seq);
  const float scale2 = g.scale * kLog2e;
  float lse2[2], d_row[2];  // the lane's rows' statistics
  float dq[kD / 8][4] = {};
  for (int kt = 0; kt <= rows.last; ++kt) {
    kv.Advance(kt, kt < rows.last ? int64_t{kt + 1} * kTile : -1);
    __syncthreads();  // this tile (on the first: Q, dout, statistics) whole
    if (kt == 0) {
      for (int r = 0; r < 2; ++r) {
        const int row = w0 + lane / 4 + 8 * r;
        lse2[r] = s_lse[row] * kLog2e;
        d_row[r] = s_delta[row];
      }
    }
    if (kGroups == 1 || rows.Visits(kt)) {
      const bf16* sk = kv.First(kt);
      const bf16* sv = kv.Second(kt);
      float s[kTile / 8][4] = {}, dp[kTile / 8][4] = {};
      wg::Fence();
      IssueSharedProductABt<kD, kSwz>(s, sq, sk);
      IssueSharedProductABt<kD, kSwz>(dp, sdo, sv);
      CompleteProducts(s, dp);
      rows.MaskIfDiagonal(s, 0, kt);
      QueryRowGradients(s, dp, lse2, d_row, scale2);
      CompleteMmaABOfScores<kD, kSwz>(dq, s, sk);  // s is dS by now
    }
    __syncthreads();  // every warp is done with this stage: it is refilled
  }
  const float scale[2] = {g.scale, g.scale};
  StoreRows<kD, kSwz>(dqkv + h.qkv, h.qkv_row, q0 + w0, g.seq, dq, scale,
                      RowsFrom<kD, kSwz>(sq, w0 % kTile));
}

// Keys and values are the first products' A straight from shared memory
// (core tiles), so only the accumulators (S^T, dP^T, dK, dV) are in
// registers while those run: three blocks an SM at hs <= 64, as the
// other key sides (BackwardBlocksPerSm; with the A fragments too, ptxas
// serialized the products at 170 registers). With kWithDq, the ordered
// backward as AttentionKeySideTcKernel takes it (dS through shared
// memory, the block's partial dQ added in its turn), its dS K a
// warpgroup product too, issued while dV's and dK's are still in flight
// (the turn is awaited meanwhile). With kSwz (hs 32 or 64; not with
// kWithDq), every tile is a swizzled one read through swizzled
// descriptors.
template <int kD, bool kWithDq, bool kSwz = false>
__global__ void __launch_bounds__(kThreads, BackwardBlocksPerSm(kD))
    AttentionKeySideWgKernel(bf16* dqkv, float* dq_sums, int* turns,
                             const float* delta, const bf16* dout,
                             const bf16* qkv, const float* lse, TcGeometry g) {
  static_assert(!(kWithDq && kSwz), "the ordered backward's tiles: core");
  namespace wg = warpgroup_mma;
  extern __shared__ __align__(1024) unsigned char smem[];
  CheckSmemAlignmentSilently<kSwz ? 1024 : 128>(smem);
  using L = KeySideSmem<kD, kSwz>;  // kDs only with kWithDq
  bf16 *sk = At<bf16>(smem, L::kOwn0), *sv = At<bf16>(smem, L::kOwn1);
  const HeadOffsets h = HeadOf(g, kD);
  const int kt = static_cast<int>(blockIdx.y);
  const int64_t k0 = static_cast<int64_t>(kt) * kTile;
  const int w0 = static_cast<int>(threadIdx.x / 32) * kWarpRows;
  const KeySideStages<kD, true, L, kSwz> qdo(smem, h, g, qkv, dout, lse, delta,
                                             k0);
  const float scale2 = g.scale * kLog2e;
  float dk[kD / 8][4] = {}, dv[kD / 8][4] = {};
  for (int qt = kt; qt < g.tiles; ++qt) {
    const int it = qt - kt;
    const auto [sq, sdo, s_lse2, s_delta] =
        qdo.Begin(it, qt + 1 < g.tiles ? int64_t{qt + 1} * kTile : -1);
    float st[kTile / 8][4] = {}, dpt[kTile / 8][4] = {};
    wg::Fence();
    IssueSharedProductABt<kD, kSwz>(st, sk, sq);
    IssueSharedProductABt<kD, kSwz>(dpt, sv, sdo);
    CompleteProducts(st, dpt);
    if (qt == kt) MaskDiagonalTile(st, w0, /*rows_are_queries=*/false);
    KeyRowGradients(st, dpt, s_lse2, s_delta, scale2);
    if constexpr (kWithDq) StoreTransposed(At<bf16>(smem, L::kDs), dpt, w0);
    uint32_t pa[kTile / 16][4], dsa[kTile / 16][4];
    ToA(pa, st);
    ToA(dsa, dpt);
    wg::FenceOperand(dv);
    wg::FenceOperand(dk);
    wg::Fence();
    IssueMmaAB<kD, kSwz>(dv, pa, sdo);
    IssueMmaAB<kD, kSwz>(dk, dsa, sq);
    if constexpr (kWithDq) {
      wg::Commit();
      AddInTurn(turns, g, qt, kt, [&] {
        float dq[kD / 8][4] = {};
        uint32_t a[kTile / 16][4];
        LoadA<kTile>(a, At<bf16>(smem, L::kDs), w0);  // 16 query rows, all keys
        wg::Fence();
        IssueMmaAB<kD>(dq, a, sk);
        CompleteProducts(dv, dk, dq);
        wg::FenceOperand(a);
        wg::FenceOperand(pa);  // kept while the turn was awaited
        wg::FenceOperand(dsa);
        AddToDqSums<kD>(dqkv + h.qkv, h.qkv_row, dq_sums + h.stats * kD, dq,
                        static_cast<int64_t>(qt) * kTile + w0, g.seq, kt == 0,
                        kt == qt, g.scale);
      });
    } else {
      CompleteProducts(dv, dk);
      wg::FenceOperand(pa);
      wg::FenceOperand(dsa);
      __syncthreads();  // every warp is done with this stage: it is refilled
    }
  }
  const float scale[2] = {g.scale, g.scale}, one[2] = {1.f, 1.f};
  bf16* dk_base = dqkv + h.qkv + g.channels;
  StoreRows<kD, kSwz>(dk_base, h.qkv_row, k0 + w0, g.seq, dk, scale,
                      RowsFrom<kD, kSwz>(sk, w0));
  StoreRows<kD, kSwz>(dk_base + g.channels, h.qkv_row, k0 + w0, g.seq, dv, one,
                      RowsFrom<kD, kSwz>(sv, w0));
}

// Where the ordered backward's scratch keeps what: delta, a turn counter
// per query tile of each (sequence, head) and the fp32 dQ sums [B, NH, T,
// hs], each region 16-byte aligned.
struct OrderedScratch {
  float* delta;
  int* turns;
  float* dq_sums;
  int64_t turn_count;
};
// Floats of delta's region, and of the turns' (no more than the rows).
inline int64_t OrderedRegionFloats(int64_t rows) { return (rows + 3) / 4 * 4; }
inline OrderedScratch CarveOrderedScratch(float* scratch, int64_t batch,
                                          int64_t seq, int64_t heads,
                                          int tiles) {
  const int64_t region = OrderedRegionFloats(batch * heads * seq);
  return {scratch, reinterpret_cast<int*>(scratch + region),
          scratch + 2 * region, batch * heads * tiles};
}

// The delta pass, then the key tiles with their turns (the warpgroup
// key side if `warpgroup`).
template <int kD>
cudaError_t OrderedBackwardTc(bool warpgroup, bf16* dqkv,
                              const OrderedScratch& s, const bf16* dout,
                              const bf16* out, const bf16* qkv,
                              const float* lse, const TcGeometry& g, dim3 grid,
                              cudaStream_t stream) {
  cudaError_t e =
      cudaMemsetAsync(s.turns, 0, s.turn_count * sizeof(int), stream);
  if (e != cudaSuccess) return e;
  AttentionDeltaTcKernel<kD><<<grid, kTile, 0, stream>>>(s.delta, dout, out, g);
  e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  return LaunchWithSmem(warpgroup ? AttentionKeySideWgKernel<kD, true>
                                  : AttentionKeySideTcKernel<kD, true>,
                        OrderedSmem<kD>::kBytes, grid, kThreads, stream, dqkv,
                        s.dq_sums, s.turns, static_cast<const float*>(s.delta),
                        dout, qkv, lse, g);
}

// The query side in one tiling, then the key side (in the tiling's
// layout).
template <int kD, int kM, int kWarpsN, bool kSwz>
cudaError_t BackwardTc(bf16* dqkv, float* delta, const bf16* dout,
                       const bf16* out, const bf16* qkv, const float* lse,
                       const TcGeometry& g, dim3 grid, cudaStream_t stream) {
  constexpr int kQRows = kWarpsN * kM * kWarpRows;
  dim3 query_grid = grid;
  query_grid.y = static_cast<unsigned>((g.seq + kQRows - 1) / kQRows);
  const cudaError_t e =
      LaunchWithSmem(AttentionQueryGradTcKernel<kD, kM, kWarpsN, kSwz>,
                     BackwardSmem<kD, kQRows, kSwz>::kBytes, query_grid,
                     32 * kWarpsN, stream, dqkv, delta, dout, out, qkv, lse, g);
  if (e != cudaSuccess) return e;
  return LaunchWithSmem(AttentionKeySideTcKernel<kD, false, kSwz>,
                        BackwardSmem<kD, kTile, kSwz>::kBytes, grid, kThreads,
                        stream, dqkv, static_cast<float*>(nullptr),
                        static_cast<int*>(nullptr),
                        static_cast<const float*>(delta), dout, qkv, lse, g);
}

// The warpgroup tiling's query side (blocks of kGroups warpgroups), then
// its key side.
template <int kD, bool kSwz, int kGroups>
cudaError_t BackwardWg(bf16* dqkv, float* delta, const bf16* dout,
                       const bf16* out, const bf16* qkv, const float* lse,
                       const TcGeometry& g, dim3 grid, cudaStream_t stream) {
  using L = BackwardSmem<kD, kTile, kSwz>;
  constexpr int kRows = kTile * kGroups;
  dim3 query_grid = grid;
  query_grid.y = static_cast<unsigned>((g.seq + kRows - 1) / kRows);
  const cudaError_t e = LaunchWithSmem(
      AttentionQueryGradWgKernel<kD, kSwz, kGroups>,
      BackwardSmem<kD, kRows, kSwz>::kBytes, query_grid, kThreads * kGroups,
      stream, dqkv, delta, dout, out, qkv, lse, g);
  if (e != cudaSuccess) return e;
  return LaunchWithSmem(
      AttentionKeySideWgKernel<kD, false, kSwz>, L::kBytes, grid, kThreads,
      stream, dqkv, static_cast<float*>(nullptr), static_cast<int*>(nullptr),
      static_cast<const float*>(delta), dout, qkv, lse, g);
}

}  // namespace
}  // namespace attention_tc

cudaError_t LaunchAttentionBackwardTc(void* dqkv, float* delta,
                                      const void* dout, const void* out,
                                      const void* qkv, const float* lse,
                                      int64_t batch, int64_t seq,
                                      int64_t channels, int64_t heads,
                                      cudaStream_t stream) {
  return LaunchAttentionBackwardTc(kAttentionTcTilings[0], dqkv, delta, dout,
                                   out, qkv, lse, batch, seq, channels, heads,
                                   stream);
}

cudaError_t LaunchAttentionBackwardTc(AttentionTcTiling tiling, void* dqkv,
                                      float* delta, const void* dout,
                                      const void* out, const void* qkv,
                                      const float* lse, int64_t batch,
                                      int64_t seq, int64_t channels,
                                      int64_t heads, cudaStream_t stream) {
  if (batch <= 0 || seq <= 0) return cudaSuccess;
  attention_tc::TcGeometry g;
  dim3 grid;
  if (!attention_tc::MakeTcGeometry(batch, seq, channels, heads, &g, &grid) ||
      !AttentionTcTakesTiling(tiling, channels / heads) || !Aligned16(dqkv) ||
      !Aligned16(dout) || !Aligned16(out) || !Aligned16(qkv)) {
    return cudaErrorInvalidValue;
  }
  bf16* dx = As<bf16>(dqkv);
  const bf16 *dy = As<bf16>(dout), *y = As<bf16>(out), *x = As<bf16>(qkv);
  if (tiling.warpgroup) {
    return attention_tc::WithWarpgroupLayout(
        tiling, channels / heads, [&](auto d, auto swz) {
          constexpr int kD = decltype(d)::value;
          constexpr bool kSwz = decltype(swz)::value;
          return tiling.warps == 8
                     ? attention_tc::BackwardWg<kD, kSwz, 2>(
                           dx, delta, dy, y, x, lse, g, grid, stream)
                     : attention_tc::BackwardWg<kD, kSwz, 1>(
                           dx, delta, dy, y, x, lse, g, grid, stream);
        });
  }
  return attention_tc::WithTiling(
      tiling, channels / heads, [&](auto d, auto m, auto w, auto swz) {
        return attention_tc::BackwardTc<decltype(d)::value, decltype(m)::value,
                                        decltype(w)::value,
                                        decltype(swz)::value>(
            dx, delta, dy, y, x, lse, g, grid, stream);
      });
}

int64_t AttentionTcBackwardScratchFloats(AttentionTcBackward backward,
                                         int64_t batch, int64_t seq,
                                         int64_t channels, int64_t heads) {
  const int64_t rows = batch * heads * seq;
  if (backward == AttentionTcBackward::kTwoKernels) return rows;
  return 2 * attention_tc::OrderedRegionFloats(rows) + batch * seq * channels;
}

cudaError_t LaunchAttentionBackwardTcOrdered(void* dqkv, float* scratch,
                                             const void* dout, const void* out,
                                             const void* qkv, const float* lse,
                                             int64_t batch, int64_t seq,
                                             int64_t channels, int64_t heads,
                                             cudaStream_t stream) {
  return LaunchAttentionBackwardTcOrdered(kAttentionTcTilings[0], dqkv, scratch,
                                          dout, out, qkv, lse, batch, seq,
                                          channels, heads, stream);
}

cudaError_t LaunchAttentionBackwardTcOrdered(
    AttentionTcTiling tiling, void* dqkv, float* scratch, const void* dout,
    const void* out, const void* qkv, const float* lse, int64_t batch,
    int64_t seq, int64_t channels, int64_t heads, cudaStream_t stream) {
  if (batch <= 0 || seq <= 0) return cudaSuccess;
  attention_tc::TcGeometry g;
  dim3 grid;
  if (!attention_tc::MakeTcGeometry(batch, seq, channels, heads, &g, &grid) ||
      !AttentionTcTakesTiling(tiling, channels / heads) || !Aligned16(dqkv) ||
      !Aligned16(dout) || !Aligned16(out) || !Aligned16(qkv) ||
      !Aligned16(scratch)) {
    return cudaErrorInvalidValue;
  }
  const attention_tc::OrderedScratch s =
      attention_tc::CarveOrderedScratch(scratch, batch, seq, heads, g.tiles);
  bf16* dx = As<bf16>(dqkv);
  const bf16 *dy = As<bf16>(dout), *y = As<bf16>(out), *x = As<bf16>(qkv);
  return attention_tc::WithHeadSize(channels / heads, [&](auto d) {
    return attention_tc::OrderedBackwardTc<decltype(d)::value>(
        tiling.warpgroup, dx, s, dy, y, x, lse, g, grid, stream);
  });
}

}  // namespace trainyard::engine::cuda
