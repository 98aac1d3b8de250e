// The MLP's backward pass checked end to end against finite differences of
// its own fp32 forward pass. With h = 1e-3 and a summed loss of order 5, one
// fp32 rounding of the loss (~3e-7) becomes ~1.5e-4 in the difference
// quotient, and the truncation error is ~h^2 = 1e-6; hence a tolerance of
// 1e-3 absolute plus 1% relative. The seed is fixed, and no pre-activation
// sits within h of the ReLU kink for it (a crossing would show as a
// failure, not pass silently).
#include "engine/core/mlp.h"

#include <cmath>
#include <memory>
#include <vector>

#include "engine/cpu/cpu_backend.h"
#include "gtest/gtest.h"

namespace trainyard::engine {
namespace {

class MlpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    backend_ = *CpuBackend::Create({});
    model_ = *MlpModel::Create({6, {5, 4}, 3}, 8, backend_.get());
    Rng rng(11);
    ASSERT_TRUE(model_->InitializeParameters(rng).ok());
    batch_.size = 4;
    batch_.feature_dim = 6;
    for (int i = 0; i < 24; ++i) batch_.features.push_back(rng.Uniform(-1, 1));
    batch_.targets = {0, 2, 1, 2};
  }

  double Loss() { return (*model_->Forward(batch_)).loss_sum; }

  std::unique_ptr<CpuBackend> backend_;
  std::unique_ptr<MlpModel> model_;
  Batch batch_;
};

TEST_F(MlpTest, ParametersAreNamedAndShaped) {
  const auto& p = model_->parameters();
  ASSERT_EQ(p.size(), 6u);
  EXPECT_EQ(p[0].name, "fc0.weight");
  EXPECT_EQ(p[0].shape, (Shape{5, 6}));
  EXPECT_EQ(p[1].name, "fc0.bias");
  EXPECT_TRUE(p[1].is_bias);
  EXPECT_EQ(p[4].shape, (Shape{3, 4}));
  EXPECT_EQ(model_->num_parameters(), 5 * 6 + 5 + 4 * 5 + 4 + 3 * 4 + 3);
}

TEST_F(MlpTest, GradientsMatchFiniteDifferences) {
  model_->ZeroGradients();
  ASSERT_TRUE(model_->Forward(batch_).ok());
  model_->Backward(1.0f);  // gradient of the summed loss
  constexpr float kH = 1e-3f;
  for (const Parameter& p : model_->parameters()) {
    for (int64_t i = 0; i < p.size(); ++i) {
      const float keep = p.value[i];
      p.value[i] = keep + kH;
      const double up = Loss();
      p.value[i] = keep - kH;
      const double down = Loss();
      p.value[i] = keep;
      const double numeric = (up - down) / (2 * kH);
      ASSERT_NEAR(p.grad[i], numeric, 1e-3 + 1e-2 * std::abs(numeric))
          << p.name << "[" << i << "]";
    }
  }
}

TEST_F(MlpTest, BackwardAccumulatesAndZeroGradientsClears) {
  model_->ZeroGradients();
  ASSERT_TRUE(model_->Forward(batch_).ok());
  model_->Backward(0.5f);
  const Parameter& w = model_->parameters()[0];
  const std::vector<float> once(w.grad, w.grad + w.size());
  model_->Backward(0.5f);
  for (int64_t i = 0; i < w.size(); ++i) {
    ASSERT_NEAR(w.grad[i], 2 * once[i], 1e-6 * (1 + std::abs(once[i])));
  }
  model_->ZeroGradients();
  for (const Parameter& p : model_->parameters()) {
    for (int64_t i = 0; i < p.size(); ++i) ASSERT_EQ(p.grad[i], 0.f);
  }
}

TEST_F(MlpTest, CountsCorrectPredictions) {
  absl::StatusOr<ForwardStats> s = model_->Forward(batch_);
  ASSERT_TRUE(s.ok());
  const std::vector<float> probs = model_->LastLogits();
  int64_t correct = 0;
  for (int b = 0; b < 4; ++b) {
    int best = 0;
    for (int c = 1; c < 3; ++c) {
      if (probs[b * 3 + c] > probs[b * 3 + best]) best = c;
    }
    correct += best == batch_.targets[b];
  }
  EXPECT_EQ(s->correct, correct);
  EXPECT_EQ(s->examples, 4);
}

TEST_F(MlpTest, RejectsBatchesThatDoNotFit) {
  Batch b = batch_;
  b.targets[1] = 3;
  EXPECT_EQ(model_->Forward(b).status().code(),
            absl::StatusCode::kInvalidArgument);
  b = batch_;
  b.feature_dim = 5;
  EXPECT_FALSE(model_->Forward(b).ok());
  b = batch_;
  b.features.pop_back();
  EXPECT_FALSE(model_->Forward(b).ok());
  b = batch_;
  b.size = 9;  // over max_batch
  EXPECT_FALSE(model_->Forward(b).ok());
}

TEST(MlpCreateTest, RejectsBadConfigs) {
  auto backend = *CpuBackend::Create({});
  EXPECT_FALSE(MlpModel::Create({0, {4}, 3}, 8, backend.get()).ok());
  EXPECT_FALSE(MlpModel::Create({6, {0}, 3}, 8, backend.get()).ok());
  EXPECT_FALSE(MlpModel::Create({6, {4}, 1}, 8, backend.get()).ok());
  EXPECT_FALSE(MlpModel::Create({6, {4}, 3}, 0, backend.get()).ok());
  EXPECT_TRUE(MlpModel::Create({6, {}, 3}, 8, backend.get()).ok());  // linear
}

}  // namespace
}  // namespace trainyard::engine
