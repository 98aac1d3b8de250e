// engine/cuda/lt_gemm.cc, compiled unchanged against the cuBLAS stand-in:
// LtGemm::Create, then Run on emulated device memory for the products the
// CUDA backend asks for (cuda_backend_ops.cc): the forward product with a
// bias (fp32 and bf16), the GELU forward (bf16, bias and pre-activation),
// the input gradient through GELU (bf16, DGELU), the weight gradient (bf16
// inputs summed into fp32 with beta 1), checked against the double
// reference with emulated_cublas_test.cc's tolerances; a plan reused across
// pointers of the same alignments and a new one for a less aligned bias;
// the heuristic's candidates and Choose; and the classic fallback for
// what cuBLASLt has no algorithm for.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/cuda/emulation/cublas_host.h"
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

// Row-major out [batch, O] = inp [batch, I] . weight [O, I]^T as the
// backend asks for it (LinearForwardArgs), on column-major matrices: out
// O x batch, inp I x batch, weight I x O; the input type is inp's.
LtGemmArgs Forward(DeviceMatrix& out, const DeviceMatrix& inp,
                   const DeviceMatrix& weight) {
  LtGemmArgs g = engine::cuda::LinearForwardArgs(
      out.get(), inp.get(), weight.get(), out.cols(), inp.rows(), out.rows(),
      out.type());
  g.ab_type = inp.type();
  return g;
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
  LtGemmArgs g = engine::cuda::LinearInputGradArgs(
      dinp.get(), dout.get(), weight.get(), kBatch, kIn, kOut, t);
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
  ASSERT_TRUE(gemm_
                  ->Run(engine::cuda::LinearWeightGradArgs(
                      static_cast<float*>(dweight.get()), dout.get(), inp.get(),
                      kBatch, kIn, kOut, CUDA_R_16BF))
                  .ok());
  ExpectMatches(
      dweight,
      Product(inp, false, dout, true, kIn, kOut, kBatch, 1, &before, nullptr),
      "dweight");
}

// The same with the bias gradient from cuBLASLt's BGRADB epilogue:
// dbias[o] = the sum over the batch of dout [batch, O]'s column o, fp32,
// overwritten (what was there is not added to).
TEST_F(LtGemmOnEmulationTest, WeightGradientWithTheBiasGradient) {
  constexpr int64_t kOut = 12, kBatch = 9, kIn = 10;
  DeviceMatrix inp(CUDA_R_16BF, kIn, kBatch, kIn, 1);
  DeviceMatrix dout(CUDA_R_16BF, kOut, kBatch, kOut, 2);
  DeviceMatrix dweight(CUDA_R_32F, kIn, kOut, kIn, 3);
  DeviceMatrix dbias(CUDA_R_32F, kOut, 1, kOut, 4);
  const DeviceMatrix before = dweight.Copy();
  LtGemmArgs g = engine::cuda::LinearWeightGradArgs(
      static_cast<float*>(dweight.get()), dout.get(), inp.get(), kBatch, kIn,
      kOut, CUDA_R_16BF);
  g.bias_grad = dbias.get();
  ASSERT_TRUE(gemm_->Run(g).ok());
  ExpectMatches(
      dweight,
      Product(inp, false, dout, true, kIn, kOut, kBatch, 1, &before, nullptr),
      "dweight");
  // The column sums as a product: dout (O x batch) times a column of ones.
  DeviceMatrix ones(CUDA_R_32F, kBatch, 1, kBatch, 0);
  for (int64_t t = 0; t < kBatch; ++t) ones.Set(t, 0, 1.f);
  ExpectMatches(
      dbias,
      Product(dout, false, ones, false, kOut, 1, kBatch, 0, nullptr, nullptr),
      "dbias");
  EXPECT_NE(LtGemm::ChoiceLine(g, 0, 1).find(" bias=grad "), std::string::npos)
      << LtGemm::ChoiceLine(g, 0, 1);
}

// The bias gradient is an epilogue of its own: with a bias or a GELU
// epilogue, INVALID_ARGUMENT before anything runs.
TEST_F(LtGemmOnEmulationTest, BiasGradientTakesNoOtherEpilogue) {
  DeviceMatrix inp(CUDA_R_16BF, 8, 4, 8, 1), dout(CUDA_R_16BF, 8, 4, 8, 2);
  DeviceMatrix dweight(CUDA_R_32F, 8, 8, 8, 3), dbias(CUDA_R_32F, 8, 1, 8, 4);
  const DeviceMatrix before = dweight.Copy();
  LtGemmArgs g = engine::cuda::LinearWeightGradArgs(
      static_cast<float*>(dweight.get()), dout.get(), inp.get(), 4, 8, 8,
      CUDA_R_16BF);
  g.bias_grad = dbias.get();
  LtGemmArgs with_bias = g;
  with_bias.bias = dbias.get();
  LtGemmArgs with_gelu = g;
  with_gelu.gelu = LtGemmArgs::Gelu::kGradient;
  with_gelu.gelu_aux = inp.get();
  for (const LtGemmArgs& bad : {with_bias, with_gelu}) {
    const absl::Status s = gemm_->Run(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("bias gradient epilogue takes neither"),
              std::string::npos)
        << s;
  }
  for (int64_t j = 0; j < 8; ++j) {
    for (int64_t i = 0; i < 8; ++i) {
      ASSERT_EQ(dweight.at(i, j), before.at(i, j)) << "ran anyway";
    }
  }
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

// A bf16 forward product with a bias, on matrices of its own: what the
// candidate and choice tests run.
struct BiasedForward {
  static constexpr cudaDataType kType = CUDA_R_16BF;
  static constexpr int64_t kOut = 16, kBatch = 4, kIn = 8;
  DeviceMatrix weight{kType, kIn, kOut, kIn, 1},
      inp{kType, kIn, kBatch, kIn, 2};
  DeviceMatrix out{kType, kOut, kBatch, kOut, 3}, bias{kType, kOut, 1, kOut, 4};

  LtGemmArgs Args() {
    LtGemmArgs g = Forward(out, inp, weight);
    g.bias = bias.get();
    return g;
  }
  // The input gradient of the same layer, out taken as its output gradient:
  // another product, planned apart.
  LtGemmArgs InputGradArgs() {
    return engine::cuda::LinearInputGradArgs(
        dinp.get(), out.get(), weight.get(), kBatch, kIn, kOut, kType);
  }
  DeviceMatrix dinp{kType, kIn, kBatch, kIn, 5};
  void ExpectOutRight() const {
    ExpectMatches(
        out,
        Product(weight, true, inp, false, kOut, kBatch, kIn, 0, nullptr, &bias)
            .RoundedTo(kType),
        "out");
  }
};

// Candidates: the heuristic's algorithms (the stand-in offers
// kEmulatedAlgoCandidates); Run takes the first until Choose picks
// another, and every candidate computes the product.
TEST_F(LtGemmOnEmulationTest, ChooseMakesRunTakeThatCandidate) {
  BiasedForward p;
  const LtGemmArgs g = p.Args();
  ASSERT_TRUE(gemm_->Run(g).ok());
  EXPECT_EQ(LastLtMatmulCandidate(), 0);
  absl::StatusOr<int> count = gemm_->Candidates(g, LtGemm::kMostCandidates);
  ASSERT_TRUE(count.ok()) << count.status();
  ASSERT_EQ(*count, kEmulatedAlgoCandidates);
  for (int i : {2, 1, 0}) {
    ASSERT_TRUE(gemm_->Choose(g, i).ok());
    ASSERT_TRUE(gemm_->Run(g).ok());
    EXPECT_EQ(LastLtMatmulCandidate(), i);
    p.ExpectOutRight();
  }
  // Asking for one leaves one to choose from.
  ASSERT_EQ(gemm_->Candidates(g, 1).value_or(0), 1);
  const absl::Status beyond = gemm_->Choose(g, 1);
  EXPECT_EQ(beyond.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(beyond.message().find("candidate 1 of a product with 1"),
            std::string::npos)
      << beyond;
  EXPECT_EQ(gemm_->Choose(g, -1).code(), absl::StatusCode::kInvalidArgument);
  for (int most : {0, LtGemm::kMostCandidates + 1}) {
    const absl::Status bad = gemm_->Candidates(g, most).status();
    EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument) << most;
    EXPECT_NE(bad.message().find("asked for"), std::string::npos) << bad;
  }
  // A product with no algorithm has no candidates either.
  DeviceMatrix w32(CUDA_R_32F, 4, 8, 4, 1), in32(CUDA_R_32F, 4, 2, 4, 2);
  DeviceMatrix out16(CUDA_R_16BF, 8, 2, 8, 3);
  EXPECT_EQ(gemm_->Candidates(Forward(out16, in32, w32), 4).status().code(),
            absl::StatusCode::kUnimplemented);
}

// A choice line (what gemm_bench --choices writes) makes the plan of its
// product take that candidate; other products, and a choice of more
// candidates than the heuristic offers here, take the heuristic's first.
TEST_F(LtGemmOnEmulationTest, ChoicesMakePlansTakeTheirCandidates) {
  BiasedForward p;
  const LtGemmArgs chosen = p.Args();
  const LtGemmArgs plain = Forward(p.out, p.inp, p.weight);  // no line
  const LtGemmArgs beyond = p.InputGradArgs();
  const std::string text =
      absl::StrCat("# made by a test\n\n", LtGemm::ChoiceLine(chosen, 2, 3),
                   "\n  ", LtGemm::ChoiceLine(beyond, 5, 8), "\n");
  ASSERT_TRUE(gemm_->SetChoices(text).ok()) << gemm_->SetChoices(text);
  ASSERT_TRUE(gemm_->Run(chosen).ok());
  EXPECT_EQ(LastLtMatmulCandidate(), 2);
  p.ExpectOutRight();
  ASSERT_TRUE(gemm_->Run(plain).ok());
  EXPECT_EQ(LastLtMatmulCandidate(), 0);
  ASSERT_TRUE(gemm_->Run(beyond).ok());
  EXPECT_EQ(LastLtMatmulCandidate(), 0);
  EXPECT_EQ(gemm_->choices_taken(), 1);
}

// StartTuning: the next run of each product not timed yet (planned before
// or not) runs every candidate (warm-up and reps) and keeps the one its
// choice line names; a product SetChoices covers is not timed, nor is one
// run again; FinishTuning returns the lines (what SetChoices reads back)
// and stops the timing.
TEST_F(LtGemmOnEmulationTest, TuningTimesEachProductOnceAndKeepsTheWinner) {
  BiasedForward p;
  const LtGemmArgs planned = p.Args();
  const LtGemmArgs fresh = Forward(p.out, p.inp, p.weight);  // no bias
  const LtGemmArgs chosen = p.InputGradArgs();
  ASSERT_TRUE(gemm_->SetChoices(LtGemm::ChoiceLine(chosen, 1, 3)).ok());
  ASSERT_TRUE(gemm_->Run(planned).ok());  // planned before the timing
  ASSERT_TRUE(gemm_->StartTuning(3, 2).ok());
  for (int run = 0; run < 2; ++run) {
    ASSERT_TRUE(gemm_->Run(planned).ok());
    ASSERT_TRUE(gemm_->Run(fresh).ok());
    ASSERT_TRUE(gemm_->Run(chosen).ok());
    EXPECT_EQ(LastLtMatmulCandidate(), 1);
  }
  EXPECT_EQ(gemm_->tuned(), 2);
  EXPECT_EQ(gemm_->tuned_candidates(), 2 * kEmulatedAlgoCandidates);
  const std::string lines = gemm_->FinishTuning();
  EXPECT_TRUE(LtGemm::CheckChoices(lines).ok()) << lines;
  const std::vector<std::string> each = absl::StrSplit(lines, '\n');
  ASSERT_EQ(each.size(), 3u) << lines;  // two lines and the end
  EXPECT_EQ(each[2], "");
  int n = 0;
  for (const LtGemmArgs& g : {planned, fresh}) {
    const std::string& line = each[n++];
    const std::string want = LtGemm::ChoiceLine(g, 0, 3);
    ASSERT_EQ(line.substr(0, line.find(" candidate=")),
              want.substr(0, want.find(" candidate=")))
        << lines;
    EXPECT_EQ(line.substr(line.find(" of=")), " of=3") << line;
    const int winner = line[line.find("candidate=") + 10] - '0';
    ASSERT_TRUE(gemm_->Run(g).ok());
    EXPECT_EQ(LastLtMatmulCandidate(), winner) << line;
  }
  ASSERT_TRUE(gemm_->Run(planned).ok());
  p.ExpectOutRight();
  // Stopped: a new product takes the heuristic's first, untimed.
  DeviceMatrix dweight(CUDA_R_32F, p.kIn, p.kOut, p.kIn, 7);
  ASSERT_TRUE(gemm_
                  ->Run(engine::cuda::LinearWeightGradArgs(
                      static_cast<float*>(dweight.get()), p.out.get(),
                      p.inp.get(), p.kBatch, p.kIn, p.kOut, p.kType))
                  .ok());
  EXPECT_EQ(LastLtMatmulCandidate(), 0);
  EXPECT_EQ(gemm_->tuned(), 0);
  EXPECT_EQ(gemm_->FinishTuning(), "");
  for (const auto& [candidates, reps] :
       {std::pair{0, 3}, std::pair{LtGemm::kMostCandidates + 1, 3},
        std::pair{3, 0}, std::pair{3, 101}}) {
    const absl::Status bad = gemm_->StartTuning(candidates, reps);
    EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument)
        << candidates << " " << reps;
    EXPECT_NE(bad.message().find("gemm tuning: "), std::string::npos) << bad;
  }
}

TEST_F(LtGemmOnEmulationTest, BadChoicesAreRejectedNamingTheLine) {
  BiasedForward p;
  const LtGemmArgs g = p.Args();
  const std::string good = LtGemm::ChoiceLine(g, 1, 3);
  ASSERT_TRUE(gemm_->SetChoices(good).ok());
  const auto with = [&](const std::string& from, const std::string& to) {
    std::string line = good;
    line.replace(line.find(from), from.size(), to);
    return "# first\n" + line;
  };
  std::string grad_with_gelu = with("bias=add", "bias=grad");
  grad_with_gelu.replace(grad_with_gelu.find("gelu=none"), 9, "gelu=apply");
  const struct {
    std::string text, message;
  } cases[] = {
      {with("m=16 ", ""), "line 2: no m="},
      {with("m=16", "m=0"), "line 2: m=0: not a whole number >= 1"},
      {with("k=8", "k=eight"), "k=eight: not a whole number"},
      {with("gelu=none", "gelu=relu"), "gelu=relu: not one of none, apply"},
      {with("ab=bf16", "ab=fp16"), "ab=fp16: not one of fp32, bf16"},
      {with("candidate=1", "candidate=3"), "candidate=3 of=3: need candidate"},
      {with("of=3", "of=33"), "need candidate < of <= 32"},
      {with("ta=1", "ta=2"), "ta, tb and acc are 0 or 1"},
      {with("bias=add", "bias=1"), "bias=1: not one of none, add, grad"},
      {grad_with_gelu,
       "bias=grad with gelu=apply: the bias gradient epilogue takes no GELU"},
      {with("m=16", "m=16 m=16"),
       "'m=16' is not a name=value field named once"},
      {with("m=16", "m=16 speed"), "'speed' is not a name=value field"},
      {with("m=16", "m=16 speed=9"), "unknown field 'speed'"},
      {good + "\n" + good, "line 2: the same product as an earlier line"},
  };
  for (const auto& c : cases) {
    const absl::Status s = gemm_->SetChoices(c.text);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_NE(s.message().find(c.message), std::string::npos)
        << s << "\nwanted: " << c.message;
  }
  // The good choices set first still hold.
  ASSERT_TRUE(gemm_->Run(g).ok());
  EXPECT_EQ(LastLtMatmulCandidate(), 1);
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
