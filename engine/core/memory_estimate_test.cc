// The memory estimate against what the CPU engine really allocates: after
// building a model and its optimizer and running a full step, the backend's
// peak equals the estimate's allocated bytes exactly.
#include "engine/core/memory_estimate.h"

#include <limits>
#include <vector>

#include "engine/core/adamw.h"
#include "engine/core/rng.h"
#include "engine/core/trainer_test_support.h"
#include "engine/cpu/cpu_backend.h"
#include "gtest/gtest.h"

namespace trainyard::engine {
namespace {

TEST(MemoryEstimateTest, GptMatchesTheCpuEnginesPeak) {
  for (const GptConfig& c :
       {GptConfig{2, 2, 16, 8, 30}, GptConfig{3, 4, 32, 24, 100}}) {
    for (int64_t batch : {1, 5}) {
      auto backend = *CpuBackend::Create({});
      auto model = *GptModel::Create(c, batch, backend.get());
      Batch b;
      b.size = batch;
      b.seq_len = c.seq_len;
      b.tokens.assign(batch * c.seq_len, 3);
      b.targets.assign(batch * c.seq_len, 4);
      const MemoryEstimate e = EstimateGptMemory(c, batch, 1, DeviceKind::kCpu);
      EXPECT_EQ(MeasuredPeak(*model, *backend, b), e.allocated());
      EXPECT_EQ(e.weights, 4 * model->num_parameters());
      EXPECT_GT(e.total(), e.allocated());
    }
  }
}

TEST(MemoryEstimateTest, MlpMatchesTheCpuEnginesPeak) {
  const MlpConfig c{20, {16, 8}, 10};
  auto backend = *CpuBackend::Create({});
  auto model = *MlpModel::Create(c, 7, backend.get());
  Batch b;
  b.size = 7;
  b.feature_dim = 20;
  b.features.assign(7 * 20, 0.5f);
  b.targets.assign(7, 3);
  const MemoryEstimate e = EstimateMlpMemory(c, 7, 2, DeviceKind::kCpu);
  EXPECT_EQ(MeasuredPeak(*model, *backend, b), e.allocated());
}

TEST(MemoryEstimateTest, GrowsWithTheBatchAndTheDevice) {
  const GptConfig c{4, 4, 128, 128, 65};
  const MemoryEstimate a = EstimateGptMemory(c, 8, 2, DeviceKind::kCpu);
  const MemoryEstimate b = EstimateGptMemory(c, 16, 2, DeviceKind::kCpu);
  EXPECT_EQ(b.activations, 2 * a.activations);
  EXPECT_EQ(b.weights, a.weights);
  EXPECT_EQ(EstimateGptMemory(c, 8, 2, DeviceKind::kCuda).overhead,
            kCudaOverheadBytes);
  // The largest sizes a spec may ask for: huge, never negative.
  const GptConfig biggest{256, 256, 256, 65536, 1 << 20};
  const MemoryEstimate huge =
      EstimateGptMemory(biggest, 65536, 256, DeviceKind::kCpu);
  EXPECT_EQ(huge.activations, int64_t{1} << 60);
  EXPECT_GT(huge.total(), 0);
  const MemoryEstimate huge_gpu =
      EstimateGptMemory(biggest, 65536, 256, DeviceKind::kCuda);
  EXPECT_GT(huge_gpu.activations, int64_t{1} << 50);
  EXPECT_GT(huge_gpu.total(), 0);
}

// The CUDA backend keeps one float per query row where the CPU keeps T of
// them (AttentionState), and its workspace is the fixed arena share.
TEST(MemoryEstimateTest, CudaAttentionKeepsNoTxTMatrix) {
  const GptConfig c{2, 4, 64, 256, 100};
  const MemoryEstimate cpu = EstimateGptMemory(c, 3, 1, DeviceKind::kCpu);
  const MemoryEstimate gpu = EstimateGptMemory(c, 3, 1, DeviceKind::kCuda);
  const int64_t saved_per_layer = c.n_head * c.seq_len * (c.seq_len - 1);
  EXPECT_EQ(cpu.activations - gpu.activations,
            4 * 3 * (c.n_layer + 1) * saved_per_layer);
  EXPECT_EQ(gpu.workspace, kCudaWorkspaceBytes);
  EXPECT_EQ(
      EstimateMlpMemory({20, {16}, 10}, 7, 2, DeviceKind::kCuda).workspace,
      kCudaWorkspaceBytes);
}

// The CUDA backend's ordered attention backward keeps fp32 sums of dQ
// ([T, C] a sequence) and a counter per query row beside delta in its
// scratch (one buffer for all layers), and the estimate says so; the CPU's
// does not depend on it.
TEST(MemoryEstimateTest, OrderedAttentionBackwardCountsItsDqSums) {
  const GptConfig c{2, 4, 64, 256, 100};
  const MemoryEstimate two =
      EstimateGptMemory(c, 3, 1, DeviceKind::kCuda, DType::kBF16);
  const MemoryEstimate ordered =
      EstimateGptMemory(c, 3, 1, DeviceKind::kCuda, DType::kBF16,
                        AttentionState::kLogSumExpWithDqSums);
  const int64_t rows = c.n_head * c.seq_len;
  EXPECT_EQ(ordered.activations - two.activations,
            4 * 3 * (c.seq_len * c.d_model + rows + 8));
  EXPECT_EQ(
      EstimateGptMemory(c, 3, 1, DeviceKind::kCpu, DType::kBF16,
                        AttentionState::kLogSumExpWithDqSums)
          .activations,
      EstimateGptMemory(c, 3, 1, DeviceKind::kCpu, DType::kBF16).activations);
}

// The classifier is fused: the vocabulary costs one [T, V] logits buffer
// per sequence in the activation dtype (the gradient is written over it),
// with no probabilities and no separate gradient beside it.
TEST(MemoryEstimateTest, ClassifierKeepsOnlyTheLogits) {
  const GptConfig c{2, 4, 64, 256, 100};
  GptConfig wider = c;
  wider.vocab_size += 64;
  for (const DType act : {DType::kF32, DType::kBF16}) {
    const MemoryEstimate a = EstimateGptMemory(c, 3, 1, DeviceKind::kCuda, act);
    const MemoryEstimate b =
        EstimateGptMemory(wider, 3, 1, DeviceKind::kCuda, act);
    EXPECT_EQ(b.activations - a.activations,
              3 * c.seq_len * 64 * DTypeBytes(act))
        << DTypeName(act);
  }
}

TEST(MemoryEstimateTest, HostileSizesSaturateInsteadOfOverflowing) {
  constexpr int64_t kBig = std::numeric_limits<int64_t>::max();
  for (const GptConfig& c :
       {GptConfig{kBig, kBig, kBig, kBig, kBig}, GptConfig{-1, 2, 64, 64, 256},
        GptConfig{256, 1, 65536, 65536, 1 << 20}}) {
    const MemoryEstimate e =
        EstimateGptMemory(c, kBig, 1 << 30, DeviceKind::kCuda);
    EXPECT_EQ(e.weights, int64_t{1} << 60);
    EXPECT_EQ(e.activations, int64_t{1} << 60);
    EXPECT_GT(e.total(), int64_t{1} << 60);
  }
  const MemoryEstimate neg =
      EstimateGptMemory({2, 2, 16, 8, 30}, -5, -3, DeviceKind::kCpu);
  EXPECT_EQ(neg.activations, 0);
  EXPECT_GT(neg.workspace, 0);
  MlpConfig mlp{kBig, std::vector<int64_t>(300, kBig), kBig};
  const MemoryEstimate m = EstimateMlpMemory(mlp, kBig, 1, DeviceKind::kCpu);
  EXPECT_EQ(m.weights, int64_t{1} << 60);
  EXPECT_EQ(m.activations, int64_t{1} << 60);
  EXPECT_EQ(m.workspace, int64_t{1} << 60);
  EXPECT_GT(m.total(), 0);
}

}  // namespace
}  // namespace trainyard::engine
