// The GPT ops of the CPU backend (embedding, LayerNorm, GELU, attention,
// add) against the double-precision references in reference_ops.h:
// forwards compared directly, backwards against central finite differences
// of the reference forward of L = sum(out * r), whose output gradient is r.
// Also: every op gives bitwise the same result for 1 and 3 threads.
#include <cmath>
#include <functional>
#include <vector>

#include "engine/core/rng.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/reference_ops.h"
#include "engine/cpu/test_inputs.h"
#include "gtest/gtest.h"

namespace trainyard::engine {
namespace {

using reference::FiniteDifferences;
using reference::Vec;

constexpr double kTol = 2e-4;

Vec ToDouble(const std::vector<float>& v) { return Vec(v.begin(), v.end()); }

std::unique_ptr<CpuBackend> MakeBackend(int threads) {
  CpuBackendOptions o;
  o.threads = threads;
  return *CpuBackend::Create(o);
}

double Dot(const Vec& a, const std::vector<float>& r) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * r[i];
  return s;
}

void ExpectNear(const std::vector<float>& got, const Vec& want, double tol,
                const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i])))
        << what << "[" << i << "]";
  }
}

class GptOpsTest : public ::testing::TestWithParam<int> {
 protected:
  std::unique_ptr<CpuBackend> backend_ = MakeBackend(GetParam());
};

TEST_P(GptOpsTest, EmbeddingForwardAndBackward) {
  constexpr int64_t B = 2, T = 4, C = 5, V = 7;
  const std::vector<int32_t> tokens = {3, 1, 3, 6, 0, 3, 6, 2};  // repeats
  const auto wte = Random(V * C, 1), wpe = Random(T * C, 2);
  const auto r = Random(B * T * C, 3);
  std::vector<float> out(B * T * C);
  backend_->EmbeddingForward(out.data(), tokens.data(), wte.data(), wpe.data(),
                             B, T, C);
  const Vec wted = ToDouble(wte), wped = ToDouble(wpe);
  ExpectNear(out, reference::Embedding(tokens, wted, wped, B, T, C), kTol,
             "out");
  std::vector<float> dwte(V * C, 0.f), dwpe(T * C, 0.f);
  backend_->EmbeddingBackward(dwte.data(), dwpe.data(), r.data(), tokens.data(),
                              B, T, C);
  ExpectNear(dwte,
             FiniteDifferences(wted,
                               [&](const Vec& v) {
                                 return Dot(reference::Embedding(tokens, v,
                                                                 wped, B, T, C),
                                            r);
                               }),
             kTol, "dwte");
  ExpectNear(dwpe,
             FiniteDifferences(wped,
                               [&](const Vec& v) {
                                 return Dot(reference::Embedding(tokens, wted,
                                                                 v, B, T, C),
                                            r);
                               }),
             kTol, "dwpe");
}

TEST_P(GptOpsTest, LayerNormForwardAndBackward) {
  constexpr int64_t R = 6, C = 9;
  const auto x = Random(R * C, 4, -2, 3), w = Random(C, 5), b = Random(C, 6);
  const auto r = Random(R * C, 7);
  std::vector<float> out(R * C), mean(R), rstd(R);
  backend_->LayerNormForward(out.data(), mean.data(), rstd.data(), x.data(),
                             w.data(), b.data(), R, C);
  const Vec xd = ToDouble(x), wd = ToDouble(w), bd = ToDouble(b);
  ExpectNear(out, reference::LayerNorm(xd, wd, bd, R, C), kTol, "out");
  // The input gradient accumulates onto what is there; its column sums
  // (of dinp as left, 0.5 included) onto theirs.
  std::vector<float> dx(R * C, 0.5f), dw(C, 0.f), db(C, 0.f), sums(C, 1.f);
  backend_->LayerNormBackward(dx.data(), dw.data(), db.data(), sums.data(),
                              r.data(), x.data(), w.data(), mean.data(),
                              rstd.data(), R, C);
  for (int64_t c = 0; c < C; ++c) {
    double want = 1.0;
    for (int64_t i = 0; i < R; ++i) want += dx[i * C + c];
    EXPECT_NEAR(sums[c], want, 1e-5) << "dinp's column sum " << c;
  }
  for (float& v : dx) v -= 0.5f;
  ExpectNear(dx,
             FiniteDifferences(xd,
                               [&](const Vec& v) {
                                 return Dot(
                                     reference::LayerNorm(v, wd, bd, R, C), r);
                               }),
             kTol, "dinp");
  ExpectNear(dw,
             FiniteDifferences(wd,
                               [&](const Vec& v) {
                                 return Dot(
                                     reference::LayerNorm(xd, v, bd, R, C), r);
                               }),
             kTol, "dweight");
  ExpectNear(db,
             FiniteDifferences(bd,
                               [&](const Vec& v) {
                                 return Dot(
                                     reference::LayerNorm(xd, wd, v, R, C), r);
                               }),
             kTol, "dbias");
}

TEST_P(GptOpsTest, GeluForwardAndBackward) {
  const auto x = Random(300, 8, -5, 5), r = Random(300, 9);
  std::vector<float> out(x.size()), dx(x.size());
  backend_->GeluForward(out.data(), x.data(), x.size());
  const Vec xd = ToDouble(x);
  ExpectNear(out, reference::Gelu(xd), kTol, "out");
  backend_->GeluBackward(dx.data(), x.data(), r.data(), x.size());
  ExpectNear(dx,
             FiniteDifferences(
                 xd, [&](const Vec& v) { return Dot(reference::Gelu(v), r); }),
             kTol, "dx");
  std::vector<float> inplace = r;  // dx == dout, as the model runs it
  backend_->GeluBackward(inplace.data(), x.data(), inplace.data(), x.size());
  EXPECT_EQ(inplace, dx);
}

TEST_P(GptOpsTest, AttentionForwardAndBackward) {
  constexpr int64_t B = 2, T = 5, C = 6, NH = 2;
  const auto qkv = Random(B * T * 3 * C, 10, -2, 2);
  const auto r = Random(B * T * C, 11);
  std::vector<float> out(B * T * C), att(B * NH * T * T);
  backend_->AttentionForward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  const Vec qd = ToDouble(qkv);
  ExpectNear(out, reference::Attention(qd, B, T, C, NH), kTol, "out");
  for (int64_t i = 0; i < B * NH; ++i) {  // causal rows summing to 1
    for (int64_t t = 0; t < T; ++t) {
      double sum = 0;
      for (int64_t j = 0; j < T; ++j) {
        const float p = att[(i * T + t) * T + j];
        if (j > t) {
          ASSERT_EQ(p, 0.f);
        }
        sum += p;
      }
      ASSERT_NEAR(sum, 1.0, 1e-6);
    }
  }
  std::vector<float> dqkv(qkv.size(), 7.f), scratch(B * NH * T * T);
  backend_->AttentionBackward(dqkv.data(), scratch.data(), r.data(), out.data(),
                              qkv.data(), att.data(), B, T, C, NH);
  ExpectNear(dqkv,
             FiniteDifferences(qd,
                               [&](const Vec& v) {
                                 return Dot(
                                     reference::Attention(v, B, T, C, NH), r);
                               }),
             kTol, "dqkv");
}

TEST_P(GptOpsTest, AddRunsInPlace) {
  const auto a = Random(40'000, 12), b = Random(40'000, 13);
  std::vector<float> out = a;
  backend_->Add(out.data(), out.data(), b.data(), a.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(out[i], a[i] + b[i]);
}

// The classifier's hits: argmax == target, the first index on ties.
TEST_P(GptOpsTest, ClassifierHitsTakeTheFirstOfTies) {
  const std::vector<float> logits = {0, 2, 1, 5, 5, 0, -1, -2, -3};
  std::vector<float> losses(3);
  std::vector<int32_t> hits(3);
  backend_->SoftmaxCrossEntropyForward(
      losses.data(), hits.data(), nullptr, logits.data(),
      std::vector<int32_t>{1, 0, 0}.data(), 3, 3);
  EXPECT_EQ(hits, (std::vector<int32_t>{1, 1, 1}));
  backend_->SoftmaxCrossEntropyForward(
      losses.data(), hits.data(), nullptr, logits.data(),
      std::vector<int32_t>{2, 1, 0}.data(), 3, 3);
  EXPECT_EQ(hits, (std::vector<int32_t>{0, 0, 1}));
}

INSTANTIATE_TEST_SUITE_P(Threads, GptOpsTest, ::testing::Values(1, 3));

// Sizes large enough that every op splits its work across threads.
TEST(GptOpsDeterminismTest, ResultsDoNotDependOnTheThreadCount) {
  constexpr int64_t B = 3, T = 33, C = 64, NH = 4, V = 50;
  auto run = [&](int threads) {
    auto be = MakeBackend(threads);
    const auto qkv = Random(B * T * 3 * C, 20), x = Random(B * T * C, 21);
    const auto w = Random(C, 22), b = Random(C, 23), r = Random(B * T * C, 24);
    std::vector<int32_t> tokens(B * T);
    for (int64_t i = 0; i < B * T; ++i) tokens[i] = (i * 7) % V;
    std::vector<float> out(B * T * C), att(B * NH * T * T), dqkv(qkv.size());
    std::vector<float> scratch(att.size()), mean(B * T), rstd(B * T);
    std::vector<float> dx(B * T * C), dw(C), db(C), dwte(V * C), dwpe(T * C);
    std::vector<float> all;
    be->AttentionForward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    be->AttentionBackward(dqkv.data(), scratch.data(), r.data(), out.data(),
                          qkv.data(), att.data(), B, T, C, NH);
    all.insert(all.end(), out.begin(), out.end());
    all.insert(all.end(), dqkv.begin(), dqkv.end());
    be->LayerNormForward(out.data(), mean.data(), rstd.data(), x.data(),
                         w.data(), b.data(), B * T, C);
    std::vector<float> sums(C);
    be->LayerNormBackward(dx.data(), dw.data(), db.data(), sums.data(),
                          r.data(), x.data(), w.data(), mean.data(),
                          rstd.data(), B * T, C);
    for (const auto* v : {&out, &dx, &dw, &db, &sums}) {
      all.insert(all.end(), v->begin(), v->end());
    }
    be->EmbeddingBackward(dwte.data(), dwpe.data(), r.data(), tokens.data(), B,
                          T, C);
    all.insert(all.end(), dwte.begin(), dwte.end());
    all.insert(all.end(), dwpe.begin(), dwpe.end());
    return all;
  };
  const std::vector<float> one = run(1);
  EXPECT_EQ(one, run(2));
  EXPECT_EQ(one, run(3));
}

}  // namespace
}  // namespace trainyard::engine
