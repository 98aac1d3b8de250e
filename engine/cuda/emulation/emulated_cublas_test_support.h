// Test support for the cuBLAS stand-in's tests (emulated_cublas_test.cc
// and its neighbours): DeviceMatrix, a column-major matrix in emulated
// device memory filled with seeded values, its ld padding watched; Lt, a
// cuBLASLt handle and matmul descriptor set up as a caller sets them, with
// the descriptors it creates destroyed with it; Expected, a product in
// double with a per-element bound on what an fp32 computation of it may
// differ by (emulated_cublas_test.cc derives the bounds). Bf16 values are
// stored and read with engine/core/bf16.h, not with the stand-in's
// conversions. Header-only; for tests; one thread.
#ifndef TRAINYARD_ENGINE_CUDA_EMULATION_EMULATED_CUBLAS_TEST_SUPPORT_H_
#define TRAINYARD_ENGINE_CUDA_EMULATION_EMULATED_CUBLAS_TEST_SUPPORT_H_

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numbers>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/bf16.h"
#include "gtest/gtest.h"

namespace trainyard::cuda_emulation::emulated_cublas_test {

inline constexpr double kU = 0x1p-24;     // fp32 unit roundoff
inline constexpr double kBf16U = 0x1p-8;  // bf16 unit roundoff

inline double Gamma(int64_t n) { return n * kU / (1 - n * kU); }

class DeviceMatrix {
 public:
  // Every element, ld padding included, uniform in [-scale, scale) from
  // `seed`, stored `offset` bytes past a 256-byte boundary.
  DeviceMatrix(cudaDataType type, int64_t rows, int64_t cols, int64_t ld,
               uint64_t seed, size_t offset = 0, float scale = 1)
      : type_(type), rows_(rows), cols_(cols), ld_(ld), offset_(offset) {
    const int64_t count = std::max<int64_t>(ld * cols, 1);
    bytes_ = static_cast<size_t>(count) * (type == CUDA_R_32F ? 4 : 2);
    EXPECT_EQ(cudaMalloc(&block_, bytes_ + offset), cudaSuccess);
    data_ = static_cast<char*>(block_) + offset;
    uint64_t state = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int64_t i = 0; i < count; ++i) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      const float unit = static_cast<float>(state >> 40) * 0x1p-24f;  // [0,1)
      Store(i, scale * (2 * unit - 1));
    }
    initial_.assign(data_, data_ + bytes_);
  }
  DeviceMatrix(const DeviceMatrix&) = delete;
  DeviceMatrix& operator=(const DeviceMatrix&) = delete;
  ~DeviceMatrix() { cudaFree(block_); }

  // The same values in a block of its own.
  DeviceMatrix Copy() const {
    DeviceMatrix copy(type_, rows_, cols_, ld_, 0, offset_);
    std::memcpy(copy.data_, data_, bytes_);
    copy.initial_ = initial_;
    return copy;
  }
  DeviceMatrix(DeviceMatrix&& other) noexcept { *this = std::move(other); }
  DeviceMatrix& operator=(DeviceMatrix&& other) noexcept {
    std::swap(type_, other.type_);
    std::swap(rows_, other.rows_);
    std::swap(cols_, other.cols_);
    std::swap(ld_, other.ld_);
    std::swap(offset_, other.offset_);
    std::swap(bytes_, other.bytes_);
    std::swap(block_, other.block_);
    std::swap(data_, other.data_);
    std::swap(initial_, other.initial_);
    return *this;
  }

  void* get() const { return data_; }
  cudaDataType type() const { return type_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  int64_t ld() const { return ld_; }
  float at(int64_t i, int64_t j) const { return Load(i + j * ld_); }
  void Set(int64_t i, int64_t j, float v) { Store(i + j * ld_, v); }

  // Whether the elements past `rows` in every column hold what they held
  // when the matrix was made.
  bool PaddingIntact() const {
    const size_t e = type_ == CUDA_R_32F ? 4 : 2;
    for (int64_t j = 0; j < cols_; ++j) {
      for (int64_t i = rows_; i < ld_; ++i) {
        const size_t at = static_cast<size_t>(i + j * ld_) * e;
        if (std::memcmp(data_ + at, initial_.data() + at, e) != 0) {
          return false;
        }
      }
    }
    return true;
  }

 private:
  float Load(int64_t index) const {
    if (type_ == CUDA_R_32F)
      return reinterpret_cast<const float*>(data_)[index];
    return engine::Bf16ToFloat(reinterpret_cast<const uint16_t*>(data_)[index]);
  }
  void Store(int64_t index, float v) {
    if (type_ == CUDA_R_32F) {
      reinterpret_cast<float*>(data_)[index] = v;
    } else {
      reinterpret_cast<uint16_t*>(data_)[index] = engine::FloatToBf16(v);
    }
  }

  cudaDataType type_ = CUDA_R_32F;
  int64_t rows_ = 0, cols_ = 0, ld_ = 0;
  size_t offset_ = 0, bytes_ = 0;
  void* block_ = nullptr;
  char* data_ = nullptr;
  std::vector<char> initial_;
};

// An m x n result (column-major, ld m) and per-element tolerances.
struct Expected {
  int64_t m = 0, n = 0;
  std::vector<double> want, tol;

  // Rounded once more, to a bf16 output.
  Expected RoundedTo(cudaDataType type) const {
    Expected out = *this;
    if (type != CUDA_R_16BF) return out;
    for (size_t i = 0; i < want.size(); ++i) {
      out.tol[i] += kBf16U * (std::abs(want[i]) + tol[i]);
    }
    return out;
  }

  static double GeluOf(double x) {
    const double s = std::sqrt(2 / std::numbers::pi);
    return 0.5 * x * (1 + std::tanh(s * (x + 0.044715 * x * x * x)));
  }
  static double GeluGradOf(double x) {
    const double s = std::sqrt(2 / std::numbers::pi);
    const double t = std::tanh(s * (x + 0.044715 * x * x * x));
    return 0.5 * (1 + t) +
           0.5 * x * (1 - t * t) * s * (1 + 3 * 0.044715 * x * x);
  }
  static double Cubic(double x) {
    const double a = std::abs(x);
    return 1 + a + a * a * a;
  }

  Expected Gelu() const {
    Expected out = *this;
    for (size_t i = 0; i < want.size(); ++i) {
      out.want[i] = GeluOf(want[i]);
      out.tol[i] = 1.13 * tol[i] + 32 * kU * Cubic(want[i]);
    }
    return out;
  }

  // this * gelu'(aux), elementwise.
  Expected TimesGeluGrad(const DeviceMatrix& aux) const {
    Expected out = *this;
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t i = 0; i < m; ++i) {
        const size_t e = static_cast<size_t>(i + j * m);
        const double x = aux.at(i, j), g = GeluGradOf(x);
        out.want[e] = want[e] * g;
        out.tol[e] = std::abs(g) * tol[e] +
                     std::abs(want[e]) * 64 * kU * Cubic(x) +
                     kU * std::abs(out.want[e]);
      }
    }
    return out;
  }
};

// op(A) op(B) + beta C (+ bias broadcast along rows) in double, with the
// bound gamma_{k+2} (sum |a b| + |beta c| + |bias|) of an fp32 computation.
inline Expected Product(const DeviceMatrix& a, bool trans_a,
                        const DeviceMatrix& b, bool trans_b, int64_t m,
                        int64_t n, int64_t k, float beta, const DeviceMatrix* c,
                        const DeviceMatrix* bias) {
  Expected out{m, n, std::vector<double>(m * n), std::vector<double>(m * n)};
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < m; ++i) {
      double sum = 0, magnitude = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double term =
            static_cast<double>(trans_a ? a.at(p, i) : a.at(i, p)) *
            (trans_b ? b.at(j, p) : b.at(p, j));
        sum += term;
        magnitude += std::abs(term);
      }
      if (beta != 0) {
        sum += static_cast<double>(beta) * c->at(i, j);
        magnitude += std::abs(static_cast<double>(beta) * c->at(i, j));
      }
      if (bias != nullptr) {
        sum += bias->at(i, 0);
        magnitude += std::abs(bias->at(i, 0));
      }
      out.want[i + j * m] = sum;
      out.tol[i + j * m] = Gamma(k + 2) * magnitude;
    }
  }
  return out;
}

inline void ExpectMatches(const DeviceMatrix& got, const Expected& want,
                          const char* what) {
  int misses = 0;
  for (int64_t j = 0; j < want.n; ++j) {
    for (int64_t i = 0; i < want.m && misses < 5; ++i) {
      const size_t e = static_cast<size_t>(i + j * want.m);
      const double diff = std::abs(got.at(i, j) - want.want[e]);
      if (!(diff <= want.tol[e])) {
        ADD_FAILURE() << what << "(" << i << ", " << j << "): got "
                      << got.at(i, j) << ", want " << want.want[e]
                      << " (tolerance " << want.tol[e] << ")";
        ++misses;
      }
    }
  }
}

// A cuBLASLt handle and a matmul descriptor (CUBLAS_COMPUTE_32F, fp32
// scale), and the layouts made through it.
class Lt {
 public:
  Lt() {
    EXPECT_EQ(cublasLtCreate(&handle_), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F),
              CUBLAS_STATUS_SUCCESS);
  }
  Lt(const Lt&) = delete;
  Lt& operator=(const Lt&) = delete;
  ~Lt() {
    for (cublasLtMatrixLayout_t l : layouts_) {
      EXPECT_EQ(cublasLtMatrixLayoutDestroy(l), CUBLAS_STATUS_SUCCESS);
    }
    EXPECT_EQ(cublasLtMatmulDescDestroy(desc_), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtDestroy(handle_), CUBLAS_STATUS_SUCCESS);
  }

  cublasLtHandle_t handle() const { return handle_; }
  cublasLtMatmulDesc_t desc() const { return desc_; }

  template <typename T>
  cublasStatus_t Set(cublasLtMatmulDescAttributes_t attr, T value) {
    return cublasLtMatmulDescSetAttribute(desc_, attr, &value, sizeof value);
  }
  void SetOps(bool trans_a, bool trans_b) {
    EXPECT_EQ(
        Set(CUBLASLT_MATMUL_DESC_TRANSA, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N),
        CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(
        Set(CUBLASLT_MATMUL_DESC_TRANSB, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N),
        CUBLAS_STATUS_SUCCESS);
  }

  cublasLtMatrixLayout_t Layout(cudaDataType type, int64_t rows, int64_t cols,
                                int64_t ld) {
    cublasLtMatrixLayout_t l = nullptr;
    EXPECT_EQ(cublasLtMatrixLayoutCreate(&l, type, rows, cols, ld),
              CUBLAS_STATUS_SUCCESS);
    layouts_.push_back(l);
    return l;
  }
  cublasLtMatrixLayout_t Layout(const DeviceMatrix& m) {
    return Layout(m.type(), m.rows(), m.cols(), m.ld());
  }

  // The heuristic with MAX_WORKSPACE_BYTES `workspace` and every
  // MIN_ALIGNMENT_*_BYTES `alignment`.
  cublasStatus_t Heuristic(cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                           cublasLtMatrixLayout_t c, uint64_t workspace,
                           uint32_t alignment,
                           cublasLtMatmulHeuristicResult_t* result) {
    cublasLtMatmulPreference_t pref = nullptr;
    EXPECT_EQ(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatmulPreferenceSetAttribute(
                  pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                  sizeof workspace),
              CUBLAS_STATUS_SUCCESS);
    for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
      EXPECT_EQ(cublasLtMatmulPreferenceSetAttribute(pref, attr, &alignment,
                                                     sizeof alignment),
                CUBLAS_STATUS_SUCCESS);
    }
    int found = 0;
    const cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(
        handle_, desc_, a, b, c, c, pref, 1, result, &found);
    EXPECT_EQ(cublasLtMatmulPreferenceDestroy(pref), CUBLAS_STATUS_SUCCESS);
    if (s == CUBLAS_STATUS_SUCCESS) {
      EXPECT_EQ(found, 1);
    }
    return s;
  }

  // D = C in place, with the layouts of a, b and c.
  cublasStatus_t Matmul(cublasLtMatrixLayout_t la, const void* a,
                        cublasLtMatrixLayout_t lb, const void* b,
                        cublasLtMatrixLayout_t lc, void* c, float beta,
                        const cublasLtMatmulAlgo_t* algo,
                        void* workspace = nullptr, size_t bytes = 0) {
    const float alpha = 1;
    return cublasLtMatmul(handle_, desc_, &alpha, a, la, b, lb, &beta, c, lc, c,
                          lc, algo, workspace, bytes, nullptr);
  }

  // The heuristic (no workspace, 256-byte alignment), then the matmul.
  cublasStatus_t Run(const DeviceMatrix& a, const DeviceMatrix& b,
                     DeviceMatrix& c, float beta) {
    cublasLtMatrixLayout_t la = Layout(a), lb = Layout(b), lc = Layout(c);
    cublasLtMatmulHeuristicResult_t result = {};
    if (const cublasStatus_t s = Heuristic(la, lb, lc, 0, 256, &result);
        s != CUBLAS_STATUS_SUCCESS) {
      return s;
    }
    return Matmul(la, a.get(), lb, b.get(), lc, c.get(), beta, &result.algo);
  }

 private:
  cublasLtHandle_t handle_ = nullptr;
  cublasLtMatmulDesc_t desc_ = nullptr;
  std::vector<cublasLtMatrixLayout_t> layouts_;
};

}  // namespace trainyard::cuda_emulation::emulated_cublas_test

#endif  // TRAINYARD_ENGINE_CUDA_EMULATION_EMULATED_CUBLAS_TEST_SUPPORT_H_
