// Warpgroup-level tensor-core products for the attention kernels: Hopper's
// wgmma.mma_async (sm_90a), where the four warps of a warpgroup (128
// threads, warps 4i..4i+3 of a block) multiply together a 64 x N x 16
// product, A from their registers and B from shared memory, into fp32
// accumulators in their registers, asynchronously: issued, committed as a
// group, then waited for. On the GPU each is one PTX instruction; in the
// host emulation of CUDA (TRAINYARD_CUDA_EMULATION) the same contract is
// carried out with a block barrier and plain loads. A .h, not a .cuh: the
// kernel rewriter refuses inline PTX, and the preprocessor keeps the PTX
// from the emulation build.
//
// A may also come from shared memory (MmaAsyncShared, N = 64), by a
// descriptor of the K-major layout below with A's rows in place of N.
//
// Register fragments (PTX ISA, "wgmma .m64nNk16"): warp w of the warpgroup
// holds rows 16w..16w+15 of A and of the accumulator D, laid out within
// the warp as mma.sync m16n8k16's A and C fragments (warp_mma.h): A's four
// registers are a 16 x 16 A fragment, and D holds N/8 C fragments, d[j]
// for columns 8j..8j+7. So the kernels' per-warp code (softmax, masks,
// C-to-A conversion) reads these as it reads mma.sync results.
//
// B in shared memory is addressed by a descriptor (Descriptor) of the
// canonical layout without swizzling: "core matrices" of 8 rows of 16
// bytes (8 bf16), each stored as 128 contiguous bytes. Of B's element
// (k, n), in elements from the descriptor's start, with LBO and SBO the
// descriptor's leading and stride byte offsets over 2:
//   K-major (kTransposeB = 0):  (n % 8) * 8 + (n / 8) * SBO + k % 8 + (k / 8) *
//   LBO MN-major (kTransposeB = 1): n % 8 + (n / 8) * SBO + (k % 8) * 8 + (k /
//   8) * LBO
// so LBO steps over core matrices along K and SBO along N (PTX ISA,
// "Shared Memory Matrix Layout", canonical layouts ((8,m),(T,2k)) and
// ((T,1,m),(8,k)) without swizzle).
//
// Or in a swizzled layout (Swizzle::k128, k64: descriptor bits 62-63 = 1,
// 2), rows of R = 128 or 64 bytes: of B's element (k, n), in bytes from
// the start, before the swizzle,
//   K-major:   (n % 8) R + (n / 8) SBO + 2 k            (k < 16: one
//              instruction's K; LBO unused)
//   MN-major:  (k % 8) R + (k / 8) SBO + 2 (n % (R / 2)) + (n / (R / 2)) LBO
// (canonical layouts ((8,m),(T,2k)) : ((8T or 4T, SBO), (1, T)) and
// ((T,8 or 4,m),(8,k)) : ((1, T, LBO), (8T or 4T, SBO)), T = 8 elements),
// and then the 16-byte unit of the absolute shared address (bits 4-6) is
// XORed with its bits 7-9 (k128) or the unit's bits 4-5 with bits 7-8
// (k64). Rows written as Tile<kD, rows, true> in attention_tc_tiles.cuh
// (unit u of row r at u ^ (r % 8) with 128-byte rows, u ^ (r / 2 % 4)
// with 64-byte rows) are that layout where the tile starts 1024-byte
// aligned: the layout the 128-byte and 64-byte swizzles of CUTLASS and
// FlashAttention 3 give, which tile copies fill in whole 128-byte lines.
//
// Ordering, as the PTX ISA requires: Fence() before the first product of a
// batch whose accumulators or A registers other instructions wrote;
// FenceSharedForAsync() after shared-memory writes (stores, completed
// cp.async copies) that a product will read, before the barrier that
// publishes them; Commit() after a batch; Wait<N>() before touching its
// accumulators or A registers again (at most N newer groups left in
// flight), then FenceOperand(d) on the accumulators read, so the compiler
// does not read them ahead of the wait, and on A fragments in registers
// that other code ran while their products were in flight (so it did not
// reuse their registers).
//
// The emulation: blocks of whole warpgroups, each warpgroup's products
// its own (a warpgroup barrier where the hardware converges them, so the
// others go on); B must lie in the block's dynamic
// shared memory; it sums each accumulator's 16 products in ascending k in
// fp32 after its old value, as the emulated mma.sync does, so kernels give
// the same bits with either; the hardware's own order is not reproduced.
// It also holds each product's result back until the Wait that covers it
// and fills the accumulators with NaN meanwhile, so a kernel that reads or
// writes them too early gets a wrong result rather than a lucky one; and
// the Wait fails the kernel if the shared memory a product read, or the
// A registers it took, changed since its issue (the hardware may read
// them until then).
//
// kBuilt says whether this build has the products: on the GPU they need
// device code for sm_90a (YARD_CUDA_ARCHITECTURES 90a, which defines
// TRAINYARD_SM90A); built for another architecture they trap, and
// launchers refuse the kernels using them. Pure device functions;
// warpgroup-wide ones need all 128 threads converged. Thread-safe.
#ifndef TRAINYARD_ENGINE_CUDA_WARPGROUP_MMA_H_
#define TRAINYARD_ENGINE_CUDA_WARPGROUP_MMA_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#if defined(TRAINYARD_CUDA_EMULATION)
#include <cmath>
#include <source_location>
#include <string>
#include <utility>
#include <vector>

#include "engine/cuda/warp_mma.h"
#endif

namespace trainyard::engine::cuda::warpgroup_mma {

#if defined(TRAINYARD_CUDA_EMULATION) || defined(TRAINYARD_SM90A)
inline constexpr bool kBuilt = true;
#else
inline constexpr bool kBuilt = false;
#endif

// Threads of a warpgroup; rows of A and D.
inline constexpr int kThreads = 128;
inline constexpr int kRows = 64;

// A shared-memory layout's swizzle, as descriptor bits 62-63 give it.
enum class Swizzle : uint32_t { kNone = 0, k128 = 1, k64 = 2 };

// Bytes of a swizzled layout's rows (R above); 16 without a swizzle.
constexpr uint32_t SwizzleRowBytes(Swizzle s) {
  return s == Swizzle::k128 ? 128 : s == Swizzle::k64 ? 64 : 16;
}

// The shared address `address` refers to under swizzle s.
constexpr uint32_t Swizzled(uint32_t address, Swizzle s) {
  const uint32_t mask = s == Swizzle::k128 ? 7 : s == Swizzle::k64 ? 3 : 0;
  return address ^ ((address >> 7 & mask) << 4);
}

#if defined(TRAINYARD_CUDA_EMULATION)

using Site = std::source_location;

inline uint64_t Descriptor(const void* start, uint32_t leading_bytes,
                           uint32_t stride_bytes,
                           Swizzle swizzle = Swizzle::kNone,
                           const Site& site = Site::current()) {
  const uint32_t address =
      ::trainyard::cuda_emulation::DynamicSharedAddress(start, site);
  if (address % 16 != 0 || leading_bytes % 16 != 0 || stride_bytes % 16 != 0 ||
      leading_bytes >= (1u << 18) || stride_bytes >= (1u << 18)) {
    ::trainyard::cuda_emulation::FailKernel(
        "wgmma descriptor: start, leading and stride byte offsets must be "
        "16-byte multiples below 256 KB (start " +
        std::to_string(address) + ", leading " + std::to_string(leading_bytes) +
        ", stride " + std::to_string(stride_bytes) + ")");
  }
  return uint64_t{address >> 4} | uint64_t{leading_bytes >> 4} << 16 |
         uint64_t{stride_bytes >> 4} << 32 |
         uint64_t{static_cast<uint32_t>(swizzle)} << 62;
}

// An operand a product reads from shared memory (B, or A for
// MmaAsyncShared): where (the start and the descriptor's offsets and
// swizzle, as Decode takes them), and a checksum of the values one
// thread's results depend on, which the Wait takes again: the hardware
// may read the operand at any time until then, so it must not change in
// between.
struct SharedRead {
  const unsigned char* smem;  // the block's dynamic shared memory
  uint32_t start;             // its address there
  uint32_t lbo, sbo;
  Swizzle swizzle;
  int n;  // extent besides K: B's N, or A's 64 rows
  bool transpose;
  bool is_a;
  Site site;
  uint64_t sum = 0;

  // Byte offset of the operand's (k, col) from the start before any
  // swizzle (col: B's n or A's row m).
  uint32_t Offset(int k, int col) const {
    if (swizzle == Swizzle::kNone) {
      return transpose ? (col % 8) * 2 + (col / 8) * sbo + (k % 8) * 16 +
                             (k / 8) * lbo
                       : (col % 8) * 16 + (col / 8) * sbo + (k % 8) * 2 +
                             (k / 8) * lbo;
    }
    const uint32_t row = SwizzleRowBytes(swizzle), half = row / 2;
    return transpose ? (k % 8) * row + (k / 8) * sbo + (col % half) * 2 +
                           (col / half) * lbo
                     : (col % 8) * row + (col / 8) * sbo + k * 2;
  }
  uint16_t At(int k, int col) const {
    uint16_t bits;
    memcpy(&bits, smem + Swizzled(start + Offset(k, col), swizzle), 2);
    return bits;
  }
  // FNV-1a over the values thread `tid`'s accumulators depend on, all 16
  // k of: B's columns 8j + 2t and 8j + 2t + 1 (t = tid % 4), or A's rows
  // 16w + g and 16w + g + 8 (warp w, lane group g).
  uint64_t Checksum(int tid) const {
    uint64_t h = 1469598103934665603ull;
    const auto add = [&](int col) {
      for (int k = 0; k < 16; ++k) h = (h ^ At(k, col)) * 1099511628211ull;
    };
    if (is_a) {
      const int row = tid / 32 % 4 * 16 + tid % 32 / 4;
      add(row);
      add(row + 8);
    } else {
      for (int j = 0; j < n / 8; ++j) {
        add(8 * j + 2 * (tid % 4));
        add(8 * j + 2 * (tid % 4) + 1);
      }
    }
    return h;
  }
};

// A product's A fragment in registers (MmaAsync): the hardware may read
// them until the Wait, so they must keep their values until then (a
// kernel that writes the next product's A into them while this one is in
// flight is wrong on the GPU).
struct RegisterRead {
  const uint32_t* a;
  uint32_t value[4];
  Site site;
};

// Each thread's products issued and not yet waited for: where its
// accumulators are, what they will hold, and what they read of shared
// memory and of registers.
struct Pending {
  float* d;
  int count;
  uint64_t group;      // 0 until committed
  float value[kRows];  // kN / 2 accumulators a thread, at most 64
  std::vector<SharedRead> reads;
  std::vector<RegisterRead> registers;
};

// The block's warpgroup state, every thread's (a block runs on one OS
// thread at a time).
inline constexpr int kMaxBlockThreads = 1024;
struct WarpgroupState {
  uint32_t a[kMaxBlockThreads][4];
  std::vector<Pending> pending[kMaxBlockThreads];
  uint64_t committed[kMaxBlockThreads] = {};
};

inline WarpgroupState& State() {
  thread_local WarpgroupState s;
  return s;
}

inline int ThreadIndex(const Site& site) {
  if (blockDim.x * blockDim.y * blockDim.z % kThreads != 0) {
    ::trainyard::cuda_emulation::FailKernel(
        "wgmma at " + std::string(site.file_name()) + ":" +
        std::to_string(site.line()) +
        ": warpgroup products in a block that is not a whole number of "
        "warpgroups (128 threads each)");
  }
  return static_cast<int>(
      threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
}

// The operand of extent n x 16 (k) that descriptor `desc` points at, with
// thread tid's checksum; fails the kernel unless it is in the layout
// without swizzling or with the 128- or 64-byte swizzle (base offset 0),
// inside the block's dynamic shared memory (whose start the emulation
// takes as 1024-byte aligned, as the kernels check it is on the GPU).
inline SharedRead Decode(uint64_t desc, int n, bool transpose, bool is_a,
                         int tid, const Site& site) {
  const uint32_t mode = static_cast<uint32_t>(desc >> 62);
  if ((desc >> 46 & 0xffff) != 0 || mode > 2) {
    ::trainyard::cuda_emulation::FailKernel(
        "wgmma descriptor: only the layouts without swizzling and with the "
        "128- or 64-byte swizzle (and base offset 0) are emulated");
  }
  const uint32_t start = static_cast<uint32_t>(desc & 0x3fff) << 4;
  SharedRead r{nullptr,
               start,
               static_cast<uint32_t>(desc >> 16 & 0x3fff) << 4,
               static_cast<uint32_t>(desc >> 32 & 0x3fff) << 4,
               static_cast<Swizzle>(mode),
               n,
               transpose,
               is_a,
               site};
  // A swizzle moves a unit within its 128-byte line: the lines from the
  // start's to the last element's are read.
  const uint32_t first = start & ~127u;
  const uint32_t end = r.Offset(15, n - 1) + start + 2;
  const uint32_t last = r.swizzle == Swizzle::kNone ? end : (end + 127) & ~127u;
  r.smem = static_cast<const unsigned char*>(
               ::trainyard::cuda_emulation::DynamicSharedAt(first, last - first,
                                                            site)) -
           first;
  r.sum = r.Checksum(tid);
  return r;
}

// Thread tid's part of a product both forms issue: its accumulators d
// become pending with A B + (accumulate ? d : 0), A's (row, k) (row 0..63
// of the warpgroup) as a_at gives it (a float), B as `b` reads it; `reads`
// are checked at the Wait. A product still pending on the same
// accumulators stands for their value (and this one replaces it, taking
// over its reads). Other threads touch only their own lists.
template <int kN, typename AAt>
inline void Issue(float (&d)[kN / 8][4], const AAt& a_at, const SharedRead& b,
                  std::vector<SharedRead> reads,
                  std::vector<RegisterRead> registers, int accumulate,
                  int tid) {
  using warp_mma::HalfOf;
  std::vector<Pending>& mine = State().pending[tid];
  Pending next{&d[0][0], kN / 2, 0, {}, {}, {}};
  Pending* before = nullptr;
  for (Pending& p : mine) {
    if (p.d == next.d) before = &p;
  }
  if (before != nullptr) {
    next.reads = std::move(before->reads);
    next.registers = std::move(before->registers);
  }
  for (SharedRead& r : reads) next.reads.push_back(std::move(r));
  for (RegisterRead& r : registers) next.registers.push_back(r);
  const int w = tid / 32 % 4, lane = tid % 32, g = lane / 4, t = lane % 4;
  for (int j = 0; j < kN / 8; ++j) {
    for (int e = 0; e < 4; ++e) {
      const int row = 16 * w + g + 8 * (e / 2), col = 8 * j + 2 * t + e % 2;
      float acc = 0.f;
      if (accumulate) acc = before ? before->value[4 * j + e] : d[j][e];
      for (int k = 0; k < 16; ++k) {
        acc += a_at(row, k) * HalfOf(b.At(k, col), 0);
      }
      next.value[4 * j + e] = acc;
    }
  }
  if (before != nullptr) {
    *before = std::move(next);
  } else {
    mine.push_back(std::move(next));
  }
  for (int j = 0; j < kN / 8; ++j) {
    for (int e = 0; e < 4; ++e) d[j][e] = NAN;
  }
}

template <int kN, int kTransposeB>
inline void MmaAsync(float (&d)[kN / 8][4], const uint32_t (&a)[4], uint64_t b,
                     int accumulate, const Site& site = Site::current()) {
  static_assert(kN == 32 || kN == 64 || kN == 128, "N: 32, 64 or 128");
  ::trainyard::cuda_emulation::WarpTensorOp("wgmma.mma_async", site);
  const int tid = ThreadIndex(site);
  WarpgroupState& s = State();
  memcpy(s.a[tid], a, sizeof a);
  ::trainyard::cuda_emulation::SyncWarpgroup(site);  // every A posted
  const SharedRead b_read = Decode(b, kN, kTransposeB != 0, false, tid, site);
  // A's (row, k) is in lane (row % 8) * 4 + (k % 8) / 2 of the
  // warpgroup's warp row / 16, register row % 16 / 8 + 2 (k / 8), half
  // k % 2.
  const int first = tid / kThreads * kThreads;
  const auto a_at = [&](int row, int k) {
    return warp_mma::HalfOf(s.a[first + 32 * (row / 16) + (row % 8) * 4 +
                                (k % 8) / 2][row % 16 / 8 + 2 * (k / 8)],
                            k % 2);
  };
  RegisterRead a_read{a, {a[0], a[1], a[2], a[3]}, site};
  Issue<kN>(d, a_at, b_read, {b_read}, {a_read}, accumulate, tid);
  ::trainyard::cuda_emulation::SyncWarpgroup(site);  // every A read
}

template <int kN, int kTransposeB>
inline void MmaAsyncShared(float (&d)[kN / 8][4], uint64_t a, uint64_t b,
                           int accumulate, const Site& site = Site::current()) {
  static_assert(kN == 64, "N: 64");
  ::trainyard::cuda_emulation::WarpTensorOp("wgmma.mma_async", site);
  const int tid = ThreadIndex(site);
  ::trainyard::cuda_emulation::SyncWarpgroup(site);  // the warpgroup together
  const SharedRead a_read = Decode(a, kRows, false, true, tid, site);
  const SharedRead b_read = Decode(b, kN, kTransposeB != 0, false, tid, site);
  const auto a_at = [&](int row, int k) {
    return warp_mma::HalfOf(a_read.At(k, row), 0);
  };
  Issue<kN>(d, a_at, b_read, {a_read, b_read}, {}, accumulate, tid);
  ::trainyard::cuda_emulation::SyncWarpgroup(site);
}

inline void Fence() {}
inline void FenceSharedForAsync() {}

inline void Commit(const Site& site = Site::current()) {
  const int tid = ThreadIndex(site);
  WarpgroupState& s = State();
  const uint64_t group = ++s.committed[tid];
  for (Pending& p : s.pending[tid]) {
    if (p.group == 0) p.group = group;
  }
}

template <int kPending>
inline void Wait(const Site& site = Site::current()) {
  const int tid = ThreadIndex(site);
  WarpgroupState& s = State();
  std::vector<Pending>& mine = s.pending[tid];
  const uint64_t done = s.committed[tid] - kPending;
  for (size_t i = 0; i < mine.size();) {
    if (mine[i].group != 0 && mine[i].group <= done) {
      for (const SharedRead& r : mine[i].reads) {
        if (r.Checksum(tid) != r.sum) {
          ::trainyard::cuda_emulation::FailKernel(
              "wgmma at " + std::string(r.site.file_name()) + ":" +
              std::to_string(r.site.line()) +
              ": the shared memory it reads changed before the Wait "
              "at " +
              site.file_name() + ":" + std::to_string(site.line()));
        }
      }
      for (const RegisterRead& r : mine[i].registers) {
        if (memcmp(r.a, r.value, sizeof r.value) != 0) {
          ::trainyard::cuda_emulation::FailKernel(
              "wgmma at " + std::string(r.site.file_name()) + ":" +
              std::to_string(r.site.line()) +
              ": its A registers changed before the Wait at " +
              site.file_name() + ":" + std::to_string(site.line()));
        }
      }
      memcpy(mine[i].d, mine[i].value, sizeof(float) * mine[i].count);
      mine.erase(mine.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
}

template <int kBlocks>
inline void FenceOperand(float (&)[kBlocks][4]) {}
template <int kSteps>
inline void FenceOperand(uint32_t (&)[kSteps][4]) {}

#else  // the GPU

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TRAINYARD_WGMMA_ASM 1
#endif

// A descriptor of B at `start` (16-byte aligned shared memory) in the
// layout `swizzle` names, with its leading and stride byte offsets.
__device__ __forceinline__ uint64_t
Descriptor(const void* start, uint32_t leading_bytes, uint32_t stride_bytes,
           Swizzle swizzle = Swizzle::kNone) {
  const uint32_t address =
      static_cast<uint32_t>(__cvta_generic_to_shared(start));
  return uint64_t{(address >> 4) & 0x3fff} |
         uint64_t{(leading_bytes >> 4) & 0x3fff} << 16 |
         uint64_t{(stride_bytes >> 4) & 0x3fff} << 32 |
         uint64_t{static_cast<uint32_t>(swizzle)} << 62;
}

__device__ __forceinline__ void Fence() {
#if defined(TRAINYARD_WGMMA_ASM)
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}

__device__ __forceinline__ void FenceSharedForAsync() {
#if defined(TRAINYARD_WGMMA_ASM)
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#else
  __trap();
#endif
}

__device__ __forceinline__ void Commit() {
#if defined(TRAINYARD_WGMMA_ASM)
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}

template <int kPending>
__device__ __forceinline__ void Wait() {
#if defined(TRAINYARD_WGMMA_ASM)
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending)
               : "memory");
#else
  __trap();
#endif
}

// Pins the accumulators' values to this point of the program (an empty
// asm that reads and writes each), so that reads after a Wait are not
// hoisted above it.
template <int kBlocks>
__device__ __forceinline__ void FenceOperand(float (&d)[kBlocks][4]) {
#pragma unroll
  for (int j = 0; j < kBlocks; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[j][e])::"memory");
  }
}
// The same for A fragments in registers: after the Wait of the products
// reading them, so that the compiler keeps them (and puts nothing else in
// their registers) while those products are in flight: the asm that
// issued a product read them once, as far as the compiler knows.
template <int kSteps>
__device__ __forceinline__ void FenceOperand(uint32_t (&a)[kSteps][4]) {
#pragma unroll
  for (int k = 0; k < kSteps; ++k) {
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(a[k][e])::"memory");
  }
}

// The asm operands of accumulator fragments d[j], and of d[j..j+7] (32
// registers), in the order the instructions list them.
#define TRAINYARD_WGMMA_D4(d, j) \
  "+f"(d[j][0]), "+f"(d[j][1]), "+f"(d[j][2]), "+f"(d[j][3])
#define TRAINYARD_WGMMA_D32(d, j)                                 \
  TRAINYARD_WGMMA_D4(d, j), TRAINYARD_WGMMA_D4(d, j + 1),         \
      TRAINYARD_WGMMA_D4(d, j + 2), TRAINYARD_WGMMA_D4(d, j + 3), \
      TRAINYARD_WGMMA_D4(d, j + 4), TRAINYARD_WGMMA_D4(d, j + 5), \
      TRAINYARD_WGMMA_D4(d, j + 6), TRAINYARD_WGMMA_D4(d, j + 7)

// d (64 x kN, fp32) = a b + (accumulate ? d : 0), a the warpgroup's 64 x 16
// bf16 A fragments, b a descriptor of B (16 x kN bf16; kTransposeB: 0
// K-major, 1 MN-major). Issued, not complete: see Commit and Wait.
template <int kN, int kTransposeB>
__device__ __forceinline__ void MmaAsync(float (&d)[kN / 8][4],
                                         const uint32_t (&a)[4], uint64_t b,
                                         int accumulate) {
  static_assert(kN == 32 || kN == 64 || kN == 128, "N: 32, 64 or 128");
#if defined(TRAINYARD_WGMMA_ASM)
  if constexpr (kN == 32) {
    asm volatile(
        "{\n.reg .pred p;\n"
        "setp.ne.b32 p, %21, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, "
        "%8, %9, %10, %11, %12, %13, %14, %15"
        "}, {%16, %17, %18, %19}, %20, p, 1, 1, %22;\n}\n"
        : TRAINYARD_WGMMA_D4(d, 0), TRAINYARD_WGMMA_D4(d, 1),
          TRAINYARD_WGMMA_D4(d, 2), TRAINYARD_WGMMA_D4(d, 3)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate),
          "n"(kTransposeB)
        : "memory");
  } else if constexpr (kN == 64) {
    asm volatile(
        "{\n.reg .pred p;\n"
        "setp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, "
        "%8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, "
        "%24, %25, %26, %27, %28, %29, %30, %31"
        "}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
        : TRAINYARD_WGMMA_D32(d, 0)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate),
          "n"(kTransposeB)
        : "memory");
  } else if constexpr (kN == 128) {
    asm volatile(
        "{\n.reg .pred p;\n"
        "setp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, "
        "%8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, "
        "%24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, "
        "%40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, "
        "%56, %57, %58, %59, %60, %61, %62, %63"
        "}, {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
        : TRAINYARD_WGMMA_D32(d, 0), TRAINYARD_WGMMA_D32(d, 8)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate),
          "n"(kTransposeB)
        : "memory");
  }
#else
  (void)d;
  (void)a;
  (void)b;
  (void)accumulate;
  __trap();
#endif
}

// As MmaAsync with A from shared memory too: `a` a descriptor of A (64 x
// 16 bf16, K-major), for N = 64.
template <int kN, int kTransposeB>
__device__ __forceinline__ void MmaAsyncShared(float (&d)[kN / 8][4],
                                               uint64_t a, uint64_t b,
                                               int accumulate) {
  static_assert(kN == 64, "N: 64");
#if defined(TRAINYARD_WGMMA_ASM)
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, "
      "%8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, "
      "%24, %25, %26, %27, %28, %29, %30, %31"
      "}, %32, %33, p, 1, 1, 0, %35;\n}\n"
      : TRAINYARD_WGMMA_D32(d, 0)
      : "l"(a), "l"(b), "r"(accumulate), "n"(kTransposeB)
      : "memory");
#else
  (void)d;
  (void)a;
  (void)b;
  (void)accumulate;
  __trap();
#endif
}

#undef TRAINYARD_WGMMA_ASM
#undef TRAINYARD_WGMMA_D32
#undef TRAINYARD_WGMMA_D4

#endif

}  // namespace trainyard::engine::cuda::warpgroup_mma

#endif  // TRAINYARD_ENGINE_CUDA_WARPGROUP_MMA_H_
