// LayerNorm on the CPU backend (as llm.c's layernorm_forward/backward):
// rows are independent, so the forward and the input gradient run parallel
// over rows; the weight and bias gradients sum over rows, so they run
// parallel over channel ranges, each summing its rows in ascending order.
// See backend.h.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "engine/cpu/cpu_backend.h"

namespace trainyard::engine {
namespace {

constexpr float kLayerNormEps = static_cast<float>(kLayerNormEpsilon);

int64_t RowGrain(int64_t channels) {
  return std::max<int64_t>(1, 8192 / channels);
}

}  // namespace

void CpuBackend::LayerNormForward(float* out, float* mean, float* rstd,
                                  const float* inp, const float* weight,
                                  const float* bias, int64_t rows,
                                  int64_t channels) {
  ForRange(rows, RowGrain(channels), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* x = inp + r * channels;
      float m = 0.f;
      for (int64_t c = 0; c < channels; ++c) m += x[c];
      m /= static_cast<float>(channels);
      float v = 0.f;
      for (int64_t c = 0; c < channels; ++c) {
        const float d = x[c] - m;
        v += d * d;
      }
      v /= static_cast<float>(channels);
      const float s = 1.f / std::sqrt(v + kLayerNormEps);
      float* o = out + r * channels;
      for (int64_t c = 0; c < channels; ++c) {
        o[c] = (x[c] - m) * s * weight[c] + bias[c];
      }
      mean[r] = m;
      rstd[r] = s;
    }
  });
}

void CpuBackend::LayerNormBackward(float* dinp, float* dweight, float* dbias,
                                   float* dinp_sums, const float* dout,
                                   const float* inp, const float* weight,
                                   const float* mean, const float* rstd,
                                   int64_t rows, int64_t channels) {
  const float inv_c = 1.f / static_cast<float>(channels);
  ForRange(rows, RowGrain(channels), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* x = inp + r * channels;
      const float* d = dout + r * channels;
      const float m = mean[r], s = rstd[r];
      // The two reductions of the input gradient.
      float dnorm_mean = 0.f, dnorm_norm_mean = 0.f;
      for (int64_t c = 0; c < channels; ++c) {
        const float dnorm = weight[c] * d[c];
        dnorm_mean += dnorm;
        dnorm_norm_mean += dnorm * ((x[c] - m) * s);
      }
      dnorm_mean *= inv_c;
      dnorm_norm_mean *= inv_c;
      float* di = dinp + r * channels;
      for (int64_t c = 0; c < channels; ++c) {
        const float norm = (x[c] - m) * s;
        di[c] += (weight[c] * d[c] - dnorm_mean - norm * dnorm_norm_mean) * s;
      }
    }
  });
  ForRange(channels, 16, [&](int64_t c0, int64_t c1) {
    for (int64_t r = 0; r < rows; ++r) {
      const float* x = inp + r * channels;
      const float* d = dout + r * channels;
      const float m = mean[r], s = rstd[r];
      for (int64_t c = c0; c < c1; ++c) {
        dweight[c] += (x[c] - m) * s * d[c];
        dbias[c] += d[c];
      }
    }
  });
  if (dinp_sums != nullptr) AddColumnSums(dinp_sums, dinp, rows, channels);
}

}  // namespace trainyard::engine
