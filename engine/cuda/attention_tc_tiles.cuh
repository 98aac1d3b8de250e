// The tile machinery shared by the tensor-core attention kernels
// (attention_tc_kernels.cu: forward; attention_tc_backward_kernels.cu:
// backward): tile shape, shared-memory layouts, asynchronous tile loads,
// the warp-wide products on register fragments (warp_mma.h), stores and
// the launch geometry. The kernels' header comments say what they compute.
//
// Tiles. A block is 4 warps (128 threads) and owns one (sequence, head) pair
// (blockIdx.x) and one tile of kTile = 64 rows (blockIdx.y): query rows in
// the forward and the query-gradient kernel, key rows in the key/value-
// gradient kernel. Warp w owns rows 16w..16w+15 of the tile and keeps
// their running results (output, gradients) and their scores in registers
// as mma fragments. (The query-side kernels, the forward and the query
// gradient, also have tilings of 32 rows a warp, as two row tiles of 16,
// in blocks of 2 or 4 warps: query tiles of 64 or 128 rows; the other
// side's tiles are 64 rows in every kernel. The warpgroup forward keeps
// the 16 x 4 rows, and stores its keys and values as core tiles, the
// layout warpgroup products read: CoreTile.) shared memory
// holds only bf16 tiles: the block's own rows and, two stages deep, the tiles
// of the other side (keys and values, or queries and dout) that all four warps
// read. The next tile's copy (cp.async) is in flight while the warps work on
// the current one. Rows past the sequence end are zero-filled by the copy,
// never read from global memory, and their scores masked (probability exactly
// 0); no row at or past T is ever written.
//
// Global memory is read and written in 16-byte packs: eight bf16 of one
// row per access. REQUIRES of every launch: qkv, out, dout and dqkv
// 16-byte aligned (the launchers check; the channel count is a multiple of
// 8 because the head size is), so every row and head starts aligned.
//
// Shared memory (dynamic; per block; each region 128-byte aligned): bf16
// tiles of 64 rows, padded to hs + 8 elements, or of hs elements swizzled
// (the "16x4 swizzled" tiling; Tile says how both read without bank
// conflicts).
//                       hs = 32     hs = 64     hs = 128
//   forward (5 tiles)    25,600      46,080      87,040
//     swizzled           20,480      40,960      81,920
//   forward, 128 queries 30,720      55,296           -
//   backward (6 tiles)   31,744      56,320     105,472
//     swizzled           25,600      50,176      99,328
//   query side, 128 rows 41,984      74,752           -
//   warpgroup forward    21,504      41,984      82,944
// (the backward's figure counts two stages of the rows' statistics, 1,024
// bytes; the query-side kernel uses one.) H100: up to
// 227 KB per block and 228 KB per SM, so at hs = 64 four forward or four
// backward blocks fit on an SM.
//
// Pure device code and constexpr layouts; thread-safe.
#ifndef TRAINYARD_ENGINE_CUDA_ATTENTION_TC_TILES_CUH_
#define TRAINYARD_ENGINE_CUDA_ATTENTION_TC_TILES_CUH_

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <type_traits>

#include "engine/cuda/act_type.cuh"
#include "engine/cuda/attention_tc_kernels.h"
#include "engine/cuda/exp2_ftz.h"
#include "engine/cuda/launch_with_smem.cuh"
#include "engine/cuda/vec16.cuh"
#include "engine/cuda/warp_mma.h"
#include "engine/cuda/warpgroup_mma.h"

namespace trainyard::engine::cuda::attention_tc {

using warp_mma::CpAsync16;
using warp_mma::CpAsyncCommit;
using warp_mma::CpAsyncWait;
using warp_mma::LdMatrixX4;
using warp_mma::LdMatrixX4Trans;
using warp_mma::Mma16816;
using warp_mma::PackBf16;

inline constexpr int kTile = 64;      // rows of a query or key tile
inline constexpr int kWarpRows = 16;  // rows each warp owns (an mma's M)
inline constexpr int kWarps = kTile / kWarpRows;
inline constexpr int kThreads = 32 * kWarps;
inline constexpr float kLn2 = 0.6931471805599453f;

constexpr size_t AlignUp(size_t bytes) { return (bytes + 127) / 128 * 128; }

// A bf16 tile of kRows rows of kD elements, in one of two layouts that
// ldmatrix reads without bank conflicts (8 lanes give the addresses of 8
// consecutive rows' 16-byte units at the same column; each unit must fall
// in a different group of 4 banks):
//  - padded (kSwizzled false): rows of kD + 8 elements, the 16 padding
//    bytes making the row stride an odd number of 16-byte units. A row's
//    copy (cp.async, 16 bytes a lane) then straddles two 128-byte lines of
//    shared memory, which on the H100 costs shared wavefronts and sectors
//    beyond the data's (docs/BENCHMARKS.md, 2026-11-24).
//  - swizzled (kSwizzled true): rows of exactly kD elements, unit u of row
//    r stored at unit u ^ Phase(r) of the row: Phase(r) = r % 8 where a row
//    has 8 or more units (hs >= 64: the rows are whole 128-byte lines, and
//    8 rows' unit u land in the 8 bank groups), (r / 2) % 4 where it has 4
//    (hs = 32: two rows a line, their halves already apart). The XOR stays
//    within a row's aligned groups of 8 (or 4) units. Row offsets that are
//    multiples of 8 keep the phase, so a pointer to row 8j of a tile is a
//    tile of the same layout (RowsFrom).
// At(r, c): the element offset of (r, c), c's 8-element unit kept whole.
template <int kD, int kRows = kTile, bool kSwizzled = false>
struct Tile {
  static constexpr int kLd = kSwizzled ? kD : kD + 8;
  static constexpr size_t kBytes = AlignUp(size_t{kRows} * kLd * 2);
  static_assert(kD % 16 == 0, "head size: whole 16-wide k-steps");
  static_assert(kSwizzled || (kLd * 2 % 16 == 0 && kLd * 2 / 16 % 2 == 1),
                "rows 16-byte aligned, an odd number of 16-byte units apart");
  static_assert(!kSwizzled || kD == 32 || kD % 64 == 0,
                "swizzled rows: 4 units, or whole groups of 8");
  __host__ __device__ static constexpr int Phase(int r) {
    return kD == 32 ? r / 2 % 4 : r % 8;
  }
  __host__ __device__ static constexpr int Unit(int r, int u) {
    return kSwizzled ? u ^ Phase(r) : u;
  }
  __host__ __device__ static constexpr int At(int r, int c) {
    return r * kLd + Unit(r, c / 8) * 8 + c % 8;
  }
};

// Whether a layout reads and writes without bank conflicts, as Tile says:
// in every 8 consecutive rows from a multiple of 8 (an ldmatrix's 8
// addresses), each column unit lies in 8 different groups of 4 banks
// (16-byte units of a 128-byte line), and each row holds its units once
// (At a permutation of the row).
template <typename T, int kD>
constexpr bool ConflictFree() {
  for (int r0 = 0; r0 < kTile; r0 += 8) {
    for (int u = 0; u < kD / 8; ++u) {
      int groups = 0;  // bit g: bank group g taken
      for (int r = r0; r < r0 + 8; ++r) {
        const int bit = 1 << (T::At(r, 8 * u) * 2 / 16 % 8);
        if ((groups & bit) != 0) return false;
        groups |= bit;
      }
    }
    for (int r = r0; r < r0 + 8; ++r) {
      unsigned long long units = 0;
      for (int u = 0; u < kD / 8; ++u) {
        const int at = T::At(r, 8 * u) - r * T::kLd;
        if (at % 8 != 0 || at < 0 || at >= kD) return false;
        units |= 1ull << (at / 8);
      }
      if (units != (1ull << (kD / 8)) - 1) return false;
    }
  }
  return true;
}
static_assert(ConflictFree<Tile<32>, 32>() && ConflictFree<Tile<64>, 64>() &&
                  ConflictFree<Tile<128>, 128>() &&
                  ConflictFree<Tile<32, kTile, true>, 32>() &&
                  ConflictFree<Tile<64, kTile, true>, 64>() &&
                  ConflictFree<Tile<128, kTile, true>, 128>(),
              "tile layouts: conflict-free ldmatrix, whole rows");

// The descriptor swizzle of a swizzled tile's rows (warpgroup_mma.h): the
// 128-byte one for rows of 64 elements, the 64-byte one for 32.
template <int kD>
__host__ __device__ constexpr warpgroup_mma::Swizzle TileSwizzle() {
  static_assert(kD == 32 || kD == 64, "warpgroup reads of swizzled tiles");
  return kD == 64 ? warpgroup_mma::Swizzle::k128 : warpgroup_mma::Swizzle::k64;
}

// Rows r0.. of a tile as a tile of the same layout. REQUIRES: r0 % 8 == 0.
template <int kD, bool kSwizzled, typename T>
__device__ __forceinline__ T* RowsFrom(T* tile, int r0) {
  return tile + r0 * Tile<kD, kTile, kSwizzled>::kLd;
}

// A bf16 tile of kRows rows of kD elements in the layout the warpgroup
// products read (warpgroup_mma.h): 8 x 8 core matrices of 128 contiguous
// bytes, row block by row block: element (r, c) at
// ((r / 8) (kD / 8) + c / 8) 64 + (r % 8) 8 + c % 8. No padding: a core
// matrix's 8 rows fill the 32 banks once.
template <int kD, int kRows = kTile>
struct CoreTile {
  static constexpr size_t kBytes = size_t{kRows} * kD * 2;
  static_assert(kD % 32 == 0 && kRows % 8 == 0 && kBytes % 128 == 0,
                "whole core matrices, 4 to a load's row");
};

// Byte offsets into dynamic shared memory, one struct per kernel; the host
// sizes the launch with kBytes and the kernel carves the same offsets.
// "Own" tiles are the block's rows, "other" tiles (two stages each) the
// side it loops over.
template <int kD, int kQueryRows = kTile, bool kSwizzled = false>
struct ForwardSmem {
  static constexpr size_t kT = Tile<kD, kTile, kSwizzled>::kBytes;
  static constexpr size_t kQ = 0;
  static constexpr size_t kK =
      kQ + Tile<kD, kQueryRows, kSwizzled>::kBytes;  // 2 stages
  static constexpr size_t kV = kK + 2 * kT;  // stages at kV, kV + kT
  static constexpr size_t kBytes = kV + 2 * kT;
};

template <int kD, int kOwnRows = kTile, bool kSwizzled = false>
struct BackwardSmem {
  static constexpr size_t kT = Tile<kD, kTile, kSwizzled>::kBytes;
  static constexpr size_t kOwn0 = 0;
  static constexpr size_t kOwn1 = kOwn0 + Tile<kD, kOwnRows, kSwizzled>::kBytes;
  static constexpr size_t kOther0 =
      kOwn1 + Tile<kD, kOwnRows, kSwizzled>::kBytes;   // two stages
  static constexpr size_t kOther1 = kOther0 + 2 * kT;  // two stages
  static constexpr size_t kLse = kOther1 + 2 * kT;     // two stages
  static constexpr size_t kDelta = kLse + 2 * kTile * sizeof(float);
  static constexpr size_t kBytes = kDelta + 2 * kTile * sizeof(float);
  static_assert(kOwnRows <= 2 * kTile, "statistics of the own rows fit");
};

// The warpgroup forward: queries, keys and values as core tiles, each of
// the kGroups warpgroups' query tiles (kQTile bytes apart) in a padded
// tile's room (where its output rows are staged); or with kSwizzled all as
// swizzled tiles (Tile), each region 1024-byte aligned as the swizzled
// descriptors need.
template <int kD, bool kSwizzled = false, int kGroups = 1>
struct ForwardWgSmem {
  static constexpr size_t kT =
      kSwizzled ? Tile<kD, kTile, true>::kBytes : CoreTile<kD>::kBytes;
  static constexpr size_t kQ = 0;
  static constexpr size_t kQTile = Tile<kD, kTile, kSwizzled>::kBytes;
  static constexpr size_t kK = kQ + kGroups * kQTile;  // 2 stages
  static constexpr size_t kV = kK + 2 * kT;     // 2 stages
  static constexpr size_t kBytes = kV + 2 * kT;
  static_assert(!kSwizzled ||
                    (kQTile % 1024 == 0 && kK % 1024 == 0 && kT % 1024 == 0),
                "swizzled regions 1024-byte aligned");
  static_assert(kQTile % 128 == 0, "core tiles 128-byte aligned");
};

// The budget in the header comment.
static_assert(ForwardSmem<32>::kBytes == 25600 &&
                  ForwardSmem<64>::kBytes == 46080 &&
                  ForwardSmem<128>::kBytes == 87040 &&
                  ForwardSmem<32, 128>::kBytes == 30720 &&
                  ForwardSmem<64, 128>::kBytes == 55296,
              "forward smem budget");
static_assert(ForwardSmem<32, kTile, true>::kBytes == 20480 &&
                  ForwardSmem<64, kTile, true>::kBytes == 40960 &&
                  ForwardSmem<128, kTile, true>::kBytes == 81920 &&
                  BackwardSmem<32, kTile, true>::kBytes == 25600 &&
                  BackwardSmem<64, kTile, true>::kBytes == 50176 &&
                  BackwardSmem<128, kTile, true>::kBytes == 99328,
              "swizzled smem budget");
// The warpgroup kernels' swizzled descriptors need each tile 1024-byte
// aligned (the 8-row swizzle pattern starts there).
static_assert(BackwardSmem<32, kTile, true>::kOwn1 % 1024 == 0 &&
                  BackwardSmem<32, kTile, true>::kT % 1024 == 0 &&
                  BackwardSmem<64, kTile, true>::kOwn1 % 1024 == 0 &&
                  BackwardSmem<64, kTile, true>::kT % 1024 == 0,
              "swizzled tiles 1024-byte aligned");
static_assert(ForwardWgSmem<32>::kBytes == 21504 &&
                  ForwardWgSmem<64>::kBytes == 41984 &&
                  ForwardWgSmem<128>::kBytes == 82944,
              "warpgroup forward smem budget");
static_assert(BackwardSmem<32>::kBytes == 31744 &&
                  BackwardSmem<64>::kBytes == 56320 &&
                  BackwardSmem<128>::kBytes == 105472 &&
                  BackwardSmem<32, 128>::kBytes == 41984 &&
                  BackwardSmem<64, 128>::kBytes == 74752,
              "backward smem budget");
static_assert(BackwardSmem<128>::kBytes <= 227 * 1024,
              "shared memory per block on sm_90");

template <typename T>
__device__ __forceinline__ T* At(unsigned char* smem, size_t offset) {
  return reinterpret_cast<T*>(smem + offset);
}

// The region offsets assume a 128-byte aligned base; stop loudly if not.
// (The kernels declare their shared memory 1024-byte aligned, as the
// swizzled warpgroup tiles need it, so that the host emulation places it
// so; on the GPU the base is where the hardware puts it, and the kernels
// with swizzled descriptors check it: CheckSmemAlignmentSilently<1024>.)
__device__ __forceinline__ void CheckSmemAlignment(const void* smem) {
  if ((reinterpret_cast<uintptr_t>(smem) & 127) != 0) {
    if (threadIdx.x == 0) printf("attention_tc: smem base misaligned\n");
    __trap();
  }
}

// The same check without the message, for kernels with warpgroup
// products: printf is a call, and ptxas serializes a kernel's warpgroup
// products when one is in it. Swizzled tiles (kAlign 1024) need the base
// aligned to the swizzle's 8-row pattern, which the hardware takes from
// the address.
template <int kAlign = 128>
__device__ __forceinline__ void CheckSmemAlignmentSilently(const void* smem) {
  if ((reinterpret_cast<uintptr_t>(smem) & (kAlign - 1)) != 0) __trap();
}

// One (sequence, head) pair: rows of q at qkv + t * qkv_row (k at + C, v at
// + 2C), of out and dout at + t * out_row, statistics at stats + t.
struct TcGeometry {
  int64_t seq, channels, heads;
  int tiles;  // ceil(seq / kTile)
  float scale;
};

struct HeadOffsets {
  int64_t qkv, qkv_row, out, out_row, stats;
};

__device__ __forceinline__ HeadOffsets HeadOf(const TcGeometry& g, int hs) {
  const int64_t bh = blockIdx.x, b = bh / g.heads, h = bh % g.heads;
  return {b * g.seq * 3 * g.channels + h * hs, 3 * g.channels,
          b * g.seq * g.channels + h * hs, g.channels, bh * g.seq};
}

// Block-wide (a block of kBlockThreads): dst[r] = scale src[row0 + r] for
// the tile's kRows rows, 0 past `seq`.
template <int kRows = kTile, int kBlockThreads = kThreads>
__device__ __forceinline__ void LoadRowStats(float* dst, const float* src,
                                             int64_t row0, int64_t seq,
                                             float scale = 1.f) {
  for (int r = threadIdx.x; r < kRows; r += kBlockThreads) {
    dst[r] = row0 + r < seq ? src[row0 + r] * scale : 0.f;
  }
}

// Block-wide (a block of kBlockThreads threads): starts copying rows
// row0..row0+kRows-1 of src (kD bf16 each, row r at src + r * stride)
// into the tile dst, zeros for rows at or past `seq`; the caller commits
// the group. Consecutive threads take consecutive 16-byte packs of a row
// (coalesced); in the swizzled layout each warp's copies of a row fill its
// 128-byte lines of shared memory whole. REQUIRES: src and stride * 2
// bytes 16-byte aligned.
template <int kD, int kRows = kTile, int kBlockThreads = kThreads,
          bool kSwizzled = false>
__device__ void AsyncLoadRows(bf16* dst, const bf16* src, int64_t stride,
                              int64_t row0, int64_t seq) {
  using T = Tile<kD, kRows, kSwizzled>;
  constexpr int kRowPacks = kD / 8;
  for (int e = threadIdx.x; e < kRows * kRowPacks; e += kBlockThreads) {
    const int r = e / kRowPacks, c = e % kRowPacks * 8;
    const int64_t row = row0 + r;
    const bool inside = row < seq;
    CpAsync16(dst + T::At(r, c), src + (inside ? row : 0) * stride + c, inside);
  }
}

// As AsyncLoadRows, into a core tile (CoreTile). Each warp's 32 copies
// take 4 packs of each of 8 rows: 64 contiguous bytes a row from global
// memory, and in shared memory 8 different 16-byte bank groups, each
// written 4 times (the fewest passes 512 bytes take).
template <int kD, int kRows = kTile, int kBlockThreads = kThreads>
__device__ void AsyncLoadCoreRows(bf16* dst, const bf16* src, int64_t stride,
                                  int64_t row0, int64_t seq) {
  constexpr int kQuads = kD / 32;  // groups of 4 packs in a row
  for (int e = threadIdx.x; e < kRows * kD / 8; e += kBlockThreads) {
    const int pack = e % 4, r8 = e / 4 % 8, rest = e / 32;
    const int r = rest / kQuads * 8 + r8, c = (rest % kQuads * 4 + pack) * 8;
    const int64_t row = row0 + r;
    const bool inside = row < seq;
    CpAsync16(dst + ((r / 8) * (kD / 8) + c / 8) * 64 + (r % 8) * 8,
              src + (inside ? row : 0) * stride + c, inside);
  }
}

// Block-wide: AsyncLoadRows into a tile of the layout a kernel's flags
// name: a core tile (CoreTile) for warpgroup products (kCoreTiles)
// unless kSwizzled, else rows in the Tile layout kSwizzled names (which
// the warpgroup products read too, through swizzled descriptors).
template <int kD, int kRows, int kBlockThreads, bool kCoreTiles, bool kSwizzled>
__device__ void AsyncLoadTile(bf16* dst, const bf16* src, int64_t stride,
                              int64_t row0, int64_t seq) {
  if constexpr (kCoreTiles && !kSwizzled) {
    AsyncLoadCoreRows<kD, kRows, kBlockThreads>(dst, src, stride, row0, seq);
  } else {
    AsyncLoadRows<kD, kRows, kBlockThreads, kSwizzled>(dst, src, stride, row0,
                                                       seq);
  }
}

// The other side's tiles of a kernel's loop (keys and values on the query
// side, queries and dout on the key side): kTile rows of two matrices a
// step, double-buffered in shared memory (the first matrix's stages at
// byte `first`, the second's at `second`, each `stage_bytes` apart): step
// `it` reads stage it % 2 while the copies for step it + 1 fill the other.
// Stored as AsyncLoadTile's kCoreTiles and kSwizzled say. Block-wide
// members.
template <int kD, int kBlockThreads, bool kCoreTiles, bool kSwizzled = false>
struct TileStages {
  unsigned char* smem;
  size_t first, second, stage_bytes;
  const bf16* a;
  int64_t a_stride;
  const bf16* b;
  int64_t b_stride;
  int64_t seq;

  __device__ bf16* First(int it) const {
    return At<bf16>(smem, first + it % 2 * stage_bytes);
  }
  __device__ bf16* Second(int it) const {
    return At<bf16>(smem, second + it % 2 * stage_bytes);
  }
  // Starts copying both matrices' rows row0.. into step it's stage (or
  // only the first's, or the second's); the caller commits.
  __device__ void Load(int it, int64_t row0) const {
    LoadFirst(it, row0);
    LoadSecond(it, row0);
  }
  __device__ void LoadFirst(int it, int64_t row0) const {
    AsyncLoadTile<kD, kTile, kBlockThreads, kCoreTiles, kSwizzled>(
        First(it), a, a_stride, row0, seq);
  }
  __device__ void LoadSecond(int it, int64_t row0) const {
    AsyncLoadTile<kD, kTile, kBlockThreads, kCoreTiles, kSwizzled>(
        Second(it), b, b_stride, row0, seq);
  }
  // At the top of step `it`: if `next_row` >= 0 (there is a next step,
  // whose tiles start there), starts and commits their copies into the
  // other stage and runs also(it + 1, next_row) (more loads for that
  // step); then waits for step it's copies (and the older ones), fenced
  // for the warpgroup products where kCoreTiles. The caller's barrier
  // publishes them.
  template <typename Also>
  __device__ void Advance(int it, int64_t next_row, const Also& also) const {
    if (next_row >= 0) {
      Load(it + 1, next_row);
      CpAsyncCommit();
      also(it + 1, next_row);
      CpAsyncWait<1>();
    } else {
      CpAsyncWait<0>();
    }
    if constexpr (kCoreTiles) warpgroup_mma::FenceSharedForAsync();
  }
  __device__ void Advance(int it, int64_t next_row) const {
    Advance(it, next_row, [](int, int64_t) {});
  }
};

// The query-side kernels' stages: the keys and values of the (sequence,
// head) pair at h, their stages at byte offsets `first` and `second`.
template <int kD, int kBlockThreads, bool kCoreTiles, bool kSwizzled = false>
__device__ TileStages<kD, kBlockThreads, kCoreTiles, kSwizzled> KeyValueStages(
    unsigned char* smem, size_t first, size_t second, size_t stage_bytes,
    const bf16* qkv, const HeadOffsets& h, const TcGeometry& g) {
  const bf16* keys = qkv + h.qkv + g.channels;
  return {
      smem,      first, second, stage_bytes, keys, h.qkv_row, keys + g.channels,
      h.qkv_row, g.seq};
}

// Descriptors of a tile's k-step ks (16-wide) for a warpgroup product:
// with the tile's rows as the product's N and its columns as K (K-major:
// the product takes the tile's transpose), or its rows as K and columns
// as N (MN-major: the tile itself). A core tile (CoreTile), or with
// kSwizzled a swizzled one (Tile<kD, rows, true>, hs 32 or 64: rows of 64
// or 128 bytes, the 64- or 128-byte swizzle, 8 rows SBO apart; a k-step
// starts 32 bytes into the rows K-major, 16 rows down MN-major; LBO is
// unused at these extents and given as 16 bytes, as CUTLASS does).
template <int kD, bool kSwizzled = false>
__device__ __forceinline__ uint64_t RowsAsN(const bf16* tile, int ks) {
  if constexpr (kSwizzled) {
    return warpgroup_mma::Descriptor(tile + ks * 16, 16, 8 * kD * 2,
                                     TileSwizzle<kD>());
  } else {
    return warpgroup_mma::Descriptor(tile + ks * 128, 128, kD * 16);
  }
}
template <int kD, bool kSwizzled = false>
__device__ __forceinline__ uint64_t RowsAsK(const bf16* tile, int ks) {
  if constexpr (kSwizzled) {
    return warpgroup_mma::Descriptor(tile + ks * 16 * kD, 16, 8 * kD * 2,
                                     TileSwizzle<kD>());
  } else {
    return warpgroup_mma::Descriptor(tile + ks * 16 * kD, kD * 16, 128);
  }
}

// Warpgroup-wide, the warpgroup tiling's two products, issued (then
// CompleteProducts): s = a b^T as ProductABt for the warp's 16 rows, b a
// core tile read transposed; acc += a b as MmaAB, b a core tile read as
// it lies. The caller runs warpgroup_mma::Fence() before a batch.
template <int kD, bool kSwizzled = false>
__device__ __forceinline__ void IssueProductABt(float (&s)[kTile / 8][4],
                                                const uint32_t (&a)[kD / 16][4],
                                                const bf16* b) {
#pragma unroll
  for (int ks = 0; ks < kD / 16; ++ks) {
    warpgroup_mma::MmaAsync<kTile, 0>(s, a[ks], RowsAsN<kD, kSwizzled>(b, ks),
                                      ks > 0);
  }
}
// As IssueProductABt with a (64 rows) a tile in shared memory too.
template <int kD, bool kSwizzled = false>
__device__ __forceinline__ void IssueSharedProductABt(float (&s)[kTile / 8][4],
                                                      const bf16* a,
                                                      const bf16* b) {
#pragma unroll
  for (int ks = 0; ks < kD / 16; ++ks) {
    warpgroup_mma::MmaAsyncShared<kTile, 0>(s, RowsAsN<kD, kSwizzled>(a, ks),
                                            RowsAsN<kD, kSwizzled>(b, ks),
                                            ks > 0);
  }
}
template <int kD, bool kSwizzled = false>
__device__ __forceinline__ void IssueMmaAB(float (&acc)[kD / 8][4],
                                           const uint32_t (&a)[kTile / 16][4],
                                           const bf16* b) {
#pragma unroll
  for (int ks = 0; ks < kTile / 16; ++ks) {
    warpgroup_mma::MmaAsync<kD, 1>(acc, a[ks], RowsAsK<kD, kSwizzled>(b, ks),
                                   1);
  }
}

// Commits the products issued, waits for all of them and pins the
// accumulators `acc` they wrote.
template <typename... Acc>
__device__ __forceinline__ void CompleteProducts(Acc&... acc) {
  warpgroup_mma::Commit();
  warpgroup_mma::Wait<0>();
  (warpgroup_mma::FenceOperand(acc), ...);
}

// Warp-wide: the A fragments of the tile's rows r0..r0+15 (all kD
// columns), one per 16-wide k-step. REQUIRES: r0 % 8 == 0.
template <int kD, bool kSwizzled = false>
__device__ __forceinline__ void LoadA(uint32_t (&a)[kD / 16][4],
                                      const bf16* tile, int r0) {
  using T = Tile<kD, kTile, kSwizzled>;
  const int lane = threadIdx.x % 32, i = lane / 8;
  // Matrix i: rows r0 + (i % 2) * 8.., units 2k + i / 2 of the row (the
  // k-step's columns (i / 2) * 8..).
  const int r = i % 2 * 8 + lane % 8;
  const bf16* row = RowsFrom<kD, kSwizzled>(tile, r0) + r * T::kLd;
#pragma unroll
  for (int k = 0; k < kD / 16; ++k) {
    LdMatrixX4(a[k], row + T::Unit(r, 2 * k + i / 2) * 8);
  }
}

// c0 += a b0 and c1 += a b1, with r the x4 ldmatrix that holds the B
// fragments of two adjacent column blocks: r[0], r[1] and r[2], r[3].
__device__ __forceinline__ void MmaTwoColumnBlocks(float (&c0)[4],
                                                   float (&c1)[4],
                                                   const uint32_t (&a)[4],
                                                   const uint32_t (&r)[4]) {
  const uint32_t b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
  Mma16816(c0, a, b0);
  Mma16816(c1, a, b1);
}

// Warp-wide: acc[m][n] += sum over k of a[m][k] b[k][n], for the warp's kM
// row tiles of 16 (a[m][k]: A fragments, kSteps 16-wide k-steps) and
// kBlocks column blocks of 8; load(r, k, n) gives the B fragments of
// k-step k for column blocks n (r[0], r[1]) and n + 1 (r[2], r[3]), read
// from shared memory once for all kM row tiles. Each acc[m] sees the same
// products in the same order whatever kM is.
template <int kSteps, int kBlocks, int kM, typename Load>
__device__ __forceinline__ void MmaRowTiles(float (&acc)[kM][kBlocks][4],
                                            const uint32_t (&a)[kM][kSteps][4],
                                            const Load& load) {
#pragma unroll
  for (int k = 0; k < kSteps; ++k) {
#pragma unroll
    for (int n = 0; n < kBlocks; n += 2) {
      uint32_t r[4];
      load(r, k, n);
#pragma unroll
      for (int m = 0; m < kM; ++m) {
        MmaTwoColumnBlocks(acc[m][n], acc[m][n + 1], a[m][k], r);
      }
    }
  }
}

// Warp-wide: s[m] (16 x kTile, as kTile/8 C fragments) = a[m] b^T for
// the warp's kM row tiles of 16 (a[m]: kD/16 A fragments) and b the other
// side's tile (kTile rows of kD): s[m][n] holds columns 8n..8n+7, the
// other side's rows.
template <int kD, int kM, bool kSwizzled = false>
__device__ __forceinline__ void ProductABt(float (&s)[kM][kTile / 8][4],
                                           const uint32_t (&a)[kM][kD / 16][4],
                                           const bf16* b) {
  using T = Tile<kD, kTile, kSwizzled>;
  constexpr int kLd = T::kLd;
  const int lane = threadIdx.x % 32, i = lane / 8;
#pragma unroll
  for (int m = 0; m < kM; ++m) {
#pragma unroll
    for (int n = 0; n < kTile / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[m][n][e] = 0.f;
    }
  }
  // Matrix i: b's rows (n + i / 2) * 8.., units 2k + i % 2 (the k-step's
  // columns (i % 2) * 8..); rows 8 apart have the same phase.
  const int rr = i / 2 * 8 + lane % 8;
  const bf16* row = b + rr * kLd;
  MmaRowTiles(s, a, [row, rr, i](uint32_t(&r)[4], int k, int n) {
    LdMatrixX4(r, row + n * 8 * kLd + T::Unit(rr, 2 * k + i % 2) * 8);
  });
}

// The C fragments of a 16 x kTile product, rounded to bf16, as the A
// fragments of its kTile/16 k-steps (warp_mma.h: layouts).
__device__ __forceinline__ void ToA(uint32_t (&a)[kTile / 16][4],
                                    const float (&c)[kTile / 8][4]) {
#pragma unroll
  for (int k = 0; k < kTile / 16; ++k) {
    a[k][0] = PackBf16(c[2 * k][0], c[2 * k][1]);
    a[k][1] = PackBf16(c[2 * k][2], c[2 * k][3]);
    a[k][2] = PackBf16(c[2 * k + 1][0], c[2 * k + 1][1]);
    a[k][3] = PackBf16(c[2 * k + 1][2], c[2 * k + 1][3]);
  }
}

// Warpgroup-wide: acc += P b, complete on return, with P the scores (or
// their gradients) c rounded to bf16 A fragments (ToA) and b a core tile
// read as it lies (IssueMmaAB): the forward's P V, the query side's dS K.
template <int kD, bool kSwizzled = false>
__device__ __forceinline__ void CompleteMmaABOfScores(
    float (&acc)[kD / 8][4], const float (&c)[kTile / 8][4], const bf16* b) {
  uint32_t a[kTile / 16][4];
  ToA(a, c);
  warpgroup_mma::FenceOperand(acc);
  warpgroup_mma::Fence();
  IssueMmaAB<kD, kSwizzled>(acc, a, b);
  CompleteProducts(acc);
  warpgroup_mma::FenceOperand(a);
}

// Warp-wide: acc[m] (16 x kD, kD/8 C fragments) += a[m] b for the warp's
// kM row tiles of 16, with a[m] (16 x kTile) as A fragments and b the
// other side's tile read as kTile x kD (its rows are the product's k).
template <int kD, int kM, bool kSwizzled = false>
__device__ __forceinline__ void MmaAB(float (&acc)[kM][kD / 8][4],
                                      const uint32_t (&a)[kM][kTile / 16][4],
                                      const bf16* b) {
  using T = Tile<kD, kTile, kSwizzled>;
  constexpr int kLd = T::kLd;
  const int lane = threadIdx.x % 32, i = lane / 8;
  // Matrix i (transposed): b's rows 16k + (i % 2) * 8.., unit n + i / 2
  // (columns (n + i / 2) * 8..); rows 16 apart have the same phase.
  const int rr = i % 2 * 8 + lane % 8;
  const bf16* row = b + rr * kLd;
  MmaRowTiles(acc, a, [row, rr, i](uint32_t(&r)[4], int k, int n) {
    LdMatrixX4Trans(r, row + k * 16 * kLd + T::Unit(rr, n + i / 2) * 8);
  });
}

// On a diagonal tile pair (the own and the other side's tile start at the
// same row), sets the causal mask's scores to -inf: those whose key comes
// after their query, keys being the columns when `rows_are_queries`, else
// the rows. Other tile pairs need no mask: every key of an earlier tile
// precedes every query of a later one. Nor do rows past the sequence end:
// they are zero-filled, so their scores, probabilities' products and
// gradient terms come out finite and add nothing to any row that is
// stored, and they are never stored themselves.
__device__ __forceinline__ void MaskDiagonalTile(float (&s)[kTile / 8][4],
                                                 int w0,
                                                 bool rows_are_queries) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int n = 0; n < kTile / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = w0 + lane / 4 + e / 2 * 8;
      const int col = n * 8 + 2 * (lane % 4) + e % 2;
      if (rows_are_queries ? col > row : row > col) s[n][e] = -INFINITY;
    }
  }
}

// The query-side kernels' rows in a tiling of kWarpsN warps of kM row
// tiles of 16 (attention_tc_kernels.h): the block's query tile (the long
// rows first), the warp's rows, and the key tiles each visits. Rows and
// tiles are ints: MakeTcGeometry caps the tiles at 65535.
template <int kM, int kWarpsN>
struct QueryRows {
  static constexpr int kWarpQ = kM * kWarpRows;   // a warp's rows
  static constexpr int kRows = kWarpsN * kWarpQ;  // the block's
  static constexpr int kBlockThreads = 32 * kWarpsN;

  __device__ explicit QueryRows(int key_tiles)
      : q0(static_cast<int>(gridDim.y - 1 - blockIdx.y) * kRows),
        w0(static_cast<int>(threadIdx.x / 32) * kWarpQ),
        last(LastTile(q0 + kRows - 1, key_tiles)),
        warp_last(LastTile(q0 + w0 + kWarpQ - 1, key_tiles)) {}

  // Whether the warp works on key tile kt: a tile after its last row is
  // wholly masked, and skipping it leaves every sum exactly as visiting
  // would. (With a query tile of one key tile's rows, every warp's last
  // is the block's.)
  __device__ bool Visits(int kt) const {
    return kRows == kTile || kt <= warp_last;
  }

  // The first row of the warp's row tile t, in the block's tile.
  __device__ int RowTile(int t) const { return w0 + t * kWarpRows; }

  // Masks s, the scores of row tile t against key tile kt, if kt is the
  // row tile's diagonal tile.
  __device__ void MaskIfDiagonal(float (&s)[kTile / 8][4], int t,
                                 int kt) const {
    const int row0 = q0 + RowTile(t);
    if (kt == row0 / kTile) {
      MaskDiagonalTile(s, row0 % kTile, /*rows_are_queries=*/true);
    }
  }

  int q0;         // the block's first row, in the sequence
  int w0;         // the warp's first row, in the block's tile
  int last;       // the block's last key tile
  int warp_last;  // the warp's

 private:
  // The key tile holding `row`; tiles past the sequence's last only ever
  // meet rows past it, which are not stored.
  __device__ static int LastTile(int row, int key_tiles) {
    const int t = row / kTile;
    return t < key_tiles ? t : key_tiles - 1;
  }
};

// Warp-wide: writes the warp's 16 x kD result rows, row g of the lane's
// two (g = lane / 4 and g + 8) times scale[0] or scale[1], as bf16 to dst
// + (row0 + r) * stride for rows before `seq`, staging them in `stage`
// (16 rows of a tile in the kSwizzled layout, the warp's own, as RowsFrom
// gives them); 16-byte packs, so dst and stride * 2 bytes must be 16-byte
// aligned.
template <int kD, bool kSwizzled = false>
__device__ void StoreRows(bf16* dst, int64_t stride, int64_t row0, int64_t seq,
                          const float (&acc)[kD / 8][4],
                          const float (&scale)[2], bf16* stage) {
  using T = Tile<kD, kTile, kSwizzled>;
  constexpr int kRowPacks = kD / 8;
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  __syncwarp();  // every lane is done reading the stage's old rows
#pragma unroll
  for (int n = 0; n < kD / 8; ++n) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t pair =
          PackBf16(acc[n][2 * h] * scale[h], acc[n][2 * h + 1] * scale[h]);
      memcpy(stage + T::At(g + 8 * h, n * 8 + 2 * t), &pair, 4);
    }
  }
  __syncwarp();
  for (int e = lane; e < kWarpRows * kRowPacks; e += 32) {
    const int r = e / kRowPacks, c = e % kRowPacks * 8;
    if (row0 + r < seq)
      Copy16(dst + (row0 + r) * stride + c, stage + T::At(r, c));
  }
}

// The grid and geometry of a launch: false when the shape is not one the
// kernels take (head size, heads dividing channels, grid limits).
inline bool MakeTcGeometry(int64_t batch, int64_t seq, int64_t channels,
                           int64_t heads, TcGeometry* g, dim3* grid) {
  if (heads <= 0 || channels % heads != 0) return false;
  const int64_t hs = channels / heads, tiles = (seq + kTile - 1) / kTile;
  if (!AttentionTcSupportsHeadSize(hs)) return false;
  if (batch * heads > 0x7fffffff || tiles > 65535) return false;
  *g = {seq, channels, heads, static_cast<int>(tiles),
        1.f / sqrtf(static_cast<float>(hs))};
  *grid =
      dim3(static_cast<unsigned>(batch * heads), static_cast<unsigned>(tiles));
  return true;
}

// The one place that maps a tiling and a head size the kernels take
// (AttentionTcTakesTiling) to their template arguments: returns
// f(Int<kD>, Int<kM>, Int<kWarpsN>, Bool<kSwizzled>), kM the warp's row
// tiles of 16 (only the 16 x 4 tiling has the swizzled layout).
template <int kN>
using Int = std::integral_constant<int, kN>;
template <bool kB>
using Bool = std::integral_constant<bool, kB>;

// f(Int<kD>) for a head size the kernels take.
template <typename F>
cudaError_t WithHeadSize(int64_t head_size, const F& f) {
  switch (head_size) {
    case 32:
      return f(Int<32>{});
    case 64:
      return f(Int<64>{});
    default:
      return f(Int<128>{});
  }
}

// f(Int<kD>, Bool<kSwizzled>) for a warpgroup tiling and a head size it
// takes (the swizzled layout: hs 32 and 64 only).
template <typename F>
cudaError_t WithWarpgroupLayout(AttentionTcTiling tiling, int64_t head_size,
                                const F& f) {
  return WithHeadSize(head_size, [&](auto d) -> cudaError_t {
    if (!tiling.swizzled) return f(d, Bool<false>{});
    if constexpr (decltype(d)::value == 128) {
      return cudaErrorInvalidValue;
    } else {
      return f(d, Bool<true>{});
    }
  });
}

template <typename F>
cudaError_t WithTiling(AttentionTcTiling tiling, int64_t head_size,
                       const F& f) {
  const auto with_rows = [&](auto m, auto w, auto swz) -> cudaError_t {
    switch (head_size) {
      case 32:
        return f(Int<32>{}, m, w, swz);
      case 64:
        return f(Int<64>{}, m, w, swz);
      default:
        if constexpr (decltype(m)::value == 1) {
          return f(Int<128>{}, m, w, swz);
        } else {
          return cudaErrorInvalidValue;  // 32-row warps: up to 64 channels
        }
    }
  };
  if (tiling.warp_rows == 16 && tiling.warps == 8) {
    return tiling.swizzled ? with_rows(Int<1>{}, Int<8>{}, Bool<true>{})
                           : with_rows(Int<1>{}, Int<8>{}, Bool<false>{});
  }
  if (tiling.warp_rows == 16) {
    return tiling.swizzled ? with_rows(Int<1>{}, Int<4>{}, Bool<true>{})
                           : with_rows(Int<1>{}, Int<4>{}, Bool<false>{});
  }
  if (tiling.warps == 2) return with_rows(Int<2>{}, Int<2>{}, Bool<false>{});
  return with_rows(Int<2>{}, Int<4>{}, Bool<false>{});
}

}  // namespace trainyard::engine::cuda::attention_tc

#endif  // TRAINYARD_ENGINE_CUDA_ATTENTION_TC_TILES_CUH_
