// Token + position embeddings on the CPU backend. The forward is a gather
// parallel over token positions; the backward scatters into the tables,
// parallel over channel ranges so every table entry sums its positions in
// ascending (b, t) order whatever the thread count. See backend.h.
#include <algorithm>
#include <cstdint>

#include "engine/cpu/cpu_backend.h"

namespace trainyard::engine {

void CpuBackend::EmbeddingForward(float* out, const int32_t* tokens,
                                  const float* wte, const float* wpe,
                                  int64_t batch, int64_t seq,
                                  int64_t channels) {
  const int64_t rows = batch * seq;
  const int64_t grain = std::max<int64_t>(1, 8192 / channels);
  ForRange(rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* te = wte + static_cast<int64_t>(tokens[r]) * channels;
      const float* pe = wpe + (r % seq) * channels;
      float* o = out + r * channels;
      for (int64_t c = 0; c < channels; ++c) o[c] = te[c] + pe[c];
    }
  });
}

void CpuBackend::EmbeddingBackward(float* dwte, float* dwpe, const float* dout,
                                   const int32_t* tokens, int64_t batch,
                                   int64_t seq, int64_t channels) {
  const int64_t rows = batch * seq;
  ForRange(channels, 16, [&](int64_t c0, int64_t c1) {
    for (int64_t r = 0; r < rows; ++r) {
      const float* d = dout + r * channels;
      float* te = dwte + static_cast<int64_t>(tokens[r]) * channels;
      float* pe = dwpe + (r % seq) * channels;
      for (int64_t c = c0; c < c1; ++c) {
        te[c] += d[c];
        pe[c] += d[c];
      }
    }
  });
}

}  // namespace trainyard::engine
