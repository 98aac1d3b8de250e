// LayerNorm forward and backward (as llm.c's layernorm_forward/backward).
// Rows are independent: one warp per row computes the mean, then the
// variance around it (two passes, as the CPU backend), with butterfly warp
// sums whose order is fixed. The weight and bias gradients sum over rows:
// a block of 32 channels x 32 row lanes, each lane summing rows y, y + 32,
// ... in ascending order and lane 0 adding the lanes' sums in order, so
// they are deterministic without atomics.
#include <cmath>

#include "engine/cuda/block_reduce.cuh"
#include "engine/cuda/layernorm_kernels.h"

namespace trainyard::engine::cuda {
namespace {

constexpr float kLayerNormEps = 1e-5f;
constexpr int kRowsPerBlock = 8;  // warps of 32 threads
constexpr int kTile = 32;

__global__ void LayerNormForwardKernel(float* out, float* mean, float* rstd,
                                       const float* inp, const float* weight,
                                       const float* bias, int64_t rows,
                                       int64_t channels) {
  const int64_t row =
      static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;  // the whole warp leaves together
  const int lane = threadIdx.x % 32;
  const float* x = inp + row * channels;
  float sum = 0.f;
  for (int64_t c = lane; c < channels; c += 32) sum += x[c];
  const float m = WarpReduce(sum, SumOp()) / static_cast<float>(channels);
  float sq = 0.f;
  for (int64_t c = lane; c < channels; c += 32) {
    const float d = x[c] - m;
    sq += d * d;
  }
  const float var = WarpReduce(sq, SumOp()) / static_cast<float>(channels);
  const float s = 1.f / sqrtf(var + kLayerNormEps);
  float* o = out + row * channels;
  for (int64_t c = lane; c < channels; c += 32) {
    o[c] = (x[c] - m) * s * weight[c] + bias[c];
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

__global__ void LayerNormInputGradKernel(float* dinp, const float* dout,
                                         const float* inp, const float* weight,
                                         const float* mean, const float* rstd,
                                         int64_t rows, int64_t channels) {
  const int64_t row =
      static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32;
  const float* x = inp + row * channels;
  const float* d = dout + row * channels;
  const float m = mean[row], s = rstd[row];
  float dnorm_sum = 0.f, dnorm_norm_sum = 0.f;
  for (int64_t c = lane; c < channels; c += 32) {
    const float dnorm = weight[c] * d[c];
    dnorm_sum += dnorm;
    dnorm_norm_sum += dnorm * ((x[c] - m) * s);
  }
  const float inv_c = 1.f / static_cast<float>(channels);
  const float dnorm_mean = WarpReduce(dnorm_sum, SumOp()) * inv_c;
  const float dnorm_norm_mean = WarpReduce(dnorm_norm_sum, SumOp()) * inv_c;
  float* di = dinp + row * channels;
  for (int64_t c = lane; c < channels; c += 32) {
    const float norm = (x[c] - m) * s;
    di[c] += (weight[c] * d[c] - dnorm_mean - norm * dnorm_norm_mean) * s;
  }
}

__global__ void LayerNormParamGradKernel(float* dweight, float* dbias,
                                         const float* dout, const float* inp,
                                         const float* mean, const float* rstd,
                                         int64_t rows, int64_t channels) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kTile + threadIdx.x;
  float dw = 0.f, db = 0.f;
  if (c < channels) {
    for (int64_t r = threadIdx.y; r < rows; r += kTile) {
      const float d = dout[r * channels + c];
      dw += (inp[r * channels + c] - mean[r]) * rstd[r] * d;
      db += d;
    }
  }
  __shared__ float partial_w[kTile][kTile + 1];
  __shared__ float partial_b[kTile][kTile + 1];
  partial_w[threadIdx.y][threadIdx.x] = dw;
  partial_b[threadIdx.y][threadIdx.x] = db;
  __syncthreads();
  if (threadIdx.y == 0 && c < channels) {
    float total_w = 0.f, total_b = 0.f;
    for (int y = 0; y < kTile; ++y) {
      total_w += partial_w[y][threadIdx.x];
      total_b += partial_b[y][threadIdx.x];
    }
    dweight[c] += total_w;
    dbias[c] += total_b;
  }
}

unsigned RowBlocks(int64_t rows) {
  return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
}

}  // namespace

cudaError_t LaunchLayerNormForward(float* out, float* mean, float* rstd,
                                   const float* inp, const float* weight,
                                   const float* bias, int64_t rows,
                                   int64_t channels, cudaStream_t stream) {
  if (rows <= 0 || channels <= 0) return cudaSuccess;
  LayerNormForwardKernel<<<RowBlocks(rows), kRowsPerBlock * 32, 0, stream>>>(
      out, mean, rstd, inp, weight, bias, rows, channels);
  return cudaGetLastError();
}

cudaError_t LaunchLayerNormBackward(float* dinp, float* dweight, float* dbias,
                                    const float* dout, const float* inp,
                                    const float* weight, const float* mean,
                                    const float* rstd, int64_t rows,
                                    int64_t channels, cudaStream_t stream) {
  if (rows <= 0 || channels <= 0) return cudaSuccess;
  LayerNormInputGradKernel<<<RowBlocks(rows), kRowsPerBlock * 32, 0, stream>>>(
      dinp, dout, inp, weight, mean, rstd, rows, channels);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  const dim3 block(kTile, kTile);
  LayerNormParamGradKernel<<<static_cast<unsigned>((channels + kTile - 1) /
                                                   kTile),
                             block, 0, stream>>>(dweight, dbias, dout, inp,
                                                 mean, rstd, rows, channels);
  return cudaGetLastError();
}

}  // namespace trainyard::engine::cuda
