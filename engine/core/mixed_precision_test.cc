// bf16 mixed precision on the CPU backend (bf16 storage, fp32 math): the
// rounding helpers, the models' working copies, the memory estimate held to
// the measured peak, and GPT and MLP training curves against fp32. The CUDA
// backend's bf16 kernels are checked against these same CPU ops in
// engine/cuda/cuda_bf16_test.cc.
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "engine/core/adamw.h"
#include "engine/core/bf16.h"
#include "engine/core/gpt.h"
#include "engine/core/memory_estimate.h"
#include "engine/core/mlp.h"
#include "engine/core/rng.h"
#include "engine/core/trainer_test_support.h"
#include "engine/cpu/cpu_backend.h"
#include "gtest/gtest.h"

namespace trainyard::engine {
namespace {

std::unique_ptr<CpuBackend> Backend16() {
  CpuBackendOptions o;
  o.activation_dtype = DType::kBF16;
  return *CpuBackend::Create(o);
}

TEST(Bf16Test, RoundsToNearestEven) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even 1.
  EXPECT_EQ(FloatToBf16(1.0f + 0x1p-8f), 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: up.
  EXPECT_EQ(FloatToBf16(1.0f + 3 * 0x1p-8f), 0x3f82);
  EXPECT_EQ(FloatToBf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);  // past half
  EXPECT_EQ(FloatToBf16(-2.5f), 0xc020);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(NAN))));
  EXPECT_TRUE(std::isinf(Bf16ToFloat(FloatToBf16(INFINITY))));
  // The relative error bound every tolerance of the bf16 tests builds on.
  Rng rng(3);
  for (int i = 0; i < 1000; ++i) {
    const float x = rng.Normal(0.f, 100.f);
    EXPECT_LE(std::fabs(RoundToBf16(x) - x), std::fabs(x) * 0x1p-8f) << x;
  }
}

// Losses of `steps` AdamW steps on fixed batches, from the same init.
std::vector<double> GptLosses(Backend& backend, const GptConfig& c, int steps) {
  auto model = *GptModel::Create(c, 4, &backend);
  AdamWConfig config;
  config.weight_decay = 0.1;
  auto opt = *AdamW::Create(config, &model->parameters(), &backend);
  Rng rng(7);
  EXPECT_TRUE(model->InitializeParameters(rng).ok());
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    const Batch b = NextTokenBatch(c, 4, 100 + s % 4);
    model->ZeroGradients();
    absl::StatusOr<ForwardStats> st = model->Forward(b);
    EXPECT_TRUE(st.ok()) << st.status();
    losses.push_back(st->loss_sum / static_cast<double>(st->examples));
    model->Backward(1.f / static_cast<float>(st->examples));
    EXPECT_TRUE(opt->Step(3e-3).ok());
  }
  return losses;
}

// 50 steps of a small GPT in bf16 follow the fp32 run. Each bf16 store
// rounds with relative error <= 2^-8; a forward pass chains ~10 rounded
// stores per block, so logits carry a relative error of order 1e-2 and
// the loss (a log-sum-exp of them) an absolute error of order 1e-2; the
// fp32 masters keep the two runs from drifting further apart over steps.
// 0.05 absolute (1-2% of the losses here) is several times what we see,
// and far below the 1.5+ the loss falls by.
TEST(MixedPrecisionTest, Bf16GptLossCurveTracksFp32) {
  const GptConfig c{2, 2, 32, 16, 16};
  auto f32 = *CpuBackend::Create({});
  auto b16 = Backend16();
  const std::vector<double> a = GptLosses(*f32, c, 50);
  const std::vector<double> b = GptLosses(*b16, c, 50);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(a[i], b[i], 0.05) << "step " << i;
  }
  EXPECT_LT(b.back(), b.front() - 1.5);  // and it learns
}

// The working copy is the masters rounded to bf16 after init and after
// every AdamW step (the optimizer writes both in one pass).
TEST(MixedPrecisionTest, WorkingWeightsAreTheRoundedMasters) {
  const GptConfig c{1, 2, 16, 8, 16};
  auto backend = Backend16();
  auto model = *GptModel::Create(c, 2, backend.get());
  auto opt = *AdamW::Create({}, &model->parameters(), backend.get());
  Rng rng(1);
  ASSERT_TRUE(model->InitializeParameters(rng).ok());
  for (int s = 0; s < 3; ++s) {
    model->ZeroGradients();
    ASSERT_TRUE(model->Forward(NextTokenBatch(c, 2, s)).ok());
    model->Backward(0.05f);
    ASSERT_TRUE(opt->Step(1e-2).ok());
    for (const Parameter& p : model->parameters()) {
      ASSERT_NE(p.working, static_cast<void*>(p.value));
      const uint16_t* w = static_cast<const uint16_t*>(p.working);
      for (int64_t i = 0; i < p.size(); ++i) {
        ASSERT_EQ(w[i], FloatToBf16(p.value[i])) << p.name << "[" << i << "]";
      }
    }
  }
}

// Masters and moments after `steps` steps from `first`, starting from
// `resume` (as a checkpoint restore writes them: masters only, never the
// working copy) when not null.
std::vector<std::vector<float>> TrainState(
    Backend& backend, const GptConfig& c, int first, int steps,
    const std::vector<std::vector<float>>* resume) {
  auto model = *GptModel::Create(c, 2, &backend);
  auto opt = *AdamW::Create({}, &model->parameters(), &backend);
  Rng rng(9);
  EXPECT_TRUE(model->InitializeParameters(rng).ok());
  std::vector<std::pair<float*, int64_t>> tensors;
  for (const Parameter& p : model->parameters()) {
    tensors.push_back({p.value, p.size()});
  }
  for (const AdamW::MomentRef& m : opt->moments()) {
    tensors.push_back({m.data, NumElements(m.shape)});
  }
  if (resume != nullptr) {
    for (size_t i = 0; i < tensors.size(); ++i) {
      backend.CopyToDevice(tensors[i].first, (*resume)[i].data(),
                           tensors[i].second * 4);
    }
    opt->set_step_count(first);
  }
  for (int s = first; s < first + steps; ++s) {
    model->ZeroGradients();
    EXPECT_TRUE(model->Forward(NextTokenBatch(c, 2, s)).ok());
    model->Backward(0.05f);
    EXPECT_TRUE(opt->Step(1e-2).ok());
  }
  std::vector<std::vector<float>> out;
  for (auto [data, n] : tensors) out.emplace_back(data, data + n);
  return out;
}

TEST(MixedPrecisionTest, Bf16ResumeFromMastersIsExact) {
  const GptConfig c{2, 2, 16, 8, 16};
  auto backend = Backend16();
  const auto straight = TrainState(*backend, c, 0, 8, nullptr);
  const auto half = TrainState(*backend, c, 0, 4, nullptr);
  const auto resumed = TrainState(*backend, c, 4, 4, &half);
  ASSERT_EQ(straight.size(), resumed.size());
  for (size_t i = 0; i < straight.size(); ++i) {
    EXPECT_EQ(0, std::memcmp(straight[i].data(), resumed[i].data(),
                             straight[i].size() * 4))
        << "tensor " << i;
  }
}

TEST(MixedPrecisionTest, MemoryEstimateMatchesTheBf16Peak) {
  for (const GptConfig& c :
       {GptConfig{2, 2, 16, 8, 30}, GptConfig{3, 4, 32, 24, 100}}) {
    for (int64_t batch : {1, 5}) {
      auto backend = Backend16();
      auto model = *GptModel::Create(c, batch, backend.get());
      const MemoryEstimate e =
          EstimateGptMemory(c, batch, 1, DeviceKind::kCpu, DType::kBF16);
      const MemoryEstimate f =
          EstimateGptMemory(c, batch, 1, DeviceKind::kCpu, DType::kF32);
      EXPECT_EQ(MeasuredPeak(*model, *backend, NextTokenBatch(c, batch, 1)),
                e.allocated());
      EXPECT_EQ(e.weights, 6 * model->num_parameters());  // master + bf16
      EXPECT_EQ(e.gradients, f.gradients);
      EXPECT_LT(e.activations, f.activations);
    }
  }
  const MlpConfig c{20, {16, 8}, 10};
  auto backend = Backend16();
  auto model = *MlpModel::Create(c, 7, backend.get());
  Batch b;
  b.size = 7;
  b.feature_dim = 20;
  b.features.assign(7 * 20, 0.5f);
  b.targets.assign(7, 3);
  EXPECT_EQ(
      MeasuredPeak(*model, *backend, b),
      EstimateMlpMemory(c, 7, 1, DeviceKind::kCpu, DType::kBF16).allocated());
}

TEST(MixedPrecisionTest, Bf16MlpLearns) {
  const MlpConfig c{8, {16}, 4};
  auto backend = Backend16();
  auto model = *MlpModel::Create(c, 16, backend.get());
  auto opt = *AdamW::Create({}, &model->parameters(), backend.get());
  Rng rng(2);
  ASSERT_TRUE(model->InitializeParameters(rng).ok());
  Batch b;
  b.size = 16;
  b.feature_dim = 8;
  for (int i = 0; i < 16; ++i) {
    for (int f = 0; f < 8; ++f) b.features.push_back(f == i % 4 ? 1.f : 0.f);
    b.targets.push_back(i % 4);
  }
  double first = 0, last = 0;
  for (int s = 0; s < 60; ++s) {
    model->ZeroGradients();
    absl::StatusOr<ForwardStats> st = model->Forward(b);
    ASSERT_TRUE(st.ok()) << st.status();
    (s == 0 ? first : last) = st->loss_sum / 16;
    model->Backward(1.f / 16);
    ASSERT_TRUE(opt->Step(1e-2).ok());
  }
  EXPECT_LT(last, 0.2 * first);
}

}  // namespace
}  // namespace trainyard::engine
