// The profiling wrapper is transparent (bitwise the wrapped backend's
// training), counts every op a GPT step makes, and keeps an error its
// timing waits took for the next Synchronize.
#include "engine/core/profiling_backend.h"

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/adamw.h"
#include "engine/core/gpt.h"
#include "engine/core/rng.h"
#include "engine/core/trainer_test_support.h"
#include "engine/cpu/cpu_backend.h"
#include "gtest/gtest.h"

namespace trainyard::engine {
namespace {

std::unique_ptr<CpuBackend> Cpu(DType dtype) {
  CpuBackendOptions o;
  o.activation_dtype = dtype;
  return *CpuBackend::Create(o);
}

struct Trained {
  std::vector<float> losses;
  std::vector<float> weights;  // every master weight, in order
};

// `steps` AdamW steps of a small GPT on `backend`.
Trained Train(Backend& backend, const GptConfig& c, int steps) {
  auto model = *GptModel::Create(c, 2, &backend);
  auto opt = *AdamW::Create({}, &model->parameters(), &backend);
  Rng rng(5);
  EXPECT_TRUE(model->InitializeParameters(rng).ok());
  Trained out;
  for (int s = 0; s < steps; ++s) {
    model->ZeroGradients();
    absl::StatusOr<ForwardStats> st = model->Forward(NextTokenBatch(c, 2, s));
    EXPECT_TRUE(st.ok()) << st.status();
    out.losses.push_back(static_cast<float>(st->loss_sum));
    model->Backward(0.1f);
    EXPECT_TRUE(opt->Step(1e-2).ok());
  }
  for (const Parameter& p : model->parameters()) {
    std::vector<float> host(p.size());
    backend.CopyToHost(host.data(), p.value, p.size() * 4);
    out.weights.insert(out.weights.end(), host.begin(), host.end());
  }
  EXPECT_TRUE(backend.Synchronize().ok());
  return out;
}

class ProfilingBackendTest : public ::testing::TestWithParam<DType> {};

TEST_P(ProfilingBackendTest, TrainsBitwiseAsTheWrappedBackendAndCountsOps) {
  const GptConfig c{2, 2, 16, 8, 16};
  constexpr int kSteps = 3;
  auto plain = Cpu(GetParam());
  ProfilingBackend profiled(Cpu(GetParam()));
  profiled.set_enabled(true);
  const Trained want = Train(*plain, c, kSteps);
  const Trained got = Train(profiled, c, kSteps);
  ASSERT_EQ(got.weights.size(), want.weights.size());
  EXPECT_EQ(0, std::memcmp(got.losses.data(), want.losses.data(),
                           want.losses.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(got.weights.data(), want.weights.data(),
                           want.weights.size() * sizeof(float)));

  std::map<std::string, OpTime> ops;
  const std::vector<OpTime> profile = profiled.Profile();
  for (size_t i = 0; i < profile.size(); ++i) {
    ops[profile[i].op] = profile[i];
    EXPECT_GE(profile[i].seconds, 0) << profile[i].op;
    if (i > 0) {
      EXPECT_LE(profile[i].seconds, profile[i - 1].seconds);
    }
  }
  const int64_t layers = c.n_layer;
  EXPECT_EQ(ops["AttentionForward"].calls, layers * kSteps);
  EXPECT_EQ(ops["AttentionBackward"].calls, layers * kSteps);
  EXPECT_EQ(ops["EmbeddingForward"].calls, kSteps);
  EXPECT_EQ(ops["EmbeddingBackward"].calls, kSteps);
  EXPECT_EQ(ops["SoftmaxCrossEntropyForward"].calls, kSteps);
  EXPECT_EQ(ops["SumSquaresEach"].calls, kSteps);
  EXPECT_EQ(ops["AdamWEach"].calls, kSteps);
  EXPECT_EQ(ops.count("AdamW"), 0u) << "one batched update a step";
  // The MLP's first product and the GELU: fused or not, one op each way;
  // the linear layers by shape (inputs x outputs).
  EXPECT_EQ(ops["LinearGeluForward 16x64"].calls, layers * kSteps);
  EXPECT_EQ(ops["LinearForward 16x48"].calls, layers * kSteps);  // q, k, v
  EXPECT_EQ(ops["LinearBackwardThroughGelu 64x16"].calls, layers * kSteps);
  EXPECT_EQ(ops.count("LinearForward"), 0u) << "linear ops by shape";
  EXPECT_EQ(ops.count("GeluForward"), 0u) << "counted inside its fused op";
}

INSTANTIATE_TEST_SUITE_P(Precisions, ProfilingBackendTest,
                         ::testing::Values(DType::kF32, DType::kBF16));

TEST(ProfilingBackendTimingTest, DisabledOrResetItHoldsNothing) {
  ProfilingBackend profiled(Cpu(DType::kF32));
  Train(profiled, GptConfig{1, 1, 8, 4, 8}, 1);
  EXPECT_TRUE(profiled.Profile().empty());
  profiled.set_enabled(true);
  Train(profiled, GptConfig{1, 1, 8, 4, 8}, 1);
  EXPECT_FALSE(profiled.Profile().empty());
  profiled.Reset();
  EXPECT_TRUE(profiled.Profile().empty());
}

// A backend whose Synchronize fails once, on its `fail_at`-th call.
class FailingSync : public ProfilingBackend {
 public:
  FailingSync(std::unique_ptr<Backend> inner, int fail_at)
      : ProfilingBackend(std::move(inner)), fail_at_(fail_at) {}
  absl::Status Synchronize() override {
    ProfilingBackend::Synchronize().IgnoreError();
    return ++calls_ == fail_at_ ? absl::InternalError("device fault")
                                : absl::OkStatus();
  }

 private:
  int fail_at_;
  int calls_ = 0;
};

TEST(ProfilingBackendTimingTest, KeepsAnErrorItsWaitsTookForSynchronize) {
  ProfilingBackend profiled(
      std::make_unique<FailingSync>(Cpu(DType::kF32), /*fail_at=*/2));
  profiled.set_enabled(true);
  std::vector<float> x(16, 1.f);
  profiled.Fill(x.data(), 16, 2.f);  // waits before and after: the 2nd fails
  profiled.Scale(x.data(), 16, 0.5f);
  const absl::Status first = profiled.Synchronize();
  EXPECT_EQ(first.code(), absl::StatusCode::kInternal) << first;
  EXPECT_EQ(first.message(), "device fault");
  EXPECT_TRUE(profiled.Synchronize().ok()) << "reported once";
  EXPECT_EQ(x[0], 1.f);
}

}  // namespace
}  // namespace trainyard::engine
