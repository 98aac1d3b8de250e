// What the cuBLAS stand-in must refuse, each with the status the cuBLAS
// documentation gives (cublas_host.cc lists the sources), and classic
// cuBLAS's products and refusals. Every refusal also prints its reason to
// stderr; the lines this test provokes are expected.
#include <cstdint>
#include <string>

#include "engine/cuda/emulation/emulated_cublas_test_support.h"
#include "gtest/gtest.h"

namespace trainyard::cuda_emulation {
namespace {

using emulated_cublas_test::DeviceMatrix;
using emulated_cublas_test::ExpectMatches;
using emulated_cublas_test::Lt;
using emulated_cublas_test::Product;

constexpr cublasStatus_t kOk = CUBLAS_STATUS_SUCCESS;
constexpr cublasStatus_t kInvalid = CUBLAS_STATUS_INVALID_VALUE;
constexpr cublasStatus_t kNotSupported = CUBLAS_STATUS_NOT_SUPPORTED;

// An m x k by k x n product, no transposes, its matrices 256-byte aligned
// plus `offset` bytes, C of ld m + c_pad.
struct Problem {
  Problem(cudaDataType ab, cudaDataType cd, int64_t m, int64_t n, int64_t k,
          size_t offset = 0, int64_t c_pad = 0)
      : a(ab, m, k, m, 1, offset),
        b(ab, k, n, k, 2, offset),
        c(cd, m, n, m + c_pad, 3, offset) {}
  DeviceMatrix a, b, c;
};

cublasStatus_t HeuristicFor(Lt& lt, const Problem& p, uint64_t workspace = 0,
                            uint32_t alignment = 256,
                            cublasLtMatmulHeuristicResult_t* out = nullptr) {
  cublasLtMatmulHeuristicResult_t result = {};
  return lt.Heuristic(lt.Layout(p.a), lt.Layout(p.b), lt.Layout(p.c), workspace,
                      alignment, out != nullptr ? out : &result);
}

TEST(LtRejectionTest, SetAttributeOfTheWrongSizeOrNoBufferIsInvalid) {
  Lt lt;
  const int64_t wide_op = CUBLAS_OP_T;  // TRANSA is an int32_t
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(
                lt.desc(), CUBLASLT_MATMUL_DESC_TRANSA, &wide_op, 8),
            kInvalid);
  EXPECT_EQ(lt.Set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int32_t{16}),
            kInvalid);  // int64_t
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(
                lt.desc(), CUBLASLT_MATMUL_DESC_TRANSA, nullptr, 4),
            kInvalid);
  EXPECT_EQ(lt.Set(static_cast<cublasLtMatmulDescAttributes_t>(9), int32_t{0}),
            kInvalid);  // no attribute 9
  EXPECT_EQ(lt.Set(CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T), kOk);

  cublasLtMatmulPreference_t pref = nullptr;
  ASSERT_EQ(cublasLtMatmulPreferenceCreate(&pref), kOk);
  const uint64_t wide = 16;
  const uint32_t narrow = 16;
  EXPECT_EQ(cublasLtMatmulPreferenceSetAttribute(
                pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &wide, 8),
            kInvalid);
  EXPECT_EQ(cublasLtMatmulPreferenceSetAttribute(
                pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &narrow, 4),
            kInvalid);
  EXPECT_EQ(cublasLtMatmulPreferenceDestroy(pref), kOk);
}

TEST(LtRejectionTest, LayoutsThatDisagreeOnMNKAreInvalid) {
  Lt lt;
  Problem p(CUDA_R_32F, CUDA_R_32F, 8, 6, 5);
  cublasLtMatmulHeuristicResult_t result = {};
  // B 4 x 6: its k is not A's 5.
  EXPECT_EQ(lt.Heuristic(lt.Layout(p.a), lt.Layout(CUDA_R_32F, 4, 6, 4),
                         lt.Layout(p.c), 0, 256, &result),
            kInvalid);
  // A 8 x 5 taken transposed is 5 x 8: its m is not D's 8.
  lt.SetOps(true, false);
  EXPECT_EQ(HeuristicFor(lt, p), kInvalid);
  EXPECT_EQ(lt.Matmul(lt.Layout(p.a), p.a.get(), lt.Layout(p.b), p.b.get(),
                      lt.Layout(p.c), p.c.get(), 0, nullptr),
            kInvalid);
  // C and D of different shapes.
  lt.SetOps(false, false);
  const float one = 1, zero = 0;
  DeviceMatrix d(CUDA_R_32F, 8, 7, 8, 4);
  EXPECT_EQ(cublasLtMatmul(lt.handle(), lt.desc(), &one, p.a.get(),
                           lt.Layout(p.a), p.b.get(), lt.Layout(p.b), &zero,
                           p.c.get(), lt.Layout(p.c), d.get(), lt.Layout(d),
                           nullptr, nullptr, 0, nullptr),
            kInvalid);
}

TEST(LtRejectionTest, LdBelowRowsIsInvalid) {
  Lt lt;
  Problem p(CUDA_R_32F, CUDA_R_32F, 8, 6, 5);
  cublasLtMatmulHeuristicResult_t result = {};
  EXPECT_EQ(lt.Heuristic(lt.Layout(CUDA_R_32F, 8, 5, 7), lt.Layout(p.b),
                         lt.Layout(p.c), 0, 256, &result),
            kInvalid);
  EXPECT_EQ(lt.Heuristic(lt.Layout(p.a), lt.Layout(p.b),
                         lt.Layout(CUDA_R_32F, 8, 6, -8), 0, 256, &result),
            kInvalid);
}

TEST(LtRejectionTest, TypeCombinationsOutsideTheTableAreNotSupported) {
  Lt lt;
  cublasLtMatmulHeuristicResult_t result = {};
  EXPECT_EQ(lt.Heuristic(lt.Layout(CUDA_R_16BF, 8, 8, 8),
                         lt.Layout(CUDA_R_32F, 8, 8, 8),
                         lt.Layout(CUDA_R_32F, 8, 8, 8), 0, 256, &result),
            kNotSupported);
  EXPECT_EQ(lt.Heuristic(lt.Layout(CUDA_R_32F, 8, 8, 8),
                         lt.Layout(CUDA_R_32F, 8, 8, 8),
                         lt.Layout(CUDA_R_16BF, 8, 8, 8), 0, 256, &result),
            kNotSupported);
  cublasLtMatmulDesc_t tf32 = nullptr;
  ASSERT_EQ(
      cublasLtMatmulDescCreate(&tf32, CUBLAS_COMPUTE_32F_FAST_TF32, CUDA_R_32F),
      kOk);
  EXPECT_EQ(cublasLtMatmul(lt.handle(), tf32, nullptr, nullptr,
                           lt.Layout(CUDA_R_32F, 8, 8, 8), nullptr,
                           lt.Layout(CUDA_R_32F, 8, 8, 8), nullptr, nullptr,
                           lt.Layout(CUDA_R_32F, 8, 8, 8), nullptr,
                           lt.Layout(CUDA_R_32F, 8, 8, 8), nullptr, nullptr, 0,
                           nullptr),
            kNotSupported);  // the emulation's limit: no TF32
  EXPECT_EQ(cublasLtMatmulDescDestroy(tf32), kOk);
}

TEST(LtRejectionTest, TransposesMustBeOperationsAndTransCOnlyN) {
  Problem p(CUDA_R_32F, CUDA_R_32F, 8, 8, 8);
  {
    Lt lt;
    lt.Set(CUBLASLT_MATMUL_DESC_TRANSA, int32_t{7});
    EXPECT_EQ(HeuristicFor(lt, p), kInvalid);
  }
  Lt lt;
  lt.Set(CUBLASLT_MATMUL_DESC_TRANSC, CUBLAS_OP_T);
  EXPECT_EQ(HeuristicFor(lt, p), kNotSupported);
}

TEST(LtRejectionTest, BiasMustBeOfDsType) {
  Problem p(CUDA_R_16BF, CUDA_R_16BF, 8, 8, 8);
  Lt lt;
  lt.Set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
  lt.Set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, int32_t{CUDA_R_32F});
  EXPECT_EQ(HeuristicFor(lt, p), kInvalid);
  lt.Set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, int32_t{CUDA_R_16BF});
  EXPECT_EQ(HeuristicFor(lt, p), kOk);
}

TEST(LtRejectionTest, EpiloguesNeedTheirPointers) {
  Problem p(CUDA_R_32F, CUDA_R_32F, 8, 8, 8);
  for (auto epilogue : {CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_GELU_AUX,
                        CUBLASLT_EPILOGUE_GELU_AUX_BIAS,
                        CUBLASLT_EPILOGUE_DGELU, CUBLASLT_EPILOGUE_BGRADB}) {
    Lt lt;
    lt.Set(CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue);
    lt.Set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t{8});
    // The heuristic takes NULL (a pointer may be set later); the matmul not.
    EXPECT_EQ(lt.Run(p.a, p.b, p.c, 0), kInvalid) << epilogue;
  }
}

// BGRADB writes n sums of D's type: its vector must be of D's type, must
// not overlap an input or D, and alpha stays 1 (whether the sums are
// scaled is not documented, so the stand-in does not guess).
TEST(LtRejectionTest, BiasGradientIsAnOutputOfDsTypeAtAlphaOne) {
  Problem p(CUDA_R_16BF, CUDA_R_32F, 8, 8, 8);
  DeviceMatrix grad(CUDA_R_32F, 8, 1, 8, 4);
  Lt lt;
  lt.Set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BGRADB);
  lt.Set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, int32_t{CUDA_R_16BF});
  EXPECT_EQ(HeuristicFor(lt, p), kInvalid);
  lt.Set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, int32_t{-1});
  lt.Set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, grad.get());
  EXPECT_EQ(lt.Run(p.a, p.b, p.c, 0), kOk);
  lt.Set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.c.get());
  EXPECT_EQ(lt.Run(p.a, p.b, p.c, 0), kInvalid);  // D's first column
  // bf16 B read as fp32 words: its first 8 elements' bytes.
  lt.Set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.b.get());
  EXPECT_EQ(lt.Run(p.a, p.b, p.c, 0), kInvalid);
  lt.Set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, grad.get());
  cublasLtMatrixLayout_t la = lt.Layout(p.a), lb = lt.Layout(p.b),
                         lc = lt.Layout(p.c);
  cublasLtMatmulHeuristicResult_t result = {};
  ASSERT_EQ(lt.Heuristic(la, lb, lc, 0, 256, &result), kOk);
  const float two = 2, zero = 0;
  EXPECT_EQ(cublasLtMatmul(lt.handle(), lt.desc(), &two, p.a.get(), la,
                           p.b.get(), lb, &zero, p.c.get(), lc, p.c.get(), lc,
                           &result.algo, nullptr, 0, nullptr),
            kNotSupported);
}

TEST(LtRejectionTest, AuxLdMustBeAMultipleOf8AndNoLessThanRows) {
  Problem p(CUDA_R_16BF, CUDA_R_16BF, 12, 4, 8);
  for (int64_t ld : {int64_t{0}, int64_t{12}, int64_t{8}, int64_t{20}}) {
    Lt lt;
    lt.Set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_GELU_AUX);
    lt.Set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, ld);
    EXPECT_EQ(HeuristicFor(lt, p), kInvalid) << "aux ld " << ld;
  }
  Lt lt;
  lt.Set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_DGELU);
  lt.Set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t{16});
  EXPECT_EQ(HeuristicFor(lt, p), kOk);
  lt.Set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, int32_t{CUDA_R_32F});
  EXPECT_EQ(HeuristicFor(lt, p), kInvalid);  // aux is of D's type
}

TEST(LtRejectionTest, HeuristicNeedsRoomForOneResult) {
  Lt lt;
  Problem p(CUDA_R_32F, CUDA_R_32F, 8, 8, 8);
  cublasLtMatmulPreference_t pref = nullptr;
  ASSERT_EQ(cublasLtMatmulPreferenceCreate(&pref), kOk);
  cublasLtMatmulHeuristicResult_t result = {};
  int found = 0;
  cublasLtMatrixLayout_t a = lt.Layout(p.a), b = lt.Layout(p.b),
                         c = lt.Layout(p.c);
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(lt.handle(), lt.desc(), a, b, c, c,
                                           pref, 0, &result, &found),
            kInvalid);
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(lt.handle(), lt.desc(), a, b, c, c,
                                           pref, 1, &result, &found),
            kOk);
  EXPECT_EQ(found, 1);
  EXPECT_EQ(result.state, kOk);
  EXPECT_EQ(result.workspaceSize, 0u);  // the default: no workspace allowed
  EXPECT_EQ(cublasLtMatmulPreferenceDestroy(pref), kOk);
}

TEST(LtRejectionTest, TheWorkspaceMustHoldWhatTheAlgorithmNeeds) {
  Lt lt;
  Problem p(CUDA_R_32F, CUDA_R_32F, 8, 8, 8);
  cublasLtMatmulHeuristicResult_t result = {};
  ASSERT_EQ(HeuristicFor(lt, p, 4096, 256, &result), kOk);
  EXPECT_LE(result.workspaceSize, 4096u);
  DeviceMatrix workspace(CUDA_R_32F, 1024, 1, 1024, 9);
  cublasLtMatrixLayout_t a = lt.Layout(p.a), b = lt.Layout(p.b),
                         c = lt.Layout(p.c);
  const auto run = [&](void* ws, size_t bytes) {
    return lt.Matmul(a, p.a.get(), b, p.b.get(), c, p.c.get(), 0, &result.algo,
                     ws, bytes);
  };
  EXPECT_EQ(run(workspace.get(), result.workspaceSize - 1), kInvalid);
  EXPECT_EQ(run(nullptr, result.workspaceSize), kInvalid);
  EXPECT_EQ(run(workspace.get(), result.workspaceSize), kOk);
}

TEST(LtRejectionTest, PointersLessAlignedThanThePreferenceSaidAreInvalid) {
  Problem aligned(CUDA_R_32F, CUDA_R_32F, 8, 8, 8);
  Problem off4(CUDA_R_32F, CUDA_R_32F, 8, 8, 8, /*offset=*/4);
  Problem off16(CUDA_R_32F, CUDA_R_32F, 8, 8, 8, /*offset=*/16);
  Lt lt;
  cublasLtMatmulHeuristicResult_t result = {};
  ASSERT_EQ(HeuristicFor(lt, aligned, 0, 16, &result), kOk);
  cublasLtMatrixLayout_t l = lt.Layout(aligned.a);  // all three 8 x 8, ld 8
  EXPECT_EQ(lt.Matmul(l, off4.a.get(), l, aligned.b.get(), l, aligned.c.get(),
                      0, &result.algo),
            kInvalid);
  EXPECT_EQ(lt.Matmul(l, aligned.a.get(), l, aligned.b.get(), l, off4.c.get(),
                      0, &result.algo),
            kInvalid);
  EXPECT_EQ(lt.Matmul(l, off16.a.get(), l, off16.b.get(), l, off16.c.get(), 0,
                      &result.algo),
            kOk);
  ASSERT_EQ(HeuristicFor(lt, aligned, 0, 4, &result), kOk);
  EXPECT_EQ(lt.Matmul(l, off4.a.get(), l, off4.b.get(), l, off4.c.get(), 0,
                      &result.algo),
            kOk);
  // NULL algo: the implicit heuristic's default preference, 256 bytes.
  EXPECT_EQ(lt.Matmul(l, aligned.a.get(), l, aligned.b.get(), l,
                      aligned.c.get(), 0, nullptr),
            kOk);
  EXPECT_EQ(lt.Matmul(l, off16.a.get(), l, aligned.b.get(), l, aligned.c.get(),
                      0, nullptr),
            kInvalid);
}

// The heuristic reads the bias pointer's alignment from its value.
TEST(LtRejectionTest, ABiasLessAlignedThanTheHeuristicSawIsInvalid) {
  Problem p(CUDA_R_32F, CUDA_R_32F, 8, 8, 8);
  DeviceMatrix bias(CUDA_R_32F, 16, 1, 16, 5);
  const char* base = static_cast<const char*>(bias.get());
  Lt lt;
  lt.Set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
  lt.Set(CUBLASLT_MATMUL_DESC_BIAS_POINTER,
         static_cast<const void*>(base + 16));
  cublasLtMatmulHeuristicResult_t result = {};
  ASSERT_EQ(HeuristicFor(lt, p, 0, 256, &result), kOk);
  cublasLtMatrixLayout_t l = lt.Layout(p.a);
  lt.Set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(base + 4));
  EXPECT_EQ(
      lt.Matmul(l, p.a.get(), l, p.b.get(), l, p.c.get(), 0, &result.algo),
      kInvalid);
  lt.Set(CUBLASLT_MATMUL_DESC_BIAS_POINTER,
         static_cast<const void*>(base + 32));  // more aligned: fine
  EXPECT_EQ(
      lt.Matmul(l, p.a.get(), l, p.b.get(), l, p.c.get(), 0, &result.algo),
      kOk);
}

TEST(LtRejectionTest, AnAlgoFromAnotherProblemIsUsedAsItIs) {
  Lt lt;
  Problem big(CUDA_R_32F, CUDA_R_32F, 16, 16, 16);
  cublasLtMatmulHeuristicResult_t result = {};
  ASSERT_EQ(HeuristicFor(lt, big, 0, 256, &result), kOk);
  Problem small(CUDA_R_32F, CUDA_R_32F, 4, 6, 5);
  ASSERT_EQ(lt.Matmul(lt.Layout(small.a), small.a.get(), lt.Layout(small.b),
                      small.b.get(), lt.Layout(small.c), small.c.get(), 0,
                      &result.algo),
            kOk);
  ExpectMatches(
      small.c,
      Product(small.a, false, small.b, false, 4, 6, 5, 0, nullptr, nullptr),
      "D");
  const cublasLtMatmulAlgo_t zeroed = {};
  EXPECT_EQ(
      lt.Matmul(lt.Layout(small.a), small.a.get(), lt.Layout(small.b),
                small.b.get(), lt.Layout(small.c), small.c.get(), 0, &zeroed),
      kInvalid);  // no heuristic wrote it
}

TEST(LtRejectionTest, InPlaceNeedsDsLayoutAndOutputsMustNotOverlapInputs) {
  Lt lt;
  Problem p(CUDA_R_32F, CUDA_R_32F, 8, 8, 8, 0, /*c_pad=*/8);
  const float one = 1;
  cublasLtMatrixLayout_t l = lt.Layout(p.a);
  EXPECT_EQ(cublasLtMatmul(lt.handle(), lt.desc(), &one, p.a.get(), l,
                           p.b.get(), l, &one, p.c.get(), lt.Layout(p.c),
                           p.c.get(), lt.Layout(CUDA_R_32F, 8, 8, 8), nullptr,
                           nullptr, 0, nullptr),
            kInvalid);  // C == D, ldc 16, ldd 8
  EXPECT_EQ(lt.Matmul(l, p.a.get(), l, p.b.get(), l, p.a.get(), 0, nullptr),
            kInvalid);  // D is A
  // Interleaved columns (ld 16, 8 rows each) share no element: allowed.
  float* base = static_cast<float*>(p.c.get());
  cublasLtMatrixLayout_t wide = lt.Layout(CUDA_R_32F, 8, 8, 16);
  cublasLtMatmulHeuristicResult_t result = {};
  ASSERT_EQ(lt.Heuristic(wide, l, wide, 0, 16, &result), kOk);
  EXPECT_EQ(
      lt.Matmul(wide, base + 8, l, p.b.get(), wide, base, 0, &result.algo),
      kOk);
  EXPECT_EQ(
      lt.Matmul(wide, base + 4, l, p.b.get(), wide, base, 0, &result.algo),
      kInvalid);  // rows 4..7 of each column are A's and D's
}

TEST(LtRejectionTest, DestroyedObjectsAreRefused) {
  Lt lt;  // made first, so it cannot take the addresses freed below
  cublasLtHandle_t handle = nullptr;
  ASSERT_EQ(cublasLtCreate(&handle), kOk);
  ASSERT_EQ(cublasLtDestroy(handle), kOk);
  EXPECT_EQ(cublasLtDestroy(handle), CUBLAS_STATUS_NOT_INITIALIZED);
  cublasLtMatrixLayout_t layout = nullptr;
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&layout, CUDA_R_32F, 8, 8, 8), kOk);
  ASSERT_EQ(cublasLtMatrixLayoutDestroy(layout), kOk);
  EXPECT_EQ(cublasLtMatrixLayoutDestroy(layout), kInvalid);
  cublasLtMatmulHeuristicResult_t result = {};
  EXPECT_EQ(lt.Heuristic(layout, layout, layout, 0, 256, &result), kInvalid);
  EXPECT_EQ(cublasLtMatmul(handle, lt.desc(), nullptr, nullptr, layout, nullptr,
                           layout, nullptr, nullptr, layout, nullptr, layout,
                           nullptr, nullptr, 0, nullptr),
            CUBLAS_STATUS_NOT_INITIALIZED);
  cublasLtMatmulDesc_t desc = nullptr;
  ASSERT_EQ(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
            kOk);
  ASSERT_EQ(cublasLtMatmulDescDestroy(desc), kOk);
  const int32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                           &epilogue, sizeof(epilogue)),
            kInvalid);
  cublasLtMatmulPreference_t pref = nullptr;
  ASSERT_EQ(cublasLtMatmulPreferenceCreate(&pref), kOk);
  ASSERT_EQ(cublasLtMatmulPreferenceDestroy(pref), kOk);
  const uint64_t workspace = 0;
  EXPECT_EQ(cublasLtMatmulPreferenceSetAttribute(
                pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                sizeof(workspace)),
            kInvalid);
}

TEST(LtStatusTest, NamesAndDescriptions) {
  EXPECT_STREQ(cublasLtGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED),
               "CUBLAS_STATUS_NOT_SUPPORTED");
  EXPECT_STREQ(cublasLtGetStatusName(kInvalid), "CUBLAS_STATUS_INVALID_VALUE");
  EXPECT_GT(std::string(cublasLtGetStatusString(kInvalid)).size(), 0u);
}

}  // namespace
}  // namespace trainyard::cuda_emulation
