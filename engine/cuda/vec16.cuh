// 16-byte vector access to activations: one load or store instruction moves
// a pack of kPack<T> values (8 bf16 or 4 fp32), which memory-bound kernels
// need to come near the GPU's bandwidth (2-byte accesses reach a fraction
// of it). LdPack widens a pack to fp32 and StPack rounds fp32 to T exactly
// as Ld and St do element by element (act_type.cuh), so a kernel moving
// from Ld/St to packs computes bitwise the same values.
//
// Alignment contract: every pointer given to LdPack, StPack or Copy16 must
// be 16-byte aligned (Aligned16). A misaligned vector access faults on the
// GPU; the host emulation fails the launch naming the caller's file:line.
// Rows of activations start aligned only when the buffer does and the row
// length is a multiple of kPack<T>: a kernel takes the pack-aligned middle
// of a row with SplitAligned and visits it with ForOwned, which hands the
// unaligned head and tail to its element-by-element code.
//
// Pure device functions; thread-safe.
#ifndef TRAINYARD_ENGINE_CUDA_VEC16_CUH_
#define TRAINYARD_ENGINE_CUDA_VEC16_CUH_

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "engine/cuda/act_type.cuh"

// The one difference between the GPU and the emulation (runtime.h): the
// emulation records each access's call site (a default argument, so
// callers write nothing) and checks alignment before it copies. Words16 is
// the 16 bytes as four 32-bit words in registers. On the GPU a store to
// global memory goes through __stwb (st.global.wb, the default caching):
// nvcc splits a plain 16-byte store of computed values into 4- or 2-byte
// pieces where it loses track of the address's form (a loop over pack
// numbers from a row's SplitAligned head, for one). __isGlobal folds away
// where the address space is known (global or shared); elsewhere it costs
// one test.
#if defined(TRAINYARD_CUDA_EMULATION)
#include <source_location>
namespace trainyard::engine::cuda {
using AccessSite = std::source_location;
struct Words16 {
  uint32_t x, y, z, w;
};
inline Words16 Load16(const void* p, const AccessSite& site) {
  ::trainyard::cuda_emulation::CheckVectorAccess("16-byte load from", p, 16,
                                                 site);
  Words16 v;
  memcpy(&v, p, 16);
  return v;
}
inline void Store16(void* p, const Words16& v, const AccessSite& site) {
  ::trainyard::cuda_emulation::CheckVectorAccess("16-byte store to", p, 16,
                                                 site);
  memcpy(p, &v, 16);
}
}  // namespace trainyard::engine::cuda
#else
namespace trainyard::engine::cuda {
struct AccessSite {
  __host__ __device__ static constexpr AccessSite current() { return {}; }
};
using Words16 = uint4;
__device__ __forceinline__ Words16 Load16(const void* p, AccessSite) {
  return *static_cast<const uint4*>(p);
}
__device__ __forceinline__ void Store16(void* p, const Words16& v, AccessSite) {
  if (__isGlobal(p)) {
    __stwb(static_cast<uint4*>(p), v);
  } else {
    *static_cast<uint4*>(p) = v;
  }
}
}  // namespace trainyard::engine::cuda
#endif

namespace trainyard::engine::cuda {

template <typename T>
inline constexpr int kPack = 16 / static_cast<int>(sizeof(T));

// Packs to cover n elements, for launch shapes.
template <typename T>
__host__ __device__ constexpr int64_t PackCount(int64_t n) {
  return (n + kPack<T> - 1) / kPack<T>;
}

__host__ __device__ __forceinline__ bool Aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

// Whether rows of n elements of T, in arrays starting at `arrays`, are all
// whole 16-byte packs: n a multiple of the pack and every array aligned.
template <typename T, typename... Arrays>
__host__ __device__ __forceinline__ bool RowsArePacks(int64_t n,
                                                      const Arrays*... arrays) {
  return n % kPack<T> == 0 && (Aligned16(arrays) && ...);
}

// out[k] = the k-th T of the 16 bytes v, as a float, k < kPack<T>.
template <typename T>
__device__ __forceinline__ void Unpack(const Words16& v,
                                       float (&out)[kPack<T>]) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
  T raw[kPack<T>];
  memcpy(raw, words, 16);
#pragma unroll
  for (int k = 0; k < kPack<T>; ++k) out[k] = Ld(raw + k);
}

// out[k] = Ld(p + k), k < kPack<T>. REQUIRES: Aligned16(p).
template <typename T>
__device__ __forceinline__ void LdPack(
    const T* p, float (&out)[kPack<T>],
    AccessSite site = AccessSite::current()) {
  Unpack<T>(Load16(p, site), out);
}

// St(p + k, in[k]), k < kPack<T>. REQUIRES: Aligned16(p).
template <typename T>
__device__ __forceinline__ void StPack(
    T* p, const float (&in)[kPack<T>],
    AccessSite site = AccessSite::current()) {
  T raw[kPack<T>];
#pragma unroll
  for (int k = 0; k < kPack<T>; ++k) St(raw + k, in[k]);
  uint32_t words[4];
  memcpy(words, raw, 16);
  Store16(p, Words16{words[0], words[1], words[2], words[3]}, site);
}

// 16 raw bytes from src to dst (global or shared memory).
// REQUIRES: Aligned16(dst) and Aligned16(src).
__device__ __forceinline__ void Copy16(
    void* dst, const void* src, AccessSite site = AccessSite::current()) {
  Store16(dst, Load16(src, site), site);
}

// n elements of one or more arrays indexed alike (a row of out, a and b),
// split for packed access: [0, head) and [tail(), n) element by element,
// the `packs` packs of kGroup elements between them packed, 16-byte aligned
// in every array.
template <int kGroup>
struct PackSplit {
  int64_t n, head, packs;
  __host__ __device__ int64_t tail() const { return head + packs * kGroup; }
};

// The split of n elements at first[0, n) and rest[0, n)...: the head takes
// `first` to a 16-byte boundary; packs only when every array is aligned
// there too, else none (head == n: all element by element, as when the
// arrays' alignments differ). A pack is kPack of the first array's type,
// so put the narrowest type first. Each T* must be aligned to sizeof(T).
template <typename T0, typename... Ts>
__host__ __device__ __forceinline__ PackSplit<kPack<T0>> SplitAligned(
    int64_t n, const T0* first, const Ts*... rest) {
  constexpr int kGroup = kPack<T0>;
  static_assert(((kGroup % kPack<Ts> == 0) && ...),
                "a pack of the first array must be whole packs of the rest");
  const int64_t misalign =
      static_cast<int64_t>(reinterpret_cast<uintptr_t>(first) & 15u) /
      static_cast<int64_t>(sizeof(T0));
  int64_t head = misalign == 0 ? 0 : kGroup - misalign;
  if (head >= n || !(Aligned16(rest + head) && ...)) return {n, n, 0};
  return {n, head, (n - head) / kGroup};
}

// Visits a split as one of `stride` cooperating threads, number `first`
// (< stride): the head elements first, first + stride, ...; then the packs
// numbered so; then the tail elements so. on_element(c) takes element c,
// on_pack(c) the pack starting at element c. The indices one thread visits
// ascend, and each element is visited by one thread, fixed by the split and
// the stride.
template <int kGroup, typename OnElement, typename OnPack>
__device__ __forceinline__ void ForOwned(const PackSplit<kGroup>& split,
                                         int64_t first, int64_t stride,
                                         OnElement&& on_element,
                                         OnPack&& on_pack) {
  for (int64_t c = first; c < split.head; c += stride) on_element(c);
  for (int64_t k = first; k < split.packs; k += stride) {
    on_pack(split.head + k * kGroup);
  }
  for (int64_t c = split.tail() + first; c < split.n; c += stride) {
    on_element(c);
  }
}

// ForOwned, with the packs read from x (a row of the split's first array)
// for on_pack(c, k, v): pack number k, starting at element c, as the 16
// bytes v read there. A thread loads kBatch of its packs before it hands
// on the first of them, so that it has that many loads in flight where
// one at a time leaves memory waiting while on_pack computes. Visits in
// ForOwned's order.
template <int kBatch, typename T, int kGroup, typename OnElement,
          typename OnPack>
__device__ __forceinline__ void ForOwnedLoaded(
    const PackSplit<kGroup>& split, const T* x, int64_t first, int64_t stride,
    OnElement&& on_element, OnPack&& on_pack,
    AccessSite site = AccessSite::current()) {
  for (int64_t c = first; c < split.head; c += stride) on_element(c);
  for (int64_t k0 = first; k0 < split.packs; k0 += kBatch * stride) {
    Words16 v[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int64_t k = k0 + b * stride;
      if (k < split.packs) v[b] = Load16(x + split.head + k * kGroup, site);
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int64_t k = k0 + b * stride;
      if (k < split.packs) on_pack(split.head + k * kGroup, k, v[b]);
    }
  }
  for (int64_t c = split.tail() + first; c < split.n; c += stride) {
    on_element(c);
  }
}

}  // namespace trainyard::engine::cuda

#endif  // TRAINYARD_ENGINE_CUDA_VEC16_CUH_
