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
//   forward (one block per query tile, over key tiles kt = 0..qt, the
//   next tile's keys and values copying in while the warps work):
//     S = Q K^T (registers); per row, online softmax in fp32 against the
//     row's running max m (base 2: scores carry the factor log2 e, so
//     e^x is one exp2): each row's 64 scores of a tile are spread over the
//     4 lanes of a quad, which combine their max and sum with two xor
//     shuffles; P = 2^(s - m), l = l 2^(m_old - m) + sum P, O = O
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

#include "engine/cuda/act_type.cuh"
#include "engine/cuda/attention_tc_kernels.h"
#include "engine/cuda/attention_tc_tiles.cuh"
#include "engine/cuda/vec16.cuh"

namespace trainyard::engine::cuda {
namespace attention_tc {
namespace {

// Every row has an unmasked key in every tile it visits (every key in
// tiles before the diagonal, and key i itself on it), so the running max
// is finite from the first tile on: no inf - inf. Masked scores are -inf,
// and 2^-inf is exactly 0.
template <int kD>
__global__ void __launch_bounds__(kThreads)
    AttentionForwardTcKernel(bf16* out, float* lse, const bf16* qkv,
                             TcGeometry g) {
  extern __shared__ __align__(128) unsigned char smem[];
  CheckSmemAlignment(smem);
  using L = ForwardSmem<kD>;
  bf16* sq = At<bf16>(smem, L::kQ);
  const HeadOffsets h = HeadOf(g, kD);
  const int qt = g.tiles - 1 - static_cast<int>(blockIdx.y);  // long rows 1st
  const int64_t q0 = static_cast<int64_t>(qt) * kTile;
  const int lane = threadIdx.x % 32;
  const int w0 = static_cast<int>(threadIdx.x / 32) * kWarpRows;
  // The lane's two rows (C fragment rows g and g + 8), as sequence rows.
  const int64_t rows[2] = {q0 + w0 + lane / 4, q0 + w0 + lane / 4 + 8};
  const bf16* keys = qkv + h.qkv + g.channels;
  const bf16* values = keys + g.channels;
  AsyncLoadRows<kD>(sq, qkv + h.qkv, h.qkv_row, q0, g.seq);
  AsyncLoadRows<kD>(At<bf16>(smem, L::kK), keys, h.qkv_row, 0, g.seq);
  AsyncLoadRows<kD>(At<bf16>(smem, L::kV), values, h.qkv_row, 0, g.seq);
  CpAsyncCommit();
  const float scale2 = g.scale * kLog2e;
  uint32_t q[kD / 16][4];  // the warp's 16 query rows, for every key tile
  float o[kD / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  for (int kt = 0; kt <= qt; ++kt) {
    if (kt < qt) {  // the next tile into the other stage
      const size_t next = (kt + 1) % 2 * L::kT;
      const int64_t k1 = static_cast<int64_t>(kt + 1) * kTile;
      AsyncLoadRows<kD>(At<bf16>(smem, L::kK + next), keys, h.qkv_row, k1,
                        g.seq);
      AsyncLoadRows<kD>(At<bf16>(smem, L::kV + next), values, h.qkv_row, k1,
                        g.seq);
      CpAsyncCommit();
      CpAsyncWait<1>();
    } else {
      CpAsyncWait<0>();
    }
    __syncthreads();  // this tile (and on the first, Q) is whole
    if (kt == 0) LoadA<kD>(q, sq, w0);
    const size_t stage = kt % 2 * L::kT;
    float s[kTile / 8][4];
    ProductABt<kD>(s, q, At<bf16>(smem, L::kK + stage));
    if (kt == qt) MaskDiagonalTile(s, w0, /*rows_are_queries=*/true);
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < kTile / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[n][e] *= scale2;
        tile_max[e / 2] = fmaxf(tile_max[e / 2], s[n][e]);
      }
    }
    float correction[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      tile_max[r] =
          fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
      tile_max[r] =
          fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
      const float m_new = fmaxf(m[r], tile_max[r]);
      correction[r] = exp2f(m[r] - m_new);  // 0 on the first tile
      m[r] = m_new;
    }
    float sum[2] = {0.f, 0.f};
#pragma unroll
    for (int n = 0; n < kTile / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float p = exp2f(s[n][e] - m[e / 2]);
        s[n][e] = p;
        sum[e / 2] += p;  // the unrounded p: l carries no bf16 error
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], 1);
      sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], 2);
      l[r] = l[r] * correction[r] + sum[r];
    }
#pragma unroll
    for (int n = 0; n < kD / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) o[n][e] *= correction[e / 2];
    }
    uint32_t p[kTile / 16][4];
    ToA(p, s);
    MmaAB<kD>(o, p, At<bf16>(smem, L::kV + stage));
    __syncthreads();  // every warp is done with this stage: it is refilled
  }
  const float inv[2] = {1.f / l[0], 1.f / l[1]};
  // The warp's own rows of sq are free (Q is in registers): the stage.
  StoreRows<kD>(out + h.out, h.out_row, q0 + w0, g.seq, o, inv,
                sq + w0 * Tile<kD>::kLd);
  if (lane % 4 == 0) {
    for (int r = 0; r < 2; ++r) {
      if (rows[r] < g.seq) lse[h.stats + rows[r]] = m[r] * kLn2 + logf(l[r]);
    }
  }
}

template <int kD>
cudaError_t ForwardTc(bf16* out, float* lse, const bf16* qkv,
                      const TcGeometry& g, dim3 grid, cudaStream_t stream) {
  return LaunchWithSmem(AttentionForwardTcKernel<kD>, ForwardSmem<kD>::kBytes,
                        grid, stream, out, lse, qkv, g);
}

}  // namespace
}  // namespace attention_tc

bool AttentionTcSupportsHeadSize(int64_t head_size) {
  return head_size == 32 || head_size == 64 || head_size == 128;
}

cudaError_t LaunchAttentionForwardTc(void* out, float* lse, const void* qkv,
                                     int64_t batch, int64_t seq,
                                     int64_t channels, int64_t heads,
                                     cudaStream_t stream) {
  if (batch <= 0 || seq <= 0) return cudaSuccess;
  attention_tc::TcGeometry g;
  dim3 grid;
  if (!attention_tc::MakeTcGeometry(batch, seq, channels, heads, &g, &grid) ||
      !Aligned16(out) || !Aligned16(qkv)) {
    return cudaErrorInvalidValue;
  }
  bf16* o = As<bf16>(out);
  const bf16* x = As<bf16>(qkv);
  switch (channels / heads) {
    case 32:
      return attention_tc::ForwardTc<32>(o, lse, x, g, grid, stream);
    case 64:
      return attention_tc::ForwardTc<64>(o, lse, x, g, grid, stream);
    default:
      return attention_tc::ForwardTc<128>(o, lse, x, g, grid, stream);
  }
}

}  // namespace trainyard::engine::cuda
