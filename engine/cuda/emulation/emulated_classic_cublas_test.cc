// Classic cuBLAS's stand-in (cublas_classic_host.cc): cublasSgemm and
// cublasGemmEx against the double-precision reference (tolerances as
// emulated_cublas_test.cc derives them), and the refusals the cuBLAS guide
// lists for them and for the handle calls.
#include <cstdint>

#include "engine/cuda/emulation/emulated_cublas_test_support.h"
#include "gtest/gtest.h"

namespace trainyard::cuda_emulation {
namespace {

using emulated_cublas_test::DeviceMatrix;
using emulated_cublas_test::ExpectMatches;
using emulated_cublas_test::Product;

constexpr cublasStatus_t kOk = CUBLAS_STATUS_SUCCESS;
constexpr cublasStatus_t kInvalid = CUBLAS_STATUS_INVALID_VALUE;

class Classic {
 public:
  Classic() { EXPECT_EQ(cublasCreate(&handle_), kOk); }
  ~Classic() { EXPECT_EQ(cublasDestroy(handle_), kOk); }
  Classic(const Classic&) = delete;
  Classic& operator=(const Classic&) = delete;
  cublasHandle_t get() const { return handle_; }

 private:
  cublasHandle_t handle_ = nullptr;
};

cublasOperation_t Op(bool trans) { return trans ? CUBLAS_OP_T : CUBLAS_OP_N; }

TEST(ClassicCublasTest, SgemmMatchesTheReferenceForEveryTranspose) {
  constexpr int m = 6, n = 5, k = 17;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      DeviceMatrix a(CUDA_R_32F, ta ? k : m, ta ? m : k, (ta ? k : m) + 2, 1);
      DeviceMatrix b(CUDA_R_32F, tb ? n : k, tb ? k : n, (tb ? n : k) + 1, 2);
      DeviceMatrix c(CUDA_R_32F, m, n, m + 3, 3);
      const DeviceMatrix c_before = c.Copy();
      Classic h;
      ASSERT_EQ(cublasSetMathMode(h.get(), CUBLAS_PEDANTIC_MATH), kOk);
      const float alpha = 1, beta = 1;
      ASSERT_EQ(cublasSgemm(h.get(), Op(ta), Op(tb), m, n, k, &alpha,
                            static_cast<const float*>(a.get()), a.ld(),
                            static_cast<const float*>(b.get()), b.ld(), &beta,
                            static_cast<float*>(c.get()), c.ld()),
                kOk);
      ExpectMatches(c, Product(a, ta, b, tb, m, n, k, 1, &c_before, nullptr),
                    "C");
      EXPECT_TRUE(c.PaddingIntact());
    }
  }
}

TEST(ClassicCublasTest, GemmExTakesBf16InputsWithABf16OrFp32Output) {
  constexpr int m = 9, n = 4, k = 33;
  for (cudaDataType c_type : {CUDA_R_16BF, CUDA_R_32F}) {
    DeviceMatrix a(CUDA_R_16BF, k, m, k, 4), b(CUDA_R_16BF, k, n, k, 5);
    DeviceMatrix c(c_type, m, n, m, 6);
    Classic h;
    const float alpha = 1, beta = 0;
    ASSERT_EQ(cublasGemmEx(h.get(), CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha,
                           a.get(), CUDA_R_16BF, k, b.get(), CUDA_R_16BF, k,
                           &beta, c.get(), c_type, m, CUBLAS_COMPUTE_32F,
                           CUBLAS_GEMM_DEFAULT),
              kOk);
    ExpectMatches(c,
                  Product(a, true, b, false, m, n, k, 0, nullptr, nullptr)
                      .RoundedTo(c_type),
                  "C");
  }
}

TEST(ClassicCublasTest, RefusesWhatTheGuideRefuses) {
  Classic h;
  DeviceMatrix a(CUDA_R_32F, 8, 8, 8, 1), b(CUDA_R_32F, 8, 8, 8, 2),
      c(CUDA_R_32F, 8, 8, 8, 3);
  const auto* pa = static_cast<const float*>(a.get());
  const auto* pb = static_cast<const float*>(b.get());
  auto* pc = static_cast<float*>(c.get());
  const float one = 1;
  const auto sgemm = [&](cublasOperation_t ta, int m, int lda, int ldc,
                         const float* alpha) {
    return cublasSgemm(h.get(), ta, CUBLAS_OP_N, m, 8, 8, alpha, pa, lda, pb, 8,
                       &one, pc, ldc);
  };
  EXPECT_EQ(sgemm(CUBLAS_OP_N, 8, 7, 8, &one), kInvalid);  // lda < m
  EXPECT_EQ(sgemm(CUBLAS_OP_N, 8, 8, 7, &one), kInvalid);  // ldc < m
  EXPECT_EQ(sgemm(CUBLAS_OP_N, -1, 8, 8, &one), kInvalid);
  EXPECT_EQ(sgemm(static_cast<cublasOperation_t>(7), 8, 8, 8, &one), kInvalid);
  EXPECT_EQ(sgemm(CUBLAS_OP_N, 8, 8, 8, nullptr), kInvalid);
  EXPECT_EQ(cublasSgemm(h.get(), CUBLAS_OP_N, CUBLAS_OP_N, 8, 8, 8, &one, pa, 8,
                        pb, 8, &one, const_cast<float*>(pa), 8),
            kInvalid);  // C is A
  EXPECT_EQ(sgemm(CUBLAS_OP_N, 8, 8, 8, &one), kOk);

  const auto gemm_ex = [&](cudaDataType at, cudaDataType bt, cudaDataType ct,
                           int algo) {
    return cublasGemmEx(h.get(), CUBLAS_OP_N, CUBLAS_OP_N, 8, 8, 8, &one,
                        a.get(), at, 8, b.get(), bt, 8, &one, c.get(), ct, 8,
                        CUBLAS_COMPUTE_32F,
                        static_cast<cublasGemmAlgo_t>(algo));
  };
  EXPECT_EQ(gemm_ex(CUDA_R_32F, CUDA_R_32F, CUDA_R_16BF, -1),
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(gemm_ex(CUDA_R_16BF, CUDA_R_32F, CUDA_R_32F, -1),
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(gemm_ex(CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, 50),
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(gemm_ex(CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, -1), kOk);
}

TEST(ClassicCublasTest, HandleCalls) {
  Classic h;
  EXPECT_EQ(cublasSetMathMode(h.get(), static_cast<cublasMath_t>(5)), kInvalid);
  EXPECT_EQ(cublasSetMathMode(
                h.get(), static_cast<cublasMath_t>(
                             CUBLAS_PEDANTIC_MATH |
                             CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)),
            kOk);
  DeviceMatrix ws(CUDA_R_32F, 1024, 1, 1024, 1);
  char* base = static_cast<char*>(ws.get());
  EXPECT_EQ(cublasSetWorkspace(h.get(), base + 128, 1024), kInvalid);
  EXPECT_EQ(cublasSetWorkspace(h.get(), base, 4096), kOk);
  EXPECT_EQ(cublasSetStream(h.get(), nullptr), kOk);

  cublasHandle_t dead = nullptr;
  ASSERT_EQ(cublasCreate(&dead), kOk);
  ASSERT_EQ(cublasDestroy(dead), kOk);
  EXPECT_EQ(cublasDestroy(dead), CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_EQ(cublasSetStream(dead, nullptr), CUBLAS_STATUS_NOT_INITIALIZED);
}

// TF32 rounds fp32 inputs on a GPU; the emulation refuses rather than
// compute more precisely than the GPU would.
TEST(ClassicCublasTest, Tf32MathIsNotEmulated) {
  Classic h;
  ASSERT_EQ(cublasSetMathMode(h.get(), CUBLAS_TF32_TENSOR_OP_MATH), kOk);
  DeviceMatrix a(CUDA_R_32F, 4, 4, 4, 1), c(CUDA_R_32F, 4, 4, 4, 2);
  const float one = 1;
  const auto* pa = static_cast<const float*>(a.get());
  EXPECT_EQ(cublasSgemm(h.get(), CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, pa, 4,
                        pa, 4, &one, static_cast<float*>(c.get()), 4),
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(cublasGemmEx(h.get(), CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one,
                         a.get(), CUDA_R_32F, 4, a.get(), CUDA_R_32F, 4, &one,
                         c.get(), CUDA_R_32F, 4, CUBLAS_COMPUTE_32F_PEDANTIC,
                         CUBLAS_GEMM_DEFAULT),
            kOk);
}

}  // namespace
}  // namespace trainyard::cuda_emulation
