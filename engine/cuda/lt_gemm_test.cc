// LtGemm's argument checks and plan keys; needs no device (nothing here
// calls cuBLAS).
#include "engine/cuda/lt_gemm.h"

#include <cstdint>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace trainyard::engine::cuda {
namespace {

// Fake device addresses: only their alignment matters to what is tested.
const void* At(uintptr_t address) {
  return reinterpret_cast<const void*>(address);
}
void* MutableAt(uintptr_t address) { return reinterpret_cast<void*>(address); }

// A bf16 forward product with a bias, every pointer 256-byte aligned.
LtGemmArgs BiasProduct() {
  LtGemmArgs g;
  g.ab_type = g.c_type = CUDA_R_16BF;
  g.trans_a = true;
  g.m = 64;
  g.n = 32;
  g.k = 48;
  g.a = At(0x10000);
  g.lda = 48;
  g.b = At(0x20000);
  g.ldb = 48;
  g.c = MutableAt(0x30000);
  g.ldc = 64;
  g.bias = At(0x40000);
  return g;
}

LtGemmArgs GeluProduct(LtGemmArgs::Gelu gelu) {
  LtGemmArgs g = BiasProduct();
  g.gelu = gelu;
  g.gelu_aux = At(0x50000);
  if (gelu == LtGemmArgs::Gelu::kGradient) g.bias = nullptr;
  return g;
}

TEST(LtGemmTest, AlignmentOfIsTheLargestPowerOfTwoUpTo256) {
  EXPECT_EQ(LtGemm::AlignmentOf(At(0x10000)), 256u);
  EXPECT_EQ(LtGemm::AlignmentOf(At(0x10010)), 16u);
  EXPECT_EQ(LtGemm::AlignmentOf(At(0x10008)), 8u);
  EXPECT_EQ(LtGemm::AlignmentOf(At(0x10004)), 4u);
  EXPECT_EQ(LtGemm::AlignmentOf(At(0x10002)), 2u);
}

TEST(LtGemmTest, SameProblemSameKey) {
  LtGemmArgs other = BiasProduct();
  // Other addresses of the same alignments, another beta of the same kind.
  other.a = At(0x90000);
  other.bias = At(0x90100);
  EXPECT_EQ(LtGemm::PlanKeyOf(BiasProduct()), LtGemm::PlanKeyOf(other));
}

// The heuristic picks an algorithm for the bias pointer's alignment
// (cublasLt.h, CUBLASLT_MATMUL_DESC_BIAS_POINTER), so a less aligned bias
// must not reuse the plan made for a more aligned one.
TEST(LtGemmTest, BiasAlignmentIsPartOfTheKey) {
  LtGemmArgs less = BiasProduct();
  less.bias = At(0x40010);  // 16-byte aligned
  EXPECT_NE(LtGemm::PlanKeyOf(BiasProduct()), LtGemm::PlanKeyOf(less));
}

// The bias gradient (BGRADB) is another epilogue than the bias at the
// same pointer, and its pointer's alignment is part of the key as the
// bias's is (the heuristic reads BIAS_POINTER for both).
TEST(LtGemmTest, BiasGradientIsItsOwnEpilogueInTheKey) {
  LtGemmArgs grad = BiasProduct();
  grad.bias = nullptr;
  grad.bias_grad = MutableAt(0x40000);
  EXPECT_NE(LtGemm::PlanKeyOf(grad), LtGemm::PlanKeyOf(BiasProduct()));
  EXPECT_EQ(LtGemm::BiasUse(grad), 2);
  EXPECT_EQ(LtGemm::BiasUse(BiasProduct()), 1);
  LtGemmArgs less = grad;
  less.bias_grad = MutableAt(0x40010);
  EXPECT_NE(LtGemm::PlanKeyOf(grad), LtGemm::PlanKeyOf(less));
  EXPECT_TRUE(LtGemm::CheckArgs(grad).ok());
  EXPECT_TRUE(absl::StrContains(LtGemm::ChoiceLine(grad, 0, 1), " bias=grad "))
      << LtGemm::ChoiceLine(grad, 0, 1);
  EXPECT_TRUE(
      absl::StrContains(LtGemm::ChoiceLine(BiasProduct(), 0, 1), " bias=add "));
  // A choice line for it reads back.
  EXPECT_TRUE(LtGemm::CheckChoices(LtGemm::ChoiceLine(grad, 0, 1)).ok());
}

TEST(LtGemmTest, GeluAuxAlignmentIsPartOfTheKey) {
  for (LtGemmArgs::Gelu gelu :
       {LtGemmArgs::Gelu::kApply, LtGemmArgs::Gelu::kGradient}) {
    LtGemmArgs less = GeluProduct(gelu);
    less.gelu_aux = At(0x50010);
    EXPECT_NE(LtGemm::PlanKeyOf(GeluProduct(gelu)), LtGemm::PlanKeyOf(less));
  }
}

TEST(LtGemmTest, AbsentPointersDoNotSplitTheKey) {
  LtGemmArgs a = BiasProduct(), b = BiasProduct();
  a.bias = b.bias = nullptr;
  // Set but unused: the key must not depend on it.
  b.gelu_aux = At(0x50010);
  EXPECT_EQ(LtGemm::PlanKeyOf(a), LtGemm::PlanKeyOf(b));
}

TEST(LtGemmTest, TypesEpilogueAndShapeArePartOfTheKey) {
  const LtGemm::PlanKey base = LtGemm::PlanKeyOf(BiasProduct());
  LtGemmArgs g = BiasProduct();
  g.c_type = CUDA_R_32F;
  EXPECT_NE(LtGemm::PlanKeyOf(g), base);
  g = BiasProduct();
  g.ab_type = CUDA_R_32F;
  EXPECT_NE(LtGemm::PlanKeyOf(g), base);
  g = BiasProduct();
  g.bias = nullptr;
  EXPECT_NE(LtGemm::PlanKeyOf(g), base);
  EXPECT_NE(LtGemm::PlanKeyOf(GeluProduct(LtGemmArgs::Gelu::kApply)), base);
  g = BiasProduct();
  g.ldc = 72;
  EXPECT_NE(LtGemm::PlanKeyOf(g), base);
  g = BiasProduct();
  g.beta = 1;
  EXPECT_NE(LtGemm::PlanKeyOf(g), base);
  g = BiasProduct();
  g.c = MutableAt(0x30008);
  EXPECT_NE(LtGemm::PlanKeyOf(g), base);
}

TEST(LtGemmTest, CheckArgsAcceptsWellFormedProducts) {
  EXPECT_TRUE(LtGemm::CheckArgs(BiasProduct()).ok());
  EXPECT_TRUE(LtGemm::CheckArgs(GeluProduct(LtGemmArgs::Gelu::kApply)).ok());
  EXPECT_TRUE(LtGemm::CheckArgs(GeluProduct(LtGemmArgs::Gelu::kGradient)).ok());
}

TEST(LtGemmTest, GeluWithoutAuxIsRefused) {
  LtGemmArgs g = GeluProduct(LtGemmArgs::Gelu::kApply);
  g.gelu_aux = nullptr;
  const absl::Status s = LtGemm::CheckArgs(g);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "gelu_aux")) << s.message();
}

// cublasLt.h, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: "Must be divisible by 8".
TEST(LtGemmTest, GeluAuxLeadingDimensionMustBeAMultipleOf8) {
  LtGemmArgs g = GeluProduct(LtGemmArgs::Gelu::kGradient);
  g.m = 60;
  g.ldc = 60;
  const absl::Status s = LtGemm::CheckArgs(g);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "60")) << s.message();
}

TEST(LtGemmTest, GeluGradientWithBiasIsRefused) {
  LtGemmArgs g = GeluProduct(LtGemmArgs::Gelu::kGradient);
  g.bias = At(0x40000);
  EXPECT_EQ(LtGemm::CheckArgs(g).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace trainyard::engine::cuda
