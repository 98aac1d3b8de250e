// CudaBackend's own contract: creation errors (and the attention tiling's
// name), the arena (zeroed blocks,
// the peak, exhaustion that names the bytes, no allocation during a step),
// errors kept with their file:line until Synchronize reports them, and a
// GPT with its optimizer fitting exactly the arena the memory estimate
// asks for. The creation errors need no GPU; the rest skip without one.
#include "engine/cuda/cuda_backend.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/core/adamw.h"
#include "engine/core/gpt.h"
#include "engine/core/memory_estimate.h"
#include "engine/core/rng.h"
#include "engine/core/short_of_memory.h"
#include "engine/cuda/cuda_test_support.h"
#include "gtest/gtest.h"

namespace trainyard::engine {
namespace {

using cuda_test::DevicePresent;
using cuda_test::Download;
using cuda_test::kNoDevice;

TEST(CudaBackendCreateTest, RefusesAnArenaSmallerThanItsWorkspace) {
  CudaBackendOptions options;
  options.arena_bytes = 1000;
  const auto backend = CreateCudaBackend(options);
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(backend.status().message(), "1000 bytes"))
      << backend.status();
}

// The attention kernels' tilings by name, and nothing else.
TEST(CudaBackendCreateTest, ParsesTheAttentionTilingsAndRefusesOthers) {
  for (const cuda::AttentionTcTiling& t : cuda::kAttentionTcTilings) {
    const std::string name = cuda::AttentionTcTilingName(t);
    EXPECT_EQ(name,
              absl::StrCat(t.warpgroup
                               ? std::string(t.warps == 8 ? "wgmma2" : "wgmma")
                               : absl::StrCat(t.warp_rows, "x", t.warps),
                           t.swizzled ? "-swizzled" : ""));
    const auto parsed = ParseAttentionTiling(name);
    ASSERT_TRUE(parsed.ok()) << name << ": " << parsed.status();
    EXPECT_EQ(parsed->warp_rows, t.warp_rows) << name;
    EXPECT_EQ(parsed->warps, t.warps) << name;
    EXPECT_EQ(parsed->warpgroup, t.warpgroup) << name;
    EXPECT_EQ(parsed->swizzled, t.swizzled) << name;
  }
  for (const char* bad :
       {"", "16x2", "32x8", "32", "x4", "32x4 ", "32X4", "+32x4", "032x4",
        "wide", "WGMMA", "16x4wg", "16x8wg", "wgmma4", "wgmma2 ",
        "32x4-swizzled", "16x4 swizzled", "swizzled"}) {
    const auto parsed = ParseAttentionTiling(bad);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument)
        << "'" << bad << "'";
    EXPECT_TRUE(absl::StrContains(
        parsed.status().message(),
        absl::StrCat("'", bad,
                     "' is not one of 16x4, 32x2, 32x4, wgmma, 16x4-swizzled, "
                     "wgmma-swizzled, 16x8, 16x8-swizzled, wgmma2, "
                     "wgmma2-swizzled")))
        << parsed.status();
  }
}

// YARD_ATTENTION_TILING: one tiling for both passes, or the forward's and
// the backward's apart; a part that is not a tiling is named.
TEST(CudaBackendCreateTest, ParsesTheForwardAndBackwardTilings) {
  const auto same = ParseAttentionTilings("wgmma-swizzled");
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(cuda::AttentionTcTilingName(same->forward), "wgmma-swizzled");
  EXPECT_EQ(cuda::AttentionTcTilingName(same->backward), "wgmma-swizzled");
  const auto apart = ParseAttentionTilings("wgmma-swizzled,16x4-swizzled");
  ASSERT_TRUE(apart.ok()) << apart.status();
  EXPECT_EQ(cuda::AttentionTcTilingName(apart->forward), "wgmma-swizzled");
  EXPECT_EQ(cuda::AttentionTcTilingName(apart->backward), "16x4-swizzled");
  const struct {
    const char* text;
    const char* error;
  } bad[] = {
      {"16x4,", "the backward's attention tiling '' is not one of 16x4"},
      {",16x4", "attention tiling '' is not one of 16x4"},
      {"32x4,16x4,wgmma",
       "the backward's attention tiling '16x4,wgmma' is not one of"},
      {"wgmma;16x4", "attention tiling 'wgmma;16x4' is not one of"},
  };
  for (const auto& b : bad) {
    const auto parsed = ParseAttentionTilings(b.text);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument)
        << b.text;
    EXPECT_TRUE(absl::StartsWith(parsed.status().message(), b.error))
        << b.text << ": " << parsed.status();
  }
}

// The bias gradient's two ways by name.
TEST(CudaBackendCreateTest, ParsesTheBiasGradientsAndRefusesOthers) {
  EXPECT_EQ(*ParseBiasGradient("column-sums"), BiasGradient::kColumnSums);
  EXPECT_EQ(*ParseBiasGradient("epilogue"), BiasGradient::kEpilogue);
  for (const char* bad : {"", "Epilogue", "epilogue ", "bgradb"}) {
    const auto parsed = ParseBiasGradient(bad);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument)
        << "'" << bad << "'";
    EXPECT_TRUE(absl::StrContains(
        parsed.status().message(),
        absl::StrCat("bias gradient '", bad,
                     "' is not one of column-sums, epilogue")))
        << parsed.status();
  }
}

// The attention backward's two splits by name, and what each asks the
// model to keep.
TEST(CudaBackendCreateTest, ParsesTheAttentionBackwardsAndRefusesOthers) {
  EXPECT_EQ(*ParseAttentionBackward("two-kernel"),
            cuda::AttentionTcBackward::kTwoKernels);
  EXPECT_EQ(*ParseAttentionBackward("ordered-dq"),
            cuda::AttentionTcBackward::kOrderedDq);
  EXPECT_EQ(CudaAttentionState(cuda::AttentionTcBackward::kTwoKernels),
            AttentionState::kLogSumExp);
  EXPECT_EQ(CudaAttentionState(cuda::AttentionTcBackward::kOrderedDq),
            AttentionState::kLogSumExpWithDqSums);
  for (const char* bad : {"", "ordered", "Two-Kernel", "ordered-dq ", "one"}) {
    const auto parsed = ParseAttentionBackward(bad);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument)
        << "'" << bad << "'";
    EXPECT_TRUE(absl::StrContains(
        parsed.status().message(),
        absl::StrCat("attention backward '", bad,
                     "' is not one of two-kernel, ordered-dq")))
        << parsed.status();
  }
}

// Checked before any device is touched, so it holds with or without one.
TEST(CudaBackendCreateTest, RefusesATilingTheForwardDoesNotHave) {
  CudaBackendOptions options;
  options.arena_bytes = int64_t{64} << 20;
  options.attention_tiling = {16, 2};
  const auto backend = CreateCudaBackend(options);
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      absl::StrContains(backend.status().message(),
                        "attention tiling 16x2 is not one of 16x4, 32x2, 32x4"))
      << backend.status();
}

// Checked before any device is touched too.
TEST(CudaBackendCreateTest, RefusesBadGemmChoices) {
  CudaBackendOptions options;
  options.arena_bytes = int64_t{64} << 20;
  options.gemm_choices = "# from a file\nm=16 n=4\n";
  const auto backend = CreateCudaBackend(options);
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(backend.status().message(),
                                "cuda backend: gemm choices, line 2: no k="))
      << backend.status();
}

TEST(CudaBackendCreateTest, RefusesMissingDevices) {
  CudaBackendOptions options;
  options.arena_bytes = int64_t{64} << 20;
  options.device = 999;
  const auto backend = CreateCudaBackend(options);
  if (DevicePresent()) {
    EXPECT_EQ(backend.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(backend.status().message(), "device 999"))
        << backend.status();
  } else {
    EXPECT_EQ(backend.status().code(), absl::StatusCode::kUnavailable)
        << backend.status();
  }
}

TEST(CudaBackendCreateTest, RefusesAGrantLargerThanTheDevice) {
  if (!DevicePresent()) GTEST_SKIP() << kNoDevice;
  CudaBackendOptions options;
  options.arena_bytes = int64_t{1} << 50;  // a petabyte
  const auto backend = CreateCudaBackend(options);
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(backend.status().message(),
                                "grant of 1125899906842624 bytes"))
      << backend.status();
  // Memory this device lacks, not the job's mistake (yard-train exits 5).
  EXPECT_TRUE(IsShortOfMemory(backend.status())) << backend.status();
}

class CudaBackendTest : public ::testing::Test {
 protected:
  std::unique_ptr<CudaBackend> Make(int64_t arena_bytes) {
    CudaBackendOptions options;
    options.arena_bytes = arena_bytes;
    auto backend = CudaBackend::Create(options);
    EXPECT_TRUE(backend.ok()) << backend.status();
    return backend.ok() ? *std::move(backend) : nullptr;
  }
  void SetUp() override {
    if (!DevicePresent()) GTEST_SKIP() << kNoDevice;
  }
};

TEST_F(CudaBackendTest, AllocateHandsOutZeroedBlocksAndTracksThePeak) {
  auto backend = Make(kCudaWorkspaceBytes + (int64_t{8} << 20));
  ASSERT_NE(backend, nullptr);
  EXPECT_EQ(backend->name(), "cuda");
  {
    auto a = *backend->Allocate(1000);
    auto b = *backend->Allocate(3000);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a->data()) % 256, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % 256, 0u);
    backend->Fill(a->f32(), 250, 3.f);
    EXPECT_EQ(backend->peak_allocated_bytes(), 4000);
  }
  // The freed block comes back zeroed.
  auto c = *backend->Allocate(1000);
  EXPECT_EQ(Download(*backend, c->f32(), 250), std::vector<float>(250, 0.f));
  EXPECT_EQ(backend->peak_allocated_bytes(), 4000);
  EXPECT_TRUE(backend->Synchronize().ok());
}

TEST_F(CudaBackendTest, ExhaustedArenaNamesTheBytes) {
  auto backend = Make(kCudaWorkspaceBytes + (int64_t{4} << 20));
  ASSERT_NE(backend, nullptr);
  auto big = backend->Allocate(int64_t{16} << 20);
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(big.status().message(), "16777216 bytes"))
      << big.status();
  EXPECT_TRUE(absl::StrContains(big.status().message(), "grant"))
      << big.status();
  EXPECT_EQ(backend->Allocate(-1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(backend->Allocate(int64_t{1} << 20).ok());
}

TEST_F(CudaBackendTest, LaunchErrorsCarryTheirSiteUntilSynchronize) {
  auto backend = Make(kCudaWorkspaceBytes + (int64_t{4} << 20));
  ASSERT_NE(backend, nullptr);
  auto buf = *backend->Allocate(64);
  // More rows than a grid holds: refused at launch, nothing runs.
  backend->SoftmaxCrossEntropyForward(buf->f32(), buf->i32(), nullptr,
                                      buf->data(), buf->i32(), int64_t{1} << 40,
                                      2);
  backend->Fill(buf->f32(), 16, 1.f);  // later ops do not mask the first error
  const absl::Status s = backend->Synchronize();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(absl::StrContains(s.message(), "cuda_backend_ops.cc:")) << s;
  EXPECT_TRUE(
      absl::StrContains(s.message(), "LaunchSoftmaxCrossEntropyForward"))
      << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "cudaErrorInvalidValue")) << s;
  EXPECT_TRUE(backend->Synchronize().ok());  // reported once
}

// A choice line for a linear layer's forward product reaches its plan;
// the other products keep the heuristic's first.
TEST_F(CudaBackendTest, GemmChoicesReachTheLinearProducts) {
  constexpr int64_t kBatch = 4, kIn = 8, kOut = 16;
  CudaBackendOptions options;
  options.arena_bytes = kCudaWorkspaceBytes + (int64_t{4} << 20);
  options.activation_dtype = DType::kBF16;
  // A choice line names no pointers.
  options.gemm_choices = cuda::LtGemm::ChoiceLine(
      cuda::LinearForwardArgs(nullptr, nullptr, nullptr, kBatch, kIn, kOut,
                              CUDA_R_16BF),
      0, 2);
  auto backend = CudaBackend::Create(options);
  ASSERT_TRUE(backend.ok()) << backend.status();
  CudaBackend& be = **backend;
  auto x = *be.Allocate(kBatch * kIn * 2), w = *be.Allocate(kOut * kIn * 2);
  auto y = *be.Allocate(kBatch * kOut * 2), dx = *be.Allocate(kBatch * kIn * 2);
  auto dw = *be.Allocate(kOut * kIn * 4);
  be.LinearForward(y->data(), x->data(), w->data(), nullptr, kBatch, kIn, kOut);
  EXPECT_EQ(be.gemm_choices_taken(), 1);
  be.LinearBackward(dx->data(), dw->f32(), nullptr, y->data(), x->data(),
                    w->data(), kBatch, kIn, kOut);
  EXPECT_EQ(be.gemm_choices_taken(), 1);
  EXPECT_TRUE(be.Synchronize().ok());
}

TEST_F(CudaBackendTest, GptFitsTheArenaItsEstimateAsksForAndStepsInPlace) {
  const GptConfig c{2, 4, 128, 64, 256};
  constexpr int64_t kBatch = 3;
  const MemoryEstimate e = EstimateGptMemory(c, kBatch, 1, DeviceKind::kCuda);
  auto backend = Make(e.allocated() + e.workspace);
  ASSERT_NE(backend, nullptr);
  auto model = GptModel::Create(c, kBatch, backend.get());
  ASSERT_TRUE(model.ok()) << model.status();
  auto opt = AdamW::Create({}, &(*model)->parameters(), backend.get());
  ASSERT_TRUE(opt.ok()) << opt.status();
  Rng rng(1);
  ASSERT_TRUE((*model)->InitializeParameters(rng).ok());
  const int64_t free_before = backend->arena_free_bytes();
  Batch batch;
  batch.size = kBatch;
  batch.seq_len = c.seq_len;
  for (int64_t i = 0; i < kBatch * c.seq_len; ++i) {
    batch.tokens.push_back(static_cast<int32_t>(i % c.vocab_size));
    batch.targets.push_back(static_cast<int32_t>((i * 7) % c.vocab_size));
  }
  (*model)->ZeroGradients();
  ASSERT_TRUE((*model)->Forward(batch).ok());
  (*model)->Backward(0.01f);
  ASSERT_TRUE((*opt)->Step(1e-3).ok());
  EXPECT_EQ(backend->arena_free_bytes(), free_before);  // nothing allocated
  EXPECT_EQ(backend->peak_allocated_bytes(), e.allocated());

  // A quarter short (far more than the slack in the backend's own share),
  // the job fails at setup with a clear message, in the model or the
  // optimizer, whichever allocates past the grant.
  ASSERT_GT(e.allocated() / 4, int64_t{2} << 20);
  auto small = Make(e.workspace + e.allocated() * 3 / 4);
  ASSERT_NE(small, nullptr);
  auto small_model = GptModel::Create(c, kBatch, small.get());
  absl::Status setup = small_model.status();
  if (setup.ok()) {
    setup =
        AdamW::Create({}, &(*small_model)->parameters(), small.get()).status();
  }
  EXPECT_EQ(setup.code(), absl::StatusCode::kResourceExhausted) << setup;
  EXPECT_TRUE(absl::StrContains(setup.message(), "grant")) << setup;
}

}  // namespace
}  // namespace trainyard::engine
