// Warp-level tensor-core primitives for the attention kernels: the bf16
// mma.sync m16n8k16 product, ldmatrix (plain and transposed) and cp.async
// 16-byte copies into shared memory. On the GPU each is one PTX
// instruction; in the host emulation of CUDA (TRAINYARD_CUDA_EMULATION) the
// same lane-by-lane contract is carried out with warp shuffles and plain
// loads (an exchange buffer between the lanes of a warp), so kernels built
// on these run and are checked on the CPU. This is
// a .h, not a .cuh: the kernel rewriter refuses inline PTX, and the
// preprocessor keeps the PTX from the emulation build.
//
// Fragment layouts (PTX ISA, "mma.m16n8k16" for bf16), for lane l with
// g = l / 4 and t = l % 4; each 32-bit register holds two bf16, the lower
// index in the low half:
//   A (16 x 16, row-major):  a[0] = A[g][2t, 2t+1],   a[1] = A[g+8][2t, 2t+1],
//                            a[2] = A[g][2t+8, +9],   a[3] = A[g+8][2t+8, +9]
//   B (16 x 8, k by n):      b[0] = B[2t, 2t+1][g],   b[1] = B[2t+8, +9][g]
//   C (16 x 8, fp32):        c[0], c[1] = C[g][2t, 2t+1],
//                            c[2], c[3] = C[g+8][2t, 2t+1]
// So the C fragments of two adjacent n-tiles, rounded to bf16 pairs, are
// the A fragment of a 16-wide k-step: a product's result feeds the next
// product from registers (PackBf16).
//
// ldmatrix x4: lanes 8i..8i+7 give the addresses of rows 0..7 of matrix i
// (8 x 8 bf16, each row 16 contiguous, 16-byte aligned bytes in shared
// memory); lane l receives r[i] = matrix i's row l/4, columns 2(l%4) and
// 2(l%4)+1. The transposed form gives rows 2(l%4) and 2(l%4)+1 of column
// l/4 instead. Read from row-major tiles, the plain form yields B
// fragments of a product with the tile's transpose (rows as n) and A
// fragments; the transposed form, B fragments with the tile's rows as k.
//
// The emulated mma sums each element's 16 products in ascending k in fp32
// after the accumulator; the tensor cores' own order and rounding are not
// reproduced (tests allow for fp32 rounding). The emulation also checks
// that every lane of a whole warp runs each mma and ldmatrix (they are
// .aligned instructions), and the 16-byte alignment of ldmatrix rows and
// cp.async addresses, naming the caller's line. Pure device functions;
// warp-wide ones need all 32 lanes converged. Thread-safe.
#ifndef TRAINYARD_ENGINE_CUDA_WARP_MMA_H_
#define TRAINYARD_ENGINE_CUDA_WARP_MMA_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#if defined(TRAINYARD_CUDA_EMULATION)
#include <source_location>
#endif

namespace trainyard::engine::cuda::warp_mma {

// Two floats rounded to bf16 (nearest even) and packed, lo in the low half.
__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  const __nv_bfloat16 l = __float2bfloat16_rn(lo), h = __float2bfloat16_rn(hi);
  uint16_t lb, hb;
  memcpy(&lb, &l, 2);
  memcpy(&hb, &h, 2);
  return static_cast<uint32_t>(lb) | static_cast<uint32_t>(hb) << 16;
}

#if defined(TRAINYARD_CUDA_EMULATION)

// The bf16 in the low (half 0) or high (half 1) 16 bits, widened exactly.
inline float HalfOf(uint32_t word, int half) {
  const uint32_t bits = (half == 0 ? word & 0xffffu : word >> 16) << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

// The warps' operands, posted by each lane for the others to read: the
// emulation runs a block's threads as fibers of one host thread, one block
// at a time, so a thread_local buffer is the block's own. Posting, one
// __syncwarp, reading and another __syncwarp cost two warp collectives
// where a shuffle per operand would cost 32.
struct WarpExchange {
  uint32_t a[32][32][4];
  uint32_t b[32][32][2];
  const __nv_bfloat16* row[32][32];
};

inline WarpExchange& Exchange() {
  thread_local WarpExchange x;
  return x;
}

inline int WarpIndex() {
  return static_cast<int>(
      (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) /
      32);
}

// Each op is noted with its caller's line (a default argument: callers
// write nothing), so lanes of a warp that run different ones fail the
// launch naming it (block_runner.h).
using Site = std::source_location;

inline void Mma16816(float (&c)[4], const uint32_t (&a)[4],
                     const uint32_t (&b)[2],
                     const Site& site = Site::current()) {
  ::trainyard::cuda_emulation::WarpTensorOp("mma.sync", site);
  const int lane = static_cast<int>(threadIdx.x % 32), w = WarpIndex();
  const int g = lane / 4, t = lane % 4;
  WarpExchange& x = Exchange();
  memcpy(x.a[w][lane], a, sizeof a);
  memcpy(x.b[w][lane], b, sizeof b);
  __syncwarp();
  float acc[4] = {c[0], c[1], c[2], c[3]};
  for (int kp = 0; kp < 8; ++kp) {  // k = 2kp, 2kp + 1
    const int hi = kp >= 4 ? 1 : 0;
    // Rows g and g + 8 of A; columns 2t and 2t + 1 of B.
    const uint32_t a_lo = x.a[w][g * 4 + kp % 4][2 * hi];
    const uint32_t a_hi = x.a[w][g * 4 + kp % 4][2 * hi + 1];
    const uint32_t b0 = x.b[w][(2 * t) * 4 + kp % 4][hi];
    const uint32_t b1 = x.b[w][(2 * t + 1) * 4 + kp % 4][hi];
    for (int half = 0; half < 2; ++half) {
      acc[0] += HalfOf(a_lo, half) * HalfOf(b0, half);
      acc[1] += HalfOf(a_lo, half) * HalfOf(b1, half);
      acc[2] += HalfOf(a_hi, half) * HalfOf(b0, half);
      acc[3] += HalfOf(a_hi, half) * HalfOf(b1, half);
    }
  }
  __syncwarp();  // every lane has read the posted operands
  for (int e = 0; e < 4; ++e) c[e] = acc[e];
}

inline uint16_t Bf16BitsAt(const __nv_bfloat16* p) {
  uint16_t v;
  memcpy(&v, p, 2);
  return v;
}

// Posts the lane's row address; returns the exchange's rows of the warp.
inline const __nv_bfloat16* const* PostRows(const __nv_bfloat16* row,
                                            const Site& site) {
  ::trainyard::cuda_emulation::WarpTensorOp("ldmatrix", site);
  ::trainyard::cuda_emulation::CheckVectorAccess("ldmatrix row at", row, 16,
                                                 site);
  const int w = WarpIndex();
  Exchange().row[w][threadIdx.x % 32] = row;
  __syncwarp();
  return Exchange().row[w];
}

inline void LdMatrixX4(uint32_t (&r)[4], const __nv_bfloat16* row,
                       const Site& site = Site::current()) {
  const __nv_bfloat16* const* rows = PostRows(row, site);
  const int lane = static_cast<int>(threadIdx.x % 32);
  for (int i = 0; i < 4; ++i) {
    const __nv_bfloat16* src = rows[8 * i + lane / 4];
    const int c = 2 * (lane % 4);
    r[i] = static_cast<uint32_t>(Bf16BitsAt(src + c)) |
           static_cast<uint32_t>(Bf16BitsAt(src + c + 1)) << 16;
  }
  __syncwarp();
}

inline void LdMatrixX4Trans(uint32_t (&r)[4], const __nv_bfloat16* row,
                            const Site& site = Site::current()) {
  const __nv_bfloat16* const* rows = PostRows(row, site);
  const int lane = static_cast<int>(threadIdx.x % 32);
  for (int i = 0; i < 4; ++i) {
    const int k = 2 * (lane % 4);
    r[i] = static_cast<uint32_t>(Bf16BitsAt(rows[8 * i + k] + lane / 4)) |
           static_cast<uint32_t>(Bf16BitsAt(rows[8 * i + k + 1] + lane / 4))
               << 16;
  }
  __syncwarp();
}

// 16 bytes from global src to shared dst, or 16 zero bytes when !fill.
inline void CpAsync16(void* dst, const void* src, bool fill,
                      const Site& site = Site::current()) {
  ::trainyard::cuda_emulation::CheckVectorAccess("cp.async to", dst, 16, site);
  if (fill) {
    ::trainyard::cuda_emulation::CheckVectorAccess("cp.async from", src, 16,
                                                   site);
    memcpy(dst, src, 16);
  } else {
    memset(dst, 0, 16);
  }
}
inline void CpAsyncCommit() {}
template <int kPending>
inline void CpAsyncWait() {}

#else  // the GPU

// c += a b (bf16 operands, fp32 accumulation).
__device__ __forceinline__ void Mma16816(float (&c)[4], const uint32_t (&a)[4],
                                         const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ uint32_t SharedAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4],
                                           const __nv_bfloat16* row) {
  asm volatile(
      "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
      : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
      : "r"(SharedAddress(row)));
}

__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4],
                                                const __nv_bfloat16* row) {
  asm volatile(
      "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, "
      "[%4];\n"
      : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
      : "r"(SharedAddress(row)));
}

// 16 bytes from global src to shared dst without passing through
// registers (L2 only: .cg), or 16 zero bytes when !fill (src is then not
// read, but must still be a valid address).
__device__ __forceinline__ void CpAsync16(void* dst, const void* src,
                                          bool fill) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(
                   SharedAddress(dst)),
               "l"(src), "r"(fill ? 16 : 0));
}

// Closes the group of copies issued since the last commit.
__device__ __forceinline__ void CpAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::);
}

// Waits until at most kPending of this thread's groups are in flight; a
// __syncthreads after it makes every thread's copies visible to all.
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

#endif

}  // namespace trainyard::engine::cuda::warp_mma

#endif  // TRAINYARD_ENGINE_CUDA_WARP_MMA_H_
