#include "engine/core/rng.h"

#include <vector>

#include "gtest/gtest.h"

namespace trainyard::engine {
namespace {

TEST(RngTest, SameSeedSameStreamSameNumbers) {
  Rng a(42), b(42), c(43), d(42, 1);
  bool differs_seed = false, differs_stream = false;
  for (int i = 0; i < 100; ++i) {
    const uint64_t x = a.NextU64();
    EXPECT_EQ(x, b.NextU64());
    differs_seed |= x != c.NextU64();
    differs_stream |= x != d.NextU64();
  }
  EXPECT_TRUE(differs_seed);
  EXPECT_TRUE(differs_stream);
}

// Pins the generator: a change here silently changes every seeded run.
TEST(RngTest, KnownFirstOutputs) {
  Rng rng(0);
  EXPECT_EQ(rng.NextU64(), 18110106563157542208u);
  EXPECT_EQ(rng.NextU64(), 8650457082529208451u);
  Rng streamed(42, 3);
  EXPECT_EQ(streamed.NextU64(), 12319796994123239235u);
}

TEST(RngTest, StateRoundTripsExactly) {
  Rng a(7);
  for (int i = 0; i < 10; ++i) a.NextU64();
  absl::StatusOr<Rng> b = Rng::FromState(a.SerializeState());
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(*b == a);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(a.NextU64(), b->NextU64());
}

TEST(RngTest, RejectsBadState) {
  EXPECT_FALSE(Rng::FromState("abc").ok());
  EXPECT_FALSE(Rng::FromState(std::string(64, 'g')).ok());
  EXPECT_FALSE(Rng::FromState(std::string(64, '0')).ok());  // stuck at zero
}

TEST(RngTest, UniformAndBelowStayInRange) {
  Rng rng(3);
  std::vector<int> counts(10, 0);
  for (int i = 0; i < 100'000; ++i) {
    const float u = rng.Uniform(-2.f, 3.f);
    ASSERT_GE(u, -2.f);
    ASSERT_LT(u, 3.f);
    ++counts[rng.Below(10)];
  }
  for (int c : counts) EXPECT_NEAR(c, 10'000, 500);
}

}  // namespace
}  // namespace trainyard::engine
