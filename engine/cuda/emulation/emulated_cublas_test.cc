// The host stand-in for cuBLASLt and classic cuBLAS (cublas_host.cc),
// driven through the shim headers as the project's code drives the real
// libraries: products for every transpose combination, leading dimensions
// past the rows, beta 0 and 1, bf16 and fp32, the bias and GELU epilogues,
// against a double-precision reference; then the rejections the cuBLAS
// documentation promises, each with its documented status.
// emulated_lt_gemm_test.cc runs engine/cuda/lt_gemm.cc itself on it.
//
// Tolerances. The reference sums in double. An fp32 dot product of k
// terms, in any order, is within gamma_k * sum |a_p b_p| of the exact one
// (Higham 3.1, products rounded or not); adding beta C and the bias adds
// two roundings, so the fp32 pre-activation v is within
// gamma_{k+2} * (sum |a_p b_p| + |beta c| + |bias|). GELU then moves that
// error by at most max |gelu'| < 1.13, and its own fp32 evaluation (fewer
// than ten roundings of terms bounded by 1 + |x| + |x|^3, tanhf within 2
// ulp) adds at most 32 u (1 + |x| + |x|^3), a margin of 3 over the count;
// gelu' likewise within 64 u (1 + |x| + |x|^3). Rounding to a bf16 output
// adds 2^-8 of the value. These bounds are tight enough to tell GPT-2's
// tanh GELU from the erf form (4e-4 apart at x = -3).
#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>

#include "engine/cuda/emulation/cublas_host.h"
#include "engine/cuda/emulation/emulated_cublas_test_support.h"
#include "gtest/gtest.h"

namespace trainyard::cuda_emulation {
namespace {

using emulated_cublas_test::DeviceMatrix;
using emulated_cublas_test::Expected;
using emulated_cublas_test::ExpectMatches;
using emulated_cublas_test::Lt;
using emulated_cublas_test::Product;

struct Shape {
  bool trans_a, trans_b;
  int64_t m, n, k;
};

// A's, B's and C's stored shapes for a problem, each with ld rows + pad.
DeviceMatrix MatrixA(const Shape& s, cudaDataType type, int64_t pad = 3) {
  const int64_t rows = s.trans_a ? s.k : s.m;
  return DeviceMatrix(type, rows, s.trans_a ? s.m : s.k, rows + pad, 11);
}
DeviceMatrix MatrixB(const Shape& s, cudaDataType type, int64_t pad = 2) {
  const int64_t rows = s.trans_b ? s.n : s.k;
  return DeviceMatrix(type, rows, s.trans_b ? s.k : s.n, rows + pad, 12);
}

class LtProductTest
    : public ::testing::TestWithParam<
          std::tuple<bool, bool, cudaDataType, cudaDataType, float>> {};

TEST_P(LtProductTest, MatchesTheReference) {
  const auto [trans_a, trans_b, ab, cd, beta] = GetParam();
  const Shape s{trans_a, trans_b, 13, 7, 37};
  DeviceMatrix a = MatrixA(s, ab), b = MatrixB(s, ab);
  DeviceMatrix c(cd, s.m, s.n, s.m + 5, 13);  // C == D, in place
  const DeviceMatrix c_before = c.Copy();
  Lt lt;
  lt.SetOps(trans_a, trans_b);
  if (ab == CUDA_R_32F && cd == CUDA_R_16BF) {
    // Not in the cuBLAS guide's table for CUBLAS_COMPUTE_32F.
    EXPECT_EQ(lt.Run(a, b, c, beta), CUBLAS_STATUS_NOT_SUPPORTED);
    return;
  }
  ASSERT_EQ(lt.Run(a, b, c, beta), CUBLAS_STATUS_SUCCESS);
  const Expected want =
      Product(a, trans_a, b, trans_b, s.m, s.n, s.k, beta, &c_before, nullptr)
          .RoundedTo(cd);
  ExpectMatches(c, want, "D");
  EXPECT_TRUE(c.PaddingIntact()) << "D written past its rows";
}

using ProductParam = std::tuple<bool, bool, cudaDataType, cudaDataType, float>;

std::string ProductName(const ::testing::TestParamInfo<ProductParam>& info) {
  const auto [ta, tb, ab, cd, beta] = info.param;
  return std::string(ta ? "T" : "N") + (tb ? "T" : "N") +
         (ab == CUDA_R_16BF ? "_bf16" : "_fp32") +
         (cd == CUDA_R_16BF ? "_to_bf16" : "_to_fp32") +
         (beta != 0 ? "_beta1" : "_beta0");
}

INSTANTIATE_TEST_SUITE_P(
    TransposesTypesBeta, LtProductTest,
    ::testing::Combine(::testing::Bool(), ::testing::Bool(),
                       ::testing::Values(CUDA_R_32F, CUDA_R_16BF),
                       ::testing::Values(CUDA_R_32F, CUDA_R_16BF),
                       ::testing::Values(0.f, 1.f)),
    ProductName);

TEST(LtProductTest, BetaZeroDoesNotReadC) {
  const Shape s{false, true, 4, 3, 5};
  DeviceMatrix a = MatrixA(s, CUDA_R_32F), b = MatrixB(s, CUDA_R_32F);
  DeviceMatrix c(CUDA_R_32F, 4, 3, 4, 1);
  for (int64_t j = 0; j < 3; ++j) c.Set(1, j, std::nanf(""));
  Lt lt;
  lt.SetOps(false, true);
  ASSERT_EQ(lt.Run(a, b, c, 0), CUBLAS_STATUS_SUCCESS);
  ExpectMatches(c, Product(a, false, b, true, 4, 3, 5, 0, nullptr, nullptr),
                "D");
}

class LtEpilogueTest : public ::testing::TestWithParam<cudaDataType> {};

TEST_P(LtEpilogueTest, BiasIsAddedToEveryColumn) {
  const cudaDataType t = GetParam();
  const Shape s{true, false, 24, 5, 19};
  DeviceMatrix a = MatrixA(s, t), b = MatrixB(s, t);
  DeviceMatrix d(t, s.m, s.n, s.m, 3), bias(t, s.m, 1, s.m, 4);
  Lt lt;
  lt.SetOps(true, false);
  lt.Set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
  lt.Set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias.get());
  ASSERT_EQ(lt.Run(a, b, d, 0), CUBLAS_STATUS_SUCCESS);
  ExpectMatches(
      d,
      Product(a, true, b, false, s.m, s.n, s.k, 0, nullptr, &bias).RoundedTo(t),
      "D");
}

TEST_P(LtEpilogueTest, GeluAuxBiasWritesThePreActivationAndItsGelu) {
  const cudaDataType t = GetParam();
  for (bool with_bias : {false, true}) {
    const Shape s{true, false, 16, 6, 40};
    DeviceMatrix a = MatrixA(s, t), b = MatrixB(s, t);
    DeviceMatrix d(t, s.m, s.n, s.m, 3), bias(t, s.m, 1, s.m, 4);
    DeviceMatrix aux(t, s.m, s.n, 24, 5);  // aux ld 24: a multiple of 8
    Lt lt;
    lt.SetOps(true, false);
    lt.Set(CUBLASLT_MATMUL_DESC_EPILOGUE, with_bias
                                              ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                                              : CUBLASLT_EPILOGUE_GELU_AUX);
    if (with_bias) lt.Set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias.get());
    lt.Set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux.get());
    lt.Set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t{24});
    ASSERT_EQ(lt.Run(a, b, d, 0), CUBLAS_STATUS_SUCCESS);
    const Expected pre = Product(a, true, b, false, s.m, s.n, s.k, 0, nullptr,
                                 with_bias ? &bias : nullptr);
    ExpectMatches(aux, pre.RoundedTo(t), "aux");
    ExpectMatches(d, pre.Gelu().RoundedTo(t), "D");
    EXPECT_TRUE(aux.PaddingIntact()) << "aux written past its rows";
  }
}

TEST_P(LtEpilogueTest, DGeluMultipliesByTheGeluGradientOfAux) {
  const cudaDataType t = GetParam();
  const Shape s{false, false, 8, 9, 21};
  DeviceMatrix a = MatrixA(s, t), b = MatrixB(s, t);
  DeviceMatrix d(t, s.m, s.n, s.m, 3);
  DeviceMatrix aux(t, s.m, s.n, 16, 5, /*offset=*/0, /*scale=*/3);
  Lt lt;
  lt.Set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_DGELU);
  lt.Set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux.get());
  lt.Set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t{16});
  ASSERT_EQ(lt.Run(a, b, d, 0), CUBLAS_STATUS_SUCCESS);
  ExpectMatches(d,
                Product(a, false, b, false, s.m, s.n, s.k, 0, nullptr, nullptr)
                    .TimesGeluGrad(aux)
                    .RoundedTo(t),
                "D");
}

INSTANTIATE_TEST_SUITE_P(Types, LtEpilogueTest,
                         ::testing::Values(CUDA_R_32F, CUDA_R_16BF),
                         [](const auto& info) {
                           return std::string(
                               info.param == CUDA_R_16BF ? "bf16" : "fp32");
                         });

// GPT-2's tanh form, not the erf form (-0.0040497 at -3).
TEST(LtGeluTest, IsTheTanhForm) {
  EXPECT_NEAR(GeluTanh(-3.f), -0.0036373, 1e-6);
  EXPECT_NEAR(GeluTanh(1.f), 0.8411920, 1e-6);
}

}  // namespace
}  // namespace trainyard::cuda_emulation
