// GELU (tanh approximation, as GPT-2) on the CPU backend: elementwise,
// parallel over fixed chunks. See backend.h.
#include <cmath>
#include <cstdint>

#include "engine/cpu/cpu_backend.h"

namespace trainyard::engine {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;

// tanh through one expf: glibc's tanhf is several times slower, and GELU
// runs on the widest activations of the model. Saturates to +-1 correctly
// (exp overflowing to inf gives 1, underflowing to 0 gives -1).
inline float Tanh(float x) { return 1.f - 2.f / (1.f + std::exp(2.f * x)); }

}  // namespace

void CpuBackend::GeluForward(float* out, const float* x, int64_t n) {
  ForChunks(n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float v = x[i];
      const float inner = kSqrt2OverPi * (v + kCubic * v * v * v);
      out[i] = 0.5f * v * (1.f + Tanh(inner));
    }
  });
}

void CpuBackend::GeluBackward(float* dx, const float* x, const float* dout,
                              int64_t n) {
  ForChunks(n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float v = x[i];
      const float inner = kSqrt2OverPi * (v + kCubic * v * v * v);
      const float t = Tanh(inner);
      // sech^2 = 1 - tanh^2, which unlike 1 / cosh^2 cannot overflow.
      const float sech2 = 1.f - t * t;
      const float local = 0.5f * (1.f + t) + 0.5f * v * sech2 * kSqrt2OverPi *
                                                 (1.f + 3.f * kCubic * v * v);
      dx[i] = local * dout[i];
    }
  });
}

}  // namespace trainyard::engine
