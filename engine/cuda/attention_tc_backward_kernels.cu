// The backward of the tensor-core causal attention (see
// attention_tc_kernels.cu for the forward, the formulas, determinism and
// precision; attention_tc_tiles.cuh for tiles and layouts):
//   query side (one block per query tile, key tiles ascending):
//     D_i = dout_i . out_i -> delta; S = Q K^T, dP = dout V^T (wmma);
//     dS = e^(scale S - lse) (dP - D) as bf16 -> smem; dQ += dS K (wmma,
//     fp32 register fragments, never rescaled); dq = scale dQ.
//   key side (one block per key tile, query tiles ascending from the
//     diagonal; reads delta, so it runs after the query side):
//     S^T = K Q^T, dP^T = V dout^T (wmma); P^T and dS^T as bf16 -> smem;
//     dV += P^T dout, dK += dS^T Q (wmma, register fragments); dk = scale dK.
// Every output element is summed by one warp in a fixed order:
// deterministic.
#include <mma.h>

#include <cstdint>

#include "engine/cuda/act_type.cuh"
#include "engine/cuda/attention_tc_kernels.h"
#include "engine/cuda/attention_tc_tiles.cuh"
#include "engine/cuda/vec16.cuh"

namespace trainyard::engine::cuda {
namespace attention_tc {
namespace {

// Threads 0..63: D_i = dout_i . out_i (fp32, ascending channels, the
// reference kernels' order) into delta and the block's copy; rows read in
// 16-byte packs.
template <int kD>
__device__ void ComputeDelta(float* delta, float* s_delta, const bf16* dout,
                             const bf16* out, const HeadOffsets& h, int64_t q0,
                             int64_t seq) {
  for (int r = threadIdx.x; r < kTile; r += kThreads) {
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
  __syncthreads();
  // The warp's 16 query and dout rows, for every key tile.
  FragA q[kD / 16], dy[kD / 16];
  LoadFragmentsA<kD>(q, sq + w0 * L::kLdX, L::kLdX);
  LoadFragmentsA<kD>(dy, sdo + w0 * L::kLdX, L::kLdX);
  FragC dq[kD / 16];
  ZeroFragments<kD>(dq);
  for (int kt = 0; kt <= qt; ++kt) {
    const int64_t k0 = static_cast<int64_t>(kt) * kTile;
    LoadKeyValueTile<kD>(sk, sv, qkv, h, g, k0);
    WarpMatmulABt<kTile, kD>(ss + w0 * L::kLdW, L::kLdW, q, sk, L::kLdX);
    WarpMatmulABt<kTile, kD>(sdp + w0 * L::kLdW, L::kLdW, dy, sv, L::kLdX);
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
}  // namespace attention_tc

cudaError_t LaunchAttentionBackwardTc(void* dqkv, float* delta,
                                      const void* dout, const void* out,
                                      const void* qkv, const float* lse,
                                      int64_t batch, int64_t seq,
                                      int64_t channels, int64_t heads,
                                      cudaStream_t stream) {
  if (batch <= 0 || seq <= 0) return cudaSuccess;
  attention_tc::TcGeometry g;
  dim3 grid;
  if (!attention_tc::MakeTcGeometry(batch, seq, channels, heads, &g, &grid) ||
      !Aligned16(dqkv) || !Aligned16(dout) || !Aligned16(out) ||
      !Aligned16(qkv)) {
    return cudaErrorInvalidValue;
  }
  bf16* dx = As<bf16>(dqkv);
  const bf16 *dy = As<bf16>(dout), *y = As<bf16>(out), *x = As<bf16>(qkv);
  switch (channels / heads) {
    case 32:
      return attention_tc::BackwardTc<32>(dx, delta, dy, y, x, lse, g, grid,
                                          stream);
    case 64:
      return attention_tc::BackwardTc<64>(dx, delta, dy, y, x, lse, g, grid,
                                          stream);
    default:
      return attention_tc::BackwardTc<128>(dx, delta, dy, y, x, lse, g, grid,
                                           stream);
  }
}

}  // namespace trainyard::engine::cuda
