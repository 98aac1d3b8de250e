// LayerNorm forward and backward (as llm.c's layernorm_forward/backward).
// Rows are independent: one warp per row computes the mean, then the
// variance around it (two passes, as the CPU backend), with butterfly warp
// sums whose order is fixed. The weight and bias gradients sum over rows
// with the deterministic column sums of column_sums.cuh.
#include <cmath>

#include "engine/cuda/act_type.cuh"
#include "engine/cuda/block_reduce.cuh"
#include "engine/cuda/column_sums.cuh"
#include "engine/cuda/layernorm_kernels.h"

namespace trainyard::engine::cuda {
namespace {

constexpr float kLayerNormEps = 1e-5f;
constexpr int kRowsPerBlock = 8;  // warps of 32 threads

// With kAdd, the row is first made as res = inp + other (rounded to T as
// the elementwise Add rounds it) and stored, and the LayerNorm reads res:
// the residual add fused in, saving a pass over the row. Each lane reads
// back only what it wrote itself (the same channels every pass).
template <typename T, bool kAdd>
__global__ void LayerNormForwardKernel(T* out, float* mean, float* rstd, T* res,
                                       const T* inp, const T* other,
                                       const T* weight, const T* bias,
                                       int64_t rows, int64_t channels) {
  const int64_t row =
      static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;  // the whole warp leaves together
  const int lane = threadIdx.x % 32;
  const T* x = (kAdd ? res : inp) + row * channels;
  float sum = 0.f;
  if (kAdd) {
    const T* a = inp + row * channels;
    const T* b = other + row * channels;
    T* r = res + row * channels;
    for (int64_t c = lane; c < channels; c += 32) {
      St(r + c, Ld(a + c) + Ld(b + c));
      sum += Ld(r + c);
    }
  } else {
    for (int64_t c = lane; c < channels; c += 32) sum += Ld(x + c);
  }
  const float m = WarpReduce(sum, SumOp()) / static_cast<float>(channels);
  float sq = 0.f;
  for (int64_t c = lane; c < channels; c += 32) {
    const float d = Ld(x + c) - m;
    sq += d * d;
  }
  const float var = WarpReduce(sq, SumOp()) / static_cast<float>(channels);
  const float s = 1.f / sqrtf(var + kLayerNormEps);
  T* o = out + row * channels;
  for (int64_t c = lane; c < channels; c += 32) {
    St(o + c, (Ld(x + c) - m) * s * Ld(weight + c) + Ld(bias + c));
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

template <typename T>
__global__ void LayerNormInputGradKernel(T* dinp, const T* dout, const T* inp,
                                         const T* weight, const float* mean,
                                         const float* rstd, int64_t rows,
                                         int64_t channels) {
  const int64_t row =
      static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32;
  const T* x = inp + row * channels;
  const T* d = dout + row * channels;
  const float m = mean[row], s = rstd[row];
  float dnorm_sum = 0.f, dnorm_norm_sum = 0.f;
  for (int64_t c = lane; c < channels; c += 32) {
    const float dnorm = Ld(weight + c) * Ld(d + c);
    dnorm_sum += dnorm;
    dnorm_norm_sum += dnorm * ((Ld(x + c) - m) * s);
  }
  const float inv_c = 1.f / static_cast<float>(channels);
  const float dnorm_mean = WarpReduce(dnorm_sum, SumOp()) * inv_c;
  const float dnorm_norm_mean = WarpReduce(dnorm_norm_sum, SumOp()) * inv_c;
  T* di = dinp + row * channels;
  for (int64_t c = lane; c < channels; c += 32) {
    const float norm = (Ld(x + c) - m) * s;
    St(di + c, Ld(di + c) + (Ld(weight + c) * Ld(d + c) - dnorm_mean -
                             norm * dnorm_norm_mean) *
                                s);
  }
}

// dweight's term norm * dout and dbias's term dout, per (row, channel).
template <typename T>
struct LayerNormParamTerm {
  const T* dout;
  const T* inp;
  const float* mean;
  const float* rstd;
  int64_t channels;
  __device__ void operator()(int64_t r, int64_t c, float (&v)[2]) const {
    const float d = Ld(dout + r * channels + c);
    v[0] = (Ld(inp + r * channels + c) - mean[r]) * rstd[r] * d;
    v[1] = d;
  }
};

unsigned RowBlocks(int64_t rows) {
  return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
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
                                    const void* dout, const void* inp,
                                    const void* weight, const float* mean,
                                    const float* rstd, int64_t rows,
                                    int64_t channels, float* scratch,
                                    int64_t scratch_floats, bool bf16,
                                    cudaStream_t stream) {
  if (rows <= 0 || channels <= 0) return cudaSuccess;
  return DispatchAct(bf16, [&](auto t) {
    using T = decltype(t);
    LayerNormInputGradKernel<<<RowBlocks(rows), kRowsPerBlock * 32, 0,
                               stream>>>(As<T>(dinp), As<T>(dout), As<T>(inp),
                                         As<T>(weight), mean, rstd, rows,
                                         channels);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    return LaunchColumnSums<2>(
        {{dweight, dbias}}, scratch, scratch_floats, rows, channels,
        LayerNormParamTerm<T>{As<T>(dout), As<T>(inp), mean, rstd, channels},
        stream);
  });
}

}  // namespace trainyard::engine::cuda
