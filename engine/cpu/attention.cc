// Causal multi-head self-attention on the CPU backend. Each (sequence, head)
// pair is one task: its scores, softmax and weighted sums are small matrix
// products computed with the single-threaded blocked GEMM (so each output
// element still sums in a fixed order), and tasks write disjoint slices, so
// results do not depend on the thread count. The products are computed over
// the full T x T square; entries above the diagonal are zero probabilities,
// which add exact zeros. See backend.h.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/gemm.h"

namespace trainyard::engine {
namespace {

// Views of one (sequence, head) pair.
struct HeadView {
  int64_t seq, hs, row;  // T, head size, row stride of qkv (3C)
  const float* q;
  const float* k;
  const float* v;
};

HeadView View(const float* qkv, int64_t b, int64_t h, int64_t seq,
              int64_t channels, int64_t heads) {
  const int64_t hs = channels / heads;
  const float* base = qkv + b * seq * 3 * channels + h * hs;
  return {seq, hs, 3 * channels, base, base + channels, base + 2 * channels};
}

// c[m, n] (row stride ldc) += op(a) op(b), single-threaded.
void Product(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
             bool trans_a, const float* b, int64_t ldb, bool trans_b, float* c,
             int64_t ldc) {
  GemmArgs g;
  g.trans_a = trans_a;
  g.trans_b = trans_b;
  g.m = m;
  g.n = n;
  g.k = k;
  g.a = a;
  g.lda = lda;
  g.b = b;
  g.ldb = ldb;
  g.c = c;
  g.ldc = ldc;
  Gemm(g, nullptr);
}

void ZeroRows(float* p, int64_t rows, int64_t cols, int64_t stride) {
  for (int64_t r = 0; r < rows; ++r)
    std::fill(p + r * stride, p + r * stride + cols, 0.f);
}

// Scales row t of the scores, softmaxes its first t + 1 entries and zeroes
// the rest (the future).
void CausalSoftmax(float* att, int64_t seq, float scale) {
  for (int64_t t = 0; t < seq; ++t) {
    float* row = att + t * seq;
    float max = row[0] * scale;
    for (int64_t j = 0; j <= t; ++j) max = std::max(max, row[j] * scale);
    float sum = 0.f;
    for (int64_t j = 0; j <= t; ++j) {
      row[j] = std::exp(row[j] * scale - max);
      sum += row[j];
    }
    const float inv = 1.f / sum;
    for (int64_t j = 0; j <= t; ++j) row[j] *= inv;
    for (int64_t j = t + 1; j < seq; ++j) row[j] = 0.f;
  }
}

}  // namespace

void CpuBackend::AttentionForward(float* out, float* att, const float* qkv,
                                  int64_t batch, int64_t seq, int64_t channels,
                                  int64_t heads) {
  const int64_t hs = channels / heads;
  const float scale = 1.f / std::sqrt(static_cast<float>(hs));
  ForRange(batch * heads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / heads, h = task % heads;
      const HeadView v = View(qkv, b, h, seq, channels, heads);
      float* a = att + task * seq * seq;
      std::fill(a, a + seq * seq, 0.f);
      Product(seq, seq, hs, v.q, v.row, false, v.k, v.row, true, a, seq);
      CausalSoftmax(a, seq, scale);
      float* o = out + b * seq * channels + h * hs;
      ZeroRows(o, seq, hs, channels);
      Product(seq, hs, seq, a, seq, false, v.v, v.row, false, o, channels);
    }
  });
}

void CpuBackend::AttentionBackward(float* dqkv, float* scratch,
                                   const float* dout, const float* /*out*/,
                                   const float* qkv, const float* att,
                                   int64_t batch, int64_t seq, int64_t channels,
                                   int64_t heads) {
  const int64_t hs = channels / heads;
  const float scale = 1.f / std::sqrt(static_cast<float>(hs));
  ForRange(batch * heads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / heads, h = task % heads;
      const HeadView v = View(qkv, b, h, seq, channels, heads);
      const float* a = att + task * seq * seq;
      const float* d_o = dout + b * seq * channels + h * hs;
      float* dq = dqkv + b * seq * 3 * channels + h * hs;
      float* dk = dq + channels;
      float* dv = dq + 2 * channels;
      for (float* p : {dq, dk, dv}) ZeroRows(p, seq, hs, 3 * channels);
      // datt = dout . v^T, then through the softmax into dscores, in place.
      float* ds = scratch + task * seq * seq;
      std::fill(ds, ds + seq * seq, 0.f);
      Product(seq, seq, hs, d_o, channels, false, v.v, v.row, true, ds, seq);
      Product(seq, hs, seq, a, seq, true, d_o, channels, false, dv, v.row);
      for (int64_t t = 0; t < seq; ++t) {
        const float* p = a + t * seq;
        float* row = ds + t * seq;
        float dot = 0.f;
        for (int64_t j = 0; j <= t; ++j) dot += p[j] * row[j];
        for (int64_t j = 0; j <= t; ++j) row[j] = p[j] * (row[j] - dot) * scale;
        for (int64_t j = t + 1; j < seq; ++j) row[j] = 0.f;
      }
      Product(seq, hs, seq, ds, seq, false, v.k, v.row, false, dq, v.row);
      Product(seq, hs, seq, ds, seq, true, v.q, v.row, false, dk, v.row);
    }
  });
}

}  // namespace trainyard::engine
