#include "engine/cpu/gemm.h"

#include <tuple>
#include <vector>

#include "engine/core/rng.h"
#include "engine/cpu/test_inputs.h"
#include "gtest/gtest.h"

namespace trainyard::engine {
namespace {

struct Problem {
  bool ta, tb;
  int64_t m, n, k;
};

GemmArgs Args(const Problem& p, const std::vector<float>& a,
              const std::vector<float>& b, std::vector<float>& c) {
  GemmArgs g;
  g.trans_a = p.ta;
  g.trans_b = p.tb;
  g.m = p.m;
  g.n = p.n;
  g.k = p.k;
  g.a = a.data();
  g.lda = p.ta ? p.m : p.k;
  g.b = b.data();
  g.ldb = p.tb ? p.k : p.n;
  g.c = c.data();
  g.ldc = p.n;
  return g;
}

class GemmTest : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

// The blocked GEMM sums each element's k terms in ascending order, exactly
// as the triple loop does, so the two agree bit for bit (not within a
// tolerance) for every shape, edge tile and thread count.
TEST_P(GemmTest, BitwiseEqualToTripleLoop) {
  const auto [ta, tb] = GetParam();
  const Problem shapes[] = {{ta, tb, 1, 1, 1},    {ta, tb, 3, 5, 7},
                            {ta, tb, 4, 8, 256},  {ta, tb, 5, 9, 257},
                            {ta, tb, 67, 33, 17}, {ta, tb, 130, 10, 600},
                            {ta, tb, 9, 70, 300}};
  for (const Problem& p : shapes) {
    const auto a = Random(p.m * p.k, 1), b = Random(p.k * p.n, 2);
    std::vector<float> want = Random(p.m * p.n, 3);  // C accumulates
    GemmReference(Args(p, a, b, want));
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      std::vector<float> got = Random(p.m * p.n, 3);
      Gemm(Args(p, a, b, got), &pool);
      ASSERT_EQ(got, want) << "m=" << p.m << " n=" << p.n << " k=" << p.k
                           << " threads=" << threads;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTransposes, GemmTest,
                         ::testing::Combine(::testing::Bool(),
                                            ::testing::Bool()));

TEST(GemmTest, MatchesDoublePrecisionProduct) {
  const Problem p{false, true, 16, 24, 100};
  const auto a = Random(p.m * p.k, 4), b = Random(p.k * p.n, 5);
  std::vector<float> c(p.m * p.n, 0.f);
  Gemm(Args(p, a, b, c), nullptr);
  for (int64_t i = 0; i < p.m; ++i) {
    for (int64_t j = 0; j < p.n; ++j) {
      double want = 0;
      for (int64_t k = 0; k < p.k; ++k) {
        want += static_cast<double>(a[i * p.k + k]) * b[j * p.k + k];
      }
      // 100 fp32 products of magnitude <= 1: rounding stays far below 1e-4.
      EXPECT_NEAR(c[i * p.n + j], want, 1e-4);
    }
  }
}

TEST(GemmTest, EmptyDimensionsLeaveCUntouched) {
  std::vector<float> a(4, 1.f), b(4, 1.f), c(4, 7.f);
  GemmArgs g = Args({false, false, 2, 2, 0}, a, b, c);
  Gemm(g, nullptr);
  EXPECT_EQ(c, std::vector<float>(4, 7.f));
}

}  // namespace
}  // namespace trainyard::engine
