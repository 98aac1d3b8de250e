// Blocked GEMM. See gemm.h. Loop structure after BLIS/Goto: for each K block,
// pack op(B) into NR-wide panels (shared), then each task packs its MC rows
// of op(A) into MR-tall panels and sweeps the micro-kernel over its tiles.
#include "engine/cpu/gemm.h"

#include <algorithm>
#include <functional>
#include <vector>

namespace trainyard::engine {
namespace {

constexpr int kMR = 6;        // micro-tile rows
constexpr int kNR = 16;       // micro-tile columns: 6 x 2 AVX accumulators
constexpr int64_t kKC = 256;  // K block: a B panel of kKC x kNR stays in L1
constexpr int64_t kMC = 72;   // rows per task, a multiple of kMR

inline float OpA(const GemmArgs& g, int64_t i, int64_t k) {
  return g.trans_a ? g.a[k * g.lda + i] : g.a[i * g.lda + k];
}

inline float OpB(const GemmArgs& g, int64_t k, int64_t j) {
  return g.trans_b ? g.b[j * g.ldb + k] : g.b[k * g.ldb + j];
}

// Packs op(B)[k0:k0+kc, all n] as panels: panel p holds columns
// [p*kNR, p*kNR+kNR) as kc rows of kNR floats, zero-padded past n.
void PackB(const GemmArgs& g, int64_t k0, int64_t kc, int64_t panel,
           float* out) {
  const int64_t j0 = panel * kNR;
  const int64_t nr = std::min<int64_t>(kNR, g.n - j0);
  for (int64_t k = 0; k < kc; ++k) {
    float* row = out + k * kNR;
    if (!g.trans_b && nr == kNR) {
      const float* src = g.b + (k0 + k) * g.ldb + j0;
      for (int j = 0; j < kNR; ++j) row[j] = src[j];
      continue;
    }
    for (int64_t j = 0; j < kNR; ++j)
      row[j] = j < nr ? OpB(g, k0 + k, j0 + j) : 0.f;
  }
}

// Packs op(A)[i0:i0+mc, k0:k0+kc] as MR-row panels: kc columns of kMR floats,
// zero-padded past m.
void PackA(const GemmArgs& g, int64_t i0, int64_t mc, int64_t k0, int64_t kc,
           float* out) {
  for (int64_t r = 0; r < mc; r += kMR) {
    float* panel = out + (r / kMR) * kc * kMR;
    for (int64_t k = 0; k < kc; ++k) {
      for (int i = 0; i < kMR; ++i) {
        const int64_t row = i0 + r + i;
        panel[k * kMR + i] = row < g.m ? OpA(g, row, k0 + k) : 0.f;
      }
    }
  }
}

// Eight floats in one vector (GCC vector extension): one AVX register, or
// two SSE ones when built without AVX. Elementwise a * b + c stays a
// rounded multiply then a rounded add (-ffp-contract=off), exactly as the
// scalar reference does it.
typedef float V8 __attribute__((vector_size(32)));
typedef float V8Unaligned
    __attribute__((vector_size(32), aligned(4), may_alias));

inline V8 Load(const float* p) {
  return *reinterpret_cast<const V8Unaligned*>(p);
}
inline void Store(float* p, V8 v) { *reinterpret_cast<V8Unaligned*>(p) = v; }

// acc = C tile; acc += sum_k a[:, k] b[k, :] in ascending k; C tile = acc.
// `c` is a full kMR x kNR tile with row stride ldc.
inline void FullTile(int64_t kc, const float* __restrict ap,
                     const float* __restrict bp, float* c, int64_t ldc) {
  V8 acc[kMR][kNR / 8];
#pragma GCC unroll 8
  for (int i = 0; i < kMR; ++i) {
#pragma GCC unroll 2
    for (int j = 0; j < kNR / 8; ++j) {
      acc[i][j] = Load(c + i * ldc + 8 * j);
    }
  }
  for (int64_t k = 0; k < kc; ++k) {
    V8 b[kNR / 8];
#pragma GCC unroll 2
    for (int j = 0; j < kNR / 8; ++j) {
      b[j] = Load(bp + k * kNR + 8 * j);
    }
#pragma GCC unroll 8
    for (int i = 0; i < kMR; ++i) {
      const float a = ap[k * kMR + i];
      const V8 av = {a, a, a, a, a, a, a, a};
#pragma GCC unroll 2
      for (int j = 0; j < kNR / 8; ++j) acc[i][j] += av * b[j];
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < kMR; ++i) {
#pragma GCC unroll 2
    for (int j = 0; j < kNR / 8; ++j) {
      Store(c + i * ldc + 8 * j, acc[i][j]);
    }
  }
}

// Any tile: edge tiles (mr < kMR or nr < kNR) go through a full local tile,
// so every element sees the same operations in the same order.
void MicroKernel(int64_t kc, const float* __restrict ap,
                 const float* __restrict bp, float* c, int64_t ldc, int mr,
                 int nr) {
  if (mr == kMR && nr == kNR) {
    FullTile(kc, ap, bp, c, ldc);
    return;
  }
  float tile[kMR * kNR] = {};
  for (int i = 0; i < mr; ++i) {
    for (int j = 0; j < nr; ++j) tile[i * kNR + j] = c[i * ldc + j];
  }
  FullTile(kc, ap, bp, tile, kNR);
  for (int i = 0; i < mr; ++i) {
    for (int j = 0; j < nr; ++j) c[i * ldc + j] = tile[i * kNR + j];
  }
}

struct Tiling {
  int64_t row_block;   // rows per task, a multiple of kMR
  int64_t col_panels;  // B panels per task
  int64_t row_tasks;
  int64_t col_tasks;
};

// Enough tasks to keep every thread busy; the tiling never changes results.
Tiling ChooseTiling(int64_t m, int64_t n, int threads) {
  Tiling t;
  const int64_t panels = (n + kNR - 1) / kNR;
  t.row_block = std::min<int64_t>(kMC, ((m + kMR - 1) / kMR) * kMR);
  t.row_tasks = (m + t.row_block - 1) / t.row_block;
  const int64_t want_col_tasks =
      std::max<int64_t>(1, (2 * threads + t.row_tasks - 1) / t.row_tasks);
  t.col_panels =
      std::max<int64_t>(1, (panels + want_col_tasks - 1) / want_col_tasks);
  t.col_tasks = (panels + t.col_panels - 1) / t.col_panels;
  return t;
}

}  // namespace

void Gemm(const GemmArgs& g, ThreadPool* pool) {
  if (g.m <= 0 || g.n <= 0 || g.k <= 0) return;
  const int threads = pool != nullptr ? pool->threads() : 1;
  const Tiling tiling = ChooseTiling(g.m, g.n, threads);
  const int64_t panels = (g.n + kNR - 1) / kNR;
  std::vector<float> packed_b(static_cast<size_t>(panels * kKC * kNR));
  auto parallel = [&](int64_t tasks, const std::function<void(int64_t)>& fn) {
    if (pool != nullptr) {
      pool->ParallelFor(tasks, fn);
    } else {
      for (int64_t t = 0; t < tasks; ++t) fn(t);
    }
  };
  for (int64_t k0 = 0; k0 < g.k; k0 += kKC) {
    const int64_t kc = std::min(kKC, g.k - k0);
    parallel(panels, [&](int64_t p) {
      PackB(g, k0, kc, p, packed_b.data() + p * kc * kNR);
    });
    parallel(tiling.row_tasks * tiling.col_tasks, [&](int64_t task) {
      thread_local std::vector<float> packed_a;
      const int64_t i0 = (task / tiling.col_tasks) * tiling.row_block;
      const int64_t mc = std::min(tiling.row_block, g.m - i0);
      const int64_t mc_padded = ((mc + kMR - 1) / kMR) * kMR;
      packed_a.resize(static_cast<size_t>(mc_padded * kc));
      PackA(g, i0, mc, k0, kc, packed_a.data());
      const int64_t p0 = (task % tiling.col_tasks) * tiling.col_panels;
      const int64_t p1 = std::min(panels, p0 + tiling.col_panels);
      for (int64_t p = p0; p < p1; ++p) {
        const int64_t j0 = p * kNR;
        const int nr = static_cast<int>(std::min<int64_t>(kNR, g.n - j0));
        const float* bp = packed_b.data() + p * kc * kNR;
        for (int64_t r = 0; r < mc; r += kMR) {
          const int mr = static_cast<int>(std::min<int64_t>(kMR, mc - r));
          MicroKernel(kc, packed_a.data() + (r / kMR) * kc * kMR, bp,
                      g.c + (i0 + r) * g.ldc + j0, g.ldc, mr, nr);
        }
      }
    });
  }
}

void GemmReference(const GemmArgs& g) {
  for (int64_t i = 0; i < g.m; ++i) {
    for (int64_t j = 0; j < g.n; ++j) {
      float acc = g.c[i * g.ldc + j];
      for (int64_t k = 0; k < g.k; ++k) acc += OpA(g, i, k) * OpB(g, k, j);
      g.c[i * g.ldc + j] = acc;
    }
  }
}

}  // namespace trainyard::engine
