// Causal multi-head attention, flash-attention style, with fp32 math
// whatever the activations are stored as (fp32 or bf16: q, k, v, out and
// their gradients are read through Ld and stored through St): no T x T
// matrix is ever stored; the forward saves one log-sum-exp per query row,
// and the backward recomputes each probability from it.
//
// One thread owns one row: a query row in the forward and in the query
// gradient, a key row in the key/value gradient. The thread's own vectors
// (q, or k and v) sit in a shared-memory column of its own, its
// accumulators in registers. Threads of a warp own adjacent rows and walk
// the other side's rows in the same order, so every load of another row is
// one address for the whole warp (a broadcast). Each output element is
// summed by one thread in ascending key (or query) order: deterministic,
// no atomics.
//
//   forward, per query i: over keys j <= i in tiles of 32, online softmax:
//     s_j = scale q_i.k_j;  m' = max(m, max_j s_j);  l = l e^(m-m') + sum
//     e^(s_j-m') acc = acc e^(m-m') + sum e^(s_j-m') v_j;  out_i = acc / l;
//     lse_i = m + log l
//   backward, with p_ij = e^(scale q_i.k_j - lse_i) and D_i = dout_i . out_i:
//     ds_ij = p_ij (dout_i . v_j - D_i)
//     dq_i = scale sum_{j<=i} ds_ij k_j          (one thread per query)
//     dk_j = scale sum_{i>=j} ds_ij q_i,  dv_j = sum_{i>=j} p_ij dout_i
//                                              (one thread per key)
// The head size is a template bound (32, 64 or 128) so the accumulators
// stay in registers; smaller heads run masked.
//
// These are the reference kernels: LaunchAttentionForward/Backward send
// bf16 activations with a head size the tensor-core kernels take
// (attention_tc_kernels.cu) there instead.
#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "engine/cuda/act_type.cuh"
#include "engine/cuda/attention_kernels.h"
#include "engine/cuda/attention_tc_kernels.h"
#include "engine/cuda/vec16.cuh"

namespace trainyard::engine::cuda {
namespace {

constexpr int kKeyTile = 32;

// Where one (sequence, head) pair lives in qkv [B, T, 3C] and out [B, T, C].
struct HeadGeometry {
  int64_t seq, channels, heads;
  int head_size;
  float scale;
};

template <typename T>
struct HeadView {
  const T* q;   // row t at q + t * row; k and v follow at + C, + 2C
  int64_t row;  // 3C
  int64_t out;  // offset of position 0 of this head in [B, T, C]
  int64_t lse;  // offset of position 0 of this head in [B, NH, T]
};

template <typename T>
__device__ __forceinline__ HeadView<T> ViewOf(const T* qkv,
                                              const HeadGeometry& g) {
  const int64_t bh = blockIdx.x, b = bh / g.heads, h = bh % g.heads;
  const int64_t row = 3 * g.channels;
  return {qkv + b * g.seq * row + h * g.head_size, row,
          b * g.seq * g.channels + h * g.head_size, bh * g.seq};
}

template <typename T, int kD, int kThreads>
__global__ void __launch_bounds__(kThreads)
    AttentionForwardKernel(T* out, float* lse, const T* qkv, HeadGeometry g) {
  const int64_t i = static_cast<int64_t>(blockIdx.y) * kThreads + threadIdx.x;
  if (i >= g.seq) return;
  const HeadView<T> h = ViewOf(qkv, g);
  const int t = threadIdx.x, hs = g.head_size;
  __shared__ float own_q[kD][kThreads];
  __shared__ float scores[kKeyTile][kThreads];
  float acc[kD];
#pragma unroll
  for (int d = 0; d < kD; ++d) {
    if (d < hs) own_q[d][t] = Ld(h.q + i * h.row + d);
    acc[d] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  for (int64_t j0 = 0; j0 <= i; j0 += kKeyTile) {
    const int64_t j1 = j0 + kKeyTile < i + 1 ? j0 + kKeyTile : i + 1;
    float tile_max = -INFINITY;
    for (int64_t j = j0; j < j1; ++j) {
      const T* k = h.q + j * h.row + g.channels;
      float dot = 0.f;
#pragma unroll
      for (int d = 0; d < kD; ++d) {
        if (d < hs) dot += own_q[d][t] * Ld(k + d);
      }
      const float s = dot * g.scale;
      scores[j - j0][t] = s;
      tile_max = fmaxf(tile_max, s);
    }
    const float m_new = fmaxf(m, tile_max);
    const float correction = expf(m - m_new);  // 0 on the first tile
    l *= correction;
#pragma unroll
    for (int d = 0; d < kD; ++d) acc[d] *= correction;
    for (int64_t j = j0; j < j1; ++j) {
      const float p = expf(scores[j - j0][t] - m_new);
      l += p;
      const T* v = h.q + j * h.row + 2 * g.channels;
#pragma unroll
      for (int d = 0; d < kD; ++d) {
        if (d < hs) acc[d] += p * Ld(v + d);
      }
    }
    m = m_new;
  }
  T* o = out + h.out + i * g.channels;
  const float inv = 1.f / l;
#pragma unroll
  for (int d = 0; d < kD; ++d) {
    if (d < hs) St(o + d, acc[d] * inv);
  }
  lse[h.lse + i] = m + logf(l);
}

// dq for query i; also stores D_i = dout_i . out_i for the key kernel.
template <typename T, int kD, int kThreads>
__global__ void __launch_bounds__(kThreads)
    AttentionQueryGradKernel(T* dqkv, float* delta, const T* dout, const T* out,
                             const T* qkv, const float* lse, HeadGeometry g) {
  const int64_t i = static_cast<int64_t>(blockIdx.y) * kThreads + threadIdx.x;
  if (i >= g.seq) return;
  const HeadView<T> h = ViewOf(qkv, g);
  const int t = threadIdx.x, hs = g.head_size;
  __shared__ float own_q[kD][kThreads];
  __shared__ float own_dout[kD][kThreads];
  const T* dout_i = dout + h.out + i * g.channels;
  const T* out_i = out + h.out + i * g.channels;
  float dq[kD];
  float delta_i = 0.f;
#pragma unroll
  for (int d = 0; d < kD; ++d) {
    if (d < hs) {
      own_q[d][t] = Ld(h.q + i * h.row + d);
      own_dout[d][t] = Ld(dout_i + d);
      delta_i += Ld(dout_i + d) * Ld(out_i + d);
    }
    dq[d] = 0.f;
  }
  delta[h.lse + i] = delta_i;
  const float lse_i = lse[h.lse + i];
  for (int64_t j = 0; j <= i; ++j) {
    const T* k = h.q + j * h.row + g.channels;
    const T* v = k + g.channels;
    float qk = 0.f, dov = 0.f;
#pragma unroll
    for (int d = 0; d < kD; ++d) {
      if (d < hs) {
        qk += own_q[d][t] * Ld(k + d);
        dov += own_dout[d][t] * Ld(v + d);
      }
    }
    const float p = expf(qk * g.scale - lse_i);
    const float ds = p * (dov - delta_i);
#pragma unroll
    for (int d = 0; d < kD; ++d) {
      if (d < hs) dq[d] += ds * Ld(k + d);
    }
  }
  T* dq_i = dqkv + (h.q - qkv) + i * h.row;
#pragma unroll
  for (int d = 0; d < kD; ++d) {
    if (d < hs) St(dq_i + d, dq[d] * g.scale);
  }
}

// dk and dv for key j. REQUIRES: the query kernel has written delta.
template <typename T, int kD, int kThreads>
__global__ void __launch_bounds__(kThreads)
    AttentionKeyValueGradKernel(T* dqkv, const float* delta, const T* dout,
                                const T* qkv, const float* lse,
                                HeadGeometry g) {
  const int64_t j = static_cast<int64_t>(blockIdx.y) * kThreads + threadIdx.x;
  if (j >= g.seq) return;
  const HeadView<T> h = ViewOf(qkv, g);
  const int t = threadIdx.x, hs = g.head_size;
  __shared__ float own_k[kD][kThreads];
  __shared__ float own_v[kD][kThreads];
  float dk[kD], dv[kD];
#pragma unroll
  for (int d = 0; d < kD; ++d) {
    if (d < hs) {
      own_k[d][t] = Ld(h.q + j * h.row + g.channels + d);
      own_v[d][t] = Ld(h.q + j * h.row + 2 * g.channels + d);
    }
    dk[d] = 0.f;
    dv[d] = 0.f;
  }
  // Every lane of the warp starts at the warp's first key, so all active
  // lanes read the same query row at each step.
  const int64_t first = j - (t % 32);
  for (int64_t i = first; i < g.seq; ++i) {
    if (i < j) continue;  // query i does not see the later key j
    const T* q = h.q + i * h.row;
    const T* dout_i = dout + h.out + i * g.channels;
    float qk = 0.f, dov = 0.f;
#pragma unroll
    for (int d = 0; d < kD; ++d) {
      if (d < hs) {
        qk += Ld(q + d) * own_k[d][t];
        dov += Ld(dout_i + d) * own_v[d][t];
      }
    }
    const float p = expf(qk * g.scale - lse[h.lse + i]);
    const float ds = p * (dov - delta[h.lse + i]);
#pragma unroll
    for (int d = 0; d < kD; ++d) {
      if (d < hs) {
        dv[d] += p * Ld(dout_i + d);
        dk[d] += ds * Ld(q + d);
      }
    }
  }
  T* dk_j = dqkv + (h.q - qkv) + j * h.row + g.channels;
  T* dv_j = dk_j + g.channels;
#pragma unroll
  for (int d = 0; d < kD; ++d) {
    if (d < hs) {
      St(dk_j + d, dk[d] * g.scale);
      St(dv_j + d, dv[d]);
    }
  }
}

// The launch shape for head-size bound kD: rows per block (so the own-row
// columns fit in static shared memory) and the grid over (B*NH, T).
template <int kD>
constexpr int ThreadsFor() {
  return kD <= 64 ? 64 : 32;
}

template <int kD>
bool GridFor(const HeadGeometry& g, int64_t batch, dim3* grid) {
  const int64_t pairs = batch * g.heads;
  const int64_t tiles = (g.seq + ThreadsFor<kD>() - 1) / ThreadsFor<kD>();
  if (pairs > 0x7fffffff || tiles > 65535) return false;
  *grid = dim3(static_cast<unsigned>(pairs), static_cast<unsigned>(tiles));
  return true;
}

template <int kD, typename T>
cudaError_t Forward(T* out, float* lse, const T* qkv, const HeadGeometry& g,
                    int64_t batch, cudaStream_t stream) {
  dim3 grid;
  if (!GridFor<kD>(g, batch, &grid)) return cudaErrorInvalidValue;
  constexpr int kThreads = ThreadsFor<kD>();
  AttentionForwardKernel<T, kD, kThreads>
      <<<grid, kThreads, 0, stream>>>(out, lse, qkv, g);
  return cudaGetLastError();
}

template <int kD, typename T>
cudaError_t Backward(T* dqkv, float* delta, const T* dout, const T* out,
                     const T* qkv, const float* lse, const HeadGeometry& g,
                     int64_t batch, cudaStream_t stream) {
  dim3 grid;
  if (!GridFor<kD>(g, batch, &grid)) return cudaErrorInvalidValue;
  constexpr int kThreads = ThreadsFor<kD>();
  AttentionQueryGradKernel<T, kD, kThreads>
      <<<grid, kThreads, 0, stream>>>(dqkv, delta, dout, out, qkv, lse, g);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  AttentionKeyValueGradKernel<T, kD, kThreads>
      <<<grid, kThreads, 0, stream>>>(dqkv, delta, dout, qkv, lse, g);
  return cudaGetLastError();
}

bool MakeGeometry(int64_t seq, int64_t channels, int64_t heads,
                  HeadGeometry* g) {
  if (heads <= 0 || channels % heads != 0) return false;
  const int64_t hs = channels / heads;
  if (hs < 1 || hs > kAttentionMaxHeadSize) return false;
  *g = {seq, channels, heads, static_cast<int>(hs),
        1.f / sqrtf(static_cast<float>(hs))};
  return true;
}

template <typename T>
cudaError_t ForwardAnyHead(T* out, float* lse, const T* qkv,
                           const HeadGeometry& g, int64_t batch,
                           cudaStream_t stream) {
  if (g.head_size <= 32) return Forward<32>(out, lse, qkv, g, batch, stream);
  if (g.head_size <= 64) return Forward<64>(out, lse, qkv, g, batch, stream);
  return Forward<128>(out, lse, qkv, g, batch, stream);
}

template <typename T>
cudaError_t BackwardAnyHead(T* dqkv, float* delta, const T* dout, const T* out,
                            const T* qkv, const float* lse,
                            const HeadGeometry& g, int64_t batch,
                            cudaStream_t stream) {
  if (g.head_size <= 32) {
    return Backward<32>(dqkv, delta, dout, out, qkv, lse, g, batch, stream);
  }
  if (g.head_size <= 64) {
    return Backward<64>(dqkv, delta, dout, out, qkv, lse, g, batch, stream);
  }
  return Backward<128>(dqkv, delta, dout, out, qkv, lse, g, batch, stream);
}

// `tiling` where the head size takes it, else the default.
AttentionTcTiling TilingOrDefault(AttentionTcTiling tiling, int64_t head_size) {
  return AttentionTcTakesTiling(tiling, head_size) ? tiling
                                                   : kAttentionTcTilings[0];
}

// bf16 with a head size the tensor-core kernels take, and every buffer
// 16-byte aligned as they require (arena buffers always are).
bool UseTensorCores(int64_t channels, int64_t heads, bool bf16,
                    std::initializer_list<const void*> buffers) {
  if (!bf16 || heads <= 0 || channels % heads != 0 ||
      !AttentionTcSupportsHeadSize(channels / heads)) {
    return false;
  }
  for (const void* p : buffers) {
    if (!Aligned16(p)) return false;
  }
  return true;
}

}  // namespace

cudaError_t LaunchAttentionForwardReference(void* out, float* lse,
                                            const void* qkv, int64_t batch,
                                            int64_t seq, int64_t channels,
                                            int64_t heads, bool bf16,
                                            cudaStream_t stream) {
  if (batch <= 0 || seq <= 0) return cudaSuccess;
  HeadGeometry g;
  if (!MakeGeometry(seq, channels, heads, &g)) return cudaErrorInvalidValue;
  return DispatchAct(bf16, [&](auto t) {
    using T = decltype(t);
    return ForwardAnyHead(As<T>(out), lse, As<T>(qkv), g, batch, stream);
  });
}

cudaError_t LaunchAttentionBackwardReference(void* dqkv, float* delta,
                                             const void* dout, const void* out,
                                             const void* qkv, const float* lse,
                                             int64_t batch, int64_t seq,
                                             int64_t channels, int64_t heads,
                                             bool bf16, cudaStream_t stream) {
  if (batch <= 0 || seq <= 0) return cudaSuccess;
  HeadGeometry g;
  if (!MakeGeometry(seq, channels, heads, &g)) return cudaErrorInvalidValue;
  return DispatchAct(bf16, [&](auto t) {
    using T = decltype(t);
    return BackwardAnyHead(As<T>(dqkv), delta, As<T>(dout), As<T>(out),
                           As<T>(qkv), lse, g, batch, stream);
  });
}

cudaError_t LaunchAttentionForward(void* out, float* lse, const void* qkv,
                                   int64_t batch, int64_t seq, int64_t channels,
                                   int64_t heads, bool bf16,
                                   cudaStream_t stream,
                                   AttentionTcTiling tiling) {
  if (UseTensorCores(channels, heads, bf16, {out, qkv})) {
    return LaunchAttentionForwardTc(TilingOrDefault(tiling, channels / heads),
                                    out, lse, qkv, batch, seq, channels, heads,
                                    stream);
  }
  return LaunchAttentionForwardReference(out, lse, qkv, batch, seq, channels,
                                         heads, bf16, stream);
}

cudaError_t LaunchAttentionBackward(
    void* dqkv, float* scratch, const void* dout, const void* out,
    const void* qkv, const float* lse, int64_t batch, int64_t seq,
    int64_t channels, int64_t heads, bool bf16, cudaStream_t stream,
    AttentionTcTiling tiling, AttentionTcBackward backward) {
  if (UseTensorCores(channels, heads, bf16, {dqkv, dout, out, qkv})) {
    // The fp32 sums are read in 8-byte pairs: an unaligned scratch (never
    // the arena's) takes the two kernels, which it is large enough for.
    if (backward == AttentionTcBackward::kOrderedDq && Aligned16(scratch)) {
      return LaunchAttentionBackwardTcOrdered(
          TilingOrDefault(tiling, channels / heads), dqkv, scratch, dout, out,
          qkv, lse, batch, seq, channels, heads, stream);
    }
    return LaunchAttentionBackwardTc(TilingOrDefault(tiling, channels / heads),
                                     dqkv, scratch, dout, out, qkv, lse, batch,
                                     seq, channels, heads, stream);
  }
  return LaunchAttentionBackwardReference(dqkv, scratch, dout, out, qkv, lse,
                                          batch, seq, channels, heads, bf16,
                                          stream);
}

}  // namespace trainyard::engine::cuda
