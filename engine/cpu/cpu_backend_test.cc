// CPU backend ops against double-precision references: forwards compared
// directly, backwards against central finite differences of the reference
// forward. The references run in double, so the differences carry no fp32
// cancellation noise (h = 1e-4 on functions that are linear or smooth
// gives truncation errors below 1e-8); the tolerance only has to absorb the
// fp32 rounding of the op itself, about 1e-6 relative for these sizes, hence
// 1e-4 absolute on values of order one.
#include "engine/cpu/cpu_backend.h"

#include <cmath>
#include <functional>
#include <vector>

#include "engine/core/rng.h"
#include "engine/cpu/reference_ops.h"
#include "engine/cpu/test_inputs.h"
#include "gtest/gtest.h"

namespace trainyard::engine {
namespace {

using reference::FiniteDifferences;

constexpr double kTol = 1e-4;

std::unique_ptr<CpuBackend> MakeBackend(int threads) {
  CpuBackendOptions o;
  o.threads = threads;
  return *CpuBackend::Create(o);
}

std::vector<double> ToDouble(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

void ExpectNear(const std::vector<float>& got, const std::vector<double>& want,
                double tol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i])))
        << what << "[" << i << "]";
  }
}

class CpuOpsTest : public ::testing::TestWithParam<int> {
 protected:
  std::unique_ptr<CpuBackend> backend_ = MakeBackend(GetParam());
};

constexpr int64_t B = 5, I = 37, O = 19;

// Reference linear layer and the scalar L = sum(out * r) whose gradient with
// respect to out is r: the backward pass gets dout = r.
double LinearLoss(const std::vector<double>& x, const std::vector<double>& w,
                  const std::vector<double>& bias,
                  const std::vector<float>& r) {
  double loss = 0;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t o = 0; o < O; ++o) {
      double out = bias[o];
      for (int64_t i = 0; i < I; ++i) out += x[b * I + i] * w[o * I + i];
      loss += out * r[b * O + o];
    }
  }
  return loss;
}

TEST_P(CpuOpsTest, LinearForwardMatchesReference) {
  const auto x = Random(B * I, 1), w = Random(O * I, 2), bias = Random(O, 3);
  std::vector<float> out(B * O);
  backend_->LinearForward(out.data(), x.data(), w.data(), bias.data(), B, I, O);
  std::vector<double> want(B * O);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t o = 0; o < O; ++o) {
      double s = bias[o];
      for (int64_t i = 0; i < I; ++i) s += double{x[b * I + i]} * w[o * I + i];
      want[b * O + o] = s;
    }
  }
  ExpectNear(out, want, kTol, "out");
}

TEST_P(CpuOpsTest, LinearBackwardMatchesFiniteDifferences) {
  const auto x = Random(B * I, 1), w = Random(O * I, 2), bias = Random(O, 3);
  const auto r = Random(B * O, 4);
  std::vector<float> dx(B * I), dw(O * I, 0.f), db(O, 0.f);
  backend_->LinearBackward(dx.data(), dw.data(), db.data(), r.data(), x.data(),
                           w.data(), B, I, O);
  const auto xd = ToDouble(x), wd = ToDouble(w), bd = ToDouble(bias);
  ExpectNear(dx,
             FiniteDifferences(
                 xd, [&](const auto& v) { return LinearLoss(v, wd, bd, r); }),
             kTol, "dinp");
  ExpectNear(dw,
             FiniteDifferences(
                 wd, [&](const auto& v) { return LinearLoss(xd, v, bd, r); }),
             kTol, "dweight");
  ExpectNear(db,
             FiniteDifferences(
                 bd, [&](const auto& v) { return LinearLoss(xd, wd, v, r); }),
             kTol, "dbias");
}

TEST_P(CpuOpsTest, LinearBackwardAccumulatesParameterGradients) {
  const auto x = Random(B * I, 1), w = Random(O * I, 2), r = Random(B * O, 4);
  std::vector<float> dx(B * I, 99.f), dw(O * I, 0.f), db(O, 0.f);
  backend_->LinearBackward(dx.data(), dw.data(), db.data(), r.data(), x.data(),
                           w.data(), B, I, O);
  const auto dx1 = dx, dw1 = dw, db1 = db;
  backend_->LinearBackward(dx.data(), dw.data(), db.data(), r.data(), x.data(),
                           w.data(), B, I, O);
  EXPECT_EQ(dx, dx1);  // overwritten, not accumulated
  // Accumulated: the second pass adds its terms one by one onto the first
  // result, so equality holds up to fp32 rounding of ~B additions.
  for (size_t i = 0; i < dw.size(); ++i) {
    ASSERT_NEAR(dw[i], 2 * dw1[i], 1e-6 * (1 + std::abs(dw1[i])));
  }
  for (size_t i = 0; i < db.size(); ++i) {
    ASSERT_NEAR(db[i], 2 * db1[i], 1e-6 * (1 + std::abs(db1[i])));
  }
  // The first layer needs no input gradient.
  backend_->LinearBackward(nullptr, dw.data(), nullptr, r.data(), x.data(),
                           w.data(), B, I, O);
}

TEST_P(CpuOpsTest, ReluForwardAndBackward) {
  // Values at least 0.01 from the kink, so +-h never crosses it.
  auto x = Random(1000, 5);
  for (float& v : x) v = v >= 0 ? v + 0.01f : v - 0.01f;
  const auto r = Random(1000, 6);
  std::vector<float> out(x.size()), dx(x.size());
  backend_->ReluForward(out.data(), x.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(out[i], std::max(x[i], 0.f));
  backend_->ReluBackward(dx.data(), r.data(), out.data(), x.size());
  auto loss = [&](const std::vector<double>& v) {
    double s = 0;
    for (size_t i = 0; i < v.size(); ++i) s += std::max(v[i], 0.0) * r[i];
    return s;
  };
  ExpectNear(dx, FiniteDifferences(ToDouble(x), loss), kTol, "dx");
  // In place, as the MLP uses it.
  std::vector<float> inplace = r;
  backend_->ReluBackward(inplace.data(), inplace.data(), out.data(), x.size());
  EXPECT_EQ(inplace, dx);
}

constexpr int64_t kBatch = 6, kClasses = 7;

double CrossEntropyRef(const std::vector<double>& logits,
                       const std::vector<int32_t>& t, int64_t row) {
  const double* x = logits.data() + row * kClasses;
  double max = x[0], sum = 0;
  for (int64_t c = 1; c < kClasses; ++c) max = std::max(max, x[c]);
  for (int64_t c = 0; c < kClasses; ++c) sum += std::exp(x[c] - max);
  return std::log(sum) - (x[t[row]] - max);
}

TEST_P(CpuOpsTest, SoftmaxCrossEntropyMatchesReference) {
  const auto logits = Random(kBatch * kClasses, 7, -4, 4);
  const std::vector<int32_t> targets = {0, 6, 3, 3, 1, 5};
  std::vector<float> losses(kBatch);
  backend_->SoftmaxCrossEntropyForward(losses.data(), nullptr, nullptr,
                                       logits.data(), targets.data(), kBatch,
                                       kClasses);
  const auto ld = ToDouble(logits);
  std::vector<double> want_losses(kBatch);
  for (int64_t b = 0; b < kBatch; ++b)
    want_losses[b] = CrossEntropyRef(ld, targets, b);
  ExpectNear(losses, want_losses, kTol, "losses");
  const float scale = 0.25f;
  std::vector<float> dlogits(kBatch * kClasses);
  backend_->SoftmaxCrossEntropyBackward(dlogits.data(), logits.data(), nullptr,
                                        targets.data(), scale, kBatch,
                                        kClasses);
  // Each gradient row sums to zero (softmax sums to one, minus the one-hot).
  for (int64_t b = 0; b < kBatch; ++b) {
    double row_sum = 0;
    for (int64_t c = 0; c < kClasses; ++c) row_sum += dlogits[b * kClasses + c];
    EXPECT_NEAR(row_sum, 0.0, 1e-6);
  }
  // In place (the models' use: the gradient takes the logits' memory) is
  // bitwise the same.
  std::vector<float> in_place = logits;
  backend_->SoftmaxCrossEntropyBackward(in_place.data(), in_place.data(),
                                        nullptr, targets.data(), scale, kBatch,
                                        kClasses);
  EXPECT_EQ(in_place, dlogits);
  ExpectNear(dlogits,
             FiniteDifferences(ld,
                               [&](const auto& v) {
                                 double s = 0;
                                 for (int64_t b = 0; b < kBatch; ++b)
                                   s += CrossEntropyRef(v, targets, b);
                                 return scale * s;
                               }),
             kTol, "dlogits");
}

// The forward's log-sum-exp, and the backward taking the softmax from it
// instead of a pass over the logits: the same gradient within rounding.
TEST_P(CpuOpsTest, SoftmaxCrossEntropyBackwardFromTheForwardsLse) {
  const auto logits = Random(kBatch * kClasses, 9, -4, 4);
  const std::vector<int32_t> targets = {1, 6, 0, 3, 2, 5};
  std::vector<float> losses(kBatch), lse(kBatch, -7.f);
  backend_->SoftmaxCrossEntropyForward(losses.data(), nullptr, lse.data(),
                                       logits.data(), targets.data(), kBatch,
                                       kClasses);
  const auto ld = ToDouble(logits);
  std::vector<double> want_lse(kBatch);
  for (int64_t b = 0; b < kBatch; ++b) {
    double sum = 0;
    for (int64_t c = 0; c < kClasses; ++c)
      sum += std::exp(ld[b * kClasses + c]);
    want_lse[b] = std::log(sum);
  }
  ExpectNear(lse, want_lse, kTol, "lse");
  const float scale = 0.5f;
  std::vector<float> recomputed(kBatch * kClasses), from_lse = logits;
  backend_->SoftmaxCrossEntropyBackward(recomputed.data(), logits.data(),
                                        nullptr, targets.data(), scale, kBatch,
                                        kClasses);
  backend_->SoftmaxCrossEntropyBackward(from_lse.data(), from_lse.data(),
                                        lse.data(), targets.data(), scale,
                                        kBatch, kClasses);
  ExpectNear(from_lse, ToDouble(recomputed), kTol, "dlogits from lse");
}

TEST_P(CpuOpsTest, SoftmaxCrossEntropyIsStableForHugeLogits) {
  const std::vector<float> logits = {1000.f, -1000.f, 0.f};
  const std::vector<int32_t> target = {1};
  std::vector<float> loss(1);
  backend_->SoftmaxCrossEntropyForward(loss.data(), nullptr, nullptr,
                                       logits.data(), target.data(), 1, 3);
  EXPECT_TRUE(std::isfinite(loss[0]));
  EXPECT_FLOAT_EQ(loss[0], 2000.f);
  std::vector<float> d(3);
  backend_->SoftmaxCrossEntropyBackward(d.data(), logits.data(), nullptr,
                                        target.data(), 1.f, 1, 3);
  EXPECT_EQ(d, (std::vector<float>{1.f, -1.f, 0.f}));
}

TEST_P(CpuOpsTest, SoftmaxCrossEntropyOfNanLogitsIsNan) {
  // A diverged model must show a NaN loss, never a finite one.
  const std::vector<float> logits = {0.f, std::nanf(""), 1.f};
  const std::vector<int32_t> target = {0};
  std::vector<float> loss(1);
  backend_->SoftmaxCrossEntropyForward(loss.data(), nullptr, nullptr,
                                       logits.data(), target.data(), 1, 3);
  EXPECT_TRUE(std::isnan(loss[0]));
}

TEST_P(CpuOpsTest, SumSquaresIsExactishAndThreadIndependent) {
  const auto x = Random(100'003, 8);
  double want = 0;
  for (float v : x) want += double{v} * v;
  const double got = backend_->SumSquares(x.data(), x.size());
  EXPECT_NEAR(got, want, 1e-9 * want);
  EXPECT_EQ(got, MakeBackend(1)->SumSquares(x.data(), x.size()));
}

TEST_P(CpuOpsTest, ElementwiseOpsOnLargeBuffers) {
  std::vector<float> x(100'000, 2.f);
  backend_->Scale(x.data(), x.size(), 1.5f);
  EXPECT_EQ(x, std::vector<float>(x.size(), 3.f));
  backend_->Fill(x.data(), x.size(), -1.f);
  EXPECT_EQ(x, std::vector<float>(x.size(), -1.f));
}

INSTANTIATE_TEST_SUITE_P(Threads, CpuOpsTest, ::testing::Values(1, 3));

TEST(CpuBackendTest, AdamWMatchesTheFormula) {
  auto backend = MakeBackend(1);
  std::vector<float> p = {1.0f, -2.0f}, g = {0.5f, 0.1f}, m = {0.1f, 0.0f},
                     v = {0.01f, 0.0f};
  AdamWUpdate u;
  u.lr = 0.1f;
  u.beta1 = 0.9f;
  u.beta2 = 0.99f;
  u.eps = 1e-8f;
  u.weight_decay = 0.5f;
  u.grad_scale = 0.5f;
  u.bias_correction1 = 1 - 0.9f * 0.9f;  // t = 2
  u.bias_correction2 = 1 - 0.99f * 0.99f;
  backend->AdamW(p.data(), g.data(), m.data(), v.data(), 2, u);
  // Element 0 by hand: g' = 0.25; m = 0.09 + 0.025 = 0.115;
  // v = 0.0099 + 0.000625 = 0.010525; m_hat = 0.115 / 0.19;
  // v_hat = 0.010525 / 0.0199; p = 1 - 0.1 * (m_hat / sqrt(v_hat) + 0.5).
  const double m_hat = 0.115 / 0.19, v_hat = 0.010525 / 0.0199;
  EXPECT_NEAR(m[0], 0.115, 1e-7);
  EXPECT_NEAR(v[0], 0.010525, 1e-8);
  EXPECT_NEAR(p[0], 1 - 0.1 * (m_hat / std::sqrt(v_hat) + 0.5), 1e-6);
}

TEST(CpuBackendTest, AllocationIsZeroedCountedAndLimited) {
  CpuBackendOptions o;
  o.memory_limit_bytes = 1000;
  auto backend = *CpuBackend::Create(o);
  {
    auto buf = backend->Allocate(400);
    ASSERT_TRUE(buf.ok());
    for (int i = 0; i < 100; ++i) ASSERT_EQ((*buf)->f32()[i], 0.f);
    EXPECT_EQ(backend->Allocate(700).status().code(),
              absl::StatusCode::kResourceExhausted);
  }
  EXPECT_TRUE(backend->Allocate(900).ok());  // the 400 came back
  EXPECT_EQ(backend->peak_allocated_bytes(), 900);
}

TEST(CpuBackendTest, RejectsBadThreadCounts) {
  for (int t : {0, -1, 5000}) {
    CpuBackendOptions o;
    o.threads = t;
    EXPECT_EQ(CpuBackend::Create(o).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace trainyard::engine
