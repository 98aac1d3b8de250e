// nvcuda::wmma for the host emulation of CUDA kernels
// (cuda_include/mma.h includes this): 16x16x16 fragments, bf16 matrix_a and
// matrix_b in row or column major, fp32 accumulators. A fragment is
// warp-wide and its element layout opaque, so the emulation keeps the
// whole 16x16 tile in lane 0's fragment object and lane 0 alone carries
// out each operation when it reaches it; the other lanes' calls are only
// checked (block_runner.h: 32-byte aligned pointers, leading dimensions a
// multiple of 16 bytes, every lane of the warp making the same calls).
// Because lane 0 works when it arrives, a missing __syncwarp before or
// after a wmma operation shows up as wrong data in some thread order.
// mma_sync sums each element's 16 products in ascending k in fp32; the
// tensor cores' own order and rounding are not reproduced. Other shapes,
// element types and element access (fragment::x) fail to compile.
// Thread-safety: as any device code.
#ifndef TRAINYARD_ENGINE_CUDA_EMULATION_WMMA_H_
#define TRAINYARD_ENGINE_CUDA_EMULATION_WMMA_H_

#include <cstdint>
#include <cstring>
#include <source_location>
#include <type_traits>

#include "engine/cuda/emulation/bf16.h"
#include "engine/cuda/emulation/block_runner.h"

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
class fragment {
  static_assert(M == 16 && N == 16 && K == 16,
                "the CUDA emulation has 16x16x16 wmma fragments only");
  static_assert(std::is_same_v<Use, accumulator>
                    ? std::is_same_v<T, float> && std::is_void_v<Layout>
                    : std::is_same_v<T, __nv_bfloat16> &&
                          (std::is_same_v<Layout, row_major> ||
                           std::is_same_v<Layout, col_major>),
                "the CUDA emulation has bf16 A/B and fp32 accumulator "
                "fragments only");

 public:
  float emulated[16][16];  // (row, column); meaningful in lane 0 only
};

namespace emulation_detail {

inline uint64_t FloatBits(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return b;
}

}  // namespace emulation_detail

template <typename Use, typename T, typename Layout>
void fill_fragment(
    fragment<Use, 16, 16, 16, T, Layout>& f, float v,
    std::source_location site = std::source_location::current()) {
  if (!::trainyard::cuda_emulation::WarpMatrixOp("fill_fragment", nullptr, 0, 0,
                                                 emulation_detail::FloatBits(v),
                                                 site)) {
    return;
  }
  for (auto& row : f.emulated) {
    for (float& e : row) e = v;
  }
}

template <typename Use, typename Layout>
void load_matrix_sync(
    fragment<Use, 16, 16, 16, __nv_bfloat16, Layout>& f, const __nv_bfloat16* p,
    unsigned ldm, std::source_location site = std::source_location::current()) {
  constexpr bool kRowMajor = std::is_same_v<Layout, row_major>;
  if (!::trainyard::cuda_emulation::WarpMatrixOp(
          "load_matrix_sync", p, ldm, sizeof(__nv_bfloat16), kRowMajor, site)) {
    return;
  }
  for (unsigned r = 0; r < 16; ++r) {
    for (unsigned c = 0; c < 16; ++c) {
      f.emulated[r][c] =
          __bfloat162float(kRowMajor ? p[r * ldm + c] : p[c * ldm + r]);
    }
  }
}

inline void load_matrix_sync(
    fragment<accumulator, 16, 16, 16, float>& f, const float* p, unsigned ldm,
    layout_t layout,
    std::source_location site = std::source_location::current()) {
  if (!::trainyard::cuda_emulation::WarpMatrixOp("load_matrix_sync", p, ldm,
                                                 sizeof(float), layout, site)) {
    return;
  }
  for (unsigned r = 0; r < 16; ++r) {
    for (unsigned c = 0; c < 16; ++c) {
      f.emulated[r][c] =
          layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r];
    }
  }
}

inline void store_matrix_sync(
    float* p, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ldm,
    layout_t layout,
    std::source_location site = std::source_location::current()) {
  if (!::trainyard::cuda_emulation::WarpMatrixOp("store_matrix_sync", p, ldm,
                                                 sizeof(float), layout, site)) {
    return;
  }
  for (unsigned r = 0; r < 16; ++r) {
    for (unsigned c = 0; c < 16; ++c) {
      (layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r]) =
          f.emulated[r][c];
    }
  }
}

// d = a b + c; d may be c.
template <typename LayoutA, typename LayoutB>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d,
              const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LayoutA>& a,
              const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LayoutB>& b,
              const fragment<accumulator, 16, 16, 16, float>& c,
              std::source_location site = std::source_location::current()) {
  if (!::trainyard::cuda_emulation::WarpMatrixOp("mma_sync", nullptr, 0, 0, 0,
                                                 site)) {
    return;
  }
  float out[16][16];
  for (int r = 0; r < 16; ++r) {
    for (int n = 0; n < 16; ++n) {
      float s = c.emulated[r][n];
      for (int k = 0; k < 16; ++k) s += a.emulated[r][k] * b.emulated[k][n];
      out[r][n] = s;
    }
  }
  std::memcpy(d.emulated, out, sizeof out);
}

}  // namespace nvcuda::wmma

#endif  // TRAINYARD_ENGINE_CUDA_EMULATION_WMMA_H_
