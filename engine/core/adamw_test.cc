#include "engine/core/adamw.h"

#include <cmath>
#include <memory>
#include <vector>

#include "engine/cpu/cpu_backend.h"
#include "gtest/gtest.h"

namespace trainyard::engine {
namespace {

// One weight [2] and one bias [1] in plain host memory (the CPU backend's
// device memory is host memory).
class AdamWTest : public ::testing::Test {
 protected:
  void SetUp() override {
    backend_ = *CpuBackend::Create({});
    params_.push_back({"w", {2}, w_, gw_, false});
    params_.push_back({"b", {1}, b_, gb_, true});
  }
  std::unique_ptr<CpuBackend> backend_;
  float w_[2] = {1.0f, -1.0f}, gw_[2] = {0.3f, -0.4f};
  float b_[1] = {0.5f}, gb_[1] = {0.0f};
  std::vector<Parameter> params_;
};

TEST_F(AdamWTest, FirstStepMatchesHandComputation) {
  AdamWConfig c;
  c.weight_decay = 0.1;
  c.grad_clip = 0;  // off
  auto opt = *AdamW::Create(c, &params_, backend_.get());
  absl::StatusOr<OptimizerStepStats> s = opt->Step(0.01);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_NEAR(s->grad_norm, 0.5, 1e-7);  // sqrt(0.09 + 0.16)
  EXPECT_EQ(s->clip_scale, 1.0);
  // t = 1: m_hat = g, v_hat = g^2, so the Adam direction is sign(g) up to
  // eps: w -= lr * (g / (|g| + eps) + wd * w).
  EXPECT_NEAR(w_[0], 1.0 - 0.01 * (1.0 + 0.1 * 1.0), 1e-6);
  EXPECT_NEAR(w_[1], -1.0 - 0.01 * (-1.0 + 0.1 * -1.0), 1e-6);
  // The bias has a zero gradient and no decay: it does not move.
  EXPECT_EQ(b_[0], 0.5f);
  EXPECT_EQ(opt->step_count(), 1);
}

TEST_F(AdamWTest, SecondStepUsesBiasCorrection) {
  AdamWConfig c;
  c.beta1 = 0.9;
  c.beta2 = 0.999;
  c.grad_clip = 0;
  auto opt = *AdamW::Create(c, &params_, backend_.get());
  ASSERT_TRUE(opt->Step(0.01).ok());
  const double w1 = w_[0];
  gw_[0] = 0.1f;
  ASSERT_TRUE(opt->Step(0.01).ok());
  const double m = 0.9 * (0.1 * 0.3) + 0.1 * 0.1;
  const double v = 0.999 * (0.001 * 0.09) + 0.001 * 0.01;
  const double m_hat = m / (1 - 0.81), v_hat = v / (1 - 0.999 * 0.999);
  EXPECT_NEAR(w_[0], w1 - 0.01 * m_hat / (std::sqrt(v_hat) + 1e-8), 1e-6);
}

TEST_F(AdamWTest, DecaysBiasesOnlyWhenConfigured) {
  AdamWConfig c;
  c.weight_decay = 0.5;
  c.decay_biases = true;
  auto opt = *AdamW::Create(c, &params_, backend_.get());
  ASSERT_TRUE(opt->Step(0.1).ok());
  EXPECT_NEAR(b_[0], 0.5 - 0.1 * 0.5 * 0.5, 1e-7);
}

TEST_F(AdamWTest, ClipsByGlobalNorm) {
  AdamWConfig c;
  c.grad_clip = 0.25;  // norm is 0.5, so gradients are halved
  auto opt = *AdamW::Create(c, &params_, backend_.get());
  absl::StatusOr<OptimizerStepStats> s = opt->Step(0.01);
  ASSERT_TRUE(s.ok());
  // The gradients are fp32 (0.3f, -0.4f), so the norm is 0.5 to ~1e-8.
  EXPECT_NEAR(s->clip_scale, 0.25 / (0.5 + 1e-6), 1e-7);
  const auto moments = opt->moments();
  ASSERT_EQ(moments.size(), 4u);
  EXPECT_EQ(moments[0].name, "adamw.m.w");
  EXPECT_EQ(moments[3].name, "adamw.v.b");
  // m = (1 - beta1) * clipped g
  EXPECT_NEAR(moments[0].data[0], 0.1 * 0.3 * 0.25 / 0.5, 1e-6);
}

TEST(ClipScaleTest, OnlyShrinks) {
  EXPECT_EQ(ClipScale(0.5, 1.0), 1.0);
  EXPECT_NEAR(ClipScale(4.0, 1.0), 0.25, 1e-6);
  EXPECT_EQ(ClipScale(100.0, 0.0), 1.0);  // off
}

TEST_F(AdamWTest, NonFiniteGradientIsAnErrorAndChangesNothing) {
  auto opt = *AdamW::Create({}, &params_, backend_.get());
  gw_[1] = std::nanf("");
  absl::StatusOr<OptimizerStepStats> s = opt->Step(0.01);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.status().message().find("diverged"), std::string::npos);
  EXPECT_EQ(w_[0], 1.0f);
  EXPECT_EQ(opt->step_count(), 0);
}

TEST(AdamWCreateTest, RejectsBadHyperparameters) {
  auto backend = *CpuBackend::Create({});
  std::vector<Parameter> none;
  AdamWConfig c;
  c.beta1 = 1.0;
  EXPECT_EQ(AdamW::Create(c, &none, backend.get()).status().code(),
            absl::StatusCode::kInvalidArgument);
  c = {};
  c.eps = 0;
  EXPECT_FALSE(AdamW::Create(c, &none, backend.get()).ok());
}

}  // namespace
}  // namespace trainyard::engine
