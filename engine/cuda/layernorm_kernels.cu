// LayerNorm forward and backward (as llm.c's layernorm_forward/backward).
// Rows are independent: one warp per row computes the mean, then the
// variance around it (two passes, as the CPU backend), with butterfly warp
// sums whose order is fixed. The backward sums the weight and bias
// gradients over rows as it goes, in registers (and, when asked, the
// column sums of the input gradient it leaves: the bias gradient of the
// linear layer whose output that gradient is), when a row is at most 32
// packs a lane (d_model up to 1,024) and the scratch holds its blocks'
// partials (LayerNormBackwardKernel); otherwise a second pass takes them
// with the deterministic column sums of column_sums.cuh. Either way the
// order of every sum is fixed by the shape and the scratch size.
//
// Access: a row's arrays (input, output, weight, bias; the residual's
// operands; the gradients) are read and written in 16-byte packs
// (vec16.cuh: 8 bf16 or 4 fp32), lane l taking packs l, l + 32, ..., and
// its lane sums adding a pack's entries in order. Packs need every array
// aligned alike at the same channel: with channels a multiple of the pack
// and 16-byte aligned buffers (the backend's arena) every row is whole
// packs; otherwise a row's unaligned head and tail, or the whole row when
// its arrays' alignments differ (channels not a multiple of the pack), go
// element by element, lane l taking channels l, l + 32, ... (ForOwned).
// The grouping of the sums thus depends on the launch shape and on the
// arrays' alignment mod 16 bytes; the fused residual add stays bitwise the
// Add and LayerNorm pair when its arrays are aligned alike.
#include <algorithm>
#include <cmath>

#include "engine/cuda/act_type.cuh"
#include "engine/cuda/block_reduce.cuh"
#include "engine/cuda/column_sums.cuh"
#include "engine/cuda/layernorm_kernels.h"
#include "engine/cuda/vec16.cuh"

namespace trainyard::engine::cuda {
namespace {

constexpr float kLayerNormEps = 1e-5f;
constexpr int kRowsPerBlock = 8;  // warps of 32 threads

// The value St stores into T, widened back: what a later Ld would read.
template <typename T>
__device__ __forceinline__ float Stored(float x) {
  T t;
  St(&t, x);
  return Ld(&t);
}

// With kAdd, the row is first made as res = inp + other (rounded to T as
// the elementwise Add rounds it) and stored, and the LayerNorm reads res:
// the residual add fused in, saving a pass over the row. Each lane reads
// back only what it wrote itself (the same channels every pass).
template <typename T, bool kAdd>
__global__ void LayerNormForwardKernel(T* out, float* mean, float* rstd, T* res,
                                       const T* inp, const T* other,
                                       const T* weight, const T* bias,
                                       int64_t rows, int64_t channels) {
  constexpr int P = kPack<T>;
  const int64_t row =
      static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;  // the whole warp leaves together
  const int lane = threadIdx.x % 32;
  const T* a = inp + row * channels;
  const T* x = kAdd ? res + row * channels : a;
  T* o = out + row * channels;
  const auto split = kAdd ? SplitAligned(channels, x, o, a,
                                         other + row * channels, weight, bias)
                          : SplitAligned(channels, x, o, weight, bias);
  float sum = 0.f;
  if constexpr (kAdd) {
    const T* b = other + row * channels;
    T* r = res + row * channels;
    ForOwned(
        split, lane, 32,
        [&](int64_t c) {
          const float v = Ld(a + c) + Ld(b + c);
          St(r + c, v);
          sum += Stored<T>(v);
        },
        [&](int64_t c) {
          float va[P], vb[P];
          LdPack(a + c, va);
          LdPack(b + c, vb);
#pragma unroll
          for (int k = 0; k < P; ++k) va[k] += vb[k];
          StPack(r + c, va);
#pragma unroll
          for (int k = 0; k < P; ++k) sum += Stored<T>(va[k]);
        });
  } else {
    ForOwned(
        split, lane, 32, [&](int64_t c) { sum += Ld(x + c); },
        [&](int64_t c) {
          float v[P];
          LdPack(x + c, v);
#pragma unroll
          for (int k = 0; k < P; ++k) sum += v[k];
        });
  }
  const float m = WarpReduce(sum, SumOp()) / static_cast<float>(channels);
  float sq = 0.f;
  ForOwned(
      split, lane, 32,
      [&](int64_t c) {
        const float d = Ld(x + c) - m;
        sq += d * d;
      },
      [&](int64_t c) {
        float v[P];
        LdPack(x + c, v);
#pragma unroll
        for (int k = 0; k < P; ++k) sq += (v[k] - m) * (v[k] - m);
      });
  const float var = WarpReduce(sq, SumOp()) / static_cast<float>(channels);
  const float s = 1.f / sqrtf(var + kLayerNormEps);
  ForOwned(
      split, lane, 32,
      [&](int64_t c) {
        St(o + c, (Ld(x + c) - m) * s * Ld(weight + c) + Ld(bias + c));
      },
      [&](int64_t c) {
        float v[P], w[P], bi[P];
        LdPack(x + c, v);
        LdPack(weight + c, w);
        LdPack(bias + c, bi);
#pragma unroll
        for (int k = 0; k < P; ++k) v[k] = (v[k] - m) * s * w[k] + bi[k];
        StPack(o + c, v);
      });
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

// One row's input gradient, the same arithmetic in both backward kernels
// (so the same bits): Add each channel's terms of the row's two sums in
// the lane's order, Reduce them over the warp into means, then Grad each
// channel: prev + (w d - mean(w d) - norm mean(w d norm)) rstd.
struct RowGrad {
  float m, s;
  float dnorm_sum = 0.f, dnorm_norm_sum = 0.f;
  float dnorm_mean = 0.f, dnorm_norm_mean = 0.f;
  __device__ __forceinline__ RowGrad(float mean, float rstd)
      : m(mean), s(rstd) {}
  __device__ __forceinline__ float Norm(float xv) const { return (xv - m) * s; }
  __device__ __forceinline__ void Add(float xv, float dv, float wv) {
    const float dnorm = wv * dv;
    dnorm_sum += dnorm;
    dnorm_norm_sum += dnorm * Norm(xv);
  }
  __device__ __forceinline__ void Reduce(int64_t channels) {
    const float inv_c = 1.f / static_cast<float>(channels);
    dnorm_mean = WarpReduce(dnorm_sum, SumOp()) * inv_c;
    dnorm_norm_mean = WarpReduce(dnorm_norm_sum, SumOp()) * inv_c;
  }
  __device__ __forceinline__ float Grad(float xv, float dv, float wv,
                                        float prev) const {
    return prev + (wv * dv - dnorm_mean - Norm(xv) * dnorm_norm_mean) * s;
  }
};

template <typename T>
__global__ void LayerNormInputGradKernel(T* dinp, const T* dout, const T* inp,
                                         const T* weight, const float* mean,
                                         const float* rstd, int64_t rows,
                                         int64_t channels) {
  constexpr int P = kPack<T>;
  const int64_t row =
      static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32;
  const T* x = inp + row * channels;
  const T* d = dout + row * channels;
  T* di = dinp + row * channels;
  const auto split = SplitAligned(channels, x, d, di, weight);
  RowGrad rg(mean[row], rstd[row]);
  ForOwned(
      split, lane, 32,
      [&](int64_t c) { rg.Add(Ld(x + c), Ld(d + c), Ld(weight + c)); },
      [&](int64_t c) {
        float xv[P], dv[P], wv[P];
        LdPack(x + c, xv);
        LdPack(d + c, dv);
        LdPack(weight + c, wv);
#pragma unroll
        for (int k = 0; k < P; ++k) rg.Add(xv[k], dv[k], wv[k]);
      });
  rg.Reduce(channels);
  ForOwned(
      split, lane, 32,
      [&](int64_t c) {
        St(di + c, rg.Grad(Ld(x + c), Ld(d + c), Ld(weight + c), Ld(di + c)));
      },
      [&](int64_t c) {
        float xv[P], dv[P], wv[P], g[P];
        LdPack(x + c, xv);
        LdPack(d + c, dv);
        LdPack(weight + c, wv);
        LdPack(di + c, g);
#pragma unroll
        for (int k = 0; k < P; ++k) g[k] = rg.Grad(xv[k], dv[k], wv[k], g[k]);
        StPack(di + c, g);
      });
}

// The backward with the weight and bias gradients fused in, for rows of
// whole packs (channels a multiple of the pack, every array 16-byte
// aligned) of at most 32 * J packs. Warp g of the grid's W takes rows g,
// g + W, ... and computes each row's dinp as LayerNormInputGradKernel does
// (the same lane sums in the same order: the same bits), while its lanes
// keep running sums of norm * dout and dout (and with kSums = 3 of dinp as
// stored) for the channels they own (lane l: packs l, l + 32, ...) in
// registers. The block then adds its warps' sums in warp order into
// partials[o][block][c] (o = 0: dweight, 1: dbias, 2: dinp's sums), which
// AddColumnPartialsKernel adds in block order onto the outputs. This saves
// the column sums' second read of inp and dout (and of dinp).
template <typename T, int J, int kSums>
__global__ void __launch_bounds__(kRowsPerBlock * 32, 2)
    LayerNormBackwardKernel(T* dinp, float* partials, const T* dout,
                            const T* inp, const T* weight, const float* mean,
                            const float* rstd, int64_t rows, int64_t channels) {
  constexpr int P = kPack<T>;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t packs = channels / P;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kRowsPerBlock;
  float acc[kSums][J][P];  // [0]: norm * dout, [1]: dout, [2]: dinp
#pragma unroll
  for (int o = 0; o < kSums; ++o) {
#pragma unroll
    for (int j = 0; j < J; ++j) {
#pragma unroll
      for (int k = 0; k < P; ++k) acc[o][j][k] = 0.f;
    }
  }
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + warp;
       row < rows; row += warps) {
    const T* x = inp + row * channels;
    const T* d = dout + row * channels;
    T* di = dinp + row * channels;
    RowGrad rg(mean[row], rstd[row]);
    // The lane's packs in order, as ForOwned gives them on whole-pack rows.
    const auto each_pack = [&](auto&& visit) {
#pragma unroll
      for (int j = 0; j < J; ++j) {
        const int64_t c = (lane + 32 * j) * static_cast<int64_t>(P);
        if (c >= packs * P) break;
        float xv[P], dv[P], wv[P];
        LdPack(x + c, xv);
        LdPack(d + c, dv);
        LdPack(weight + c, wv);
        visit(j, c, xv, dv, wv);
      }
    };
    each_pack(
        [&](int, int64_t, const float* xv, const float* dv, const float* wv) {
#pragma unroll
          for (int k = 0; k < P; ++k) rg.Add(xv[k], dv[k], wv[k]);
        });
    rg.Reduce(channels);
    each_pack([&](int j, int64_t c, const float* xv, const float* dv,
                  const float* wv) {
      float g[P];
      LdPack(di + c, g);
#pragma unroll
      for (int k = 0; k < P; ++k) {
        g[k] = rg.Grad(xv[k], dv[k], wv[k], g[k]);
        acc[0][j][k] += rg.Norm(xv[k]) * dv[k];
        acc[1][j][k] += dv[k];
        if constexpr (kSums == 3) acc[2][j][k] += Stored<T>(g[k]);
      }
      StPack(di + c, g);
    });
  }
  __shared__ float lanes[kRowsPerBlock][32 * J * P];
#pragma unroll
  for (int o = 0; o < kSums; ++o) {
#pragma unroll
    for (int j = 0; j < J; ++j) {
      const int64_t c = (lane + 32 * j) * static_cast<int64_t>(P);
      if (c >= packs * P) break;
#pragma unroll
      for (int k = 0; k < P; ++k) lanes[warp][c + k] = acc[o][j][k];
    }
    __syncthreads();
    for (int64_t c = threadIdx.x; c < channels; c += blockDim.x) {
      float total = 0.f;
      for (int w = 0; w < kRowsPerBlock; ++w) total += lanes[w][c];
      partials[(o * static_cast<int64_t>(gridDim.x) + blockIdx.x) * channels +
               c] = total;
    }
    __syncthreads();
  }
}

// dweight's term norm * dout, dbias's term dout and (kOut = 3) dinp's
// term dinp at row r, channels c .. c + W - 1 (a pack when W is one), for
// the two-pass backward (dinp read after the input gradient's pass).
template <typename T, int W, int kOut>
struct LayerNormParamTerm {
  const T* dout;
  const T* inp;
  const T* dinp;
  const float* mean;
  const float* rstd;
  int64_t channels;
  __device__ void operator()(int64_t r, int64_t c, float (&v)[kOut][W]) const {
    float d[W], x[W], g[W];
    if constexpr (W == kPack<T>) {
      LdPack(dout + r * channels + c, d);
      LdPack(inp + r * channels + c, x);
      if constexpr (kOut == 3) LdPack(dinp + r * channels + c, g);
    } else {
      static_assert(W == 1);
      d[0] = Ld(dout + r * channels + c);
      x[0] = Ld(inp + r * channels + c);
      if constexpr (kOut == 3) g[0] = Ld(dinp + r * channels + c);
    }
#pragma unroll
    for (int w = 0; w < W; ++w) {
      v[0][w] = (x[w] - mean[r]) * rstd[r] * d[w];
      v[1][w] = d[w];
      if constexpr (kOut == 3) v[2][w] = g[w];
    }
  }
};

unsigned RowBlocks(int64_t rows) {
  return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
}

// The fused backward's block count: two blocks on each of an H100's or
// H200's 132 SMs, fewer for few rows or when the partials (`sums` *
// channels a block) would not fit the scratch; 0 when they never fit.
// Fixed by rows, channels, the sums and the scratch size alone, so the
// sums' order is too.
constexpr int64_t kMaxGradBlocks = 264;

int64_t GradBlocks(int64_t rows, int64_t channels, int sums,
                   int64_t scratch_floats) {
  return std::min({static_cast<int64_t>(RowBlocks(rows)), kMaxGradBlocks,
                   scratch_floats / (sums * channels)});
}

// The fused backward for J packs a lane (J * P <= 32: the kSums * J * P
// running sums stay in registers), or nothing queued and false when the
// row needs more.
template <typename T, int kSums, int J = 1>
bool LaunchFusedBackward(int64_t lane_packs, unsigned blocks, T* dinp,
                         float* partials, const T* dout, const T* inp,
                         const T* weight, const float* mean, const float* rstd,
                         int64_t rows, int64_t channels, cudaStream_t stream) {
  if constexpr (J * kPack < T >> 32) {
    return false;
  } else {
    if (lane_packs > J) {
      return LaunchFusedBackward<T, kSums, J + 1>(
          lane_packs, blocks, dinp, partials, dout, inp, weight, mean, rstd,
          rows, channels, stream);
    }
    LayerNormBackwardKernel<T, J, kSums>
        <<<blocks, kRowsPerBlock * 32, 0, stream>>>(
            dinp, partials, dout, inp, weight, mean, rstd, rows, channels);
    return true;
  }
}

// LaunchLayerNormBackward with kSums outputs: dweight, dbias (and dinp's
// column sums).
template <typename T, int kSums>
cudaError_t LayerNormBackward(T* dinp, ColumnOutputs<kSums> outs, const T* dout,
                              const T* inp, const T* weight, const float* mean,
                              const float* rstd, int64_t rows, int64_t channels,
                              float* scratch, int64_t scratch_floats,
                              cudaStream_t stream) {
  constexpr int P = kPack<T>;
  const int64_t blocks = GradBlocks(rows, channels, kSums, scratch_floats);
  if (blocks > 0 && RowsArePacks<T>(channels, dinp, dout, inp, weight) &&
      LaunchFusedBackward<T, kSums>(
          (channels / P + 31) / 32, static_cast<unsigned>(blocks), dinp,
          scratch, dout, inp, weight, mean, rstd, rows, channels, stream)) {
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    AddColumnPartialsKernel<kSums>
        <<<ElementwiseBlocks(channels), kElementwiseThreads, 0, stream>>>(
            outs, scratch, blocks, 0, channels);
    return cudaGetLastError();
  }
  LayerNormInputGradKernel<<<RowBlocks(rows), kRowsPerBlock * 32, 0, stream>>>(
      dinp, dout, inp, weight, mean, rstd, rows, channels);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  if (RowsArePacks<T>(channels, dinp, dout, inp)) {
    return LaunchColumnSums<kSums, P>(
        outs, scratch, scratch_floats, rows, channels,
        LayerNormParamTerm<T, P, kSums>{dout, inp, dinp, mean, rstd, channels},
        stream);
  }
  return LaunchColumnSums<kSums>(
      outs, scratch, scratch_floats, rows, channels,
      LayerNormParamTerm<T, 1, kSums>{dout, inp, dinp, mean, rstd, channels},
      stream);
}

}  // namespace

cudaError_t LaunchLayerNormForward(void* out, float* mean, float* rstd,
                                   const void* inp, const void* weight,
                                   const void* bias, int64_t rows,
                                   int64_t channels, bool bf16,
                                   cudaStream_t stream) {
  if (rows <= 0 || channels <= 0) return cudaSuccess;
  return DispatchAct(bf16, [&](auto t) {
    using T = decltype(t);
    LayerNormForwardKernel<T, false>
        <<<RowBlocks(rows), kRowsPerBlock * 32, 0, stream>>>(
            As<T>(out), mean, rstd, static_cast<T*>(nullptr), As<T>(inp),
            static_cast<const T*>(nullptr), As<T>(weight), As<T>(bias), rows,
            channels);
    return cudaGetLastError();
  });
}

cudaError_t LaunchAddLayerNormForward(void* res, void* out, float* mean,
                                      float* rstd, const void* a, const void* b,
                                      const void* weight, const void* bias,
                                      int64_t rows, int64_t channels, bool bf16,
                                      cudaStream_t stream) {
  if (rows <= 0 || channels <= 0) return cudaSuccess;
  return DispatchAct(bf16, [&](auto t) {
    using T = decltype(t);
    LayerNormForwardKernel<T, true>
        <<<RowBlocks(rows), kRowsPerBlock * 32, 0, stream>>>(
            As<T>(out), mean, rstd, As<T>(res), As<T>(a), As<T>(b),
            As<T>(weight), As<T>(bias), rows, channels);
    return cudaGetLastError();
  });
}

cudaError_t LaunchLayerNormBackward(void* dinp, float* dweight, float* dbias,
                                    float* dinp_sums, const void* dout,
                                    const void* inp, const void* weight,
                                    const float* mean, const float* rstd,
                                    int64_t rows, int64_t channels,
                                    float* scratch, int64_t scratch_floats,
                                    bool bf16, cudaStream_t stream) {
  if (rows <= 0 || channels <= 0) return cudaSuccess;
  // Either path's least scratch, so that a size is valid or not alike.
  const int sums = dinp_sums != nullptr ? 3 : 2;
  if (scratch_floats < sums * kColumnTile) return cudaErrorInvalidValue;
  return DispatchAct(bf16, [&](auto t) {
    using T = decltype(t);
    if (dinp_sums != nullptr) {
      return LayerNormBackward<T, 3>(
          As<T>(dinp), ColumnOutputs<3>{{dweight, dbias, dinp_sums}},
          As<T>(dout), As<T>(inp), As<T>(weight), mean, rstd, rows, channels,
          scratch, scratch_floats, stream);
    }
    return LayerNormBackward<T, 2>(
        As<T>(dinp), ColumnOutputs<2>{{dweight, dbias}}, As<T>(dout),
        As<T>(inp), As<T>(weight), mean, rstd, rows, channels, scratch,
        scratch_floats, stream);
  });
}

}  // namespace trainyard::engine::cuda
