// Causal multi-head attention on tensor cores, flash-attention style, for
// bf16 activations: every product of two matrices is an nvcuda::wmma
// 16x16x16 multiply of bf16 operands into fp32 accumulators; the softmax,
// its statistics and all scaling are fp32 on CUDA cores. No T x T matrix is
// stored: the forward saves one log-sum-exp per query row, the backward
// recomputes each probability from it. Same formulas as
// attention_kernels.cu (its header comment derives them). This file holds
// the forward, attention_tc_backward_kernels.cu the backward and
// attention_tc_tiles.cuh the tiles, layouts and loads both use.
//
//   forward (one block per query tile, over key tiles kt = 0..qt):
//     S = Q K^T (wmma) -> smem; per row, online softmax in fp32: lanes 2r
//     and 2r+1 of a warp own row r, alternate columns each (PairColumn:
//     no shared-memory bank conflicts), and keep the row's reference max
//     m and sum l in registers; P = e^(scale S - m) as bf16 -> smem;
//     O += P V (wmma) into fp32 accumulator fragments that stay in
//     registers. m moves only when the row's max passes it by more than
//     kMaxLag, and only then is O staged in smem and rescaled row by row
//     (wmma fragment layouts are opaque). Finally out = O / l (bf16),
//     lse = m + log l.
//   backward: see attention_tc_backward_kernels.cu.
//
// Deterministic: no atomics. Every output element is summed by one warp in
// a fixed order (tiles ascending, 16-wide k-steps ascending, each mma_sync
// in the hardware's fixed order; each lane's share of a row's sum in its
// fixed column order), so a rerun repeats bit for bit.
//
// Precision: Q K^T and dout V^T multiply the bf16 inputs themselves with
// fp32 accumulation, and the row sums l add the unrounded fp32 p; only P
// (forward, dV) and dS (dQ, dK) are rounded to bf16 before their product,
// a relative error <= 2^-8 per term (cuda_attention_test.cc derives its
// tolerances from this).
#include <mma.h>

#include <cmath>
#include <cstdint>

#include "engine/cuda/act_type.cuh"
#include "engine/cuda/attention_tc_kernels.h"
#include "engine/cuda/attention_tc_tiles.cuh"
#include "engine/cuda/vec16.cuh"

namespace trainyard::engine::cuda {
namespace attention_tc {
namespace {

// How far a row's running max may pass the reference its probabilities are
// taken against before the reference moves up to it (nats): p = e^(s - m)
// then stays below e^8 (about 3000; fp32 and bf16 hold it with room), and
// the output accumulator, kept in registers, needs rescaling only when a
// reference moves, rarely after a row's first tile.
constexpr float kMaxLag = 8.f;

// The online-softmax step for one row and one key tile, run by the two
// lanes owning the row (warp row r; `half` picks the lane's alternate
// columns, PairColumn). Scales and masks the row's scores in place, moves
// the row's reference m up to its running max when that passed m by more
// than kMaxLag (or on the first tile), writes p = e^(s - m) as bf16,
// updates l (the sum of p against m) and returns the factor e^(m_old -
// m_new) the row's output must be rescaled by: exactly 1 while m holds,
// 0 on the first tile. out = O / l and lse = m + log l come out the same
// whatever the reference, as O and l carry the same factor.
// Every row has an unmasked key in every tile it visits (key k0 <= i in
// tiles before the diagonal, and key i itself on it), so the running max
// is finite: no inf - inf. Masked scores are -inf, and e^-inf is exactly 0.
// The two lanes combine their halves with fmaxf and +, which commute, so
// both hold the same bits of m and l.
__device__ float SoftmaxRowHalf(float* s_row, bf16* p_row, int64_t i,
                                int64_t k0, int r, int half,
                                const TcGeometry& g, float* m, float* l) {
  float tile_max = -INFINITY;
  for (int k = 0; k < kTile / 2; ++k) {
    const int c = PairColumn(k, r, half, kTile);
    const int64_t j = k0 + c;
    const float s = j > i || j >= g.seq ? -INFINITY : s_row[c] * g.scale;
    s_row[c] = s;
    tile_max = fmaxf(tile_max, s);
  }
  tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
  const float running = fmaxf(*m, tile_max);
  const float m_new = running > *m + kMaxLag ? running : *m;  // -inf first
  const float correction = expf(*m - m_new);
  float sum = 0.f;
  for (int k = 0; k < kTile / 2; ++k) {
    const int c = PairColumn(k, r, half, kTile);
    const float p = expf(s_row[c] - m_new);
    p_row[c] = __float2bfloat16_rn(p);
    sum += p;  // the unrounded p: l carries no bf16 error
  }
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  *l = *l * correction + sum;
  *m = m_new;
  return correction;
}

// Warp-wide: multiplies row r of the warp's output accumulator by the
// row's correction, through `stage` (the warp's 16 rows of fp32, stride
// kLdO): wmma fragment layouts are opaque, so rows are reached in shared
// memory. Each lane pair scales its own row.
template <int kD>
__device__ void RescaleOutput(FragC (&o)[kD / 16], float* stage, int wr,
                              int half, float correction) {
  constexpr int kLdO = Strides<kD>::kLdO;
#pragma unroll
  for (int n = 0; n < kD / 16; ++n) {
    wmma::store_matrix_sync(stage + n * 16, o[n], kLdO, wmma::mem_row_major);
  }
  __syncwarp();
  if (correction != 1.f) {
    float* row = stage + wr * kLdO;
    for (int k = 0; k < kD / 2; ++k)
      row[PairColumn(k, wr, half, kD)] *= correction;
  }
  __syncwarp();
#pragma unroll
  for (int n = 0; n < kD / 16; ++n) {
    wmma::load_matrix_sync(o[n], stage + n * 16, kLdO, wmma::mem_row_major);
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
  const int w0 = warp * kWarpRows;  // the warp's first row
  const int wr = lane / 2, half = lane % 2;
  const int r = w0 + wr;  // the lane's row
  const int64_t i = q0 + r;
  float* o_stage = so + w0 * L::kLdO;  // the warp's rows of O, when staged
  FragC o[kD / 16];                    // the warp's 16 rows of O, in registers
  ZeroFragments<kD>(o);
  LoadRows<kD>(sq, qkv + h.qkv, h.qkv_row, q0, g.seq);
  __syncthreads();
  FragA q[kD / 16];  // the warp's 16 query rows, for every key tile
  LoadFragmentsA<kD>(q, sq + w0 * L::kLdX, L::kLdX);
  float m = -INFINITY, l = 0.f;
  for (int kt = 0; kt <= qt; ++kt) {
    const int64_t k0 = static_cast<int64_t>(kt) * kTile;
    LoadKeyValueTile<kD>(sk, sv, qkv, h, g, k0);
    WarpMatmulABt<kTile, kD>(ss + w0 * L::kLdS, L::kLdS, q, sk, L::kLdX);
    __syncwarp();
    const float correction = SoftmaxRowHalf(ss + r * L::kLdS, sp + r * kLdP, i,
                                            k0, wr, half, g, &m, &l);
    // O is still 0 on the first tile; later, a row's reference rarely
    // moves, and only then does the warp stage O.
    if (kt > 0 && __any_sync(0xffffffffu, correction != 1.f)) {
      RescaleOutput<kD>(o, o_stage, wr, half, correction);
    }
    __syncwarp();  // every lane's p is in sp
    WarpMmaAB<kD, kTile>(o, sp + w0 * kLdP, kLdP, sv, L::kLdX);
  }
#pragma unroll
  for (int n = 0; n < kD / 16; ++n) {
    wmma::store_matrix_sync(o_stage + n * 16, o[n], L::kLdO,
                            wmma::mem_row_major);
  }
  __syncwarp();
  if (i >= g.seq) return;  // a padding row: no out, no lse
  // Each lane writes its half of the row in 16-byte packs.
  const float* o_row = so + r * L::kLdO;
  bf16* out_row = out + h.out + i * h.out_row;
  const float inv = 1.f / l;
  for (int d = half * kD / 2; d < (half + 1) * kD / 2; d += kPack<bf16>) {
    float pack[kPack<bf16>];
#pragma unroll
    for (int k = 0; k < kPack<bf16>; ++k) pack[k] = o_row[d + k] * inv;
    StPack(out_row + d, pack);
  }
  if (half == 0) lse[h.stats + i] = m + logf(l);
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
