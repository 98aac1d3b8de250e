// Host buffers and comparisons for the tests of emulated kernels: a
// Guarded<T> holds n values between two guard zones of a known byte, so a
// kernel writing outside its output is caught, optionally `offset`
// elements past a 16-byte boundary (the guard grows by as much), so a
// kernel meets a misaligned base; Activations holds a tensor
// as the kernels store it (bf16 or fp32); Inputs draws seeded values the
// kernels read exactly; SameBits and ExpectWithin compare results, bitwise
// or within per-element bounds. Bounds use gamma_n = n u / (1 - n u), the
// Higham bound on n fp32 roundings (u = 2^-24). Header-only; for tests; a
// buffer is used by one thread at a time.
#ifndef TRAINYARD_ENGINE_CUDA_EMULATION_GUARDED_BUFFERS_H_
#define TRAINYARD_ENGINE_CUDA_EMULATION_GUARDED_BUFFERS_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/core/bf16.h"
#include "engine/cpu/test_inputs.h"
#include "engine/cuda/test_tolerances.h"
#include "gtest/gtest.h"

namespace trainyard::engine::emulation_test {

inline constexpr double kU = 0x1p-24;     // fp32 unit roundoff
inline constexpr double kBf16U = 0x1p-8;  // bf16 unit roundoff
inline constexpr int64_t kGuard = 64;     // guard elements on each side
inline constexpr unsigned char kGuardByte = 0xA5;

using cuda_test::Gamma;  // the Higham bound on an n-term fp32 sum

// How many roundings a term of a column sum (column_sums.cuh) over `rows`
// rows goes through: at most ceil(rows / 32) lane adds, 32 lane-total
// adds, 32 split adds and the final add onto the output.
inline int64_t ColumnSumDepth(int64_t rows) { return (rows + 31) / 32 + 65; }

// n values of T between two guard zones, the first value `offset`
// elements past a 16-byte boundary (std::vector's storage is 16-byte
// aligned on the hosts we build on: checked).
template <typename T>
class Guarded {
 public:
  explicit Guarded(const std::vector<T>& values, int64_t offset = 0)
      : n_(values.size()),
        front_(kGuard + offset),
        all_(values.size() + 2 * kGuard + offset) {
    std::memset(static_cast<void*>(all_.data()), kGuardByte,
                all_.size() * sizeof(T));
    std::copy(values.begin(), values.end(), all_.begin() + front_);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(all_.data()) % 16, 0u);
  }
  T* get() { return all_.data() + front_; }
  std::vector<T> values() const {
    return std::vector<T>(all_.begin() + front_, all_.begin() + front_ + n_);
  }
  bool GuardsIntact() const {
    const auto* bytes = reinterpret_cast<const unsigned char*>(all_.data());
    const size_t front = front_ * sizeof(T), size = all_.size() * sizeof(T);
    for (size_t b = 0; b < front; ++b) {
      if (bytes[b] != kGuardByte) return false;
    }
    for (size_t b = front + n_ * sizeof(T); b < size; ++b) {
      if (bytes[b] != kGuardByte) return false;
    }
    return true;
  }

 private:
  size_t n_;
  int64_t front_;  // elements before the first value
  std::vector<T> all_;
};

// An activation tensor stored as the kernels' T: bf16 or fp32, `offset`
// elements past a 16-byte boundary.
class Activations {
 public:
  Activations(const std::vector<float>& values, bool bf16, int64_t offset = 0)
      : bf16_(bf16),
        f32_(bf16 ? std::vector<float>() : values, offset),
        b16_(bf16 ? ToBf16(values) : std::vector<uint16_t>(), offset) {}
  void* get() { return bf16_ ? static_cast<void*>(b16_.get()) : f32_.get(); }
  // The stored values, widened to fp32.
  std::vector<float> values() const {
    if (!bf16_) return f32_.values();
    const std::vector<uint16_t> h = b16_.values();
    std::vector<float> out(h.size());
    Bf16ToFloats(h.data(), static_cast<int64_t>(h.size()), out.data());
    return out;
  }
  bool GuardsIntact() const {
    return bf16_ ? b16_.GuardsIntact() : f32_.GuardsIntact();
  }

 private:
  static std::vector<uint16_t> ToBf16(const std::vector<float>& v) {
    std::vector<uint16_t> out(v.size());
    FloatsToBf16(v.data(), static_cast<int64_t>(v.size()), out.data());
    return out;
  }
  bool bf16_;
  Guarded<float> f32_;
  Guarded<uint16_t> b16_;
};

// Random values in [lo, hi), rounded to bf16 when bf16: exactly what the
// kernels will read.
inline std::vector<float> Inputs(int64_t n, uint64_t seed, bool bf16,
                                 float lo = -1, float hi = 1) {
  std::vector<float> v = Random(n, seed, lo, hi);
  if (bf16) {
    for (float& x : v) x = RoundToBf16(x);
  }
  return v;
}

template <typename T>
bool SameBits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// got[i] and want[i] bitwise alike for every i, a NaN matching any NaN
// (CUDA rounds every NaN to one canonical bf16 NaN, the host keeps its
// payload); reports the first few differences.
inline void ExpectBitwise(const std::vector<float>& got,
                          const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int misses = 0;
  for (size_t i = 0; i < got.size() && misses < 5; ++i) {
    if (std::isnan(got[i]) && std::isnan(want[i])) continue;
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want "
                    << want[i] << " bitwise";
      ++misses;
    }
  }
}

using cuda_test::ExpectWithin;

}  // namespace trainyard::engine::emulation_test

#endif  // TRAINYARD_ENGINE_CUDA_EMULATION_GUARDED_BUFFERS_H_
