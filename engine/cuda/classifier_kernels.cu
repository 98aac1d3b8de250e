// The fused classifier: softmax cross-entropy over rows of logits without
// ever storing the softmax. One block per row.
//
// Both kernels first take the row's softmax statistics in one read: each
// thread walks a fixed share of the row keeping an online (max, first index
// of the max, sum of exp(x - max)) triple, and the triples are merged
// across the warp (butterfly) and then the warps (in warp order). The merge
// is symmetric, so every lane of the butterfly holds bitwise the same
// triple and the result depends on the launch shape (and the row's
// alignment, below) alone: deterministic.
//   forward:  loss = log(sum) - (x[target] - max)   (log-sum-exp form: exact
//             even when p[target] underflows; NaN logits give a NaN loss),
//             hit = argmax == target (the first index on ties, as the CPU)
//             and, when asked, lse = max + log(sum) for the backward
//   backward: d[c] = (exp(x[c] - max) / sum - [c == target]) * scale, written
//             over the logits when the caller passes the same buffer (each
//             thread reads an entry before it writes that same entry); with
//             the forward's lse, d[c] = (exp(x[c] - lse) - [c == target]) *
//             scale without taking the statistics again
// So the logits are read once in the forward and once in the backward
// given the lse (twice without), and nothing of [rows, classes] exists
// beside them. The forward-backward does both in one block a row: the
// statistics' read, then the gradient written in place with the lse it has
// just taken, from the row as that read kept it in shared memory where the
// row fits (kMaxStageBytes), else read again, from L2 while it is there.
//
// Access: the row is read (and the gradient written) in 16-byte packs
// (vec16.cuh: 8 bf16 or 4 fp32), thread t taking packs t, t + 512, ...
// (the statistics' pass loads four of them before it uses the first); a
// row that does not start 16-byte aligned (classes not a multiple of the
// pack) has its unaligned head and tail, fewer than a pack each, taken
// element by element by threads 0, 1, ... (ForOwned). A thread thus visits
// its head element, then its packs in order, then its tail element: its
// indices ascend, which its online first-index argmax needs; across
// threads the merge takes the smaller index on ties. A thread folds a pack
// in with one rescale to the pack's max (first index of it) and then the
// pack's exps in order. The backward's gradient pass splits the logits and
// dlogits rows together: in place they are one array; apart and aligned
// unlike each other, the pass goes element by element. The grouping of the
// sums depends on the launch shape and the row's alignment mod 16 bytes,
// which the backend's arena (256-byte aligned blocks, fixed allocation
// order) fixes with the shapes.
#include <climits>
#include <cmath>
#include <type_traits>

#include "engine/cuda/act_type.cuh"
#include "engine/cuda/classifier_kernels.h"
#include "engine/cuda/exp2_ftz.h"
#include "engine/cuda/launch_with_smem.cuh"
#include "engine/cuda/vec16.cuh"

namespace trainyard::engine::cuda {
namespace {

constexpr int kRowThreads = 512;

// Packs a thread of the statistics' pass loads before it uses the first of
// them (ForOwnedLoaded).
constexpr int kLoadsInFlight = 4;

// The most shared memory a staged row takes: two such blocks an SM (228 KB
// of shared memory, 1 KB of it reserved a block), 16 warps, so that one
// block's loads run while the other sums or writes. Bf16 rows of up to
// 57,344 classes; longer ones, and fp32 rows of more than 28,672, are read
// twice.
constexpr size_t kMaxStageBytes = 112 * 1024;

// e^(x - shift) for every entry of a row, given shift2 = shift log2(e).
// For bf16 logits, one fused multiply-add and one ex2.approx.ftz
// (exp2_ftz.h): a relative error of about (|x - shift| + |shift|) 2^-24
// from the exponent's rounding plus 2^-22 from the ex2, under 1e-5 even
// at logits of 100, where each input carries 2^-9. fp32 logits keep expf,
// the CPU's function to an ulp. expf is about 8 instructions, and in the
// forward, which reads 2 bytes a logit, the exponentials were most of the
// kernel's issue slots.
template <typename T>
__device__ __forceinline__ float RowExp(float x, float shift, float shift2) {
  if constexpr (std::is_same_v<T, bf16>) {
    return Exp2Ftz(fmaf(x, kLog2e, -shift2));
  } else {
    return expf(x - shift);
  }
}

struct SoftmaxStats {
  float max = -INFINITY;
  float sum = 0.f;       // of exp(x - max)
  int argmax = INT_MAX;  // first index holding max; INT_MAX: none seen
};

// Symmetric in a and b (fmaxf, + and the smaller index on ties commute),
// which the butterfly needs. With no max seen on either side each sum is 0,
// or NaN after NaN entries, which the sum of the two keeps.
__device__ __forceinline__ SoftmaxStats Merge(SoftmaxStats a, SoftmaxStats b) {
  const float m = fmaxf(a.max, b.max);
  const int arg = a.max > b.max   ? a.argmax
                  : b.max > a.max ? b.argmax
                                  : (a.argmax < b.argmax ? a.argmax : b.argmax);
  if (m == -INFINITY) return {m, a.sum + b.sum, arg};
  return {m, a.sum * expf(a.max - m) + b.sum * expf(b.max - m), arg};
}

// Folds in the run v[0, N) of entries c0, c0 + 1, ..., which come after
// every entry folded in so far: first its max (the first index of it, as
// c0 ascends; never a NaN), then the exps. Entries of -inf add nothing; a
// NaN makes the sum (and the loss) NaN.
template <typename T, int N>
__device__ __forceinline__ void Accumulate(SoftmaxStats& s, const float (&v)[N],
                                           int c0) {
  float m = -INFINITY;
  int arg = 0;
#pragma unroll
  for (int k = 0; k < N; ++k) {
    if (v[k] > m) {
      m = v[k];
      arg = k;
    }
  }
  if (m > s.max) {
    s.sum *= expf(s.max - m);  // 0 * 0 before the first finite entry
    s.max = m;
    s.argmax = c0 + arg;
  }
  const float max2 = s.max * kLog2e;
#pragma unroll
  for (int k = 0; k < N; ++k) {
    if (v[k] != -INFINITY) s.sum += RowExp<T>(v[k], s.max, max2);
  }
}

// The row's statistics, returned to every thread. REQUIRES: every thread of
// the block calls it; blockDim.x a multiple of 32.
// With `stage` (shared memory, a Words16 a pack of the row's split), each
// pack is also kept there as read, pack k at stage[k], for the gradient
// pass of the same thread.
template <typename T>
__device__ SoftmaxStats RowStats(const T* x, int64_t classes,
                                 Words16* stage = nullptr) {
  SoftmaxStats s;
  ForOwnedLoaded<kLoadsInFlight>(
      SplitAligned(classes, x), x, threadIdx.x, blockDim.x,
      [&](int64_t c) {
        const float v[1] = {Ld(x + c)};
        Accumulate<T>(s, v, static_cast<int>(c));
      },
      [&](int64_t c, int64_t k, const Words16& packed) {
        if (stage != nullptr) Store16(stage + k, packed, AccessSite::current());
        float v[kPack<T>];
        Unpack<T>(packed, v);
        Accumulate<T>(s, v, static_cast<int>(c));
      });
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const SoftmaxStats other{__shfl_xor_sync(0xffffffffu, s.max, offset),
                             __shfl_xor_sync(0xffffffffu, s.sum, offset),
                             __shfl_xor_sync(0xffffffffu, s.argmax, offset)};
    s = Merge(s, other);
  }
  __shared__ SoftmaxStats warp_stats[32];
  if ((threadIdx.x & 31) == 0) warp_stats[threadIdx.x >> 5] = s;
  __syncthreads();
  SoftmaxStats row = warp_stats[0];
  for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) {
    row = Merge(row, warp_stats[w]);
  }
  return row;
}

// d = (exp(x - shift) * inv - onehot(t)) * scale over one row. Each
// thread reads an entry before it writes that same entry, so d may be x.
// With `stage` (in place only: d == x), the packs are read from where
// RowStats kept them, by the thread that kept them.
template <typename T>
__device__ void RowGradient(T* d, const T* x, int64_t t, float shift, float inv,
                            float scale, int64_t classes,
                            const Words16* stage = nullptr) {
  const float shift2 = shift * kLog2e;
  const auto grad = [&](float v, int64_t c) {
    return (RowExp<T>(v, shift, shift2) * inv - (c == t ? 1.f : 0.f)) * scale;
  };
  // Split for x and d together: in place they are one array; apart, packs
  // only where both are aligned at the same entries.
  const PackSplit<kPack<T>> split = SplitAligned(classes, x, d);
  ForOwned(
      split, threadIdx.x, blockDim.x,
      [&](int64_t c) { St(d + c, grad(Ld(x + c), c)); },
      [&](int64_t c) {
        float v[kPack<T>];
        if (stage != nullptr) {
          Unpack<T>(stage[(c - split.head) / kPack<T>], v);
        } else {
          LdPack(x + c, v);
        }
#pragma unroll
        for (int k = 0; k < kPack<T>; ++k) v[k] = grad(v[k], c + k);
        StPack(d + c, v);
      });
}

// The forward; with `dlogits` (the logits themselves, or null) the
// backward too, in place, from the lse it has just taken: the same bits as the
// backward kernel given that lse (every thread computes it as thread 0
// writes it). The target's logit is read before the row statistics' barrier,
// after which the gradient overwrites it.
//
// kStaged (with dlogits == logits): the row's packs are kept in shared
// memory (PackCount<T>(classes) Words16 of dynamic shared memory) as the
// statistics' pass reads them, and the gradient pass takes them from there
// instead of reading the row again: from L2 if it is still there, which
// for rows of 100 KB (GPT-2's 50,304 classes in bf16), four blocks an SM
// on 132 SMs, is more than L2 holds. The same bits either way.
template <typename T, bool kStaged>
__global__ void __launch_bounds__(kRowThreads)
    SoftmaxCrossEntropyForwardKernel(float* losses, int32_t* hits, float* lse,
                                     const T* logits, T* dlogits,
                                     const int32_t* targets, float scale,
                                     int64_t classes) {
  extern __shared__ __align__(16) unsigned char row_stage[];
  Words16* const stage =
      kStaged ? reinterpret_cast<Words16*>(row_stage) : nullptr;
  const int64_t row = blockIdx.x;
  const T* x = logits + row * classes;
  const int32_t t = targets[row];
  const bool valid = t >= 0 && t < classes;
  const float target_logit = threadIdx.x == 0 && valid ? Ld(x + t) : 0.f;
  const SoftmaxStats s = RowStats(x, classes, stage);
  if (threadIdx.x == 0) {
    losses[row] = valid ? logf(s.sum) - (target_logit - s.max) : nanf("");
    // A row of -inf (or NaN) has no max seen; the CPU calls index 0 its max.
    const int arg = s.argmax == INT_MAX ? 0 : s.argmax;
    if (hits != nullptr) hits[row] = arg == t ? 1 : 0;
    if (lse != nullptr) lse[row] = s.max + logf(s.sum);
  }
  if (dlogits != nullptr) {
    RowGradient(dlogits + row * classes, x, t, s.max + logf(s.sum), 1.f, scale,
                classes, stage);
  }
}

// No __restrict__: dlogits may be the logits themselves.
template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    SoftmaxCrossEntropyBackwardKernel(T* dlogits, const T* logits,
                                      const float* lse, const int32_t* targets,
                                      float scale, int64_t classes) {
  const int64_t row = blockIdx.x;
  const T* x = logits + row * classes;
  // p = exp(x - shift) * inv: shift = lse and inv = 1 given the forward's
  // lse (the same for the whole block), else the statistics taken now.
  float shift = 0.f, inv = 1.f;
  if (lse != nullptr) {
    shift = lse[row];
  } else {
    const SoftmaxStats s = RowStats(x, classes);
    shift = s.max;
    inv = 1.f / s.sum;
  }
  RowGradient(dlogits + row * classes, x, targets[row], shift, inv, scale,
              classes);
}

}  // namespace

cudaError_t LaunchSoftmaxCrossEntropyForward(float* losses, int32_t* hits,
                                             float* lse, const void* logits,
                                             const int32_t* targets,
                                             int64_t rows, int64_t classes,
                                             bool bf16, cudaStream_t stream) {
  if (rows <= 0 || classes <= 0) return cudaSuccess;
  // One block per row; class indices are ints.
  if (rows > 0x7fffffff || classes >= INT_MAX) return cudaErrorInvalidValue;
  return DispatchAct(bf16, [&](auto t) {
    using T = decltype(t);
    SoftmaxCrossEntropyForwardKernel<T, false>
        <<<static_cast<unsigned>(rows), kRowThreads, 0, stream>>>(
            losses, hits, lse, As<T>(logits), static_cast<T*>(nullptr), targets,
            0.f, classes);
    return cudaGetLastError();
  });
}

cudaError_t LaunchSoftmaxCrossEntropyForwardBackward(
    float* losses, int32_t* hits, float* lse, void* logits,
    const int32_t* targets, float scale, int64_t rows, int64_t classes,
    bool bf16, cudaStream_t stream) {
  if (rows <= 0 || classes <= 0) return cudaSuccess;
  if (rows > 0x7fffffff || classes >= INT_MAX) return cudaErrorInvalidValue;
  return DispatchAct(bf16, [&](auto t) {
    using T = decltype(t);
    const size_t stage_bytes =
        static_cast<size_t>(PackCount<T>(classes)) * sizeof(Words16);
    if (stage_bytes <= kMaxStageBytes) {
      return LaunchWithSmem(SoftmaxCrossEntropyForwardKernel<T, true>,
                            stage_bytes, dim3(static_cast<unsigned>(rows)),
                            kRowThreads, stream, losses, hits, lse,
                            static_cast<const T*>(As<T>(logits)), As<T>(logits),
                            targets, scale, classes);
    }
    SoftmaxCrossEntropyForwardKernel<T, false>
        <<<static_cast<unsigned>(rows), kRowThreads, 0, stream>>>(
            losses, hits, lse, As<T>(logits), As<T>(logits), targets, scale,
            classes);
    return cudaGetLastError();
  });
}

cudaError_t LaunchSoftmaxCrossEntropyBackward(void* dlogits, const void* logits,
                                              const float* lse,
                                              const int32_t* targets,
                                              float scale, int64_t rows,
                                              int64_t classes, bool bf16,
                                              cudaStream_t stream) {
  if (rows <= 0 || classes <= 0) return cudaSuccess;
  if (rows > 0x7fffffff) return cudaErrorInvalidValue;
  return DispatchAct(bf16, [&](auto t) {
    using T = decltype(t);
    SoftmaxCrossEntropyBackwardKernel<<<static_cast<unsigned>(rows),
                                        kRowThreads, 0, stream>>>(
        As<T>(dlogits), As<T>(logits), lse, targets, scale, classes);
    return cudaGetLastError();
  });
}

}  // namespace trainyard::engine::cuda
