// engine/cuda/lt_gemm.cc, compiled unchanged against the cuBLAS stand-in:
// LtGemm::Create, then Run on emulated device memory for the products the
// CUDA backend asks for (cuda_backend_ops.cc): the forward product with a
// bias (fp32 and bf16), the GELU forward (bf16, bias and pre-activation),
// the input gradient through GELU (bf16, DGELU), the weight gradient (bf16
// inputs summed into fp32 with beta 1), checked against the double
// reference with emulated_cublas_test.cc's tolerances; a plan reused across
// pointers of the same alignments and a new one for a less aligned bias;
// and the classic fallback for what cuBLASLt has no algorithm for.
#include <cstdint>
#include <memory>
#include <utility>

#include "engine/cuda/emulation/emulated_cublas_test_support.h"
#include "engine/cuda/lt_gemm.h"
#include "gtest/gtest.h"

namespace trainyard::cuda_emulation {
namespace {

using emulated_cublas_test::DeviceMatrix;
using emulated_cublas_test::ExpectMatches;
using emulated_cublas_test::Product;
using engine::cuda::LtGemm;
using engine::cuda::LtGemmArgs;

class LtGemmOnEmulationTest : public ::testing::Test {
 protected:
  static constexpr int64_t kWorkspaceBytes = int64_t{1} << 20;

  void SetUp() override {
    ASSERT_EQ(cudaMalloc(&workspace_, kWorkspaceBytes), cudaSuccess);
    absl::StatusOr<std::unique_ptr<LtGemm>> gemm =
        LtGemm::Create(workspace_, kWorkspaceBytes, nullptr);
    ASSERT_TRUE(gemm.ok()) << gemm.status();
    gemm_ = std::move(*gemm);
  }
  void TearDown() override {
    gemm_.reset();
    EXPECT_EQ(cudaFree(workspace_), cudaSuccess);
  }

  void* workspace_ = nullptr;
  std::unique_ptr<LtGemm> gemm_;
};

// C = op(A) . op(B) over the matrices as they are stored (A k x m when
// trans_a, else m x k; likewise B); the types are A's and C's.
LtGemmArgs Args(DeviceMatrix& c, const DeviceMatrix& a, bool trans_a,
                const DeviceMatrix& b, bool trans_b) {
  LtGemmArgs g;
  g.ab_type = a.type();
  g.c_type = c.type();
  g.trans_a = trans_a;
  g.trans_b = trans_b;
  g.m = c.rows();
  g.n = c.cols();
  g.k = trans_a ? a.rows() : a.cols();
  g.a = a.get();
  g.lda = a.ld();
  g.b = b.get();
  g.ldb = b.ld();
  g.c = c.get();
  g.ldc = c.ld();
  return g;
}

// Row-major out [batch, O] = inp [batch, I] . weight [O, I]^T, read
// column-major: A = weight stored I x O, transposed; B = inp, I x batch.
LtGemmArgs Forward(DeviceMatrix& out, const DeviceMatrix& inp,
                   const DeviceMatrix& weight) {
  return Args(out, weight, /*trans_a=*/true, inp, /*trans_b=*/false);
}

TEST_F(LtGemmOnEmulationTest, ForwardWithBias) {
  for (cudaDataType t : {CUDA_R_32F, CUDA_R_16BF}) {
    constexpr int64_t kOut = 24, kBatch = 5, kIn = 19;
    DeviceMatrix weight(t, kIn, kOut, kIn, 1), inp(t, kIn, kBatch, kIn, 2);
    DeviceMatrix out(t, kOut, kBatch, kOut, 3), bias(t, kOut, 1, kOut, 4);
    LtGemmArgs g = Forward(out, inp, weight);
    g.bias = bias.get();
    ASSERT_TRUE(gemm_->Run(g).ok());
    ExpectMatches(
        out,
        Product(weight, true, inp, false, kOut, kBatch, kIn, 0, nullptr, &bias)
            .RoundedTo(t),
        "out");
  }
}

TEST_F(LtGemmOnEmulationTest, GeluForwardWritesPreActivationAndGelu) {
  const cudaDataType t = CUDA_R_16BF;
  constexpr int64_t kOut = 32, kBatch = 6, kIn = 40;
  DeviceMatrix weight(t, kIn, kOut, kIn, 1), inp(t, kIn, kBatch, kIn, 2);
  DeviceMatrix out(t, kOut, kBatch, kOut, 3), bias(t, kOut, 1, kOut, 4);
  DeviceMatrix pre(t, kOut, kBatch, kOut, 5);
  LtGemmArgs g = Forward(out, inp, weight);
  g.bias = bias.get();
  g.gelu = LtGemmArgs::Gelu::kApply;
  g.gelu_aux = pre.get();
  ASSERT_TRUE(gemm_->Run(g).ok());
  const auto want =
      Product(weight, true, inp, false, kOut, kBatch, kIn, 0, nullptr, &bias);
  ExpectMatches(pre, want.RoundedTo(t), "pre");
  ExpectMatches(out, want.Gelu().RoundedTo(t), "out");
}

// Column-major dinp^T [I, batch] = weight^T [I, O] . dout^T [O, batch],
// times gelu'(pre).
TEST_F(LtGemmOnEmulationTest, InputGradientThroughGelu) {
  const cudaDataType t = CUDA_R_16BF;
  constexpr int64_t kOut = 24, kBatch = 7, kIn = 16;
  DeviceMatrix weight(t, kIn, kOut, kIn, 1), dout(t, kOut, kBatch, kOut, 2);
  DeviceMatrix dinp(t, kIn, kBatch, kIn, 3);
  DeviceMatrix pre(t, kIn, kBatch, kIn, 4, /*offset=*/0, /*scale=*/3);
  LtGemmArgs g = Args(dinp, weight, false, dout, false);
  g.gelu = LtGemmArgs::Gelu::kGradient;
  g.gelu_aux = pre.get();
  ASSERT_TRUE(gemm_->Run(g).ok());
  ExpectMatches(dinp,
                Product(weight, false, dout, false, kIn, kBatch, kOut, 0,
                        nullptr, nullptr)
                    .TimesGeluGrad(pre)
                    .RoundedTo(t),
                "dinp");
}

// dweight^T [I, O] += inp^T [I, batch] . dout [batch, O], in fp32.
TEST_F(LtGemmOnEmulationTest, WeightGradientAccumulatesInFp32) {
  constexpr int64_t kOut = 12, kBatch = 9, kIn = 10;
  DeviceMatrix inp(CUDA_R_16BF, kIn, kBatch, kIn, 1);
  DeviceMatrix dout(CUDA_R_16BF, kOut, kBatch, kOut, 2);
  DeviceMatrix dweight(CUDA_R_32F, kIn, kOut, kIn, 3);
  const DeviceMatrix before = dweight.Copy();
  LtGemmArgs g = Args(dweight, inp, false, dout, true);
  g.beta = 1;
  ASSERT_TRUE(gemm_->Run(g).ok());
  ExpectMatches(
      dweight,
      Product(inp, false, dout, true, kIn, kOut, kBatch, 1, &before, nullptr),
      "dweight");
}

// The plan made for a 256-byte aligned bias is not reused for a 4-byte
// aligned one (the stand-in would refuse it): a new plan runs it.
TEST_F(LtGemmOnEmulationTest, LessAlignedBiasGetsItsOwnPlan) {
  constexpr int64_t kOut = 8, kBatch = 3, kIn = 5;
  const cudaDataType t = CUDA_R_32F;
  DeviceMatrix weight(t, kIn, kOut, kIn, 1), inp(t, kIn, kBatch, kIn, 2);
  for (size_t offset : {0, 4, 0}) {
    DeviceMatrix out(t, kOut, kBatch, kOut, 3);
    DeviceMatrix bias(t, kOut, 1, kOut, 4, offset);
    LtGemmArgs g = Forward(out, inp, weight);
    g.bias = bias.get();
    ASSERT_TRUE(gemm_->Run(g).ok()) << "bias offset " << offset;
    ExpectMatches(
        out,
        Product(weight, true, inp, false, kOut, kBatch, kIn, 0, nullptr, &bias),
        "out");
  }
}

// Neither library has fp32 inputs with a bf16 output (the cuBLAS guide's
// tables): cuBLASLt's heuristic says NOT_SUPPORTED, the classic fallback
// too, and Run reports UNIMPLEMENTED.
TEST_F(LtGemmOnEmulationTest, Fp32InputsWithBf16OutputAreUnimplemented) {
  DeviceMatrix weight(CUDA_R_32F, 4, 8, 4, 1), inp(CUDA_R_32F, 4, 2, 4, 2);
  DeviceMatrix out(CUDA_R_16BF, 8, 2, 8, 3);
  EXPECT_EQ(gemm_->Run(Forward(out, inp, weight)).code(),
            absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace trainyard::cuda_emulation
